"""The equivalence audit's statistics against known values, scipy, and simulation (issue 20)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import permutation_test

from inferencekit.quality.equivalence_stats import (
    blocked_mmd_test,
    first_token_distance,
    first_token_statistic,
    logprob_statistic,
    mmd2_unbiased,
    mmd_permutation_test,
    power_cell,
    rate_lower,
    rate_upper,
    spectrum_gram,
    threshold_at,
)


def test_spectrum_kernel_and_mmd_on_fixed_strings():
    # unigrams of "\x02aa\x03" are {\x02: 1, a: 2, \x03: 1}, norm √6; against "\x02bb\x03" they share the two marks
    gram = spectrum_gram(["aa", "aa", "bb", "bb"], n=1)
    assert gram[0, 2] == pytest.approx(2 / 6) and gram[0, 1] == pytest.approx(1.0) and np.allclose(np.diag(gram), 1)
    # off-diagonal means 1 and 1 within each side, 1/3 across: 1 + 1 − 2/3
    assert mmd2_unbiased(gram, np.array([0, 1]), np.array([2, 3])) == pytest.approx(4 / 3)
    # the same two strings on each side: within-side means k01, across (1 + k01)/2, so MMD² = k01 − 1 < 0
    same = spectrum_gram(["the cat", "a dog", "the cat", "a dog"])
    assert mmd2_unbiased(same, np.array([0, 1]), np.array([2, 3])) == pytest.approx(same[0, 1] - 1)
    with pytest.raises(ValueError, match="at least 2"):
        mmd2_unbiased(gram, np.array([0]), np.array([2, 3]))


def test_identical_samples_give_an_mmd_at_or_below_zero_and_a_large_p():
    xs = ["the cat sat", "a dog ran", "birds sing", "rain falls"]
    res = mmd_permutation_test(xs, list(xs), permutations=500, seed=1)
    assert res["mmd2"] <= 1e-12 and res["p_value"] > 0.5


def test_permutation_p_value_agrees_with_scipy():
    x = ["the cat sat on the mat", "the cat sat down", "a cat sat", "the cat is on the mat", "cats sit"]
    y = ["stock prices fell today", "markets rose", "the index fell", "shares fell sharply", "bonds rallied"]
    ours = mmd_permutation_test(x, y, permutations=20000, seed=7)
    gram = spectrum_gram([*x, *y])

    def stat(a: np.ndarray, b: np.ndarray) -> float:
        return mmd2_unbiased(gram, a.astype(int), b.astype(int))

    ref = permutation_test((np.arange(5), np.arange(5, 10)), stat, permutation_type="independent",
                           alternative="greater", n_resamples=np.inf, vectorized=False)
    # scipy enumerates all 252 splits (exact); ours samples 20,000 with the +1 correction: Monte Carlo sd ≈ 0.0003 here
    assert ours["mmd2"] == pytest.approx(ref.statistic)
    assert ours["p_value"] == pytest.approx(ref.pvalue, abs=0.005)
    assert ref.pvalue < 0.05


def test_threshold_is_the_conformal_quantile():
    honest = list(range(1, 100))  # 99 runs
    assert threshold_at(honest, 0.01) == 99  # rank ⌈0.99 × 100⌉ = 99: the largest
    assert threshold_at(honest[:98], 0.01) is None  # 98 runs cannot set a 1% threshold
    assert threshold_at(honest, 0.05) == 95
    with pytest.raises(ValueError):
        threshold_at(honest, 0.0)
    with pytest.raises(ValueError):
        threshold_at([1.0, math.nan], 0.5)


def test_threshold_false_alarm_rate_by_simulation():
    rng = np.random.default_rng(0)
    alarms = 0
    trials = 6000
    for _ in range(trials):
        thr = threshold_at(rng.normal(size=59).tolist(), 0.05)
        assert thr is not None
        alarms += rng.normal() > thr
    # exchangeable runs: P(alarm) = 1 − 57/60 = 0.05 exactly; 6,000 trials give sd ≈ 0.0028
    assert abs(alarms / trials - 0.05) < 0.0085


def test_clopper_pearson_bounds_match_the_counts_the_issue_names():
    assert rate_upper(0, 299) <= 0.01 < rate_upper(0, 298)  # 0 alarms in 299 runs: ≤ 1% at 95%
    assert rate_upper(0, 59) <= 0.05 < rate_upper(0, 58)
    assert rate_lower(59, 59) >= 0.95 > rate_lower(58, 58)  # 59 of 59 detected: power ≥ 95%
    assert rate_lower(0, 10) == 0.0 and rate_upper(3, 3) == 1.0 and rate_upper(0, 0) == 1.0
    assert rate_lower(59, 59) == pytest.approx(0.05 ** (1 / 59))


def test_power_lower_bound_covers_the_true_power_by_simulation():
    rng = np.random.default_rng(3)
    true_power, n = 0.9, 59
    covered = sum(rate_lower(int(rng.binomial(n, true_power)), n) <= true_power for _ in range(4000))
    assert covered / 4000 >= 0.95  # exact bounds are conservative


def test_power_cell_counts_runs_above_the_threshold():
    cell = power_cell([0.1, 0.5, 0.9, 2.0], threshold=0.5)
    assert cell["runs"] == 4 and cell["detected"] == 2 and cell["power"] == 0.5
    assert 0 < cell["power_lower"] < 0.5
    assert power_cell([1.0], None)["power"] is None


def test_logprob_statistic_from_position_rows():
    rows = [{"kl": 0.2, "gap": 0.0, "clamped": False}, {"kl": 0.4, "gap": 1.0, "clamped": False},
            {"kl": 9.0, "gap": 9.0, "clamped": True}, {"kl": None, "gap": 0.5, "clamped": False}]
    s = logprob_statistic(rows)
    assert s["kl_mean"] == pytest.approx(0.3) and s["gap_mean"] == pytest.approx(0.5)
    assert s["statistic"] == pytest.approx(0.8) and s["positions_kl"] == 2 and s["positions_gap"] == 3
    assert s["name"] == "kl+gap"
    gap_only = logprob_statistic([{"kl": None, "gap": 0.25, "clamped": False}, {"kl": None, "gap": 0.75}])
    assert gap_only["name"] == "gap" and gap_only["statistic"] == pytest.approx(0.5) and gap_only["positions"] == 2
    assert logprob_statistic([])["statistic"] is None and logprob_statistic([])["name"] is None


def test_first_token_distance_imputes_a_missing_engine_token():
    ref = {1: -0.1, 2: -2.5, 3: -4.0}
    eng = {1: -0.2, 2: -2.0}  # 3 unlisted: at most -2.0
    assert first_token_distance(ref, eng) == pytest.approx((0.1 + 0.5 + 2.0) / 3)
    stat = first_token_statistic([(ref, eng), ({}, eng), (ref, ref)])
    assert stat["prompts"] == 2 and stat["skipped"] == 1
    assert stat["statistic"] == pytest.approx((0.1 + 0.5 + 2.0) / 6)
    with pytest.raises(ValueError):
        first_token_distance({}, eng)


def test_blocked_mmd_is_the_mean_of_per_prompt_mmds_and_never_compares_prompts():
    eng = {"a": ["aa", "aa"], "b": ["the cat", "a dog"], "c": ["only one"], "e": ["one"]}
    ref = {"a": ["bb", "bb"], "b": ["the cat", "a dog"], "d": ["x", "y"], "e": ["two", "three"]}
    res = blocked_mmd_test(eng, ref, permutations=200, n=1)
    gb = spectrum_gram(["the cat", "a dog"], n=1)
    assert res["prompts"] == 2 and res["skipped"] == 3  # c, d on one side only; e has one engine completion
    assert res["statistic"] == pytest.approx((4 / 3 + (gb[0, 1] - 1)) / 2)
    assert blocked_mmd_test({"a": ["x"]}, {"a": ["y"]})["statistic"] is None


def test_blocked_mmd_p_value_matches_the_two_sample_test_on_one_prompt():
    x = ["the cat sat on the mat", "the cat sat down", "a cat sat", "the cat is on the mat", "cats sit"]
    y = ["stock prices fell today", "markets rose", "the index fell", "shares fell sharply", "bonds rallied"]
    one = blocked_mmd_test({"p": x}, {"p": y}, permutations=5000, seed=1)
    two = mmd_permutation_test(x, y, permutations=5000, seed=2)
    assert one["statistic"] == pytest.approx(two["mmd2"]) and abs(one["p_value"] - two["p_value"]) < 0.01


def test_blocked_mmd_false_alarms_at_the_nominal_rate_under_the_null():
    rng = np.random.default_rng(5)
    words = ["red", "blue", "green", "cat", "dog", "sat", "ran", "the", "a", "on"]

    def draw() -> str:
        return " ".join(rng.choice(words, size=4))

    alarms, trials = 0, 200
    for _ in range(trials):
        eng = {f"p{i}": [draw() for _ in range(4)] for i in range(3)}
        ref = {f"p{i}": [draw() for _ in range(4)] for i in range(3)}
        alarms += blocked_mmd_test(eng, ref, permutations=99, seed=int(rng.integers(1 << 30)))["p_value"] <= 0.05
    # a valid permutation test: P(p ≤ 0.05) ≤ 0.05 under the null; 200 trials, sd ≈ 0.015
    assert alarms / trials <= 0.05 + 0.035
