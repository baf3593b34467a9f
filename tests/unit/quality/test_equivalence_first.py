"""The first-token surface of the equivalence audit (issue 20): recorded one-token replies of llama-server serving
the F16 and the Q8_0 file, paired with the float32 reference's rows, judged against a first-token cell.

The fixtures (``tests/fixtures/equivalence/first-token``) are 8 short prompts of the audits' region (draw seed 7),
each sent greedy with ``max_tokens`` 1 and top-20 logprobs to llama-server 0.3.36's build (4 slots), and the
reference's next-token rows for the same prompt ids (the embedded GGUF dequantised to float32)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binomtest

from inferencekit.quality.equivalence_first import (
    first_token_pairs,
    first_token_report,
    first_token_summary,
    shift_test,
)
from inferencekit.quality.equivalence_run import AuditSettings
from inferencekit.quality.metrics import top_k_cut

FIX = Path(__file__).parents[2] / "fixtures" / "equivalence" / "first-token"
MADE = {"pool": "sharegpt-first-turns-seed20-max500chars", "max_tokens": 1, "top_logprobs": 20}
CELL = {"method": "first_token", "claim": "F16", "statistic": "first_token", "budget": 8, "alpha": 0.05,
        "threshold": 0.02, **MADE, "honest": {"fit_runs": 40, "heldout_runs": 40, "heldout_alarms": 0},
        "substitutes": [{"name": "q8_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505}]}


class RecordedReference:
    """The reference rows recorded beside the fixtures: a chat renders to the prompt ids its doc carries (the
    engine's, equal to the reference's for these prompts), and a prompt's next-token row is the recorded one."""

    k = 20

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        rows = json.loads((FIX / "reference.json").read_text())["rows"]
        self.ids = {json.dumps(d["messages"]): list(d["prompt_token_ids"]) for d in docs.values()}
        self.rows = {tuple(d["prompt_token_ids"]): {int(t): v for t, v in rows[i]} for i, d in docs.items()}

    async def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any]) -> list[int]:
        return self.ids[json.dumps(messages)]

    async def encode(self, text: str) -> list[int]:
        raise AssertionError("the first-token test never re-tokenizes")

    async def score(self, ids: list[int], start: int) -> list[dict[int, float]]:
        row = dict(self.rows[tuple(ids[:start])])
        row.setdefault(ids[start], -30.0)  # the forced token's own entry, as Reference.score adds it
        return [row]


def _docs(member: str) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((FIX / member).glob("*.json"))}


def _reference(docs: dict[str, dict[str, Any]]) -> RecordedReference:
    return RecordedReference(docs)


def _pairs(member: str) -> list[dict[str, Any]]:
    docs = _docs(member)
    return asyncio.run(first_token_pairs(_reference(docs), docs))


def _report(member: str, cells: list[dict[str, Any]]) -> dict[str, Any]:
    return first_token_report({"pairs": _pairs(member), "failed": []}, cells, claim="F16", made=MADE,
                              table_source="test")


def test_recorded_honest_f16_passes_and_recorded_q8_0_fails():
    honest = _report("f16", [CELL])
    assert honest["verdict"] == "PASS", honest["reason"]
    assert honest["budget_used"] == 8 and honest["statistic"]["prompts"] == 8
    assert honest["statistic"]["statistic"] < 0.02 and honest["statistic"]["top1_agreement"] == 1.0
    assert "would detect q8_0 at ≥ 95% power" in honest["reason"]
    sub = _report("q8_0", [CELL])
    assert sub["verdict"] == "FAIL", sub["reason"]
    assert sub["statistic"]["statistic"] > 0.02
    assert "first_token = " in sub["reason"] and "above the honest threshold 0.02" in sub["reason"]
    # Q8_0 moves the first token's logprobs by tens of times what F16's rounding does, on the same prompts
    assert sub["statistic"]["statistic"] > 5 * honest["statistic"]["statistic"]


def test_without_a_cell_or_below_its_budget_the_verdict_is_unproven():
    none = _report("f16", [])
    assert none["verdict"] == "UNPROVEN"
    assert any("no calibration table (test)" in x for x in none["limitations"])
    big = _report("f16", [{**CELL, "budget": 100}])
    assert big["verdict"] == "UNPROVEN" and "8 requests spent" in big["reason"]
    other_pool = _report("f16", [{**CELL, "pool": "sharegpt-first-turns-seed20"}])
    assert other_pool["verdict"] == "UNPROVEN" and "were made with pool" in other_pool["reason"]


def test_an_engine_whose_lists_name_no_ids_is_unproven_and_says_why():
    docs = _docs("f16")
    for d in docs.values():  # as llama-cpp-python returns them: token strings, no ids
        d["top_logprobs"] = [[[str(t), lp] for t, lp in pos] for pos in d["top_logprobs"]]
    pairs = asyncio.run(first_token_pairs(_reference(docs), docs))
    rep = first_token_report({"pairs": pairs, "failed": []}, [CELL], claim="F16", made=MADE, table_source="test")
    assert rep["verdict"] == "UNPROVEN" and rep["statistic"]["statistic"] is None
    assert any("8 prompt(s) without token ids" in x for x in rep["limitations"])
    assert "name no token ids" in rep["reason"] and "--surface logprob" in rep["reason"]


def test_a_prompt_tokenized_otherwise_is_left_out_but_counted_in_the_budget():
    docs = _docs("q8_0")
    first = next(iter(docs))
    docs[first]["prompt_token_ids"] = [*docs[first]["prompt_token_ids"], 2]
    ref = _reference(_docs("q8_0"))
    pairs = asyncio.run(first_token_pairs(ref, docs))
    mism = [p for p in pairs if p.get("template_mismatch")]
    assert [p["id"] for p in mism] == [first]
    rep = first_token_report({"pairs": pairs, "failed": []}, [CELL], claim="F16", made=MADE, table_source="test")
    assert rep["budget_used"] == 8 and rep["statistic"]["prompts"] == 7 and rep["statistic"]["skipped"] == 1
    assert any("left out of the statistic" in x and first in x for x in rep["limitations"])


def test_summary_values_by_hand():
    pairs = [{"id": "a", "ref": {1: -0.1, 2: -2.5}, "eng": {1: -0.2, 2: -2.0}},
             {"id": "b", "ref": {1: -1.0, 3: -0.5}, "eng": {3: -0.3, 4: -2.0}},
             {"id": "c", "error": "the engine returned no first-token list"}]
    s = first_token_summary(pairs)
    # a: (0.1 + 0.5) / 2; b: token 1 missing from the engine → its least listed −2.0: (1.0 + 0.2) / 2
    assert s["distances"] == pytest.approx({"a": 0.3, "b": 0.6})
    assert s["statistic"] == pytest.approx(0.45) and s["prompts"] == 2 and s["skipped"] == 1
    assert s["top1_agreement"] == 1.0  # a: 1 and 1; b: 3 and 3
    assert s["shift_mean"] == pytest.approx(((-0.2 + 0.1) + (-0.3 + 0.5)) / 2)


def test_the_reference_list_drops_the_forced_token_outside_the_top_k():
    assert top_k_cut({5: -0.1, 6: -1.0, 7: -9.0}, 2, None) == {5: -0.1, 6: -1.0}


def test_shift_test_exact_sign_flip_values():
    # five positive differences: of the 2^5 sign patterns only all-plus and all-minus reach |mean| → p = 2/32
    assert shift_test([0.3, 0.1, 0.2, 0.5, 0.4]) == pytest.approx(2 / 32)
    # the sign-flip test on equal magnitudes is the two-sided sign test: binomial(10, 1/2) tail
    ten = [1.0] * 9 + [-1.0]
    assert shift_test(ten) == pytest.approx(binomtest(9, 10, 0.5).pvalue)
    assert shift_test([0.0, 0.0]) is None and shift_test([1.0]) is None
    rng = np.random.default_rng(3)
    assert shift_test(list(rng.normal(0, 1, 200)), resamples=2000) > 0.01  # no shift: not small (seeded)


def test_settings_of_the_first_token_surface():
    s = AuditSettings(claim="F16", surface="first_token", budget_requests=100, pool="p")
    assert s.prompts_needed() == 100
    assert s.made() == {"pool": "p", "max_tokens": 1, "top_logprobs": 20}


def test_non_finite_logprobs_never_reach_the_statistic_or_the_p_value():
    pairs = [{"id": "a", "ref": {1: -0.1, 2: -2.5}, "eng": {1: float("nan"), 2: -2.5}},
             {"id": "b", "ref": {1: -0.1}, "eng": {1: -0.2}}]
    s = first_token_summary(pairs)
    assert s["prompts"] == 1 and s["skipped"] == 1 and s["statistic"] == pytest.approx(0.1)
    assert shift_test([float("nan"), 1.0, 2.0]) is None and shift_test([float("inf"), 1.0]) is None


def test_without_engine_prompt_ids_a_different_prompt_count_is_a_mismatch():
    docs = _docs("f16")
    ref = _reference(docs)
    first = next(iter(docs))
    for d in docs.values():
        d["prompt_token_ids"] = None
    docs[first]["usage"] = {**(docs[first].get("usage") or {}), "prompt_tokens": 3}
    pairs = asyncio.run(first_token_pairs(ref, docs))
    assert [p["id"] for p in pairs if p.get("template_mismatch")] == [first]
    assert "counted 3 prompt tokens" in next(p for p in pairs if p["id"] == first)["template_mismatch"]
