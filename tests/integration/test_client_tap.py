"""The streamed-reply reader (api/h1.py) and aiohttp's ``readany()`` loop give the same reply from a real engine.

Greedy requests to the embedded engine (llama-cpp-python), each sent once through a client whose streamed POSTs go
through api/h1.py (``tap=True``, the default) and once through aiohttp (``tap=False``): the SSE events (payloads
in order, less each completion's id and creation time), the text and the finish reason must be identical, and every
stamp must lie between the send and the end. Timings themselves are not compared (they differ by nature).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint

pytestmark = pytest.mark.engine

PROMPTS = ["Name three colours.", "What is 2 + 2? Answer in one sentence.", "Write a haiku about rain."]


def _replies(url: str, tap: bool) -> list[dict]:
    async def main() -> list[dict]:
        async with Client(Endpoint.parse(url), timeout_s=300, tap=tap) as c:
            out = []
            for p in PROMPTS:
                body = {"model": "smollm2", "messages": [{"role": "user", "content": p}], "max_tokens": 48,
                        "temperature": 0.0, "stream": True}
                out.append((await c.post("/v1/chat/completions", body)).to_reply())
            return out

    return asyncio.run(main())


def _content(reply: dict) -> list:
    """Each event's payload without what differs per request (the completion id and its creation second)."""
    out = []
    for _t, p in reply["events"]:
        ev = p if p == "[DONE]" else json.loads(p)
        out.append(ev if isinstance(ev, str) else {k: v for k, v in ev.items() if k not in ("id", "created")})
    return out


def test_tapped_and_readany_reads_give_the_same_reply(embedded_engine) -> None:
    tapped, plain = _replies(embedded_engine.url, True), _replies(embedded_engine.url, False)
    for a, b in zip(tapped, plain):
        assert "error" not in a and "error" not in b
        assert _content(a) == _content(b)
        assert a["text"] == b["text"] and a["text"] and a["finish_reason"] == b["finish_reason"]
        times = [t for t, _p in a["events"]]
        assert times == sorted(times) and times[0] >= 0
