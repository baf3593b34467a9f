"""The steady-state window of a load level, and the over-saturation flag — pure functions over reply dicts.

A level starts from an idle server (every stream sends at once, or arrivals find an empty queue) and ends
with a drain (after the last send the in-flight count falls to 0). Figures over the whole level mix both
with the steady part. The window cuts them off; its figures stand beside the whole level's (``level_metrics``).

Window (times on the level's common clock, ``shapes.reply_start_ns`` / ``reply_end_ns``; reported in seconds
from the level's first send):

* start, closed loop: when the first wave has completed — the first wave is every request sent before the
  first request ended (the ``concurrency`` requests sent together at the start), and the start is the last of
  their ends. From then on every stream is in its own rhythm.
* start, open loop: the first end of any request. Before it nothing has left the server, so the in-flight
  count only rises (the fill); after it arrivals and departures both happen.
* a warm-up phase (``warmup_s``, seconds from the level start, when the level has one) moves the start to its
  end if that is later. A ``--ramp-up-strategy`` level (``ramp``) has no window: vLLM's ramp raises the rate
  request by request over the whole level.
* end: the last send of the level; after it the load only drains. In an open-loop level of multi-turn sessions
  (``bench/runner.py``) only a session's first turn is scheduled: the end is then the last scheduled send (the
  last session start), after which no new work is offered and the sessions in flight only drain.

Requests *measured* in the window (latency figures) are those both sent and ended inside it; requests
*finished* in it (throughput and goodput, over the window's length) are those that ended inside it (after the
start, at or before the end), wherever they were sent (a request that straddles the start brings tokens made
before it: at most one request per stream). A window of zero or negative length is empty: its figures are null,
with the reason. Throughput and goodput need ``MIN_TREND_N`` requests ended in the window (a count of n
has a relative error of about 1/√n: 32% at 10); with fewer they are null and ``throughput_note`` says why.

Over-saturation (open loop only: a closed loop holds at most ``concurrency`` requests, so no queue can grow):
the queueing seen by a request is its scheduled-send → first-token time (``scheduled_ttft``, which counts the
client's lateness and the concurrency cap's queue; the TTFT when the request has no schedule). Over the
requests sent inside the window (the whole level's sends when the window holds fewer than ``MIN_TREND_N``):
flagged when Kendall's τ of that time against the scheduled send time is positive with one-sided
p < ``TREND_P`` (``scipy.stats.kendalltau``, ``alternative="greater"``) AND the Theil–Sen slope
(``scipy.stats.theilslopes``) times the span of send times exceeds ``GROWTH_FRACTION`` of the median (the
queueing grew by more than half its typical value across the window). Fewer than ``MIN_TREND_N`` requests:
not judged (null). In a level of sessions only the scheduled requests (the session starts) are judged: a later
turn's TTFT grows with its history, and later turns crowd the end of a level, a rising trend with no queue.
The idea — a rising TTFT (and in-flight count) over time means the arrival rate exceeds
the service rate, so the level's figures describe a growing queue, not a load the server sustains — is
GuideLLM's over-saturation detection (docs/guides/over_saturation_stopping.md: positive, statistically
significant TTFT and concurrency slopes) and AIPerf's warning for unsustainable request rates; the
rank test is ours (Kendall 1938; Sen 1968): it does not assume a linear or normal trend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferencekit.shapes import reply_end_ns, reply_start_ns

__all__ = ["GROWTH_FRACTION", "MIN_TREND_N", "OVERSATURATION_RULE", "TREND_P", "WINDOW_RULE", "SteadyWindow",
           "over_saturation", "steady_window"]

MIN_TREND_N = 10
TREND_P = 0.01
GROWTH_FRACTION = 0.5

WINDOW_RULE = ("start: closed loop, the last end among the first wave (every request sent before the first end); "
               "open loop, the first end; later if a warm-up phase ends later; none for a ramp-up level. end: the last "
               "send (open-loop sessions: the last session start). Latency over requests sent and ended inside; "
               "throughput and goodput over requests ended inside "
               "÷ the window's length")
OVERSATURATION_RULE = (f"open loop: Kendall τ of scheduled TTFT vs scheduled send > 0 with one-sided p < {TREND_P} "
                       f"AND Theil–Sen slope × send span > {GROWTH_FRACTION:.0%} of the median scheduled TTFT, over "
                       f"the window's sends (the level's when the window has < {MIN_TREND_N}; open-loop sessions: "
                       f"their first turns only); fewer than {MIN_TREND_N} requests: not judged")


@dataclass(frozen=True, slots=True)
class SteadyWindow:
    """A level's steady-state window: bounds in s from the level's first send, and the replies in it.

    ``measured``: replies sent and ended inside (latency figures); ``finished``: replies ended inside
    (throughput); ``sent``: replies sent inside (the over-saturation test). ``reason`` says why the window is
    empty (None when it is not).
    """

    start_s: float | None
    end_s: float | None
    rule: str
    measured: list[Mapping[str, Any]] = field(default_factory=list)
    finished: list[Mapping[str, Any]] = field(default_factory=list)
    sent: list[Mapping[str, Any]] = field(default_factory=list)
    first_wave: int = 0
    reason: str | None = None

    @property
    def duration_s(self) -> float:
        if self.start_s is None or self.end_s is None:
            return 0.0
        return max(0.0, self.end_s - self.start_s)

    def describe(self) -> dict[str, Any]:
        """The window as recorded: ``{start_s, end_s, duration_s, first_wave, requests: {sent, finished,
        measured}, rule, empty}`` (``empty`` is the reason, or null)."""
        return {"start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s,
                "first_wave": self.first_wave,
                "requests": {"sent": len(self.sent), "finished": len(self.finished), "measured": len(self.measured)},
                "rule": self.rule, "empty": self.reason}


def _is_scheduled(item: Any) -> bool:
    r = item[0] if isinstance(item, tuple) else item
    return isinstance(r.get("scheduled_ns"), int)


def _scheduled(items: Sequence[Any], open_loop: bool) -> Sequence[Any]:
    """Of an open-loop level's replies (or ``(reply, start, end)`` rows), the scheduled ones when some are not: a
    session level's later turns follow their predecessor's reply, not the arrival process (every request of any
    other open-loop level is scheduled, so it is returned whole). Closed loop: all of them."""
    if not open_loop:
        return items
    scheduled = [x for x in items if _is_scheduled(x)]
    return scheduled if scheduled and len(scheduled) < len(items) else items


def _times(replies: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], int, int]]:
    out = []
    for r in replies:
        s, e = reply_start_ns(r), reply_end_ns(r)
        if s is not None and e is not None:
            out.append((r, s, e))
    return out


def steady_window(replies: Sequence[Mapping[str, Any]], *, open_loop: bool = False,
                  warmup_s: float | None = None, ramp: bool = False) -> SteadyWindow:
    """The steady-state window of one level (rule in the module docstring).

    Args:
        replies: every reply of the level (failed ones too: a failure also frees its stream), with ``sent_ns``
            and ``events`` (or ``clock_offset_ns``) as the client writes them.
        open_loop: the level's arrivals follow a schedule (``--request-rate``).
        warmup_s: seconds from the level's first send until a warm-up phase ends, when it has one.
        ramp: the level is a ``--ramp-up-strategy`` level: vLLM's ramp raises the rate request by request over
            the whole level, so it has no steady part (an empty window, said so).
    """
    rows = _times(replies)
    if not rows:
        return SteadyWindow(None, None, WINDOW_RULE, reason="no request with a send time")
    if ramp:
        return SteadyWindow(None, None, WINDOW_RULE, reason="a ramp-up level raises its rate over all its requests "
                                                            "(vLLM's --ramp-up-strategy): it has no steady part")
    t0 = min(s for _, s, _ in rows)
    first_end = min(e for _, _, e in rows)
    wave = [(r, s, e) for r, s, e in rows if s < first_end] or [min(rows, key=lambda x: x[1])]
    start_ns = first_end if open_loop else max(e for _, _, e in wave)
    if warmup_s is not None and warmup_s > 0:
        start_ns = max(start_ns, t0 + int(warmup_s * 1e9))
    end_ns = max(s for _, s, _ in _scheduled(rows, open_loop))
    start_s, end_s = (start_ns - t0) / 1e9, (end_ns - t0) / 1e9
    if end_ns <= start_ns:
        return SteadyWindow(start_s, end_s, WINDOW_RULE, first_wave=len(wave),
                            reason="the level's last send came before its warm-up ended: no steady part (more "
                                   "requests per level, or a longer --duration, give one)")
    return SteadyWindow(
        start_s, end_s, WINDOW_RULE, first_wave=len(wave),
        measured=[r for r, s, e in rows if s >= start_ns and e <= end_ns],
        finished=[r for r, s, e in rows if start_ns < e <= end_ns],
        sent=[r for r, s, e in rows if start_ns <= s <= end_ns])


def _queueing(r: Mapping[str, Any]) -> tuple[float, float] | None:
    """(scheduled send in ns, scheduled TTFT in ms) of a completed reply; the actual send and TTFT without a
    schedule; None without a TTFT."""
    ttft, sent = r.get("ttft_ms"), reply_start_ns(r)
    if not isinstance(ttft, (int, float)) or sent is None:
        return None
    sched, actual = r.get("scheduled_ns"), r.get("sent_ns")
    if isinstance(sched, int) and isinstance(actual, int):
        lag_ns = actual - sched
        return float(sent - lag_ns), float(ttft) + lag_ns / 1e6
    return float(sent), float(ttft)


def over_saturation(replies: Sequence[Mapping[str, Any]], window: SteadyWindow, *,
                    open_loop: bool) -> dict[str, Any]:
    """The over-saturation flag of one level (rule in the module docstring, thresholds ``TREND_P``,
    ``GROWTH_FRACTION``, ``MIN_TREND_N``).

    Returns:
        ``{"flag": bool | None, "applicable": bool, "rule", "over": "window" | "level" | None, "n",
        "kendall_tau", "p_value", "slope_ms_per_s", "growth_fraction", "reason"}``: ``flag`` None when not judged
        (closed loop, or too few requests), with ``reason``; ``growth_fraction`` is the Theil–Sen slope times the
        send span over the median scheduled TTFT.
    """
    out: dict[str, Any] = {"flag": None, "applicable": open_loop, "rule": OVERSATURATION_RULE, "over": None, "n": 0,
                           "kendall_tau": None, "p_value": None, "slope_ms_per_s": None, "growth_fraction": None,
                           "reason": None}
    if not open_loop:
        out["reason"] = "closed loop: at most `concurrency` requests are in flight, so no queue can grow"
        return out
    pts = [q for q in map(_queueing, _scheduled(window.sent, True)) if q is not None]
    out["over"] = "window"
    if len(pts) < MIN_TREND_N:  # also a ramp-up level (no window): then a flag says the ramp passed the capacity
        pts = [q for q in map(_queueing, _scheduled(replies, True)) if q is not None]
        out["over"] = "level"
    out["n"] = len(pts)
    if len(pts) < MIN_TREND_N:
        out["reason"] = f"{len(pts)} completed requests with a TTFT: fewer than {MIN_TREND_N}, not judged"
        return out
    from scipy.stats import kendalltau, theilslopes

    x = np.array([p[0] for p in pts]) / 1e9  # s
    y = np.array([p[1] for p in pts])  # ms
    res = kendalltau(x, y, alternative="greater")
    tau, p = float(res.statistic), float(res.pvalue)
    slope = float(theilslopes(y, x).slope)
    med = float(np.median(y))
    growth = slope * float(x.max() - x.min()) / med if med > 0 else None
    out.update(kendall_tau=tau, p_value=p, slope_ms_per_s=slope, growth_fraction=growth)
    if not np.isfinite(tau) or growth is None:
        out["reason"] = "no trend can be computed (every scheduled TTFT or every send time equal)"
        return out
    out["flag"] = bool(tau > 0 and p < TREND_P and growth > GROWTH_FRACTION)
    out["reason"] = (f"queueing grew {growth:.0%} of its median across the sends (τ {tau:.2f}, p {p:.2g})"
                     if out["flag"] else
                     f"no growth beyond the thresholds (τ {tau:.2f}, p {p:.2g}, growth {growth:.0%} of the median)")
    return out
