"""From scored positions to figures and a verdict (pure): pooled means with prompt-level bootstrap CIs,
per position bucket; first divergence from the reference's greedy path; and PASS / FAIL / UNPROVEN
for an engine against the reference's A/A noise floor.

Each metric is a pooled mean over positions (Σ over prompts of the per-prompt sum / Σ counts), with a
cluster bootstrap CI that resamples prompts (positions inside one prompt are correlated). The verdict
compares engine and floor prompt by prompt (paired bootstrap of the difference of pooled means) against
pre-registered non-inferiority margins (``stats.margin_verdict``): top-1 agreement may drop by at most
``agreement`` (fraction), mean KL and reference NLL rise by at most ``kl`` and ``nll`` nats per token,
and mean TV by at most ``tv`` when one is given (otherwise TV is reported, not judged: by Pinsker's
inequality a KL of 0.02 nats allows a TV up to 0.1, so it is no stand-in for the KL margin).
Defaults follow the seed (its ``quality score``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit import stats
from inferencekit.quality.metrics import BUCKET_LABELS, bucket_of

__all__ = ["FIELDS", "DEFAULT_MARGINS", "units", "summarize", "first_divergence", "divergence", "judge_engine",
           "at_k", "more_prompts_needed"]

# (row field, metric name, higher is better)
FIELDS = (("agree", "top1_agreement", True), ("kl", "kl_mean", False), ("tv", "tv_mean", False),
          ("nll", "ref_nll_mean", False))
DEFAULT_MARGINS = {"agreement": 0.02, "kl": 0.02, "tv": None, "nll": 0.05}
_MARGIN_KEY = {"top1_agreement": "agreement", "kl_mean": "kl", "tv_mean": "tv", "ref_nll_mean": "nll"}


def units(results: Sequence[dict[str, Any]], field: str, bucket: str | None = None) -> list[tuple[float, int]]:
    """Per prompt ``(sum, count)`` of ``field`` over its positions in ``bucket`` (None = all); a position whose
    value is None (not computed) is left out."""
    out = []
    for r in results:
        vals = [x[field] for x in r.get("rows", ()) if x[field] is not None
                and (bucket is None or bucket_of(x["t"]) == bucket)]
        out.append((float(sum(vals)), len(vals)))
    return out


def _block(results: Sequence[dict[str, Any]], bucket: str | None, resamples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, name, _ in FIELDS:
        u = units(results, field, bucket)
        lo, hi = stats.cluster_bootstrap_ci(u, resamples, seed)
        out[name] = {"value": stats.pooled_mean(u), "ci95": [lo, hi], "n_tokens": sum(c for _, c in u),
                     "n_prompts": sum(1 for _, c in u if c)}
    nll = out["ref_nll_mean"]
    out["ref_ppl"] = {"value": math.exp(nll["value"]) if nll["value"] is not None else None,
                      "ci95": [math.exp(x) if x is not None else None for x in nll["ci95"]]}
    # a clamped position (the reference's logprob of the token is a sentinel, score_rows.CLAMP_FLOOR) has no gap:
    # it is left out of the median, as it is of the NLL, never read as a number
    gaps = [x["gap"] for r in results for x in r.get("rows", ())
            if not x["agree"] and x["gap"] is not None and (bucket is None or bucket_of(x["t"]) == bucket)]
    out["disagreement_gap_median"] = statistics.median(gaps) if gaps else None
    return out


def summarize(results: Sequence[dict[str, Any]], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``{"all": block, "<bucket>": block, …}``: top-1 agreement, KL, TV, reference NLL (value, 95% CI, tokens,
    prompts), perplexity = exp(mean NLL) and the median log-probability gap of the disagreements (nats; positions
    whose reference logprob is a clamp sentinel have no gap and are left out; None when no disagreement has one)."""
    ok = [r for r in results if "rows" in r]
    out = {"all": _block(ok, None, resamples, seed)}
    for b in BUCKET_LABELS:
        out[b] = _block(ok, b, resamples, seed)
    return out


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token sequences differ (the shorter one's length when one is a prefix of the
    other and they differ in length); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def divergence(path: Mapping[str, Sequence[int]], mine: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """Where each prompt's tokens first leave the reference's greedy path (prompts both sides have): how many never
    do, and the median and earliest index among those that do."""
    per = {pid: first_divergence(path[pid], mine[pid]) for pid in sorted(path.keys() & mine.keys())}
    left = sorted(i for i in per.values() if i is not None)
    return {"n_prompts": len(per), "identical": len(per) - len(left),
            "first_divergence_median": statistics.median(left) if left else None,
            "first_divergence_min": left[0] if left else None, "per_prompt": per}


def at_k(results: Sequence[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """Copies of scored results whose ``kl``/``tv`` are the values at top-``k`` (None where not computed)."""
    return [{**r, "rows": [{**x, "kl": x["kl_at"].get(k), "tv": x["tv_at"].get(k)} for x in r["rows"]]}
            for r in results if "rows" in r]


def judge_engine(engine: Sequence[dict[str, Any]], floor_by_id: dict[str, dict[str, Any]] | None,
                 margins: dict[str, float | None], resamples: int = 2000, seed: int = 0,
                 confidence: float = 0.95) -> dict[str, Any]:
    """``{"verdict", "reason", "checks"}`` of one engine against the A/A floor.

    Args:
        engine: the engine's scored results (``{"id", "rows", "k_kl", …}``; failed ones have no ``rows``).
        floor_by_id: the floor's scored result per prompt id, scored the same way (re-tokenized engines
            against the floor's re-tokenized text); None when there is no floor.
        margins: ``{"agreement", "kl", "tv", "nll"}``; a None margin reports the check without judging it.
        confidence: the coverage of each paired interval (0.95; lower than that per look when prompts are added
            in looks, ``verify``'s quality part: ``QUALITY_LOOKS``). The interval is kept under ``ci95`` whatever
            its coverage, which ``confidence`` on the check states.

    Each check pairs the prompts both arms scored. KL and TV are paired at the smallest k either arm
    returned. A check with no data is NOT RUN. The verdict combines the checks that have a margin
    (``combine_claims``), a NOT RUN one counting as UNPROVEN — the seed let the checks that ran decide
    alone, which reads a missing KL as a pass (docs/design.md: missing evidence is never a pass).
    """
    if floor_by_id is None:
        return {"verdict": "UNPROVEN", "reason": "no A/A noise floor (give --baseline: the reference's own greedy "
                                                  "trajectories)", "checks": {}}
    candidates = [(e, floor_by_id.get(e["id"])) for e in engine if "rows" in e]
    pairs = [(e, f) for e, f in candidates if f is not None and "rows" in f]
    eng, flo = [e for e, _ in pairs], [f for _, f in pairs]
    with_kl = [min(e["k_kl"], f["k_kl"]) for e, f in pairs
               if any(x["kl"] is not None for x in e["rows"]) and any(x["kl"] is not None for x in f["rows"])]
    k_pair = min(with_kl) if with_kl else None
    arms = {"agree": (eng, flo), "nll": (eng, flo)}
    if k_pair is not None:
        arms["kl"] = arms["tv"] = (at_k(eng, k_pair), at_k(flo, k_pair))
    checks: dict[str, dict[str, Any]] = {}
    for field, name, higher_better in FIELDS:
        e_arm, f_arm = arms.get(field, ([], []))
        e_u, f_u = units(e_arm, field), units(f_arm, field)
        if not any(c for _, c in e_u):
            checks[name] = {"verdict": "NOT RUN", "reason": "not computed for this engine" + (
                " (KL and TV need token-id top-k lists from both the engine and the floor)"
                if field in ("kl", "tv") else "")}
            continue
        d = stats.paired_bootstrap_delta(e_u, f_u, resamples, seed, confidence=confidence)
        lo, hi = d["ci95"]
        delta = d["delta"]
        if higher_better:  # a drop is "worse": negate and swap
            delta, lo, hi = (0.0 - delta if delta is not None else None, 0.0 - hi if hi is not None else None,
                             0.0 - lo if lo is not None else None)
        margin = margins.get(_MARGIN_KEY[name])
        if margin is None:
            v, why = "NOT RUN", "reported, not judged (no pre-registered margin)"
        else:
            v, why = stats.margin_verdict(lo, hi, margin, confidence=confidence)
        checks[name] = {"verdict": v, "reason": why, "worse_than_floor": delta, "ci95": [lo, hi], "margin": margin,
                        "n_prompts": d["n_prompts"], "confidence": confidence}
        if field in ("kl", "tv"):
            checks[name]["top_k"] = k_pair
    # a check with a margin that could not be computed is missing evidence: UNPROVEN, never a silent PASS
    judged = ["UNPROVEN" if c["verdict"] == "NOT RUN" else c["verdict"]
              for name, c in checks.items() if margins.get(_MARGIN_KEY[name]) is not None]
    verdict = stats.combine_claims(judged) if judged else "UNPROVEN"
    return {"verdict": verdict, "reason": "; ".join(f"{k}: {c['reason']}" for k, c in checks.items()),
            "checks": checks}


def more_prompts_needed(block: dict[str, Any]) -> bool:
    """True when one engine's judged block (``score.json``'s ``engines[label]``) is UNPROVEN only because an interval
    straddles its margin: every check with a margin is PASS or a straddle (both bounds numeric), at least one
    straddles, and no data problem stands (more prompts cannot mend a changed or mismatched input)."""
    v = block.get("verdict") or {}
    if v.get("verdict") != "UNPROVEN" or block.get("data_problems"):
        return False
    judged = [c for c in (v.get("checks") or {}).values() if c.get("margin") is not None]
    straddles = [c for c in judged if c.get("verdict") == "UNPROVEN" and None not in (c.get("ci95") or [None])]
    return bool(straddles) and all(c.get("verdict") == "PASS" or c in straddles for c in judged)
