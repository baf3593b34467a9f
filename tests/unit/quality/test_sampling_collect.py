"""Reading the sampler check's replies: the drawn token and the top-k list, on recorded engine replies."""

from __future__ import annotations

import json

import pytest

from inferencekit.quality.sampling_collect import first_token
from tests.paths import FIXTURES

REPLIES = FIXTURES / "quality" / "replies"


def reply(engine: str, name: str) -> dict:
    return json.loads((REPLIES / engine / name).read_text())["reply"]


def test_llama_cpp_python_appends_a_sampled_token_outside_the_top_k_and_it_is_cut_off():
    r = reply("llama-cpp-python", "first_token_sampled_outside_top.json")
    key, top, err = first_token(r, 3)
    assert err is None
    assert key == "M"  # named by its string: llama-cpp-python gives no ids
    assert [k for k, _ in top] == ["There", "One", "The"]
    assert top[0][1] == pytest.approx(-1.5552518367767334)
    _, uncut, _ = first_token(r)
    assert [k for k, _ in uncut][-1] == "M" and len(uncut) == 4  # what the engine listed: the top 3 and the draw


def test_llama_server_names_tokens_by_id():
    key, top, err = first_token(reply("llama-server", "chat_logprobs.json"), 20)
    assert err is None and isinstance(key, int)
    assert all(isinstance(k, int) for k, _ in top) and len(top) == 5  # captured with top_logprobs 5
    assert top == sorted(top, key=lambda kv: -kv[1])


def test_vllm_names_tokens_by_id_from_its_token_id_strings():
    r = reply("vllm", "chat_logprobs.json")
    key, top, err = first_token(r, 5)
    assert err is None and key == r["choices"][0]["token_ids"][0]
    assert len(top) == 5 and all(isinstance(k, int) for k, _ in top)


def test_a_reply_without_logprobs_is_an_error_not_a_draw():
    key, top, err = first_token({"choices": [{"message": {"content": "Hi"}, "finish_reason": "length"}]})
    assert key is None and top is None and err == "the reply has no logprobs"
    assert first_token({"error": "x"})[2] == "reply has no choices[0]"


def test_a_llama_server_draw_held_back_from_the_logprobs_takes_its_id_from_verbose_tokens():
    # llama-server sends no logprob entry for a token that ends inside a UTF-8 character; asked with return_tokens
    # and verbose (Dialect.verbose_ids) the same reply lists its id in __verbose.tokens (tests/capture_quality.py)
    from inferencekit.api.dialects import dialect
    from inferencekit.quality.sampling_collect import verbose_first_id

    doc = json.loads((REPLIES / "llama-server" / "first_token_held_back.json").read_text())
    assert doc["_provenance"]["body"]["return_tokens"] is True and doc["_provenance"]["body"]["max_tokens"] == 1
    key, top, err = first_token(doc["reply"])
    assert key is None and err == "the reply has no logprobs"
    vid = verbose_first_id(doc["reply"])
    assert isinstance(vid, int) and vid >= 0
    # a list the same prompt gave names tokens by id too, so the draw lands in the list's bins
    _, listed, _ = first_token(reply("llama-server", "chat_logprobs.json"))
    assert all(isinstance(k, int) for k, _ in listed)
    assert dialect("llama-server").verbose_ids == {"return_tokens": True, "verbose": True}
    assert verbose_first_id({"__verbose": {"tokens": []}}) is None and verbose_first_id({}) is None
    assert verbose_first_id({"__verbose": {"tokens": [True]}}) is None
