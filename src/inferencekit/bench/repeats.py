"""Load points across their repeats (``bench serve --repeats K``): each headline figure's mean and 95% interval.

A pure function of the bench record's ``data.levels`` (``bench/serve.py`` ``bench_record``): levels are grouped by
``spec.point`` (a level without one is its own point, labelled by its label), in the order they appear.

Per point and figure: with K ≥ 2 repeats, the mean of the K per-repeat figures and its Student t interval
(``stats.mean_t_ci``: the spread *between runs*, which a within-run interval cannot see); with K = 1, the
figure of the one run and, for latency percentiles, its within-run order-statistic interval (``p50_ci95`` /
``p99_ci95`` from ``bench/metrics.py``), said so in ``method``; throughput and goodput then have no interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferencekit.bench.metrics import LATENCIES
from inferencekit.stats import QUANTILE_CI_METHOD, REPEATS_CI_METHOD, mean_t_ci

__all__ = ["FIGURES", "figure_value", "interval_notes", "point_summaries", "point_levels"]

#: (figure name, unit, which is better) of every headline figure, in table order; a latency figure is
#: ``<metric>.<stat>``, the rest name their key under ``throughput`` / ``goodput``
FIGURES: tuple[tuple[str, str, str], ...] = (
    *((f"{m}.{stat}", "ms", "lower") for m in LATENCIES for stat in ("p50", "p99")),
    ("output_throughput_tok_s", "tokens/s", "higher"),
    ("request_throughput_req_s", "requests/s", "higher"),
    ("goodput_req_s", "requests/s", "higher"),
)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def figure_value(level: Mapping[str, Any], figure: str) -> tuple[float | None, list[float] | None]:
    """``(value, within-run 95% interval or None)`` of one figure of one level's metrics (a ``data.levels`` value,
    or its ``steady_state``); ``(None, None)`` when the level lacks it. Never raises on a damaged record."""
    if "." in figure:
        metric, stat = figure.split(".", 1)
        s = level.get(metric)
        if not isinstance(s, Mapping):
            return None, None
        ci = s.get(f"{stat}_ci95")
        if isinstance(ci, list) and len(ci) == 2 and all(_num(v) is not None for v in ci):
            return _num(s.get(stat)), [float(v) for v in ci]
        return _num(s.get(stat)), None
    for section in ("throughput", "goodput"):
        sec = level.get(section)
        if isinstance(sec, Mapping) and figure in sec:
            return _num(sec.get(figure)), None
    return None, None


def point_levels(levels: Mapping[str, Any]) -> dict[str, list[str]]:
    """Level labels by point, in record order; each point's labels sorted by ``spec.repeat``."""
    by_point: dict[str, list[tuple[int, str]]] = {}
    for label, lv in levels.items():
        spec = lv.get("spec") if isinstance(lv, Mapping) else None
        spec = spec if isinstance(spec, Mapping) else {}
        point = str(spec.get("point") or label)
        rep = spec.get("repeat")
        rep = rep if isinstance(rep, int) else 0
        by_point.setdefault(point, []).append((rep, str(label)))
    return {p: [lbl for _, lbl in sorted(v)] for p, v in by_point.items()}


def _summarise(values: list[float | None], within: list[float] | None, k: int, percentile: bool) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    out: dict[str, Any] = {"values": values, "n": len(got), "mean": None, "ci95": None, "method": None, "note": None}
    if len(got) < len(values):
        out["note"] = f"{len(values) - len(got)} of {k} repeats have no value for this figure"
    if k >= 2:
        ci = mean_t_ci(got)
        out["mean"] = sum(got) / len(got) if got else None
        if ci is not None:
            out.update(ci95=ci["ci"], method=REPEATS_CI_METHOD)
            if ci["ci"][0] < 0 <= min(got):  # every figure here is ≥ 0: the symmetric t interval overshot
                out["ci95"] = [0.0, ci["ci"][1]]
                out["note"] = "; ".join(x for x in (out["note"], "the t interval's lower end was below 0 (the repeats "
                                                    "vary too much for a symmetric interval): clipped at 0") if x)
        else:
            out["note"] = "; ".join(x for x in (out["note"], "fewer than 2 repeats with a value: no interval") if x)
        return out
    out["mean"] = got[0] if got else None
    if within is not None:
        out.update(ci95=within, method=f"one run: within-run {QUANTILE_CI_METHOD}; run-to-run variance not measured")
    elif percentile:
        out["method"] = ("one run: too few values for a within-run order-statistic interval (p50 needs 6, p99 368); "
                         "run-to-run variance not measured")
    else:
        out["method"] = "one run: no interval (run-to-run variance not measured)"
    return out


def _figures(levels: Mapping[str, Any], labels: list[str], steady: bool) -> dict[str, Any]:
    figs: dict[str, Any] = {}
    k = len(labels)
    for figure, unit, better in FIGURES:
        if figure == "goodput_req_s" and not any(isinstance(levels[lbl].get("goodput"), Mapping) for lbl in labels):
            continue
        pairs = []
        for lbl in labels:
            src = levels[lbl].get("steady_state") if steady else levels[lbl]
            pairs.append(figure_value(src if isinstance(src, Mapping) else {}, figure))
        figs[figure] = {"unit": unit, "better": better,
                        **_summarise([v for v, _ in pairs], pairs[0][1] if k == 1 else None, k, "." in figure)}
    return figs


def point_summaries(levels: Mapping[str, Any]) -> dict[str, Any]:
    """Per load point: its repeat labels and every ``FIGURES`` figure across them, for the whole levels and for
    their steady-state windows.

    Args:
        levels: the bench record's ``data.levels`` (label → level metrics with ``spec``; ``steady_state`` when the
            metrics have it).

    Returns:
        ``{point: {"labels": [...], "repeats": K, "figures": {figure: F}, "steady_state": {figure: F}}}`` with
        ``F = {"unit", "better", "values": [per repeat, None where missing], "n", "mean", "ci95": [lo, hi] | None,
        "method", "note"}``. A goodput figure is left out when no level of the point has goodput (no ``--slo``).
    """
    out: dict[str, Any] = {}
    for point, labels in point_levels(levels).items():
        out[point] = {"labels": labels, "repeats": len(labels), "figures": _figures(levels, labels, False),
                      "steady_state": _figures(levels, labels, True)}
    return out


def interval_notes(points: Mapping[str, Any], levels: Mapping[str, Any]) -> list[str]:
    """The record's limitation lines about intervals and over-saturation: points run once (within-run
    intervals only), latency figures left without an interval (and why), and every level flagged
    over-saturated (``levels.<label>.over_saturation.flag``)."""
    out: list[str] = []
    once = [p for p, v in points.items() if v.get("repeats", 0) < 2]
    if once:
        out.append(f"load point(s) {', '.join(once)} ran once: their 95% intervals are within-run order-statistic "
                   "intervals of the latency percentiles only; run-to-run variance is not measured (--repeats 3 "
                   "measures it) and throughput and goodput have no interval")
    missing: dict[str, list[str]] = {}
    for p, v in points.items():
        for fig, f in (v.get("figures") or {}).items():
            if "." in fig and f.get("ci95") is None and f.get("mean") is not None:
                missing.setdefault(fig, []).append(p)
    if missing:
        listed = "; ".join(f"{fig} at {', '.join(ps)}" for fig, ps in missing.items())
        out.append(f"no 95% interval for {listed}: a within-run order-statistic interval needs ≥ 6 values for a p50 "
                   "and ≥ 368 for a p99 (equal-tailed); across repeats, ≥ 2 repeats with a value")
    for label, lv in levels.items():
        o = lv.get("over_saturation") if isinstance(lv, Mapping) else None
        if isinstance(o, Mapping) and o.get("flag") is True:
            out.append(f"level {label} is over-saturated: {o.get('reason')}; its figures describe a growing queue, "
                       "not a load the server sustains")
    return out
