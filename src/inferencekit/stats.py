"""Statistics shared by every judge: distribution summaries, intervals, tests and the verdict combiner.

Percentiles use numpy's default linear interpolation (Hyndman & Fan type 7), the same as vLLM's
``bench serve`` (``np.percentile``), so p99 figures compare like for like. ``std`` is the population
standard deviation (ddof=0), also as vLLM reports it.

Per-token quality metrics (KL, TV, NLL, top-1 agreement) come as *units*: one ``(sum, count)`` pair
per prompt, e.g. the sum of per-position KL over a prompt and its number of positions. The estimate
is the pooled mean Σsum / Σcount. Positions inside one prompt are correlated, so the intervals
resample whole prompts (a cluster bootstrap), never single positions. ``margin_verdict`` turns an
interval of "how much worse than the A/A noise floor" into PASS / FAIL / UNPROVEN against a
pre-registered non-inferiority margin. ``mcnemar_exact`` compares two arms' paired right/wrong
outcomes (GSM8K).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TypedDict

import numpy as np

__all__ = ["Verdict", "VERDICTS", "PERCENTILES", "summarize", "combine_claims", "rules_out", "wilson_interval",
           "pooled_mean", "cluster_bootstrap_ci", "PairedDelta", "paired_bootstrap_delta", "margin_verdict",
           "mcnemar_exact", "QUANTILE_CI_METHOD", "REPEATS_CI_METHOD", "RATIO_CI_METHOD", "QuantileCI", "quantile_ci",
           "quantile_ci_min_n", "MeanCI", "mean_t_ci", "RatioCI", "ratio_ci"]



class Verdict(StrEnum):
    """The four verdicts (docs/design.md, "Verdicts and exit codes"). A member is its own word as a ``str``, so
    ``Verdict.NOT_RUN == "NOT RUN"`` and records written with either read the same."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNPROVEN = "UNPROVEN"
    NOT_RUN = "NOT RUN"


VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)
PERCENTILES = (50, 90, 95, 99)

Units = Sequence[tuple[float, int]]
"""Per-prompt ``(sum, count)`` pairs: a metric summed over a prompt's positions, and how many positions."""


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """``{n, mean, std, min, max, p50, p90, p95, p99}`` of ``values``; every statistic None when empty.

    Args:
        values: samples in one unit (the caller's; names carry it, e.g. ``ttft_ms``).
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None,
                **{f"p{p}": None for p in PERCENTILES}}
    pct = np.percentile(arr, PERCENTILES)
    return {"n": int(arr.size), "mean": float(arr.mean()), "std": float(arr.std()), "min": float(arr.min()),
            "max": float(arr.max()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct)}}


def combine_claims(verdicts: Iterable[str]) -> Verdict:
    """One verdict for several (docs/design.md): any FAIL → FAIL; else any UNPROVEN → UNPROVEN; else any
    PASS → PASS; else NOT RUN.

    Raises:
        ValueError: a verdict outside PASS/FAIL/UNPROVEN/NOT RUN.
    """
    seen = set()
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"unknown verdict {v!r}")
        seen.add(v)
    for v in (Verdict.FAIL, Verdict.UNPROVEN, Verdict.PASS):
        if v in seen:
            return v
    return Verdict.NOT_RUN


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion of ``k`` successes in ``n`` trials (Wilson 1927), as computed
    by ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.

    Raises:
        ValueError: ``n`` < 1 or ``k`` outside [0, n].
    """
    from scipy.stats import binomtest

    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def rules_out(k: int, n: int, what: str, rate: str, confidence: float = 0.95) -> str:
    """What ``k`` bad items out of ``n`` judged rule out: the upper end of the two-sided Wilson interval
    (``wilson_interval``), e.g. ``rules_out(0, 40, "repeats served from a cache", "cache rate")`` →
    ``"0 of 40 repeats served from a cache: a cache rate above 8.8% is ruled out at 95% (Wilson)"``.

    Raises:
        ValueError: ``n`` < 1 or ``k`` outside [0, n] (as ``wilson_interval``).
    """
    _, high = wilson_interval(k, n, confidence)
    article = "an" if rate[:1].lower() in "aeio" else "a"
    return f"{k} of {n} {what}: {article} {rate} above {high:.1%} is ruled out at {confidence:.0%} (Wilson)"



def _units_array(units: Units | np.ndarray, name: str = "units") -> np.ndarray:
    """``units`` as a float array of shape (n, 2); ValueError on a bad shape, a negative or non-finite value."""
    arr = np.asarray(units, dtype=float)
    if arr.size == 0:
        return np.zeros((0, 2))
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must be (sum, count) pairs, got an array of shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} hold a non-finite sum or count: {arr[~np.isfinite(arr).all(axis=1)][0].tolist()}")
    if (arr[:, 1] < 0).any():
        raise ValueError(f"{name} hold a negative count: {arr[arr[:, 1] < 0][0].tolist()}")
    return arr


def _check_bootstrap(resamples: int, confidence: float) -> None:
    if int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def _resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """Prompt indices drawn with replacement, shape (resamples, n): one row per bootstrap resample."""
    return np.random.default_rng(seed).integers(0, n, size=(int(resamples), n))


def _percentile_bounds(stat: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile-interval bounds of the bootstrap replicates ``stat`` (numpy default, type 7)."""
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(stat, [tail, 100.0 - tail])
    return float(lo), float(hi)


def pooled_mean(units: Units | np.ndarray) -> float | None:
    """Pooled mean Σsum / Σcount of per-prompt units; None when Σcount is 0 (no positions at all).

    Every position weighs the same, so a long prompt counts for more than a short one.

    Args:
        units: per-prompt ``(sum, count)`` pairs, shape (n_prompts, 2); the sum is in the metric's unit
            (e.g. nats for KL), the count in positions.

    Raises:
        ValueError: a pair that is not two numbers, a non-finite value, or a negative count.
    """
    arr = _units_array(units)
    total = arr[:, 1].sum()
    if total == 0:
        return None
    return float(arr[:, 0].sum() / total)


def cluster_bootstrap_ci(units: Units | np.ndarray, resamples: int = 2000, seed: int = 0,
                         confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the pooled mean, resampling prompts (clusters) with replacement.

    Prompts with count 0 are dropped first. Each of ``resamples`` replicates draws n prompt indices with
    replacement from ``np.random.default_rng(seed)`` (all replicates in one (resamples, n) draw, so memory
    is O(resamples × n)) and computes Σsum / Σcount over the drawn prompts; the bounds are the
    (1 − confidence)/2 and (1 + confidence)/2 percentiles of the replicates (numpy's default, type 7).

    Args:
        units: per-prompt ``(sum, count)`` pairs, shape (n_prompts, 2), as for ``pooled_mean``.
        resamples: number of bootstrap replicates.
        seed: seed of the generator; the same inputs and seed give the same interval.
        confidence: coverage of the interval, in (0, 1).

    Returns:
        ``(lo, hi)`` in the metric's unit; ``(None, None)`` when fewer than 2 prompts have a position.

    Raises:
        ValueError: bad units (see ``pooled_mean``), ``resamples`` < 1, or ``confidence`` outside (0, 1).

    Source: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), percentile interval (ch. 13),
    applied to whole prompts because positions within a prompt are correlated (cluster bootstrap).
    """
    _check_bootstrap(resamples, confidence)
    arr = _units_array(units)
    arr = arr[arr[:, 1] > 0]
    n = arr.shape[0]
    if n < 2:
        return None, None
    idx = _resample_indices(n, resamples, seed)
    means = arr[idx, 0].sum(axis=1) / arr[idx, 1].sum(axis=1)
    return _percentile_bounds(means, confidence)


class PairedDelta(TypedDict):
    """What ``paired_bootstrap_delta`` returns: arm a minus arm b, its interval ``[lo, hi]``, the prompts kept."""

    delta: float | None
    ci95: list[float | None]
    n_prompts: int


def paired_bootstrap_delta(a_units: Units | np.ndarray, b_units: Units | np.ndarray, resamples: int = 2000,
                           seed: int = 0, confidence: float = 0.95) -> PairedDelta:
    """Difference of pooled means, arm a minus arm b, with a paired prompt-level bootstrap interval.

    ``a_units[i]`` and ``b_units[i]`` are the same prompt under two arms (e.g. the engine and the A/A
    noise floor). Prompts where either arm has count 0 are dropped. Each replicate draws one set of
    prompt indices and applies it to both arms, so variation shared by the arms (an easy or a hard
    prompt) cancels in the difference; the interval is the percentile interval of the replicates'
    ``pooled_mean(a) − pooled_mean(b)``.

    Args:
        a_units, b_units: per-prompt ``(sum, count)`` pairs of the two arms, aligned by prompt, shape
            (n_prompts, 2) each.
        resamples, seed, confidence: as for ``cluster_bootstrap_ci``.

    Returns:
        ``{"delta": float | None, "ci95": [lo, hi], "n_prompts": int}`` in the metric's unit, where
        ``n_prompts`` counts the prompts kept. With no prompt kept, delta is None; with fewer than 2,
        ``ci95`` is ``[None, None]``. The key is ``ci95`` whatever ``confidence`` is.

    Raises:
        ValueError: the arms differ in length, bad units, ``resamples`` < 1, or ``confidence`` outside (0, 1).

    Source: Efron & Tibshirani (1993), percentile interval, with paired (matched) resampling of the
    prompts as clusters.
    """
    _check_bootstrap(resamples, confidence)
    a = _units_array(a_units, "a_units")
    b = _units_array(b_units, "b_units")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"the arms must be aligned per prompt: a has {a.shape[0]} prompts, b has {b.shape[0]}")
    keep = (a[:, 1] > 0) & (b[:, 1] > 0)
    a, b = a[keep], b[keep]
    n = a.shape[0]
    if n == 0:
        return {"delta": None, "ci95": [None, None], "n_prompts": 0}
    delta = float(a[:, 0].sum() / a[:, 1].sum() - b[:, 0].sum() / b[:, 1].sum())
    if n < 2:
        return {"delta": delta, "ci95": [None, None], "n_prompts": n}
    idx = _resample_indices(n, resamples, seed)
    reps = a[idx, 0].sum(axis=1) / a[idx, 1].sum(axis=1) - b[idx, 0].sum(axis=1) / b[idx, 1].sum(axis=1)
    lo, hi = _percentile_bounds(reps, confidence)
    return {"delta": delta, "ci95": [lo, hi], "n_prompts": n}


def margin_verdict(lo: float | None, hi: float | None, margin: float, *,
                   confidence: float = 0.95) -> tuple[str, str]:
    """Non-inferiority verdict from an interval of "how much worse than the floor" (positive = worse).

    PASS when the whole interval lies within the margin (``hi <= margin``); FAIL when it lies wholly
    beyond it (``lo > margin``); UNPROVEN when it straddles the margin, or when a bound is None or NaN
    (too few prompts for an interval).

    Args:
        lo, hi: interval bounds of the arm's excess over the A/A floor, in the metric's unit (for a
            higher-is-better metric the caller negates and swaps them first).
        margin: the pre-registered non-inferiority margin, same unit.
        confidence: the interval's coverage, used only in the reason's wording.

    Returns:
        ``(verdict, reason)``: verdict one of PASS / FAIL / UNPROVEN; reason one line with the numbers.

    Raises:
        ValueError: ``margin`` not finite, or ``lo`` > ``hi``.

    Source: non-inferiority judged by where a confidence interval lies relative to a pre-specified margin,
    ICH E9 (1998) §3.3.2 and Piaggio et al., CONSORT extension for non-inferiority and equivalence
    trials, JAMA 2012;308(24):2594-2604 (fig. 1).
    """
    if not np.isfinite(margin):
        raise ValueError(f"margin must be a finite number, got {margin!r}")
    ci = f"{100 * confidence:g}% CI"
    if lo is None or hi is None or np.isnan(lo) or np.isnan(hi):
        return "UNPROVEN", f"no {ci}: too few prompts with data (need at least 2)"
    if lo > hi:
        raise ValueError(f"interval bounds out of order: lo={lo!r} > hi={hi!r}")
    if hi <= margin:
        return "PASS", f"worse than the A/A floor by at most {hi:.4g} ({ci} upper bound) <= margin {margin:.4g}"
    if lo > margin:
        return "FAIL", f"worse than the A/A floor by at least {lo:.4g} ({ci} lower bound) > margin {margin:.4g}"
    return "UNPROVEN", (f"worse than the A/A floor by {lo:.4g} to {hi:.4g} ({ci}), which straddles "
                        f"margin {margin:.4g}: more prompts needed")


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts of a paired comparison.

    Args:
        b: pairs where arm 1 was right and arm 2 wrong (count).
        c: pairs where arm 1 was wrong and arm 2 right (count).

    Returns:
        The p-value ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``; 1.0 when there is no discordant pair.

    Raises:
        ValueError: a count that is negative or not an integer.

    Source: McNemar (1947), exact form: under the null each discordant pair falls either way with
    probability 1/2, so b ~ Binomial(b + c, 1/2); two-sided binomial test.
    """
    from scipy.stats import binomtest

    try:
        b, c = operator.index(b), operator.index(c)
    except TypeError as e:
        raise ValueError(f"discordant counts must be integers, got b={b!r}, c={c!r}") from e
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    return float(binomtest(b, b + c, 0.5).pvalue)


# ---- confidence intervals for bench figures (issue 22): a quantile within a run, a figure across repeats,
# the ratio of a figure between two runs

QUANTILE_CI_METHOD = ("order-statistic interval (distribution-free, binomial; Conover 1999 §3.2, Hahn & Meeker 1991 "
                      "§5.2), equal-tailed: each tail ≤ 2.5%")
REPEATS_CI_METHOD = "Student t interval of the mean of the per-repeat figures (K ≥ 2 repeats, K − 1 degrees of freedom)"
RATIO_CI_METHOD = ("Welch t interval on the difference of the mean logs of the per-repeat figures, exponentiated: "
                   "a ratio of geometric means B/A (≥ 2 repeats on each side)")


class QuantileCI(TypedDict):
    """What ``quantile_ci`` returns: the interval ``[lo, hi]`` (the sample's unit), the 1-based ranks of the two
    order statistics ``[l, u]`` and the interval's exact coverage P(l ≤ B < u) for B ~ Binomial(n, q)."""

    ci: list[float]
    ranks: list[int]
    coverage: float


def quantile_ci_min_n(q: float, confidence: float = 0.95) -> int:
    """The smallest sample size for which ``quantile_ci(values, q, confidence)`` gives an interval.

    An equal-tailed interval needs both extreme order statistics to leave each tail ≤ (1 − confidence)/2:
    q^n ≤ α/2 and (1 − q)^n ≤ α/2. At 95%: p50 needs n ≥ 6 (0.5^6 = 0.0156; 0.5^5 = 0.031), p90 n ≥ 36,
    p99 n ≥ 368 (0.99^368 = 0.0248; 0.99^367 = 0.0250 > 0.025).

    Raises:
        ValueError: ``q`` or ``confidence`` outside (0, 1).
    """
    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need 0 < q < 1 and 0 < confidence < 1, got q={q!r}, confidence={confidence!r}")
    tail = (1.0 - confidence) / 2.0
    n = 1
    while q ** n > tail or (1.0 - q) ** n > tail:
        n += 1
    return n


def quantile_ci(values: Sequence[float] | np.ndarray, q: float, confidence: float = 0.95) -> QuantileCI | None:
    """Distribution-free two-sided interval for the population q-quantile ξ_q from order statistics.

    With x_(1) ≤ … ≤ x_(n) the sorted sample and B ~ Binomial(n, q) the number of observations below ξ_q,
    P(x_(l) ≤ ξ_q < x_(u)) = P(l ≤ B < u) = F(u − 1) − F(l − 1), F the binomial CDF (``scipy.stats.binom``),
    for any continuous distribution (with ties the coverage is at least this). The interval is
    equal-tailed: l is the largest rank with P(B < l) ≤ α/2 and u the smallest with P(B ≥ u) ≤ α/2
    (α = 1 − confidence), so each tail holds at most α/2 and the coverage is ≥ confidence (usually above it:
    the binomial is discrete; the exact coverage is returned).

    Sample sizes: the interval exists only when q^n ≤ α/2 and (1 − q)^n ≤ α/2 (``quantile_ci_min_n``). At 95%,
    a median needs n ≥ 6 and a p99 needs n ≥ 368 (a one-sided 95% upper bound would need 299; the
    equal-tailed two-sided interval needs more); below that this returns None, never a made-up interval.

    The samples must be independent draws of one distribution: true of per-request TTFT/TPOT/E2EL within a
    level taken as exchangeable; pooled ITL gaps are correlated within a request, so their interval is too
    narrow (approximate).

    Args:
        values: the sample, in its unit (ms).
        q: the quantile, in (0, 1) (0.5 for p50, 0.99 for p99).
        confidence: the coverage asked, in (0, 1).

    Returns:
        ``{"ci": [x_(l), x_(u)], "ranks": [l, u], "coverage": P(l ≤ B < u)}``, or None when n is too small.

    Raises:
        ValueError: ``q`` or ``confidence`` outside (0, 1).

    Source: W. J. Conover, *Practical Nonparametric Statistics*, 3rd ed. (1999), §3.2 (confidence interval
    for a quantile; for n = 20, q = 0.5 it gives [x_(6), x_(15)]); G. J. Hahn & W. Q. Meeker, *Statistical
    Intervals* (1991), §5.2 (distribution-free intervals for percentiles).
    """
    from scipy.stats import binom

    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need 0 < q < 1 and 0 < confidence < 1, got q={q!r}, confidence={confidence!r}")
    x = np.sort(np.asarray(values, dtype=float))
    n = int(x.size)
    if n == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    k = np.arange(n)
    below = binom.cdf(k, n, q)  # below[r − 1] = P(B ≤ r − 1) = P(B < r), ranks r = 1..n
    above = binom.sf(k, n, q)  # above[r − 1] = P(B > r − 1) = P(B ≥ r)
    # l: the largest rank with P(B < l) ≤ tail; u: the smallest rank with P(B ≥ u) ≤ tail
    lows = np.nonzero(below <= tail)[0]
    highs = np.nonzero(above <= tail)[0]
    if lows.size == 0 or highs.size == 0:
        return None
    lo_r, hi_r = int(lows[-1]) + 1, int(highs[0]) + 1
    coverage = float(1.0 - below[lo_r - 1] - above[hi_r - 1])
    return {"ci": [float(x[lo_r - 1]), float(x[hi_r - 1])], "ranks": [lo_r, hi_r], "coverage": coverage}


class MeanCI(TypedDict):
    """What ``mean_t_ci`` returns: the mean of the K figures, its interval ``[lo, hi]`` (their unit), and K."""

    mean: float
    ci: list[float]
    k: int


def mean_t_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95, *, lower: float | None = None
              ) -> MeanCI | None:
    """Student t interval for the mean of K per-repeat figures: mean ± t_{1−α/2, K−1} · s / √K.

    ``s`` is the sample standard deviation (ddof = 1). Assumes the K repeats are independent draws of one
    run-to-run distribution, roughly normal (the t interval is robust to mild skew; with K = 2 it is wide:
    t_{0.975, 1} = 12.71).

    Args:
        values: one figure per repeat (e.g. the TTFT p50 of each repeat of a load point), its unit.
        confidence: coverage, in (0, 1).
        lower: the least value the figure can take (0 for a latency, a rate or a share), where the interval's lower
            end is clipped: the mean cannot lie below it, so clipping loses no coverage (with K = 2 the bare interval
            of a latency can reach below 0 ms).

    Returns:
        ``{"mean", "ci": [lo, hi], "k"}``; None when K < 2 (no spread to estimate) or a value is not finite.

    Raises:
        ValueError: ``confidence`` outside (0, 1).

    Source: Student (1908); e.g. Montgomery & Runger, *Applied Statistics and Probability for Engineers*,
    §8.2 (CI on the mean of a normal distribution, variance unknown); ``scipy.stats.t``.
    """
    from scipy.stats import t

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    x = np.asarray(values, dtype=float)
    k = int(x.size)
    if k < 2 or not np.isfinite(x).all():
        return None
    mean = float(x.mean())
    half = float(t.ppf(0.5 + confidence / 2.0, k - 1) * x.std(ddof=1) / np.sqrt(k))
    lo = mean - half if lower is None else max(lower, mean - half)
    return {"mean": mean, "ci": [lo, mean + half], "k": k}


class RatioCI(TypedDict):
    """What ``ratio_ci`` returns: the ratio B/A of geometric means, its interval, Welch's degrees of freedom
    (None when both sides have no spread) and the repeat counts."""

    ratio: float
    ci: list[float]
    df: float | None
    k_a: int
    k_b: int


def ratio_ci(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
             confidence: float = 0.95) -> RatioCI | None:
    """Interval for the ratio B/A of a figure across the repeats of two runs (Welch t on the logs).

    d = mean(ln b) − mean(ln a); se² = s_a²/K_a + s_b²/K_b (sample variances of the logs, ddof = 1);
    Welch–Satterthwaite df = se⁴ / ((s_a²/K_a)²/(K_a − 1) + (s_b²/K_b)²/(K_b − 1)); interval
    exp(d ± t_{1−α/2, df} · se). The ratio is that of the geometric means of the repeats.

    Assumes: every per-repeat figure is > 0; the repeats of each run are independent; their logs are roughly
    normal (a multiplicative run-to-run noise: a latency or throughput scales, it does not shift); the two
    runs may have unequal variances and unequal K (Welch). When both sides have zero spread the interval is
    the point ``[r, r]`` and ``df`` is None (identical repeats: nothing to estimate).

    Args:
        a, b: one figure per repeat for run A (the baseline) and run B, same unit.
        confidence: coverage, in (0, 1).

    Returns:
        ``{"ratio", "ci": [lo, hi], "df", "k_a", "k_b"}``; None when either side has fewer than 2 repeats or a
        figure that is not finite and > 0.

    Raises:
        ValueError: ``confidence`` outside (0, 1).

    Source: B. L. Welch, "The generalization of Student's problem when several different population variances
    are involved", Biometrika 34 (1947); the log transform for ratios: e.g. Kohavi et al., *Trustworthy Online
    Controlled Experiments* (2020), ch. 18 (percent change); ``scipy.stats.t``.
    """
    from scipy.stats import t

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.size < 2 or xb.size < 2:
        return None
    if not (np.isfinite(xa).all() and np.isfinite(xb).all() and (xa > 0).all() and (xb > 0).all()):
        return None
    la, lb = np.log(xa), np.log(xb)
    d = float(lb.mean() - la.mean())
    va, vb = float(la.var(ddof=1)) / xa.size, float(lb.var(ddof=1)) / xb.size
    se2 = va + vb
    if se2 == 0.0:
        r = float(np.exp(d))
        return {"ratio": r, "ci": [r, r], "df": None, "k_a": int(xa.size), "k_b": int(xb.size)}
    df = se2 ** 2 / (va ** 2 / (xa.size - 1) + vb ** 2 / (xb.size - 1))
    half = float(t.ppf(0.5 + confidence / 2.0, df) * np.sqrt(se2))
    return {"ratio": float(np.exp(d)), "ci": [float(np.exp(d - half)), float(np.exp(d + half))], "df": float(df),
            "k_a": int(xa.size), "k_b": int(xb.size)}
