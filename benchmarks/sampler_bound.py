#!/usr/bin/env python3
"""How few draws could any test of the sampler check's claim need? (issue 24 item 1: why ≤ 50% is not met)

    .venv/bin/python benchmarks/sampler_bound.py --run RUN_DIR [--label NAME] [--alpha 0.05 --beta 0.025]

Input: a fixed ``verify --profile standard --fixed`` run dir (``benchmarks/verify_modes.py`` leaves one per engine):
its sampler rows (``quality/sampling/<label>/``), the sampler's own request count (its ``quality_task`` record) and
the whole run's (the sum over its records is not it: the count comes from ``--fixed-requests``, as
``benchmarks/results/verify_modes-*.json`` measured it server-side).

The bound: the smallest cheat the check must not PASS is the one ``quality/sampling_sequential.py`` ``cheat_share``
names (a share q of each informative prompt's mass moved to its top token, q putting the mean excess TV at the cap
at the margin). Against that one alternative, with every distribution known, the most efficient test there is is
Wald's sequential probability ratio test (Wald & Wolfowitz 1948: no test with the same α and β has a smaller
expected sample size under either hypothesis). Its expected draws are Wald's approximations (Wald 1947, §3.3;
overshoot ignored, so they are lower bounds):

    E_H0[N] = ((1 − α)·ln(β / (1 − α)) + α·ln((1 − β) / α)) / E_H0[λ]
    E_H1[N] = (β·ln(β / (1 − α)) + (1 − β)·ln((1 − β) / α)) / E_H1[λ]

with λ one draw's log-likelihood ratio, averaged over the prompts (the draws go round-robin). The check's early
looks PASS by exactly this test with only its lower boundary (quality/sampling_sequential.py, β = 1%), but in rounds
of 16 draws per prompt, so they stop at the first look past these figures; its interval (any shift of TV ≥ the
margin, not this one alternative) needs far more, as the fixed check's 64 draws show. Beside it: the fixed-n score
test against the same alternative (normal approximation) and the draws per prompt the 50% target leaves the sampler
once every other part of the fixed run, the logprob lists and the seed check's first stage are counted. Prints one
JSON object. Run by hand, never by ``make test``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import NormalDist
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sampler_calibration import MARGIN, SEEDS, implied, load_rows  # noqa: E402

from inferencekit.quality.sampling_collect import SEED_CHECK_PROMPTS  # noqa: E402
from inferencekit.quality.sampling_sequential import cheat_share  # noqa: E402


def llr_means(tops: list[float], q: float) -> tuple[float, float]:
    """E[λ] of one draw under the honest sampler and under the cheat, averaged over prompts whose top token has
    probability ``tops[i]``: λ = ln(((1 − q)·p + q) / p) for the top token, ln(1 − q) for any other."""
    e0 = e1 = 0.0
    for p in tops:
        hit, miss = math.log(((1 - q) * p + q) / p), math.log(1 - q)
        p1 = (1 - q) * p + q
        e0 += p * hit + (1 - p) * miss
        e1 += p1 * hit + (1 - p1) * miss
    return e0 / len(tops), e1 / len(tops)


def bound(tops: list[float], q: float, alpha: float, beta: float) -> dict[str, float]:
    """Wald's expected draws per prompt (honest, cheat) and the fixed-n score test's draws per prompt."""
    e0, e1 = llr_means(tops, q)
    a, b = math.log((1 - beta) / alpha), math.log(beta / (1 - alpha))
    k = len(tops)
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(1 - beta)
    shift = sum(q * (1 - p) for p in tops)  # the top token's share rises by q(1 − p)
    var = sum(p * (1 - p) for p in tops)
    return {"sprt_honest": ((1 - alpha) * b + alpha * a) / e0 / k, "sprt_cheat": (beta * b + (1 - beta) * a) / e1 / k,
            "fixed_score_test": z * z * var / (shift * shift)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a fixed verify --profile standard run dir")
    ap.add_argument("--label", default=None, help="the sampler side's folder under quality/sampling (default: the one)")
    ap.add_argument("--fixed-requests", type=int, default=None,
                    help="the whole fixed run's generation requests, counted server-side (for the 50%% budget)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--beta", type=float, default=0.01)
    args = ap.parse_args()
    base = args.run / "quality" / "sampling"
    folders = [p for p in base.iterdir() if p.is_dir()] if base.is_dir() else []
    folder = base / args.label if args.label else (folders[0] if len(folders) == 1 else None)
    if folder is None or not folder.is_dir():
        raise SystemExit(f"no single sampler side under {base}: name one with --label")
    rows = load_rows(folder)
    dist = implied(rows)
    probs = [[p for _, p in d] for d in dist.values()]
    tops = [max(x) / sum(x) for x in probs]
    q = cheat_share(probs, MARGIN, SEEDS)
    out: dict[str, Any] = {"run": str(args.run), "side": folder.name, "informative_prompts": len(tops),
                           "margin": MARGIN, "cap_draws": SEEDS, "alpha": args.alpha, "beta": args.beta,
                           "cheat_share_q": q, "mean_top_probability": sum(tops) / len(tops),
                           "draws_per_prompt": bound(tops, q, args.alpha, args.beta)}
    sampler = None
    for path in (args.run / "evidence").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("kind") == "quality_task" and (rec.get("data") or {}).get("task") == "sampling":
            sampler = rec["data"].get("requests")
    if sampler is not None and args.fixed_requests:
        other = args.fixed_requests - sampler
        floor = 2 * len(rows) + SEED_CHECK_PROMPTS  # each prompt's two logprob lists, the seed check's first stage
        budget = args.fixed_requests / 2 - other - floor
        out["budget_at_50_percent"] = {"fixed_requests": args.fixed_requests, "sampler_requests_fixed": sampler,
                                       "other_requests": other, "draws_per_prompt_left": budget / len(rows)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
