"""The live caching gate on hand-built probe records, and the per-reply timing helpers it uses.

Times are in ms as in reply files. Expected speedups are worked out by hand in the comments: a reply
of 16 tokens with TTFT 100 and E2EL 1600 decodes 15 tokens in 1.5 s, 10 tok/s.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import inferencekit.gates.records as pr
from inferencekit.gates.judges.caching import (
    ALL_AT_ONCE_SPEEDUP,
    fast_pairs,
    gate_caching,
    sent_bypass,
    timing_pairs,
    typical_speedup,
)


def reply(ttft_ms: float | None = 100.0, e2el_ms: float | None = 1600.0, n: int | None = 16, text: str = "same",
          status: int = 200, error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "text": text, "reasoning": "", "ttft_ms": ttft_ms, "e2el_ms": e2el_ms,
                           "usage": None if n is None else {"completion_tokens": n}, "finish_reason": "length"}
    if error is not None:
        out["error"] = error
    return out


def rec(kind: str, key: str, rep: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    return {"id": f"{key}.{kind}", "kind": kind, "key": key, "meta": meta, "endpoint": "/v1/chat/completions",
            "body": {"max_tokens": 16}, "reply": rep}


def pairs(*timings: tuple[dict[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, (first, repeat) in enumerate(timings):
        out += [rec("cache_first", f"c{i}", first), rec("cache_repeat", f"c{i}", repeat)]
    return out


def echo(key: str, orig: str, sent: str, got: str) -> list[dict[str, Any]]:
    return [rec("echo_orig", key, reply(text=orig), nonce=orig),
            rec("echo_perturbed", key, reply(text=got), nonce=sent, orig=orig)]


ECHO_OK = echo("e0", "K7mQ2xPz", "K7mQ2xRz", "K7mQ2xRz")
# the limitation of a run without control pairs (recorded before 8 Dec 2026, or built by hand here)
NO_CONTROLS = ("no control pairs (a gate run recorded before 8 Dec 2026, or planned without them): the repeats were "
               "judged against 1 + threshold raised by the A/A floor of first-seen prompts and the largest slow-down")


def controls(*timings: tuple[dict[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Control pairs: two first-seen requests sent back to back, ``(a, b)`` replies."""
    out = []
    for i, (a, b) in enumerate(timings):
        out += [rec("cache_control_a", f"k{i}", a), rec("cache_control_b", f"k{i}", b)]
    return out


# --- helpers of probe_records ---------------------------------------------------------------------------------------

def test_decode_tok_s_uses_usage_then_streamed_then_chunks():
    assert pr.decode_tok_s(reply()) == pytest.approx(10.0)  # 15 tokens / 1.5 s
    assert pr.decode_tok_s({"n_streamed": 11, "ttft_ms": 0.0, "e2el_ms": 500.0}) == pytest.approx(20.0)
    assert pr.decode_tok_s({"chunks": 5, "ttft_ms": 0.0, "e2el_ms": 2000.0}) == pytest.approx(2.0)
    assert pr.decode_tok_s(reply(n=1)) is None  # one token: no decode interval
    assert pr.decode_tok_s(reply(ttft_ms=50.0, e2el_ms=50.0)) is None
    assert pr.decode_tok_s(reply(e2el_ms=None)) is None


def test_all_at_once_needs_two_tokens_in_one_instant():
    assert pr.all_at_once(reply(ttft_ms=20.0, e2el_ms=20.0))
    assert not pr.all_at_once(reply(ttft_ms=20.0, e2el_ms=20.0, n=1))
    assert not pr.all_at_once(reply())


def test_fail_note_tallies_statuses_and_quotes_the_first_error():
    failed = pr.failed([rec("cache_first", "a", reply(status=400, error="bad field")),
                        rec("cache_first", "b", reply(status=400, error="bad field")),
                        rec("cache_repeat", "c", None), rec("cache_repeat", "d", reply())])
    assert [f["key"] for f in failed] == ["a", "b", "c"]
    assert failed[2] == {"id": "c.cache_repeat", "kind": "cache_repeat", "key": "c", "status": None,
                         "error": "not sent"}
    assert pr.fail_note(failed) == "3 probe(s) failed (HTTP 400 ×2, no response ×1; first error: bad field)"
    long = pr.failed([rec("count", "x", reply(status=500, error="e" * 1000))])
    assert len(long[0]["error"]) == pr.ERROR_CAP


def test_typical_speedup_needs_the_median_and_two_thirds_of_pairs():
    assert typical_speedup([1.0, 1.5, 1.5], 0.10)  # median 1.5; 2/3 beyond 1.1
    assert not typical_speedup([1.0, 1.0, 1.5, 1.5, 1.5], 0.10)  # median 1.5 but 3/5 < 2/3
    assert not typical_speedup([1.0, 1.05, 3.0], 0.10)  # one lucky pair; median 1.05
    assert not typical_speedup([None, None], 0.10)
    assert typical_speedup([1.2, None, 1.3], 0.10)  # unmeasured pairs are left out


# --- verdicts -------------------------------------------------------------------------------------------------------

def test_pass_when_repeats_are_no_faster():
    # TTFT speedups 100/100 = 1.0, 100/105 = 0.952, 110/100 = 1.1 -> median 1.0; decode 10/10 = 1.0 each.
    recs = pairs((reply(), reply()), (reply(), reply(ttft_ms=105.0, e2el_ms=1605.0)),
                 (reply(ttft_ms=110.0, e2el_ms=1610.0), reply())) + ECHO_OK
    g = gate_caching(recs)
    assert g.verdict == "PASS"
    assert g.metrics["ttft_speedup_median"] == pytest.approx(1.0)
    assert g.metrics["decode_speedup_median"] == pytest.approx(1.0)
    assert g.metrics["pairs"] == 3 and g.metrics["perturbed_pairs"] == 1 and g.metrics["cause"] is None
    assert "TTFT 1.00× (limit 1.10×), decode 1.00× (limit 1.10×)" in g.reason
    assert g.metrics["decode_aa_floor"] == pytest.approx(1.0) and g.metrics["decode_limit"] == pytest.approx(1.1)
    assert "0/1 perturbed prompts answered from a cache" in g.reason
    assert len(g.details) == 3 and list(g.limitations) == [NO_CONTROLS]


def test_fail_output_cache_when_repeats_decode_faster():
    # first 10 tok/s; repeat 15 tokens in 0.3 s = 50 tok/s -> decode speedup 5.0; TTFT unchanged
    fast = reply(e2el_ms=400.0)
    g = gate_caching(pairs(*[(reply(), fast)] * 6) + ECHO_OK)
    assert g.verdict == "FAIL"
    assert g.metrics["cause"] == "output_cache" and g.metrics["causes"] == ["output_cache"]
    assert g.metrics["decode_speedup_p"] == 0.0  # six identical speedups: no spread, nothing noise could explain
    assert g.metrics["decode_speedup_median"] == pytest.approx(5.0)
    assert "decode 5.00× faster" in g.reason and "output caching" in g.reason
    assert "prefix" not in g.reason


def test_repeats_inside_the_first_seen_spread_are_noise_not_an_output_cache():
    # A busy host: first-seen prompts decode at 10, 12.5 and 13.6 tok/s (E2EL 1600, 1300, 1200: A/A floor 1.36×);
    # each repeat decodes 1.2-1.3× faster than its own first. Beyond 1.10×, inside the floor: not evidence.
    firsts = [reply(), reply(e2el_ms=1300.0), reply(e2el_ms=1200.0)] * 2
    repeats = [reply(e2el_ms=1350.0), reply(e2el_ms=1100.0), reply(e2el_ms=1000.0)] * 2  # 12, 15, 15 tok/s
    g = gate_caching(pairs(*zip(firsts, repeats)) + ECHO_OK)
    assert g.verdict == "PASS", g.reason
    assert g.metrics["decode_aa_floor"] == pytest.approx(15 / 1.1 / 10)
    assert g.metrics["decode_limit"] == pytest.approx(15 / 1.1 / 10)
    assert g.metrics["decode_speedup_median"] == pytest.approx(1.2)
    assert "raised to the A/A floor 1.36× of first-seen prompts" in g.reason
    # the same spread with repeats 5× faster than their first: far past the floor, an output cache
    g = gate_caching(pairs(*zip(firsts, [reply(e2el_ms=400.0), reply(e2el_ms=340.0), reply(e2el_ms=310.0)] * 2)))
    assert g.verdict == "FAIL" and g.metrics["cause"] == "output_cache"
    assert "(limit 1.36×)" in g.reason


def test_fail_output_cache_when_a_repeat_arrives_all_at_once():
    instant = reply(ttft_ms=20.0, e2el_ms=20.0)  # 16 tokens in one event: nothing decoded
    g = gate_caching(pairs(*[(reply(), instant)] * 6))
    assert g.verdict == "FAIL" and g.metrics["cause"] == "output_cache"
    assert g.metrics["decode_speedup_median"] == ALL_AT_ONCE_SPEEDUP
    assert g.metrics["ttft_speedup_median"] == pytest.approx(5.0)  # 100 / 20
    assert "one instant" in g.reason and "5.00× faster" in g.reason and "output caching" in g.reason
    assert g.details[0]["repeat_all_at_once"] is True


def test_fail_prefix_cache_when_only_ttft_is_faster():
    # repeat TTFT 20 (5x faster), decode 15 tokens in 1.5 s = 10 tok/s as the first
    warm = reply(ttft_ms=20.0, e2el_ms=1520.0)
    g = gate_caching(pairs(*[(reply(), warm), (reply(), warm), (reply(), reply(ttft_ms=25.0, e2el_ms=1525.0))] * 2)
                     + ECHO_OK)
    assert g.verdict == "FAIL"
    assert g.metrics["cause"] == "prefix_cache"
    assert g.metrics["ttft_speedup_median"] == pytest.approx(5.0)
    assert g.metrics["decode_speedup_median"] == pytest.approx(1.0)
    assert "prefix" in g.reason and "disable" in g.reason and "cache_prompt: false" in g.reason
    assert "cache_salt" in g.reason and "unique prompts" in g.reason and "inflated" in g.reason
    assert "output cach" not in g.reason


def test_fail_semantic_cache_when_the_changed_prompt_gets_the_old_string():
    recs = pairs((reply(), reply())) + echo("e0", "K7mQ2xPz", "K7mQ2xRz", "Here: K7mQ2xPz")
    g = gate_caching(recs)
    assert g.verdict == "FAIL"
    assert g.metrics["cause"] == "semantic_cache" and g.metrics["perturbed_cache_hits"] == 1
    assert "1 prompt(s) changed in one character got the previous prompt's string back" in g.reason
    assert g.details[0]["sent"] == "K7mQ2xRz" and g.details[0]["orig"] == "K7mQ2xPz"


def test_unproven_when_a_caching_probe_failed():
    recs = pairs((reply(), reply()), (reply(), reply(status=500, error="boom"))) + ECHO_OK
    g = gate_caching(recs)
    assert g.verdict == "UNPROVEN"
    assert g.reason.startswith("1 caching probe(s) failed (HTTP 500 ×1; first error: boom)")
    assert g.metrics["failed_probes"] == 1 and g.metrics["pairs"] == 1
    assert {"kind": "cache_repeat", "key": "c1", "status": 500} == {k: g.details[0][k] for k in ("kind", "key",
                                                                                                "status")}


def test_unproven_when_a_probe_was_never_sent():
    g = gate_caching(pairs((reply(), reply())) + [rec("echo_orig", "e0", None, nonce="x")])
    assert g.verdict == "UNPROVEN" and "no response ×1" in g.reason and "not sent" in g.reason


def test_unproven_when_repeat_timing_cannot_be_measured():
    one_token = reply(n=1)  # no decode rate
    g = gate_caching(pairs((one_token, one_token)) + ECHO_OK)
    assert g.verdict == "UNPROVEN"
    assert g.metrics["decode_speedup_median"] is None and g.metrics["ttft_speedup_median"] == pytest.approx(1.0)
    assert "timing could not be measured" in g.reason
    assert any("timing is incomplete" in x for x in g.limitations)


def test_unproven_when_nothing_can_be_judged():
    g = gate_caching(echo("e0", "K7mQ2xPz", "K7mQ2xRz", "Sorry, I cannot help with that."))
    assert g.verdict == "UNPROVEN"
    assert g.metrics["perturbed_inconclusive"] == 1 and g.metrics["perturbed_pairs"] == 0
    assert "no first/repeat pair" in g.reason
    assert any("inconclusive" in x for x in g.limitations)


def test_not_run_without_caching_probes():
    g = gate_caching([rec("count", "n0", reply())])
    assert g.verdict == "NOT RUN" and g.reason == "no caching probe was sent"


def test_threshold_moves_the_limit():
    # TTFT speedup 100/80 = 1.25 on every pair: beyond 1.10, within 1.30
    warm = reply(ttft_ms=80.0, e2el_ms=1580.0)
    recs = pairs(*[(reply(), warm)] * 6) + ECHO_OK
    assert gate_caching(recs).verdict == "FAIL"
    g = gate_caching(recs, threshold=0.30)
    assert g.verdict == "PASS" and "TTFT 1.25×" in g.reason and "(limit 1.30×)" in g.reason


def test_ttft_speedups_inside_the_noise_a_slower_repeat_shows_are_not_a_prefix_cache():
    # recorded on CI (honest llama-server, cache_prompt false, busy host): TTFT first/repeat 361.6/300.1,
    # 958.3/681.3, 236.5/211.9, 551.5/703.0 -> 1.21, 1.41, 1.12, 0.78×; a repeat 1.28× slower means noise that large
    rows = [(361.6, 300.1), (958.3, 681.3), (236.5, 211.9), (551.5, 703.0)]
    recs = pairs(*[(reply(ttft_ms=a, e2el_ms=a + 1500), reply(ttft_ms=b, e2el_ms=b + 1500)) for a, b in rows]) + ECHO_OK
    g = gate_caching(recs)
    assert g.verdict == "PASS", g.reason
    assert g.metrics["ttft_noise_floor"] == pytest.approx(703.0 / 551.5)
    assert "raised to the 1.27× a repeat came back slower" in g.reason
    # vLLM's prefix cache as recorded here (speedups 2.49, 1.78, 0.79, 3.25, 1.83, 1.91): still far past that noise
    vllm = [(794.0, 318.8), (453.1, 254.1), (227.5, 287.6), (512.2, 157.4), (413.2, 226.4), (360.8, 188.6)]
    g = gate_caching(pairs(*[(reply(ttft_ms=a, e2el_ms=a + 1500), reply(ttft_ms=b, e2el_ms=b + 1500))
                             for a, b in vllm]) + ECHO_OK)
    assert g.verdict == "FAIL" and g.metrics["cause"] == "prefix_cache"


def test_a_limit_raised_by_the_runs_own_noise_is_a_stated_fallback_that_strict_sees():
    # before 18's audit the raised limits were said in the reason only, so --strict let such a PASS stand
    from inferencekit.gates.result import strict_gate

    firsts = [reply(), reply(e2el_ms=1300.0), reply(e2el_ms=1200.0)]
    repeats = [reply(e2el_ms=1350.0), reply(e2el_ms=1100.0), reply(e2el_ms=1000.0)]
    g = gate_caching(pairs(*zip(firsts, repeats)) + ECHO_OK)
    assert g.verdict == "PASS" and len(g.fallbacks) == 1 and g.fallbacks[0] in g.limitations
    keys = [p["key"] for p in g.details]
    assert f"(requests: {keys[2]}.cache_first 13.6 tok/s, {keys[0]}.cache_first 10.0 tok/s)" in g.fallbacks[0]
    assert g.fallbacks[0].startswith("the decode limit was raised from 1.10× to the A/A floor 1.36×")
    assert strict_gate(g).verdict == "UNPROVEN"
    # the TTFT limit raised by a slower repeat is one too
    rows = [(361.6, 300.1), (958.3, 681.3), (236.5, 211.9), (551.5, 703.0)]
    t = gate_caching(pairs(*[(reply(ttft_ms=a, e2el_ms=a + 1500), reply(ttft_ms=b, e2el_ms=b + 1500))
                             for a, b in rows]) + ECHO_OK)
    assert any(x.startswith("the TTFT limit was raised from 1.10× to 1.27×") for x in t.fallbacks)
    # a run whose noise stays inside the threshold uses no fallback
    same = gate_caching(pairs((reply(), reply()), (reply(), reply()), (reply(), reply())) + ECHO_OK)
    assert same.verdict == "PASS" and same.fallbacks == ()


# --- the per-request cache bypass -----------------------------------------------------------------------------------

def bypassed(records: list[dict[str, Any]], fields: dict[str, Any] | None = None, fresh: bool = False
             ) -> list[dict[str, Any]]:
    """The records with the bypass fields in their bodies (``fresh``: a new cache_salt per request, as vLLM's)."""
    out = []
    for i, r in enumerate(records):
        extra = {"cache_salt": f"salt{i}"} if fresh else dict(fields or {"cache_prompt": False})
        out.append({**r, "body": {**r["body"], **extra}})
    return out


def test_sent_bypass_reads_the_fields_from_the_timing_bodies():
    recs = pairs((reply(), reply()), (reply(), reply()))
    assert sent_bypass(bypassed(recs), ["cache_prompt"]) == (["cache_prompt"], False)
    assert sent_bypass(bypassed(recs, fresh=True), ["cache_salt"]) == (["cache_salt"], True)
    assert sent_bypass(recs, ["cache_prompt"]) == ([], False)  # planned, not carried
    assert sent_bypass(bypassed(recs), None) == ([], False)
    one_missing = bypassed(recs)
    one_missing[0] = recs[0]
    assert sent_bypass(one_missing, ["cache_prompt"]) == ([], False)  # every timing body must carry it


def test_a_ttft_speedup_through_the_bypass_fails_as_a_cache_that_ignores_it():
    # TTFT 100 -> 40 ms (2.5x), decode unchanged: a prefix cache served the repeats although each said cache_prompt
    # false, so the message is about the ignored bypass, not about switching the cache off
    recs = bypassed(pairs(*[(reply(), reply(ttft_ms=40.0, e2el_ms=1540.0))] * 6)) + ECHO_OK
    g = gate_caching(recs, bypass=["cache_prompt"])
    assert g.verdict == "FAIL" and g.metrics["cause"] == "prefix_cache"
    assert g.metrics["ttft_speedup_median"] == pytest.approx(2.5) and g.metrics["cache_bypass"] == ["cache_prompt"]
    assert "ignores the bypass" in g.reason and "cache_prompt" in g.reason
    assert "--no-enable-prefix-caching" not in g.reason
    # the same timings without a bypass sent: the seed's message, how to switch the prefix cache off
    g = gate_caching(pairs(*[(reply(), reply(ttft_ms=40.0, e2el_ms=1540.0))] * 3) + ECHO_OK)
    assert g.verdict == "FAIL" and "--no-enable-prefix-caching" in g.reason and g.metrics["cache_bypass"] == []


def test_a_pass_names_the_bypass_and_a_fresh_salt_is_a_limitation():
    recs = pairs((reply(), reply()), (reply(), reply()), (reply(), reply()))
    g = gate_caching(bypassed(recs) + ECHO_OK, bypass=["cache_prompt"])
    assert g.verdict == "PASS" and "per-request cache bypass cache_prompt" in g.reason
    assert list(g.limitations) == [NO_CONTROLS] and g.metrics["bypass_varies"] is False
    g = gate_caching(bypassed(recs, fresh=True) + ECHO_OK, bypass=["cache_salt"])
    assert g.verdict == "PASS" and g.metrics["bypass_varies"] is True
    assert any("fresh cache_salt" in x and "not tested" in x for x in g.limitations)
    g = gate_caching(recs + ECHO_OK, bypass=["cache_prompt"])  # planned but not carried: said, not hidden
    assert g.verdict == "PASS" and "bypass" not in g.reason
    assert any("did not all carry it" in x for x in g.limitations)


# --- sequential verdicts (issue 24): the rules, the stop and what a PASS bounds ------------------------------------

def test_the_timing_rule_stops_after_two_clean_pairs_and_leaves_a_fail_to_the_cap():
    from inferencekit.gates.judges.caching import sequential_states

    clean = pairs((reply(), reply()), (reply(), reply(ttft_ms=104.0, e2el_ms=1604.0)))
    st = sequential_states(clean, 0.10, cache_cap=6, echo_cap=4)
    assert (st["timing"].decision, st["timing"].hits, st["timing"].n) == ("PASS", 0, 2)
    assert st["echo"].decision is None and st["echo"].n == 0
    cached = pairs(*[(reply(), reply(e2el_ms=400.0))] * 6)  # decode 5× faster each: hits
    assert sequential_states(cached[:4], 0.10, 6, 4)["timing"].decision is None  # 2 hits: not yet
    three = sequential_states(cached[:6], 0.10, 6, 4)["timing"]  # past Wald's FAIL boundary, yet no early FAIL
    assert (three.decision, three.hits, three.n) == (None, 3, 3) and "only at the cap" in three.why
    assert sequential_states(cached, 0.10, 6, 4)["timing"].decision == "cap"  # the fixed rule decides at 6
    # the echo rule: one old string back decides; two judged clean echoes pass
    hit = echo("e1", "K7mQ2xPz", "K7mQ2xRz", "K7mQ2xPz")
    assert sequential_states(hit, 0.10, 6, 4)["echo"].decision == "FAIL"
    two = ECHO_OK + echo("e2", "Ab3dEf9h", "Ab3dEf9i", "Ab3dEf9i")
    assert sequential_states(two, 0.10, 6, 4)["echo"].decision == "PASS"


def test_a_sequential_pass_bounds_the_rates_with_the_confidence_sequence_and_says_where_it_stopped():
    from inferencekit.gates.inputs import ProbeRun
    from inferencekit.gates.judges.caching import judge_probes
    from inferencekit.sequential import cs_upper_bound

    recs = pairs((reply(), reply()), (reply(), reply())) + ECHO_OK + echo("e2", "Ab3dEf9h", "Ab3dEf9i", "Ab3dEf9i")
    seq = {"stopped": {"timing": {"decision": "PASS"}, "echo": {"decision": "PASS"}}, "caps": {"timing": 6, "echo": 4}}
    g = judge_probes(ProbeRun({"settings": {"threshold": 0.1}, "sequential": {"caching": seq}}, recs))
    assert g.verdict == "PASS" and g.metrics["sequential"] == seq
    assert g.reason.endswith("; sequential stop: 2 timing pairs of at most 6 (PASS boundary of the sequential rule), "
                             "2 judged echo pairs of at most 4 (PASS boundary of the sequential rule)")
    assert f"share of cached repeats ≤ {cs_upper_bound(0, 2):.0%} (95% confidence sequence" in g.rules_out
    fixed = judge_probes(ProbeRun({"settings": {"threshold": 0.1}}, recs))
    assert fixed.verdict == "PASS" and "Wilson" in fixed.rules_out and "sequential" not in fixed.reason


def test_the_collector_skips_a_decided_familys_unsent_pairs_and_completes_open_ones():
    from inferencekit.gates.probes.plan import ProbeSettings
    from inferencekit.gates.run import CachingStop, GateRunSettings

    stop = CachingStop(GateRunSettings(gates=["caching"], probes=ProbeSettings(cache_prompts=6, echo_pairs=4,
                                                                                cache_controls=False)))
    sent = []
    # the staggered chain (before control pairs) f0 f1 t0 f2 t1 f3 t2 f4 t3 f5 t4 t5, every repeat as fast as its first
    chain = ["c0.f", "c1.f", "c0.t", "c2.f", "c1.t", "c3.f", "c2.t", "c4.f", "c3.t", "c5.f", "c4.t", "c5.t"]
    for item in chain:
        key, which = item.split(".")
        kind = "cache_first" if which == "f" else "cache_repeat"
        probe = rec(kind, key, None)
        if stop.skip(probe):
            continue
        sent.append(item)
        stop.on_done({**probe, "reply": reply()})
    # decided after c1's pair (2 clean pairs); c2 was already open, so its repeat still goes; nothing after
    assert sent == ["c0.f", "c1.f", "c0.t", "c2.f", "c1.t", "c2.t"]
    out = stop.record()["caching"]
    assert out["stopped"]["timing"]["decision"] == "PASS" and out["skipped_requests"] == {"timing": 6, "echo": 0}
    assert out["rules"]["timing"]["p0"] == pytest.approx(1 / 3) and out["rules"]["timing"]["cap"] == 6
    assert out["final"]["timing"]["trials"] == 3


# Recorded probe replies (tests/fixtures/caching/): the timing pairs of the embedded engine (llama-cpp-python,
# SmolLM2-135M Q4_1) on this 2-core host; each reply file's parsed `logprobs` list dropped (its raw events keep them).
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "caching"


def recorded(name: str) -> list[dict[str, Any]]:
    with gzip.open(FIXTURES / name, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def replay_chain(records: list[dict[str, Any]], cap: int) -> tuple[list[str], Any]:
    """Feed the recorded pairs to the live stop in the order the plan sends them (``stagger``)."""
    from inferencekit.gates.probes.plan import ProbeSettings
    from inferencekit.gates.probes.text import stagger
    from inferencekit.gates.run import CachingStop, GateRunSettings

    by_id = {r["id"]: r for r in records}
    firsts = [f"c{i}.cache_first" for i in range(cap)]
    repeats = [f"c{i}.cache_repeat" for i in range(cap)]
    stop = CachingStop(GateRunSettings(gates=["caching"], probes=ProbeSettings(cache_prompts=cap, echo_pairs=4,
                                                                                cache_controls=False)))
    sent = []
    for pid in stagger(firsts, repeats):
        probe = by_id[pid]
        if stop.skip({k: v for k, v in probe.items() if k != "reply"}):
            continue
        sent.append(pid)
        stop.on_done(probe)
    return sent, stop


def test_an_honest_engine_speeding_up_over_the_first_pairs_is_not_failed_early():
    # make test, 7 Dec 2026: the first three repeats reached the first token 1.13, 1.22 and 1.19x faster
    # (Wald's FAIL boundary after three hits); the rule used to stop there and the gate FAILed on 4 pairs
    recs = recorded("embedded-ci-20261207.jsonl.gz")
    speedups = [round(p.ttft_speedup or 0, 2) for p in timing_pairs(recs)]
    assert speedups == [1.13, 1.22, 1.19, 0.95]
    assert fast_pairs(timing_pairs(recs)[:3], 0.10) == [True] * 3  # 3 hits: Λ = 2.98 ≥ 2.944
    sent, stop = replay_chain(recs, cap=4)  # the recording holds 4 of the 6 pairs: the cap is where it ends
    assert len(sent) == 8 and stop.stopped == {}  # no early stop: the fixed rule judges all 4
    assert stop.record()["caching"]["final"]["timing"]["decision"] == "cap"


def test_the_recorded_fixed_run_with_a_drift_passes_at_the_cap_with_its_limit_raised():
    recs = recorded("embedded-quick-fixed-20261206.jsonl.gz")
    sent, stop = replay_chain(recs, cap=6)
    assert len(sent) == 12  # four hits first, so nothing stopped before the fifth pair opened the last one
    # the fifth pair's 0.77x repeat raised the TTFT limit to 1.30x, so only one earlier pair stays a hit: PASS
    assert (stop.stopped["timing"]["decision"], stop.stopped["timing"]["hits"],
            stop.stopped["timing"]["trials"]) == ("PASS", 1, 5)
    assert fast_pairs(timing_pairs(recs)[:4], 0.10) == [True] * 4  # an early FAIL would have come at the third
    g = gate_caching(recs)  # no echo pairs recorded: judged on timing alone
    assert g.verdict == "PASS" and g.metrics["pairs"] == 6
    assert g.metrics["ttft_limit"] == pytest.approx(1 / 0.77, abs=0.01)  # raised by the 0.77x repeat
    assert any("TTFT limit was raised" in f for f in g.fallbacks)


def test_a_typical_speedup_that_is_not_significant_is_unproven_never_pass():
    # TTFT speedups 1.3, 1.2, 2.0: median 1.3 and all past 1.10 (the typical rule says cache), but their logs against
    # log 1.1 (0.167, 0.087, 0.598: mean 0.284, sd 0.275) give t = 1.79 on 2 df: p = 0.108, not significant
    firsts = [reply(ttft_ms=t, e2el_ms=t + 1500) for t in (130.0, 120.0, 200.0)]
    g = gate_caching(pairs(*[(f, reply()) for f in firsts]) + ECHO_OK)
    assert g.verdict == "UNPROVEN" and g.metrics["ttft_speedup_p"] == pytest.approx(0.108, abs=0.002)
    assert "p = 0.108 ≥ 0.05" in g.reason and "--cache-prompts" in g.reason
    # the make-test recording (4 pairs, 1.13 1.22 1.19 0.95x): UNPROVEN, not the FAIL it got
    g = gate_caching(recorded("embedded-ci-20261207.jsonl.gz"))
    assert g.verdict == "UNPROVEN" and g.metrics["ttft_speedup_p"] > 0.05
    # one pair alone cannot be tested: said so
    g = gate_caching(pairs((firsts[0], reply())) + ECHO_OK)
    assert g.verdict == "UNPROVEN" and "needs at least 2 pairs" in g.reason


def test_speedup_p_value_by_hand():
    from inferencekit.gates.judges.caching import speedup_p_value

    # vLLM's prefix cache as recorded (2.49, 1.78, 0.79, 3.25, 1.83, 1.91): log speedups against log 1.1 have mean
    # 0.519 and sd 0.476, t = 2.67 on 5 df, p = 0.022
    assert speedup_p_value([2.49, 1.78, 0.79, 3.25, 1.83, 1.91], 0.10) == pytest.approx(0.022, abs=0.001)
    assert speedup_p_value([1.5, None], 0.10) is None  # one measured pair: no spread to judge it by
    assert speedup_p_value([1.5, 1.5], 0.10) == 0.0 and speedup_p_value([0.9, 0.9], 0.10) == 1.0


# --- control pairs (issue 42, item 5): repeats judged against first-seen prompts sent the same way -----------------

def test_a_host_that_speeds_up_second_requests_speeds_controls_alike_and_passes():
    # every second request of a back-to-back pair reaches its first token 1.3x sooner (100 -> 77 ms) and decodes
    # alike: repeats and controls show the same 1.3x, which the A/A rule alone would have called a prefix cache
    second = [reply(ttft_ms=t, e2el_ms=t + 1500) for t in (77.0, 76.0, 78.0, 77.0)]
    recs = pairs(*[(reply(), s) for s in second]) + controls(*[(reply(), s) for s in reversed(second)]) + ECHO_OK
    g = gate_caching(recs)
    assert g.verdict == "PASS", g.reason
    assert g.metrics["timing_design"] == "control pairs" and g.metrics["control_pairs"] == 4
    assert g.metrics["ttft_control_median"] == pytest.approx(100 / 77, abs=0.01)
    assert g.metrics["ttft_limit"] == pytest.approx(1.1 * 100 / 77, abs=0.01)
    assert "sent the same way (4 control pairs)" in g.reason and "control pairs 1.30×" in g.reason
    # the raised limit lets a smaller cache pass: said as a fallback
    assert any("TTFT limit was raised from 1.10× to 1.43×" in f for f in g.fallbacks)
    assert NO_CONTROLS not in g.limitations and len(g.details) == 8
    # the same repeats without the controls: the old rule calls them a cache (typical and significant)
    assert gate_caching(pairs(*[(reply(), s) for s in second]) + ECHO_OK).verdict == "FAIL"


def test_an_output_cache_and_a_prefix_cache_fail_against_the_controls():
    plain = controls(*[(reply(), reply(ttft_ms=t, e2el_ms=t + 1500)) for t in (95.0, 104.0, 99.0, 101.0)])
    instant = pairs(*[(reply(), reply(ttft_ms=2.0, e2el_ms=2.0))] * 4)  # every repeat streamed in one instant
    g = gate_caching(instant + plain + ECHO_OK)
    assert g.verdict == "FAIL" and g.metrics["cause"] == "output_cache" and g.metrics["decode_speedup_p"] < 1e-6
    assert g.metrics["fail_kind"] == "statistical"
    assert g.metrics["null_tests"][1]["rule"] == "caching: repeats decode faster than control pairs (one-sided " \
                                                "Welch t-test)"
    # a prefix cache: repeats reach the first token 2x-2.5x sooner, decode alike
    prefix = pairs(*[(reply(), reply(ttft_ms=t, e2el_ms=t + 1500)) for t in (50.0, 40.0, 45.0, 48.0)])
    g = gate_caching(prefix + plain + ECHO_OK, bypass=["cache_prompt"])
    assert g.verdict == "FAIL" and g.metrics["cause"] == "prefix_cache", g.reason
    assert g.metrics["ttft_speedup_p"] < 0.001


def test_fewer_than_two_answered_control_pairs_fall_back_to_the_a_a_floor_and_say_so():
    recs = pairs((reply(), reply()), (reply(), reply())) + controls((reply(), reply())) + ECHO_OK
    g = gate_caching(recs)
    assert g.verdict == "PASS" and g.metrics["timing_design"] == "A/A floor" and g.metrics["control_pairs"] == 1
    assert any(x.startswith("1 control pair(s) answered, fewer than 2") for x in g.limitations)


def test_control_p_value_is_welchs_t_test_by_hand():
    import math

    from scipy import stats

    from inferencekit.gates.judges.caching import control_p_value

    reps, ctls = [1.5, 1.8, 1.6], [1.0, 1.1, 0.9, 1.05]
    x = [math.log(v) - math.log(1.1) for v in reps]
    y = [math.log(v) for v in ctls]
    mx, my = sum(x) / 3, sum(y) / 4
    vx = sum((v - mx) ** 2 for v in x) / 2
    vy = sum((v - my) ** 2 for v in y) / 3
    se2 = vx / 3 + vy / 4
    t = (mx - my) / math.sqrt(se2)
    df = se2 ** 2 / ((vx / 3) ** 2 / 2 + (vy / 4) ** 2 / 3)  # Welch-Satterthwaite
    assert control_p_value(reps, ctls, 0.10) == pytest.approx(float(stats.t.sf(t, df)), rel=1e-9)
    assert control_p_value([1.2, 1.2], [1.0, 1.0], 0.10) == 0.0  # both constant, repeats above: no spread to scale
    assert control_p_value([1.0, 1.0], [1.0, 1.0], 0.10) == 1.0
    assert control_p_value([1.5], ctls, 0.10) is None and control_p_value(reps, [None, 1.0], 0.10) is None


def test_with_controls_planned_the_timing_rule_waits_for_two_controls():
    from inferencekit.gates.judges.caching import sequential_states

    clean = pairs((reply(), reply()), (reply(), reply()), (reply(), reply()))
    st = sequential_states(clean, 0.10, cache_cap=6, echo_cap=4, controls_planned=True)
    assert st["timing"].decision is None and st["timing"].n == 0  # three clean pairs, no control yet: go on
    st = sequential_states(clean + controls((reply(), reply()), (reply(), reply())), 0.10, 6, 4, controls_planned=True)
    assert (st["timing"].decision, st["timing"].n) == ("PASS", 3)
    # the live stop skips the unsent pairs and controls alike once decided, and completes the open ones
    from inferencekit.gates.probes.plan import ProbeSettings
    from inferencekit.gates.run import CachingStop, GateRunSettings

    stop = CachingStop(GateRunSettings(gates=["caching"], probes=ProbeSettings(cache_prompts=4, echo_pairs=4)))
    order = [("cache_first", "c0"), ("cache_repeat", "c0"), ("cache_control_a", "k0"), ("cache_control_b", "k0"),
             ("cache_first", "c1"), ("cache_repeat", "c1"), ("cache_control_a", "k1"), ("cache_control_b", "k1"),
             ("cache_first", "c2"), ("cache_repeat", "c2"), ("cache_control_a", "k2"), ("cache_control_b", "k2")]
    sent = []
    for kind, key in order:
        probe = rec(kind, key, None)
        if stop.skip(probe):
            continue
        sent.append(f"{key}.{kind}")
        stop.on_done({**probe, "reply": reply()})
    assert len(sent) == 8 and stop.stopped["timing"]["decision"] == "PASS"
    assert stop.record()["caching"]["skipped_requests"]["timing"] == 4
