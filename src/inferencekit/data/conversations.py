"""Synthetic multi-turn sessions (``bench serve --dataset conversations --turns T --input-len N``).

A chat product's traffic is conversations whose history grows: turn k is sent with every earlier user message and
the model's *own* replies to them (``bench/runner.py`` builds each turn's messages from the replies it received, not
from a dataset's recorded answers), so what a prefix cache may reuse is exactly the conversation so far, the reuse
the workload intends. Each session here is T user messages of exactly N tokens each (``random_prompts``: token-exact,
no two starting with the same token, drawn per run with the run's nonce), so every new user turn is new text and
nothing is shared between sessions. AIPerf and GuideLLM run multi-turn sessions likewise (a session is a unit of
concurrency; the next turn waits for the previous reply and an optional think time).
"""

from __future__ import annotations

from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.data.random_prompts import random_prompts
from inferencekit.errors import OpError

__all__ = ["conversation_prompts"]


async def conversation_prompts(sessions: int, turns: int, input_len: int, *, seed: int, tokenizer: Tokenizer,
                               max_tokens: int | None = None) -> list[Prompt]:
    """``sessions`` sessions of ``turns`` user messages of ``input_len`` tokens each.

    Returns:
        One Prompt per session, id ``conv-<s>``, bucket ``conv``: its first user message as ``messages`` and the
        later ones as ``followups`` (``turns - 1`` texts), ``max_tokens`` as given (None: the caller's).

    Raises:
        OpError: bad counts, or what ``random_prompts`` raises (too many sessions × turns to start differently).
        TokenizeError: the tokenizer failed.
    """
    for name, v in (("sessions", sessions), ("--turns", turns), ("--input-len", input_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise OpError(f"conversations: {name} must be a positive integer, got {v!r}")
    flat = await random_prompts(sessions * turns, input_len, seed=seed, tokenizer=tokenizer, bucket="conv")
    texts = [str((p.messages or ({},))[0]["content"]) for p in flat]
    out = []
    for s in range(sessions):
        mine = texts[s * turns:(s + 1) * turns]
        out.append(Prompt(id=f"conv-{s:04d}", bucket="conv", messages=({"role": "user", "content": mine[0]},),
                          max_tokens=max_tokens, followups=tuple(mine[1:])))
    return out
