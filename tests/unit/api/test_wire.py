"""Wrong-typed fields from a server: each makes its reply a recorded protocol error naming the field, never an
exception (issue 19's list), on recorded replies with one raw event edited (tests/fixtures/replies)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from inferencekit.api.reply import derive, rederive
from inferencekit.api.wire import event_problem
from inferencekit.bench.metrics import level_metrics
from inferencekit.shapes import is_ok
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"
COUNTED = json.loads((FIX / "llama-server" / "chat_stream_counted.json").read_text())  # logprobs, usage at the end
TOOL = json.loads((FIX / "llama-cpp-python" / "chat_stream_tool_call.json").read_text())  # a streamed tool call
LEGACY = json.loads((FIX / "llama-server" / "completion_stream.json").read_text())  # /v1/completions


def edited(reply: dict[str, Any], pick: Callable[[dict[str, Any]], bool], fn: Callable[[dict[str, Any]], None]
           ) -> dict[str, Any]:
    """``reply`` with ``fn`` applied to the first parsed event ``pick`` accepts (the event written back raw)."""
    out = copy.deepcopy(reply)
    for ev in out["events"]:
        if ev[1] == "[DONE]":
            continue
        obj = orjson.loads(ev[1])
        if pick(obj):
            fn(obj)
            ev[1] = orjson.dumps(obj).decode()
            return out
    raise AssertionError("no event matched")


def _delta(o: dict) -> bool:
    return bool(o.get("choices")) and bool((o["choices"][0].get("delta") or {}).get("content"))


def _tool(o: dict) -> bool:
    return bool(o.get("choices")) and bool((o["choices"][0].get("delta") or {}).get("tool_calls"))


def _usage(o: dict) -> bool:
    return bool(o.get("usage"))


def _lp(o: dict) -> bool:
    return bool(o.get("choices")) and bool((o["choices"][0].get("logprobs") or {}).get("content"))


def _text(o: dict) -> bool:
    return bool(o.get("choices")) and bool(o["choices"][0].get("text"))


def _set(path: tuple, value: Any) -> Callable[[dict], None]:
    def fn(o: dict) -> None:
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return fn


CASES = [  # (name, reply, event picker, edit, field named in the error)
    ("content 5", COUNTED, _delta, _set(("choices", 0, "delta", "content"), 5), "choices[0].delta.content is int"),
    ("usage lots", COUNTED, _usage, _set(("usage",), "lots"), "usage is str"),
    ("usage count str", COUNTED, _usage, _set(("usage", "completion_tokens"), "16"), "usage.completion_tokens is str"),
    ("usage negative", COUNTED, _usage, _set(("usage", "prompt_tokens"), -3), "usage.prompt_tokens is -3"),
    ("usage details", COUNTED, _usage, _set(("usage", "prompt_tokens_details"), [1]), "prompt_tokens_details is list"),
    ("choices object", COUNTED, _delta, lambda o: o.update(choices=o["choices"][0]), "choices is dict"),
    ("choice not object", COUNTED, _delta, _set(("choices", 0), "x"), "choices[0] is str"),
    ("tool_calls true", TOOL, _tool, _set(("choices", 0, "delta", "tool_calls"), True), "delta.tool_calls is boolean"),
    ("index null", COUNTED, _delta, _set(("choices", 0, "index"), None), "choices[0].index is null"),
    ("tool index str", TOOL, _tool, _set(("choices", 0, "delta", "tool_calls", 0, "index"), "a"),
     "tool_calls[0].index is str"),
    ("function str", TOOL, _tool, _set(("choices", 0, "delta", "tool_calls", 0, "function"), "f"),
     "tool_calls[0].function is str"),
    ("name 5", TOOL, _tool, _set(("choices", 0, "delta", "tool_calls", 0, "function", "name"), 5),
     "function.name is int"),
    ("arguments object", TOOL, _tool, _set(("choices", 0, "delta", "tool_calls", 0, "function", "arguments"), {}),
     "function.arguments is dict"),
    ("top_logprobs 5", COUNTED, _lp, _set(("choices", 0, "logprobs", "content", 0, "top_logprobs"), 5),
     "content[0].top_logprobs is int"),
    ("logprob str", COUNTED, _lp, _set(("choices", 0, "logprobs", "content", 0, "logprob"), "-1"),
     "content[0].logprob is str"),
    ("token id str", COUNTED, _lp, _set(("choices", 0, "logprobs", "content", 0, "id"), "33"), "content[0].id is str"),
    ("token_logprobs object", LEGACY, _text, _set(("choices", 0, "logprobs"), {"tokens": [" Paris"],
                                                                               "token_logprobs": {}}),
     "logprobs.token_logprobs is dict"),
    ("text 5", LEGACY, _text, _set(("choices", 0, "text"), 5), "choices[0].text is int"),
    ("finish_reason 1", COUNTED, _delta, _set(("choices", 0, "finish_reason"), 1), "finish_reason is int"),
    ("timings list", COUNTED, _usage, _set(("timings",), [1]), "timings is list"),
    ("token_ids str", COUNTED, _delta, _set(("choices", 0, "token_ids"), "12"), "token_ids is str"),
]


@pytest.mark.parametrize("name,reply,pick,fn,named", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_type_is_a_protocol_error_naming_the_field(name, reply, pick, fn, named) -> None:
    bad = rederive(edited(reply, pick, fn))
    assert bad["error"].startswith("protocol error: ") and named in bad["error"], bad["error"]
    assert not is_ok(bad)
    m = level_metrics([bad, rederive(reply)])  # the level's figures still come out, the bad reply a failure
    assert m["requests"]["failed"] == 1 and m["requests"]["completed"] == 1


def test_an_error_object_whose_message_is_not_a_string_is_a_protocol_error_naming_it() -> None:
    bad = rederive(edited(COUNTED, _delta, lambda o: o.update(error={"message": {"deep": [1]}})))
    assert bad["error"] == "protocol error: error.message is dict, expected a string" and not is_ok(bad)
    worse = rederive(edited(COUNTED, _delta, lambda o: o.update(error=5)))
    assert worse["error"] == "protocol error: error is int, expected an object or a string"
    fine = rederive(edited(COUNTED, _delta, lambda o: o.update(error={"message": "overloaded", "code": 503})))
    assert fine["error"] == "overloaded"  # a well-formed error object: the server's own words


@pytest.mark.parametrize("payload,kind", [("5", "int"), ('"text"', "str"), ("[1, 2]", "list"), ("null", "null"),
                                          ("true", "boolean")])
def test_an_event_that_is_not_an_object_is_a_protocol_error_naming_it(payload: str, kind: str) -> None:
    # failed before: a `data: 5` event was skipped silently and the reply could pass as a success
    reply = copy.deepcopy(COUNTED)
    reply["events"].insert(3, [reply["events"][3][0], payload])
    bad = rederive(reply)
    assert bad["error"] == f"protocol error: an event is {kind}, expected an object: {payload}" and not is_ok(bad)


def test_legitimate_nulls_are_not_wrong_types() -> None:
    ok = edited(COUNTED, _lp, _set(("choices", 0, "logprobs", "content", 0, "top_logprobs", 0, "logprob"), None))
    assert derive(ok["events"])["stream_error"] is None  # a top logprob of probability 0
    assert event_problem({"choices": [{"index": 0, "delta": {"content": None}, "finish_reason": None,
                                       "logprobs": None}], "usage": None}) is None
    assert event_problem({"choices": [], "usage": {"completion_tokens": 0, "prompt_tokens_details": None}}) is None
