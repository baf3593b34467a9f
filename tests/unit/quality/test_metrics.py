import math

import numpy as np
import pytest
from scipy.special import rel_entr
from scipy.stats import entropy

from inferencekit.quality.metrics import BUCKET_LABELS, bucket_of, kl_topk, kl_tv_rows, top_k_cut, tv_topk

ln = math.log

# ------------------------------------------------------------------------------------------ position buckets


@pytest.mark.parametrize("t,label", [(0, "0-31"), (31, "0-31"), (32, "32-127"), (127, "32-127"), (128, "128+"),
                                     (5000, "128+")])
def test_bucket_of(t, label):
    assert bucket_of(t) == label
    assert label in BUCKET_LABELS


@pytest.mark.parametrize("t", [-1, 2.0])
def test_bucket_of_rejects(t):
    with pytest.raises(ValueError):
        bucket_of(t)


# --------------------------------------------------------------------------------------------- scalar KL/TV


def test_full_coverage_matches_textbook_kl_and_tv():
    ref, eng = {0: ln(0.5), 1: ln(0.5)}, {0: ln(0.9), 1: ln(0.1)}
    # 0.5·ln(0.5/0.9) + 0.5·ln(0.5/0.1) = 0.5108256…
    assert kl_topk(ref, eng) == pytest.approx(0.5108256237659907, abs=1e-9)
    assert kl_topk(ref, eng) == pytest.approx(entropy([0.5, 0.5], [0.9, 0.1]), abs=1e-9)
    assert kl_topk(ref, eng) == pytest.approx(rel_entr([0.5, 0.5], [0.9, 0.1]).sum(), abs=1e-9)
    # ½(|0.5 − 0.9| + |0.5 − 0.1|) = 0.4
    assert tv_topk(ref, eng) == pytest.approx(0.4, abs=1e-9)


def test_full_coverage_three_tokens_against_scipy():
    p, q = [0.2, 0.5, 0.3], [0.25, 0.25, 0.5]
    ref = {7: ln(p[0]), 3: ln(p[1]), 9: ln(p[2])}
    eng = {9: ln(q[2]), 7: ln(q[0]), 3: ln(q[1])}  # listing order does not matter
    assert kl_topk(ref, eng) == pytest.approx(entropy(p, q), abs=1e-9)
    assert kl_topk(eng, ref) == pytest.approx(entropy(q, p), abs=1e-9)  # KL is not symmetric: direction kept
    assert tv_topk(ref, eng) == pytest.approx(0.5 * (0.05 + 0.25 + 0.2), abs=1e-9)


def test_tail_imputation_by_hand():
    # ref lists 1: .6, 2: .3 → tail .1; eng lists 1: .5, 3: .2 → tail .3. Union {1, 2, 3} + OTHER.
    # ref misses token 3 (m = 1): min(p_min .3, tail .1 / 1) = .1 → OTHER .1 − .1 = 0 (floored to 1e-12)
    # eng misses token 2 (m = 1): min(p_min .2, tail .3 / 1) = .2 → OTHER .3 − .2 = .1
    # ref = [.6, .3, .1, 0], eng = [.5, .2, .2, .1] over (1, 2, 3, OTHER)
    ref, eng = {1: ln(0.6), 2: ln(0.3)}, {1: ln(0.5), 3: ln(0.2)}
    kl = 0.6 * ln(0.6 / 0.5) + 0.3 * ln(0.3 / 0.2) + 0.1 * ln(0.1 / 0.2)  # = 0.1617177…
    assert kl_topk(ref, eng) == pytest.approx(kl, abs=1e-9)
    assert kl_topk(ref, eng) == pytest.approx(0.16171775, abs=1e-8)
    assert tv_topk(ref, eng) == pytest.approx(0.5 * (0.1 + 0.1 + 0.1 + 0.1), abs=1e-9)


def test_tail_shared_between_several_missing_tokens():
    # ref lists only 1: .7 → tail .3, misses tokens 2 and 3 (m = 2): min(p_min .7, .3 / 2) = .15 each,
    # OTHER .3 − 2·.15 = 0. eng lists 1: .4, 2: .3, 3: .2 → tail .1, misses nothing: OTHER .1.
    # ref = [.7, .15, .15, 0], eng = [.4, .3, .2, .1]
    ref, eng = {1: ln(0.7)}, {1: ln(0.4), 2: ln(0.3), 3: ln(0.2)}
    kl = 0.7 * ln(0.7 / 0.4) + 0.15 * ln(0.15 / 0.3) + 0.15 * ln(0.15 / 0.2)  # = 0.2446067…
    assert kl_topk(ref, eng) == pytest.approx(kl, abs=1e-9)
    assert tv_topk(ref, eng) == pytest.approx(0.5 * (0.3 + 0.15 + 0.05 + 0.1), abs=1e-9)


def test_imputation_capped_by_least_likely_listed_token():
    # eng lists 5: .05 only → tail .95, misses token 6 (m = 1): min(p_min .05, .95) = .05, OTHER .9.
    # ref lists 5: .05, 6: .9 → tail .05, misses nothing: OTHER .05.
    # ref = [.05, .9, .05], eng = [.05, .05, .9] over (5, 6, OTHER)
    ref, eng = {5: ln(0.05), 6: ln(0.9)}, {5: ln(0.05)}
    assert kl_topk(ref, eng) == pytest.approx(0.9 * ln(0.9 / 0.05) + 0.05 * ln(0.05 / 0.9), abs=1e-9)
    assert tv_topk(ref, eng) == pytest.approx(0.85, abs=1e-9)


def test_identical_lists_give_exact_zero():
    for lp in ({4: ln(0.3)}, {1: ln(0.6), 2: ln(0.3), 3: ln(0.05)}, {0: 0.0}):
        assert kl_topk(lp, dict(lp)) == 0.0
        assert tv_topk(lp, dict(lp)) == 0.0
    # same entries listed in another order are still identical
    assert kl_topk({1: -0.5, 2: -1.5}, {2: -1.5, 1: -0.5}) == 0.0


def test_random_lists_nonnegative_and_bounded():
    rng = np.random.default_rng(0)
    for _ in range(300):
        ref, eng = _random_list(rng), _random_list(rng)
        kl, tv = kl_topk(ref, eng), tv_topk(ref, eng)
        assert kl >= -1e-12
        assert 0.0 <= tv <= 1.0
        assert tv <= math.sqrt(kl / 2) + 1e-9  # Pinsker's inequality holds on the constructed vectors


def test_different_lists_give_positive_divergence():
    assert kl_topk({1: ln(0.9)}, {2: ln(0.9)}) > 1.0
    assert tv_topk({1: ln(0.9)}, {2: ln(0.9)}) > 0.5


@pytest.mark.parametrize("bad", [{}, {1: 0.5}, {1: float("nan")}, {1: float("-inf")}, {1: float("inf")}])
def test_scalar_rejects_bad_lists(bad):
    good = {1: ln(0.5)}
    for fn in (kl_topk, tv_topk):
        with pytest.raises(ValueError):
            fn(bad, good)
        with pytest.raises(ValueError):
            fn(good, bad)


def test_rounding_above_zero_tolerated():
    # a logprob of +1e-7 is rounding of a certain token, not an error
    assert kl_topk({3: 1e-7}, {3: 1e-7}) == 0.0
    assert kl_topk({3: 1e-7}, {3: ln(0.5)}) == pytest.approx(ln(2), abs=1e-6)


# ------------------------------------------------------------------------------------------- vectorised rows


def _random_list(rng, vocab=12, kmax=6):
    """A top-k list drawn from a random distribution over a small vocabulary (so lists overlap often)."""
    probs = rng.dirichlet(np.full(vocab, 0.5))
    k = int(rng.integers(1, kmax + 1))
    top = np.argsort(-probs)[:k]
    return {int(i): float(np.log(probs[i])) for i in top}


def _pad(rows, width, rng):
    """Rows of dicts → padded (ids, logprobs) arrays, padding (−1, −inf) at random places in each row."""
    ids = np.full((len(rows), width), -1, dtype=np.int64)
    lps = np.full((len(rows), width), -np.inf)
    for t, row in enumerate(rows):
        slots = np.sort(rng.choice(width, size=len(row), replace=False))  # keeps the dict's order
        for s, (tok, lp) in zip(slots, row.items()):
            ids[t, s], lps[t, s] = tok, lp
    return ids, lps


def test_rows_equal_scalar_on_random_inputs():
    rng = np.random.default_rng(42)
    refs, engs = [], []
    for i in range(200):
        ref = _random_list(rng, kmax=int(rng.integers(1, 9)))
        eng = dict(ref) if i % 17 == 0 else _random_list(rng, kmax=int(rng.integers(1, 9)))
        refs.append(ref)
        engs.append(eng)
    r_ids, r_lp = _pad(refs, 9, rng)
    e_ids, e_lp = _pad(engs, 11, rng)
    kl, tv = kl_tv_rows(r_ids, r_lp, e_ids, e_lp)
    assert kl.shape == tv.shape == (200,)
    want_kl = np.array([kl_topk(a, b) for a, b in zip(refs, engs)])
    want_tv = np.array([tv_topk(a, b) for a, b in zip(refs, engs)])
    np.testing.assert_allclose(kl, want_kl, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tv, want_tv, rtol=0, atol=1e-12)
    assert (want_kl > 0.01).sum() > 100  # the sample is not mostly trivial


def test_rows_hand_values_and_exact_zero():
    # row 0: the hand-computed tail case; row 1: identical lists in a different order; row 2: full coverage
    ids_r = np.array([[1, 2, -1], [5, 6, -1], [0, 1, -1]])
    lp_r = np.array([[ln(0.6), ln(0.3), -np.inf], [ln(0.2), ln(0.7), -np.inf], [ln(0.5), ln(0.5), -np.inf]])
    ids_e = np.array([[-1, 1, 3], [6, -1, 5], [1, 0, -1]])
    lp_e = np.array([[-np.inf, ln(0.5), ln(0.2)], [ln(0.7), -np.inf, ln(0.2)], [ln(0.1), ln(0.9), -np.inf]])
    kl, tv = kl_tv_rows(ids_r, lp_r, ids_e, lp_e)
    assert kl[0] == pytest.approx(0.6 * ln(0.6 / 0.5) + 0.3 * ln(0.3 / 0.2) + 0.1 * ln(0.1 / 0.2), abs=1e-9)
    assert tv[0] == pytest.approx(0.2, abs=1e-9)
    assert kl[1] == 0.0 and tv[1] == 0.0
    assert kl[2] == pytest.approx(0.5108256237659907, abs=1e-9)
    assert tv[2] == pytest.approx(0.4, abs=1e-9)


def test_rows_with_an_empty_side_are_nan():
    ids_r = np.array([[1, -1], [-1, -1], [2, 3]])
    lp_r = np.array([[ln(0.5), -np.inf], [-np.inf, -np.inf], [ln(0.5), ln(0.25)]])
    ids_e = np.array([[-1, -1], [4, -1], [2, -1]])
    lp_e = np.array([[-np.inf, -np.inf], [ln(0.5), -np.inf], [ln(0.5), -np.inf]])
    kl, tv = kl_tv_rows(ids_r, lp_r, ids_e, lp_e)
    assert np.isnan(kl[:2]).all() and np.isnan(tv[:2]).all()
    assert kl[2] == pytest.approx(kl_topk({2: ln(0.5), 3: ln(0.25)}, {2: ln(0.5)}), abs=1e-12)


def test_rows_empty_input():
    z = np.zeros((0, 4), dtype=np.int64)
    kl, tv = kl_tv_rows(z, z.astype(float), z, z.astype(float))
    assert kl.shape == tv.shape == (0,)


def test_rows_reject_bad_input():
    ids, lp = np.array([[1, 2]]), np.array([[ln(0.5), ln(0.25)]])
    with pytest.raises(ValueError, match="twice"):
        kl_tv_rows(np.array([[1, 1]]), lp, ids, lp)
    with pytest.raises(ValueError, match="logprob"):
        kl_tv_rows(ids, np.array([[0.3, ln(0.25)]]), ids, lp)
    with pytest.raises(ValueError, match="logprob"):
        kl_tv_rows(ids, lp, ids, np.array([[np.nan, ln(0.25)]]))
    with pytest.raises(ValueError, match="same number of rows"):
        kl_tv_rows(ids, lp, np.vstack([ids, ids]), np.vstack([lp, lp]))
    with pytest.raises(ValueError, match="shape"):
        kl_tv_rows(ids, lp[:, :1], ids, lp)
    with pytest.raises(ValueError, match="integers"):
        kl_tv_rows(ids.astype(float), lp, ids, lp)


# --------------------------------------------------------------------------------------------------- cutting


def test_top_k_cut_ties_to_smaller_id_and_keeps_token():
    lp = {9: -0.5, 4: -1.0, 2: -1.0, 7: -3.0, 1: -4.0}
    assert top_k_cut(lp, 2, None) == {9: -0.5, 2: -1.0}
    assert list(top_k_cut(lp, 3, None)) == [9, 2, 4]
    assert top_k_cut(lp, 2, 1) == {9: -0.5, 2: -1.0, 1: -4.0}
    assert top_k_cut(lp, 2, 9) == {9: -0.5, 2: -1.0}  # already inside the cut
    assert top_k_cut(lp, 2, 123) == {9: -0.5, 2: -1.0}  # not listed: nothing to keep
    assert top_k_cut(lp, 0, 7) == {7: -3.0}
    assert top_k_cut(lp, 10, None) == lp


def test_top_k_cut_rejects_negative_k():
    with pytest.raises(ValueError):
        top_k_cut({1: -0.1}, -1, None)
