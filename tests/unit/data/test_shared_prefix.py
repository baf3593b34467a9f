"""Shared-prefix prompts (data/shared_prefix.py), the salt after the prefix (bench/plan.py) and the record's
first-vs-later block (bench/shared_prefix_judge.py), on tokenizers whose counts are known by construction."""

from __future__ import annotations

import asyncio

import pytest

from inferencekit.bench.plan import SALT_PATTERN, PlannedRequest, request_body
from inferencekit.bench.shared_prefix_judge import cached_tokens, shared_prefix_block
from inferencekit.data.random_prompts import random_prompts
from inferencekit.data.shared_prefix import shared_prefix_prompts
from inferencekit.errors import OpError
from tests.unit.data.test_random_prompts import PieceTokenizer


class JointTokenizer(PieceTokenizer):
    """Like PieceTokenizer, but a text of more than 10 words costs one token less: the joined prompts here (8 + 7
    words) merge somewhere, as a real BPE may across the joint, while the prefixes and texts alone (≤ 8) do not."""

    async def encode(self, text: str) -> list[int]:
        ids = await super().encode(text)
        return ids[:-1] if len(self.pieces(text)) > 10 else ids


def _prompts(tok: PieceTokenizer, n: int = 6, input_len: int = 7):
    return asyncio.run(random_prompts(n, input_len, seed=3, tokenizer=tok))


def test_each_prompt_is_its_groups_prefix_then_its_own_text_and_counts_exactly() -> None:
    tok = PieceTokenizer()
    own = _prompts(tok)
    out = asyncio.run(shared_prefix_prompts(own, tokens=12, groups=2, seed=5, tokenizer=tok))
    assert [p.id for p in out] == [p.id for p in own] and [p.shared_prefix_id for p in out] == ["g0", "g1"] * 3
    heads = {}
    for p, o in zip(out, own):
        text, tail = p.messages[0]["content"], o.messages[0]["content"]
        head = text[:p.shared_prefix_chars]
        assert text == head + tail and head.endswith(" ")
        assert heads.setdefault(p.shared_prefix_id, head) == head  # one prefix per group, byte-identical
        assert len(asyncio.run(tok.encode(head.rstrip(" ")))) == 12
        assert len(asyncio.run(tok.encode(text))) == 12 + 7
    assert heads["g0"] != heads["g1"] and heads["g0"].split()[0] != heads["g1"].split()[0]


def test_bad_arguments_and_a_merge_across_the_joint_are_refused() -> None:
    tok = PieceTokenizer()
    own = _prompts(tok, n=3)
    with pytest.raises(OpError, match="--prefix-groups 4 is more than the 3 prompts"):
        asyncio.run(shared_prefix_prompts(own, tokens=8, groups=4, seed=1, tokenizer=tok))
    with pytest.raises(OpError, match="--shared-prefix-tokens must be a positive integer"):
        asyncio.run(shared_prefix_prompts(own, tokens=0, groups=1, seed=1, tokenizer=tok))
    joint = JointTokenizer()
    with pytest.raises(OpError, match=r"do not count as the sum of their parts \(e\.g\. random-7-0: "):
        asyncio.run(shared_prefix_prompts(_prompts(joint, n=3), tokens=8, groups=1, seed=1, tokenizer=joint))


def test_a_reuse_tag_goes_after_the_shared_prefix() -> None:
    tok = PieceTokenizer()
    p = asyncio.run(shared_prefix_prompts(_prompts(tok, n=2), tokens=10, groups=1, seed=2, tokenizer=tok))[0]
    body = request_body(PlannedRequest(p.id + "~1", p, "ik-0011223344556677"), model="m", max_tokens=4)
    text = body["messages"][0]["content"]
    head = p.messages[0]["content"][:p.shared_prefix_chars]
    assert text.startswith(head) and SALT_PATTERN.match(text[len(head):])
    assert text == head + "[ik-0011223344556677] " + p.messages[0]["content"][len(head):]


def _reply(g: str, sent: int, ttft: float, cached: int | None = None, **kw) -> dict:
    r = {"shared_prefix_id": g, "sent_ns": sent, "status": 200, "ttft_ms": ttft, **kw}
    if cached is not None:
        r["usage"] = {"prompt_tokens": 600, "prompt_tokens_details": {"cached_tokens": cached}}
    return r


def test_first_request_of_each_group_against_the_later_ones() -> None:
    replies = [_reply("g0", 10, 900.0, 24), _reply("g1", 20, 1100.0, 24), _reply("g0", 30, 200.0, 536),
               _reply("g1", 40, 300.0, 536), _reply("g0", 50, 250.0, 536),
               _reply("g2", 60, 400.0, server_timings={"cache_n": 530}),  # warmed up by the warm-up request below
               {"shared_prefix_id": "g1", "sent_ns": 70, "status": 0, "error": "connection failed"}]
    out = shared_prefix_block(replies, tokens=512, groups=3, warmup=[{"shared_prefix_id": "g2", "sent_ns": 5}])
    assert out is not None and out["groups_seen"] == 3 and out["groups_warmed_up"] == 1
    assert out["first"]["n"] == 2 and out["first"]["ttft_ms"]["p50"] == 1000.0
    assert out["later"]["n"] == 5 and out["later"]["completed"] == 4 and out["later"]["ttft_ms"]["p50"] == 275.0
    assert out["ttft_p50_ratio_later_over_first"] == 0.275
    assert out["first"]["cached_tokens"]["p50"] == 24 and out["later"]["cached_tokens"]["p50"] == 536
    assert out["cached_source"] == ["timings.cache_n", "usage.prompt_tokens_details.cached_tokens"]
    assert shared_prefix_block([{"sent_ns": 1, "status": 200, "ttft_ms": 1.0}], tokens=1, groups=1) is None


def test_cached_tokens_of_the_wrong_type_are_not_reported() -> None:
    assert cached_tokens({"usage": {"prompt_tokens_details": {"cached_tokens": "536"}}}) == (None, None)
    assert cached_tokens({"usage": {"prompt_tokens_details": {"cached_tokens": True}}}) == (None, None)
    assert cached_tokens({"usage": None, "server_timings": {"cache_n": -1}}) == (None, None)
    assert cached_tokens({"usage": {"prompt_tokens_details": None}, "server_timings": {"cache_n": 7}}) == \
        (7, "timings.cache_n")
