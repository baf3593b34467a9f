"""Reply derivation on replies recorded from real engines (tests/capture_replies.py)."""

import json

import pytest

from inferencekit.api.reply import derive, rederive
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"


def load(engine: str, name: str) -> dict:
    return json.loads((FIX / engine / f"{name}.json").read_text())


def test_llama_cpp_python_stream_has_no_usage_and_one_token_per_event():
    r = load("llama-cpp-python", "chat_stream")
    assert r["status"] == 200 and r["done"] is True
    assert r["usage"] is None  # 0.3.36 ignores stream_options.include_usage
    assert r["n_streamed"] is None  # no ids and no logprobs were asked for
    # the first event is role-only; every later content event is one token
    assert r["chunks"] == 16 and r["finish_reason"] == "length"
    assert r["ttft_ms"] == pytest.approx(r["events"][1][0] / 1e6)


def test_llama_cpp_python_logprob_entries_count_the_tokens():
    r = load("llama-cpp-python", "chat_stream_counted")
    assert r["streamed_method"] == "logprobs"
    assert r["n_streamed"] == 16 == len(r["logprobs"])
    # the non-streamed reply of the same request reports usage 16
    assert load("llama-cpp-python", "chat_nostream")["usage"]["completion_tokens"] == 16


def test_derived_fields_are_reproducible_from_events_alone():
    r = load("llama-cpp-python", "chat_stream_counted")
    again = rederive({k: v for k, v in r.items() if k in ("events", "status", "sent_ns")})
    for k in ("text", "ttft_ms", "ttfo_ms", "e2el_ms", "itl_ms", "chunks", "n_streamed", "finish_reason"):
        assert again[k] == r[k], k


def test_itl_gaps_sum_to_e2el_minus_ttft():
    r = load("llama-cpp-python", "chat_stream")
    assert len(r["itl_ms"]) == r["chunks"] - 1
    assert sum(r["itl_ms"]) == pytest.approx(r["e2el_ms"] - r["ttft_ms"])


def test_http_error_is_recorded_not_raised():
    r = load("llama-cpp-python", "chat_bad_request")
    assert r["status"] == 500
    assert r["error"].startswith("HTTP 500: ") and len(r["error"]) <= 510
    assert r["ttft_ms"] is None and r["chunks"] == 0


def test_non_streamed_reply_is_one_event():
    r = load("llama-cpp-python", "chat_nostream")
    assert len(r["events"]) == 1 and r["text"].startswith("1. Red")
    assert r["ttft_ms"] == r["e2el_ms"]


def test_completions_stream_text_channel():
    r = load("llama-cpp-python", "completion_stream")
    assert r["text"].startswith(" Paris") and r["chunks"] == 8


def test_multi_token_event_splits_its_gap_evenly():
    def ev(ids):
        return json.dumps({"choices": [{"delta": {"content": "x"}, "token_ids": ids}]})

    d = derive([[1_000_000, ev([1])], [4_000_000, ev([2, 3, 4])], [5_000_000, "[DONE]"]])
    assert d["itl_ms"] == [1.0, 1.0, 1.0]
    assert d["n_streamed"] == 4 and d["token_ids"] == [1, 2, 3, 4]


def test_reasoning_counts_for_ttft_but_not_ttfo():
    evs = [[2_000_000, json.dumps({"choices": [{"delta": {"reasoning_content": "think"}}]})],
           [3_000_000, json.dumps({"choices": [{"delta": {"reasoning": "more"}}]})],
           [7_000_000, json.dumps({"choices": [{"delta": {"content": "answer"}, "finish_reason": "stop"}]})],
           [8_000_000, json.dumps({"choices": [], "usage": {"completion_tokens": 3}})]]
    d = derive(evs)
    assert (d["ttft_ms"], d["ttfo_ms"], d["e2el_ms"]) == (2.0, 7.0, 7.0)
    assert d["reasoning"] == "thinkmore" and d["text"] == "answer"
    assert d["usage"] == {"completion_tokens": 3} and d["finish_reason"] == "stop"


def test_error_object_inside_a_stream_is_surfaced():
    d = derive([[1, json.dumps({"error": {"message": "out of memory"}})]])
    assert d["stream_error"] == "out of memory"


def test_tool_call_deltas_are_merged_by_index():
    def mk(d):
        return json.dumps({"choices": [{"delta": {"tool_calls": [d]}}]})

    d = derive([[1, mk({"index": 0, "id": "c1", "function": {"name": "get_", "arguments": '{"a"'}})],
                [2, mk({"index": 0, "function": {"name": "weather", "arguments": ": 1}"}})]])
    assert d["tool_calls"] == [{"id": "c1", "type": "function", "name": "get_weather", "arguments": '{"a": 1}'}]
    assert d["ttft_ms"] == 1e-6


def test_minus_infinity_literal_in_a_stream_is_read_not_an_unparseable_event():
    # a masked token's logprob written as the non-JSON literal -Infinity: the token must not be cut off (issue 18)
    ev = ('{"choices": [{"delta": {"content": "Hi"}, "logprobs": {"content": [{"token": "Hi", "logprob": -0.1, '
          '"top_logprobs": [{"token": "Hi", "logprob": -0.1}, {"token": "Yo", "logprob": -Infinity}]}]}}]}')
    d = derive([[1_000_000, ev], [2_000_000, "[DONE]"]])
    assert d["stream_error"] is None and d["text"] == "Hi" and d["n_streamed"] == 1
    assert d["logprobs"][0]["top_logprobs"][1]["logprob"] == float("-inf")
    assert derive([[1, "{not json"]])["stream_error"] == "unparseable event: {not json"


def test_cumulative_usage_per_event_splits_the_gap_by_the_tokens_each_event_carried():
    # vLLM continuous_usage_stats with several tokens per event (speculative decoding): no ids, no logprobs
    def ev(text, total):
        return json.dumps({"choices": [{"delta": {"content": text}}], "usage": {"completion_tokens": total}})

    d = derive([[1_000_000, ev("a", 1)], [4_000_000, ev("bcd", 4)], [6_000_000, ev("ef", 6)], [7_000_000, "[DONE]"]])
    assert d["itl_ms"] == [1.0, 1.0, 1.0, 1.0, 1.0]


def test_usage_only_on_the_last_event_says_nothing_about_that_event():
    evs = [[1_000_000, json.dumps({"choices": [{"delta": {"content": "a"}}]})],
           [3_000_000, json.dumps({"choices": [{"delta": {"content": "b"}}], "usage": {"completion_tokens": 2}})]]
    assert derive(evs)["itl_ms"] == [2.0]


def _events(*payloads: object) -> list[list]:
    return [[(i + 1) * 1_000_000, p if isinstance(p, str) else json.dumps(p)] for i, p in enumerate(payloads)]


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
STOP = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


@pytest.mark.parametrize("usage", [None, 0, 1], ids=["no usage", "usage 0", "usage 1"])
def test_a_finished_stream_without_a_token_event_says_no_tokens_on_rederive(usage):
    # issue 19 (4): the rule lives in derive, so rederive applies it to a reply file written before it. An honest
    # EOS-first reply: not an error (a judge of answers sees it empty), but never a completed load request
    tail = [{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": usage}}] if usage is not None else []
    events = _events(ROLE, STOP, *tail, "[DONE]")
    d = derive(events)
    assert d["chunks"] == 0 and d["ttft_ms"] is None and d["no_tokens"] is True
    assert d["stream_error"] is None and d["empty_error"] is None
    again = rederive({"status": 200, "events": events})
    assert again["no_tokens"] is True and "error" not in again
    assert "empty_error" not in again and "stream_error" not in again


def test_a_stream_without_token_events_whose_usage_claims_tokens_is_a_protocol_error():
    events = _events(ROLE, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                            "usage": {"completion_tokens": 2}}, "[DONE]")
    d = derive(events)
    assert d["empty_error"] == "protocol error: the stream carried no token event but usage claims 2 completion tokens"
    assert d["no_tokens"] is False and rederive({"status": 200, "events": events})["error"] == d["empty_error"]


def test_no_tokens_is_judged_only_on_a_finished_stream():
    assert derive(_events(ROLE))["no_tokens"] is False  # not finished: the client says "ended without [DONE]"
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}
    assert derive(_events(body))["no_tokens"] is False  # a non-streamed body: no stream to judge
    assert derive(_events(ROLE, {"choices": [{"index": 0, "delta": {"content": "x"}}]}, "[DONE]"))["no_tokens"] is False
