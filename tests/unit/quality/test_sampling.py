"""Sampler self-consistency: implied distributions, exact expected TV, the verdict on simulated engines."""

import math
from collections import Counter

import numpy as np
import pytest
from scipy.special import comb

from inferencekit.quality.sampling import (
    SAMPLER_ORDERS,
    collision_probability,
    combine_seed_checks,
    excess_tv,
    expected_tv,
    implied_distribution,
    judge_sampling,
    observed_tv,
    sampling_settings,
    seed_check,
    seed_stage,
    tv_between,
    unmodelled_settings,
)

ln = math.log

# Six listed tokens holding 0.96 of the mass; the unlisted 0.04 is spread over tokens of at most 0.03 each.
TOP = {"a": ln(0.40), "b": ln(0.25), "c": ln(0.15), "d": ln(0.08), "e": ln(0.05), "f": ln(0.03)}


def probs_of(imp):
    return {k: round(v, 6) for k, v in imp.probs.items()}


# ------------------------------------------------------------------------------------------- implied: filters


def test_top_k_renormalises_over_the_kept_tokens():
    imp = implied_distribution(TOP, temperature=1.0, top_k=3)
    assert imp.status == "ok"
    assert imp.kept == ("a", "b", "c")
    # 0.40/0.80, 0.25/0.80, 0.15/0.80
    assert probs_of(imp) == {"a": 0.5, "b": 0.3125, "c": 0.1875}
    assert imp.listed_mass == pytest.approx(0.96)
    assert set(imp.kept_by_order) == set(SAMPLER_ORDERS)


def test_temperature_scales_logprobs_then_renormalises():
    imp = implied_distribution(TOP, temperature=0.5, top_k=3)
    # p^(1/0.5) = 0.16, 0.0625, 0.0225; sum 0.245
    assert imp.status == "ok"
    assert imp.probs["a"] == pytest.approx(0.16 / 0.245)
    assert imp.probs["b"] == pytest.approx(0.0625 / 0.245)
    assert imp.probs["c"] == pytest.approx(0.0225 / 0.245)
    hot = implied_distribution(TOP, temperature=2.0, top_k=3)
    s = math.sqrt(0.40) + math.sqrt(0.25) + math.sqrt(0.15)
    assert hot.probs["b"] == pytest.approx(0.5 / s)


def test_top_p_nucleus_inside_the_list():
    # cumulative 0.40, 0.65, 0.80: the smallest prefix reaching 0.7 is a, b, c
    imp = implied_distribution(TOP, temperature=1.0, top_p=0.7)
    assert imp.status == "ok" and imp.kept == ("a", "b", "c")
    assert imp.max_p == pytest.approx(0.5)


def test_min_p_keeps_tokens_above_a_share_of_the_top():
    # threshold 0.1 · 0.40 = 0.04: e (0.05) stays, f (0.03) and every unlisted token (≤ 0.03) go
    imp = implied_distribution(TOP, temperature=1.0, min_p=0.1)
    assert imp.status == "ok" and imp.kept == ("a", "b", "c", "d", "e")
    assert imp.probs["e"] == pytest.approx(0.05 / 0.93)


@pytest.mark.parametrize("kw", [{}, {"top_p": 0.99}, {"top_k": 7}, {"min_p": 0.05}])
def test_kept_set_that_may_reach_unlisted_tokens_is_beyond_top(kw):
    # no filter / nucleus not reached within 0.96 / top_k past the 6 listed / min_p threshold 0.02 < 0.03
    imp = implied_distribution(TOP, temperature=1.0, **kw)
    assert imp.status == "beyond_top"
    assert imp.probs == {} and imp.kept == () and not imp.judged
    assert "past the listed" in imp.reasons[0]


def test_top_k_equal_to_the_listed_count_is_provable():
    # the issue's settings: T 1, top_k 20, top_p 1, min_p 0, with 20 listed tokens
    lps = np.log(np.linspace(20, 1, 20) / 400.0)  # 210/400 of the mass listed
    top = {f"t{i}": float(v) for i, v in enumerate(lps)}
    imp = implied_distribution(top, temperature=1.0, top_k=20, top_p=1.0, min_p=0.0)
    assert imp.status == "ok" and len(imp.kept) == 20
    assert imp.probs["t0"] == pytest.approx(20 / 210)
    assert implied_distribution(top, temperature=1.0, top_k=21).status == "beyond_top"


def test_llama_cpp_and_vllm_orders_disagree_on_min_p_at_low_temperature():
    # llama.cpp applies min_p to raw probabilities: q/q_max ≥ 0.1 keeps a..e (e: 0.125).
    # vLLM tempers first: (q/q_max)^2 ≥ 0.1 ⇔ q/q_max ≥ 0.316 keeps a, b, c (c: 0.375, d: 0.2).
    imp = implied_distribution(TOP, temperature=0.5, min_p=0.1)
    assert imp.status == "ambiguous_order"
    assert imp.kept_by_order["llama.cpp"] == ("a", "b", "c", "d", "e")
    assert imp.kept_by_order["vllm"] == ("a", "b", "c")
    assert imp.probs == {}
    # told the engine, there is nothing to be ambiguous about
    only = implied_distribution(TOP, temperature=0.5, min_p=0.1, order=("llama.cpp",))
    assert only.status == "ok" and only.kept == ("a", "b", "c", "d", "e")
    # q² = 0.16, 0.0625, 0.0225, 0.0064, 0.0025; sum 0.2539
    assert only.probs["d"] == pytest.approx(0.0064 / 0.2539)
    vllm = implied_distribution(TOP, temperature=0.5, min_p=0.1, order=("vllm",))
    assert vllm.kept == ("a", "b", "c")


def test_min_p_before_or_after_top_p_can_disagree():
    # llama.cpp: top_p 0.75 on the raw distribution (0.40, 0.65, 0.80) keeps a, b, c; min_p 0.3 (0.12) keeps them.
    # vLLM: min_p first keeps a, b, c (mass 0.80); top_p over them renormalised: 0.5, 0.8125 ≥ 0.75 keeps a, b.
    imp = implied_distribution(TOP, temperature=1.0, top_p=0.75, min_p=0.3)
    assert imp.status == "ambiguous_order"
    assert imp.kept_by_order["llama.cpp"] == ("a", "b", "c")
    assert imp.kept_by_order["vllm"] == ("a", "b")
    assert imp.kept_by_order["hf"] == ("a", "b", "c")


def test_top_p_over_top_k_tokens_or_over_the_whole_distribution():
    # top_k 2 keeps a, b (0.65). Over them renormalised a alone is 0.615 ≥ 0.6 (HF, vLLM, llama.cpp);
    # over the whole distribution a is 0.40 < 0.6, so SGLang's joint filter keeps a, b.
    imp = implied_distribution(TOP, temperature=1.0, top_k=2, top_p=0.6)
    assert imp.status == "ambiguous_order"
    assert imp.kept_by_order["vllm"] == ("a",) and imp.kept_by_order["sglang"] == ("a", "b")
    assert implied_distribution(TOP, temperature=1.0, top_k=2, top_p=0.6,
                                order=("vllm", "hf", "llama.cpp")).kept == ("a",)


def test_unknown_tail_resolved_by_a_later_top_k():
    # T 2 before SGLang's whole-distribution top-p: the tempered tail could be any size, so the nucleus is
    # undetermined, but top_k 3 cuts inside the list whatever it was
    imp = implied_distribution(TOP, temperature=2.0, top_k=3, top_p=0.9)
    assert imp.status == "ok" and imp.kept == ("a", "b", "c")


def test_greedy_and_near_deterministic():
    g = implied_distribution(TOP, temperature=0.0, top_k=3)
    assert g.status == "near_deterministic" and g.kept == ("a",) and g.probs == {"a": 1.0} and g.judged
    peaked = {"x": ln(0.99), "y": ln(0.004), "z": ln(0.003)}
    nd = implied_distribution(peaked, temperature=1.0, top_k=2)
    assert nd.status == "near_deterministic"
    assert nd.max_p == pytest.approx(0.99 / 0.994)


@pytest.mark.parametrize("kw,needle", [
    ({"temperature": 1.0, "top_p": 0.8}, "top_p 0.8"),  # cumulative 0.80 at c: exactly on the cut
    ({"temperature": 1.0, "min_p": 0.2}, "min_p 0.2"),  # 0.2 · 0.40 = 0.08 = d
])
def test_cut_on_the_rounding_tolerance_is_boundary(kw, needle):
    imp = implied_distribution(TOP, **kw)
    assert imp.status == "boundary"
    assert needle in imp.reasons[0]


def test_tie_at_top_k_or_greedy_is_boundary():
    tied = {"a": ln(0.4), "b": ln(0.2), "c": ln(0.2), "d": ln(0.2)}
    assert implied_distribution(tied, temperature=1.0, top_k=2).status == "boundary"
    assert implied_distribution(tied, temperature=1.0, top_k=1).status == "near_deterministic"
    assert implied_distribution({"a": ln(0.5), "b": ln(0.5)}, temperature=0.0).status == "boundary"


@pytest.mark.parametrize("top", [{}, {"a": 0.5}, {"a": float("nan")}, {"a": "x"}, {"a": ln(0.7), "b": ln(0.6)}])
def test_unusable_logprobs(top):
    assert implied_distribution(top, temperature=1.0, top_k=1).status == "bad_logprobs"


def test_vocabulary_size_bounds_the_tail():
    # 0.7 unlisted in one more token, which cannot exceed the listed 0.3: not a top list
    assert implied_distribution({"a": ln(0.3)}, temperature=1.0, vocab_size=2).status == "bad_logprobs"
    # 0.5 unlisted in one token of at most 0.5: consistent, and with no filter that token may be drawn
    assert implied_distribution({"a": ln(0.5)}, temperature=1.0, vocab_size=2).status == "beyond_top"
    # a custom order must name the four steps once each
    with pytest.raises(ValueError):
        implied_distribution(TOP, temperature=1.0, top_k=3, order=[("top_k", "temperature")])
    custom = implied_distribution(TOP, temperature=1.0, top_k=3, order=[("min_p", "top_p", "top_k", "temperature")])
    assert custom.kept == ("a", "b", "c")


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"temperature": float("inf")}, {"temperature": 1, "top_p": 0},
                                {"temperature": 1, "min_p": 1.5}, {"temperature": 1, "top_k": 2.5},
                                {"temperature": 1, "order": ("tgi",)}, {"temperature": 1, "vocab_size": 3}])
def test_bad_settings_raise(kw):
    with pytest.raises(ValueError):
        implied_distribution(TOP, **kw)


# ------------------------------------------------------------------- implied vs a full-vocabulary sampler


def full_vocab_keep(lp, steps, t, k, p, m):
    """The kept token indices of a sampler that sees the whole vocabulary, applying ``steps`` in order."""
    alive = np.arange(lp.size)
    score = lp.copy()
    for step in steps:
        order = alive[np.argsort(-score[alive], kind="stable")]
        if step == "temperature":
            score = lp / t
        elif step == "top_k" and k:
            alive = order[:k]
        elif step == "top_p" and p < 1:
            w = np.exp(score[order] - score[order].max())
            cum = np.cumsum(w / w.sum())
            alive = order[: int(np.argmax(cum >= p)) + 1]
        elif step == "min_p" and m:
            w = np.exp(score[alive] - score[alive].max())
            alive = alive[w >= m]
    return set(alive.tolist())


@pytest.mark.parametrize("vocab_known", [False, True])
def test_implied_kept_set_matches_a_full_vocabulary_sampler(vocab_known):
    rng = np.random.default_rng(7)
    vocab, judged = 300, 0
    for _ in range(400):
        logits = rng.normal(0, rng.uniform(1.0, 4.0), vocab)
        lp = logits - np.logaddexp.reduce(logits)
        idx = np.argsort(-lp)[:20]
        top = {int(i): float(lp[i]) for i in idx}
        t = float(rng.choice([0.5, 0.8, 1.0, 1.5]))
        k = int(rng.choice([0, 5, 10, 20, 40]))
        p = float(rng.choice([1.0, 0.5, 0.8, 0.9, 0.95]))
        m = float(rng.choice([0.0, 0.02, 0.05, 0.1]))
        for name, steps in SAMPLER_ORDERS.items():
            imp = implied_distribution(top, temperature=t, top_k=k, top_p=p, min_p=m, order=(name,),
                                       vocab_size=vocab if vocab_known else None)
            want = full_vocab_keep(lp, steps, t, k, p, m)
            if imp.judged:
                judged += 1
                assert set(imp.kept) == want, (name, t, k, p, m)
                w = np.exp(lp[list(imp.kept)] / t)
                assert [imp.probs[i] for i in imp.kept] == pytest.approx((w / w.sum()).tolist())
            elif imp.status == "beyond_top":
                # only where the true kept set might really hold unlisted tokens or depend on them
                assert imp.kept_by_order[name] is None
    assert judged > 600  # most settings are decidable from the top 20


# ---------------------------------------------------------------------------------------------- expected TV


def test_expected_tv_by_hand():
    # n = 2, p = (½, ½): counts (2,0), (1,1), (0,2) with probability ¼, ½, ¼ and TV ½, 0, ½ → ¼
    assert expected_tv([0.5, 0.5], 2) == pytest.approx(0.25, abs=1e-15)
    # n = 1: E|X − p| = 2p(1 − p) per token, so E[TV] = 1 − Σ p² = 1 − (1/16 + 9/16) = 0.375
    assert expected_tv([0.25, 0.75], 1) == pytest.approx(0.375, abs=1e-15)
    # n = 3, p = (⅓, ⅓, ⅓): per token E|X/3 − ⅓| = (8/27·1 + 12/27·0 + 6/27·1 + 1/27·2)/3 = 16/81;
    # three tokens, halved: 8/27
    assert expected_tv([1 / 3, 1 / 3, 1 / 3], 3) == pytest.approx(8 / 27, abs=1e-12)
    assert expected_tv([1.0], 50) == 0.0
    assert expected_tv([1.0, 0.0], 5) == 0.0


@pytest.mark.parametrize("p,n", [([0.5, 0.3, 0.2], 64), ([0.9, 0.05, 0.05], 17), ([0.37, 0.63], 256)])
def test_expected_tv_matches_de_moivre_mean_absolute_deviation(p, n):
    def mad(pi):  # E|X − n·p| = 2ν·C(n, ν)·p^ν·(1 − p)^(n − ν + 1), ν = ⌊np⌋ + 1
        nu = math.floor(n * pi) + 1
        return 2 * nu * comb(n, nu, exact=True) * pi ** nu * (1 - pi) ** (n - nu + 1)
    want = 0.5 * sum(mad(pi) for pi in p) / n
    assert expected_tv(p, n) == pytest.approx(want, rel=1e-9)


def test_expected_tv_matches_monte_carlo():
    rng = np.random.default_rng(12345)
    p = np.array([0.45, 0.25, 0.15, 0.1, 0.05])
    n, reps = 64, 200_000
    counts = rng.multinomial(n, p, size=reps)
    tv = 0.5 * np.abs(counts / n - p).sum(axis=1)
    se = tv.std() / math.sqrt(reps)
    assert abs(expected_tv(p, n) - tv.mean()) < 4 * se


@pytest.mark.parametrize("p,n", [([0.5, 0.6], 3), ([-0.1, 1.1], 3), ([], 3), ([1.0], 0), ([1.0], 2.5)])
def test_expected_tv_rejects(p, n):
    with pytest.raises(ValueError):
        expected_tv(p, n)


def test_excess_tv_and_out_of_support_by_hand():
    imp = implied_distribution(TOP, temperature=1.0, top_k=3)  # a 0.5, b 0.3125, c 0.1875
    draws = Counter({"a": 2, "b": 1, "e": 1})  # e is listed but removed by top_k 3
    row = excess_tv(draws, imp)
    # ½(|0.5 − 0.5| + |0.25 − 0.3125| + |0 − 0.1875| + |0.25 − 0|) = ½ · 0.5
    assert row["tv"] == pytest.approx(0.25)
    assert row["tv_expected"] == pytest.approx(expected_tv([0.5, 0.3125, 0.1875], 4))
    assert row["excess"] == pytest.approx(0.25 - row["tv_expected"])
    assert row["out_of_support"] == 1 and row["outside_listed"] == 0 and row["n_draws"] == 4
    assert excess_tv(Counter({"a": 3, "zz": 1}), imp)["outside_listed"] == 1
    with pytest.raises(ValueError):
        excess_tv(draws, implied_distribution(TOP, temperature=1.0))


def test_tv_helpers():
    assert observed_tv({"a": 3, "b": 1}, {"a": 0.5, "b": 0.5}) == pytest.approx(0.25)
    assert tv_between({"a": 0.9, "b": 0.1}, {"a": 0.5, "c": 0.5}) == pytest.approx(0.5)


# --------------------------------------------------------------------------------------- simulated engines

VOCAB = 400
HONEST = {"temperature": 0.8, "top_k": 10, "top_p": 1.0, "min_p": 0.0}


def model_logprobs(rng, peaked=False):
    logits = rng.normal(0, rng.uniform(1.5, 3.0), VOCAB)
    if peaked:
        logits[0] += 20.0
    return logits - np.logaddexp.reduce(logits)


def listed(lp, k=20):
    return {int(i): float(lp[i]) for i in np.argsort(-lp)[:k]}


def sample(rng, lp, n, temperature, top_k, allowed=None):
    """A llama.cpp-order sampler over the full vocabulary (or the ``allowed`` part of it): top-k, then T."""
    ids = np.arange(VOCAB) if allowed is None else np.asarray(sorted(allowed))
    ids = ids[np.argsort(-lp[ids], kind="stable")][:top_k]
    w = np.exp((lp[ids] - lp[ids].max()) / temperature)
    return {s: int(rng.choice(ids, p=w / w.sum())) for s in range(n)}


def prompts(seed, n_prompts=12, n_draws=64, engine="honest", **kw):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_prompts):
        lp = model_logprobs(rng, peaked=kw.get("peaked", 0) > i)
        top = listed(lp)
        if engine == "honest":
            draws = sample(rng, lp, n_draws, HONEST["temperature"], HONEST["top_k"])
        elif engine == "greedy":  # temperature ignored
            draws = {s: int(np.argmax(lp)) for s in range(n_draws)}
        elif engine == "pruned":  # a head without 30% of the vocabulary: its top 10 reach lower-ranked tokens
            allowed = rng.choice(VOCAB, size=int(0.7 * VOCAB), replace=False)
            draws = sample(rng, lp, n_draws, HONEST["temperature"], HONEST["top_k"], allowed)
        elif engine == "tempered_logprobs":  # samples right at T 0.5, but lists logprobs after temperature
            draws = sample(rng, lp, n_draws, 0.5, HONEST["top_k"])
            tl = lp / 0.5
            top = listed(tl - np.logaddexp.reduce(tl))
        out.append({"id": f"p{i:02d}", "top": top, "top_again": dict(top), "draws": draws})
    return out


def judge(per_prompt, **kw):
    args = {"sampling": HONEST, "margin": 0.05, "resamples": 4000, "seed": 0, "n_seeds": 64}
    return judge_sampling(per_prompt, **{**args, **kw})


def test_honest_engine_passes():
    res = judge(prompts(1))
    assert res["verdict"] == "PASS", res["reason"]
    assert res["n_informative"] == 12 and res["dropped"] == {}
    tv = res["checks"]["excess_tv"]
    assert tv["verdict"] == "PASS" and tv["ci95"][1] <= 0.05
    assert abs(tv["excess"]) < 0.02
    assert res["checks"]["out_of_support"]["draws"] == 0 and res["checks"]["out_of_support"]["of"] == 12 * 64
    assert res["checks"]["greedy_only"]["verdict"] == "PASS"
    assert "top_k" not in " ".join(res["notes"])  # every field sent


def test_temperature_ignored_engine_fails_on_tv_and_greedy():
    res = judge(prompts(1, engine="greedy"))
    assert res["verdict"] == "FAIL"
    tv = res["checks"]["excess_tv"]
    assert tv["verdict"] == "FAIL" and tv["ci95"][0] > 0.05
    assert tv["excess"] > 0.3  # about 1 − p_max per prompt
    assert res["checks"]["greedy_only"]["verdict"] == "FAIL"
    assert res["checks"]["greedy_only"]["log10_p_all_greedy"] < -100
    assert "temperature 0.8 ignored" in res["reason"]
    assert res["checks"]["out_of_support"]["draws"] == 0


def test_vocabulary_pruned_engine_fails_on_out_of_support():
    res = judge(prompts(2, engine="pruned"))
    assert res["verdict"] == "FAIL"
    oos = res["checks"]["out_of_support"]
    assert oos["verdict"] == "FAIL" and oos["ci95"][0] > 0.005
    assert oos["draws"] > 0.05 * oos["of"]
    assert "fall outside the set these settings keep" in res["reason"]


def test_logprobs_after_temperature_are_diagnosed():
    res = judge(prompts(3, engine="tempered_logprobs"), sampling={**HONEST, "temperature": 0.5})
    assert res["verdict"] == "FAIL"
    alt = res["checks"]["excess_tv"]["excess_if_logprobs_were_tempered"]
    assert alt["ci95"][1] <= 0.05
    assert "reports logprobs after temperature" in res["reason"]


def test_fewer_than_min_prompts_informative_is_unproven():
    pp = prompts(4, peaked=5)  # prompts 0-4 put ~all mass on one token
    pp[5]["top_again"] = {**pp[5]["top_again"], -1: -9.0}  # the listed tokens changed
    pp[5]["top_again"].pop(next(iter(pp[5]["top"])))
    pp[6]["top"] = pp[6]["top_again"] = dict(list(pp[6]["top"].items())[:5])  # top_k 10 past 5 listed
    res = judge(pp)
    assert res["verdict"] == "UNPROVEN"
    assert res["n_informative"] == 5
    assert res["dropped"] == {"near_deterministic": 5, "logprobs_unstable": 1, "beyond_top": 1}
    assert res["n_support_checked"] == 10
    assert "5 informative prompt(s), need 8" in res["reason"]
    # near-deterministic prompts still count for support: 10 prompts × 64 draws
    assert res["checks"]["out_of_support"]["of"] == 640


def test_failed_requests_make_a_pass_unproven():
    pp = prompts(1, n_prompts=13)
    pp[12]["error"] = "HTTP 500"
    res = judge(pp)
    assert res["checks"]["excess_tv"]["verdict"] == "PASS"
    assert res["verdict"] == "UNPROVEN" and "HTTP 500" in res["reason"]
    assert res["dropped"] == {"incomplete": 1}
    short = prompts(1)
    short[0]["draws"] = dict(list(short[0]["draws"].items())[:10])
    assert judge(short)["dropped"] == {"incomplete": 1}


def test_unmodelled_setting_is_unproven_even_when_it_would_fail():
    res = judge(prompts(1, engine="greedy"), sampling={**HONEST, "repetition_penalty": 1.1})
    assert res["verdict"] == "UNPROVEN"
    assert "repetition_penalty" in res["reason"] and "checks that failed regardless" in res["reason"]
    assert res["checks"]["settings"]["unmodelled"] == ["repetition_penalty"]
    neutral = judge(prompts(1), sampling={**HONEST, "repetition_penalty": 1.0, "logit_bias": {}})
    assert neutral["verdict"] == "PASS"


def test_unsent_fields_are_named():
    res = judge(prompts(1, engine="greedy"), sampling={"temperature": 0.8, "top_k": 10})
    assert res["checks"]["settings"]["unsent"] == ["top_p", "min_p"]
    assert any("top_p, min_p not sent" in n for n in res["notes"])
    assert "were taken as off" in res["reason"]


# ---------------------------------------------------------------------------------------------- seed check


def test_seed_check_statuses():
    first = {s: "abcd"[s % 4] for s in range(64)}  # collision (16·15·4) / (64·63) ≈ 0.238
    assert collision_probability(Counter(first.values())) == pytest.approx(960 / 4032)
    honoured = seed_check(first, {s: first[s] for s in range(8)})
    assert honoured["status"] == "honoured" and honoured["same"] == 8 and honoured["repeats"] == 8
    ignored = seed_check(first, {s: "a" for s in range(8)})  # 2 of 8 match
    assert ignored["status"] == "ignored" and ignored["same"] == 2
    flat = {s: "a" if s else "b" for s in range(64)}  # collision 62/64: a repeat proves nothing
    assert seed_check(flat, {s: "a" for s in range(1, 9)})["status"] == "inconclusive"
    assert seed_check(first, {})["status"] == "not checked"
    both = combine_seed_checks([honoured, ignored])
    assert both["repeats"] == 16 and both["same"] == 10 and both["status"] == "ignored"


def test_seed_stage_stops_only_when_every_first_repeat_matches_and_chance_could_not():
    varied = {str(s): "abcd"[s % 4] for s in range(64)}  # collision ≈ 0.238 per repeat
    first = {f"p{i}": varied for i in range(8)}
    same = {f"p{i}": {0: "a"} for i in range(8)}  # seed 0 drew "a" everywhere: every repeat matches
    st = seed_stage(first, same)
    chance = (960 / 4032) ** 8  # ≈ 1.0e-5
    assert st["stopped"] and st["repeats"] == 8 and st["same"] == 8
    assert st["chance_all_same"] == pytest.approx(chance)
    assert "stopped" in st["why"]
    # one repeat off: the other seeds are asked (the 0.9 rule needs more than one repeat per prompt)
    off = {**same, "p3": {0: "b"}}
    st = seed_stage(first, off)
    assert not st["stopped"] and st["same"] == 7 and "other seeds asked" in st["why"]
    # near-deterministic prompts: all-same is what an ignored seed gives too, so it cannot stop
    flat = {str(s): "a" if s else "b" for s in range(64)}  # collision 62/64
    st = seed_stage({f"p{i}": flat for i in range(8)}, {f"p{i}": {1: "a"} for i in range(8)})
    assert not st["stopped"] and st["same"] == 8 and st["chance_all_same"] == pytest.approx((62 / 64) ** 8)
    # a stricter stop asks for more
    assert not seed_stage(first, same, chance_max=chance / 2)["stopped"]
    assert not seed_stage(first, {})["stopped"]  # no repeat came back: nothing settled


def test_seed_check_inside_the_judge():
    pp = prompts(1)
    for item in pp[:8]:
        item["repeat"] = {s: item["draws"][s] for s in range(8)}
    sc = judge(pp)["seed_check"]
    assert sc["repeats"] == 64 and sc["same"] == 64 and sc["prompts"] == 8
    assert sc["status"] == "honoured"


# ------------------------------------------------------------------------------------------------ settings


def test_sampling_settings():
    cfg, unsent = sampling_settings({"temperature": 0.6, "top_k": 20, "top_p": 0.95})
    assert cfg == {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": None}
    assert unsent == ["min_p"]
    cfg, unsent = sampling_settings({"temperature": 1, "top_k": -1, "top_p": 1.0, "min_p": 0})
    assert cfg == {"temperature": 1.0, "top_k": None, "top_p": None, "min_p": None} and unsent == []
    for bad in ({}, {"temperature": -0.1}, {"temperature": 1, "top_p": 1.5}, {"temperature": 1, "top_k": "20"},
                {"temperature": 1, "min_p": -0.1}):
        with pytest.raises(ValueError):
            sampling_settings(bad)


def test_unmodelled_settings():
    body = {"temperature": 1, "repetition_penalty": 1.0, "typical_p": 0.9, "logit_bias": {"5": 2},
            "presence_penalty": 0.5, "response_format": {"type": "text"}}
    assert unmodelled_settings(body) == ["logit_bias", "typical_p"]


def test_too_few_draws_to_bound_the_out_of_support_share_is_unproven():
    res = judge(prompts(1, n_draws=16), n_seeds=16)  # 12 × 16 draws: 0 outside, Wilson upper bound ≈ 1.9%
    oos = res["checks"]["out_of_support"]
    assert oos["draws"] == 0 and oos["of"] == 192
    assert oos["verdict"] == "UNPROVEN" and oos["ci95"][1] > 0.005
    assert res["verdict"] == "UNPROVEN" and "too few draws to bound that share below 0.5%" in res["reason"]
