"""Secrets never reach disk: the API key's value is scrubbed from every byte inferencekit writes.

The key comes from an environment variable whose *name* is recorded (docs/design.md). Its value is
registered here when read (``api/endpoint.py`` ``read_api_key``); the writers (``rundir.write_bytes``,
the load journal, the gate probe log) pass their bytes through ``scrub``, so a server that echoes the
Authorization header into a 401 body, a key pasted into a URL, or one inside ``--extra-body`` is
written as ``<redacted>`` wherever it would have landed: reply files, errors, logs, records.
"""

from __future__ import annotations

__all__ = ["MARK", "has_secrets", "register", "scrub", "scrub_chunks", "scrub_text"]

MARK = "<redacted>"
_MIN_LEN = 8  # shorter values are not keys and would scrub ordinary text
_SECRETS: set[bytes] = set()


def register(value: str | None) -> None:
    """Remember ``value`` (a secret read at start-up) for ``scrub``; short or empty values are ignored."""
    if value and len(value) >= _MIN_LEN:
        _SECRETS.add(value.encode("utf-8"))


def scrub(data: bytes) -> bytes:
    """``data`` with every registered secret replaced by ``MARK`` (the longest first)."""
    if not _SECRETS:
        return data
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s in data:
            data = data.replace(s, MARK.encode())
    return data


def scrub_text(text: str) -> str:
    """``scrub`` for a string."""
    if not _SECRETS:
        return text
    return scrub(text.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")


def has_secrets() -> bool:
    """Whether any secret is registered (writers skip the scan when none is)."""
    return bool(_SECRETS)


def scrub_chunks(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Timed chunks with every registered secret scrubbed; a secret split across chunks makes them one chunk
    at the last one's time (its timing is lost, its bytes are not written)."""
    out = [(t, scrub(c)) for t, c in chunks]
    joined = b"".join(c for _, c in out)
    if out and any(s in joined for s in _SECRETS):
        return [(out[-1][0], scrub(joined))]
    return out
