"""The equivalence audit's verdict (pure): a run statistic against a calibration table.

A calibration table (``benchmarks/equivalence_calibration.py`` writes one; the shipped one covers the
embedded model) holds *cells*, one per method × claim × budget::

    {"method": "logprob", "claim": "F16", "budget": 300, "alpha": 0.01, "statistic": "kl_mean + gap_mean",
     "threshold": 0.031, "honest": {"fit_runs": 300, "heldout_runs": 299, "heldout_alarms": 0,
                                    "replicas": ["llama-server --parallel 1", ...]},
     "substitutes": [{"name": "q4_0", "runs": 59, "detected": 59, "power_lower": 0.9505}, ...]}

Substitutes are listed from the largest difference to the smallest (the calibration orders them so).
The rules, from issue 20:

- FAIL: the statistic is above the cell's threshold. The reason names the statistic, its value, the
  threshold, α, and the false-alarm rate the held-out honest runs bound (Clopper–Pearson, 95%).
- PASS: at or below the threshold *and* the cell reaches ≥ 95% power (lower bound) against at least
  one substitute. The claim is bounded: which substitutes it would have detected at ≥ 95%, the power
  against the others, and that differences smaller than the last one detected are not ruled out.
- UNPROVEN: no cell for this method and claim at a budget the run reached, a cell that reaches 95%
  power against no substitute, or a run with no statistic (named in each case).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.quality.equivalence_stats import rate_upper
from inferencekit.stats import Verdict

__all__ = ["MADE_FIELDS", "POWER_TARGET", "pick_cell", "judge_equivalence", "power_sentence", "cell_notes"]

POWER_TARGET = 0.95


MADE_FIELDS = ("pool", "max_tokens", "top_logprobs")  # how a cell's runs were made (equivalence_pool.pool_fields)


def _same(c: Mapping[str, Any], method: str, claim: str, name: str | None) -> bool:
    return (c.get("method") == method and str(c.get("claim", "")).upper() == claim.upper()
            and (name is None or c.get("statistic") == name))


def _made_alike(c: Mapping[str, Any], made: Mapping[str, Any] | None) -> bool:
    """The cell's runs were made as this run was: same pool, max_tokens and k (a field either side lacks is not
    compared)."""
    return made is None or all(c.get(k) is None or made.get(k) is None or c.get(k) == made.get(k)
                               for k in MADE_FIELDS)


def pick_cell(cells: Sequence[Mapping[str, Any]], method: str, claim: str, budget_used: float,
              name: str | None = None, made: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
    """The cell of ``method``, ``claim`` (and statistic ``name``, when given) with the largest budget the run reached
    (``budget <= budget_used``), among the cells made as the run was (``made``: ``MADE_FIELDS``); a cell with a
    threshold before one without (too few honest runs at a larger budget leave a smaller calibrated one usable)."""
    fit = [c for c in cells if _same(c, method, claim, name) and _made_alike(c, made)
           and float(c.get("budget", 0)) <= budget_used]
    return max(fit, key=lambda c: (c.get("threshold") is not None, float(c["budget"])), default=None)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def power_sentence(cell: Mapping[str, Any]) -> tuple[str, bool]:
    """What a PASS at this cell rules out, and whether any substitute reaches the power target."""
    subs = list(cell.get("substitutes") or [])
    strong = [s for s in subs if (s.get("power_lower") or 0) >= POWER_TARGET]
    weak = [s for s in subs if s not in strong]
    parts = []
    if strong:
        parts.append("would detect " + ", ".join(s["name"] for s in strong) + f" at ≥ {_pct(POWER_TARGET)} power")
    if weak:
        parts.append(", ".join(f"{s['name']} at {_pct(s.get('power') or 0)} (≥ {_pct(s.get('power_lower') or 0)})"
                               for s in weak))
    smallest = strong[-1]["name"] if strong else None
    tail = (f"; differences smaller than {smallest} are not ruled out" if smallest
            else "; no substitute of the calibration reaches that power at this budget")
    n = {s["name"]: s.get("runs") for s in subs}
    runs = ", ".join(f"{k} {v}" for k, v in n.items())
    return ("; ".join(parts) + tail + (f" (substitute runs: {runs})" if runs else ""), bool(strong))


def judge_equivalence(statistic: float | None, cells: Sequence[Mapping[str, Any]], *, method: str, claim: str,
                      budget_used: float, unit: str = "output tokens", name: str | None = None,
                      made: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The audit's verdict for one run.

    Args:
        statistic: the run statistic of ``method`` (None: the run produced none).
        cells: the calibration table's cells.
        method: ``logprob``, ``first_token`` or ``text``.
        claim: the precision claimed (``F16``, ``Q4_1`` …); it picks the honest family.
        budget_used: what the run spent, in the cells' unit (output tokens, or requests).
        name: the statistic's name (``kl+gap``, ``gap`` …): only cells of that statistic apply.
        made: how the run was made (``pool``, ``max_tokens``, ``top_logprobs``): only cells made alike apply; a
            threshold fitted on other prompts or lengths says nothing of this run.

    Returns:
        ``{"verdict", "reason", "cell", "statistic", "threshold", "power"}``.
    """
    cell = pick_cell(cells, method, claim, budget_used, name, made)
    base: dict[str, Any] = {"statistic": statistic, "cell": dict(cell) if cell else None,
                            "threshold": cell.get("threshold") if cell else None}
    if statistic is None:
        return {**base, "verdict": Verdict.UNPROVEN, "power": None,
                "reason": f"the run produced no {method} statistic (no scored position or prompt)"}
    if not math.isfinite(statistic):
        return {**base, "verdict": Verdict.UNPROVEN, "power": None,
                "reason": f"the run's {method} statistic is {statistic} (a non-finite logprob reached it): no verdict"}
    if cell is None:
        budgets = sorted(float(c["budget"]) for c in cells if _same(c, method, claim, name) and _made_alike(c, made))
        what = f"{method} cell" + (f" of the statistic {name}" if name else "")
        other = next((c for c in cells if _same(c, method, claim, name) and not _made_alike(c, made)), None)
        if not budgets and other is not None and made is not None:
            theirs = ", ".join(f"{k} {other.get(k)}" for k in MADE_FIELDS if other.get(k) is not None)
            ours = ", ".join(f"{k} {made.get(k)}" for k in MADE_FIELDS if made.get(k) is not None)
            return {**base, "verdict": Verdict.UNPROVEN, "power": None,
                    "reason": (f"the calibration's {what}s for the claim {claim} were made with {theirs}; this run "
                               f"with {ours}: a threshold fitted on other prompts or lengths says nothing here (audit "
                               "with the calibration's pool and lengths, the default)")}
        have = (f"its smallest calibrated budget is {budgets[0]:g} {unit}" if budgets
                else f"the calibration has no {what} for the claim {claim}")
        return {**base, "verdict": Verdict.UNPROVEN, "power": None,
                "reason": f"{budget_used:g} {unit} spent, but {have}: no threshold with a known false-alarm rate"}
    thr = cell.get("threshold")
    if thr is None:
        return {**base, "verdict": Verdict.UNPROVEN, "power": None,
                "reason": f"the {method} cell at {cell['budget']:g} {unit} has no threshold (too few honest runs)"}
    honest = cell.get("honest") or {}
    alarms, held = int(honest.get("heldout_alarms") or 0), int(honest.get("heldout_runs") or 0)
    far = rate_upper(alarms, held)
    power, reaches = power_sentence(cell)
    alpha = float(cell.get("alpha", 0))
    who = f"{cell.get('statistic', method)} = {statistic:.4g}"
    if statistic > thr:
        return {**base, "verdict": Verdict.FAIL, "power": power,
                "reason": (f"{who} is above the honest threshold {thr:.4g} for a {claim} claim at {cell['budget']:g} "
                           f"{unit} (α = {_pct(alpha)}; {alarms} false alarm(s) in {held} held-out honest runs: "
                           f"rate ≤ {100 * far:.1f}% at 95% confidence)")}
    if not reaches:
        return {**base, "verdict": Verdict.UNPROVEN, "power": power,
                "reason": (f"{who} is within the honest threshold {thr:.4g}, but at {cell['budget']:g} {unit} the "
                           f"test reaches {_pct(POWER_TARGET)} power against no substitute ({power}); spend a larger "
                           "budget")}
    return {**base, "verdict": Verdict.PASS, "power": power,
            "reason": (f"{who} is within the honest threshold {thr:.4g} for a {claim} claim at {cell['budget']:g} "
                       f"{unit} (α = {_pct(alpha)}); {power}")}


def cell_notes(cell: Mapping[str, Any] | None) -> list[str]:
    """What the calibration cell that judged the run says of its own limits: an α it had to relax, and the machine
    its honest runs were made on (honest numerics follow the CPU's kernels and the engine's build)."""
    if not cell:
        return []
    notes = [f"calibration: {cell['alpha_cut']}"] if cell.get("alpha_cut") else []
    thin = (cell.get("honest") or {}).get("thin_replicas") or []
    if thin:
        notes.append(f"calibration: honest replica(s) with too few runs to bound their own false alarms "
                     f"({'; '.join(thin)}): an honest engine of that kind may alarm more often than α")
    if cell.get("machine"):
        notes.append(f"calibration made on {cell['machine']}: an honest engine on other hardware or another build "
                     "may sit outside its thresholds; calibrate there (benchmarks/equivalence_calibration.py)")
    return notes
