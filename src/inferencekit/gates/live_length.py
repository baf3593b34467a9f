"""The output_length gate, live: does a request that forbids stopping early get exactly max_tokens?

Fixed-length benchmarks send ``ignore_eos: true`` with ``max_tokens``; an engine that stops early, or
reports a length it did not generate, makes their throughput figures wrong. The live probes are
``ignore_eos`` records (``gates/probe_records.py``): body ``{"ignore_eos": true, "max_tokens": N, ...}``.

Per usable reply the length is the streamed count (token ids, else logprob entries), else usage alone.
The rules follow the seed's ``gate_output_length_live`` (``../shared/seeds/000`` (ops/gates.py)); the
pure form here takes no tokenizer, so a logprob stream short of usage stays unsettled (the run-dir
check, ``gates/token_count.py``, can settle it by the text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from inferencekit.gates import probe_records as pr
from inferencekit.gates.result import Gate

__all__ = ["LengthRow", "gate_output_length_live", "length_row"]

_UNSTREAMED = "tokens counted but not streamed (special tokens after EOS?)"


@dataclass(frozen=True, slots=True)
class LengthRow:
    """One ignore_eos reply judged against its ``max_tokens``.

    ``outcome``: ``"exact"``, ``"bad"`` (FAIL), ``"stopped"`` (ended at EOS, counts consistent),
    ``"unstreamed"`` (logprob stream short of usage = max_tokens at finish 'length'), ``"refused"``
    (the server dropped ``ignore_eos``), ``"uncounted"`` (no count at all).
    """

    key: str
    max_tokens: int | None
    length: int | None
    method: str | None  # "token_ids" | "logprobs" | "usage" | None
    usage: int | None
    streamed: int | None
    finish_reason: str | None
    outcome: str
    problem: str | None = None


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_tokens", "max_completion_tokens"):
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _contradictions(usage: int | None, streamed: int | None, method: str | None, finish: str | None,
                    want: int | None) -> list[str]:
    """Statements a reply makes that cannot all be true, whatever the engine's handling of ignore_eos."""
    slack = 1 if finish == "stop" else 0  # an EOS token counted on one side only
    found = []
    if usage is not None and want is not None and usage > want:
        found.append(f"usage {usage} > max_tokens {want}")
    if usage is not None and want is not None and finish == "length" and usage < want:
        found.append(f"finish_reason 'length' with usage {usage} < max_tokens {want}")
    if usage is not None and streamed is not None:
        if streamed > usage + slack:
            found.append(f"streamed {streamed} > usage {usage}")
        elif usage - streamed > slack and not _may_be_unstreamed(usage, method, finish, want):
            found.append(f"usage {usage} > {streamed} streamed ({method})")
    return found


def _may_be_unstreamed(usage: int | None, method: str | None, finish: str | None, want: int | None) -> bool:
    """A logprob stream cut at max_tokens with usage exactly there: the tokens missing from the stream may be
    special tokens generated after EOS and never streamed. Token-id streams get no such allowance."""
    return method == "logprobs" and finish == "length" and want is not None and usage == want


def length_row(record: dict[str, Any]) -> LengthRow | None:
    """The ``LengthRow`` of one ignore_eos record, None when its reply is not usable (a failed probe)."""
    reply = pr.ok_reply(record)
    if reply is None:
        return None
    want = _max_tokens(record.get("body") or {})
    usage = pr.usage_tokens(reply)
    streamed, method = pr.streamed_count(reply)
    length, how = (streamed, method) if streamed is not None else (usage, "usage" if usage is not None else None)
    finish = reply.get("finish_reason")
    exact = LengthRow(str(record.get("key")), want, length, how, usage, streamed, finish, "exact")
    problems = _contradictions(usage, streamed, method, finish, want)
    if problems:
        return replace(exact, outcome="bad", problem="; ".join(problems))
    if "ignore_eos" in (reply.get("dropped_fields") or []):
        return replace(exact, outcome="refused", problem="the server refused ignore_eos; the client dropped it")
    if length is None or want is None:
        return replace(exact, outcome="uncounted", problem="no usage, token ids or logprobs to count")
    if length == want:
        return exact
    if (streamed is not None and usage is not None and streamed < usage
            and _may_be_unstreamed(usage, method, finish, want)):
        return replace(exact, outcome="unstreamed", problem=f"{usage - streamed} {_UNSTREAMED}")
    if finish == "stop" and length < want:
        return replace(exact, outcome="stopped", problem=f"stopped at EOS after {length} of {want} tokens")
    return replace(exact, outcome="bad", problem=f"length {length} != max_tokens {want}")


def gate_output_length_live(records: Sequence[dict[str, Any]]) -> Gate:
    """The output_length gate from live ``ignore_eos`` probe records.

    Verdicts, in order:

    - NOT RUN: no ignore_eos probe in the records;
    - FAIL: a reply that is not ``max_tokens`` long although nothing excuses it: finish 'length' below
      max_tokens; usage above it; a stream longer than usage; a stream shorter than usage (one token of
      slack at 'stop'), except a logprob stream at the cut (below); or a length unequal to max_tokens
      that did not end at EOS;
    - UNPROVEN: ignore_eos refused (failed probes, or ``ignore_eos`` in a reply's ``dropped_fields``);
      replies that stopped at EOS ('stop', counts consistent: ignore_eos not honoured); a logprob stream
      shorter than usage = max_tokens at finish 'length' (tokens after EOS may be unstreamed); a reply
      without any count; every length known by usage only;
    - PASS: every reply exactly max_tokens long by its stream.

    Metrics: ``ignore_eos_requests`` (usable replies), ``exact``, ``stopped_at_eos``, ``unstreamed_at_limit``,
    ``refused_ignore_eos``, ``usage_only``, ``failed_probes``.
    Source: the seed's ``gate_output_length_live`` (``../shared/seeds/000`` (ops/gates.py)).
    """
    probes = [rec for rec in records if rec.get("kind") == "ignore_eos"]
    if not probes:
        return Gate("output_length", "NOT RUN", "no ignore_eos probe was sent")
    fails = pr.failed(probes)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in (r for r in map(length_row, probes) if r is not None):
        grouped.setdefault(row.outcome, []).append(asdict(row))
    bad, stopped, unstreamed, dropped, uncounted, exact = (
        grouped.get(k, []) for k in ("bad", "stopped", "unstreamed", "refused", "uncounted", "exact"))
    by_usage = [r for r in exact if r["method"] == "usage"]
    n = sum(len(v) for v in grouped.values())
    metrics = {"ignore_eos_requests": n, "exact": len(exact), "stopped_at_eos": len(stopped),
               "unstreamed_at_limit": len(unstreamed), "refused_ignore_eos": len(dropped),
               "usage_only": len(by_usage), "failed_probes": len(fails)}
    limitations = []
    if by_usage:
        limitations.append(f"{len(by_usage)} length(s) known only from usage (the reply streamed no token ids or "
                           "logprobs)")
    compare = ("judge the lengths against a trusted engine's outputs instead (gates check RUN_DIR "
               "--reference-outputs)")
    if bad:
        return Gate("output_length", "FAIL", f"{len(bad)}/{n} ignore_eos replies are not max_tokens long "
                    "(finish_reason 'length' below max_tokens, usage above it, or usage disagrees with the stream)",
                    metrics, bad + unstreamed + fails, limitations)
    notes = []
    if fails or dropped:
        said = [pr.fail_note(fails, "ignore_eos request")] if fails else []
        if dropped:
            said.append(f"{len(dropped)} repl(ies) came back with ignore_eos dropped")
        notes.append(f"{'; '.join(said)}: exact-length requests are not accepted, so no live check of fixed-length "
                     f"runs is possible; {compare}")
    if stopped:
        notes.append(f"{len(stopped)}/{n} ignore_eos replies ended at EOS (finish_reason 'stop', usage and stream "
                     f"agree): ignore_eos is not honoured here, and a 'fixed-length' run on this engine has replies "
                     f"of any length; {compare}")
    if unstreamed:
        gaps = sorted(r["usage"] - r["streamed"] for r in unstreamed)
        span = str(gaps[0]) if gaps[0] == gaps[-1] else f"{gaps[0]} to {gaps[-1]}"
        notes.append(f"{len(unstreamed)}/{n} ignore_eos replies were cut at max_tokens with usage equal to it, "
                     f"yet their logprob stream is shorter ({span} {_UNSTREAMED}); without token ids the stream "
                     f"cannot confirm the length; {compare}")
    if uncounted:
        notes.append(f"{len(uncounted)}/{n} ignore_eos replies carry no count (usage, token ids or logprobs) "
                     "or their request no max_tokens")
    if notes:
        return Gate("output_length", "UNPROVEN", "; ".join(notes), metrics,
                    fails + dropped + stopped + unstreamed + uncounted, limitations)
    if len(by_usage) == n:
        return Gate("output_length", "UNPROVEN", f"{n} ignore_eos replies are exactly max_tokens long by usage only "
                    "(no stream to confirm the count)", metrics, exact, limitations)
    return Gate("output_length", "PASS", f"{n} ignore_eos replies are exactly max_tokens long "
                f"({n - len(by_usage)} by their stream)", metrics, exact, limitations)
