"""Did the client, not the server, set a level's pace? Pure judgement on recorded figures.

Inputs are what a level leaves on disk: each client process's event-loop lag (``client.json``,
``bench/pace.py``) and, for open loop, every request's ``scheduled_ns`` and ``dispatched_ns`` (the
moment the loop got to the send). A timer that fires late by L ms means every chunk timestamp and
every send of that moment was late by up to L ms too, so a level's figures carry the client's lag as
error. The level is **invalid** (its figures are the client's limits, and verify calls it UNPROVEN)
when, in any client process:

- the event-loop lag p99 exceeds ``max(LAG_FLOOR_MS, LAG_FRACTION × reference)``, where the reference
  is the finest figure the level reports: the smaller of its median TTFT and median ITL; or
- (open loop) the send lateness p99 exceeds ``max(LATE_FLOOR_MS, LATE_FRACTION × mean gap)``, the mean
  gap being 1/rate: the arrivals the server saw were then the client's, not the schedule's.

Thresholds (this project's choice, recorded with each verdict): asyncio rounds timer waits up to
whole milliseconds, so an idle loop shows lag up to ~1 ms, and a shared machine's scheduler adds a
few more; 5 ms is well above both. A lag under a quarter of the finest figure still shows in that
figure's tail (the card prints the lag beside it) but cannot have set the pace; above it, the
client's stamps and sends are a large part of what was measured. Sends at most 10% of the mean gap
late keep the offered arrival process what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferencekit.stats import summarize

__all__ = ["judge_client_pace", "LAG_FLOOR_MS", "LAG_FRACTION", "LATE_FLOOR_MS", "LATE_FRACTION"]

LAG_FLOOR_MS = 5.0
LAG_FRACTION = 0.25
LATE_FLOOR_MS = 5.0
LATE_FRACTION = 0.10
MIN_LAG_SAMPLES = 20  # 0.1 s of 5 ms timers: fewer cannot judge a level


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _reference_ms(replies: Sequence[Mapping[str, Any]]) -> tuple[float | None, str]:
    ok = [r for r in replies if not r.get("error") and r.get("status") == 200]
    ttft = _median([r["ttft_ms"] for r in ok if isinstance(r.get("ttft_ms"), (int, float))])
    itl = _median([g for r in ok for g in (r.get("itl_ms") or [])])
    cands = [(v, name) for v, name in ((ttft, "median TTFT"), (itl, "median ITL")) if v is not None]
    if not cands:
        return None, "no completed reply"
    return min(cands)


def _who(proc: Mapping[str, Any]) -> str:
    w = proc.get("worker")
    return (f"worker {w} " if w is not None else "") + f"({proc.get('host', '?')} pid {proc.get('pid', '?')})"


def judge_client_pace(processes: Sequence[Mapping[str, Any]], replies: Sequence[Mapping[str, Any]], *,
                      rate: float | None = None, streams: int | None = None) -> dict[str, Any]:
    """Judge one level.

    Args:
        processes: ``client.json``'s ``processes`` (each with ``loop.loop_lag_ms`` summary in ms).
        replies: the level's reply dicts (``ttft_ms``, ``itl_ms``, and for open loop ``scheduled_ns``,
            ``dispatched_ns``).
        rate: the open-loop rate in requests/s (None for closed loop).
        streams: the level's concurrency (closed loop) or cap, for memory per open stream: the processes' resident
            memory growth over the level ÷ streams (an upper bound: it also holds finished replies not yet written).

    Returns:
        ``{"valid": bool | None, "reasons": [...], "reference_ms", "reference", "lag_limit_ms",
        "loop_lag_p99_ms", "send_late_ms" (open loop), "late_limit_ms", "processes": n, "rss_growth_mb",
        "kib_per_stream"}``; ``valid`` is
        None when nothing was recorded to judge by (an older run dir, or a level under ~0.1 s: fewer than
        ``MIN_LAG_SAMPLES`` timer samples and no open-loop sends).
    """
    ref, ref_name = _reference_ms(replies)
    lag_limit = max(LAG_FLOOR_MS, LAG_FRACTION * ref) if ref is not None else LAG_FLOOR_MS
    out: dict[str, Any] = {"reference": ref_name, "reference_ms": ref, "lag_limit_ms": lag_limit,
                           "processes": len(processes), "reasons": []}
    reasons: list[str] = out["reasons"]
    worst = None
    for proc in processes:
        lag = (proc.get("loop") or {}).get("loop_lag_ms") or {}
        p99 = lag.get("p99")
        if p99 is None or (lag.get("n") or 0) < MIN_LAG_SAMPLES:
            continue  # a level shorter than ~0.1 s: too few timer samples to say anything
        worst = p99 if worst is None else max(worst, p99)
        if p99 > lag_limit:
            reasons.append(f"{_who(proc)}: event-loop lag p99 {p99:.1f} ms (max {lag.get('max', p99):.1f} ms) > "
                           f"{lag_limit:.1f} ms (max of {LAG_FLOOR_MS:g} ms and {LAG_FRACTION:.0%} of the {ref_name}"
                           f"{f' {ref:.1f} ms' if ref is not None else ''}): the client was busy, so its timestamps "
                           "and sends, not the server, set these figures")
    out["loop_lag_p99_ms"] = worst
    growth = [max(0.0, (p.get("loop") or {}).get("rss_peak_mb", 0) - (p.get("loop") or {}).get("rss_start_mb", 0))
              for p in processes if (p.get("loop") or {}).get("rss_peak_mb") is not None]
    if growth and streams:
        # a bound, not an exact figure: the growth also holds replies finished and not yet written
        out["rss_growth_mb"] = round(sum(growth), 1)
        out["kib_per_stream"] = round(sum(growth) * 1024 / streams, 1)
    judged = worst is not None
    if rate:
        late = [(r["dispatched_ns"] - r["scheduled_ns"]) / 1e6 for r in replies
                if isinstance(r.get("dispatched_ns"), int) and isinstance(r.get("scheduled_ns"), int)]
        s = summarize(late)
        late_limit = max(LATE_FLOOR_MS, LATE_FRACTION * 1000.0 / rate)
        out.update(send_late_ms=s, late_limit_ms=late_limit)
        if s["n"]:
            judged = True
            p99 = s["p99"]
            if p99 is not None and p99 > late_limit:
                reasons.append(f"sends were late against the schedule: p99 {s['p99']:.1f} ms (max {s['max']:.1f} ms) "
                               f"> {late_limit:.1f} ms (max of {LATE_FLOOR_MS:g} ms and {LATE_FRACTION:.0%} of the "
                               f"mean gap {1000.0 / rate:.1f} ms at {rate:g} req/s): the arrival process was the "
                               "client's, not the one asked for")
    out["valid"] = (not reasons) if judged else None
    return out
