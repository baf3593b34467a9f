"""The structured requests of ``bench serve --structured`` (``gates/probes/structured.py``): what each carries, the
path chosen by what the engine's dialect takes, and the folders ``load_extras`` deals them into."""

from __future__ import annotations

import pytest

from inferencekit.api.dialects import DIALECTS
from inferencekit.gates.judges.tool_call_ast import check_calls
from inferencekit.gates.probes.contract import SCHEMA
from inferencekit.gates.probes.load import load_extras
from inferencekit.gates.probes.structured import (
    json_prompts,
    structured_pool_size,
    structured_requests,
    tool_samples,
)
from tests.unit.gates.judges.test_tool_call_ast import _data_dir, ideal_calls

KW = dict(model="m", max_tokens=96, extra={"top_k": 1}, ctk={"enable_thinking": False})


def test_requests_alternate_json_and_tool_calls_greedy_and_streamed_with_usage():
    _data_dir()  # skips without bfcl-eval
    reqs = structured_requests(5, named_tool_choice=False, json_schema=True, **KW)  # type: ignore[arg-type]
    assert [r["kind"] for r in reqs] == ["structured_json", "tool_call"] * 2 + ["structured_json"]
    assert len({r["id"] for r in reqs}) == 5 and all(r["key"] == r["id"] for r in reqs)
    for r in reqs:
        b = r["body"]
        assert b["temperature"] == 0.0 and b["stream"] is True and b["stream_options"] == {"include_usage": True}
        assert b["max_tokens"] == 96 and b["top_k"] == 1 and b["chat_template_kwargs"] == {"enable_thinking": False}
    j = reqs[0]
    assert j["meta"] == {"format": "json_schema", "schema": SCHEMA, "prompt": 0}
    assert j["body"]["response_format"]["json_schema"]["schema"] == SCHEMA
    assert len(set(json_prompts())) == len(json_prompts()) == structured_pool_size() // 2


def test_without_a_named_tool_choice_the_call_is_asked_through_a_response_format_schema():
    _data_dir()
    t = structured_requests(2, named_tool_choice=False, json_schema=True, **KW)[1]  # type: ignore[arg-type]
    meta, body = t["meta"], t["body"]
    assert meta["path"] == "response_format" and "tools" not in body and "tool_choice" not in body
    schema = body["response_format"]["json_schema"]["schema"]
    [fn] = meta["functions"]
    assert schema["properties"]["name"] == {"type": "string", "enum": [fn["name"].replace(".", "_")]}
    assert schema["properties"]["arguments"]["type"] == "object"
    assert set(schema["properties"]["arguments"]["properties"]) == set(fn["parameters"]["properties"])
    assert schema["required"] == ["name", "arguments"]
    assert body["messages"][0]["role"] == "system" and fn["name"].replace(".", "_") in body["messages"][0]["content"]
    assert meta["sample"] == t["id"].removeprefix("tool-") and len(meta["ground_truth"]) == 1


def test_a_named_tool_choice_where_the_dialect_honours_one_and_json_object_where_it_takes_no_schema():
    _data_dir()
    cpp = DIALECTS["llama-cpp-python"]
    j, t = structured_requests(2, named_tool_choice=cpp.named_tool_choice, json_schema=cpp.json_schema,
                               **KW)  # type: ignore[arg-type]
    assert j["body"]["response_format"] == {"type": "json_object"} and j["meta"]["schema"] is None
    assert t["meta"]["path"] == "tool_choice" and "response_format" not in t["body"]
    name = t["body"]["tools"][0]["function"]["name"]
    assert t["body"]["tool_choice"] == {"type": "function", "function": {"name": name}}
    assert [d.name for d in DIALECTS.values() if d.named_tool_choice] == ["vllm", "llama-cpp-python"]
    assert [d.name for d in DIALECTS.values() if not d.json_schema] == ["llama-cpp-python"]


def test_every_drawn_sample_is_single_call_and_its_ideal_call_is_ast_correct():
    _data_dir()
    samples = tool_samples(100)
    assert len({e["id"] for e, _, _ in samples}) == 100
    assert [s for _, _, s in samples[:4]] == ["simple_python", "live_simple", "simple_python", "live_simple"]
    for entry, truth, _ in samples:
        assert len(entry["function"]) == 1 and len(truth) == 1
        assert check_calls(entry["function"], ideal_calls(entry["function"], truth), truth).valid, entry["id"]


def test_too_many_is_refused():
    _data_dir()
    with pytest.raises(ValueError, match="at most 200"):
        structured_requests(201, named_tool_choice=False, json_schema=True, **KW)  # type: ignore[arg-type]


def test_load_extras_send_them_alone_and_inside_every_level():
    _data_dir()
    x = load_extras(levels=["c1", "c4"], heaviest="c4", probes=False, kat=0, kat_max_tokens=16, seed=1, model="m",
                    max_tokens=16, extra={}, ctk={}, neutral={}, top_k_off=0, structured=4, structured_max_tokens=64)
    assert [p["folder"] for p in x["alone"]] == ["structured/alone"] * 4
    for label in ("c1", "c4"):
        mine = x["by_level"][label]
        assert [p["folder"] for p in mine] == [f"structured/load-{label}"] * 4
        assert [p["body"] for p in mine] == [p["body"] for p in x["alone"]]  # the same requests alone and in load
    assert all(p["body"]["max_tokens"] == 64 for p in x["alone"])
