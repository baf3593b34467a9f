"""Appliance receipt judgement: reply files → receipt rows, section summaries, completion gates, verdict.

Pure functions over reply files (docs/design.md "Reply file"); the collector (``appliance_collect``)
sends and records, this module only reads. The rules follow RigMark's ``bench.py`` receipt
(RigMark's rules): decode rate from the first to the last token-bearing event, completion
gates (a visible answer, ``finish_reason`` stop, ``[DONE]`` seen; the structured workload checked
exactly), nearest-rank p90, a pooled rate beside the median, prefill samples refused — not
relabelled — when the server's prompt count differs from the depth asked or a cold sample reports
cached tokens. One departure: a failed request is a recorded, unusable row and the run goes on
(RigMark aborted the whole run).

Units: seconds for durations (6 decimals), tokens/second for rates (3 decimals).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from typing import Any

from inferencekit.api.reply import is_ok

__all__ = ["percentile_nearest", "summary", "decode_row", "prefill_row", "validate_structured_output",
           "completion_validation", "decode_section", "prefill_section", "concurrency_round",
           "concurrency_section", "receipt_verdict", "cached_prompt_tokens", "STRUCTURED_LENGTH"]

STRUCTURED_LENGTH = 50  # objects the structured workload asks for


def percentile_nearest(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile ``sorted(values)[round((n − 1) · fraction)]`` (RigMark's rule; no interpolation).

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[round((len(ordered) - 1) * fraction)]


def summary(values: Sequence[float], digits: int = 3) -> dict[str, float | int] | None:
    """``{median, minimum, maximum, p90, n}`` rounded to ``digits`` decimals (3 for rates, 6 for durations in
    seconds), or None for no values (never zeros)."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    return {"median": round(statistics.median(vals), digits), "minimum": round(min(vals), digits),
            "maximum": round(max(vals), digits), "p90": round(percentile_nearest(vals, 0.9), digits), "n": len(vals)}


def _seconds(values: Sequence[float]) -> dict[str, float | int] | None:
    return summary(values, 6)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def cached_prompt_tokens(reply: dict[str, Any]) -> tuple[int | None, str | None]:
    """``(cached prompt tokens, where it was read)``: ``usage.prompt_tokens_details.cached_tokens``,
    else llama-server's ``timings.cache_n``; ``(None, None)`` when the server reports neither."""
    usage = reply.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        return details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens"
    timings = reply.get("server_timings")
    if isinstance(timings, dict) and _int(timings.get("cache_n")) is not None:
        return timings["cache_n"], "timings.cache_n"
    return None, None


def _stream_sha256(reply: dict[str, Any]) -> str:
    """SHA-256 of the raw SSE data payloads in order, joined by newlines (what the server sent)."""
    return hashlib.sha256("\n".join(str(p) for _, p in reply.get("events") or []).encode()).hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _base_row(reply: dict[str, Any], rel: str) -> dict[str, Any]:
    row: dict[str, Any] = {"request_id": reply.get("request_id"), "reply": rel, "status": reply.get("status")}
    if reply.get("error"):
        row["error"] = str(reply["error"])
    if reply.get("retried"):
        row["retried"] = str(reply["retried"])
    return row


# the seed refuses a stream naming several choices, or one whose index is not 0: one request, one completion
_ODD_CHOICES = ("the stream carried choices {} (several, or an index other than 0): a sample must be one completion; "
                "refusing to time it")


def _unusable(row: dict[str, Any], reason: str) -> dict[str, Any]:
    row["usable"] = False
    row["unusable_reason"] = reason
    return row


def decode_row(reply: dict[str, Any], rel: str, *, retokenized: int | None = None) -> dict[str, Any]:
    """One streamed chat reply → a decode row (docs/appliance.md, "Decode row"), without its gate.

    ``completion_tokens`` is ``usage.completion_tokens``; an engine that streams no usage
    (llama-cpp-python) gets the number of token-bearing events (it streams one token per event)
    and says so in ``completion_tokens_source``. The decode rate is (N − 1) / (last − first
    token-bearing event): N − 1 intervals, like-for-like with TPOT. A reply is unusable when it
    failed, carried no token, or put more than one token into a single event only (the window
    cannot be measured).

    Args:
        reply: a reply file dict; rel: its path relative to the run dir.
        retokenized: the visible output's token count by the engine's tokenizer, when taken.
    """
    row = _base_row(reply, rel)
    usage = reply.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    n_usage = _int(usage.get("completion_tokens"))
    chunks = int(reply.get("chunks") or 0)
    completion, source = (n_usage, "usage") if n_usage is not None else (chunks, "token events")
    cached, _ = cached_prompt_tokens(reply)
    text, reasoning = reply.get("text") or "", reply.get("reasoning") or ""
    events = reply.get("events") or []
    ttft = reply.get("ttft_ms")
    last = reply.get("e2el_ms")
    wall = events[-1][0] / 1e9 if events else None
    row.update({"prompt_tokens": _int(usage.get("prompt_tokens")), "completion_tokens": completion,
                "completion_tokens_source": source, "cached_prompt_tokens": cached,
                "ttft_seconds": None if ttft is None else round(ttft / 1e3, 6),
                "time_to_first_visible_seconds": None if reply.get("ttfo_ms") is None
                else round(reply["ttfo_ms"] / 1e3, 6),
                "time_to_last_output_seconds": None if last is None else round(last / 1e3, 6),
                "measured_sse_events": chunks, "wall_seconds": None if wall is None else round(wall, 6),
                "response_tail_seconds": None if wall is None or last is None
                                         else round(max(wall - last / 1e3, 0.0), 6),
                "stream_done_marker": bool(reply.get("done")), "finish_reason": reply.get("finish_reason"),
                "output": text, "output_characters": len(text), "output_sha256": _sha(text),
                "reasoning_characters": len(reasoning), "reasoning_sha256": _sha(reasoning),
                "stream_sha256": _stream_sha256(reply), "decode_seconds": None, "decode_tokens_per_second": None})
    if retokenized is not None:
        row["retokenized_completion_tokens"] = retokenized
    if not is_ok(reply):
        return _unusable(row, str(reply.get("error") or f"HTTP {reply.get('status')}"))
    if reply.get("odd_choices"):
        return _unusable(row, _ODD_CHOICES.format(reply["odd_choices"]))
    if ttft is None or last is None:
        return _unusable(row, "the stream carried no token")
    window = (last - ttft) / 1e3
    if completion > 1 and chunks < 2:
        return _unusable(row, "the server sent the whole completion in one event: no decode window to time")
    if completion > 1 and window <= 0:
        return _unusable(row, "the decode window is not measurable (first and last token arrived together)")
    row["decode_seconds"] = round(window, 6)
    row["decode_tokens_per_second"] = round((completion - 1) / window, 3) if completion > 1 else 0.0
    row["usable"] = True
    return row


def validate_structured_output(output: str) -> dict[str, Any]:
    """The structured workload's exact check: a JSON array of exactly 50 objects, object i (from 1) being
    ``{"index": i, "square": i*i}`` with integer values and no other keys. No fences, no prose, no slack."""
    try:
        value = json.loads(output)
    except json.JSONDecodeError as e:
        return {"valid": False, "error": f"not JSON: {e.msg} at line {e.lineno} column {e.colno}"}
    if not isinstance(value, list) or len(value) != STRUCTURED_LENGTH:
        got = f"an array of {len(value)}" if isinstance(value, list) else type(value).__name__
        return {"valid": False, "error": f"expected an array of {STRUCTURED_LENGTH} objects, got {got}"}
    for i, item in enumerate(value, start=1):
        if (not isinstance(item, dict) or set(item) != {"index", "square"} or type(item["index"]) is not int
                or type(item["square"]) is not int or item["index"] != i or item["square"] != i * i):
            return {"valid": False, "error": f"object {i} is not {{\"index\": {i}, \"square\": {i * i}}}"}
    return {"valid": True}


def completion_validation(row: dict[str, Any], workload: str) -> dict[str, Any]:
    """The completion gate of one decode row: a visible answer, finish ``stop``, ``[DONE]`` seen; for the
    ``structured`` workload also ``validate_structured_output``. ``{"valid": bool, "error"?: str}``."""
    if row.get("error"):
        return {"valid": False, "error": f"request failed: {row['error']}"}
    if not (row.get("output") or "").strip():
        return {"valid": False, "error": "no visible answer"}
    if row.get("finish_reason") != "stop":
        return {"valid": False, "error": f"finish_reason {row.get('finish_reason')!r}, not 'stop'"}
    if not row.get("stream_done_marker"):
        return {"valid": False, "error": "the stream ended without [DONE]"}
    if workload == "structured":
        return validate_structured_output(row["output"])
    return {"valid": True}


def decode_section(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One workload's rows → ``{runs, decode_tokens_per_second, pooled_decode_tokens_per_second,
    ttft_seconds, time_to_last_output_seconds, wall_seconds, completion_gate}`` over usable rows.

    The pooled rate is Σ(N − 1) / Σ decode window over the same usable rows (a supplement to the
    median that weights long replies by their length)."""
    use = [r for r in rows if r.get("usable")]
    window = sum(r["decode_seconds"] for r in use)
    pooled = round(sum(max(r["completion_tokens"] - 1, 0) for r in use) / window, 3) if use and window > 0 else None
    return {"runs": rows,
            "decode_tokens_per_second": summary([r["decode_tokens_per_second"] for r in use]),
            "pooled_decode_tokens_per_second": pooled,
            "ttft_seconds": _seconds([r["ttft_seconds"] for r in use]),
            "time_to_last_output_seconds": _seconds([r["time_to_last_output_seconds"] for r in use]),
            "wall_seconds": _seconds([r["wall_seconds"] for r in use]),
            "completion_gate": {"passed": sum(1 for r in rows if r["completion_validation"]["valid"]),
                                "total": len(rows)}}


def prefill_row(reply: dict[str, Any], rel: str, *, depth: int, cold: bool, prompt_form: str,
                counted_tokens: int | None = None) -> dict[str, Any]:
    """One prefill reply → a prefill row (docs/appliance.md, "Prefill row").

    The depth is checked against ``usage.prompt_tokens``; a server that streams no usage is checked
    through ``counted_tokens`` (the prompt text's count by the engine's tokenize endpoint). A sample
    is refused (``usable`` False, with the reason) when the count differs from ``depth``, when no
    count is available, or — for a cold sample — when the server reports any cached prompt token.

    Args:
        depth: prompt tokens asked for; cold: this is the cold request of a pair;
        prompt_form: ``"token ids"`` or ``"text"``; counted_tokens: see above.
    """
    row = _base_row(reply, rel)
    usage = reply.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    reported = _int(usage.get("prompt_tokens"))
    source = "usage" if reported is not None else ("tokenize endpoint" if counted_tokens is not None else None)
    if reported is None:
        reported = counted_tokens
    cached, cached_source = cached_prompt_tokens(reply)
    ttft = reply.get("ttft_ms")
    row.update({"requested_prompt_tokens": depth, "prompt_tokens": reported, "prompt_tokens_source": source,
                "cached_prompt_tokens": cached, "cached_prompt_tokens_source": cached_source,
                "prompt_form": prompt_form, "ttft_seconds": None if ttft is None else round(ttft / 1e3, 6),
                "effective_prefill_tokens_per_second": None})
    if not is_ok(reply):
        return _unusable(row, str(reply.get("error") or f"HTTP {reply.get('status')}"))
    if reply.get("odd_choices"):
        return _unusable(row, _ODD_CHOICES.format(reply["odd_choices"]))
    if ttft is None or ttft <= 0:
        return _unusable(row, "the stream carried no token")
    if reported is None:
        return _unusable(row, "the server reported no prompt token count and no tokenizer could count it")
    if reported != depth:
        return _unusable(row, f"prompt-token mismatch: requested {depth}, {source} says {reported}; "
                              "refusing to label this sample")
    if cached is not None and reported is not None and cached > reported:
        return _unusable(row, f"the server reports {cached} cached prompt tokens ({cached_source}) of {reported} "
                              "prompt tokens: its usage contradicts itself; refusing to label this sample")
    if cold and cached:
        return _unusable(row, f"the cold request reported {cached} cached prompt tokens ({cached_source}); "
                              "refusing to label it cold")
    row["effective_prefill_tokens_per_second"] = round(depth / (ttft / 1e3), 3)
    row["usable"] = True
    return row


def _prefill_side(rows: list[dict[str, Any]]) -> dict[str, Any]:
    use = [r for r in rows if r.get("usable")]
    return {"runs": rows, "effective_prefill_tokens_per_second": summary([r["effective_prefill_tokens_per_second"]
                                                                          for r in use]),
            "ttft_seconds": _seconds([r["ttft_seconds"] for r in use])}


def prefill_section(cold: list[dict[str, Any]], warm: list[dict[str, Any]]) -> dict[str, Any]:
    """One depth's cold and warm-replay rows → ``{cold, warm_replay, cold_verification}``.

    ``cold_verification`` is ``"server-verified"`` only when every usable cold sample carries a
    server-reported cached-token count of 0; otherwise ``"cold not server-verified"`` (the engine
    reports no cache figure, e.g. llama-cpp-python, and coldness rests on a unique prefix)."""
    used = [r for r in cold if r.get("usable")]
    verified = bool(used) and all(r.get("cached_prompt_tokens") == 0 for r in used)
    return {"cold": _prefill_side(cold), "warm_replay": _prefill_side(warm),
            "cold_verification": "server-verified" if verified else "cold not server-verified"}


def concurrency_round(index: int, streams: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """One barrier-released round → ``{round, wall_seconds, completion_tokens,
    aggregate_end_to_end_tokens_per_second, streams, usable}``: completion tokens of every stream over
    the round's wall time (first call to last token). A round with a failed stream is unusable (its
    aggregate would count the failure as speed)."""
    completion = sum(int(s.get("completion_tokens") or 0) for s in streams)
    failed = [s for s in streams if not s.get("usable")]
    out: dict[str, Any] = {"round": index, "wall_seconds": round(wall_s, 6), "completion_tokens": completion,
                           "aggregate_end_to_end_tokens_per_second": round(completion / wall_s, 3) if wall_s > 0
                           else None, "streams": streams, "usable": not failed and wall_s > 0}
    if failed:
        out["unusable_reason"] = f"{len(failed)} of {len(streams)} streams unusable"
    return out


def concurrency_section(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's rounds → ``{rounds, aggregate_end_to_end_tokens_per_second,
    per_stream_decode_tokens_per_second, per_stream_ttft_seconds}`` over usable rounds and streams."""
    use = [r for r in rounds if r.get("usable")]
    streams = [s for r in rounds for s in r["streams"] if s.get("usable")]
    return {"rounds": rounds,
            "aggregate_end_to_end_tokens_per_second": summary([r["aggregate_end_to_end_tokens_per_second"]
                                                               for r in use]),
            "per_stream_decode_tokens_per_second": summary([s["decode_tokens_per_second"] for s in streams]),
            "per_stream_ttft_seconds": _seconds([s["ttft_seconds"] for s in streams])}


def receipt_verdict(receipt: dict[str, Any]) -> tuple[str, list[str]]:
    """``(PASS | UNPROVEN, reasons)``: PASS only when every sample of every section that ran was usable and
    every completion gate passed (docs/appliance.md, "Verdict"). Never FAIL: a gate a model cannot meet
    leaves the figures unproven, it does not show the appliance cheated."""
    reasons: list[str] = []
    for name, sec in (receipt.get("decode") or {}).items():
        gate = sec["completion_gate"]
        if gate["passed"] < gate["total"]:
            errs = sorted({r["completion_validation"].get("error", "") for r in sec["runs"]
                           if not r["completion_validation"]["valid"]})
            reasons.append(f"decode/{name}: completion gate passed {gate['passed']}/{gate['total']} "
                           f"({'; '.join(e for e in errs if e)[:300]})")
        bad = [r for r in sec["runs"] if not r.get("usable")]
        if bad:
            reasons.append(f"decode/{name}: {len(bad)} of {len(sec['runs'])} samples unusable "
                           f"({bad[0].get('unusable_reason')})")
    for depth, sec in (receipt.get("prefill") or {}).items():
        for side in ("cold", "warm_replay"):
            bad = [r for r in sec[side]["runs"] if not r.get("usable")]
            if bad:
                reasons.append(f"prefill/{depth}/{side}: {len(bad)} of {len(sec[side]['runs'])} samples refused "
                               f"({bad[0].get('unusable_reason')})")
    for level, sec in (receipt.get("concurrency") or {}).items():
        bad = [r for r in sec["rounds"] if not r.get("usable")]
        if bad:
            reasons.append(f"concurrency/{level}: {len(bad)} of {len(sec['rounds'])} rounds unusable "
                           f"({bad[0].get('unusable_reason')})")
    return ("UNPROVEN" if reasons else "PASS"), reasons
