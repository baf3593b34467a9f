"""The shapes every layer shares: TypedDicts of the JSON written to a run directory, and the few pure
readers of a reply file that more than one layer needs.

docs/design.md, "Run directory": one reply file per request, probe records in ``probes/<gate-run>.jsonl``,
count rows of the token_count gate, the parts of a verification. The classes here describe those
JSON objects exactly as they are on disk, so a writer and its readers share one documented shape
(one record shape per file kind); readers ignore keys they do not know. ``total=False``: a field may be absent
(a failed request has no ``usage``), and a reader must treat absent as unknown, never as 0.

This module sits at the bottom of the layers (with ``rundir``, ``stats`` and ``errors``): it imports
nothing of inferencekit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

__all__ = ["CountRow", "ExtraRequests", "Part", "ProbeRecord", "ReplyFile", "generated_text", "is_ok", "n_out",
           "reply_end_ns", "reply_start_ns"]


class ReplyFile(TypedDict, total=False):
    """JSON of ``outputs/<engine>/.../<id>.json`` (docs/design.md, "Reply file"); built by ``api/reply.py``.

    Times: ``sent_ns``/``scheduled_ns``/``dispatched_ns`` are the client's ``perf_counter_ns``; each
    ``events`` entry is ``[t_ns relative to sent_ns, raw SSE data payload]``; ``*_ms`` are milliseconds.
    """

    id: str
    request_id: str
    engine: str
    endpoint: str
    level: str
    bucket: str
    salt: str
    probe_kind: str
    probe_meta: dict[str, Any]
    scheduled_ns: int
    dispatched_ns: int
    sent_ns: int
    status: int
    error: str
    events: list[list[Any]]
    done: bool
    no_tokens: bool  # a finished stream without a token event (api/reply.py): no TTFT, not completed in a load
    text: str
    reasoning: str
    tool_calls: list[dict[str, Any]]
    token_ids: list[int] | None
    logprobs: list[dict[str, Any]] | None
    prompt_token_ids: list[int] | None
    finish_reason: str | None
    usage: dict[str, Any] | None
    server_timings: dict[str, Any] | None
    ttft_ms: float | None
    ttfo_ms: float | None
    e2el_ms: float | None
    itl_ms: list[float]
    chunks: int
    n_streamed: int | None
    streamed_method: str | None
    dropped_fields: list[str]
    worker: int
    clock_offset_ns: int


class ProbeRecord(TypedDict, total=False):
    """One request a gate plans, and (once sent) its reply: a line of ``probes/<gate-run>.jsonl``.

    ``key`` groups the members of a pair or group (a first request and its repeat); ``meta`` holds what the
    judge needs to know about the request (the nonce an echo must copy). ``reply`` is absent until sent and
    None for a request never sent. ``folder`` is set on requests mixed into a load (``ExtraRequests``):
    ``probes`` or ``kat/alone``, ``kat/load`` (``outputs/<engine>/<folder>/<id>.json``).
    """

    id: str
    kind: str
    key: str
    meta: dict[str, Any]
    endpoint: str
    body: dict[str, Any]
    folder: str
    reply: ReplyFile | None


class ExtraRequests(TypedDict):
    """Requests a caller mixes into a ``bench serve`` run (hidden probes, known answers). The load generator sends
    and records them in their own folders and judges nothing about them; the gates judge them from the run dir.

    ``alone``: sent one at a time after the warm-up, before the first level. ``by_level``: level label → the
    requests mixed into that level (each takes one slot of its schedule). ``optional``: body fields the server may
    refuse with HTTP 400 (the client drops them, resends, and records the drop in the reply). ``load_fields``:
    fields every load request must carry too, so the mixed-in requests look like the load (the known answers'
    logprob fields); optional like the dialect's count fields.
    """

    alone: list[ProbeRecord]
    by_level: dict[str, list[ProbeRecord]]
    optional: list[str]
    load_fields: NotRequired[dict[str, Any]]


class CountRow(TypedDict):
    """One reply's token counts side by side (the token_count gate, ``gates/judges/token_count.py``).

    ``usage``: ``usage.completion_tokens``; ``streamed``: token ids the stream carried, else logprob entries
    (``streamed_method`` says which); ``retokenized``: the generated text through the model's tokenizer.
    None: that count is unknown. ``lossy_text``: the streamed text lost bytes; ``multibyte``: it holds a
    non-ASCII character; ``merge_slack``: how many tokens its multi-byte characters could hide if each was
    streamed as one entry (Σ UTF-8 bytes − 1 over them); ``multibyte_chars``: how many non-ASCII characters it
    holds; ``usage_conflict``: usage fields that contradict each other (a reasoning or cached count above its
    total), None when they do not.
    """

    key: str
    usage: int | None
    streamed: int | None
    streamed_method: str | None
    retokenized: int | None
    finish_reason: str | None
    max_tokens: int | None
    lossy_text: bool
    multibyte: bool
    merge_slack: NotRequired[int]
    multibyte_chars: NotRequired[int]
    usage_conflict: NotRequired[str | None]


class Part(TypedDict):
    """One part of a verification (``verify``): what ran, its verdict and why, and the record behind it.

    ``verdict`` None: informational (the capability probe), not combined into the overall verdict.
    ``fallbacks``: the limitations of its records that changed what was measured (``data.fallbacks``, a load's
    fields dropped on an HTTP 400); ``verify --strict`` turns a PASS carrying any into UNPROVEN. ``properties``: what
    the engine was shown to lack that an honest engine may lack (``gates.properties``), reported on their own lines,
    not in the verdict.
    """

    part: str
    kind: str | None
    evidence_id: str | None
    verdict: str | None
    reason: str
    fallbacks: NotRequired[list[str]]
    properties: NotRequired[list[dict[str, Any]]]


def is_ok(reply: Mapping[str, Any]) -> bool:
    """A finished, successful reply: HTTP 200 and no recorded error."""
    return reply.get("status") == 200 and not reply.get("error")


def generated_text(reply: Mapping[str, Any]) -> str:
    """What a reply generated, for re-tokenizing and copying checks: its reasoning (when streamed apart), then
    its text."""
    return (reply.get("reasoning") or "") + (reply.get("text") or "")


def n_out(reply: Mapping[str, Any], retokenized: int | None = None) -> tuple[int | None, str | None]:
    """``(N_out, source)`` of one reply: ``usage.completion_tokens``, else the streamed count
    (``"streamed:token_ids"`` or ``"streamed:logprobs"``), else the re-tokenized count; ``(None, None)``
    when none is known. Source: the metric manifest's N_out (``bench/manifest.py``)."""
    u = (reply.get("usage") or {}).get("completion_tokens")
    if isinstance(u, int) and not isinstance(u, bool):
        return u, "usage"
    s = reply.get("n_streamed")
    if isinstance(s, int) and not isinstance(s, bool):
        return s, f"streamed:{reply.get('streamed_method')}"
    if retokenized is not None:
        return retokenized, "retokenized"
    return None, None


def _clock_offset_ns(reply: Mapping[str, Any]) -> int:
    """Offset from the reply's perf_counter stamps to the wall clock: ``--workers``/``--ray`` replies carry their
    process's ``clock_offset_ns``; 0 otherwise (one process's clock throughout)."""
    off = reply.get("clock_offset_ns")
    return off if isinstance(off, int) else 0


def reply_start_ns(reply: Mapping[str, Any]) -> int | None:
    """Send time of a reply in ns on the level's common clock (None without ``sent_ns``)."""
    sent = reply.get("sent_ns")
    return sent + _clock_offset_ns(reply) if isinstance(sent, int) else None


def reply_end_ns(reply: Mapping[str, Any]) -> int | None:
    """End of a reply (its last event of any kind) in ns on the level's common clock: the client's perf_counter,
    or the wall clock when the replies come from several processes (``clock_offset_ns``)."""
    start = reply_start_ns(reply)
    if start is None:
        return None
    evs: Sequence[Any] = reply.get("events") or []
    return start + (int(evs[-1][0]) if evs else 0)
