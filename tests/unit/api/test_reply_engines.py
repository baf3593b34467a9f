"""Reply derivation on replies recorded from llama-server and vLLM (tests/capture_replies.py).

Fixtures (``tests/fixtures/replies/<engine>/``), captured on 2026-11-30 with
``tests/capture_replies.py`` as is, from the engines this repository builds: llama-server
b1-0c1e570 serving SmolLM2-135M-Instruct Q4_1 with ``--parallel 4``; vLLM 0.32.0 on CPU serving the
float32 conversion of the same GGUF. The llama-server set was captured with the client that
re-sends a request once when a reused keep-alive connection fails before any reply (llama-server
closes the connection after every stream); those replies say so in ``retried``.

``llama-server/chat_stream_counted_top0.json`` is older: the same counted request as
``chat_stream_counted.json`` but with the count fields the llama-server dialect had before (``logprobs:
true, top_logprobs: 0``), captured through the same script's ``capture()`` with that retry patched
in. It is the evidence for ``top_logprobs: 1``: with 0 the stream carries no logprob entries at all.

Every expected value below was read off the raw ``events`` of the fixture by hand.
"""

import json

import orjson
import pytest

from inferencekit.api.dialects import dialect
from inferencekit.api.reply import rederive
from inferencekit.bench.metrics import level_metrics, n_out
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"
DERIVED = ("text", "reasoning", "tool_calls", "token_ids", "logprobs", "prompt_token_ids", "finish_reason", "usage",
           "server_timings", "done", "ttft_ms", "ttfo_ms", "e2el_ms", "itl_ms", "chunks", "n_streamed",
           "streamed_method")
COLOURS = "1. Red: This is the most obvious colour, but it's also the"
# greedy ids of COLOURS: identical from vLLM's token_ids and llama-server's logprob entries
COLOURS_IDS = [33, 30, 3950, 42, 669, 314, 260, 768, 5452, 7302, 28, 564, 357, 506, 597, 260]
OK_TEXT = "I'm sorry for any confusion. I'll make sure to use the correct word."
OK_IDS = [57, 5248, 22657, 327, 750, 9563, 30, 339, 3060, 919, 2090, 288, 722, 260, 2887, 2229, 30]
EOS = 2  # <|im_end|>


def load(engine: str, name: str) -> dict:
    return json.loads((FIX / engine / f"{name}.json").read_text())


def payload(reply: dict, i: int) -> dict:
    return orjson.loads(reply["events"][i][1])


ALL = sorted((p.parent.name, p.stem) for e in ("llama-server", "vllm") for p in (FIX / e).glob("*.json"))


def test_fixture_sets_are_complete():
    assert {n for e, n in ALL if e == "vllm"} == {"chat_stream", "chat_stream_counted", "chat_stream_natural_stop",
                                                  "chat_nostream", "chat_bad_request", "completion_stream"}
    assert {n for e, n in ALL if e == "llama-server"} == {
        "chat_stream", "chat_stream_counted", "chat_stream_natural_stop", "chat_nostream", "chat_bad_request",
        "completion_stream", "chat_stream_counted_top0"}


@pytest.mark.parametrize("engine,name", ALL)
def test_derived_fields_are_reproducible_from_events_alone(engine, name):
    r = load(engine, name)
    again = rederive({k: r[k] for k in ("events", "status", "sent_ns")})
    for k in DERIVED:
        assert again[k] == r[k], k


@pytest.mark.parametrize("engine,name", [(e, n) for e, n in ALL if "stream" in n and "nostream" not in n])
def test_streams_end_with_done_and_itl_spans_first_to_last_token(engine, name):
    r = load(engine, name)
    assert r["status"] == 200 and "error" not in r and r["done"] is True
    assert r["events"][-1][1] == "[DONE]"
    assert len(r["itl_ms"]) == r["chunks"] - 1
    assert sum(r["itl_ms"]) == pytest.approx(r["e2el_ms"] - r["ttft_ms"])


# --------------------------------------------------------------------------------------------------
# vLLM 0.32.0


def test_vllm_token_ids_equal_usage_and_prompt_ids_come_first():
    r = load("vllm", "chat_stream_counted")
    assert r["_provenance"]["request"]["return_token_ids"] is True
    assert r["text"] == COLOURS and r["finish_reason"] == "length"
    assert r["token_ids"] == COLOURS_IDS
    assert r["streamed_method"] == "token_ids" and r["n_streamed"] == 16 == r["usage"]["completion_tokens"]
    assert n_out(r) == (16, "usage")
    assert r["logprobs"] is None
    # the first event carries role, empty content and prompt_token_ids — not a token event
    first = payload(r, 0)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["prompt_token_ids"] == r["prompt_token_ids"]
    ids = r["prompt_token_ids"]
    assert len(ids) == 34 == r["usage"]["prompt_tokens"]
    # ChatML with SmolLM's default system prompt: 3 × <|im_start|> (1), 2 × <|im_end|> (2)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(EOS) == 2
    assert r["ttft_ms"] == 122.438368 == r["ttfo_ms"]  # the "1" event, same chunk as the first event
    assert r["e2el_ms"] == 941.322278 and r["chunks"] == 16
    assert r["server_timings"] is None


def test_vllm_natural_stop_streams_and_counts_the_eos_id():
    r = load("vllm", "chat_stream_natural_stop")
    assert r["text"] == OK_TEXT and r["finish_reason"] == "stop"
    assert r["token_ids"] == [*OK_IDS, EOS]
    assert len(r["token_ids"]) == 18 == r["usage"]["completion_tokens"]
    # the EOS has its own event (content "", token_ids [2]); it is a token event, so E2EL includes it
    last = payload(r, -3)["choices"][0]
    assert last["delta"] == {"content": ""} and last["token_ids"] == [EOS] and last["finish_reason"] == "stop"
    assert r["chunks"] == 18 and r["e2el_ms"] == 1079.217216 == r["events"][-3][0] / 1e6
    assert r["ttft_ms"] == 125.583701  # not 125.146731: the role/prompt-ids event carries no token


def test_vllm_final_usage_event_has_empty_choices_and_middle_events_no_usage():
    r = load("vllm", "chat_stream_counted")
    final = payload(r, -2)
    assert final["choices"] == [] and final["usage"] == r["usage"]
    assert r["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 0}
    assert all("usage" not in payload(r, i) for i in range(len(r["events"]) - 2))
    assert r["events"][-2][0] == 942895799  # the usage event comes 1.6 ms after the last token event


def test_vllm_unasked_stream_has_no_token_ids():
    r = load("vllm", "chat_stream")
    assert r["text"] == COLOURS and r["token_ids"] is None and r["n_streamed"] is None
    assert r["prompt_token_ids"] is None and r["usage"]["completion_tokens"] == 16


def test_vllm_non_streamed_reply_and_bad_request():
    r = load("vllm", "chat_nostream")
    assert len(r["events"]) == 1 and r["done"] is False and "error" not in r
    assert r["text"] == COLOURS and r["usage"]["completion_tokens"] == 16
    assert r["ttft_ms"] == r["e2el_ms"] == 994.124321 and r["chunks"] == 1
    bad = load("vllm", "chat_bad_request")
    assert bad["status"] == 400 and bad["error"].startswith("HTTP 400: ")
    assert "Input should be a valid list" in bad["error"]
    assert bad["events"] == [] and bad["ttft_ms"] is None and bad["usage"] is None


def test_vllm_completion_stream():
    r = load("vllm", "completion_stream")
    assert r["text"] == " Paris.\n\nThe answer is:" and r["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 8 == r["chunks"]
    assert r["ttft_ms"] == 85.076736 and r["e2el_ms"] == 475.116444
    assert payload(r, -2)["choices"] == []


# --------------------------------------------------------------------------------------------------
# llama-server b1-0c1e570


def test_llama_server_stream_has_usage_and_timings_in_the_final_event():
    r = load("llama-server", "chat_stream")
    assert r["text"] == COLOURS and r["finish_reason"] == "length"
    final = payload(r, -2)
    assert final["choices"] == [] and final["usage"] == r["usage"] and final["timings"] == r["server_timings"]
    assert r["usage"] == {"completion_tokens": 16, "prompt_tokens": 34, "total_tokens": 50,
                          "prompt_tokens_details": {"cached_tokens": 0}}
    t = r["server_timings"]
    assert t["predicted_n"] == 16 == r["usage"]["completion_tokens"]
    assert (t["prompt_n"], t["cache_n"]) == (34, 0)  # the first request: nothing cached yet
    assert t["cache_n"] == r["usage"]["prompt_tokens_details"]["cached_tokens"]
    # this build divides predicted_ms by predicted_n − 1 decode steps (the first token is free)
    assert t["predicted_ms"] == 151.609
    assert t["predicted_per_second"] == pytest.approx(15 / 151.609 * 1e3)
    assert t["predicted_per_token_ms"] == pytest.approx(151.609 / 15)
    # the role event and the first token arrive in one chunk; finish and usage 0.37 ms after the last token
    assert r["events"][0][0] == r["events"][1][0] == 155588779
    assert r["ttft_ms"] == 155.588779 and r["e2el_ms"] == 304.060955 == r["events"][-4][0] / 1e6
    assert r["events"][-3][0] == r["events"][-2][0] == 304427277
    assert r["chunks"] == 16 and r["token_ids"] is None and r["n_streamed"] is None
    assert "retried" not in r  # the capture's first request: a fresh connection


def test_llama_server_logprob_entries_carry_the_token_ids():
    r = load("llama-server", "chat_stream_counted")
    assert {k: r["_provenance"]["request"][k] for k in ("logprobs", "top_logprobs")} == {"logprobs": True,
                                                                                        "top_logprobs": 1}
    entries = r["logprobs"]
    assert len(entries) == 16 and all(set(e) >= {"id", "token", "bytes", "logprob", "top_logprobs"} for e in entries)
    assert "".join(e["token"] for e in entries) == COLOURS == r["text"]
    assert r["token_ids"] == [e["id"] for e in entries] == COLOURS_IDS  # same ids as vLLM's token_ids
    assert r["token_ids"] == load("vllm", "chat_stream_counted")["token_ids"]
    assert r["streamed_method"] == "token_ids" and r["n_streamed"] == 16 == r["usage"]["completion_tokens"]
    assert entries[0]["id"] == 33 and entries[0]["top_logprobs"][0]["id"] == 33  # greedy: the top-1 is the pick
    assert r["server_timings"]["cache_n"] == 33  # same prompt as chat_stream: all but the last token cached
    # sent right after chat_stream's stream, on the connection llama-server had closed: sent again
    assert r["retried"].startswith("a reused keep-alive connection failed before any reply (connection error")


def test_llama_server_count_fields_top_logprobs_0_stream_no_entries():
    """Why the dialect asks for top_logprobs 1: with 0, llama-server streams no logprob entries at all."""
    r = load("llama-server", "chat_stream_counted_top0")
    req = r["_provenance"]["request"]
    assert (req["logprobs"], req["top_logprobs"]) == (True, 0)
    assert all(payload(r, i)["choices"][0].get("logprobs") is None for i in range(1, 17))
    assert r["logprobs"] is None and r["token_ids"] is None and r["n_streamed"] is None
    assert r["text"] == COLOURS and r["usage"]["completion_tokens"] == 16


def test_llama_server_dialect_count_fields_ask_for_at_least_one_top_logprob():
    fields = dialect("llama-server").count_fields
    assert fields["logprobs"] is True and fields.get("top_logprobs", 1) >= 1


def test_llama_server_natural_stop_counts_an_eos_it_does_not_stream():
    r = load("llama-server", "chat_stream_natural_stop")
    assert r["text"] == OK_TEXT and r["finish_reason"] == "stop"
    assert r["token_ids"] == OK_IDS == load("vllm", "chat_stream_natural_stop")["token_ids"][:-1]
    assert EOS not in r["token_ids"]
    assert r["usage"]["completion_tokens"] == 18 == r["server_timings"]["predicted_n"] == r["n_streamed"] + 1
    # the finish event comes one decode step after the last token; it carries nothing, so E2EL stops at "."
    assert payload(r, -3)["choices"][0] == {"finish_reason": "stop", "index": 0, "delta": {}}
    assert r["e2el_ms"] == 217.626665 and r["events"][-3][0] == 227432533
    assert r["chunks"] == 17
    # the disagreement is reported by the level metrics, not hidden
    m = level_metrics([load("llama-server", "chat_stream_counted"), r])
    assert m["n_out"]["streamed_vs_usage"] == {"compared": 2, "disagree": 1}
    assert m["n_out"]["sources"] == {"usage": 2}


def test_llama_server_non_streamed_reply_keeps_timings():
    r = load("llama-server", "chat_nostream")
    assert len(r["events"]) == 1 and r["done"] is False and "error" not in r
    assert r["text"] == COLOURS and r["usage"]["completion_tokens"] == 16
    assert r["server_timings"]["predicted_n"] == 16 and r["ttft_ms"] == r["e2el_ms"] == 153.814579


def test_llama_server_bad_request():
    r = load("llama-server", "chat_bad_request")
    assert r["status"] == 400
    assert r["error"] == ('HTTP 400: {"error":{"code":400,"message":"Expected \'messages\' to be an array",'
                          '"type":"invalid_request_error"}}')
    assert r["events"] == [] and r["chunks"] == 0 and r["ttft_ms"] is None


def test_llama_server_completion_stream_final_event_has_an_empty_choice():
    r = load("llama-server", "completion_stream")
    assert r["text"] == " Paris.\n\nThe United States has" and r["finish_reason"] == "length"
    final = payload(r, -2)
    assert final["choices"] == [{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}]
    assert final["usage"]["completion_tokens"] == 8 and final["timings"]["predicted_n"] == 8
    assert r["chunks"] == 8 and r["ttft_ms"] == 26.05479 and r["e2el_ms"] == 92.097793
