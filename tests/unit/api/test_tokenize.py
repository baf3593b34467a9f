"""The engine's tokenizer endpoint, against a real loopback HTTP server that adds BOS (tests/fault_server.py)."""

from __future__ import annotations

import asyncio

from inferencekit.api.client import Client
from inferencekit.api.dialects import dialect
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.tokenize import EngineTokenizer
from inferencekit.gates.probes.collect import retokenize_probes
from tests.fault_server import fault_server


def test_the_bos_the_endpoint_prepends_is_not_counted():
    # failed before 18: llama-cpp-python's /extras/tokenize prepends BOS, so "ab" counted 3 tokens against usage 2
    async def go(url):
        async with Client(Endpoint.parse(url)) as c:
            tok = EngineTokenizer(c, dialect("llama-cpp-python"))
            return await tok.encode("ab"), await tok.encode("xyz")

    with fault_server() as (url, _):
        ab, xyz = asyncio.run(go(url))
    assert ab == [1097, 1098] and len(xyz) == 3


def test_a_refused_retokenization_is_recorded_not_silently_empty():
    # failed before 18: a 422 from the tokenizer left the counts missing with nothing said
    def probe(i, text):
        return {"id": f"p{i}", "kind": "count", "reply": {"status": 200, "text": text}}

    async def go(url):
        async with Client(Endpoint.parse(url)) as c:
            return await retokenize_probes(EngineTokenizer(c, dialect("llama-cpp-python")),
                                           [probe(0, "ok"), probe(1, "422")])

    with fault_server() as (url, _):
        counts, errors = asyncio.run(go(url))
    assert counts == {"p0": 2}
    assert errors["n"] == 1 and errors["of"] == 2 and errors["first"].startswith("p1: ")
