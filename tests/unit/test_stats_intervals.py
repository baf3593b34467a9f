"""The bench confidence intervals (stats.quantile_ci, mean_t_ci, ratio_ci) against values computed by hand."""

import math

import numpy as np
import pytest

from inferencekit.stats import mean_t_ci, quantile_ci, quantile_ci_min_n, ratio_ci

T_975_4 = 2.7764451051977987  # Student t quantile 0.975 with 4 df (tables: 2.776)


def _binom_cdf(k: int, n: int, q: float) -> float:
    """P(B ≤ k), B ~ Binomial(n, q), summed exactly (no scipy) for the hand checks."""
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k + 1))


def test_median_interval_n20_is_the_textbook_x6_x15():
    # Conover (1999) §3.2 / binomial tables: n = 20, median, 95% → [x_(6), x_(15)];
    # P(B ≤ 5) = (1 + 20 + 190 + 1140 + 4845 + 15504) / 2^20 = 21700 / 1048576
    sample = [float(v) for v in (7, 3, 19, 1, 12, 15, 4, 20, 9, 2, 11, 18, 6, 14, 5, 17, 10, 16, 8, 13)]
    out = quantile_ci(sample, 0.5)
    assert out is not None
    assert out["ranks"] == [6, 15]
    assert out["ci"] == [6.0, 15.0]  # the 6th and 15th smallest of 1..20, whatever the order given
    assert out["coverage"] == pytest.approx(1 - 2 * 21700 / 1048576, abs=1e-12)


def test_median_needs_six_samples():
    assert quantile_ci([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) is None  # 0.5^5 = 0.031 > 0.025
    out = quantile_ci([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 0.5)
    assert out == {"ci": [1.0, 6.0], "ranks": [1, 6], "coverage": pytest.approx(1 - 2 / 64)}
    assert quantile_ci([], 0.5) is None


def test_p99_needs_368_samples_equal_tailed():
    assert 0.99 ** 367 > 0.025 >= 0.99 ** 368
    assert quantile_ci_min_n(0.99) == 368
    assert quantile_ci(np.arange(367.0), 0.99) is None
    out = quantile_ci(np.arange(368.0), 0.99)
    assert out is not None
    lo, hi = out["ranks"]
    assert hi == 368  # P(B ≥ 368) = 0.99^368 ≤ 0.025 and P(B ≥ 367) > 0.025
    # l is the largest rank with P(B < l) ≤ 0.025
    assert _binom_cdf(lo - 1, 368, 0.99) <= 0.025 < _binom_cdf(lo, 368, 0.99)
    assert out["coverage"] == pytest.approx(1 - _binom_cdf(lo - 1, 368, 0.99) - 0.99 ** 368, abs=1e-9)
    assert out["coverage"] >= 0.95
    assert out["ci"] == [float(lo - 1), 367.0]


def test_min_n_by_hand():
    assert quantile_ci_min_n(0.5) == 6
    assert quantile_ci_min_n(0.9) == 36  # 0.9^35 = 0.02503, 0.9^36 = 0.02253
    with pytest.raises(ValueError):
        quantile_ci_min_n(1.0)
    with pytest.raises(ValueError):
        quantile_ci([1.0], 0.5, confidence=1.0)


def test_quantile_interval_holds_the_sample_quantile_and_narrows():
    rng = np.random.default_rng(7)
    small, large = rng.lognormal(size=50), rng.lognormal(size=5000)
    for x in (small, large):
        out = quantile_ci(x, 0.5)
        assert out is not None and out["ci"][0] <= np.median(x) <= out["ci"][1]
    ws = quantile_ci(small, 0.5)["ci"]  # type: ignore[index]
    wl = quantile_ci(large, 0.5)["ci"]  # type: ignore[index]
    assert wl[1] - wl[0] < ws[1] - ws[0]


def test_mean_t_interval_by_hand():
    # mean 3, s = √2.5, se = √(2.5/5) = 0.7071; half-width = t(0.975, 4) · 0.7071 = 1.96324
    out = mean_t_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert out is not None
    assert out["mean"] == 3.0 and out["k"] == 5
    half = T_975_4 * math.sqrt(0.5)
    assert out["ci"] == pytest.approx([3.0 - half, 3.0 + half], abs=1e-12)
    assert out["ci"][0] == pytest.approx(1.03676, abs=1e-5)


def test_mean_t_interval_needs_two_repeats():
    assert mean_t_ci([4.2]) is None
    assert mean_t_ci([]) is None
    assert mean_t_ci([1.0, float("nan")]) is None
    two = mean_t_ci([10.0, 12.0])  # s = √2, se = 1, t(0.975, 1) = 12.7062
    assert two is not None and two["ci"] == pytest.approx([11 - 12.706204736, 11 + 12.706204736], abs=1e-6)


def test_ratio_equal_variances_is_student_with_pooled_df():
    # logs of A: 0, .2, .4 (mean .2, var .04); of B: .3, .5, .7 (mean .5, var .04): Welch df = 4,
    # se = √(.04/3 + .04/3) = 0.163299; interval exp(0.3 ± 2.776445 · 0.163299)
    out = ratio_ci(np.exp([0.0, 0.2, 0.4]), np.exp([0.3, 0.5, 0.7]))
    assert out is not None
    assert out["ratio"] == pytest.approx(math.exp(0.3))
    assert out["df"] == pytest.approx(4.0)
    half = T_975_4 * math.sqrt(0.08 / 3)
    assert out["ci"] == pytest.approx([math.exp(0.3 - half), math.exp(0.3 + half)], rel=1e-9)
    assert out["ci"][0] == pytest.approx(0.85779, abs=1e-4)  # contains 1: no difference shown


def test_ratio_unequal_k_welch_df_by_hand():
    # A logs 0, .2, .4 (var .04, K 3); B logs .3, .5, .7, .9 (var 1/15, K 4): va = 1/75, vb = 1/60,
    # se² = .03, df = .03² / ((1/75)²/2 + (1/60)²/3) = 109350 / 22050 = 4.95918
    out = ratio_ci(np.exp([0.0, 0.2, 0.4]), np.exp([0.3, 0.5, 0.7, 0.9]))
    assert out is not None
    assert out["ratio"] == pytest.approx(math.exp(0.4))
    assert out["df"] == pytest.approx(109350 / 22050)
    assert (out["k_a"], out["k_b"]) == (3, 4)
    lo, hi = out["ci"]
    assert lo * hi == pytest.approx(math.exp(0.8))  # symmetric on the log scale
    assert hi / out["ratio"] == pytest.approx(math.exp(math.sqrt(0.03) * 2.5768), rel=1e-3)


def test_ratio_refuses_too_few_or_non_positive():
    assert ratio_ci([1.0], [1.0, 2.0]) is None
    assert ratio_ci([1.0, 2.0], [0.0, 2.0]) is None
    assert ratio_ci([1.0, -2.0], [1.0, 2.0]) is None
    same = ratio_ci([2.0, 2.0, 2.0], [3.0, 3.0])
    assert same is not None and same["ci"] == pytest.approx([1.5, 1.5]) and same["df"] is None


def test_mean_t_interval_clipped_at_a_floor():
    # two repeats of a latency, 10 and 400 ms: mean 205, s = 275.77, half = 12.706 · 275.77/√2 = 2477.7 → below 0
    bare = mean_t_ci([10.0, 400.0])
    clipped = mean_t_ci([10.0, 400.0], lower=0.0)
    assert bare is not None and clipped is not None
    assert bare["ci"][0] == pytest.approx(205.0 - 12.7062047 * 390.0 / 2.0, rel=1e-6) and bare["ci"][0] < 0
    assert clipped["ci"] == [0.0, bare["ci"][1]] and clipped["mean"] == 205.0
    assert mean_t_ci([1.0, 2.0, 3.0, 4.0, 5.0], lower=0.0) == mean_t_ci([1.0, 2.0, 3.0, 4.0, 5.0])  # above it
