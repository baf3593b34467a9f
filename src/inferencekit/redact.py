"""Secrets never reach disk: the API key's value is scrubbed from every byte inferencekit writes.

The key comes from an environment variable whose *name* is recorded (docs/design.md). Its value is
registered here when read (``api/endpoint.py`` ``read_api_key``); the writers (``rundir.write_bytes``,
the load journal, the gate probe log) pass their bytes through ``scrub``, so a server that echoes the
Authorization header into a 401 body, a key pasted into a URL, or one inside ``--extra-body`` is
written as ``<redacted>`` wherever it would have landed: reply files, errors, logs, records.

A value shorter than ``MIN_SECRET_LEN`` (8) characters is too short to scrub from free text: "EMPTY", the
placeholder vLLM's docs give, would be cut out of every reply that says it. Such a key is scrubbed in its header
form only (``Bearer <key>``: what a server that echoes the Authorization header writes back), which no ordinary
text holds; ``api/endpoint.py`` says so once on stderr when it reads one.

Values the user passes in JSON options (``--extra-body``, ``--chat-template-kwargs``) under a field
whose name reads like a credential (``api_key``, ``Authorization``, ``token``, ``password``…, at any
depth, e.g. ``{"headers": {"Authorization": "Bearer …"}}``) are registered the same way
(``register_fields``): they are still sent, and never written.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MARK", "MIN_SECRET_LEN", "has_secrets", "register", "register_fields", "scrub", "scrub_chunks",
           "scrub_text"]

MARK = "<redacted>"
MIN_SECRET_LEN = 8  # shorter values would scrub ordinary text: only their header form is scrubbed
_SECRETS: dict[bytes, bytes] = {}  # what to replace → what replaces it
# field names that carry credentials (HTTP header names and the usual JSON spellings)
# (the whole name, or its last ``-``/``_`` part: ``hf_token``, ``X-Api-Key``, ``client_secret``; not ``max_tokens``,
# ``tokenizer`` or ``author``)
_SECRET_FIELD = re.compile(r"(^|[-_])(api[-_]?key|apikey|authori[sz]ation|auth|token|secret|password|passwd|"
                           r"credentials?|bearer|cookie|private[-_]?key|session[-_]?id)$", re.IGNORECASE)


def register(value: str | None) -> None:
    """Remember ``value`` (a secret read at start-up) for ``scrub``: everywhere when it has ``MIN_SECRET_LEN``
    characters or more, else in its header form ``Bearer <value>`` only; an empty value is ignored."""
    if not value:
        return
    raw = value.encode("utf-8")
    if len(value) >= MIN_SECRET_LEN:
        _SECRETS[raw] = MARK.encode()
    for scheme in (b"Bearer ", b"bearer "):
        _SECRETS[scheme + raw] = scheme + MARK.encode()


def register_fields(obj: Any, _under_secret: bool = False) -> None:
    """Register every string value of ``obj`` (parsed JSON) that sits under a credential-like field name, at any depth
    (``{"headers": {"X-Api-Key": "…"}}``, ``{"auth": {"user": "…", "pass": "…"}}``). Short values are scrubbed in
    their header form only, as in ``register``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            register_fields(v, _under_secret or bool(_SECRET_FIELD.search(str(k))))
    elif isinstance(obj, list):
        for v in obj:
            register_fields(v, _under_secret)
    elif isinstance(obj, str) and _under_secret:
        register(obj)
        if " " in obj:  # "Bearer <key>": the key alone too, wherever it is echoed without its scheme
            register(obj.split(" ", 1)[1])


def scrub(data: bytes) -> bytes:
    """``data`` with every registered secret replaced by ``MARK`` (the longest first)."""
    if not _SECRETS:
        return data
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s in data:
            data = data.replace(s, _SECRETS[s])
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
