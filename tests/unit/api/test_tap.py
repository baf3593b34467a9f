"""Cutting a streamed body at its reads (api/tap.py ``cut``), and the Exchange forms it feeds.

A recorded llama-server stream (tests/fixtures/replies) is replayed as if it had arrived in reads of uneven
sizes: cutting must give back exactly the bytes and times a ``readany()`` loop would have kept, the journal's
array form (``raw_chunks``) must match the cut form (``settle``), and a journal record must round-trip both.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import numpy as np

from inferencekit.api.client import Exchange
from inferencekit.api.tap import cut
from inferencekit.bench.journal import encode_record, read_journal
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "replies"


def recorded_body() -> bytes:
    """The SSE body of a real streamed reply (every event as the engine sent it)."""
    rec = json.loads((FIXTURES / "llama-server" / "chat_stream.json").read_text())
    events = rec["events"]
    assert len(events) > 10
    return b"".join(f"data: {payload}\n\n".encode() for _t, payload in events)


def split_reads(body: bytes, sizes: list[int]) -> tuple[array, array, list[tuple[int, bytes]]]:
    """Reads of the given sizes (cycled): their times, the offsets after each, and the chunks readany() keeps."""
    times, offsets, chunks = array("q"), array("q"), []
    pos, t, i = 0, 1_000, 0
    while pos < len(body):
        n = sizes[i % len(sizes)]
        i += 1
        t += 250
        times.append(t)
        if n == 0:  # a read that delivered only framing: the offset does not move
            offsets.append(pos)
            continue
        chunks.append((t, body[pos:pos + n]))
        pos = min(len(body), pos + n)
        offsets.append(pos)
    return times, offsets, chunks


def test_cut_gives_back_the_reads_bytes_and_times() -> None:
    body = recorded_body()
    times, offsets, expected = split_reads(body, [7, 0, 300, 1, 0, 0, 45])
    got = cut(body, 0, times, offsets)
    assert got == expected
    assert b"".join(c for _t, c in got) == body


def test_cut_from_a_start_offset_skips_what_came_with_the_headers() -> None:
    body = recorded_body()
    start = 40
    times, offsets, expected = split_reads(body[start:], [64, 0, 128])
    offsets = array("q", (o + start for o in offsets))
    assert cut(body[start:], start, times, offsets) == expected


def test_settle_and_raw_chunks_agree_and_the_journal_keeps_them(tmp_path: Path) -> None:
    body = recorded_body()
    first = (500, body[:30])
    times, offsets, expected = split_reads(body[30:], [90, 0, 17])
    offsets = array("q", (o + 30 for o in offsets))
    ex = Exchange(request_id="r1", path="/v1/chat/completions", body={"stream": True}, sent_ns=400, status=200,
                  content_type="text/event-stream", chunks=[first], pending=(body[30:], 30, times, offsets))
    t, n, payload = ex.raw_chunks()
    assert payload == body and int(n.sum()) == len(body)
    assert list(t) == [first[0]] + [c[0] for c in expected]
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(encode_record("k", "short", {"id": "p"}, ex))
    (rec,), torn = read_journal(journal)
    assert torn == 0
    settled = ex.settle()
    assert ex.pending is None and settled == [first, *expected]
    assert rec["exchange"].chunks == settled
    assert ex.to_reply()["events"] == rec["exchange"].to_reply()["events"]


def test_raw_chunks_of_an_untapped_exchange() -> None:
    ex = Exchange(request_id="r", path="/x", body={}, sent_ns=0, chunks=[(5, b"ab"), (9, b"\n\xff")])
    t, n, payload = ex.raw_chunks()
    assert np.array_equal(t, [5, 9]) and np.array_equal(n, [2, 2]) and payload == b"ab\n\xff"
