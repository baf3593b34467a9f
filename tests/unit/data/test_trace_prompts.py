"""A trace's prompts (data/trace_prompts.py) on a tokenizer whose counts are known by construction: token-exact
lengths, shared blocks byte-identical, exact repeats made unique unless kept, and a merge refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from inferencekit.bench.plan import Planner
from inferencekit.data.trace_prompts import trace_prompts
from inferencekit.data.traces import load_trace
from inferencekit.errors import OpError
from tests.unit.data.test_random_prompts import PieceTokenizer

ROWS = [(0, 40, 4, [0, 1, 2]), (300, 49, 5, [0, 1, 3, 4]), (600, 40, 6, [0, 1, 2]), (900, 20, 7, [5, 6])]


def _trace(tmp_path: Path, rows=ROWS):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                         for t, i, o, h in rows))
    return load_trace(f, "mooncake", block_size=16)


def _words(p) -> list[str]:
    return p.messages[0]["content"].split()


def test_prompts_are_token_exact_share_their_blocks_and_repeats_are_made_unique(tmp_path: Path) -> None:
    tok = PieceTokenizer()
    prompts, desc = asyncio.run(trace_prompts(_trace(tmp_path), seed=7, tokenizer=tok))
    assert [p.id for p in prompts] == ["trace-00000", "trace-00001", "trace-00002", "trace-00003"]
    assert [p.max_tokens for p in prompts] == [4, 5, 6, 7]
    for p, (_, n, _, _) in zip(prompts, ROWS):
        assert len(asyncio.run(tok.encode(p.messages[0]["content"]))) == n
    a, b, c, d = map(_words, prompts)
    assert a[:32] == b[:32] and a[32] != b[32]  # blocks 0 and 1 shared, block 2 vs 3 differ
    assert a[:39] == c[:39] and a[39] != c[39]  # an exact repeat: its last word changed
    assert not set(d[:1]) & {a[0]}  # a row sharing no id shares no first word
    assert (desc["repeats_made_unique"], desc["repeats_kept"], desc["requests"]) == (1, 0, 4)
    kept, desc = asyncio.run(trace_prompts(_trace(tmp_path), seed=7, tokenizer=tok, keep_repeats=True))
    assert _words(kept[0]) == _words(kept[2]) and desc["repeats_kept"] == 1
    other, _ = asyncio.run(trace_prompts(_trace(tmp_path), seed=8, tokenizer=tok))
    assert _words(other[0]) != a  # another run's nonce, other words: nothing shared with the first run


def test_a_tokenizer_whose_words_do_not_add_up_is_refused(tmp_path: Path) -> None:
    class Long(PieceTokenizer):  # one token more for any text of ≥ 30 words
        async def encode(self, text: str) -> list[int]:
            ids = await super().encode(text)
            return ids + [1] if len(self.pieces(text)) >= 30 else ids

    with pytest.raises(OpError, match=r"3 of 4 trace prompts do not count as their rows' input lengths \(e\.g\. "
                                      r"line 1"):
        asyncio.run(trace_prompts(_trace(tmp_path), seed=1, tokenizer=Long()))


def test_a_replay_draws_its_prompts_in_trace_order(tmp_path: Path) -> None:
    prompts, _ = asyncio.run(trace_prompts(_trace(tmp_path), seed=7, tokenizer=PieceTokenizer()))
    pl = Planner(prompts, seed=3, salt_first_use=False, in_order=True)
    reqs = [pl.take() for _ in range(4)]
    assert [r.key for r in reqs] == [p.id for p in prompts] and all(r.salt is None for r in reqs)
