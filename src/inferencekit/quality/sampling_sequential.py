"""The sampler check's sequential rule: draw in rounds, judge at each round's end, stop once decided (issue 24).

The fixed check takes S seeded draws per prompt and judges once. Sequentially, the S draws are split into K
rounds (``draw_looks``: after S/K, 2S/K, …, S draws per prompt) and the data are judged after each round. What
the rule states beforehand (``describe_rule`` writes it into the record):

- **excess TV** (the distribution check). Honest hypothesis: the mean excess TV over the informative prompts is
  at most 0 (draws follow the implied distribution); the smallest cheat it must catch: a sampler whose mean excess
  at the cap (S draws, what the fixed check judges) is the ``margin``, taken as a temperature partly ignored
  (``cheat_share``; an engine ignoring temperature entirely shows about 1 − p_max per prompt, far beyond it).
  Each look judges the percentile-bootstrap interval at coverage 1 − α/K (``look_confidence``): by the union
  bound (Bonferroni) the K intervals cover the true mean together with probability ≥ 1 − α, so the interval
  printed at a data-dependent stop keeps its coverage (a group-sequential design with Bonferroni α-spending:
  C. Jennison and B. W. Turnbull, *Group Sequential Methods with Applications to Clinical Trials*, Chapman &
  Hall 2000, §2; the interval's own coverage is the bootstrap's, approximate over few prompts). An early look
  judges it against ``margin_at``, the excess that smallest cheat shows at that look's draws (below the margin:
  noise hides part of a shift at few draws), for a FAIL only (lower end beyond); the last look against the margin
  itself, as the fixed check does. A false FAIL with an honest sampler is then at most about α/2 = 2.5%; an early
  PASS comes from the top-share test below.
- **out of support** (draws outside the kept set). Honest hypothesis: at most ``OOS_P0`` (0.5%, the fixed
  check's limit) of draws fall outside; the smallest cheat: ``OOS_P1`` (3%) of draws outside (a pruned
  vocabulary or a filter applied wrongly puts mass there on every prompt). Wald's SPRT on the pooled draws
  (``inferencekit.sequential``), α = β = 0.05, checked at the looks only (checking less often than every
  draw only lowers the chance of crossing a boundary, so Wald's bounds still hold); a PASS prints the
  Beta(1, 1)-mixture confidence-sequence upper bound of the rate, valid at the stop.
- **top share** (the smallest cheat itself, early looks only). The TV interval over 16 prompts needs about 32 draws
  per prompt to separate an honest sampler from that cheat, while the cheat changes only one thing: its top tokens
  come up more often. ``top_share_llr`` is the log-likelihood ratio of the draws so far, the cheat (share q =
  ``cheat_share`` of each prompt's mass moved to its top token) over the honest sampler; Wald's SPRT with only its
  lower boundary: an early look PASSes only once it is at or below ln ``TOP_BETA`` (1%), and by Ville's inequality
  the cheat gets there at most that often, however many looks are taken. It only ever PASSes (it never FAILs: that
  stays with the interval), and only when the interval did not FAIL, the SPRT on out-of-support draws PASSed and no
  prompt is incomplete (with one, that boundary stops the look at UNPROVEN, the fixed check's verdict); an interval
  inside the margin at an early look is not a stop by itself (replayed, that route PASSed the smallest cheat on 4.9%
  of sequences). What such a PASS rules out is the stated cheat: an error of
  another shape (mass moved to other tokens) of the same TV is judged by the interval alone, at the cap
  (``--fixed``, or a run whose early looks do not settle).
- **all draws greedy** (temperature ignored): the fixed check's exact test at ``GREEDY_ONLY_ALPHA`` (10⁻⁶); over
  K looks the union bound makes it K·10⁻⁶ at most.

A look *decides* when the verdict is settled: FAIL (any check), PASS (at an early look the top-share test at its
PASS boundary, at the cap the TV interval within the margin; and the out-of-support SPRT at its PASS boundary), or
UNPROVEN for settings the check cannot model (nothing it computes applies), or UNPROVEN for an incomplete prompt
(a failed request, a reply without logprobs) once the other prompts are at the top-share test's PASS boundary (no
more draws can make it a PASS, and a FAIL they could still show is the cheat that boundary bounds). Otherwise the
next round is drawn: an UNPROVEN for too few informative prompts goes on to the cap, since more draws can still
show a FAIL. At the cap (S draws, today's count), the last look's verdict stands, the SPRT's undecided
state falling back to the fixed check's Wilson rule.

Pure: no HTTP; ``quality/sampling_collect.py`` sends the rounds and calls ``judge_look``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import binom

from inferencekit.quality.sampling import OOS_MAX, judge_sampling
from inferencekit.sequential import SprtPlan, cs_upper_bound, sprt_decision

__all__ = ["LOOKS", "OOS_P0", "OOS_P1", "SEQ_ALPHA", "TOP_BETA", "cheat_share", "describe_rule", "draw_looks",
           "judge_look", "look_confidence", "margin_at", "oos_plan", "top_share_llr"]

SEQ_ALPHA = 0.05
"""The check's overall error rate, split over the looks (Bonferroni) for the TV interval; α and β of the SPRT."""
LOOKS = 4
"""Rounds the S draws per prompt are split into (S/4 each)."""
OOS_P0 = OOS_MAX
"""Out-of-support share an honest sampler stays at or below (the fixed check's limit, 0.5%)."""
OOS_P1 = 0.03
"""The smallest out-of-support share the sequential rule must catch (3% of draws)."""
TOP_BETA = 0.01
"""The top-share test's bound on PASSing the smallest cheat early: an early PASS needs its likelihood ratio (cheat
over honest) at or below this (Ville's inequality bounds the cheat's chance of ever getting there by it). 1%, not
α/2: a cheat that reaches the cap is then judged by the fixed rule, which PASSes it on about 3% of sequences
(benchmarks/README.md), and the two add."""


def draw_looks(seeds: int, looks: int = LOOKS) -> tuple[int, ...]:
    """Draws per prompt at each look: ``ceil(seeds·i/looks)`` for i = 1..looks, repeats removed (fewer seeds
    than looks gives fewer looks).

    Raises:
        ValueError: ``seeds`` or ``looks`` below 1.
    """
    if seeds < 1 or looks < 1:
        raise ValueError(f"need seeds ≥ 1 and looks ≥ 1, got {seeds}, {looks}")
    return tuple(sorted({math.ceil(seeds * i / looks) for i in range(1, looks + 1)}))


def look_confidence(n_looks: int, alpha: float = SEQ_ALPHA) -> float:
    """Coverage of each look's TV interval: 1 − α/K, the Bonferroni share of K looks (0.9875 for K = 4)."""
    if n_looks < 1:
        raise ValueError(f"need at least one look, got {n_looks}")
    return 1 - alpha / n_looks


def oos_plan(prompts: int, seeds: int) -> SprtPlan:
    """The out-of-support SPRT for ``prompts`` × ``seeds`` draws (the cap)."""
    return SprtPlan(trial="one seeded draw; a hit is a draw outside the set the settings keep", p0=OOS_P0,
                    p1=OOS_P1, alpha=SEQ_ALPHA, beta=SEQ_ALPHA, cap=max(1, prompts * seeds))


def describe_rule(prompts: int, seeds: int, looks: Sequence[int]) -> dict[str, Any]:
    """The sequential rule as the record states it, before any draw."""
    return {"method": "group-sequential: the draws in rounds, judged after each; TV by a bootstrap interval at "
                      "Bonferroni-split coverage (Jennison & Turnbull 2000, §2), out-of-support by Wald's SPRT",
            "looks": list(looks), "cap_draws_per_prompt": seeds, "look_confidence": look_confidence(len(looks)),
            "alpha": SEQ_ALPHA,
            "tv": {"honest": "mean excess TV ≤ 0",
                   "smallest_cheat": "mean excess TV at the cap ≥ the margin (a temperature partly ignored: a share "
                                     "of each prompt's mass moved to its top token)",
                   "early_looks": "FAIL when the interval's lower end passes the excess that cheat shows at the "
                                  "look's draws (margin_at); PASS only by the top-share test: the likelihood ratio "
                                  f"of that cheat over honest at or below {TOP_BETA:g} (Ville's inequality: the "
                                  "cheat gets there at most that often); errors of other shapes are judged by the "
                                  "interval at the cap only",
                   "false_fail_max": SEQ_ALPHA / 2, "miss_max": SEQ_ALPHA / 2,
                   "early_pass_of_smallest_cheat_max": TOP_BETA,
                   "replayed": "10,000 sequences per cell from two engines' recorded draws (benchmarks/README.md, "
                               "6 Dec 2026): the smallest cheat PASSed 1.2% (early 0.01-0.04%; --fixed 3.0-3.2%), "
                               "false FAIL ≤ 0.06%, temperature ignored always FAILed"},
            "out_of_support": oos_plan(prompts, seeds).describe(),
            "at_cap": "the last look's verdict; an undecided SPRT falls back to the fixed Wilson rule"}


def _expected_tv_under(p: np.ndarray, truth: np.ndarray, n: int) -> float:
    """``E[½ Σ_i |X_i/n − p_i|]`` with ``X_i ~ Binomial(n, truth_i)``: the TV from ``p`` of n draws from ``truth``
    (``sampling.expected_tv`` is the case truth = p)."""
    x = np.arange(n + 1)
    pmf = binom.pmf(x[None, :], n, truth[:, None])
    return float(0.5 * (pmf * np.abs(x[None, :] / n - p[:, None])).sum())


def _shown(arrays: Sequence[np.ndarray], q: float, n: int) -> float:
    """Mean over prompts of the excess TV at n draws of each p with a share q of its mass moved to its top token."""
    out = []
    for a in arrays:
        shifted = (1 - q) * a
        shifted[int(a.argmax())] += q
        out.append(_expected_tv_under(a, shifted, n) - _expected_tv_under(a, a, n))
    return float(np.mean(out))


def margin_at(implied: Sequence[Sequence[float]], n: int, margin: float, cap: int) -> float:
    """The mean excess TV that the smallest cheat shows at ``n`` draws per prompt: the margin as an early look sees it.

    The fixed check bounds the mean excess TV at its S draws (``cap``): the smallest cheat is a sampler whose mean
    excess at S draws is the margin. The excess of a sampler off by a given TV shrinks with fewer draws (sampling
    noise hides part of the shift), so an early look that judged against the margin itself would PASS that
    cheat (measured: 30 of 30 replays of a 32-draw record PASSed a sampler off by a TV of the margin,
    most at the first look, ``benchmarks/sampler_calibration.py``). The cheat is taken
    as a temperature partly ignored: a share q of each prompt's mass moved to its top token, p' = (1 − q)·p +
    q·δ_top, with q found by bisection so that the mean of ``E_p'[TV_S] − E_p[TV_S]`` over the prompts is the
    margin (exact over the binomial marginals). Returns that mean at n draws instead (the margin itself at
    n = ``cap``; less below it). ``implied``: each informative prompt's kept probabilities (``judge_sampling``'s
    ``implied``).

    Raises:
        ValueError: no distribution, n or cap below 1.
    """
    if n < 1:
        raise ValueError(f"need n ≥ 1, got {n}")
    arrays = _arrays(implied)
    return _shown(arrays, cheat_share(implied, margin, cap), n)


def _arrays(implied: Sequence[Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(x, dtype=float) / float(np.sum(x)) for x in implied]


def cheat_share(implied: Sequence[Sequence[float]], margin: float, cap: int) -> float:
    """q of the smallest cheat (``margin_at``): the share of each prompt's mass moved to its top token that puts
    the mean excess TV at ``cap`` draws at ``margin`` (1 when even all of it does not reach the margin).

    Raises:
        ValueError: no distribution, or cap below 1.
    """
    if not implied or cap < 1:
        raise ValueError(f"need at least one distribution and cap ≥ 1, got {len(implied)} and {cap}")
    return _cheat_share(tuple(tuple(float(p) for p in x) for x in implied), margin, cap)


def top_share_llr(rows: Sequence[Mapping[str, Any]], q: float) -> float:
    """ln of the likelihood ratio of the draws so far, the smallest cheat over the honest sampler.

    Under the cheat each informative prompt's top token has probability (1 − q)·p + q instead of p (its mass moved
    there, ``cheat_share``) and every other token (1 − q) times its own, so only the top token's count matters:
    Λ = Σ_prompts g·ln((1 − q) + q/p) + (n − g)·ln(1 − q), with g the draws of the top token of n (``greedy_draws``
    and ``n_draws`` of ``judge_sampling``'s informative rows, ``max_p`` = p). Under the cheat exp(−Λ) is a
    non-negative martingale of mean 1, so by Ville's inequality P(Λ ever ≤ ln b) ≤ b however often it is looked at
    (J. Ville, *Étude critique de la notion de collectif*, 1939; the one-sided SPRT bound, A. Wald, *Sequential
    Analysis*, 1947, §3.2): an early PASS at Λ ≤ ln ``TOP_BETA`` PASSes that cheat at most that often.

    Args:
        rows: ``judge_sampling``'s rows; only ``status == "informative"`` ones count.
        q: the cheat's share, in (0, 1).

    Raises:
        ValueError: q outside (0, 1).
    """
    if not 0 < q < 1:
        raise ValueError(f"need 0 < q < 1, got {q}")
    total = 0.0
    for r in rows:
        if r.get("status") != "informative":
            continue
        p, g, n = float(r["max_p"]), int(r["greedy_draws"]), int(r["n_draws"])
        total += g * math.log((1 - q) + q / p) + (n - g) * math.log1p(-q)
    return total


@functools.lru_cache(maxsize=256)
def _cheat_share(implied: tuple[tuple[float, ...], ...], margin: float, cap: int) -> float:
    arrays = _arrays(implied)
    if _shown(arrays, 1.0, cap) <= margin:
        return 1.0  # even an engine that ignores the temperature stays within: no smaller cheat
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _shown(arrays, mid, cap) < margin else (lo, mid)
    return hi


def _provisional(per_prompt: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for a look before the second logprob list exists: the first list stands for both (tolerance then
    stays at ``LOGPROB_TOL``); the final judgement uses the real second list."""
    return [{**r, "top_again": r["top_again"] if r.get("top_again") is not None else r.get("top")} for r in per_prompt]


def judge_look(per_prompt: Sequence[Mapping[str, Any]], *, looks: Sequence[int], look: int,
               sampling: Mapping[str, Any], margin: float, resamples: int, seed: int,
               **kw: Any) -> tuple[dict[str, Any], bool]:
    """Judge the draws so far at look ``look`` (0-based index into ``looks``): ``(result, decided)``.

    ``result`` is ``judge_sampling``'s at ``look_confidence(len(looks))``, with ``n_seeds = looks[look]`` and the
    out-of-support check replaced by the SPRT decision, plus ``sequential`` (the rule's state at this look).
    ``decided`` is True when more draws cannot change the verdict (module docstring), or at the last look.
    Rows without ``top_again`` (drawn, second list not yet asked) use their first list for both.

    Raises:
        ValueError: as ``judge_sampling``; ``look`` outside ``looks``.
    """
    if not 0 <= look < len(looks):
        raise ValueError(f"look {look} outside the {len(looks)} planned looks")
    rows = _provisional(per_prompt)
    n, last = looks[look], look == len(looks) - 1
    conf = look_confidence(len(looks))

    def judge(at: float, oos_decision: tuple[str, str] | None = None,
              tv_decision: tuple[str, str] | None = None) -> dict[str, Any]:
        return judge_sampling(rows, sampling=sampling, margin=at, resamples=resamples, seed=seed, n_seeds=n,
                              confidence=conf, oos_decision=oos_decision, tv_decision=tv_decision, **kw)

    first = judge(margin)  # the rows and the out-of-support counts, which do not depend on the margin
    probs = [[p for _, p in r["implied"]] for r in first["rows"] if r["status"] == "informative"]
    at = margin_at(probs, n, margin, looks[-1]) if not last and probs else margin  # the margin as n draws show it
    oos = first["checks"]["out_of_support"]
    state = sprt_decision(oos_plan(len(per_prompt), looks[-1]), oos["draws"], oos["of"]) if oos["of"] else None
    decision: tuple[str, str] | None = None
    if state is not None and state.decision in ("PASS", "FAIL"):
        bound = cs_upper_bound(oos["draws"], oos["of"], SEQ_ALPHA)
        decision = (state.decision, f"SPRT {state.decision} at {oos['of']} draws, α = β = {SEQ_ALPHA:g}; rate ≤ "
                                    f"{bound:.2%} by the 95% confidence sequence")
    elif state is not None and not last:
        decision = ("UNPROVEN", f"SPRT undecided at {oos['of']} draws")
    # an early look PASSes the distribution only by the top-share SPRT, whatever the interval shows short of a FAIL
    # (judge_sampling applies tv_decision only then; any other check's FAIL or an incomplete prompt still prevails)
    top: dict[str, Any] | None = None
    tv_decision: tuple[str, str] | None = None
    if not last and probs and state is not None and state.decision == "PASS":
        q = cheat_share(probs, margin, looks[-1])
        if q < 1:
            llr = top_share_llr(first["rows"], q)
            top = {"q": q, "llr": llr, "pass_at": math.log(TOP_BETA), "pass": llr <= math.log(TOP_BETA)}
            if top["pass"]:
                tv_decision = ("PASS", f"top-share SPRT PASS at {n} draws per prompt: ln LR (cheat moving {q:.3f} "
                                       f"of each prompt's mass to its top token, over honest) {llr:.2f} ≤ ln "
                                       f"{TOP_BETA:g} (Ville); other shapes of error are judged by the interval "
                                       "only at the cap")
    # at the cap with an undecided SPRT (or no draw to judge) the fixed Wilson rule stands
    res = judge(at, decision, tv_decision) if decision is not None or at != margin else first
    if decision is not None and decision[0] in ("PASS", "FAIL"):
        res["checks"]["out_of_support"]["cs_upper"] = bound
        if res["verdict"] == "PASS":
            res["reason"] += f"; out of support: {decision[1]}"
    tv = res["checks"]["excess_tv"]["verdict"]
    settled = tv == "PASS" and top is not None and top["pass"]  # the informative prompts at the PASS boundary
    # an incomplete prompt (a failed request, a reply without logprobs) keeps the verdict UNPROVEN at any look; once
    # the other prompts are settled, more draws can no more turn it into a PASS, and a FAIL they could still show is
    # the stated cheat the top-share stop bounds, as for a PASS
    only_incomplete = (res["verdict"] == "UNPROVEN" and res["dropped"].get("incomplete", 0) > 0
                       and len(res["problems"]) == 1)
    # settings the check cannot model: nothing it computes applies, more draws change nothing. An UNPROVEN for
    # too few informative prompts is not a stop: more draws can still show a FAIL
    decided = last or res["verdict"] == "FAIL" or bool(res["checks"]["settings"]["unmodelled"]) or (
        settled and (res["verdict"] == "PASS" or only_incomplete))
    why = ("the cap" if last and res["verdict"] not in ("PASS", "FAIL") else
           f"UNPROVEN decided: {res['dropped']['incomplete']} incomplete prompt(s), the others at the top-share "
           "test's PASS boundary" if decided and only_incomplete and not last else
           f"{res['verdict']} decided" if decided else "undecided: another round")
    res["sequential"] = {"look": look + 1, "looks": list(looks), "draws_per_prompt": n, "confidence": conf,
                         "margin_at_look": at, "top_share_sprt": top,
                         "oos_sprt": state.to_json() if state else None, "decided": decided, "why": why}
    return res, decided
