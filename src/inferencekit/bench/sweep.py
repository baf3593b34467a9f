"""``bench sweep``: which load point to run next, and where the SLO boundary lies. Pure functions.

A sweep walks one axis, the open-loop request rate (requests/s) or the closed-loop concurrency (streams), and asks
at each point whether the SLO holds. Two ways to walk it:

- a grid (``--request-rate 1,2,4`` or ``--concurrency 1,2,4``): every point is run, lowest first;
- a search (no grid): start at ``start``; while points meet the SLO, double (up to ``maximum``); while they miss,
  halve (down to ``minimum``) — bracketing — then bisect between the highest point that meets it and the lowest
  above it that misses, until the two are within the resolution (a fraction of the lower one for rates; one stream
  for concurrency). vLLM ``bench sweep``'s SLO search and AIPerf's adaptive search raise load until an SLO fails in
  the same way; the bisection's stopping rule is ours.

The boundary is the highest point that meets the SLO below the lowest point that misses it. When a point that meets
it lies above one that misses it (noise near the boundary, or a server that recovers under more load), the walk is
**not monotone**: the boundary stays the highest meeting point below the first miss, and the points that break the
order are named. After a search converges the boundary point is run once more (``hold``): a boundary that misses
its SLO on the second run is not held, and the sweep says so.

Every point's figures carry a 95% interval, and each target is judged three ways: ``pass`` when the whole interval
is within the limit, ``fail`` when the whole interval is beyond it, ``uncertain`` otherwise (or when n is too small
for an interval). The boundary's interval is ``[highest point below it that surely passes, lowest point that surely
fails]`` among the points run: a second sweep of the same server should find its boundary inside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferencekit.errors import OpError

__all__ = ["AXES", "STATS", "SearchSpace", "Target", "boundary", "next_point", "parse_targets"]

AXES = ("rate", "concurrency")
STATS = ("p50", "p90", "p95", "p99", "mean")
_METRICS = ("ttft", "ttfo", "tpot", "itl", "e2el")


@dataclass(frozen=True, slots=True)
class Target:
    """One percentile target of ``--slo-target``: ``stat`` (p50/p90/p95/p99/mean) of ``metric`` (``ttft_ms``,
    ``ttfo_ms``, ``tpot_ms``, ``itl_ms``, ``e2el_ms``) at or below ``limit_ms``."""

    metric: str
    stat: str
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric.removesuffix('_ms')}_{self.stat}"

    @property
    def quantile(self) -> float | None:
        """The quantile in (0, 1) of a ``pNN`` stat, None for ``mean``."""
        return None if self.stat == "mean" else int(self.stat[1:]) / 100.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric, "stat": self.stat, "limit_ms": self.limit_ms}


def parse_targets(text: str | None) -> list[Target]:
    """``ttft_p99=500,tpot_p90=50`` (milliseconds) → targets. ``--slo`` keeps its meaning (per-request limits for
    goodput); these are limits on a level's percentiles.

    Raises:
        OpError: an unknown metric or statistic, a value that is not a finite number > 0, a target given twice.
    """
    out: list[Target] = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        metric, _, stat = key.strip().lower().rpartition("_")
        if not sep or metric not in _METRICS or stat not in STATS:
            raise OpError(f"--slo-target {part!r}: use <metric>_<stat>=milliseconds with metric one of "
                          f"{', '.join(_METRICS)} and stat one of {', '.join(STATS)} (e.g. ttft_p99=500)")
        try:
            ms = float(val)
        except ValueError:
            raise OpError(f"--slo-target {part!r}: {val!r} is not a number of milliseconds") from None
        if not (ms > 0 and math.isfinite(ms)):
            raise OpError(f"--slo-target {part!r}: the limit must be a finite number > 0 ms")
        t = Target(f"{metric}_ms", stat, ms)
        if any(x.name == t.name for x in out):
            raise OpError(f"--slo-target gives {t.name} twice")
        out.append(t)
    return out


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Where a search may go on ``axis``: from ``start``, within ``[minimum, maximum]``, until the bracket is within
    ``resolution`` (rates: a fraction of the lower end, e.g. 0.1; concurrency: streams, at least 1). ``grid``, when
    given, replaces the search: exactly those points, lowest first."""

    axis: str
    start: float
    minimum: float
    maximum: float
    resolution: float
    grid: tuple[float, ...] = ()

    def round(self, x: float) -> float:
        """A point as it is run: a whole number of streams; a rate to 3 significant digits (so labels stay short)."""
        if self.axis == "concurrency":
            return float(max(1, int(x)))
        return float(f"{x:.3g}")

    def converged(self, lo: float, hi: float) -> bool:
        if self.axis == "concurrency":
            return hi - lo <= max(1.0, self.resolution)
        return hi - lo <= self.resolution * lo or self.round((lo + hi) / 2) in (lo, hi)

    def to_json(self) -> dict[str, Any]:
        return {"axis": self.axis, "start": self.start, "minimum": self.minimum, "maximum": self.maximum,
                "resolution": self.resolution, "grid": list(self.grid) or None}


def _bracket(tested: Mapping[float, bool]) -> tuple[float | None, float | None]:
    """(highest meeting point below the lowest miss, the lowest miss above it); either None when absent."""
    misses = sorted(v for v, ok in tested.items() if not ok)
    first_miss = misses[0] if misses else None
    below = [v for v, ok in tested.items() if ok and (first_miss is None or v < first_miss)]
    lo = max(below) if below else None
    return lo, first_miss


def next_point(space: SearchSpace, tested: Mapping[float, bool]) -> float | None:
    """The next point to run, given each point run so far and whether it met the SLO; None when the walk is over.

    A grid runs its points in order. A search brackets (double while meeting, halve while missing, within
    ``[minimum, maximum]``) and then bisects the bracket until ``space.converged``. It ends without a boundary when
    even ``minimum`` misses, and at ``maximum`` when that still meets.
    """
    if space.grid:
        left = [v for v in sorted(space.grid) if v not in tested]
        return left[0] if left else None
    if not tested:
        return space.round(space.start)
    lo, hi = _bracket(tested)
    if hi is None:  # everything run so far meets the SLO: go up
        top = max(tested)
        nxt = space.round(min(top * 2, space.maximum))
        return nxt if nxt > top and nxt not in tested else None
    if lo is None:  # everything below the first miss misses: go down
        nxt = space.round(max(hi / 2, space.minimum))
        return nxt if nxt < hi and nxt not in tested else None
    if space.converged(lo, hi):
        return None
    mid = space.round((lo + hi) / 2)
    return None if mid in (lo, hi) or mid in tested else mid


def boundary(space: SearchSpace, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where the SLO stops holding, from the points run.

    Args:
        points: one dict per point run: ``value`` (on the axis), ``meets`` (bool: the point estimates are within
            every target), ``certain`` (``pass`` / ``fail`` / ``uncertain``: the 95% intervals), ``label``, and
            ``held`` (False when the boundary's second run missed; absent otherwise).

    Returns:
        ``{"found", "value", "label", "ci95", "monotone", "out_of_order", "held", "reason"}`` (``held`` None when no
        point met the SLO): ``value`` the highest
        meeting point below the lowest miss (None when the lowest point misses); ``ci95`` ``[lo, hi]`` on the axis,
        the highest point at or below the boundary that surely passes and the lowest that surely fails (either None
        when no point run is that sure); ``found`` False when no point meets, or none misses (then ``value`` is the
        highest point run and the boundary lies above it).
    """
    tested = {float(p["value"]): bool(p["meets"]) for p in points}
    lo, hi = _bracket(tested)
    out_of_order = sorted(p["label"] for p in points if hi is not None and p["meets"] and p["value"] > hi)
    unit = "requests/s" if space.axis == "rate" else "streams"
    sure_pass = [float(p["value"]) for p in points if p["certain"] == "pass" and lo is not None and p["value"] <= lo]
    sure_fail = [float(p["value"]) for p in points if p["certain"] == "fail" and (lo is None or p["value"] > lo)]
    ci = [max(sure_pass) if sure_pass else None, min(sure_fail) if sure_fail else None]
    label = next((p["label"] for p in points if lo is not None and p["value"] == lo), None)
    held = None if lo is None else all(p.get("held", True) for p in points if p["value"] == lo)
    if lo is None:
        reason = (f"no point met the SLO: the lowest run, {min(tested):g} {unit}, missed it" if tested
                  else "no point was run")
        found = False
    elif hi is None:
        reason = (f"every point met the SLO up to {lo:g} {unit}, the highest " + ("of the grid" if space.grid else
                  f"run (--max {space.maximum:g})") + ": the boundary lies above it")
        found = False
    else:
        reason = f"meets the SLO at {lo:g} {unit}, misses it at {hi:g} {unit}"
        found = True
        if not held:
            reason += "; the boundary point missed the SLO when run again (not held: noise at the boundary)"
    if out_of_order:
        reason += f"; not monotone: {', '.join(out_of_order)} met the SLO above the first miss at {hi:g} {unit}"
    return {"found": found, "value": lo, "label": label, "unit": unit, "ci95": ci, "monotone": not out_of_order,
            "out_of_order": out_of_order, "held": held, "reason": reason}
