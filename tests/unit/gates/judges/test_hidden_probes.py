"""The hidden_probes gate: logprob entry checks, the sampling rule, and the combined verdict."""

from __future__ import annotations

import math
from typing import Any

import pytest

from inferencekit.gates.judges.hidden_probes import (
    LIVE_LIMITATION,
    SAMPLING_MIN_FAIL,
    check_logprob_entry,
    gate_hidden_probes,
    sampling_verdict,
)


def reply(text: str = "x", logprobs: list[dict[str, Any]] | None = None, status: int = 200,
          error: str | None = None, dropped: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "text": text, "reasoning": "", "logprobs": logprobs,
                           "token_ids": None, "usage": {"completion_tokens": 3}, "finish_reason": "stop",
                           "dropped_fields": dropped or []}
    if error is not None:
        out["error"] = error
    return out


def rec(kind: str, key: str, rep: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": f"{key}.{kind}", "kind": kind, "key": key, "meta": {}, "endpoint": "/v1/chat/completions",
            "body": {}, "reply": rep}


def entry(token: str, lp: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {"token": token, "logprob": lp, "top_logprobs": [{"token": t, "logprob": v} for t, v in top]}


GOOD = entry("Paris", math.log(0.9), [("Paris", math.log(0.9)), ("Lyon", math.log(0.05)), ("Nice", math.log(0.01))])


def group(key: str, greedy: str, a: str, b: str, a2: str | None = None, **kw: Any) -> list[dict[str, Any]]:
    out = [rec("greedy", key, reply(greedy, **kw)), rec("sample_a", key, reply(a, **kw)),
           rec("sample_b", key, reply(b, **kw))]
    out.append(rec("sample_a2", key, reply(a if a2 is None else a2, **kw)))
    return out


def honest(n: int = 4) -> list[dict[str, Any]]:
    return [r for i in range(n) for r in group(f"s{i}", "the cat", f"a cat {i}", f"one cat {i}")]


LP_OK = [rec("logprobs", "l0", reply(logprobs=[GOOD, GOOD, GOOD]))]


# --- check_logprob_entry --------------------------------------------------------------------------------------------

def test_a_valid_entry_has_no_problems():
    assert check_logprob_entry(GOOD, greedy=True) == []
    assert check_logprob_entry({"token": "a", "logprob": 0.0, "top_logprobs": []}, greedy=True) == []
    assert check_logprob_entry({"token": "a", "logprob": 5e-7}, greedy=False) == []  # within the 1e-6 slack


def test_positive_or_non_finite_logprobs_are_flagged():
    assert check_logprob_entry({"token": "a", "logprob": 0.5}, greedy=False) == [
        "chosen logprob 0.5 is not a finite number <= 0"]
    got = check_logprob_entry(entry("a", float("nan"), [("a", -0.1), ("b", float("nan"))]), greedy=True)
    assert got == ["chosen logprob nan is not a finite number <= 0",
                   "a top logprob is not a number <= 0 (nor null / -inf: probability 0)"]
    assert check_logprob_entry(entry("a", -0.1, [("a", -0.1), ("b", 0.3)]), greedy=True) == [
        "a top logprob is not a number <= 0 (nor null / -inf: probability 0)"]


def test_a_null_or_minus_infinity_top_logprob_is_probability_zero():
    # a masked token's logprob: servers send null or -Infinity; neither is a protocol error (failed before 18)
    for zero in (None, float("-inf")):
        e = {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1},
                                                            {"token": "b", "logprob": zero}]}
        assert check_logprob_entry(e, greedy=True) == []
    # ...but the chosen token of a greedy reply cannot have probability 0
    assert check_logprob_entry({"token": "a", "logprob": None, "top_logprobs": []}, greedy=True) == [
        "chosen logprob None is not a finite number <= 0"]


def test_unsorted_top_logprobs_are_flagged():
    got = check_logprob_entry(entry("a", -0.5, [("b", -2.0), ("a", -0.5)]), greedy=False)
    assert got == ["top_logprobs are not sorted (descending)"]


def test_mass_above_one_is_flagged_with_its_value():
    # exp(0) * 3 + 0.98 = 3.98
    got = check_logprob_entry(entry("a", 0.0, [("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", math.log(0.98))]),
                              greedy=True)
    assert got == ["top-k probability mass 3.98 > 1 (not normalised)"]
    # 0.6 + 0.4005 = 1.0005: within the 1e-3 slack
    assert check_logprob_entry(entry("a", math.log(0.6), [("a", math.log(0.6)), ("b", math.log(0.4005))]),
                               greedy=True) == []


def test_greedy_token_must_be_the_argmax():
    top = [("b", -0.5), ("a", -1.0)]
    got = check_logprob_entry(entry("a", -1.0, top), greedy=True)
    assert got == ["greedy token logprob -1.0000 < top logprob -0.5000 (the greedy token is not the argmax)"]
    assert check_logprob_entry(entry("a", -1.0, top), greedy=False) == []
    # a tie within 1e-3: either token may be listed first
    assert check_logprob_entry(entry("a", -0.6931, [("b", -0.6931), ("a", -0.6931)]), greedy=True) == []
    # another token listed first with a logprob 0.002 away from the chosen one: not a tie
    got = check_logprob_entry(entry("a", -0.5, [("b", -0.502)]), greedy=True)
    assert got == ["greedy token 'a' is not the top-1 token 'b'"]
    # the same within 1e-3 (-0.5 vs -0.5005) is a tie
    assert check_logprob_entry(entry("a", -0.5, [("b", -0.5005)]), greedy=True) == []


# --- sampling_verdict -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("equal", "n", "verdict", "text"), [
    (4, 4, "FAIL", "on all 4/4 prompts (temperature ignored?)"),
    (8, 8, "FAIL", "on all 8/8 prompts"),
    (3, 3, "UNPROVEN", "on 3/3 prompts: with fewer than 4 prompts this can be chance"),
    (6, 8, "UNPROVEN", "on 6/8 prompts: a confident model seldom matches"),
    (7, 8, "UNPROVEN", "7/8"),
    (5, 8, "PASS", "differ from greedy on 3/8 prompts"),
    (0, 8, "PASS", "differ from greedy on 8/8 prompts"),
    (0, 0, "UNPROVEN", "no sampling prompt came back complete"),
])
def test_sampling_verdict(equal, n, verdict, text):
    got, why = sampling_verdict(equal, n)
    assert got == verdict and text in why


def test_sampling_min_fail_is_four():
    assert SAMPLING_MIN_FAIL == 4


# --- gate -----------------------------------------------------------------------------------------------------------

def test_pass_live_adds_the_concurrency_one_limitation():
    g = gate_hidden_probes(honest() + LP_OK)
    assert g.verdict == "PASS"
    assert g.reason == ("PASS: T=1 samples differ from greedy on 4/4 prompts; PASS: 3 positions: logprobs finite, "
                        "normalised, greedy token = argmax, sorted")
    assert g.metrics["sampling_prompts"] == 4 and g.metrics["seed_reproduced"] == "4/4"
    assert g.metrics["logprob_positions"] == 3 and g.metrics["logprob_violations"] == 0
    assert list(g.limitations) == [LIVE_LIMITATION] and "concurrency 1" in LIVE_LIMITATION


def test_pass_load_has_no_live_limitation():
    g = gate_hidden_probes(honest() + LP_OK, where="load")
    assert g.verdict == "PASS" and list(g.limitations) == []


def test_fail_when_every_sample_equals_greedy():
    recs = [r for i in range(4) for r in group(f"s{i}", "same", "same", "same")] + LP_OK
    g = gate_hidden_probes(recs)
    assert g.verdict == "FAIL" and g.metrics["samples_equal_greedy"] == 4
    assert "FAIL: T=1 samples equal the greedy output on all 4/4 prompts" in g.reason
    assert "PASS: 3 positions" in g.reason


def test_unproven_when_three_of_three_equal_greedy():
    recs = [r for i in range(3) for r in group(f"s{i}", "same", "same", "same")] + LP_OK
    g = gate_hidden_probes(recs)
    assert g.verdict == "UNPROVEN"
    assert any("only 3 sampling prompt(s)" in x for x in g.limitations)


def test_seed_not_reproduced_is_a_limitation_never_a_fail():
    recs = [r for i in range(4) for r in group(f"s{i}", "g", f"a{i}", f"b{i}", a2=f"other{i}")] + LP_OK
    g = gate_hidden_probes(recs)
    assert g.verdict == "PASS" and g.metrics["seed_reproduced"] == "0/4"
    assert any("ignores `seed` or samples nondeterministically" in x for x in g.limitations)


def test_refused_top_p_and_top_k_are_noted():
    recs = [r for i in range(4) for r in group(f"s{i}", "g", f"a{i}", f"b{i}", dropped=["top_k", "top_p"])] + LP_OK
    g = gate_hidden_probes(recs)
    assert g.verdict == "PASS"
    assert any(x.startswith("the server refused top_k and top_p on the T=1 samples") for x in g.limitations)


def test_fail_on_an_unnormalised_logprob_entry():
    bad = entry("a", 0.0, [("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", math.log(0.98))])
    g = gate_hidden_probes(honest() + [rec("logprobs", "l0", reply(logprobs=[GOOD, bad]))])
    assert g.verdict == "FAIL"
    assert "FAIL: 1 logprob violation(s) in 2 positions (first: top-k probability mass 3.98 > 1 (not normalised) " \
           "at l0:1)" in g.reason
    assert {"key": "l0", "position": 1, "problem": "top-k probability mass 3.98 > 1 (not normalised)"} in g.details


def test_unproven_when_logprobs_are_missing():
    g = gate_hidden_probes(honest() + [rec("logprobs", "l0", reply(logprobs=None))])
    assert g.verdict == "UNPROVEN" and g.metrics["logprob_missing"] == 1
    assert "UNPROVEN: 1/1 logprob probes came back without logprobs" in g.reason


def test_unproven_when_a_logprob_probe_failed():
    g = gate_hidden_probes(honest() + LP_OK + [rec("logprobs", "l1", reply(status=400, error="logprobs off"))])
    assert g.verdict == "UNPROVEN"
    assert "UNPROVEN: 1 logprob probe(s) failed (HTTP 400 ×1; first error: logprobs off)" in g.reason


def test_unproven_when_a_sampling_probe_failed():
    recs = honest() + [rec("sample_b", "s9", None), rec("greedy", "s9", reply("g"))] + LP_OK
    g = gate_hidden_probes(recs)
    assert g.verdict == "UNPROVEN"
    assert "UNPROVEN: 1 sampling probe(s) failed (no response ×1; first error: not sent)" in g.reason
    assert g.metrics["sampling_prompts"] == 4  # the incomplete group is left out


def test_unproven_without_a_logprob_probe():
    g = gate_hidden_probes(honest())
    assert g.verdict == "UNPROVEN" and g.reason.endswith("UNPROVEN: no logprob probe")


def test_unproven_without_sampling_probes():
    g = gate_hidden_probes(LP_OK)
    assert g.verdict == "UNPROVEN" and g.reason.startswith("UNPROVEN: no sampling probe")


def test_not_run_without_probes():
    g = gate_hidden_probes([rec("count", "n0", reply())])
    assert g.verdict == "NOT RUN"


def test_where_must_be_live_or_load():
    with pytest.raises(ValueError, match="where"):
        gate_hidden_probes([], where="bench")


def test_top_logprobs_out_of_order_are_noted_not_failed():
    # llama-cpp-python under load, observed: one position's top-5 list out of order, every value sound
    from inferencekit.gates.judges.hidden_probes import _logprob_part

    entry = {"token": " a", "logprob": -0.5, "top_logprobs": [{"token": " a", "logprob": -0.5},
                                                             {"token": " c", "logprob": -2.5},
                                                             {"token": " b", "logprob": -2.0}]}
    rec = {"id": "p0.logprobs", "kind": "logprobs", "key": "p0", "meta": {}, "body": {},
           "reply": {"status": 200, "text": " a", "logprobs": [entry]}}
    metrics: dict = {}
    parts = _logprob_part([rec], metrics, [])
    assert parts[0][0] == "PASS" and "out of order at 1 position" in parts[0][1]
    assert metrics["logprob_unsorted"] == 1 and metrics["logprob_violations"] == 0


def test_a_pass_names_its_n_and_what_it_rules_out():
    g = gate_hidden_probes(honest() + LP_OK)
    assert g.judged == 4 + 3
    assert "T=1 samples equal greedy on 0/4 prompts" in g.rules_out
    assert "0 of 3 logprob positions off a distribution: a violation rate above" in g.rules_out


def test_refused_top_logprobs_dropped_by_the_client_is_unproven_not_a_pass():
    # the server 400'd top_logprobs, the client resent without it: chosen logprobs only (failed before 18: PASS)
    bare = [{"token": "Paris", "logprob": -0.1}] * 3
    g = gate_hidden_probes(honest() + [rec("logprobs", "l0", reply(logprobs=bare, dropped=["top_logprobs"]))])
    assert g.verdict == "UNPROVEN" and g.metrics["logprob_positions"] == 0 and g.metrics["logprob_without_top"] == 1
    assert "1/1 logprob probes came back without top_logprobs" in g.reason
    # no top lists at all, even without a recorded drop, proves no distribution either
    g = gate_hidden_probes(honest() + [rec("logprobs", "l0", reply(logprobs=bare))])
    assert g.verdict == "UNPROVEN" and "normalisation and the greedy argmax were not checked" in g.reason
    # a chosen logprob out of range is still a FAIL without top lists
    g = gate_hidden_probes(honest() + [rec("logprobs", "l0", reply(logprobs=[{"token": "a", "logprob": 0.7}]))])
    assert g.verdict == "FAIL"


def test_a_sampling_check_cut_by_a_small_prompt_set_states_the_false_fail_odds():
    # before 18 the plan shrank 8 sampling prompts to as few as 4 without a word
    from inferencekit.data.prompts import load_prompt_set
    from inferencekit.gates.inputs import ProbeRun
    from inferencekit.gates.judges.hidden_probes import judge_probes
    from inferencekit.gates.probes.plan import ProbeSettings
    from inferencekit.gates.run import size_probes

    chat = [p for p in load_prompt_set("dev").prompts if p.is_chat and p.bucket in ("short", "medium")]
    s = ProbeSettings()
    size_probes(s, chat[:20], None, "small")  # 15 prompts for the other probes leave room for 5
    assert s.sampling_prompts < 8 and s.sampling_shrunk_from == 8
    header = {"settings": {"probes": s.to_json()}}
    g = judge_probes(ProbeRun(header, honest(s.sampling_prompts) + LP_OK, "live"))
    assert g.verdict == "PASS" and len(g.fallbacks) == 1
    assert f"ran on {s.sampling_prompts} prompts instead of 8" in g.fallbacks[0] and "P ≈ (1/3)^" in g.fallbacks[0]
    big = ProbeSettings()
    size_probes(big, chat, None, "dev")
    assert big.sampling_shrunk_from is None
