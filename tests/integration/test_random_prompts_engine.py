"""Random prompts against the real llama-cpp-python server: the server counts exactly what we built.

For each prompt, a non-streamed chat request's ``usage.prompt_tokens`` must equal ``input_len`` plus
the chat template's overhead (llama-cpp-python 0.3.x reports usage only on non-streamed replies).
"""

from __future__ import annotations

import asyncio

import pytest

from inferencekit.api.client import Client
from inferencekit.api.dialects import dialect
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.tokenize import EngineTokenizer
from inferencekit.data.random_prompts import chat_template_overhead, random_prompts

pytestmark = pytest.mark.engine

LENGTHS = (16, 100, 333)
PER_LENGTH = 3

# SmolLM2-135M-Instruct's chat template (GGUF tokenizer.chat_template), for one user message:
#   <|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n
#   <|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n
# 5 special tokens (3 × <|im_start|>, 2 × <|im_end|>) and these plain segments around the content:
TEMPLATE_TEXT = ("system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face", "\n", "user\n",
                 "\n", "assistant\n")
TEMPLATE_SPECIALS = 5


def test_prompt_tokens_match_exactly(embedded_engine) -> None:
    async def go() -> tuple[int, int, dict[int, list[tuple[str, int]]], dict[int, list[int]]]:
        async with Client(Endpoint.parse(embedded_engine.url), timeout_s=300) as c:
            tok = EngineTokenizer(c, dialect("llama-cpp-python"))
            overhead = await chat_template_overhead(c, embedded_engine.model_name, tok)
            by_hand = TEMPLATE_SPECIALS + sum([len(await tok.encode(t)) for t in TEMPLATE_TEXT])
            counted: dict[int, list[tuple[str, int]]] = {}
            firsts: dict[int, list[int]] = {}
            for n_in in LENGTHS:
                prompts = await random_prompts(PER_LENGTH, n_in, seed=11, tokenizer=tok)
                counted[n_in] = []
                firsts[n_in] = []
                for p in prompts:
                    body = {"model": embedded_engine.model_name, "messages": list(p.messages), "max_tokens": 1,
                            "stream": False}
                    reply, err = await c.post_json("/v1/chat/completions", body, timeout_s=300)
                    assert err is None, err
                    counted[n_in].append((p.id, reply["usage"]["prompt_tokens"]))
                    firsts[n_in].append((await tok.encode(p.messages[0]["content"]))[0])
            return overhead, by_hand, counted, firsts

    overhead, by_hand, counted, firsts = asyncio.run(go())
    assert overhead == by_hand  # 5 specials + 18 + 1 + 2 + 1 + 3 plain tokens = 30 for SmolLM2
    for n_in in LENGTHS:
        assert counted[n_in] == [(f"random-{n_in}-{i}", n_in + overhead) for i in range(PER_LENGTH)]
        assert len(set(firsts[n_in])) == PER_LENGTH  # no two prompts of a set share their first token
