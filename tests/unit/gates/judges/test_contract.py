"""The API contract's judges on recorded probe logs (tests/fixtures/contract/, captured from llama-server and
llama-cpp-python serving SmolLM2, and from the cheat proxy in front of llama-server), and on edited copies of them.

Each cheat log holds only its item (``probe --contract --items …``); the honest logs hold every item.
"""

import copy
from typing import Any

import pytest

from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.judges.contract import contract_items, judge_probes, max_repeat
from inferencekit.gates.judges.contract_structured import json_bucket, tool_calls_of
from inferencekit.gates.probes.collect import read_probe_log
from inferencekit.gates.result import strict_gate
from tests.paths import FIXTURES

FIX = FIXTURES / "contract"


def _run(name: str) -> ProbeRun:
    header, records, bad = read_probe_log(FIX / f"{name}.jsonl.gz")
    assert bad == 0
    return ProbeRun(header, records)


def _items(run: ProbeRun) -> dict[str, dict[str, Any]]:
    return {i["item"]: i for i in contract_items(run)}


def _edit(run: ProbeRun, rid: str, **reply: Any) -> ProbeRun:
    """A copy of ``run`` whose record ``rid`` has these reply fields replaced."""
    recs = copy.deepcopy(list(run.records))
    for r in recs:
        if r["id"] == rid:
            r["reply"] = {**(r["reply"] or {}), **reply}
    return ProbeRun(run.header, recs)


def test_honest_llama_server_passes_every_item_it_can_do_and_cannot_do_tool_calls():
    run = _run("llama-server")
    items = _items(run)
    passed = {k for k, i in items.items() if i["verdict"] == "PASS"}
    assert passed == {"temperature", "top_k", "top_p", "min_p", "seed", "frequency_penalty", "presence_penalty",
                      "logit_bias_ban", "logit_bias_force", "n", "stop", "max_tokens", "prompt_tokens (user)",
                      "prompt_tokens (system)", "prompt_tokens (multi-turn)", "prompt_tokens (tools)",
                      "context: at the limit", "context: over the limit", "response_format json_object (alone)",
                      "response_format json_object (under load)", "response_format json_schema (alone)",
                      "response_format json_schema (under load)"}
    # SmolLM2's template gets no tool-call grammar on llama-server: no call at all, so UNPROVEN, never FAIL
    assert {k for k, i in items.items() if i["verdict"] == "UNPROVEN"} == {
        "tool_choice named", "tool_choice required", "tool_choice none", "tool calls streamed vs not"}
    assert items["invalid max_tokens -5"]["compliant"] is True and items["invalid max_tokens -5"]["status"] == 400
    assert items["invalid temperature -1"]["compliant"] is False and items["invalid temperature -1"]["verdict"] is None
    assert items["context: over the limit"]["status"] == 400
    assert items["prompt_tokens (system)"]["count_source"] == "engine_apply_template"
    gate = judge_probes(run)
    assert gate.verdict == "UNPROVEN" and gate.judged == 26 and gate.metrics["counts"] == {"PASS": 22, "UNPROVEN": 4}


def _with_tools_off(run: ProbeRun, prompt_tokens: int | None) -> ProbeRun:
    """``run`` with the accounting item's ``tools-off`` request added: the ``tools`` one's messages without the tools,
    answered with ``prompt_tokens`` (the fixture predates that request)."""
    recs = copy.deepcopy(list(run.records))
    tools = next(r for r in recs if r.get("key") == "accounting" and r["meta"]["variant"] == "tools")
    off = copy.deepcopy(tools)
    off["id"], off["meta"]["variant"] = "contract/accounting/tools-off", "tools-off"
    off["body"].pop("tools", None)
    off["meta"]["expected_prompt_tokens"] = prompt_tokens  # what the template, counted without the tools, gives
    off["reply"]["usage"] = {**off["reply"]["usage"], "prompt_tokens": prompt_tokens}
    return ProbeRun(run.header, [*recs, off])


def test_a_template_that_renders_no_tools_makes_the_tool_items_a_property():
    # SmolLM2's template counts the tools prompt alike with and without the tools (37 tokens on llama-server): the
    # model never sees them, so no call is the property template-without-tools, not UNPROVEN
    run = _with_tools_off(_run("llama-server"), 37)
    items = _items(run)
    for name in ("tool_choice named", "tool_choice required", "tool_choice none", "tool calls streamed vs not"):
        assert items[name]["verdict"] is None and items[name]["property"] == "template-without-tools", name
    assert "prompt_tokens 37 with the tools, 37 without" in items["tool_choice named"]["reason"]
    gate = judge_probes(run)
    assert gate.verdict == "PASS" and gate.judged == 23 and gate.metrics["counts"] == {"PASS": 23}
    assert [p["property"] for p in gate.properties] == ["template-without-tools"]
    assert gate.properties[0]["items"] == ["tool_choice named", "tool_choice required", "tool_choice none",
                                           "tool calls streamed vs not"]
    assert strict_gate(gate).verdict == "UNPROVEN"
    # a template that does render the tools (another count without them) leaves no call UNPROVEN, as before
    assert judge_probes(_with_tools_off(_run("llama-server"), 30)).verdict == "UNPROVEN"
    # an engine that did call (llama-cpp-python forces the call with a grammar) is judged on its calls
    assert _items(_with_tools_off(_run("llama-cpp-python"), 37))["tool_choice named"]["verdict"] == "PASS"


def test_honest_llama_cpp_python_fails_no_item_and_names_what_it_cannot_do():
    items = _items(_run("llama-cpp-python"))
    assert not [k for k, i in items.items() if i["verdict"] == "FAIL"]
    # n 2 answered with one choice on an engine documented to drop n: the property drops-n, no verdict
    assert "known to accept n and drop it" in items["n"]["reason"]
    assert items["n"]["verdict"] is None and items["n"]["property"] == "drops-n" and items["n"]["choices"] == 1
    gate = judge_probes(_run("llama-cpp-python"))
    assert [p["property"] for p in gate.properties] == ["drops-n", "no-json-schema"]
    assert "n" not in {i["item"] for i in gate.details}
    assert items["prompt_tokens (user)"]["verdict"] == "PASS"
    assert items["prompt_tokens (user)"]["count_source"].startswith("local:")  # --tokenizer: no engine route
    assert items["context: at the limit"]["reason"] == "not sent: the engine reports no context length"
    # json_schema answered with HTTP 500 naming response_format (pydantic's literal_error) on every request: the
    # engine lacks the feature and claimed nothing, the property no-json-schema, no verdict
    for regime in ("alone", "under load"):
        schema = items[f"response_format json_schema ({regime})"]
        assert schema["verdict"] is None and schema["property"] == "no-json-schema", schema
        assert schema["reason"].startswith("every request refused: HTTP 500 naming response_format")
    # the fixture's header predates 'tool_choice=required' on the dialect's list: text for it stays UNPROVEN
    assert items["tool_choice required"]["verdict"] == "UNPROVEN"
    assert items["tool_choice named"]["verdict"] == "PASS" and items["tool_choice named"]["calls"] == ["get_time"]
    assert items["tool_choice none"]["verdict"] == "PASS" and items["tool calls streamed vs not"]["verdict"] == "PASS"
    assert items["invalid top_p 2"]["status"] == 500 and items["invalid top_p 2"]["compliant"] is False
    assert "no usage in the stream" in items["stop"]["reason"]


def test_vllm_with_a_tool_parser_passes_every_item_and_its_guided_arguments_are_a_finding():
    run = _run("vllm")
    items = _items(run)
    assert judge_probes(run).verdict == "PASS" and judge_probes(run).judged == 26
    assert all(items[f"invalid {w}"]["compliant"] for w in ("temperature -1", "top_p 2", "max_tokens -5"))
    assert items["prompt_tokens (user)"]["count_source"] == "engine_tokenize_chat"
    named = items["tool_choice named"]
    assert named["verdict"] == "PASS" and named["arguments_valid"] is False  # guided: "gab", not an object
    assert "is not of type 'object'" in named["reason"]


@pytest.mark.parametrize("cheat, failing, words", [
    ("top-p-dropped", {"top_p"}, "different replies"),
    ("logit-bias-dropped", {"logit_bias_ban", "logit_bias_force"}, "accepted and not applied"),
    ("penalty-dropped", {"frequency_penalty", "presence_penalty"}, "left the T=0 reply unchanged"),
    ("stop-ignored", {"stop"}, "generated past the stop string"),
    ("prompt-tokens-inflated", {"prompt_tokens (user)", "prompt_tokens (system)", "prompt_tokens (multi-turn)",
                                "prompt_tokens (tools)"}, "usage.prompt_tokens"),
    ("silent-truncate", {"context: at the limit", "context: over the limit"}, "truncated"),
    ("json-broken-under-load", {"response_format json_object (under load)",
                                "response_format json_schema (under load)"}, "invalid"),
])
def test_each_cheat_fails_its_item_and_nothing_else(cheat, failing, words):
    run = _run(cheat)
    items = _items(run)
    assert {k for k, i in items.items() if i["verdict"] == "FAIL"} == failing
    assert all(words in items[k]["reason"] for k in failing), [items[k]["reason"] for k in failing]
    assert judge_probes(run).verdict == "FAIL"


def test_the_cheat_logs_judge_only_the_items_they_asked_for():
    items = _items(_run("stop-ignored"))
    assert list(items) == ["stop"]
    stop = items["stop"]
    assert stop["completion_tokens"] == 64 and stop["finish_reason"] == "stop" and stop["streamed"] < 40
    json_run = _items(_run("json-broken-under-load"))
    assert json_run["response_format json_object (alone)"]["verdict"] == "PASS"  # alone: one request in flight


def test_a_4xx_refusal_is_compliant_and_other_failures_are_unproven():
    run = _run("llama-server")
    refused = _items(_edit(run, "contract/top_k/on-s1", status=400, error="HTTP 400: top_k not supported"))
    assert refused["top_k"]["verdict"] == "NOT RUN" and "compliant" in refused["top_k"]["reason"]
    broken = _items(_edit(run, "contract/top_k/on-s2", status=200, error="stream ended without [DONE]"))
    assert broken["top_k"]["verdict"] == "UNPROVEN"
    gate = judge_probes(_edit(run, "contract/top_k/on-s1", status=400, error="HTTP 400"))
    assert gate.judged == 25  # the refused item is left out of the verdict


def test_collapse_items_need_a_control_with_spread_and_fail_without_collapse():
    run = _run("llama-server")
    t1 = {r["id"]: r["reply"]["text"] for r in run.records if r["id"].startswith("contract/temperature/t1")}
    same = run
    for rid in t1:  # the control gives one reply for three seeds: nothing to tell a collapse from
        same = _edit(same, rid, text=t1["contract/temperature/t1-s1"])
    assert _items(same)["top_p"]["verdict"] == "UNPROVEN"
    spread = _edit(run, "contract/min_p/on-s2", text="a different sample")
    assert _items(spread)["min_p"]["verdict"] == "FAIL"
    ignored = _items(_edit(run, "contract/temperature/t1-s1", text="x"))  # seed 1 no longer repeats itself
    assert ignored["seed"]["verdict"] == "FAIL"
    known = ProbeRun({**run.header, "known_ignored_options": ["min_p"]}, _edit(run, "contract/min_p/on-s2",
                                                                                 text="other").records)
    assert _items(known)["min_p"]["verdict"] == "UNPROVEN" and "known to accept min_p" in _items(known)["min_p"][
        "reason"]


def test_temperature_fails_when_every_sample_is_the_greedy_reply():
    run = _run("llama-server")
    t0 = next(r["reply"]["text"] for r in run.records if r["id"] == "contract/temperature/t0")
    greedy = run
    for s in (1, 2, 3):
        greedy = _edit(greedy, f"contract/temperature/t1-s{s}", text=t0)
    assert _items(greedy)["temperature"]["verdict"] == "FAIL"


def test_penalties_need_repetition_to_lower():
    assert max_repeat("Hello, hello hello. World") == 3 and max_repeat("") == 0
    run = _run("llama-server")
    flat = _items(_edit(run, "contract/frequency_penalty/off", text="one two three"))
    assert flat["frequency_penalty"]["verdict"] == "UNPROVEN" and "nothing for a penalty" in flat[
        "frequency_penalty"]["reason"]


def test_max_tokens_and_accounting_rules():
    run = _run("llama-server")
    long = _items(_edit(run, "contract/max_tokens/cut", usage={"completion_tokens": 9, "prompt_tokens": 43}))
    assert long["max_tokens"]["verdict"] == "FAIL"
    early = _items(_edit(run, "contract/max_tokens/cut", usage={"completion_tokens": 3}, finish_reason="stop"))
    assert early["max_tokens"]["verdict"] == "UNPROVEN"
    none = _items(_edit(run, "contract/accounting/user", usage=None))
    assert none["prompt_tokens (user)"]["verdict"] == "UNPROVEN"


def test_context_over_the_limit_must_be_refused():
    run = _run("llama-server")
    near = next(r for r in run.records if r["id"] == "contract/context/near")
    accepted = _items(_edit(run, "contract/context/over", status=200, error=None, usage=near["reply"]["usage"]))
    assert accepted["context: over the limit"]["verdict"] == "FAIL"
    refused_near = _items(_edit(run, "contract/context/near", status=400, error="HTTP 400: too long"))
    assert refused_near["context: at the limit"]["verdict"] == "FAIL"


def test_json_buckets():
    ok = {"status": 200, "text": '{"name": "A", "age": 3}', "finish_reason": "stop"}
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["name", "age"]}
    assert json_bucket(ok, schema) == ("valid", "")
    assert json_bucket({**ok, "text": '{"name": "A", "age": "3"}'}, schema)[0] == "invalid"
    assert json_bucket({**ok, "text": '{"name": "A", "ag', "finish_reason": "length"}, schema)[0] == "cut"
    assert json_bucket({**ok, "text": '}{"name": "A"}'}, None)[0] == "invalid"
    assert json_bucket({**ok, "text": "[1, 2]"}, None)[0] == "invalid"  # json_object: an object
    assert json_bucket({"status": 500, "error": "boom"}, None)[0] == "error"


def test_a_cut_reply_is_its_own_bucket_not_invalid():
    run = _run("llama-server")
    cut = _items(_edit(run, "contract/json_object/alone-1", text='{"name": "Jo', finish_reason="length"))
    row = cut["response_format json_object (alone)"]
    assert row["verdict"] == "PASS" and row["buckets"] == {"valid": 2, "cut": 1}


def test_tool_choice_rules():
    run = _run("llama-cpp-python")
    call = [{"id": "c1", "type": "function", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert tool_calls_of({"tool_calls": call}) == [("get_weather", {"city": "Paris"})]
    assert tool_calls_of({"tool_calls": "junk"}) == []
    wrong = _items(_edit(run, "contract/tool_choice/named", tool_calls=call))
    assert wrong["tool_choice named"]["verdict"] == "FAIL"
    assert wrong["tool calls streamed vs not"]["verdict"] == "FAIL"  # the stream still called get_time
    leaked = _items(_edit(run, "contract/tool_choice/none", tool_calls=call))
    assert leaked["tool_choice none"]["verdict"] == "FAIL"


def test_a_run_with_no_contract_records_is_not_run():
    gate = judge_probes(ProbeRun({"settings": {"contract": {"items": ["stop"]}}}, []))
    assert gate.verdict == "UNPROVEN"  # stop asked and not sent: its control and request are missing
    assert judge_probes(ProbeRun({"settings": {"contract": {"items": []}}}, [])).verdict == "NOT RUN"


def test_the_progress_total_counts_what_the_asked_groups_send():
    from inferencekit.gates.probes.contract import ContractSettings

    assert ContractSettings(json_load=96).planned_requests() == 45 + 96
    assert ContractSettings(items=["stop"]).planned_requests() == 2
    assert ContractSettings(items=["top_k"]).planned_requests() == 3 + 4  # with the T=1 controls
    # a recorded full run sent every planned request (llama-server: 45 + its --json-load 8)
    assert len([r for r in _run("llama-server").records if r.get("reply")]) == 45 + 8


def _with_header(run: ProbeRun, **header: Any) -> ProbeRun:
    return ProbeRun({**run.header, **header}, run.records)


def test_tool_choice_required_as_text_is_a_property_only_where_the_engine_is_known_to_force_nothing():
    # llama-cpp-python forces a call only for a named tool_choice (its dialect lists tool_choice=required): text for
    # 'required' where 'named' called is the property ignores-tool-choice-required
    run = _with_header(_run("llama-cpp-python"), known_ignored_options=["ignore_eos", "stream_options", "n",
                                                                        "tool_choice=required"])
    item = _items(run)["tool_choice required"]
    assert item["verdict"] is None and item["property"] == "ignores-tool-choice-required"
    assert "where tool_choice named returned ['get_time']" in item["reason"]
    gate = judge_probes(run)
    assert [p["property"] for p in gate.properties] == ["drops-n", "no-json-schema", "ignores-tool-choice-required"]
    # no named call to compare with: not shown by effect, UNPROVEN as before
    no_named = _edit(run, "contract/tool_choice/named", tool_calls=[], text="It is noon.")
    assert _items(no_named)["tool_choice required"]["verdict"] == "UNPROVEN"
    # a call under tool_choice none still FAILs whatever the dialect says
    called = _items(run)["tool_choice named"]
    assert called["verdict"] == "PASS"
    none_call = _edit(run, "contract/tool_choice/none", tool_calls=_reply_of(run, "contract/tool_choice/named")
                      ["tool_calls"])
    assert _items(none_call)["tool_choice none"]["verdict"] == "FAIL"


def _reply_of(run: ProbeRun, rid: str) -> dict[str, Any]:
    return next(dict(r["reply"]) for r in run.records if r["id"] == rid)


def test_json_schema_refusals_are_a_property_only_when_they_name_the_field():
    run = _run("llama-cpp-python")
    ids = [r["id"] for r in run.records if r.get("key") == "json_schema" and "plain" not in r["id"]]
    # a 5xx that names nothing (an overloaded or crashed server) is no evidence of a missing feature: UNPROVEN
    crashed = run
    for rid in ids:
        crashed = _edit(crashed, rid, error="HTTP 500: Internal Server Error")
    assert _items(crashed)["response_format json_schema (alone)"]["verdict"] == "UNPROVEN"
    assert "property" not in _items(crashed)["response_format json_schema (alone)"]
    # one request answered with a reply outside the schema still FAILs the item
    outside = _edit(run, ids[0], status=200, error=None, text='{"city": 3}')
    assert _items(outside)["response_format json_schema (alone)"]["verdict"] == "FAIL"
