"""bench serve's re-tokenizing of a level's replies (``bench/serve.py``): a tokenizer's refusal is kept, not dropped."""

from __future__ import annotations

import asyncio

from inferencekit.api.tokenize import TokenizeError
from inferencekit.bench.serve import _retokenize


class RefusingTokenizer:
    """Counts one token per word; refuses (as an HTTP 422 from ``/tokenize`` would) any text with a "ü"."""

    source = "engine:test/tokenize"

    async def encode(self, text: str) -> list[int]:
        if "ü" in text:
            raise TokenizeError("HTTP 422: Unprocessable Entity")
        return list(range(len(text.split())))

    async def decode(self, ids: list[int]) -> str:
        return ""


def test_a_refused_text_is_recorded_by_its_request_and_the_others_are_counted():
    replies = [{"_key": "p0", "status": 200, "text": "one two three"},
               {"_key": "p1", "status": 200, "text": "grün"},
               {"_key": "p2", "status": 500, "error": "HTTP 500", "text": "ü"}]  # a failed reply is not tried
    counts, errors = asyncio.run(_retokenize(RefusingTokenizer(), replies))
    assert counts == {"p0": 3}
    assert errors == {"p1": "HTTP 422: Unprocessable Entity"}
