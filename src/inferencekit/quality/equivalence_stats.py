"""The statistics of the equivalence audit (pure): run statistics, honest thresholds, power, and the
two-sample tests for endpoints that serve less than logprobs on every token.

The audit asks "is this endpoint serving the model it claims, at the precision it claims?". Each
method reduces one audit run to one number, its *run statistic*; the run, not the token, is the unit
(tokens of one run share a prompt set, an engine lifetime and a machine state, so they are not
independent draws). An alarm is a run statistic above a threshold fixed on honest replicas.

Run statistics (each in nats unless said):

- ``logprob`` (``kl+gap``): the mean over generated positions of KL(ref ‖ eng) at the shared top-k plus the
  greedy DiFR score ``gap = lp_ref(argmax_ref) − lp_ref(token_eng)`` (≥ 0; 0 where the engine took the
  reference's argmax). ``gap`` is the greedy form of Token-DiFR's divergence from the reference
  (Karvonen et al., arXiv 2511.20621, which synchronises sampling seeds; with greedy decoding the
  reference's own margin over the engine's token plays that part). Positions where the reference
  clamps the token's probability (``clamped``) or either side lists nothing count in neither term.
  An engine that names no token ids (llama-cpp-python) gives ``gap`` alone, on its re-tokenized text.
- ``first_token``: the mean over prompts of the mean absolute difference between the engine's and the
  reference's first-token logprobs over the reference's top-k tokens (an engine token missing from
  the engine's list gets the engine's least listed logprob: it cannot be more likely). The
  logprob-tracking idea of Chauvin et al. (ICLR 2026): many short prompts, one output token.
- ``text``: the unbiased MMD² between the engine's and the reference's sampled completions under a
  character n-gram spectrum kernel (cosine-normalised counts, n = 3), with a permutation p-value.
  The sample-based test of Model Equality Testing (Gao et al., ICLR 2025), which uses MMD with a
  Hamming kernel on fixed-length token strings; a spectrum kernel does not need equal lengths.
  MMD estimator: Gretton et al., "A Kernel Two-Sample Test", JMLR 13 (2012), eq. 3 (unbiased).

Thresholds and rates:

- ``threshold_at(honest, alpha)``: the ⌈(1 − α)(n + 1)⌉-th smallest of n honest run statistics (the
  split-conformal quantile: a new honest run exceeds it with probability ≤ α when runs are
  exchangeable; Vovk et al., *Algorithmic Learning in a Random World*, 2005). Undefined (None) when
  n is too small for α (n + 1 < 1/α).
- ``rate_upper`` / ``rate_lower``: one-sided exact Clopper–Pearson bounds (Clopper & Pearson,
  Biometrika 26, 1934) via scipy's beta quantiles. 0 alarms in 299 held-out honest runs bound the
  false-alarm rate at ≤ 1.0% (95%); 59 detections in 59 substitute runs bound power at ≥ 95.0%.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse
from scipy.stats import beta

__all__ = ["logprob_statistic", "first_token_distance", "first_token_statistic", "spectrum_gram", "mmd2_unbiased",
           "mmd_permutation_test", "blocked_mmd_test", "threshold_at", "rate_upper", "rate_lower", "power_cell",
           "SPECTRUM_N"]

SPECTRUM_N = 3


def logprob_statistic(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``logprob`` run statistic from ``quality score`` position rows.

    Args:
        rows: position rows (``score_rows.score_positions``), each with ``kl`` (nats or None), ``gap``
            (nats or None) and ``clamped``.

    Returns:
        ``{"statistic", "name", "kl_mean", "gap_mean", "positions", "positions_kl", "positions_gap"}``: the
        statistic is ``kl_mean + gap_mean`` (``name`` ``"kl+gap"``) when the engine's lists could be paired with
        the reference's (token ids), else ``gap_mean`` alone (``"gap"``: an engine that names no token ids, whose
        text the reference re-tokenizes); None when no position was scored. A calibration cell holds one name, so
        the two are never compared with each other.
    """
    kls, gaps = [], []
    for r in rows:
        if r.get("clamped"):
            continue
        if r.get("kl") is not None and math.isfinite(r["kl"]):
            kls.append(float(r["kl"]))
        if r.get("gap") is not None and math.isfinite(r["gap"]):
            gaps.append(float(r["gap"]))
    kl_mean = float(np.mean(kls)) if kls else None
    gap_mean = float(np.mean(gaps)) if gaps else None
    stat: float | None
    if kl_mean is not None and gap_mean is not None:
        stat, name = kl_mean + gap_mean, "kl+gap"
    else:
        stat, name = gap_mean, "gap"
    return {"statistic": stat, "name": name if stat is not None else None, "kl_mean": kl_mean, "gap_mean": gap_mean,
            "positions": len(gaps), "positions_kl": len(kls), "positions_gap": len(gaps)}


def first_token_distance(ref: Mapping[int, float], eng: Mapping[int, float]) -> float:
    """Mean |lp_eng − lp_ref| over the reference's listed tokens, in nats.

    A reference token the engine did not list gets the engine's least listed logprob (an upper bound on
    its value, so the distance is a lower bound there).

    Raises:
        ValueError: either list is empty.
    """
    if not ref or not eng:
        raise ValueError("first_token_distance needs two non-empty top-k lists")
    floor = min(eng.values())
    return float(np.mean([abs(eng.get(t, floor) - lp) for t, lp in ref.items()]))


def first_token_statistic(pairs: Iterable[tuple[Mapping[int, float], Mapping[int, float]]]) -> dict[str, Any]:
    """The ``first_token`` run statistic: the mean of ``first_token_distance`` over prompts (pairs of reference and
    engine lists; pairs with an empty side are skipped and counted)."""
    ds, skipped = [], 0
    for ref, eng in pairs:
        if not ref or not eng:
            skipped += 1
            continue
        ds.append(first_token_distance(ref, eng))
    return {"statistic": float(np.mean(ds)) if ds else None, "prompts": len(ds), "skipped": skipped}


def _ngrams(text: str, n: int) -> Counter[str]:
    padded = f"\x02{text}\x03"  # start and end marks: short strings still have n-grams
    return Counter(padded[i:i + n] for i in range(max(1, len(padded) - n + 1)))


def spectrum_gram(texts: Sequence[str], n: int = SPECTRUM_N) -> np.ndarray:
    """The Gram matrix of the cosine-normalised character n-gram spectrum kernel, shape (len(texts),) * 2.

    k(a, b) = ⟨φ(a), φ(b)⟩ / (‖φ(a)‖ ‖φ(b)‖), φ the n-gram counts of the text between a start and an end
    mark; k(a, a) = 1. Leslie et al., "The spectrum kernel", PSB 2002 (on characters here).
    """
    vocab: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for i, t in enumerate(texts):
        for g, c in _ngrams(t, n).items():
            rows.append(i)
            cols.append(vocab.setdefault(g, len(vocab)))
            vals.append(float(c))
    m = sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), max(1, len(vocab))))
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    gram = np.asarray((m @ m.T).todense(), dtype=np.float64)
    return gram / np.outer(norms, norms)


def mmd2_unbiased(gram: np.ndarray, x_idx: np.ndarray, y_idx: np.ndarray) -> float:
    """Unbiased MMD² (Gretton et al. 2012, eq. 3) between the samples at ``x_idx`` and ``y_idx`` of one Gram matrix.

    Raises:
        ValueError: fewer than 2 samples on a side.
    """
    m, n = len(x_idx), len(y_idx)
    if m < 2 or n < 2:
        raise ValueError(f"MMD needs at least 2 samples per side, got {m} and {n}")
    kxx = gram[np.ix_(x_idx, x_idx)]
    kyy = gram[np.ix_(y_idx, y_idx)]
    kxy = gram[np.ix_(x_idx, y_idx)]
    return float((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
                 - 2.0 * kxy.mean())


def mmd_permutation_test(x: Sequence[str], y: Sequence[str], *, permutations: int = 2000, seed: int = 0,
                         n: int = SPECTRUM_N) -> dict[str, Any]:
    """MMD² of two samples of strings and its permutation p-value.

    p = (1 + #{permuted MMD² ≥ observed}) / (1 + permutations), labels shuffled over the pooled sample
    (Phipson & Smyth, "Permutation p-values should never be zero", 2010). Deterministic in ``seed``.

    Returns:
        ``{"mmd2", "p_value", "permutations", "m", "n"}``.
    """
    pooled = [*x, *y]
    gram = spectrum_gram(pooled, n)
    m = len(x)
    idx = np.arange(len(pooled))
    observed = mmd2_unbiased(gram, idx[:m], idx[m:])
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(permutations):
        p = rng.permutation(idx)
        if mmd2_unbiased(gram, p[:m], p[m:]) >= observed - 1e-12:
            hits += 1
    return {"mmd2": observed, "p_value": (1 + hits) / (1 + permutations), "permutations": permutations,
            "m": m, "n": len(y)}


def blocked_mmd_test(engine: Mapping[str, Sequence[str]], reference: Mapping[str, Sequence[str]], *,
                     permutations: int = 1000, seed: int = 0, n: int = SPECTRUM_N) -> dict[str, Any]:
    """The ``text`` run statistic: the mean over prompts of the unbiased MMD² between the engine's and the reference's
    completions of that prompt, with a permutation p-value that shuffles labels within each prompt only.

    Completions of different prompts are never compared (the kernel is 0 across prompts, as in Model Equality
    Testing's per-prompt pairing); prompts with fewer than 2 completions on a side are skipped and counted.

    Returns:
        ``{"statistic", "p_value", "prompts", "skipped", "permutations"}`` (statistic None when no prompt is usable).
    """
    blocks = []
    skipped = 0
    for pid in sorted(set(engine) & set(reference)):
        x, y = list(engine[pid]), list(reference[pid])
        if len(x) < 2 or len(y) < 2:
            skipped += 1
            continue
        blocks.append((spectrum_gram([*x, *y], n), len(x), len(x) + len(y)))
    skipped += len(set(engine) ^ set(reference))
    if not blocks:
        return {"statistic": None, "p_value": None, "prompts": 0, "skipped": skipped, "permutations": permutations}

    def stat(orders: list[np.ndarray]) -> float:
        return float(np.mean([mmd2_unbiased(g, o[:m], o[m:]) for (g, m, _), o in zip(blocks, orders)]))

    observed = stat([np.arange(t) for _, _, t in blocks])
    rng = np.random.default_rng(seed)
    hits = sum(stat([rng.permutation(t) for _, _, t in blocks]) >= observed - 1e-12 for _ in range(permutations))
    return {"statistic": observed, "p_value": (1 + hits) / (1 + permutations), "prompts": len(blocks),
            "skipped": skipped, "permutations": permutations}


def threshold_at(honest: Sequence[float], alpha: float) -> float | None:
    """The alarm threshold at false-alarm rate ``alpha`` from honest run statistics (split-conformal quantile).

    Returns the ⌈(1 − α)(n + 1)⌉-th smallest value, or None when that rank exceeds n (too few honest runs
    for this α: n + 1 < 1/α). An alarm is a statistic strictly above it.

    Raises:
        ValueError: ``alpha`` outside (0, 1), or a non-finite statistic.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    xs = sorted(float(v) for v in honest)
    if any(not math.isfinite(v) for v in xs):
        raise ValueError("honest statistics must be finite")
    rank = math.ceil((1 - alpha) * (len(xs) + 1))
    return xs[rank - 1] if 1 <= rank <= len(xs) else None


def rate_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided exact (Clopper–Pearson) upper bound on a rate seen k times in n (1.0 when n = 0)."""
    if n <= 0:
        return 1.0
    if k >= n:
        return 1.0
    return float(beta.ppf(confidence, k + 1, n - k))


def rate_lower(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided exact (Clopper–Pearson) lower bound on a rate seen k times in n (0.0 when n = 0 or k = 0)."""
    if n <= 0 or k <= 0:
        return 0.0
    return float(beta.ppf(1 - confidence, k, n - k + 1))


def power_cell(substitute: Sequence[float], threshold: float | None, confidence: float = 0.95) -> dict[str, Any]:
    """Detections of one substitute at one budget: how many of its runs exceed ``threshold``, and the lower bound.

    Returns:
        ``{"runs", "detected", "power", "power_lower"}`` (``power`` None without a threshold or runs).
    """
    xs = [float(v) for v in substitute if v is not None and math.isfinite(float(v))]
    if threshold is None or not xs:
        return {"runs": len(xs), "detected": None, "power": None, "power_lower": None}
    hit = sum(v > threshold for v in xs)
    return {"runs": len(xs), "detected": hit, "power": hit / len(xs), "power_lower": rate_lower(hit, len(xs),
                                                                                               confidence)}
