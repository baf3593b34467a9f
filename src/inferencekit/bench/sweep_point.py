"""Does one ``bench sweep`` point meet its SLO? Pure functions over the point's reply files.

A point is one load value run once, or ``--repeats K`` times (K levels). Its figures:

- a percentile target (``--slo-target ttft_p99=500``): run once, the level's percentile (numpy's linear
  interpolation, the figure the bench record shows) with its distribution-free order-statistic 95% interval
  (``stats.quantile_ci``; None when n is too small, e.g. below 368 requests for a p99); repeated, the mean of the
  K per-repeat percentiles with its Student t 95% interval (``stats.mean_t_ci``), which holds the run-to-run
  variance a single run's interval cannot;
- a mean target: the mean, with a t interval over the requests (run once) or over the repeats;
- ``--goodput F`` with ``--slo``: the fraction of the point's requests that met every per-request limit
  (``bench/metrics.py`` goodput), with its Wilson 95% interval (``stats.wilson_interval``).

A failed request (an error, an HTTP error, a stream with no token) has no latency to rank: a point with any failed
request misses its SLO, certainly (the requests are on disk; the failure is a fact, not an estimate), and says how
many failed. Each target is ``pass`` (interval within the limit), ``fail`` (interval beyond it) or ``uncertain``;
the point meets the SLO when every point estimate is within its limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferencekit.bench.metrics import level_metrics
from inferencekit.bench.sweep import Target
from inferencekit.shapes import is_ok, n_out
from inferencekit.stats import mean_t_ci, quantile_ci, wilson_interval

__all__ = ["judge_point", "request_values"]


def _completed(r: Mapping[str, Any]) -> bool:
    return is_ok(r) and r.get("no_tokens") is not True and r.get("chunks") != 0


def request_values(replies: Sequence[Mapping[str, Any]], retokenized: Mapping[str, int] | None = None
                   ) -> dict[str, list[float]]:
    """Per-request values in ms of the completed replies of one level, by metric (``ttft_ms``, ``ttfo_ms``,
    ``e2el_ms``, ``tpot_ms`` = (E2EL − TTFT)/(N_out − 1) for N_out ≥ 2, and ``itl_ms``, every gap pooled), as
    ``bench/metrics.py`` defines them (docs/design.md, metric definitions)."""
    out: dict[str, list[float]] = {k: [] for k in ("ttft_ms", "ttfo_ms", "e2el_ms", "tpot_ms", "itl_ms")}
    retok = retokenized or {}
    for r in replies:
        if not _completed(r):
            continue
        for k in ("ttft_ms", "ttfo_ms", "e2el_ms"):
            v = r.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k].append(float(v))
        n, _ = n_out(r, retok.get(str(r.get("_key", ""))))
        ttft, e2el = r.get("ttft_ms"), r.get("e2el_ms")
        if n is not None and n >= 2 and isinstance(ttft, (int, float)) and isinstance(e2el, (int, float)):
            out["tpot_ms"].append((e2el - ttft) / (n - 1))
        out["itl_ms"].extend(float(g) for g in (r.get("itl_ms") or []) if isinstance(g, (int, float)))
    return out


def _figure(values: list[float], stat: str) -> float | None:
    if not values:
        return None
    if stat == "mean":
        return float(np.mean(values))
    return float(np.percentile(values, int(stat[1:])))


def _target_figure(target: Target, per_level: Sequence[list[float]]) -> dict[str, Any]:
    """One target's figure over the point's levels: value, ci95, n, method, status."""
    k = len(per_level)
    figures = [_figure(v, target.stat) for v in per_level]
    n = sum(len(v) for v in per_level)
    ci: list[float] | None = None
    if k == 1:
        value = figures[0]
        if target.quantile is not None:
            q = quantile_ci(per_level[0], target.quantile) if per_level[0] else None
            ci = q["ci"] if q else None
            method = "order-statistic interval of the level's requests"
        else:
            m = mean_t_ci(per_level[0], lower=0.0) if len(per_level[0]) >= 2 else None
            ci = m["ci"] if m else None
            method = "Student t interval over the level's requests"
    else:
        known = [f for f in figures if f is not None]
        value = float(np.mean(known)) if len(known) == k else None
        m = mean_t_ci(known, lower=0.0) if value is not None else None
        ci = m["ci"] if m else None
        method = f"Student t interval over the {k} repeats' figures"
    lim = target.limit_ms
    status = ("uncertain" if ci is None else "pass" if ci[1] <= lim else "fail" if ci[0] > lim else "uncertain")
    return {"value": value, "ci95": ci, "n": n, "repeats": k, "per_repeat": figures if k > 1 else None,
            "limit_ms": lim, "meets": value is not None and value <= lim, "status": status, "method": method,
            "why_no_interval": None if ci is not None or value is None else
            (f"{n} requests are too few for a 95% interval of a {target.stat}" if k == 1 else
             "the repeats' figures are not all known")}


def judge_point(levels: Sequence[Sequence[Mapping[str, Any]]], targets: Sequence[Target], *,
                slo: Mapping[str, float] | None = None, min_goodput: float | None = None,
                retokenized: Sequence[Mapping[str, int] | None] | None = None) -> dict[str, Any]:
    """Judge one point from the reply dicts of each of its levels (one per repeat).

    Args:
        levels: per level (repeat), its reply dicts (``_key`` set when ``retokenized`` is given).
        targets: the ``--slo-target`` limits.
        slo: ``--slo`` per-request limits (ms), for ``min_goodput``.
        min_goodput: ``--goodput``: the least fraction of requests that must meet ``slo``, in (0, 1].
        retokenized: per level, re-tokenized output counts by file stem (or None).

    Returns:
        ``{"meets", "certain", "reason", "requests", "failed", "figures": {target name: figure}, "goodput"}``;
        ``certain`` is ``pass`` (every target's interval within its limit), ``fail`` (one beyond, or a failed
        request) or ``uncertain``.
    """
    rts = list(retokenized or [None] * len(levels))
    total = sum(len(lv) for lv in levels)
    failed = sum(1 for lv in levels for r in lv if not _completed(r))
    values = [request_values(lv, rt) for lv, rt in zip(levels, rts)]
    figures = {t.name: _target_figure(t, [v[t.metric] for v in values]) for t in targets}
    statuses = [f["status"] for f in figures.values()]
    meets = all(f["meets"] for f in figures.values())
    missed = [name for name, f in figures.items() if not f["meets"]]
    goodput: dict[str, Any] | None = None
    if min_goodput is not None and slo:
        good = 0
        for lv, rt in zip(levels, rts):
            m = level_metrics(lv, slo=slo, retokenized=rt)
            good += int(m["goodput"]["good_requests"])
        frac = good / total if total else None
        lo, hi = wilson_interval(good, total) if total else (0.0, 1.0)
        g_status = "pass" if lo >= min_goodput else "fail" if hi < min_goodput else "uncertain"
        goodput = {"good_requests": good, "requests": total, "fraction": frac, "ci95": [lo, hi],
                   "min_fraction": min_goodput, "slo": dict(slo), "meets": frac is not None and frac >= min_goodput,
                   "status": g_status, "method": "Wilson score interval over the point's requests"}
        meets = meets and goodput["meets"]
        statuses.append(g_status)
        if not goodput["meets"]:
            missed.append(f"goodput {frac:.3f} < {min_goodput:g}" if frac is not None else "goodput unknown")
    if failed:
        meets = False
        certain = "fail"
        reason = f"{failed} of {total} requests failed: a point with failed requests misses its SLO"
    else:
        certain = ("fail" if "fail" in statuses else "pass" if statuses and all(s == "pass" for s in statuses)
                   else "uncertain")
        reason = "meets every target" if meets else "misses " + ", ".join(missed)
        if not targets and goodput is None:
            meets, certain, reason = False, "uncertain", "no target to judge"
    return {"meets": meets, "certain": certain, "reason": reason, "requests": total, "failed": failed,
            "figures": figures, "goodput": goodput}
