"""The sequential rule (Wald's SPRT) and the confidence-sequence bound a sequential PASS prints (sequential.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferencekit.sequential import SprtPlan, cs_upper_bound, sprt_decision

CACHE_LIKE = SprtPlan("a pair", p0=1 / 3, p1=0.9, alpha=0.05, beta=0.05, cap=6)


def test_wald_boundaries_and_the_likelihood_ratio_by_hand():
    assert CACHE_LIKE.fail_at == pytest.approx(math.log(0.95 / 0.05))  # 2.944
    assert CACHE_LIKE.pass_at == pytest.approx(math.log(0.05 / 0.95))
    # a hit adds ln(0.9 / (1/3)) = 0.9933, a miss ln(0.1 / (2/3)) = -1.8971
    assert CACHE_LIKE.llr(2, 3) == pytest.approx(2 * 0.99325 - 1.89712, abs=1e-4)
    assert [sprt_decision(CACHE_LIKE, k, n).decision for k, n in ((3, 3), (0, 2), (2, 2), (1, 2), (5, 6))] == \
        ["FAIL", "PASS", None, None, "FAIL"]  # 3×0.993 ≥ 2.944; 2×-1.897 ≤ -2.944; 5×0.993-1.897 = 3.07
    assert sprt_decision(CACHE_LIKE, 3, 6).decision == "cap"  # 2.98 - 5.69: between the boundaries at the cap


def test_a_rule_without_the_early_fail_stops_early_only_at_pass():
    late = SprtPlan("a pair", p0=1 / 3, p1=0.9, alpha=0.05, beta=0.05, cap=6, min_trials=2, early_fail=False)
    past = sprt_decision(late, 3, 3)  # Λ = 2.98, past the FAIL boundary 2.944
    assert past.decision is None and "FAILs only at the cap of 6" in past.why
    assert sprt_decision(late, 0, 2).decision == "PASS"  # the PASS boundary still stops it
    at_cap = sprt_decision(late, 6, 6)  # the gate's fixed rule decides
    assert at_cap.decision == "cap" and "past the FAIL boundary, which this rule does not stop at" in at_cap.why
    assert "no boundary reached" in sprt_decision(late, 3, 6).why  # Λ = -2.71: between the boundaries
    assert late.describe()["method"].endswith("stops early only at PASS") and late.describe()["early_fail"] is False
    assert "only at PASS" not in CACHE_LIKE.describe()["method"]


def test_an_honest_rate_of_zero_makes_one_hit_decisive():
    plan = SprtPlan("an echo", p0=0.0, p1=0.5, alpha=0.05, beta=0.05, cap=8)
    assert sprt_decision(plan, 1, 1).decision == "FAIL" and math.isinf(plan.llr(1, 1))
    # misses: ln(0.5) each; PASS once n·ln 0.5 ≤ ln(0.05/0.95) = -2.944, i.e. n = 5
    assert [sprt_decision(plan, 0, n).decision for n in range(1, 6)] == [None, None, None, None, "PASS"]
    later = SprtPlan("an echo", p0=0.0, p1=0.5, alpha=0.05, beta=0.05, cap=8, min_trials=6)
    assert sprt_decision(later, 0, 5).decision is None and sprt_decision(later, 0, 6).decision == "PASS"


def test_bad_plans_and_counts_are_refused():
    with pytest.raises(ValueError, match="p0 < p1"):
        SprtPlan("x", p0=0.5, p1=0.5, alpha=0.05, beta=0.05, cap=4)
    with pytest.raises(ValueError, match="α and β"):
        SprtPlan("x", p0=0.1, p1=0.5, alpha=0.5, beta=0.05, cap=4)
    with pytest.raises(ValueError, match="cap"):
        sprt_decision(CACHE_LIKE, 1, 7)


def test_the_confidence_sequence_bound_by_hand_and_wider_than_a_fixed_n_bound():
    # 0 hits in 10: B(1, 11) = 1/11, so the bound solves -ln 11 - 10·ln(1-p) = ln 20: p = 1 - (11·20)^(-1/10)
    assert cs_upper_bound(0, 10) == pytest.approx(1 - (11 * 20) ** -0.1, rel=1e-6)  # 0.417
    # wider than the one-sided exact fixed-n bound 1 - 0.05^(1/10) = 0.259: it must hold at every n at once
    assert cs_upper_bound(0, 10) > 1 - 0.05 ** 0.1
    assert cs_upper_bound(0, 0) == 1.0
    assert cs_upper_bound(3, 100) < cs_upper_bound(3, 50) < 1
    assert cs_upper_bound(10, 10) == 1.0


def test_the_bound_covers_the_true_rate_at_a_data_dependent_stop():
    # stop at the first n where the bound falls below 0.3 (or at 200): with a true rate 0.2 the bound must
    # still cover 0.2 in at least 95% of runs (a fixed-n bound at such a stop would undercover)
    rng = np.random.default_rng(7)
    misses = 0
    runs = 400
    for _ in range(runs):
        hits = 0
        for n in range(1, 201):
            hits += rng.random() < 0.2
            if cs_upper_bound(hits, n) < 0.3:
                break
        misses += cs_upper_bound(hits, n) < 0.2
    assert misses / runs <= 0.05


def test_the_rule_keeps_its_error_rates_on_simulated_trials():
    # Wald: false FAIL ≤ α/(1-β), miss ≤ β/(1-α) without a cap; with the cap the undecided runs go to the fixed rule
    rng = np.random.default_rng(11)
    plan = SprtPlan("t", p0=0.1, p1=0.6, alpha=0.05, beta=0.05, cap=40)

    def outcome(rate: float) -> tuple[str, int]:
        hits = 0
        for n in range(1, plan.cap + 1):
            hits += rng.random() < rate
            st = sprt_decision(plan, hits, n)
            if st.decision:
                return st.decision, n
        raise AssertionError("the cap always decides")

    honest = [outcome(0.1) for _ in range(2000)]
    cheat = [outcome(0.6) for _ in range(2000)]
    assert sum(d == "FAIL" for d, _ in honest) / 2000 <= 0.05 / 0.95
    assert sum(d == "PASS" for d, _ in cheat) / 2000 <= 0.05 / 0.95
    # and it stops early: the mean trials sent is well under the cap of 40
    assert np.mean([n for _, n in honest]) < 10 and np.mean([n for _, n in cheat]) < 10
