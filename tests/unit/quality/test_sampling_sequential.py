"""The sampler check's sequential rule on simulated engines: where it stops, what it says, what the record states."""

import math

import numpy as np
import pytest

from inferencekit.quality.sampling_sequential import (
    OOS_P0,
    OOS_P1,
    describe_rule,
    draw_looks,
    judge_look,
    look_confidence,
    oos_plan,
)
from inferencekit.sequential import cs_upper_bound
from tests.unit.quality.test_sampling import HONEST, prompts

LOOKS = draw_looks(64)
ARGS = {"sampling": HONEST, "margin": 0.05, "resamples": 2000, "seed": 0}


def upto(per_prompt, n):
    """Each prompt's first ``n`` draws (seeds 0..n-1): what a look at ``n`` draws per prompt sees."""
    return [{**r, "draws": {s: t for s, t in r["draws"].items() if s < n}} for r in per_prompt]


def run_rounds(per_prompt):
    """Judge look after look until decided, as the collector does: (result, looks judged)."""
    return run_rounds_with(per_prompt)


def run_rounds_with(per_prompt, **kw):
    for i, n in enumerate(LOOKS):
        res, decided = judge_look(upto(per_prompt, n), looks=LOOKS, look=i, **{**ARGS, **kw})
        if decided:
            return res, i + 1
    raise AssertionError("the last look always decides")


def test_looks_split_the_draws_in_four_rounds():
    assert draw_looks(64) == (16, 32, 48, 64)
    assert draw_looks(10) == (3, 5, 8, 10)
    assert draw_looks(2) == (1, 2)  # fewer seeds than looks: fewer looks
    with pytest.raises(ValueError):
        draw_looks(0)
    assert look_confidence(4) == pytest.approx(0.9875)
    assert look_confidence(1) == pytest.approx(0.95)


def test_honest_engine_stops_before_the_cap_with_a_pass():
    res, looks = run_rounds(prompts(1, n_prompts=16))
    assert res["verdict"] == "PASS", res["reason"]
    assert looks < len(LOOKS)
    seq = res["sequential"]
    assert seq["decided"] and seq["draws_per_prompt"] == LOOKS[looks - 1]
    tv = res["checks"]["excess_tv"]
    assert tv["confidence"] == pytest.approx(0.9875) and tv["ci95"][1] <= 0.05
    assert "98.75% CI" in tv["reason"]
    oos = res["checks"]["out_of_support"]
    assert oos["verdict"] == "PASS" and seq["oos_sprt"]["decision"] == "PASS"
    # the confidence-sequence bound printed on the PASS: valid at this data-dependent stop, wider than Wilson's
    assert oos["cs_upper"] == pytest.approx(cs_upper_bound(0, oos["of"]))
    assert oos["draws"] == 0 and 0 < oos["cs_upper"] < 0.05
    assert f"rate ≤ {oos['cs_upper']:.2%} by the 95% confidence sequence" in res["reason"]


def test_temperature_ignored_engine_fails_at_the_first_look():
    res, looks = run_rounds(prompts(1, n_prompts=16, engine="greedy"))
    assert looks == 1
    assert res["verdict"] == "FAIL"
    assert res["checks"]["greedy_only"]["verdict"] == "FAIL"


def test_pruned_vocabulary_fails_by_the_sprt():
    res, looks = run_rounds(prompts(2, n_prompts=16, engine="pruned"))
    assert res["verdict"] == "FAIL"
    assert res["sequential"]["oos_sprt"]["decision"] == "FAIL"
    assert "SPRT FAIL" in res["reason"]
    assert looks == 1


def test_an_incomplete_prompt_stops_unproven_where_the_others_settle():
    pp = prompts(1, n_prompts=16)
    _, complete_looks = run_rounds(pp)
    pp[3]["error"] = "HTTP 500"
    res, looks = run_rounds(pp)
    # the other 15 prompts reach the top-share PASS boundary no later than all 16 did; more draws cannot make the
    # verdict a PASS, so the rounds stop there, UNPROVEN as the fixed check says
    assert looks <= complete_looks < len(LOOKS)
    assert res["verdict"] == "UNPROVEN" and "1 prompt(s) incomplete" in res["reason"]
    assert res["sequential"]["decided"] and res["sequential"]["top_share_sprt"]["pass"]
    assert res["sequential"]["why"].startswith("UNPROVEN decided: 1 incomplete prompt(s)")


def test_an_incomplete_prompt_with_unsettled_others_goes_on_to_the_cap():
    pp = prompts(5, n_prompts=8)
    pp[0]["error"] = "HTTP 500"
    res, looks = run_rounds_with(pp, margin=0.001)  # the top-share test never settles under so tight a margin
    assert looks == len(LOOKS) and res["verdict"] == "UNPROVEN"
    assert res["sequential"]["why"] == "the cap"


def test_too_few_prompts_still_catch_a_greedy_engine():
    # 4 prompts can never PASS (8 needed) but the all-greedy test FAILs once enough draws are in
    res, looks = run_rounds(prompts(1, n_prompts=4, engine="greedy"))
    assert res["verdict"] == "FAIL" and res["checks"]["greedy_only"]["verdict"] == "FAIL"
    assert res["checks"]["greedy_only"]["draws"] == 4 * LOOKS[looks - 1]


def test_settings_it_cannot_model_stop_at_the_first_look():
    res, looks = run_rounds_with(prompts(1, n_prompts=16), sampling={**HONEST, "repetition_penalty": 1.1})
    assert looks == 1 and res["verdict"] == "UNPROVEN" and "repetition_penalty" in res["reason"]


def test_an_undecided_interval_draws_another_round():
    # at 16 draws the widened interval of 8 prompts does not reach under a tight margin; the rule goes on
    pp = prompts(5, n_prompts=8)
    res, decided = judge_look(upto(pp, 16), looks=LOOKS, look=0, **{**ARGS, "margin": 0.001})
    assert not decided and res["sequential"]["why"] == "undecided: another round"
    assert res["checks"]["excess_tv"]["verdict"] == "UNPROVEN"


def test_the_last_look_decides_and_falls_back_to_the_wilson_rule():
    pp = prompts(5, n_prompts=8)
    res, decided = judge_look(pp, looks=LOOKS, look=3, **{**ARGS, "margin": 0.001})
    assert decided and res["sequential"]["why"] == "the cap"
    assert res["verdict"] == "UNPROVEN"


def test_the_rule_is_stated_before_any_draw():
    rule = describe_rule(16, 64, LOOKS)
    assert rule["looks"] == [16, 32, 48, 64] and rule["look_confidence"] == pytest.approx(0.9875)
    oos = rule["out_of_support"]
    assert (oos["p0"], oos["p1"], oos["alpha"], oos["beta"], oos["cap"]) == (OOS_P0, OOS_P1, 0.05, 0.05, 1024)
    assert "SPRT" in oos["method"] and "Bonferroni" in rule["method"]
    assert oos_plan(16, 64).pass_at < 0 < oos_plan(16, 64).fail_at


def test_each_look_states_what_it_showed():
    from inferencekit.quality.sampling_run import look_shown

    per = prompts(1, n_prompts=16)
    res, _ = judge_look(upto(per, LOOKS[0]), looks=LOOKS, look=0, **ARGS)
    shown = look_shown(res)
    assert set(shown) == {"verdict", "excess_tv_ci", "informative_prompts", "out_of_support", "sprt", "top_share_llr"}
    top = res["sequential"]["top_share_sprt"]
    assert shown["top_share_llr"] == (top["llr"] if top else None)
    assert shown["verdict"] == res["verdict"] and shown["informative_prompts"] == 16
    assert shown["out_of_support"][1] == 16 * LOOKS[0] and shown["excess_tv_ci"] == res["checks"]["excess_tv"]["ci95"]
    assert shown["sprt"] in ("PASS", "FAIL", "cap", None)


def test_an_early_look_judges_against_the_margin_as_its_draws_show_it():
    from inferencekit.quality.sampling_sequential import cheat_share, margin_at

    implied = [[0.5, 0.3, 0.2], [0.7, 0.2, 0.1], [0.4, 0.4, 0.1, 0.1]]
    at = [margin_at(implied, n, 0.05, 64) for n in LOOKS]
    assert at[-1] == pytest.approx(0.05, abs=1e-6)  # at the cap: the fixed check's margin
    assert at[0] < at[1] < at[2] < at[3]  # fewer draws show less of the same shift
    q = cheat_share(implied, 0.05, 64)
    assert 0 < q < 1
    # the shift itself (TV q·(1 − p_top) on average) is larger than the excess it shows at 64 draws
    assert q * sum(1 - max(p) for p in implied) / len(implied) > 0.05
    # an honest engine's look 1 is judged against that smaller margin
    res, looks = run_rounds(prompts(1, n_prompts=16))
    seq = res["sequential"]
    assert looks == 1 and seq["margin_at_look"] < 0.05 and res["checks"]["excess_tv"]["margin"] == seq["margin_at_look"]
    with pytest.raises(ValueError):
        margin_at([], 16, 0.05, 64)


def test_the_top_share_likelihood_ratio_by_hand():
    from inferencekit.quality.sampling_sequential import top_share_llr

    rows = [{"status": "informative", "max_p": 0.5, "greedy_draws": 6, "n_draws": 16},
            {"status": "informative", "max_p": 0.25, "greedy_draws": 4, "n_draws": 16},
            {"status": "near_deterministic", "max_p": 0.99, "greedy_draws": 16, "n_draws": 16}]  # not counted
    q = 0.2
    want = (6 * math.log(0.8 + 0.2 / 0.5) + 10 * math.log(0.8)) + (4 * math.log(0.8 + 0.2 / 0.25) + 12 * math.log(0.8))
    assert top_share_llr(rows, q) == pytest.approx(want)
    assert top_share_llr(rows[2:], q) == 0.0
    with pytest.raises(ValueError):
        top_share_llr(rows, 0.0)


def shifted_to_top(per_prompt, share, seed):
    """The smallest cheat's draws: each prompt's honest draw replaced by its top listed token with probability
    ``share`` (its mass moved to the top token)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in per_prompt:
        best = max(r["top"], key=r["top"].get)
        out.append({**r, "draws": {s: best if rng.random() < share else t for s, t in r["draws"].items()}})
    return out


def test_an_honest_engine_can_pass_at_the_first_look_by_the_top_share_test():
    res, looks = run_rounds(prompts(1, n_prompts=16))
    top = res["sequential"]["top_share_sprt"]
    assert looks == 1 and res["verdict"] == "PASS"
    # an early look PASSes only by the top-share test, and says so beside the interval it still prints
    assert top["pass"] and top["llr"] <= top["pass_at"] == pytest.approx(math.log(0.01))
    assert 0 < top["q"] < 1
    assert "top-share SPRT PASS at 16 draws per prompt" in res["checks"]["excess_tv"]["reason"]
    assert "98.75% CI" in res["checks"]["excess_tv"]["reason"]


def test_the_smallest_cheat_is_not_passed_early_by_the_top_share_test():
    from inferencekit.quality.sampling_sequential import cheat_share

    honest = prompts(3, n_prompts=16)
    first, _ = judge_look(upto(honest, LOOKS[0]), looks=LOOKS, look=0, **ARGS)
    probs = [[p for _, p in r["implied"]] for r in first["rows"] if r["status"] == "informative"]
    q = cheat_share(probs, 0.05, 64)
    passed_early = 0
    for seed in range(20):
        cheat = shifted_to_top(honest, q, seed)
        for i, n in enumerate(LOOKS[:-1]):
            res, decided = judge_look(upto(cheat, n), looks=LOOKS, look=i, **ARGS)
            top = res["sequential"]["top_share_sprt"]
            if top is not None:
                assert top["q"] == pytest.approx(q)
            if decided:
                passed_early += res["verdict"] == "PASS"
                break
    assert passed_early <= 2  # Ville: at most 2.5% of such sequences in the long run; 20 of them here


def test_the_record_says_what_an_early_pass_rules_out():
    from inferencekit.quality.sampling_collect import SamplingPlan
    from inferencekit.quality.sampling_run import _limitations

    res, looks = run_rounds(prompts(1, n_prompts=16))
    assert looks == 1 and res["verdict"] == "PASS"
    res["sequential"]["rule"] = describe_rule(16, 64, LOOKS)
    got = {"refused": None, "reused": 0, "top_logprobs": 20,
           "seed_stage": {"why": "8 of 8 first repeats matched; ...: stopped"}}
    lim = _limitations(res, got, SamplingPlan(send=HONEST, seeds=64, looks=LOOKS), unsent=[], n_asked=16, base=None)
    early = [x for x in lim if x.startswith("an early PASS comes from the top-share test alone")]
    assert len(early) == 1 and "not an error of another shape of the same TV" in early[0]
    assert f"ln LR {res['sequential']['top_share_sprt']['llr']:.2f}" in early[0]
    assert any(x.startswith("sequential seed check: one repeat per prompt first") for x in lim)
    assert any("stopped at look 1 (16 draws per prompt" in x for x in lim)
