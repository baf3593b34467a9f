"""The streamed-reply reader (api/h1.py): a recorded stream re-framed as HTTP/1.1 and read back in reads of any size.

``unframe`` must give back exactly the body the server framed, each read credited with the body bytes it completed
(the offsets ``tap.cut`` takes), whatever the read boundaries: inside a chunk-size line, inside the CRLF after a
chunk, inside the head. A gzip body is decoded read by read. The live behaviour (faults, timeouts, keep-alive) is
tested over real HTTP in test_client.py, where every streamed request goes through this reader.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from inferencekit.api import h1
from inferencekit.api.client import Exchange
from tests.paths import FIXTURES

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"


def events() -> list[bytes]:
    rec = json.loads((FIXTURES / "replies" / "llama-server" / "chat_stream.json").read_text())
    assert len(rec["events"]) > 10
    return [f"data: {payload}\n\n".encode() for _t, payload in rec["events"]]


def chunked(parts: list[bytes], extra_head: bytes = b"") -> bytes:
    out = [HEAD + extra_head + b"\r\n"]
    out += [b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p]
    return b"".join(out) + b"0\r\n\r\n"


def reads(raw: bytes, cuts: list[int]) -> tuple[array, array]:
    """Read times (1 µs apart) and end offsets for reads ending at ``cuts`` (sorted, deduplicated) and at the end."""
    ends = array("q", sorted({c for c in cuts if 0 < c < len(raw)} | {len(raw)}))
    return array("q", (1_000 * (i + 1) for i in range(len(ends)))), ends


def pieces(raw: bytes, ends: array) -> list[bytes]:
    """The reply as ``h1.Connection`` keeps it: one bytes object per read."""
    return [raw[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def credited(raw: bytes, ends: array, parts: list[bytes]) -> list[int]:
    """By hand: the body bytes whole HTTP chunks' data bytes up to each read end (a chunk's data counts as it
    arrives, byte by byte, as llhttp hands it over)."""
    spans, pos = [], raw.index(b"\r\n\r\n") + 4
    for p in (p for p in parts if p):
        pos = raw.index(b"\r\n", pos) + 2
        spans.append((pos, len(p)))
        pos += len(p) + 2
    return [sum(min(max(end - start, 0), n) for start, n in spans) for end in ends]


def test_one_read_per_event_gives_each_read_its_event() -> None:
    parts = events()
    raw = chunked(parts)
    bounds, pos = [], raw.index(b"\r\n\r\n") + 4
    for p in parts:
        pos = raw.index(b"\r\n", pos) + 2 + len(p) + 2
        bounds.append(pos)
    times, ends = reads(raw, bounds)
    body, t, offsets, problem = h1.unframe(raw, times, ends)
    assert problem is None and body == b"".join(parts)
    sizes = [b - a for a, b in zip([0, *offsets], offsets)]
    assert sizes[:len(parts)] == [len(p) for p in parts] and t is times


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=6000), max_size=40))
def test_any_read_boundaries_give_back_the_body_and_credit_each_read_its_bytes(cuts: list[int]) -> None:
    parts = events()
    raw = chunked(parts)
    times, ends = reads(raw, cuts)
    body, _t, offsets, problem = h1.unframe(raw, times, ends)
    assert problem is None and body == b"".join(parts)
    assert list(offsets) == credited(raw, ends, parts)


def test_the_exchange_cuts_an_unframed_body_into_the_chunks_a_readany_loop_keeps() -> None:
    parts = events()
    raw = chunked(parts)
    times, ends = reads(raw, [len(HEAD) + 2, 200, 201, 650, 1100])
    ex = Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=200,
                  content_type="text/event-stream", framed=(pieces(raw, ends), times, ends))
    t, n, payload = ex.raw_chunks()  # the journal's form, taken first: framed -> pending
    chunks = ex.settle()
    assert payload == b"".join(parts) == b"".join(c for _t, c in chunks)
    assert [c[0] for c in chunks] == list(t) and [len(c[1]) for c in chunks] == list(n)
    assert set(t) <= set(times) and ex.framed is None and ex.pending is None
    assert ex.to_reply()["text"] and ex.to_reply()["done"] is True


def test_a_gzip_body_is_decoded_read_by_read() -> None:
    parts = events()
    comp = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    framed = [comp.compress(p) + comp.flush(zlib.Z_SYNC_FLUSH) for p in parts] + [comp.flush()]
    raw = chunked(framed, b"Content-Encoding: gzip\r\n")
    bounds, pos = [], raw.index(b"\r\n\r\n") + 4
    for p in (p for p in framed if p):
        pos = raw.index(b"\r\n", pos) + 2 + len(p) + 2
        bounds.append(pos)
    times, ends = reads(raw, bounds)
    body, _t, offsets, problem = h1.unframe(raw, times, ends)
    assert problem is None and body == b"".join(parts) == gzip.decompress(b"".join(framed))
    assert list(offsets)[:len(parts)] == [sum(len(p) for p in parts[:i + 1]) for i in range(len(parts))]


def test_a_body_that_does_not_decode_or_an_encoding_not_asked_for_is_named() -> None:
    raw = chunked([b"not gzip at all"], b"Content-Encoding: gzip\r\n")
    times, ends = reads(raw, [])
    body, _t, _o, problem = h1.unframe(raw, times, ends)
    assert body == b"" and problem and problem.startswith("broken stream: the gzip body could not be decoded")
    raw = chunked([b"data: x\n\n"], b"Content-Encoding: br\r\n")
    body, _t, _o, problem = h1.unframe(raw, *reads(raw, []))
    assert body == b"data: x\n\n" and problem == "bad HTTP response: Content-Encoding br was not asked for"


def test_an_interim_reply_before_the_real_one_is_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + chunked([b"data: [DONE]\n\n"])
    body, _t, offsets, problem = h1.unframe(raw, *reads(raw, [10, 30]))
    assert problem is None and body == b"data: [DONE]\n\n" and list(offsets) == [0, 0, len(body)]


def test_origin_from_an_endpoint_root() -> None:
    assert h1.Origin.parse("http://127.0.0.1:8000") == h1.Origin("127.0.0.1", 8000, False, "", "127.0.0.1:8000")
    assert h1.Origin.parse("https://api.example.com/openai") == h1.Origin("api.example.com", 443, True, "/openai",
                                                                         "api.example.com")
    assert h1.Origin.parse("http://[::1]:9000/x").host_header == "[::1]:9000"


class _Closing:
    def is_closing(self) -> bool:
        return True


def test_a_connection_already_closing_is_not_written_on_and_says_the_request_is_unsent() -> None:
    # the one failure a resend is safe after (client.unwritten): nothing was handed to the transport
    class _Pool(h1.Pool):
        async def acquire(self, fresh: bool) -> tuple[h1.Connection, bool]:
            conn = h1.Connection(self.clock)
            conn.transport = _Closing()
            return conn, True

    async def go() -> h1.Reply:
        pool = _Pool(h1.Origin.parse("http://127.0.0.1:1"), lambda t: False)
        return await h1.request(pool, [b"POST / HTTP/1.1\r\n\r\n{}"], fresh=False, deadline=None, timeout_s=5,
                                idle_s=None)

    rep = asyncio.run(go())
    assert rep.unwritten and rep.status == 0 and rep.sent_ns == 0 and rep.framed is None
    assert rep.error == "connection closed before the request was written"


def test_a_framed_reply_is_journaled_as_read_and_comes_back_as_the_same_reply(tmp_path, monkeypatch) -> None:
    from inferencekit import redact
    from inferencekit.bench.journal import encode_record, read_journal

    monkeypatch.setattr(redact, "_SECRETS", {})  # no key registered (an earlier test may have left one)

    parts = events()
    raw = chunked(parts)
    times, ends = reads(raw, [len(HEAD) + 2, 200, 201, 650, 1100])

    def exchange() -> Exchange:
        return Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=200,
                        content_type="text/event-stream", framed=(pieces(raw, ends), times, ends))

    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode_record("k", "b", {"id": "p"}, exchange()))
    assert b'"framed":true' in path.read_bytes().split(b"\n", 1)[0]
    (rec,), torn = read_journal(path)
    assert torn == 0 and rec["exchange"].framed is not None
    assert rec["exchange"].to_reply()["events"] == exchange().to_reply()["events"]


def test_with_a_key_registered_a_framed_reply_is_taken_apart_and_scrubbed_before_it_is_journaled(monkeypatch) -> None:
    from inferencekit import redact
    from inferencekit.bench.journal import encode_record

    secret = "sk-test-" + "q" * 40
    raw = chunked([f'data: {{"echo": "{secret}"}}\n\n'.encode(), b"data: [DONE]\n\n"])
    ex = Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=200,
                  content_type="text/event-stream", framed=(pieces(raw, reads(raw, [])[1]), *reads(raw, [])))
    monkeypatch.setattr(redact, "_SECRETS", {})
    redact.register(secret)
    line = encode_record("k", "b", {"id": "p"}, ex)
    assert secret.encode() not in line and b'"framed"' not in line.split(b"\n", 1)[0]


async def _raw_server(replies: list[bytes]) -> tuple[asyncio.AbstractServer, list[tuple[int, bytes]],
                                                     list[asyncio.StreamWriter]]:
    """A loopback server that answers the k-th request it reads, on any connection, with ``replies[k]`` byte for
    byte, then closes that connection if the reply says ``Connection: close`` or has no length; records
    (connection number, request bytes)."""
    seen: list[tuple[int, bytes]] = []
    conns = [0]

    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        conns[0] += 1
        me = conns[0]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(
                    b"content-length")), b"0"))
                seen.append((me, head + await reader.readexactly(n)))
                reply = replies[sum(1 for _, b in seen if b != b"<eof>") - 1]
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply or b"Content-Length" not in reply and b"chunked" not in reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            seen.append((me, b"<eof>"))  # the client closed the connection
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen, writers


def _send_all(replies: list[bytes]) -> tuple[list[Exchange], list[tuple[int, bytes]]]:
    from inferencekit.api.client import Client
    from inferencekit.api.endpoint import Endpoint

    async def go() -> tuple[list[Exchange], list[tuple[int, bytes]]]:
        server, seen, writers = await _raw_server(replies)
        port = server.sockets[0].getsockname()[1]
        out = []
        async with Client(Endpoint.parse(f"http://127.0.0.1:{port}"), timeout_s=5.0) as c:
            for i in range(len(replies)):
                out.append(await c.post("/v1/chat/completions", {"stream": True, "i": i}))
        server.close()
        for w in writers:
            w.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)  # the handlers see their connections end
        return out, seen

    return asyncio.run(go())


SSE_BODY = b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n'


def test_replies_framed_every_way_http_allows_read_over_a_real_socket() -> None:
    # a Content-Length body, an interim 100 before the real reply, then a body that ends with the connection
    replies = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
        len(SSE_BODY), SSE_BODY),
        b"HTTP/1.1 100 Continue\r\n\r\n" + chunked([SSE_BODY]),
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE_BODY]
    exs, seen = _send_all(replies)
    for ex in exs:
        r = ex.to_reply()
        assert r["status"] == 200 and "error" not in r and r["text"] == "Hi" and r["done"] is True, r
    assert [c for c, b in seen if b != b"<eof>"] == [1, 1, 1]  # kept alive across all three
    first = seen[0][1]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and b"\r\nX-Request-ID: " in first
    assert first.endswith(b'{"stream":true,"i":0}') and b"Content-Length: 21\r\n" in first


def test_bytes_after_a_reply_keep_it_but_not_its_connection() -> None:
    replies = [chunked([SSE_BODY]) + b"HTTP/1.1 200 OK\r\n\r\nstray", chunked([SSE_BODY])]
    exs, seen = _send_all(replies)
    assert all(ex.to_reply()["text"] == "Hi" and ex.error is None for ex in exs)
    assert [c for c, b in seen if b != b"<eof>"] == [1, 2]  # the second request went out on a new connection


def test_a_malformed_status_line_is_a_recorded_bad_response() -> None:
    (ex,), _ = _send_all([b"HTTP/1.1 2x0 OK\r\n\r\n"])
    assert ex.status == 0 and ex.error is not None and ex.error.startswith("bad HTTP response: ")


def test_a_head_that_never_ends_is_a_recorded_bad_response_not_a_growing_buffer() -> None:
    filler = b"".join(b"X-F%d: %s\r\n" % (i, b"y" * 1000) for i in range(1500))  # ~1.5 MB of headers
    (ex,), _ = _send_all([b"HTTP/1.1 200 OK\r\n" + filler + b"\r\n"])
    assert ex.status == 0 and ex.error is not None
    assert ex.error.startswith("bad HTTP response: the status line and headers had not ended when 1 MiB had come")
    big = b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(100))  # 100 KB: a large head, not a hostile one
    (ok,), _ = _send_all([chunked([SSE_BODY], big)])
    assert ok.error is None and ok.to_reply()["text"] == "Hi"


def test_a_cancelled_request_closes_its_connection_and_leaves_none_in_the_pool() -> None:
    from inferencekit.api.client import Client
    from inferencekit.api.endpoint import Endpoint

    async def go() -> tuple[int, list[tuple[int, bytes]]]:
        # the server answers with a head and one event, then never ends the reply
        server, seen, writers = await _raw_server([HEAD + b"\r\n" + b"%x\r\n%s\r\n" % (len(SSE_BODY), SSE_BODY)])
        port = server.sockets[0].getsockname()[1]
        async with Client(Endpoint.parse(f"http://127.0.0.1:{port}"), timeout_s=30.0) as c:
            task = asyncio.ensure_future(c.post("/v1/chat/completions", {"stream": True}))
            while not seen:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert c._pool is not None
            idle = len(c._pool.idle)
            for _ in range(100):  # the server sees the close while the client is still open
                if len(seen) > 1:
                    break
                await asyncio.sleep(0.01)
            closed_while_open = list(seen)
        server.close()
        for w in writers:
            w.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)
        return idle, closed_while_open

    idle, seen = asyncio.run(go())
    assert idle == 0 and [c for c, _ in seen] == [1, 1] and seen[1][1] == b"<eof>"


def test_a_second_reply_nobody_asked_for_is_not_merged_into_the_first() -> None:
    evil = b'data: {"choices":[{"delta":{"content":"EVIL"}}]}\n\ndata: [DONE]\n\n'
    for second in (chunked([evil]), b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom"):
        (ex, after), seen = _send_all([chunked([SSE_BODY]) + second, chunked([SSE_BODY])])
        r = ex.to_reply()
        assert r["status"] == 200 and "error" not in r and r["text"] == "Hi", r
        assert after.error is None and [c for c, b in seen if b != b"<eof>"] == [1, 2]  # not reused


def test_a_switch_of_protocols_is_recorded_not_raised() -> None:
    (ex,), _ = _send_all([b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                          + SSE_BODY])
    r = ex.to_reply()
    assert r["status"] == 0 and r["error"].startswith("bad HTTP response"), r


def test_gzip_of_several_members_and_raw_deflate_are_decoded_and_a_broken_body_stops_at_the_break() -> None:
    half = len(SSE_BODY) // 2
    two = gzip.compress(SSE_BODY[:half]) + gzip.compress(SSE_BODY[half:])
    co = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = co.compress(SSE_BODY) + co.flush()
    for name, body in ((b"gzip", two), (b"deflate", raw_deflate), (b"deflate", zlib.compress(SSE_BODY))):
        raw = chunked([body[:9], body[9:]], b"Content-Encoding: " + name + b"\r\n")
        got, _t, _o, problem = h1.unframe(raw, *reads(raw, [len(raw) // 2]))
        assert problem is None and got == SSE_BODY, name
    broken = bytearray(gzip.compress(SSE_BODY * 40))
    for i in range(len(broken) // 2, len(broken) // 2 + 8):
        broken[i] ^= 0xFF
    pieces = [bytes(broken[i:i + 17]) for i in range(0, len(broken), 17)]
    raw = chunked(pieces, b"Content-Encoding: gzip\r\n")
    bounds, pos = [], raw.index(b"\r\n\r\n") + 4
    for piece in pieces:
        pos = raw.index(b"\r\n", pos) + 2 + len(piece) + 2
        bounds.append(pos)
    got, _t, _o, problem = h1.unframe(raw, *reads(raw, bounds))
    assert problem and problem.startswith("broken stream: the gzip body could not be decoded")
    # what decoded before the break is kept; none of the compressed bytes that came after it is taken for body
    assert len(got) < len(SSE_BODY * 40) and not any(p in got for p in pieces[len(pieces) // 2 + 1:])


def test_an_encoding_not_asked_for_is_an_error_as_soon_as_the_request_returns() -> None:
    (ex,), _ = _send_all([chunked([SSE_BODY], b"Content-Encoding: br\r\n")])
    assert not ex.ok and ex.error is not None
    assert ex.error.startswith("bad HTTP response: Content-Encoding br was not asked for")


def test_an_error_body_that_stops_coming_is_taken_after_a_second_and_says_so() -> None:
    import time

    t0 = time.monotonic()
    (ex,), _ = _send_all([b"HTTP/1.1 500 Internal\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\noops"])
    waited = time.monotonic() - t0
    assert ex.status == 500 and ex.error == "HTTP 500: oops" and waited < 4.0  # the client's limit here is 5 s


def test_the_path_is_percent_encoded_as_aiohttp_does() -> None:
    from inferencekit.api.client import Client
    from inferencekit.api.endpoint import Endpoint

    async def go() -> list[bytes]:
        lines: list[bytes] = []

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            lines.append((await r.readuntil(b"\r\n\r\n")).split(b"\r\n")[0])
            w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        for prefix in ("my prefix", "pr\u00e9fix", "a%20b"):
            async with Client(Endpoint.parse(f"http://127.0.0.1:{port}/{prefix}/v1"), timeout_s=2) as c:
                await c.post("/v1/chat/completions", {"stream": True})
        srv.close()
        await srv.wait_closed()
        return lines

    assert asyncio.run(go()) == [b"POST /my%20prefix/v1/chat/completions HTTP/1.1",
                                 b"POST /pr%C3%A9fix/v1/chat/completions HTTP/1.1",
                                 b"POST /a%20b/v1/chat/completions HTTP/1.1"]


def test_the_journal_and_the_loop_taking_one_exchange_apart_at_once_both_see_it_whole(tmp_path, monkeypatch) -> None:
    # a multi-turn session reads its reply (to_reply) right after handing it to the journal's writer thread: the
    # writer once wrote records with no chunks when it got to an exchange the loop was halfway through
    from inferencekit import redact
    from inferencekit.bench.journal import Journal, read_journal

    monkeypatch.setattr(redact, "_SECRETS", {})
    parts = [b'data: {"choices":[{"delta":{"content":"t%d "}}]}\n\n' % i for i in range(1000)] + [b"data: [DONE]\n\n"]
    raw = chunked(parts)
    bounds, pos = [], raw.index(b"\r\n\r\n") + 4
    for piece in parts:
        pos = raw.index(b"\r\n", pos) + 2 + len(piece) + 2
        bounds.append(pos)
    times, ends = reads(raw, bounds)
    journal = Journal(tmp_path / "journal.jsonl")
    local = []
    for k in range(60):
        ex = Exchange(request_id=str(k), path="/v1/chat/completions", body={}, sent_ns=0, status=200,
                      content_type="text/event-stream", framed=(pieces(raw, ends), times, ends))
        journal.append(str(k), "b", {}, ex)
        local.append(len(ex.to_reply()["events"]))
    journal.close()
    records, torn = read_journal(tmp_path / "journal.jsonl")
    assert torn == 0 and len(records) == 60 and set(local) == {len(parts)}
    assert {len(rec["exchange"].to_reply()["events"]) for rec in records} == {len(parts)}


def test_preconnect_opens_no_more_than_the_pool_allows() -> None:
    from inferencekit.api.client import Client
    from inferencekit.api.endpoint import Endpoint

    async def go() -> tuple[int, int]:
        server, _seen, writers = await _raw_server([])
        port = server.sockets[0].getsockname()[1]
        async with Client(Endpoint.parse(f"http://127.0.0.1:{port}"), max_connections=8) as c:
            n = await c.preconnect(64)
            assert c._pool is not None
            idle = len(c._pool.idle)
        server.close()
        for w in writers:
            w.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)
        return n, idle

    assert asyncio.run(go()) == (8, 8)
