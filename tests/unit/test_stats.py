import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap

from inferencekit.stats import cluster_bootstrap_ci, margin_verdict, mcnemar_exact, paired_bootstrap_delta, pooled_mean

# ---------------------------------------------------------------------------------------------- pooled mean


def test_pooled_mean_weights_positions_not_prompts():
    # prompt 1: 2 positions summing to 3; prompt 2: 3 positions summing to 5 → 8 / 5 (the mean of the
    # per-prompt means would be (1.5 + 1.6667) / 2 = 1.5833)
    assert pooled_mean([(3.0, 2), (5.0, 3)]) == pytest.approx(1.6)
    assert pooled_mean(np.array([[3.0, 2], [5.0, 3], [0.0, 0]])) == pytest.approx(1.6)


def test_pooled_mean_none_without_positions():
    assert pooled_mean([]) is None
    assert pooled_mean([(0.0, 0), (0.0, 0)]) is None


@pytest.mark.parametrize("units", [[(1.0, -1)], [(float("nan"), 1)], [(1.0, 2.0, 3.0)]])
def test_pooled_mean_rejects_bad_units(units):
    with pytest.raises(ValueError):
        pooled_mean(units)


# ---------------------------------------------------------------------------------------- cluster bootstrap


def test_cluster_ci_pools_within_each_resample():
    # Two prompts: A = (0 over 1 position), B = (10 over 9 positions). A resample is {A, A} → 0,
    # {B, B} → 20/18 = 1.111, or {A, B} in either order → 10/10 = 1.0 (probability 1/2). The 40th and
    # 60th percentiles (confidence 0.2) both fall inside the {A, B} mass, so both bounds are exactly 1.0;
    # averaging the per-prompt means instead would give (0 + 1.111) / 2 = 0.5556.
    lo, hi = cluster_bootstrap_ci([(0.0, 1), (10.0, 9)], resamples=4000, seed=3, confidence=0.2)
    assert (lo, hi) == (1.0, 1.0)


def test_cluster_ci_two_point_extremes():
    # values 0 and 1, one position each: resample means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4,
    # so the 2.5th and 97.5th percentiles of 2000 replicates are 0 and 1
    assert cluster_bootstrap_ci([(0.0, 1), (1.0, 1)], resamples=2000, seed=0) == (0.0, 1.0)


def test_cluster_ci_reproducible_and_seeded():
    rng = np.random.default_rng(11)
    units = [(float(rng.normal(0.1, 0.05) * c), int(c)) for c in rng.integers(1, 50, size=40)]
    first = cluster_bootstrap_ci(units, resamples=1000, seed=5)
    assert cluster_bootstrap_ci(units, resamples=1000, seed=5) == first
    assert cluster_bootstrap_ci(units, resamples=1000, seed=6) != first
    lo, hi = first
    assert lo < pooled_mean(units) < hi


def test_cluster_ci_drops_empty_prompts_before_drawing():
    units = [(1.0, 2), (4.0, 3), (0.5, 1), (2.0, 4)]
    padded = [(0.0, 0)] + units[:2] + [(0.0, 0), (0.0, 0)] + units[2:]
    assert cluster_bootstrap_ci(padded, resamples=500, seed=1) == cluster_bootstrap_ci(units, resamples=500, seed=1)


def test_cluster_ci_needs_two_prompts():
    assert cluster_bootstrap_ci([]) == (None, None)
    assert cluster_bootstrap_ci([(3.0, 4)]) == (None, None)
    assert cluster_bootstrap_ci([(3.0, 4), (0.0, 0)]) == (None, None)


def test_cluster_ci_narrows_with_more_prompts():
    rng = np.random.default_rng(2)
    vals = rng.normal(0.0, 1.0, size=500)
    small = cluster_bootstrap_ci([(v, 1) for v in vals[:20]], resamples=2000, seed=0)
    large = cluster_bootstrap_ci([(v, 1) for v in vals], resamples=2000, seed=0)
    # the width shrinks like 1/sqrt(n): 25 times the prompts → about 1/5 the width
    assert (large[1] - large[0]) < 0.4 * (small[1] - small[0])


def test_cluster_ci_matches_scipy_percentile_bootstrap_for_unit_counts():
    # with every count 1 the pooled mean is the plain mean: scipy's percentile bootstrap of np.mean is the
    # same estimator with different random draws, so the bounds agree within Monte-Carlo error
    data = np.random.default_rng(7).gamma(2.0, 0.3, size=30)
    ours = cluster_bootstrap_ci([(x, 1) for x in data], resamples=20000, seed=0)
    ref = bootstrap((data,), np.mean, n_resamples=20000, method="percentile", confidence_level=0.95,
                    rng=np.random.default_rng(1)).confidence_interval
    width = ref.high - ref.low
    assert abs(ours[0] - ref.low) < 0.1 * width
    assert abs(ours[1] - ref.high) < 0.1 * width


def test_cluster_ci_confidence_changes_width():
    units = [(float(x), 1) for x in np.random.default_rng(4).normal(size=50)]
    lo95, hi95 = cluster_bootstrap_ci(units, seed=0)
    lo50, hi50 = cluster_bootstrap_ci(units, seed=0, confidence=0.5)
    assert lo95 < lo50 < hi50 < hi95


@pytest.mark.parametrize("kw", [{"resamples": 0}, {"confidence": 1.0}, {"confidence": 0.0}])
def test_cluster_ci_rejects_bad_arguments(kw):
    with pytest.raises(ValueError):
        cluster_bootstrap_ci([(1.0, 1), (2.0, 1)], **kw)


# ------------------------------------------------------------------------------------------ paired delta


def test_paired_constant_shift_has_zero_width():
    # every prompt's mean under arm a is arm b's plus 0.1 (same counts), so every paired replicate's
    # difference is 0.1: the interval collapses onto it, however noisy the prompts are
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 40, size=25)
    b = [(float(rng.normal(0.3, 0.2) * c), int(c)) for c in counts]
    a = [(s + 0.1 * c, c) for s, c in b]
    d = paired_bootstrap_delta(a, b, resamples=2000, seed=0)
    assert d["n_prompts"] == 25
    assert d["delta"] == pytest.approx(0.1, abs=1e-12)
    assert d["ci95"] == pytest.approx([0.1, 0.1], abs=1e-12)
    # unpaired, the same arm a alone spreads far wider than that
    lo, hi = cluster_bootstrap_ci(a, resamples=2000, seed=0)
    assert hi - lo > 0.05


def test_paired_delta_hand_computed_and_antisymmetric():
    a = [(2.0, 2), (3.0, 1), (1.0, 1)]  # pooled 6/4 = 1.5
    b = [(1.0, 2), (1.0, 1), (2.0, 1)]  # pooled 4/4 = 1.0
    d = paired_bootstrap_delta(a, b, resamples=3000, seed=9)
    assert d["delta"] == pytest.approx(0.5)
    lo, hi = d["ci95"]
    assert lo < 0.5 < hi
    r = paired_bootstrap_delta(b, a, resamples=3000, seed=9)
    assert r["delta"] == pytest.approx(-0.5)
    assert r["ci95"] == pytest.approx([-hi, -lo], abs=1e-12)


def test_paired_drops_prompts_missing_in_either_arm():
    a = [(1.0, 1), (0.0, 0), (2.0, 1), (5.0, 1)]
    b = [(0.0, 1), (1.0, 1), (1.0, 1), (0.0, 0)]
    d = paired_bootstrap_delta(a, b)
    # kept: prompts 0 and 2 → a = 3/2, b = 1/2
    assert d["n_prompts"] == 2
    assert d["delta"] == pytest.approx(1.0)
    assert d["ci95"] == pytest.approx([1.0, 1.0])  # both kept prompts differ by exactly 1


def test_paired_too_few_prompts():
    assert paired_bootstrap_delta([], []) == {"delta": None, "ci95": [None, None], "n_prompts": 0}
    assert paired_bootstrap_delta([(1.0, 0)], [(1.0, 1)]) == {"delta": None, "ci95": [None, None], "n_prompts": 0}
    one = paired_bootstrap_delta([(3.0, 2), (1.0, 0)], [(1.0, 1), (1.0, 1)])
    assert one == {"delta": pytest.approx(0.5), "ci95": [None, None], "n_prompts": 1}


def test_paired_rejects_unaligned_arms():
    with pytest.raises(ValueError, match="aligned"):
        paired_bootstrap_delta([(1.0, 1), (2.0, 1)], [(1.0, 1)])


# ---------------------------------------------------------------------------------------- margin verdict


def test_margin_pass():
    v, why = margin_verdict(0.001, 0.0031, 0.02)
    assert v == "PASS"
    assert why == "worse than the A/A floor by at most 0.0031 (95% CI upper bound) <= margin 0.02"


def test_margin_pass_on_the_boundary_and_below_zero():
    assert margin_verdict(-0.01, 0.02, 0.02)[0] == "PASS"
    assert margin_verdict(-0.3, -0.1, 0.02)[0] == "PASS"  # better than the floor


def test_margin_fail():
    v, why = margin_verdict(0.025, 0.04, 0.02)
    assert v == "FAIL"
    assert "0.025" in why and "0.02" in why and "lower bound" in why


def test_margin_unproven_when_straddling():
    v, why = margin_verdict(0.01, 0.03, 0.02)
    assert v == "UNPROVEN"
    assert "0.01" in why and "0.03" in why and "straddles" in why
    assert margin_verdict(0.02, 0.03, 0.02)[0] == "UNPROVEN"  # lo == margin is not beyond it


@pytest.mark.parametrize("lo,hi", [(None, None), (None, 0.01), (0.01, None), (float("nan"), 0.01)])
def test_margin_unproven_without_interval(lo, hi):
    v, why = margin_verdict(lo, hi, 0.02)
    assert v == "UNPROVEN"
    assert "too few prompts" in why


def test_margin_wording_follows_confidence():
    assert "90% CI upper bound" in margin_verdict(0.0, 0.01, 0.02, confidence=0.9)[1]


@pytest.mark.parametrize("lo,hi,margin", [(0.0, 0.01, float("nan")), (0.02, 0.01, 0.05)])
def test_margin_rejects_bad_input(lo, hi, margin):
    with pytest.raises(ValueError):
        margin_verdict(lo, hi, margin)


# ---------------------------------------------------------------------------------------------- McNemar


def test_mcnemar_textbook_value():
    # b = 10, c = 2: p = 2 · P(X <= 2 | X ~ Bin(12, 1/2)) = 2 · (1 + 12 + 66) / 4096 = 158 / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(0.0385742188, abs=1e-10)
    assert mcnemar_exact(2, 10) == pytest.approx(158 / 4096, rel=1e-12)


@pytest.mark.parametrize("b,c", [(0, 5), (7, 3), (20, 21), (1, 0), (40, 12)])
def test_mcnemar_matches_scipy_binomtest(b, c):
    assert mcnemar_exact(b, c) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-12)


def test_mcnemar_edges():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == pytest.approx(1.0)
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # both tails of 1/32
    assert mcnemar_exact(np.int64(10), np.int64(2)) == pytest.approx(158 / 4096)


@pytest.mark.parametrize("b,c", [(-1, 3), (2, -1), (1.5, 2)])
def test_mcnemar_rejects_bad_counts(b, c):
    with pytest.raises(ValueError):
        mcnemar_exact(b, c)
