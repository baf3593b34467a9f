"""Per-position divergence between a reference's and an engine's next-token distributions.

An OpenAI-compatible server reports, at each generated position, only its k most likely tokens with
their natural-log probabilities, never the full vocabulary. KL and TV are therefore computed on an
approximation built from the two lists, the same way at every position:

1. **Support.** The union U of the token ids either side lists, plus one OTHER bucket for every
   token neither side lists.
2. **Listed and tail mass.** On each side a listed token keeps ``exp(logprob)``. The mass the side
   leaves unlisted is its tail ``R = max(0, 1 − Σ listed)`` (clipped, since rounded logprobs can sum
   slightly above 1).
3. **Imputation.** A token of U that a side did not list gets ``min(p_min, R / m)`` on that side,
   where ``p_min`` is that side's least likely listed probability and ``m`` the number of U tokens
   it did not list. Reasoning: an unlisted token cannot be more likely than the least likely listed
   one (the list is the top k), and the m unlisted tokens together cannot hold more than the tail;
   within those limits, giving each the largest equal share is the choice most favourable to
   agreement.
4. **OTHER.** On each side, ``R − m · imputed``, clipped at 0.
5. **Floor.** Each side's vector over U + OTHER is floored at ``PROB_FLOOR`` (1e-12), so no log sees
   a zero, and renormalised to sum 1.
6. **Divergences.** ``KL(ref ‖ eng) = Σ p_ref · ln(p_ref / p_eng)`` in nats (the reference is the
   distribution the engine is judged against, as docs/design.md fixes it), and
   ``TV = ½ · Σ |p_ref − p_eng|``, a probability in [0, 1].

The result is an optimistic (low) estimate of the full-vocabulary divergence: merging the unlisted
tokens into one OTHER bucket can only lower KL and TV (data-processing inequality for a coarser
partition), and the imputation is the one most favourable to agreement. It is an estimate, not a
bound: the imputed values are guesses. Both values depend on k: a top-20 list against a top-5 list
reads as divergence even for identical distributions, so the caller cuts both lists to the same k
first (``top_k_cut``), keeping the trajectory token. Identical lists give exactly 0.

``kl_topk``/``tv_topk`` score one position from two dicts; ``kl_tv_rows`` scores many positions at
once from padded arrays, with the same result to 1e-12. Generated positions are grouped by
``bucket_of`` (``BUCKET_LABELS``) so drift that grows along a generation shows up.

Source: Kullback & Leibler (1951) for KL; total variation as in Levin, Peres & Wilmer, *Markov Chains
and Mixing Times* (2009), §4.1. The top-k union, tail imputation and OTHER bucket are this module's
own approximation, recorded as ``kl_method`` beside every score.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Mapping

import numpy as np

__all__ = ["BUCKET_EDGES", "BUCKET_LABELS", "PROB_FLOOR", "bucket_of", "kl_topk", "tv_topk", "kl_tv_rows",
           "top_k_cut"]

BUCKET_EDGES = (0, 32, 128)
BUCKET_LABELS = ("0-31", "32-127", "128+")
PROB_FLOOR = 1e-12
_MAX_LOGPROB = 1e-6  # a logprob above this is positive beyond rounding: not a log-probability


def _count(x: object, what: str) -> int:
    """``x`` as a non-negative int (numpy integers accepted); ValueError otherwise."""
    try:
        n = operator.index(x)  # type: ignore[arg-type]
    except TypeError as e:
        raise ValueError(f"{what} must be an integer, got {x!r}") from e
    if n < 0:
        raise ValueError(f"{what} must be >= 0, got {n}")
    return n


def bucket_of(t: int) -> str:
    """Label of the position bucket holding generated-token position ``t`` (0-based): "0-31", "32-127" or "128+".

    Raises:
        ValueError: ``t`` negative or not an integer.
    """
    t = _count(t, "position")
    return BUCKET_LABELS[bisect.bisect_right(BUCKET_EDGES, t) - 1]


def _check_list(lp: Mapping[int, float], side: str) -> None:
    if not lp:
        raise ValueError(f"{side}: empty top-k list; at least one token is needed")
    for tok, v in lp.items():
        if not math.isfinite(v) or v > _MAX_LOGPROB:
            raise ValueError(f"{side}: token {tok!r} has logprob {v!r}; need a finite natural-log probability <= 0")


def _side_vector(lp: Mapping[int, float], union: list[int]) -> np.ndarray:
    """One side's floored, renormalised probabilities over ``union`` + OTHER (steps 2-5 of the module doc)."""
    probs = {tok: math.exp(v) for tok, v in lp.items()}
    tail = max(0.0, 1.0 - sum(probs.values()))
    m = sum(1 for tok in union if tok not in probs)
    imputed = min(min(probs.values()), tail / m) if m else 0.0
    other = max(0.0, tail - m * imputed)
    vec = np.array([probs.get(tok, imputed) for tok in union] + [other])
    vec = np.maximum(vec, PROB_FLOOR)
    out: np.ndarray = vec / vec.sum()
    return out


def _pair(ref: Mapping[int, float], eng: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    _check_list(ref, "reference")
    _check_list(eng, "engine")
    union = list(ref) + [tok for tok in eng if tok not in ref]
    return _side_vector(ref, union), _side_vector(eng, union)


def kl_topk(ref: Mapping[int, float], eng: Mapping[int, float]) -> float:
    """KL(reference ‖ engine) in nats at one position, from the two sides' top-k lists.

    Args:
        ref: the reference's top-k list, ``{token_id: logprob}`` (natural log).
        eng: the engine's top-k list, same form; cut to the same k as ``ref`` for a fair comparison.

    Returns:
        ``Σ p_ref · ln(p_ref / p_eng)`` over the union support + OTHER (module doc), >= 0; exactly 0.0
        when the two lists are equal.

    Raises:
        ValueError: an empty list, or a logprob that is not finite or is above 1e-6.

    Source: Kullback & Leibler (1951), natural log; support and imputation as in the module doc.
    """
    p, q = _pair(ref, eng)
    if ref == eng:
        return 0.0
    return float(np.sum(p * np.log(p / q)))


def tv_topk(ref: Mapping[int, float], eng: Mapping[int, float]) -> float:
    """Total variation distance between reference and engine at one position, from their top-k lists.

    Args:
        ref, eng: ``{token_id: logprob}`` (natural log), as for ``kl_topk``.

    Returns:
        ``½ · Σ |p_ref − p_eng|`` over the union support + OTHER (module doc), a probability in [0, 1];
        exactly 0.0 when the two lists are equal.

    Raises:
        ValueError: an empty list, or a logprob that is not finite or is above 1e-6.

    Source: total variation distance (Levin, Peres & Wilmer 2009, §4.1); support as in the module doc.
    """
    p, q = _pair(ref, eng)
    if ref == eng:
        return 0.0
    return float(0.5 * np.sum(np.abs(p - q)))


def _side_arrays(ids: np.ndarray, lp: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated (ids, logprobs with padding set to 0, listed mask) of one side's padded rows."""
    ids, lp = np.asarray(ids), np.asarray(lp, dtype=float)
    if ids.ndim != 2 or ids.shape != lp.shape:
        raise ValueError(f"{side}: ids and logprobs must be 2-D arrays of one shape (T, K), "
                         f"got {ids.shape} and {lp.shape}")
    if ids.size and ids.dtype.kind not in "iu":
        raise ValueError(f"{side}: token ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    on = ids >= 0
    bad = on & ~(np.isfinite(lp) & (lp <= _MAX_LOGPROB))
    if bad.any():
        t, j = np.argwhere(bad)[0]
        raise ValueError(f"{side}: row {t} token {ids[t, j]} has logprob {lp[t, j]!r}; "
                         "need a finite natural-log probability <= 0")
    same = (ids[:, :, None] == ids[:, None, :]) & on[:, :, None] & on[:, None, :]
    same &= ~np.eye(ids.shape[1], dtype=bool)
    if same.any():
        t = int(np.argwhere(same)[0][0])
        raise ValueError(f"{side}: row {t} lists a token id twice: {ids[t][on[t]].tolist()}")
    return ids, np.where(on, lp, 0.0), on


def _tail_and_imputed(p: np.ndarray, on: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the imputed probability of each unlisted union token, and the OTHER mass (steps 2-4)."""
    tail = np.maximum(0.0, 1.0 - p.sum(axis=1))
    p_min = np.min(np.where(on, p, np.inf), axis=1, initial=np.inf)
    imputed = np.where(m > 0, np.minimum(p_min, tail / np.maximum(m, 1)), 0.0)
    return imputed, np.maximum(0.0, tail - m * imputed)


def kl_tv_rows(ref_ids: np.ndarray, ref_lp: np.ndarray, eng_ids: np.ndarray,
               eng_lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """KL(reference ‖ engine) and TV at many positions at once, from padded top-k arrays.

    Row t of each array is one position; an entry is listed when its id is >= 0, and an entry with a
    negative id (padding, conventionally id −1 with logprob −inf) is ignored wherever it sits in the
    row. The two sides may have different widths. The result equals ``kl_topk``/``tv_topk`` applied
    row by row (to 1e-12), including exactly 0 for rows listing the same tokens with the same logprobs.

    Args:
        ref_ids: reference token ids, int, shape (T, K_ref).
        ref_lp: reference natural-log probabilities, float, shape (T, K_ref).
        eng_ids: engine token ids, int, shape (T, K_eng).
        eng_lp: engine natural-log probabilities, float, shape (T, K_eng).

    Returns:
        ``(kl, tv)``, float64 arrays of shape (T,): KL in nats, TV as a probability; NaN in rows where
        either side lists nothing.

    Raises:
        ValueError: arrays not 2-D, ids and logprobs of one side with different shapes, the sides with
            different T, non-integer ids, a listed logprob not finite or above 1e-6, or a row listing
            one id twice.

    Source: as ``kl_topk`` and ``tv_topk`` (module doc); broadcasts a (T, K_ref, K_eng) id match, so
    memory is O(T · K_ref · K_eng).
    """
    r_ids, r_lp, r_on = _side_arrays(ref_ids, ref_lp, "reference")
    e_ids, e_lp, e_on = _side_arrays(eng_ids, eng_lp, "engine")
    if r_ids.shape[0] != e_ids.shape[0]:
        raise ValueError(f"the sides must have the same number of rows: reference {r_ids.shape[0]}, "
                         f"engine {e_ids.shape[0]}")
    pr = np.where(r_on, np.exp(r_lp), 0.0)
    pe = np.where(e_on, np.exp(e_lp), 0.0)
    match = (r_ids[:, :, None] == e_ids[:, None, :]) & r_on[:, :, None] & e_on[:, None, :]  # (T, K_ref, K_eng)
    r_in_e, e_in_r = match.any(axis=2), match.any(axis=1)
    pe_at_r = np.where(match, pe[:, None, :], 0.0).sum(axis=2)  # at most one nonzero term: exact
    lp_e_at_r = np.where(match, e_lp[:, None, :], 0.0).sum(axis=2)
    e_only = e_on & ~e_in_r
    m_ref, m_eng = e_only.sum(axis=1), (r_on & ~r_in_e).sum(axis=1)
    imp_r, other_r = _tail_and_imputed(pr, r_on, m_ref)
    imp_e, other_e = _tail_and_imputed(pe, e_on, m_eng)
    # slots: the reference's listed tokens, then the engine-only tokens, then OTHER (the scalar union order)
    valid = np.concatenate([r_on, e_only, np.ones((r_on.shape[0], 1), dtype=bool)], axis=1)
    p = np.concatenate([pr, np.broadcast_to(imp_r[:, None], e_only.shape), other_r[:, None]], axis=1)
    q = np.concatenate([np.where(r_in_e, pe_at_r, imp_e[:, None]), pe, other_e[:, None]], axis=1)
    p = np.where(valid, np.maximum(p, PROB_FLOOR), 0.0)
    q = np.where(valid, np.maximum(q, PROB_FLOOR), 0.0)
    p /= p.sum(axis=1, keepdims=True)  # OTHER is always valid and floored: never 0
    q /= q.sum(axis=1, keepdims=True)
    ratio = np.divide(p, q, out=np.ones_like(p), where=valid)
    kl = np.sum(p * np.log(ratio), axis=1)
    tv = 0.5 * np.sum(np.abs(p - q), axis=1)
    same = (m_ref == 0) & (m_eng == 0) & np.all(~r_on | (lp_e_at_r == r_lp), axis=1)
    kl[same], tv[same] = 0.0, 0.0
    empty = ~r_on.any(axis=1) | ~e_on.any(axis=1)
    kl[empty], tv[empty] = np.nan, np.nan
    return kl, tv


def top_k_cut(lp: Mapping[int, float], k: int, keep: int | None) -> dict[int, float]:
    """The ``k`` most likely entries of a top-k list, plus ``keep`` when ``lp`` lists it.

    Used to bring both sides to the same k before ``kl_topk``/``tv_topk``, keeping the trajectory token.

    Args:
        lp: ``{token_id: logprob}`` (natural log).
        k: entries to keep, >= 0; ties in logprob go to the smaller id.
        keep: a token id kept in addition when present in ``lp`` (e.g. the trajectory token); None for none.

    Returns:
        A new dict, most likely first, with at most ``k + 1`` entries.

    Raises:
        ValueError: ``k`` negative or not an integer.
    """
    k = _count(k, "k")
    out = dict(sorted(lp.items(), key=lambda kv: (-kv[1], kv[0]))[:k])
    if keep is not None and keep in lp and keep not in out:
        out[keep] = lp[keep]
    return out
