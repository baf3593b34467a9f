"""Calibration cells from recorded calibration runs (pure): thresholds from honest replicas, false alarms on held-out
honest runs, power per substitute.

A *run record* is one calibration run as ``equivalence_calibrate`` writes it (one JSON line): ``{"run": i,
"config": name, …}`` with, for the logprob series, ``"budgets": {"<tokens>": {"kl+gap": x, "gap": y, …}}`` and, for
the first-token series, ``"distances": {prompt id: d}``. Runs of one series are numbered; run ``i`` of every
configuration used the same prompts, and no two runs of one configuration share one.

The rules (issue 20; formulas in ``equivalence_stats``):

- honest runs of even index form the fit set, pooled across the claim's honest replicas; the threshold is the
  split-conformal quantile at α (``threshold_at``); α is the one asked, or 5% when the fit set is too small for it
  (the cell says so in ``alpha_cut``);
- honest runs of odd index are held out: their alarms, and the Clopper–Pearson upper bound on the rate;
- a substitute's power is the share of its runs above the threshold, with the Clopper–Pearson lower bound;
- a replica whose own fit half could not set a threshold at the cell's α is listed in ``thin_replicas``: pooled in,
  but the cell's false-alarm figure does not bound it.

First-token budgets are requests: a run of ``budget`` requests is a block of ``budget / run_prompts`` consecutive
runs, its statistic the mean distance over the block's prompts (as the audit computes it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.quality.equivalence_stats import power_cell, rate_upper, threshold_at

__all__ = ["Records", "make_cell", "run_cells", "logprob_cells", "text_cells", "first_blocks", "first_token_cells"]

Records = Mapping[str, Sequence[Mapping[str, Any]]]  # config name → its run records


def make_cell(fit: Sequence[float], held: Mapping[str, Sequence[float]], runs_by_replica: Mapping[str, int],
              substitutes: Mapping[str, Sequence[float]], alpha: float) -> dict[str, Any]:
    """The judged part of one cell.

    Args:
        fit: honest run statistics that set the threshold.
        held: held-out honest run statistics per replica.
        runs_by_replica: each honest replica's runs at this budget (fit and held-out).
        substitutes: each substitute's run statistics.
        alpha: the false-alarm rate asked (relaxed to 5% when ``fit`` is too small for it).

    Returns:
        ``{"alpha", "threshold", "alpha_cut", "honest": {…}, "substitutes": [{name, runs, detected, power,
        power_lower}, …]}``, substitutes from the most to the least detected.
    """
    thr = threshold_at(fit, alpha)
    cut = None
    if thr is None and alpha < 0.05:
        cut = (f"{len(fit)} fit runs are too few for α = {100 * alpha:g}% (the split-conformal quantile needs ≥ "
               f"{math.ceil(1 / alpha) - 1}): this cell is at α = 5%")
        alpha, thr = 0.05, threshold_at(fit, 0.05)
    n_held = sum(len(v) for v in held.values())
    alarms = sum(x > thr for v in held.values() for x in v) if thr is not None else None
    # a replica's fit half holds about ceil(n / 2) of its n runs (even indices)
    thin = [f"{c}: {n} run(s)" for c, n in runs_by_replica.items() if 0 < n and -(-n // 2) < math.ceil(1 / alpha) - 1]
    subs = [{"name": s, **power_cell(v, thr)} for s, v in substitutes.items() if v]
    return {"alpha": alpha, "threshold": thr, "alpha_cut": cut,
            "honest": {"fit_runs": len(fit), "heldout_runs": n_held, "heldout_alarms": alarms,
                       "heldout_rate_upper": rate_upper(alarms, n_held) if alarms is not None else None,
                       "replicas": sorted(c for c, n in runs_by_replica.items() if n),
                       "runs_by_replica": {c: n for c, n in runs_by_replica.items() if n},
                       "heldout_alarms_by_replica": ({c: sum(x > thr for x in v) for c, v in held.items()
                                                      if runs_by_replica.get(c)} if thr is not None else {}),
                       "thin_replicas": thin},
            "substitutes": sorted(subs, key=lambda c: -(c["power"] or 0))}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _vals(rs: Sequence[Mapping[str, Any]], budget: int, name: str) -> list[float]:
    """The runs' statistic ``name`` at ``budget``: finite values only (a run without one, or with NaN or ±inf, has
    no statistic an audit could be judged by, and is left out)."""
    got = ((r.get("budgets") or {}).get(str(budget)) or {} for r in rs)
    return [float(v[name]) for v in got if _finite(v.get(name))]


def logprob_cells(claim: str, recs: Records, honest: Sequence[str], substitutes: Sequence[str],
                  budgets: Sequence[int], alpha_for: Any, fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The logprob cells of one series (statistics ``kl+gap`` and ``gap``), one per statistic × budget with a fit set.

    Args:
        recs: the series' run records by configuration.
        honest, substitutes: configuration names of each kind.
        budgets: output-token budgets the series' runs recorded.
        alpha_for: budget → α asked.
        fields: written into every cell (series, pool, max_tokens, top_logprobs, machine …).
    """
    return run_cells("logprob", ("kl+gap", "gap"), claim, recs, honest, substitutes, budgets, alpha_for, fields)


def text_cells(claim: str, recs: Records, honest: Sequence[str], substitutes: Sequence[str],
               budgets: Sequence[int], alpha: float, fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The text cells of one series (statistic ``mmd``, budgets in requests), as ``logprob_cells``."""
    return run_cells("text", ("mmd",), claim, recs, honest, substitutes, budgets, lambda b: alpha,
                     {"unit": "requests", **fields})


def run_cells(method: str, names: Sequence[str], claim: str, recs: Records, honest: Sequence[str],
              substitutes: Sequence[str], budgets: Sequence[int], alpha_for: Any,
              fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Cells of a series whose runs record one statistic per budget (``"budgets": {b: {name: x}}``)."""
    cells = []
    for name in names:
        for b in budgets:
            runs = [r for c in honest for r in recs.get(c, ())]
            fit = _vals([r for r in runs if int(r["run"]) % 2 == 0], b, name)
            if not fit:
                continue
            held = {c: _vals([r for r in recs.get(c, ()) if int(r["run"]) % 2 == 1], b, name) for c in honest}
            per = {c: len(_vals(recs.get(c, ()), b, name)) for c in honest}
            subs = {s: _vals(recs.get(s, ()), b, name) for s in substitutes}
            cells.append({"method": method, "claim": claim, "statistic": name, "budget": b, **fields,
                          **make_cell(fit, held, per, subs, alpha_for(b))})
    return cells


def first_blocks(rs: Sequence[Mapping[str, Any]], budget: int, run_prompts: int) -> list[tuple[int, float]]:
    """(block index, statistic) of each complete block of ``budget / run_prompts`` consecutive runs: the mean
    distance over the block's usable prompts (blocks with a missing run or no usable prompt left out; non-finite
    distances left out).

    Raises:
        ValueError: ``budget`` is not a positive multiple of ``run_prompts``, or a run number repeats.
    """
    if run_prompts < 1 or budget < run_prompts or budget % run_prompts:
        raise ValueError(f"a budget of {budget} requests is not a multiple of {run_prompts}-prompt runs")
    per = budget // run_prompts
    by_run = {int(r["run"]): r for r in rs}
    if len(by_run) != len(rs):
        raise ValueError("a run number repeats in the records")
    out = []
    for b in sorted({i // per for i in by_run}):
        members = [by_run.get(b * per + j) for j in range(per)]
        if any(m is None for m in members):
            continue
        ds = [float(d) for m in members for d in ((m or {}).get("distances") or {}).values() if _finite(d)]
        if ds:
            out.append((b, sum(ds) / len(ds)))
    return out


def first_token_cells(claim: str, recs: Records, honest: Sequence[str], substitutes: Sequence[str],
                      budgets: Sequence[int], run_prompts: int, alpha: float,
                      fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The first-token cells of one series, one per budget (in requests) with a fit set; blocks of even index fit,
    odd ones are held out (as ``logprob_cells`` does with runs)."""
    cells = []
    have = [c for c in honest if recs.get(c)]
    for b in budgets:
        blocks = {c: first_blocks(recs[c], b, run_prompts) for c in have}
        fit = [v for c in have for i, v in blocks[c] if i % 2 == 0]
        if not fit:
            continue
        held = {c: [v for i, v in blocks[c] if i % 2 == 1] for c in have}
        subs = {s: [v for _, v in first_blocks(recs.get(s, ()), b, run_prompts)] for s in substitutes}
        cells.append({"method": "first_token", "claim": claim, "statistic": "first_token", "budget": b,
                      "unit": "requests", **fields,
                      **make_cell(fit, held, {c: len(blocks[c]) for c in have}, subs, alpha)})
    return cells


def machines_of(recs: dict[str, list[dict[str, Any]]]) -> str:
    """The machines a series' runs were made on, for a cell's ``machine`` field.

    Args:
        recs: run records by config; each may carry ``machine`` (the calibration script records it since
            2026-12-04) and must carry ``run``.

    Returns:
        The one machine, or each machine with the count of runs made on it (``"A (60 runs); B (20 runs)"``).
        Runs without the field are named "machine not recorded", never given the CPU of whoever builds the table.
    """
    seen: dict[str, int] = {}
    for rows in recs.values():
        for r in rows:
            m = str(r.get("machine") or "machine not recorded")
            seen[m] = seen.get(m, 0) + 1
    if len(seen) <= 1:
        return next(iter(seen), "machine not recorded")
    return "; ".join(f"{m} ({n} runs)" for m, n in sorted(seen.items()))
