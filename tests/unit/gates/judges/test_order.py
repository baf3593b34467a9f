"""The order gate's comparison and verdict on recorded replies (tests/fixtures/replies/, tests/capture_replies.py).

Variants are made from recorded replies by editing one raw SSE event, so each test shows which field the
comparison reads: the derived fields are re-derived from the events (``fingerprint``), never trusted.
"""

import copy
import json

import orjson
import pytest

from inferencekit.api.reply import derive
from inferencekit.bench.plan import LevelSpec, heaviest_level
from inferencekit.gates.check import judge_probe_log, read_kat
from inferencekit.gates.judges.order import (
    OrderSettings,
    compare_sample,
    fingerprint,
    first_difference,
    judge_kat,
    judge_order,
    order_label,
    order_permutation,
)
from inferencekit.rundir import KAT_ALONE, KAT_LOAD, RunDir, write_json
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"


def load(engine: str, name: str) -> dict:
    return json.loads((FIX / engine / f"{name}.json").read_text())


def edit_events(reply: dict, fn) -> dict:
    """A copy of ``reply`` whose events went through ``fn(parsed payload) -> payload`` (stale derived fields kept on
    purpose: the comparison must re-derive them)."""
    out = copy.deepcopy(reply)
    for ev in out["events"]:
        if ev[1] != "[DONE]":
            ev[1] = orjson.dumps(fn(orjson.loads(ev[1]))).decode()
    return out


TEXT = load("llama-server", "chat_stream")  # "1. Red: This is the most obvious colour, …", finish length, usage 16
TOOL = load("llama-cpp-python", "chat_stream_tool_call")  # a forced call: calculate_triangle_area({ "base": 10, …})
BAD = load("llama-server", "chat_bad_request")  # HTTP 400


def test_tool_call_fixture_derives_one_call_with_the_name_once():
    d = derive(TOOL["events"])
    assert [(c["name"], c["arguments"]) for c in d["tool_calls"]] == [
        ("calculate_triangle_area", '{ "base": 10, "height": 5 }')]
    assert d["finish_reason"] == "tool_calls" and d["text"] == ""


def test_equal_replies_agree():
    row = compare_sample("s1", [("canonical", TEXT), ("reversed", copy.deepcopy(TEXT))])
    assert row["status"] == "AGREE" and row["difference"] is None and row["failed"] == []
    gate = judge_order([row], what="1 sample")
    assert gate.verdict == "PASS" and gate.metrics["agree"] == 1 and list(gate.limitations) == []


def test_differing_tool_arguments_fail_with_field_and_position():
    def bump(p):  # the argument streams in pieces: "1", "0", …, "5"; the height becomes 6
        for c in (p["choices"][0]["delta"].get("tool_calls") or []):
            c["function"]["arguments"] = c["function"]["arguments"].replace("5", "6")
        return p

    other = edit_events(TOOL, bump)
    row = compare_sample("simple_python_0", [("canonical", TOOL), ("reversed", other)])
    assert row["status"] == "DIFFER"
    d = row["difference"]
    assert d["field"] == "tool_calls[0].arguments" and d["position"] == '{ "base": 10, "height": 5'.index("5")
    assert (d["a_run"], d["b_run"]) == ("canonical", "reversed") and '"height": 5' in d["a"] and '"height": 6' in d["b"]
    gate = judge_order([row, compare_sample("s2", [("canonical", TEXT), ("reversed", TEXT)])], what="2 samples")
    assert gate.verdict == "FAIL" and gate.metrics["differ"] == 1 and gate.metrics["agree"] == 1
    assert "simple_python_0: tool_calls[0].arguments at 24" in gate.reason
    assert gate.details[0]["sample_id"] == "simple_python_0"  # the deciding rows come first


def test_tool_call_ids_are_not_compared():
    def rename(p):
        for c in (p["choices"][0]["delta"].get("tool_calls") or []):
            c["id"] = "call_other"
        return p

    assert compare_sample("s", [("a", TOOL), ("b", edit_events(TOOL, rename))])["status"] == "AGREE"


def test_differing_finish_reason_fails():
    def stop(p):
        if p.get("choices") and p["choices"][0].get("finish_reason") == "length":
            p["choices"][0]["finish_reason"] = "stop"
        return p

    row = compare_sample("s", [("canonical", TEXT), ("reversed", edit_events(TEXT, stop))])
    assert row["difference"] == {"a_run": "canonical", "b_run": "reversed", "field": "finish_reason",
                                 "position": None, "a": "length", "b": "stop"}


def test_differing_completion_tokens_fail_when_text_is_equal():
    def more(p):
        if p.get("usage"):
            p["usage"]["completion_tokens"] = 17
        return p

    d = compare_sample("s", [("a", TEXT), ("b", edit_events(TEXT, more))])["difference"]
    assert (d["field"], d["a"], d["b"]) == ("completion_tokens", 16, 17)


def test_failed_request_is_unmeasured_never_agreement():
    row = compare_sample("s", [("canonical", TEXT), ("reversed", BAD)])
    assert row["status"] == "UNMEASURED" and row["failed"][0]["run"] == "reversed"
    assert "Expected 'messages' to be an array" in row["failed"][0]["error"]
    both_failed = compare_sample("t", [("canonical", BAD), ("reversed", None)])
    assert both_failed["status"] == "UNMEASURED" and both_failed["failed"][1]["error"] == "no reply recorded"
    gate = judge_order([row, both_failed, compare_sample("u", [("a", TEXT), ("b", TEXT)])], what="3 samples")
    assert gate.verdict == "UNPROVEN" and gate.metrics["unmeasured"] == 2 and gate.metrics["agree"] == 1


def test_a_difference_outranks_a_failure():
    changed = edit_events(TEXT, lambda p: p)
    changed["events"][1][1] = changed["events"][1][1].replace('"content":"1"', '"content":"2"')
    row = compare_sample("s", [("canonical", TEXT), ("reversed", changed), ("rotation-2", BAD)])
    assert row["status"] == "DIFFER" and row["difference"]["field"] == "text" and row["difference"]["position"] == 0
    assert judge_order([row, compare_sample("t", [("a", BAD), ("b", TEXT)])], what="x").verdict == "FAIL"


def test_a_stream_cut_short_is_a_failure_even_with_status_200():
    cut = copy.deepcopy(TEXT)
    cut["events"] = cut["events"][:5]  # no finish, no usage, no [DONE]; the stored derived fields are stale
    cut["error"] = "stream ended without [DONE]"
    assert fingerprint(cut) is None
    assert compare_sample("s", [("a", TEXT), ("b", cut)])["status"] == "UNMEASURED"


def _empty(reply: dict) -> dict:
    """``reply`` as an honest empty answer: no content event, and usage that counts one token (the EOS) — usage that
    claimed the removed tokens would make it a protocol error (api/reply.py), not an empty answer."""
    out = copy.deepcopy(reply)
    out["events"] = [ev for ev in out["events"] if ev[1] == "[DONE]" or not
                     (orjson.loads(ev[1]).get("choices") or [{}])[0].get("delta", {}).get("content")]
    for ev in out["events"]:
        obj = orjson.loads(ev[1]) if ev[1] != "[DONE]" else {}
        if isinstance(obj.get("usage"), dict):
            obj["usage"]["completion_tokens"] = 1
            ev[1] = orjson.dumps(obj).decode()
    return out


def test_all_empty_replies_fail_as_vacuous():
    empty = _empty(TEXT)
    assert derive(empty["events"])["text"] == ""
    rows = [compare_sample(f"s{i}", [("canonical", empty), ("reversed", empty)]) for i in range(3)]
    assert all(r["status"] == "AGREE" and r["empty"] for r in rows)
    gate = judge_order(rows, what="3 samples")
    assert gate.verdict == "FAIL" and gate.reason.startswith("VACUOUS") and gate.metrics["vacuous"] is True
    # one sample with output is enough to make the comparison mean something
    rows.append(compare_sample("s3", [("canonical", TEXT), ("reversed", TEXT)]))
    assert judge_order(rows, what="4 samples").verdict == "PASS"


def test_no_usage_means_completion_tokens_were_not_compared():
    lcp = load("llama-cpp-python", "chat_stream")
    assert lcp.get("usage") is None
    gate = judge_order([compare_sample("s", [("a", lcp), ("b", lcp)])], what="1 sample")
    assert gate.verdict == "PASS" and "completion_tokens was not compared" in gate.limitations[0]


def test_first_difference_on_a_prefix_points_past_the_shorter_value():
    a = {"text": "abc", "reasoning": "", "tool_calls": [], "finish_reason": "stop", "completion_tokens": 3}
    b = {**a, "text": "abcdef"}
    assert first_difference(a, b)["position"] == 3
    c = {**a, "tool_calls": [{"name": "f", "arguments": "{}"}]}
    assert first_difference(a, c) == {"field": "tool_calls.count", "position": 0, "a": 0, "b": 1}
    assert first_difference(a, dict(a)) is None


def test_orders_are_permutations_of_the_draw():
    n = 7
    perms = [order_permutation(k, n, 4) for k in range(4)]
    assert perms[0] == list(range(7)) and perms[1] == list(range(6, -1, -1))
    assert perms[2] == [3, 4, 5, 6, 0, 1, 2] and perms[3] == [5, 6, 0, 1, 2, 3, 4]
    assert all(sorted(p) == list(range(n)) for p in perms)
    assert [order_label(k) for k in range(4)] == ["canonical", "reversed", "rotation-2", "rotation-3"]


def _log(regimes: list[str], replies: dict[tuple[str, str, str], dict]) -> tuple[dict, list[dict]]:
    s = OrderSettings(sample_ids=["a", "b"], orders=2, max_tokens=16, regimes=regimes)
    header = {"gate_run": "20261130T000000Z-abcdef", "settings": {"gates": ["order"], "order": s.to_json()}}
    recs = [{"id": f"{r}/{o}/{sid}", "kind": "order", "key": sid, "meta": {"regime": r, "order": o}, "reply": rep}
            for (r, o, sid), rep in replies.items()]
    return header, recs


def test_probe_log_judgement_names_the_regime_that_failed():
    changed = copy.deepcopy(TEXT)
    changed["events"][1][1] = changed["events"][1][1].replace('"content":"1"', '"content":"2"')
    replies = {(r, o, sid): TEXT for r in ("cache-off", "cache-on") for o in ("canonical", "reversed")
               for sid in ("a", "b")}
    replies[("cache-on", "reversed", "b")] = changed
    header, recs = _log(["cache-off", "cache-on"], replies)
    gate = judge_probe_log(header, recs)["order"]
    assert gate.verdict == "FAIL"
    assert "PASS: 2-sample draw in 2 orders, T=0, max_tokens 16, concurrency 1 (cache-off)" in gate.reason
    assert "FAIL: 2-sample draw in 2 orders, T=0, max_tokens 16, concurrency 1 (cache-on)" in gate.reason


def test_verifys_order_draw_runs_cache_off_only_and_says_what_it_leaves_out():
    from types import SimpleNamespace

    from inferencekit.api.dialects import dialect
    from inferencekit.data.bfcl import Sample
    from inferencekit.gates.order import order_settings, regimes_for

    samples = [Sample("simple_python_0", "simple_python", [{"role": "user", "content": "hi"}], [], "auto", {})]
    s = order_settings(samples, orders=2, max_tokens=16, concurrency=1, hermetic=False, draw_info={},
                       cap_warning=None, cache_off_only=True)
    assert s.regimes == ["cache-off"]
    got = regimes_for(s, SimpleNamespace(dialect=dialect("llama-server"), engine="llama-server"))  # type: ignore
    assert [r.name for r in got] == ["cache-off"] and s.cache_bypass == ["cache_prompt"]
    # judged on the one regime, its limitation on the gate: a partial cache hit's effect is not judged there
    header, recs = _log(["cache-off"], {("cache-off", o, sid): TEXT for o in ("canonical", "reversed")
                                        for sid in ("a", "b")})
    gate = judge_probe_log(header, recs)["order"]
    assert gate.verdict == "PASS" and "(cache-off)" in gate.reason
    assert any(x.startswith("the order draw ran with the prompt cache bypassed") for x in gate.limitations)


def test_a_run_cut_short_leaves_unmeasured_samples_not_a_pass():
    header, recs = _log(["as-served"], {("as-served", "canonical", "a"): TEXT, ("as-served", "canonical", "b"): TEXT,
                                        ("as-served", "reversed", "b"): TEXT})
    gate = judge_probe_log(header, recs)["order"]
    assert gate.verdict == "UNPROVEN" and gate.metrics["unmeasured"] == 1 and gate.metrics["agree"] == 1
    header, _ = _log(["as-served"], {})
    assert judge_probe_log(header, [])["order"].verdict == "UNPROVEN"  # nothing answered: every sample unmeasured


def test_heaviest_level_prefers_open_loop_rate_then_concurrency():
    closed = [LevelSpec("c1", "closed", 1), LevelSpec("c8", "closed", 8), LevelSpec("c4", "closed", 4)]
    assert heaviest_level(closed) == "c8"
    assert heaviest_level(closed + [LevelSpec("r2", "open", rate=2.0), LevelSpec("r0.5", "open", rate=0.5)]) == "r2"
    assert heaviest_level([LevelSpec("x", "closed", 4), LevelSpec("y", "closed", 4)]) == "y"


def test_known_answers_are_read_alone_against_under_load(tmp_path):
    base = tmp_path / "outputs" / "llama-server"
    write_json(base / KAT_ALONE / "kat-p1.json", TEXT)
    write_json(base / KAT_LOAD / "kat-p1.json", {**TEXT, "level": "c4"})
    write_json(base / KAT_ALONE / "kat-p2.json", TOOL)  # its copy under load never ran
    rows, files, level = read_kat(RunDir(tmp_path), "llama-server")
    assert [(r["sample_id"], r["status"]) for r in rows] == [("kat-p1", "AGREE"), ("kat-p2", "UNMEASURED")]
    assert level == "c4" and len(files) == 3
    gate = judge_kat(rows, level)
    assert gate.verdict == "UNPROVEN" and "inside load level c4" in gate.reason


@pytest.mark.parametrize("variant", ["equal", "differ"])
def test_known_answer_gate_follows_the_comparison(tmp_path, variant):
    other = TEXT if variant == "equal" else edit_events(TEXT, lambda p: {**p, "choices": [
        {**c, "finish_reason": "stop" if c.get("finish_reason") else None} for c in p.get("choices") or []]})
    base = tmp_path / "outputs" / "e"
    write_json(base / KAT_ALONE / "k.json", TEXT)
    write_json(base / KAT_LOAD / "k.json", {**other, "level": "c2"})
    assert judge_kat(*read_kat(RunDir(tmp_path), "e")[::2]).verdict == ("PASS" if variant == "equal" else "FAIL")


def test_without_usage_completion_tokens_are_counted_from_the_stream():
    # llama-cpp-python sends no usage in a stream; its logprob entries count the tokens (the seed's rule; before 18
    # completion_tokens were then not compared at all)
    lcp = load("llama-cpp-python", "chat_stream_counted")
    assert lcp.get("usage") is None
    fp = fingerprint(lcp)
    assert fp is not None and fp["completion_tokens"] == 16 and fp["tokens_from"] == "stream"
    gate = judge_order([compare_sample("s", [("a", lcp), ("b", lcp)])], what="1 sample")
    assert gate.verdict == "PASS" and "completion_tokens counted from the stream" in gate.reason
    assert "counted from the stream (token ids or logprob entries)" in gate.limitations[0]


def _agreeing_log(**settings) -> tuple[dict, list[dict]]:
    s = OrderSettings(sample_ids=["a"], orders=2, **settings)
    header = {"gate_run": "20261202T000000Z-abcdef", "settings": {"gates": ["order"], "order": s.to_json()}}
    recs = [{"id": f"as-served/{o}/a", "kind": "order", "key": "a", "meta": {"regime": "as-served", "order": o},
             "reply": TEXT} for o in ("canonical", "reversed")]
    return header, recs


def test_a_budget_below_bfcls_own_is_a_fallback_that_strict_turns_into_unproven():
    from inferencekit.gates.result import strict_gate

    gate = judge_probe_log(*_agreeing_log(max_tokens=256))["order"]
    assert gate.verdict == "PASS" and len(gate.fallbacks) == 1
    assert "below BFCL's own budget (4096" in gate.fallbacks[0] and gate.fallbacks[0] in gate.limitations
    assert strict_gate(gate).verdict == "UNPROVEN"
    clipped = judge_probe_log(*_agreeing_log(max_tokens=2046, budget="bfcl", context_tokens=2048))["order"]
    assert "clipped to the server's context (2048 tokens)" in clipped.fallbacks[0]
    full = judge_probe_log(*_agreeing_log(max_tokens=4096, budget="bfcl", context_tokens=8192))["order"]
    assert full.verdict == "PASS" and full.fallbacks == () and strict_gate(full).verdict == "PASS"


def test_the_default_budget_is_bfcls_clipped_to_the_reported_context():
    from types import SimpleNamespace

    from inferencekit.data.bfcl import Sample
    from inferencekit.gates.order import bfcl_budget, order_settings

    samples = [Sample("simple_python_0", "simple_python", [{"role": "user", "content": "hi"}], [], "auto", {})]

    def settled(max_tokens: int, ctx: int | None) -> OrderSettings:
        s = order_settings(samples, orders=2, max_tokens=max_tokens, concurrency=1, hermetic=False, draw_info={},
                           cap_warning=None)
        bfcl_budget(s, SimpleNamespace(context_tokens=ctx))  # type: ignore[arg-type]
        return s

    assert (settled(0, None).max_tokens, settled(0, None).budget) == (4096, "bfcl")
    assert (settled(0, 2048).max_tokens, settled(0, 2048).context_tokens) == (2046, 2048)
    assert settled(0, 32768).max_tokens == 4096
    assert (settled(300, 2048).max_tokens, settled(300, 2048).budget) == (300, "set")
