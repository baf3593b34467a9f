"""Multi-turn sessions: their prompts (data/conversations.py), the resume count of their turn files (bench/plan.py)
and the record's by-turn block (bench/sessions_judge.py), on a tokenizer whose counts are known by construction."""

from __future__ import annotations

import asyncio

import pytest

from inferencekit.bench.plan import Planner
from inferencekit.bench.sessions_judge import conversation_block
from inferencekit.data.conversations import conversation_prompts
from inferencekit.errors import OpError
from tests.unit.data.test_random_prompts import PieceTokenizer


def test_sessions_are_turns_of_token_exact_unique_user_messages() -> None:
    tok = PieceTokenizer()
    ps = asyncio.run(conversation_prompts(3, 4, 9, seed=2, tokenizer=tok, max_tokens=16))
    assert [p.id for p in ps] == ["conv-0000", "conv-0001", "conv-0002"]
    texts = [t for p in ps for t in (p.messages[0]["content"], *p.followups)]
    assert all(len(p.followups) == 3 and p.max_tokens == 16 and p.bucket == "conv" for p in ps)
    assert len(texts) == 12 and len({t.split()[0] for t in texts}) == 12  # no two turns start alike
    assert all(len(asyncio.run(tok.encode(t))) == 9 for t in texts)
    with pytest.raises(OpError, match="--turns must be a positive integer"):
        asyncio.run(conversation_prompts(3, 0, 9, seed=2, tokenizer=tok))


def test_a_resumed_run_counts_a_session_once_whatever_turns_it_wrote() -> None:
    ps = asyncio.run(conversation_prompts(3, 2, 5, seed=1, tokenizer=PieceTokenizer()))
    pl = Planner(ps, seed=4, salt_first_use=False)
    first = pl.take()
    again = Planner(ps, seed=4, salt_first_use=False)
    again.restore([f"{first.key}.t1", f"{first.key}.t2"])
    assert again.used[first.key] == 1 and again.take().key != first.key


def _r(session: str, turn: int, ttft: float, prompt: int, cached: int | None, status: int = 200) -> dict:
    usage = {"prompt_tokens": prompt, **({"prompt_tokens_details": {"cached_tokens": cached}} if cached is not None
                                         else {})}
    return {"session_id": session, "turn": turn, "status": status, "ttft_ms": ttft, "usage": usage}


def test_the_by_turn_block() -> None:
    rs = [_r("a", 1, 500.0, 54, 24), _r("a", 2, 300.0, 101, 65), _r("a", 3, 250.0, 300, 112),
          _r("b", 1, 700.0, 54, 24), _r("b", 2, 400.0, 101, 65), {"session_id": "b", "turn": 3, "status": 0},
          {"status": 200, "ttft_ms": 1.0}]  # a reply outside any session is not counted
    out = conversation_block(rs, turns=3, think_time_s=0.5)
    assert out is not None and out["sessions"] == {"started": 2, "completed": 1, "turns_sent": 6, "turns_planned": 6}
    assert out["source"] == "synthetic"
    assert out["by_turn"]["1"]["ttft_ms"]["p50"] == 600.0 and out["by_turn"]["2"]["cached_tokens"]["p50"] == 65
    assert (out["by_turn"]["3"]["n"], out["by_turn"]["3"]["completed"]) == (2, 1)
    assert [(b["prompt_tokens_from"], b["n"]) for b in out["by_history"]] == [(0, 4), (256, 1)]
    assert conversation_block([{"status": 200}], turns=3, think_time_s=0) is None
