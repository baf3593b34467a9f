"""Reading token ids and top-k lists out of real engine replies (tests/fixtures/quality/replies/, recorded by
tests/capture_quality.py --replies)."""

from __future__ import annotations

import json

import pytest

from inferencekit.quality.logprobs import echo_alignment, parse_chat_logprobs, parse_prompt_logprobs, token_id_of
from inferencekit.quality.trajectory import cap_from_error, select_prompts
from tests.paths import FIXTURES

REPLIES = FIXTURES / "quality" / "replies"


def reply(engine: str, name: str) -> dict:
    return json.loads((REPLIES / engine / f"{name}.json").read_text())["reply"]


def test_llama_server_names_the_id_of_every_token_and_alternative():
    r = reply("llama-server", "chat_logprobs")
    p = parse_chat_logprobs(r)
    entries = r["choices"][0]["logprobs"]["content"]
    assert p.method == "ids"
    assert p.token_ids == [e["id"] for e in entries] and len(p.token_ids) == 8
    assert "".join(p.tokens) == p.text == r["choices"][0]["message"]["content"]
    assert p.top_k_returned == 5
    first = p.top[0]
    assert all(isinstance(k, int) for k, _ in first)
    assert [lp for _, lp in first] == sorted((lp for _, lp in first), reverse=True)
    assert first[0][0] == p.token_ids[0]  # greedy: the chosen token is the most likely one
    assert p.finish_reason == "length" and p.id_mismatch_positions == []


def test_llama_cpp_python_gives_token_strings_only():
    r = reply("llama-cpp-python", "chat_logprobs")
    p = parse_chat_logprobs(r)
    assert p.method == "strings" and p.token_ids is None
    assert all(isinstance(k, str) for pos in p.top for k, _ in pos)
    assert p.top_k_returned == 5


def test_vllm_ids_from_token_id_strings_and_the_token_ids_list_agree():
    r = reply("vllm", "chat_logprobs")
    p = parse_chat_logprobs(r)
    assert p.method == "token_ids"
    assert p.token_ids == r["choices"][0]["token_ids"][:len(p.tokens)]
    assert p.id_mismatch_positions == []
    assert all(t.startswith("token_id:") for t in p.tokens)
    assert all(isinstance(k, int) for pos in p.top for k, _ in pos)


def test_vllm_prompt_logprobs_one_entry_per_prompt_token_first_empty():
    r = reply("vllm", "prompt_logprobs")
    rows = parse_prompt_logprobs(r)
    prompt = [504, 3575, 282, 4649, 314]
    assert len(rows) == len(prompt) and rows[0] is None
    for t in range(1, len(prompt)):
        assert prompt[t] in rows[t] and all(v <= 0 for v in rows[t].values())
        assert 5 <= len(rows[t]) <= 6  # the top 5, plus the actual token when it is not among them


def test_llama_cpp_python_echo_lists_are_one_position_late():
    r = reply("llama-cpp-python", "echo")
    lp = r["choices"][0]["logprobs"]
    res = echo_alignment(lp["tokens"], lp["top_logprobs"], start=len(lp["tokens"]) // 2 + 1)
    assert res["verdict"] == "shifted", res
    assert res["checked"] >= 8


def test_no_logprobs_is_method_none_and_a_missing_choice_raises():
    p = parse_chat_logprobs({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]})
    assert (p.method, p.text, p.token_ids, p.top_k_returned) == ("none", "hi", None, 0)
    with pytest.raises(ValueError):
        parse_chat_logprobs({"error": "boom"})
    with pytest.raises(ValueError):
        parse_prompt_logprobs({"choices": [{"text": "x"}]})


def test_echo_alignment_reads_aligned_shifted_and_unclear_lists():
    toks = ["a", "b", "c", "d", "e"]
    aligned = [{t: -0.1, "z": -3.0} for t in toks]
    shifted = [{toks[i + 1] if i + 1 < len(toks) else "z": -0.1, "y": -3.0} for i in range(len(toks))]
    assert echo_alignment(toks, aligned)["verdict"] == "aligned"
    assert echo_alignment(toks, shifted)["verdict"] == "shifted"
    mixed = aligned[:2] + shifted[2:]
    assert echo_alignment(toks, mixed)["verdict"] == "unclear"


def test_token_id_of_reads_both_spellings():
    assert token_id_of({"id": 7, "token": "x"}) == 7
    assert token_id_of({"token": "token_id:123"}) == 123
    assert token_id_of({"token": "hello"}) is None
    assert token_id_of({"id": True, "token": "x"}) is None


def test_cap_from_error_reads_the_engines_limit_or_halves():
    assert cap_from_error("top_logprobs (21) is greater than max allowed: 20", 21) == 20
    assert cap_from_error("Requested logprobs exceed the maximum of 5", 20) == 5
    assert cap_from_error("logprobs not supported", 20) == 10
    assert cap_from_error("max allowed: 50", 20) == 10  # a cap above what was asked cannot be the reason


def test_select_prompts_takes_buckets_in_turn():
    from inferencekit.data.prompts import load_prompt_set

    chosen = select_prompts(load_prompt_set("dev").prompts, 8)
    assert len(chosen) == 8
    assert len({p.bucket for p in chosen[:4]}) == 4  # one from each of the four buckets first
    assert all(p.is_chat for p in chosen)
