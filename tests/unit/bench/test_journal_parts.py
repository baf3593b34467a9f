"""A long streamed reply written to the level's journal in parts while it streams, and read back whole.

Over a real loopback socket (api/h1.py reads it): the reply that streamed into ``Journal.parts`` comes back from the
journal as the same reply as one held whole; a stream that breaks after some parts went out says how many chunks
came, as the client says it for one held whole; the reader drops parts nobody claimed and skips a record whose parts
are missing. The runner gives a sink to plain load requests and none to a session's turns (read at once).
"""

from __future__ import annotations

import asyncio
import re
from array import array
from typing import Any

import pytest

from inferencekit import redact
from inferencekit.api import h1
from inferencekit.api.client import Client, Exchange
from inferencekit.api.endpoint import Endpoint
from inferencekit.bench.journal import Journal, PartSink, encode_part, encode_record, read_journal
from tests.unit.api.test_h1 import HEAD, chunked, events, pieces, reads

# ~300 events of ~220 bytes: 66 KiB, well past SPILL_BLOCKS blocks
LONG = [b'data: {"choices":[{"index":0,"delta":{"content":"tok%05d"},"finish_reason":null}],"pad":"%s"}\n\n' % (
    i, b"x" * 140) for i in range(300)] + [b"data: [DONE]\n\n"]


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.setattr(redact, "_SECRETS", {})  # no API key registered (an earlier test may have left one)


def test_the_long_reply_is_longer_than_what_a_stream_holds():
    assert len(chunked(LONG)) > (h1.SPILL_BLOCKS + 2) * h1.BLOCK


async def _paced_server(reply: bytes, step: int, cut_at: int | None = None
                        ) -> tuple[asyncio.AbstractServer, list[asyncio.StreamWriter]]:
    """Answers every request with ``reply`` written ``step`` bytes at a time (each its own TCP segment, so the client
    reads it in many reads); with ``cut_at`` it closes the connection after that many bytes. Returns the server and
    its connections' writers (to close before the loop ends)."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(
                    b"content-length")))
                await reader.readexactly(n)
                body = reply[:cut_at] if cut_at is not None else reply
                for i in range(0, len(body), step):
                    writer.write(body[i:i + step])
                    await writer.drain()
                    await asyncio.sleep(0)
                if cut_at is not None:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), writers


def _post_twice(tmp_path, reply: bytes, cut_at: int | None = None) -> tuple[Exchange, Exchange, Exchange, bytes]:
    """The same reply posted with a journal sink and without; returns (the sunk exchange as the loop kept it, the
    same read back from the journal, the one held whole, the journal's bytes)."""
    path = tmp_path / "journal.jsonl"

    async def go() -> tuple[Exchange, Exchange]:
        server, writers = await _paced_server(reply, 1500, cut_at)
        port = server.sockets[0].getsockname()[1]
        journal = Journal(path)
        async with Client(Endpoint.parse(f"http://127.0.0.1:{port}"), timeout_s=10.0) as c:
            sink = journal.parts()
            sunk = await c.post("/v1/chat/completions", {"stream": True}, sink=sink)
            journal.append("k", "b", {"id": "k"}, sunk, sink)
            whole = await c.post("/v1/chat/completions", {"stream": True})
        journal.close()
        server.close()
        for w in writers:
            w.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)  # the handlers see their connections end
        return sunk, whole

    sunk, whole = asyncio.run(go())
    data = path.read_bytes()
    (rec,), torn = read_journal(path)
    assert torn == 0
    return sunk, rec["exchange"], whole, data


def _payloads(ex: Exchange) -> list[str]:
    return [p for _t, p in ex.to_reply()["events"]]


def test_a_long_reply_goes_out_in_parts_and_comes_back_the_same_as_one_held_whole(tmp_path):
    sunk, back, whole, data = _post_twice(tmp_path, chunked(LONG))
    raw = chunked(LONG)
    assert sunk.spilled > 0 and sunk.spilled % (h1.SPILL_BLOCKS * h1.BLOCK) == 0 and whole.spilled == 0
    assert data.count(b'{"part":') == sunk.spilled // (h1.SPILL_BLOCKS * h1.BLOCK)
    held = b"".join(bytes(p) for p in sunk.framed[0])
    assert len(held) < (h1.SPILL_BLOCKS + 1) * h1.BLOCK and raw.endswith(held)  # the loop kept only the tail
    with pytest.raises(RuntimeError, match="went to the level's journal"):
        sunk.settle()  # its front is only in the journal
    r_back, r_whole = back.to_reply(), whole.to_reply()
    assert r_back["status"] == 200 and "error" not in r_back and r_back["done"] is True
    assert r_back["text"] == r_whole["text"] == "".join(f"tok{i:05d}" for i in range(300))
    assert _payloads(back) == _payloads(whole) and len(_payloads(back)) == 301
    times = [t for t, _p in r_back["events"]]
    assert times == sorted(times)  # every event keeps the stamp of the read that completed it


def test_a_stream_broken_after_parts_went_out_says_how_many_chunks_came(tmp_path):
    raw = chunked(LONG)
    sunk, back, whole, _ = _post_twice(tmp_path, raw, cut_at=len(raw) - 3000)
    assert sunk.spilled > 0 and sunk.count_chunks and sunk.error is not None and "chunks)" not in sunk.error
    for ex in (back, whole):
        m = re.search(r"^broken stream: .* \(after (\d+) chunks\)$", ex.error or "")
        assert m, ex.error
        assert int(m.group(1)) == len(ex.settle())
    assert back.to_reply()["text"] == whole.to_reply()["text"] != ""


def _split_exchange(front: int) -> tuple[Exchange, bytes]:
    """A recorded reply as h1 would leave it after handing its first ``front`` bytes to a sink."""
    raw = chunked(events())
    times, ends = reads(raw, [len(HEAD) + 2, 200, 201, 650, 1100, front, front + 7])
    tail = raw[front:]
    ex = Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=200,
                  content_type="text/event-stream", framed=([tail], times, ends), spilled=front)
    return ex, raw


def _whole(raw: bytes) -> Exchange:
    times, ends = reads(raw, [len(HEAD) + 2, 200, 201, 650, 1100])
    return Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=200,
                    content_type="text/event-stream", framed=(pieces(raw, ends), times, ends))


def test_the_reader_puts_the_parts_back_in_front_in_order(tmp_path):
    ex, raw = _split_exchange(1024)
    path = tmp_path / "j.jsonl"
    path.write_bytes(encode_part("t-1", [bytearray(raw[:512])]) + encode_part("other", [bytearray(b"zz")])
                     + encode_part("t-1", [bytearray(raw[512:1024])]) + encode_record("k", "b", {}, ex, "t-1"))
    (rec,), torn = read_journal(path)
    assert torn == 0
    assert rec["exchange"].to_reply()["text"] == _whole(raw).to_reply()["text"] != ""
    head = next(ln for ln in path.read_bytes().split(b"\n") if ln.startswith(b'{"key":"k"'))
    assert b'"parts":"t-1"' in head and b'"spilled":1024' in head


def test_a_record_whose_parts_are_missing_is_skipped_and_counted_and_the_next_one_read(tmp_path):
    ex, raw = _split_exchange(1024)
    path = tmp_path / "j.jsonl"
    path.write_bytes(encode_part("t-1", [bytearray(raw[:512])]) + encode_record("k1", "b", {}, ex, "t-1")
                     + encode_record("k2", "b", {}, _whole(raw)))
    records, torn = read_journal(path)
    assert [r["key"] for r in records] == ["k2"] and torn == 1


def test_parts_of_a_reply_that_never_ended_are_dropped_not_counted(tmp_path):
    _, raw = _split_exchange(1024)
    path = tmp_path / "j.jsonl"
    path.write_bytes(encode_record("k1", "b", {}, _whole(raw)) + encode_part("dead-0", [bytearray(raw[:900])]))
    records, torn = read_journal(path)
    assert [r["key"] for r in records] == ["k1"] and torn == 0


def test_a_part_cut_short_is_a_torn_end(tmp_path):
    _, raw = _split_exchange(1024)
    path = tmp_path / "j.jsonl"
    path.write_bytes(encode_record("k1", "b", {}, _whole(raw)) + encode_part("t-0", [bytearray(raw[:900])])[:-40])
    records, torn = read_journal(path)
    assert [r["key"] for r in records] == ["k1"] and torn == 1


def test_two_journals_on_one_file_never_share_a_part_token(tmp_path):
    # --resume appends to a dead client's journal: its unclaimed parts must not be taken for the new ones'
    a, b = Journal(tmp_path / "j.jsonl"), Journal(tmp_path / "j.jsonl")
    try:
        ta, tb = a.parts().token, b.parts().token
        assert ta != tb and ta.split("-")[0] != tb.split("-")[0] and a.parts().token != ta
    finally:
        a.close()
        b.close()


def test_the_sink_only_queues_and_a_failed_journal_counts_no_part_as_lost(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    sink = j.parts()
    assert isinstance(sink, PartSink)
    sink([bytearray(b"a" * 16)])
    j.append("k", "b", {}, _whole(chunked(events())))
    j.close()
    assert j.written == 1 and j.lost == 0  # the part is a record on disk but not an exchange
    assert (tmp_path / "j.jsonl").read_bytes().startswith(b'{"part":"')


def test_ends_are_counted_over_the_whole_reply_not_the_tail():
    ex, raw = _split_exchange(1024)
    _pieces, _times, ends = ex.framed
    assert isinstance(ends, array) and ends[-1] == len(raw)  # the lengths the record writes sum to the whole reply


class SinkStub:
    """Records the sink each POST got; answers one streamed word."""

    def __init__(self) -> None:
        self.sinks: list[Any] = []

    async def post(self, path: str, body: dict[str, Any], optional: Any = (), sink: Any = None) -> Exchange:
        self.sinks.append(sink)
        chunks = [(1, b'data: {"choices":[{"index":0,"delta":{"content":"w"}}]}\n\n'), (2, b"data: [DONE]\n\n")]
        return Exchange(request_id=f"r{len(self.sinks)}", path=path, body=body, sent_ns=0, status=200,
                        chunks=chunks, content_type="text/event-stream")


def test_plain_load_requests_stream_into_the_journal_and_session_turns_do_not(tmp_path, monkeypatch):
    from inferencekit.bench.plan import Planner, parse_levels
    from inferencekit.bench.runner import LoadRunner
    from inferencekit.data.prompts import Prompt
    from inferencekit.rundir import RunDir

    def run(prompts: list[Prompt], name: str) -> list[Any]:
        stub = SinkStub()
        runner = LoadRunner(stub, RunDir.create(tmp_path / name), "eng", lambda req: {})  # type: ignore[arg-type]
        asyncio.run(runner.run_level(parse_levels([1], None)[0], Planner(prompts, seed=1), num_requests=2,
                                     duration_s=None, seed=5))
        return stub.sinks

    single = [Prompt(id=f"p{i}", bucket="b", messages=({"role": "user", "content": "x"},)) for i in range(2)]
    sessions = [Prompt(id=f"s{i}", bucket="b", messages=({"role": "user", "content": "x"},), followups=("y",))
                for i in range(2)]
    assert [type(s) for s in run(single, "a")] == [PartSink, PartSink]
    assert run(sessions, "b") == [None] * 4
    redact.register("sk-test-" + "k" * 40)
    assert run(single, "c") == [None, None]  # with a key registered the bytes are scrubbed before they are written
