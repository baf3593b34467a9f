"""Reading probe records: grouping, failed probes, and the per-reply figures the live judges share.

A probe record (``shapes.ProbeRecord``) is one line of ``probes/<gate-run>.jsonl`` in a run dir (or the
same dict in memory)::

    {"id": "c3.repeat", "kind": "cache_repeat", "key": "c3", "meta": {...},
     "endpoint": "/v1/chat/completions", "body": {...request as planned...},
     "reply": {...reply-file dict (api/reply.py ReplyFile)...} | None}

``reply`` is None when the probe was never sent. Everything here is pure; the rules (what counts as a
failed probe, how decode speed is taken) follow the seed's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from inferencekit.shapes import ProbeRecord, ReplyFile, generated_text, is_ok

__all__ = ["ERROR_CAP", "Merges", "all_at_once", "by_kind", "decode_tok_s", "fail_note", "failed", "first_divergence",
           "median", "merge_slack", "merged_entries", "ok_reply", "sequence", "streamed_count", "usage_tokens"]

ERROR_CAP = 300  # characters of a failed probe's error kept in its row


def _as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def by_kind(records: Iterable[ProbeRecord]) -> dict[str, list[ProbeRecord]]:
    """Records grouped by their ``kind``, in input order within a kind."""
    groups: dict[str, list[ProbeRecord]] = {}
    for rec in records:
        groups.setdefault(str(rec.get("kind")), []).append(rec)
    return groups


def ok_reply(record: ProbeRecord | None) -> ReplyFile | None:
    """The record's reply when it is usable (``is_ok``), else None."""
    if record is None:
        return None
    reply = record.get("reply")
    return reply if isinstance(reply, dict) and is_ok(reply) else None


def failed(records: Iterable[ProbeRecord]) -> list[dict[str, Any]]:
    """The probes without a usable reply: never sent (reply None), HTTP error or an error recorded.

    Returns:
        ``[{"id", "kind", "key", "status", "error"}, ...]``: ``status`` the HTTP status (None when nothing
        came back), ``error`` at most ``ERROR_CAP`` characters (``"not sent"`` for a probe never sent).
        A failed probe is evidence: every judge reports it, none ignores it.
    """
    rows = []
    for rec in records:
        reply = rec.get("reply")
        if isinstance(reply, dict) and is_ok(reply):
            continue
        if isinstance(reply, dict):
            status, error = reply.get("status"), reply.get("error") or f"HTTP {reply.get('status')}"
        else:
            status, error = None, "not sent"
        rows.append({"id": rec.get("id"), "kind": rec.get("kind"), "key": rec.get("key"), "status": status,
                     "error": str(error)[:ERROR_CAP]})
    return rows


def fail_note(failed_rows: Sequence[dict[str, Any]], what: str = "probe") -> str:
    """One line on failed probes: ``"3 probe(s) failed (HTTP 400 ×2, no response ×1; first error: …)"``."""
    tally: dict[str, int] = {}
    for row in failed_rows:
        label = f"HTTP {row['status']}" if row.get("status") else "no response"
        tally[label] = tally.get(label, 0) + 1
    counts = ", ".join(f"{label} ×{n}" for label, n in sorted(tally.items()))
    first = next((str(r["error"]) for r in failed_rows if r.get("error")), "")
    tail = f"; first error: {first[:160]}" if first else ""
    return f"{len(failed_rows)} {what}(s) failed ({counts}{tail})"


def usage_tokens(reply: ReplyFile) -> int | None:
    """``usage.completion_tokens``, None when the reply carries no usage."""
    usage = reply.get("usage")
    return _as_int(usage.get("completion_tokens")) if isinstance(usage, dict) else None


def streamed_count(reply: ReplyFile) -> tuple[int | None, str | None]:
    """Tokens the stream itself carried: ``(n, "token_ids")``, else ``(n, "logprobs")``, else ``(None, None)``.

    A reply summary without the arrays falls back on its recorded ``n_streamed`` / ``streamed_method``.
    An empty stream counts as none.
    """
    ids, entries = reply.get("token_ids"), reply.get("logprobs")
    if isinstance(ids, list) and ids:
        return len(ids), "token_ids"
    if isinstance(entries, list) and entries:
        return len(entries), "logprobs"
    recorded = _as_int(reply.get("n_streamed"))
    if ids is None and entries is None and recorded and reply.get("streamed_method") in ("token_ids", "logprobs"):
        return recorded, reply["streamed_method"]
    return None, None


def merge_slack(text: str) -> int:
    """Tokens a text's multi-byte characters could hide if the byte tokens of each were streamed as one entry:
    Σ (UTF-8 bytes − 1) over its non-ASCII characters. An upper bound, not evidence that any were merged."""
    return sum(len(c.encode("utf-8")) - 1 for c in text if ord(c) > 127)


class Merges(NamedTuple):
    """Logprob entries shown to carry more than their own token (``merged_entries``).

    ``entries``: how many; each hides at least one token. ``room``: the most tokens they can hide together
    (their extra bytes: every hidden token gave at least one byte)."""

    entries: int
    room: int


def merged_entries(reply: Mapping[str, Any]) -> Merges:
    """Logprob entries whose ``bytes`` run past their own token's, read from the same id in the entry's
    ``top_logprobs``: the own bytes must be a proper suffix of the entry's.

    llama-server holds back a token that ends in a partial UTF-8 character and streams it with the next one
    as one entry, under the later token's id, with both tokens' bytes (observed 3 Dec 2026, b1-0c1e570: an
    entry id 118 with bytes ``[32, 195, 168]`` whose top_logprobs give id 118 the bytes ``[168]``, usage 24,
    23 entries). Such a stream is short of usage by tokens that are proven made. Entries without the fields,
    or whose id is not among their top_logprobs, prove nothing. Never raises on odd types."""
    entries = room = 0
    lps = reply.get("logprobs")
    for e in lps if isinstance(lps, list) else ():
        if not isinstance(e, dict) or not isinstance(e.get("bytes"), list) or not isinstance(e.get("top_logprobs"),
                                                                                             list):
            continue
        got = e["bytes"]
        own = next((t.get("bytes") for t in e["top_logprobs"]
                    if isinstance(t, dict) and t.get("id") == e.get("id") and "id" in e), None)
        if isinstance(own, list) and own and len(got) > len(own) and got[len(got) - len(own):] == own:
            entries += 1
            room += len(got) - len(own)
    return Merges(entries, room)


def _tokens_made(reply: ReplyFile) -> int | None:
    """Output tokens for timing: usage, else the streamed count (``n_streamed``), else token events."""
    for n in (usage_tokens(reply), _as_int(reply.get("n_streamed")), _as_int(reply.get("chunks"))):
        if n is not None:
            return n
    return None


def decode_tok_s(reply: ReplyFile) -> float | None:
    """Decode rate in tokens per second: ``(N - 1) / ((E2EL - TTFT) / 1000)``.

    N is ``usage.completion_tokens``, else ``n_streamed``, else ``chunks``; E2EL and TTFT in ms (reply
    file). None when N < 2 or E2EL <= TTFT (nothing to divide by) or a time is missing.
    """
    n, ttft_ms, e2el_ms = _tokens_made(reply), reply.get("ttft_ms"), reply.get("e2el_ms")
    if n is None or n < 2 or ttft_ms is None or e2el_ms is None or e2el_ms <= ttft_ms:
        return None
    return (n - 1) / ((float(e2el_ms) - float(ttft_ms)) / 1000.0)


def all_at_once(reply: ReplyFile) -> bool:
    """At least two tokens arrived in one instant (E2EL == TTFT): nothing was decoded, the reply was replayed."""
    n, ttft_ms, e2el_ms = _tokens_made(reply), reply.get("ttft_ms"), reply.get("e2el_ms")
    return n is not None and n >= 2 and ttft_ms is not None and e2el_ms is not None and e2el_ms == ttft_ms


def sequence(reply: ReplyFile) -> tuple[list[Any], str]:
    """What to compare position by position: token ids (``"token_ids"``), else the logprob entries' token
    strings (``"logprob_tokens"``), else the characters of reasoning + text (``"characters"``)."""
    ids = reply.get("token_ids")
    if isinstance(ids, list) and ids:
        return list(ids), "token_ids"
    entries = reply.get("logprobs")
    if isinstance(entries, list) and entries:
        return [e.get("token") if isinstance(e, dict) else None for e in entries], "logprob_tokens"
    return list(generated_text(reply)), "characters"


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first position where ``a`` and ``b`` differ, None when they are equal.

    When one is a proper prefix of the other they diverge where the shorter one ends.
    """
    for pos, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return pos
    return None if len(a) == len(b) else min(len(a), len(b))


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None
