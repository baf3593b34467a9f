"""The appliance collector's re-tokenized counts (``bench/appliance_collect.py``): a tokenizer's refusal is kept,
by reply file, and the receipt's limitation names the requests."""

from __future__ import annotations

import asyncio

from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import TokenizeError, refused_texts_note
from inferencekit.bench.appliance_collect import Collector
from inferencekit.rundir import RunDir


class RefusingTokenizer:
    source = "engine:llama-server/tokenize"

    async def encode(self, text: str) -> list[int]:
        if "ü" in text:
            raise TokenizeError("HTTP 422: Unprocessable Entity")
        return [1] * len(text.split())

    async def decode(self, ids: list[int]) -> str:
        return ""


def test_a_refused_text_is_kept_by_its_reply_file_and_stated(tmp_path):
    info = EngineInfo("llama-server", "b1", ["m"], "m")
    # the collector sends nothing here: no client, no settings
    col = Collector(None, info, RunDir.create(tmp_path / "r"), RefusingTokenizer(), {}, None,  # type: ignore[arg-type]
                    "cid", lambda _: None)
    rel_ok = "outputs/llama-server/appliance-decode/chat/run1.json"
    rel_bad = "outputs/llama-server/appliance-decode/chat/run2.json"
    assert asyncio.run(col._retokenized("two words", rel_ok)) == 2
    assert asyncio.run(col._retokenized("grün", rel_bad)) is None
    assert col.retokenize_errors == {rel_bad: "HTTP 422: Unprocessable Entity"}
    note = refused_texts_note(col.tok.source, col.retokenize_errors)  # type: ignore[union-attr]
    assert note == ("the tokenizer (engine:llama-server/tokenize) refused 1 reply text(s), so their re-tokenized "
                    f"counts are missing (requests: {rel_bad}; first error: HTTP 422: Unprocessable Entity)")
    assert refused_texts_note("t", {}) is None
