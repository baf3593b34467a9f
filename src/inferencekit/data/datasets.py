"""Resolve ``--dataset``: a static prompt set (``dev`` or a JSONL file, validated before any request)
or a dataset built against the server (``sharegpt`` lengths, ``random`` token-exact prompts)."""

from __future__ import annotations

from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["DYNAMIC", "load_static", "build_dynamic"]

DYNAMIC = ("sharegpt", "random", "conversations")


def load_static(dataset: str) -> tuple[list[Prompt], dict[str, Any]] | None:
    """Prompts and description for ``dev`` or a file; None for a dynamic dataset (``sharegpt`` checked here, before any
    request, to be installed).

    Raises:
        OpError: unreadable or invalid file (``path:line``); ``sharegpt`` without the ``sharegpt`` extra.
    """
    if dataset == "sharegpt":
        require_extra("sharegpt", "--dataset sharegpt")
    if dataset in DYNAMIC:
        return None
    ps = load_prompt_set(dataset)
    return list(ps.prompts), ps.describe()


async def build_dynamic(dataset: str, *, n: int, seed: int, tokenizer: Tokenizer | None, client: Client,
                        input_len: int | None, max_tokens: int | None, turns: int = 4,
                        conversation_source: str = "synthetic") -> tuple[list[Prompt], dict[str, Any]]:
    """Build ``n`` prompts of a dynamic dataset with the server's tokenizer (``conversations``: ``n`` sessions of at
    most ``turns`` turns, synthetic or from ShareGPT's multi-turn records as ``conversation_source`` says).

    Raises:
        OpError: no tokenizer for ``random`` or synthetic conversations, a missing ``--input-len``, or the ShareGPT
            package missing.
    """
    if dataset == "random":
        from inferencekit.data.random_prompts import random_prompts

        if not input_len:
            raise OpError("--dataset random needs --input-len (prompt tokens)")
        if tokenizer is None:
            raise OpError("--dataset random needs a tokenizer: this engine has no tokenize endpoint; pass --tokenizer")
        prompts = await random_prompts(n, input_len, seed=seed, tokenizer=tokenizer)
        return prompts, {"name": "random", "input_len": input_len, "count": len(prompts), "tokenizer": tokenizer.source}
    if dataset == "conversations" and conversation_source == "sharegpt":
        from inferencekit.data.sharegpt_sessions import sharegpt_sessions

        return await sharegpt_sessions(n, turns, seed=seed, tokenizer=tokenizer)
    if dataset == "conversations":
        from inferencekit.data.conversations import conversation_prompts

        if not input_len:
            raise OpError("--dataset conversations needs --input-len (tokens per user turn)")
        if tokenizer is None:
            raise OpError("--dataset conversations needs a tokenizer: this engine has no tokenize endpoint; pass "
                          "--tokenizer")
        prompts = await conversation_prompts(n, turns, input_len, seed=seed, tokenizer=tokenizer)
        return prompts, {"name": "conversations", "sessions": len(prompts), "turns": turns, "input_len": input_len,
                         "tokenizer": tokenizer.source}
    if dataset == "sharegpt":
        from inferencekit.data.sharegpt import load_sharegpt

        prompts, desc = await load_sharegpt(n, seed=seed, tokenizer=tokenizer, fixed_output_len=max_tokens)
        return prompts, desc
    raise OpError(f"unknown dataset {dataset!r}")
