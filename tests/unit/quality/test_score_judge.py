"""Per-position scoring and the verdict against the A/A floor, on small inputs worked out by hand."""

from __future__ import annotations

import math

import pytest

from inferencekit.quality.score_judge import (
    DEFAULT_MARGINS,
    divergence,
    first_divergence,
    judge_engine,
    more_prompts_needed,
    summarize,
)
from inferencekit.quality.score_rows import score_positions

LN = math.log


def test_score_positions_agreement_nll_gap_and_kl_by_hand():
    tokens = [5, 7]
    ref = [{5: LN(0.6), 6: LN(0.3), 9: LN(0.1)}, {7: LN(0.2), 8: LN(0.7), 9: LN(0.1)}]
    eng = [{5: LN(0.6), 6: LN(0.3), 9: LN(0.1)}, {7: LN(0.5), 8: LN(0.4), 9: LN(0.1)}]
    rows = score_positions(tokens, ref, eng, ks={2}, own_k=2)
    assert [r["agree"] for r in rows] == [1, 0]
    assert rows[0]["nll"] == pytest.approx(-LN(0.6)) and rows[1]["nll"] == pytest.approx(-LN(0.2))
    assert rows[0]["gap"] == 0 and rows[1]["gap"] == pytest.approx(LN(0.7) - LN(0.2))
    assert rows[0]["kl"] == 0.0 and rows[0]["tv"] == 0.0
    # position 1, k = 2 plus the token: ref keeps {8: .7, 7: .2} (tail .1), eng keeps {7: .5, 8: .4} (tail .1);
    # same union, nothing imputed, OTHER .1 on both sides
    p, q = [0.7, 0.2, 0.1], [0.4, 0.5, 0.1]
    kl = sum(a * LN(a / b) for a, b in zip(p, q))
    assert rows[1]["kl"] == pytest.approx(kl, rel=1e-9)
    assert rows[1]["tv"] == pytest.approx(0.3, rel=1e-9)


def test_without_engine_lists_kl_is_none_but_agreement_and_nll_are_scored():
    rows = score_positions([3], [{3: LN(0.5), 4: LN(0.5)}], None, ks={5}, own_k=0)
    assert rows[0]["kl"] is None and rows[0]["tv"] is None and rows[0]["kl_at"] == {}
    assert rows[0]["agree"] == 1  # a tie goes to the smaller id, as the reference's argmax would
    assert rows[0]["nll"] == pytest.approx(LN(2))


def test_score_positions_refuses_mismatched_inputs():
    with pytest.raises(ValueError):
        score_positions([1, 2], [{1: 0.0}], None, ks=set(), own_k=0)
    with pytest.raises(ValueError):
        score_positions([1], [{2: 0.0}], None, ks=set(), own_k=0)


def result(pid: str, agree: list[int], nll: float = 0.5, kl: float | None = 0.0, k: int = 20) -> dict:
    rows = [{"t": t, "agree": a, "nll": nll, "gap": 0.0, "kl": kl, "tv": kl, "kl_at": {k: kl}, "tv_at": {k: kl}}
            for t, a in enumerate(agree)]
    return {"id": pid, "rows": rows, "k_kl": k if kl is not None else 0, "token_ids": list(range(len(agree)))}


def floor(n: int = 12) -> dict:
    return {f"p{i}": result(f"p{i}", [1] * 20) for i in range(n)}


def test_an_engine_as_good_as_the_floor_passes():
    eng = [result(f"p{i}", [1] * 20) for i in range(12)]
    v = judge_engine(eng, floor(), DEFAULT_MARGINS, resamples=500)
    assert v["verdict"] == "PASS", v["reason"]
    assert v["checks"]["top1_agreement"]["ci95"] == [0.0, 0.0]
    assert v["checks"]["tv_mean"]["verdict"] == "NOT RUN"  # no TV margin: reported, not judged


def test_an_engine_that_disagrees_on_a_fifth_of_positions_fails_agreement():
    eng = [result(f"p{i}", [1] * 16 + [0] * 4) for i in range(12)]
    v = judge_engine(eng, floor(), DEFAULT_MARGINS, resamples=500)
    c = v["checks"]["top1_agreement"]
    assert v["verdict"] == "FAIL" and c["verdict"] == "FAIL"
    assert c["worse_than_floor"] == pytest.approx(0.2) and c["ci95"][0] == pytest.approx(0.2)


def test_higher_kl_than_the_margin_fails_and_a_straddling_ci_is_unproven():
    hot = [result(f"p{i}", [1] * 20, kl=0.05) for i in range(12)]
    assert judge_engine(hot, floor(), DEFAULT_MARGINS, resamples=500)["checks"]["kl_mean"]["verdict"] == "FAIL"
    # half the prompts at KL 0, half at 0.04: the mean 0.02 sits on the margin, the CI straddles it
    mixed = [result(f"p{i}", [1] * 20, kl=0.04 if i % 2 else 0.0) for i in range(12)]
    v = judge_engine(mixed, floor(), DEFAULT_MARGINS, resamples=500)
    assert v["checks"]["kl_mean"]["verdict"] == "UNPROVEN" and v["verdict"] == "UNPROVEN"


def test_no_floor_is_unproven_and_missing_kl_is_not_a_pass():
    eng = [result(f"p{i}", [1] * 20) for i in range(12)]
    assert judge_engine(eng, None, DEFAULT_MARGINS)["verdict"] == "UNPROVEN"
    text_only = [result(f"p{i}", [1] * 20, kl=None) for i in range(12)]
    v = judge_engine(text_only, floor(), DEFAULT_MARGINS, resamples=500)
    assert v["checks"]["top1_agreement"]["verdict"] == "PASS"
    assert v["checks"]["kl_mean"]["verdict"] == "NOT RUN"
    assert v["verdict"] == "UNPROVEN"
    # a caller who pre-registers no KL margin gets its verdict from the checks that have one
    assert judge_engine(text_only, floor(), {**DEFAULT_MARGINS, "kl": None}, resamples=500)["verdict"] == "PASS"


def test_kl_is_paired_at_the_smallest_k_either_arm_returned():
    eng = [result(f"p{i}", [1] * 20, kl=0.001, k=5) for i in range(12)]
    for r in eng:  # the engine also carries values at k=20 that must not be used
        for x in r["rows"]:
            x["kl_at"][20] = 0.5
    v = judge_engine(eng, floor(), DEFAULT_MARGINS, resamples=500)
    assert v["checks"]["kl_mean"]["top_k"] == 5


def test_summarize_pools_positions_and_buckets_them():
    res = [result("a", [1] * 40), result("b", [0] * 10)]
    s = summarize(res, resamples=200)
    assert s["all"]["top1_agreement"]["value"] == pytest.approx(40 / 50)  # pooled, not the mean of 1.0 and 0.0
    assert s["all"]["top1_agreement"]["n_tokens"] == 50
    assert s["0-31"]["top1_agreement"]["n_tokens"] == 42 and s["32-127"]["top1_agreement"]["n_tokens"] == 8
    assert s["128+"]["top1_agreement"]["value"] is None
    assert s["all"]["ref_ppl"]["value"] == pytest.approx(math.exp(0.5))


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    d = divergence({"a": [1, 2], "b": [1, 2, 3]}, {"a": [1, 2], "b": [1, 5, 3], "c": [0]})
    assert d["n_prompts"] == 2 and d["identical"] == 1 and d["first_divergence_median"] == 1


def test_summarize_leaves_clamped_disagreements_out_of_the_gap_median():
    # two clamped positions (agree 0, gap None) made statistics.median raise a TypeError (issue 18 audit)
    tokens = [5, 6, 7, 8]
    ref = [{5: LN(0.5), 9: LN(0.5)}, {6: -9999.0, 9: LN(0.9)}, {7: -9999.0, 9: LN(0.9)},
           {8: LN(0.25), 9: LN(0.75)}]
    rows = score_positions(tokens, ref, None, ks=set(), own_k=0)
    assert [r["clamped"] for r in rows] == [False, True, True, False]
    out = summarize([{"id": "p0", "rows": rows, "k_kl": 0, "token_ids": tokens}], resamples=50)
    # the one unclamped disagreement (position 3): ln .75 − ln .25 = ln 3
    assert out["all"]["disagreement_gap_median"] == pytest.approx(LN(3))
    assert out["all"]["ref_nll_mean"]["n_tokens"] == 2  # clamped positions are not averaged into the NLL
    assert out["all"]["top1_agreement"]["value"] == pytest.approx(0.25)


def _block(v: dict, problems: list[str] | None = None) -> dict:
    return {"verdict": v, "data_problems": problems or []}


def test_more_prompts_are_needed_only_where_an_interval_straddles_its_margin():
    mixed = [result(f"p{i}", [1] * 20, kl=0.04 if i % 2 else 0.0) for i in range(12)]
    straddle = judge_engine(mixed, floor(), DEFAULT_MARGINS, resamples=500)
    assert more_prompts_needed(_block(straddle))
    # the same straddle beside a data problem: more prompts would not mend a mismatched input
    assert not more_prompts_needed(_block(straddle, ["template mismatch: ..."]))
    hot = [result(f"p{i}", [1] * 20, kl=0.05) for i in range(12)]
    assert not more_prompts_needed(_block(judge_engine(hot, floor(), DEFAULT_MARGINS, resamples=500)))  # a FAIL
    good = [result(f"p{i}", [1] * 20) for i in range(12)]
    assert not more_prompts_needed(_block(judge_engine(good, floor(), DEFAULT_MARGINS, resamples=500)))  # a PASS
    # a KL that could not be computed is missing evidence, not a straddle
    text_only = [result(f"p{i}", [1] * 20, kl=None) for i in range(12)]
    assert not more_prompts_needed(_block(judge_engine(text_only, floor(), DEFAULT_MARGINS, resamples=500)))


def test_a_look_held_to_a_higher_confidence_widens_its_interval():
    mixed = [result(f"p{i}", [1] * 20, kl=0.03 if i % 3 else 0.0) for i in range(12)]
    at95 = judge_engine(mixed, floor(), DEFAULT_MARGINS, resamples=500)["checks"]["kl_mean"]
    at983 = judge_engine(mixed, floor(), DEFAULT_MARGINS, resamples=500, confidence=1 - 0.05 / 3)["checks"]["kl_mean"]
    assert at983["confidence"] == pytest.approx(0.98333, abs=1e-4) and at95["confidence"] == 0.95
    assert at983["ci95"][0] <= at95["ci95"][0] < at95["ci95"][1] <= at983["ci95"][1]
    assert at983["ci95"] != at95["ci95"] and "98.3333% CI" in at983["reason"]
