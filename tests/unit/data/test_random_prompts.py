"""Token-exact random prompts against small tokenizers whose counts are known by construction.

``PieceTokenizer`` splits a text into GPT-2-like pieces (an optional leading space plus a word);
a piece costs one token per started 5 letters, so a word of ≤ 5 letters is one token and
"shoulder" (8 letters) is two. Variants break additivity in known ways.
"""

from __future__ import annotations

import asyncio
import math
import re

import pytest

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.random_prompts import WORDS, chat_template_overhead, random_prompts, word_vocabulary
from inferencekit.engines.launcher import free_port
from inferencekit.errors import OpError

_PIECE = re.compile(r" ?[^ \n]+|\n")


class PieceTokenizer:
    source = "test:pieces"

    def __init__(self) -> None:
        self.calls = 0
        self._ids: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        return self._ids.setdefault(piece, len(self._ids) + 10)

    def pieces(self, text: str) -> list[str]:
        return _PIECE.findall(text)

    def cost(self, piece: str) -> int:
        return max(1, math.ceil(len(piece.strip(" ")) / 5))

    async def encode(self, text: str) -> list[int]:
        self.calls += 1
        out: list[int] = []
        for p in self.pieces(text):
            out += [self._id(p)] + [self._id(f"{p}#{k}") for k in range(1, self.cost(p))]
        return out

    async def decode(self, ids: list[int]) -> str:
        raise NotImplementedError


class MergingTokenizer(PieceTokenizer):
    """A piece " s..." glues onto the piece before it (a merge across a space): 0 tokens there."""

    def pieces(self, text: str) -> list[str]:
        out: list[str] = []
        for p in super().pieces(text):
            if out and p.startswith(" s"):
                out[-1] += p
            else:
                out.append(p)
        return out

    def cost(self, piece: str) -> int:
        return 1


class SuffixTokenizer(PieceTokenizer):
    """One token per word, plus one extra token for any text of ≥ 2 words: 1, 3, 4, 5, ... never 2."""

    async def encode(self, text: str) -> list[int]:
        ids = await super().encode(text)
        return ids + [1] if len(self.pieces(text)) >= 2 else ids


class FewFirstsTokenizer(PieceTokenizer):
    """A bare word at the start costs 2 tokens unless it starts with "a" or "b"."""

    async def encode(self, text: str) -> list[int]:
        ids = await super().encode(text)
        if text and not text.startswith((" ", "\n")) and text[0] not in "ab":
            ids = [2] + ids
        return ids


class CharTokenizer(PieceTokenizer):
    """One token per character: no word is a single token."""

    async def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [ord(c) for c in text]


def _content(p) -> str:
    return p.messages[0]["content"]


def _run(coro):
    return asyncio.run(coro)


def test_vocabulary_keeps_single_token_words_in_list_order() -> None:
    tok = PieceTokenizer()
    vocab = _run(word_vocabulary(tok))
    assert "cat" in vocab and "house" in vocab  # 3 and 5 letters: one token
    assert "shoulder" not in vocab and "mountain" not in vocab and "machine" not in vocab  # 8, 8, 7: two
    assert all(len(w) <= 5 for w in vocab)
    assert vocab == sorted(vocab, key=WORDS.index)
    # 764 words in groups of 64 → 12 group requests, plus halvings down to every 6+ letter word
    assert tok.calls > 12


@pytest.mark.parametrize("input_len", [1, 2, 7, 64])
def test_prompts_are_exact_and_start_differently(input_len: int) -> None:
    tok = PieceTokenizer()
    prompts = _run(random_prompts(20, input_len, seed=3, tokenizer=tok))
    assert [p.id for p in prompts] == [f"random-{input_len}-{i}" for i in range(20)]
    for p in prompts:
        words = _content(p).split(" ")
        assert len(words) == input_len  # every vocabulary word is one token here
        assert all(len(w) <= 5 for w in words)
        assert p.bucket == "random" and p.max_tokens is None and p.messages[0]["role"] == "user"
    assert len({_content(p).split(" ")[0] for p in prompts}) == 20  # 20 different first words


def test_same_seed_same_prompts_other_seed_or_length_other_prompts() -> None:
    a = [_content(p) for p in _run(random_prompts(5, 12, seed=7, tokenizer=PieceTokenizer()))]
    b = [_content(p) for p in _run(random_prompts(5, 12, seed=7, tokenizer=PieceTokenizer()))]
    c = [_content(p) for p in _run(random_prompts(5, 12, seed=8, tokenizer=PieceTokenizer()))]
    d = [_content(p) for p in _run(random_prompts(5, 13, seed=7, tokenizer=PieceTokenizer()))]
    assert a == b
    assert a != c
    # a different length is seeded differently: no prompt of 13 extends one of 12
    assert not any(y.startswith(x) for x in a for y in d)


def test_repair_adds_words_when_tokens_merge() -> None:
    tok = MergingTokenizer()
    prompts = _run(random_prompts(10, 50, seed=1, tokenizer=tok))
    extra = 0
    for p in prompts:
        words = _content(p).split(" ")
        merged = sum(1 for w in words[1:] if w.startswith("s"))  # each costs 0 tokens after a word
        assert len(words) - merged == 50
        assert len(_run(tok.encode(_content(p)))) == 50
        extra += merged
    assert extra > 0  # ~8% of the words start with "s": the repair did work


def test_impossible_length_is_an_error_and_a_possible_one_is_trimmed() -> None:
    with pytest.raises(OpError, match="exactly 2 tokens"):
        _run(random_prompts(3, 2, seed=0, tokenizer=SuffixTokenizer()))
    prompts = _run(random_prompts(3, 5, seed=0, tokenizer=SuffixTokenizer()))
    assert [len(_content(p).split(" ")) for p in prompts] == [4, 4, 4]  # 4 words + 1 suffix token = 5


def test_more_prompts_than_first_words_use_distinct_pairs() -> None:
    tok = FewFirstsTokenizer()
    n = 100  # more than the ≤ 5-letter words starting with a or b
    firsts = {w for w in WORDS if w[0] in "ab" and len(w) <= 5}
    assert len(firsts) < n
    prompts = _run(random_prompts(n, 6, seed=2, tokenizer=tok))
    heads = [tuple(_content(p).split(" ")[:2]) for p in prompts]
    assert len(set(heads)) == n
    assert {h[0] for h in heads} <= firsts
    assert all(len(_run(tok.encode(_content(p)))) == 6 for p in prompts)
    with pytest.raises(OpError, match=rf"at most {len(firsts)} prompts of 1 tokens .* asked for {n}"):
        _run(random_prompts(n, 1, seed=2, tokenizer=tok))


def test_tokenizer_without_single_token_words_is_refused() -> None:
    with pytest.raises(OpError, match="only 0 of 764 common English words"):
        _run(random_prompts(1, 8, seed=0, tokenizer=CharTokenizer()))


def test_bad_arguments() -> None:
    tok = PieceTokenizer()
    for n, length in ((0, 5), (5, 0), (True, 5), (2, 1.5)):
        with pytest.raises(OpError, match="positive integer"):
            _run(random_prompts(n, length, seed=0, tokenizer=tok))  # type: ignore[arg-type]
    with pytest.raises(OpError, match="safe name"):
        _run(random_prompts(1, 5, seed=0, tokenizer=tok, bucket="a b"))
    with pytest.raises(OpError, match="max_tokens"):
        _run(random_prompts(1, 5, seed=0, tokenizer=tok, max_tokens=0))
    p = _run(random_prompts(2, 5, seed=0, tokenizer=tok, bucket="prefill", max_tokens=32))
    assert [(x.id, x.bucket, x.max_tokens) for x in p] == [("prefill-5-0", "prefill", 32),
                                                           ("prefill-5-1", "prefill", 32)]


def test_overhead_names_a_failed_request() -> None:
    async def go() -> None:
        async with Client(Endpoint.parse(f"http://127.0.0.1:{free_port()}"), timeout_s=10) as c:
            await chat_template_overhead(c, "m", PieceTokenizer())

    with pytest.raises(OpError, match="chat request failed: connection failed"):
        _run(go())
