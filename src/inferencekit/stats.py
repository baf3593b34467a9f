"""Statistics shared by every judge: distribution summaries and the verdict combiner.

Percentiles use numpy's default linear interpolation (Hyndman & Fan type 7), the same as vLLM's
``bench serve`` (``np.percentile``), so p99 figures compare like for like. ``std`` is the population
standard deviation (ddof=0), also as vLLM reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["VERDICTS", "PERCENTILES", "summarize", "combine_claims", "wilson_interval"]

VERDICTS = ("PASS", "FAIL", "UNPROVEN", "NOT RUN")
PERCENTILES = (50, 90, 95, 99)


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """``{n, mean, std, min, max, p50, p90, p95, p99}`` of ``values``; every statistic None when empty.

    Args:
        values: samples in one unit (the caller's; names carry it, e.g. ``ttft_ms``).
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None,
                **{f"p{p}": None for p in PERCENTILES}}
    pct = np.percentile(arr, PERCENTILES)
    return {"n": int(arr.size), "mean": float(arr.mean()), "std": float(arr.std()), "min": float(arr.min()),
            "max": float(arr.max()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct)}}


def combine_claims(verdicts: Iterable[str]) -> str:
    """One verdict for several (DESIGN.md): any FAIL → FAIL; else any UNPROVEN → UNPROVEN; else any
    PASS → PASS; else NOT RUN.

    Raises:
        ValueError: a verdict outside PASS/FAIL/UNPROVEN/NOT RUN.
    """
    seen = set()
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"unknown verdict {v!r}")
        seen.add(v)
    for v in ("FAIL", "UNPROVEN", "PASS"):
        if v in seen:
            return v
    return "NOT RUN"


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion of ``k`` successes in ``n`` trials (Wilson 1927), as computed
    by ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.

    Raises:
        ValueError: ``n`` < 1 or ``k`` outside [0, n].
    """
    from scipy.stats import binomtest

    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)
