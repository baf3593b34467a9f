"""The client against faults injected by a real loopback HTTP/SSE server (tests/fault_server.py)."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from inferencekit.api.client import Client, unwritten
from inferencekit.api.endpoint import Endpoint
from tests.fault_server import fault_server

BODY = {"model": "fault-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}}


def post(url: str, bodies: list[dict], **kw) -> list[dict]:
    async def go():
        async with Client(Endpoint.parse(url)) as c:
            return [(await c.post("/v1/chat/completions", b, **kw)).to_reply(id=str(i)) for i, b in enumerate(bodies)]

    return asyncio.run(go())


def test_sse_comments_split_events_and_crlf_over_real_http():
    with fault_server() as (url, seen):
        (r,) = post(url, [BODY])
    assert r["status"] == 200 and "error" not in r
    assert r["text"] == "Hello" and r["finish_reason"] == "stop" and r["done"]
    assert r["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}
    assert seen[0]["headers"]["X-Request-ID"] == r["request_id"] and len(r["request_id"]) == 32


def test_optional_field_rejected_with_400_is_dropped_retried_once_and_remembered():
    with fault_server(reject_stream_options=True) as (url, seen):
        r1, r2 = post(url, [BODY, BODY], optional=("stream_options",))
    assert r1["text"] == "Hello" and r1["dropped_fields"] == ["stream_options"]
    assert r2["dropped_fields"] == ["stream_options"]
    assert ["stream_options" in s["body"] for s in seen] == [True, False, False]  # one 400, then never again
    assert r1["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}


def test_a_400_naming_no_field_drops_the_optional_fields_for_one_retry_only_when_that_fails_too():
    # failed before 18: every optional field was dropped for the rest of the run although the retry failed too
    with fault_server() as (url, seen):
        bad, good = post(url, [{**BODY, "fault": "http400"}, BODY], optional=("stream_options",))
    assert bad["status"] == 400 and bad["dropped_fields"] == [] and "named no field" in bad["retried"]
    assert good["status"] == 200 and good["dropped_fields"] == [] and good["usage"]
    assert ["stream_options" in s["body"] for s in seen] == [True, False, True]


def test_required_field_rejection_is_recorded_not_retried():
    with fault_server(reject_stream_options=True) as (url, seen):
        (r,) = post(url, [BODY])
    assert r["status"] == 400 and "stream_options" in r["error"] and len(seen) == 1


def test_http_error_body_is_kept_to_500_bytes():
    with fault_server() as (url, _):
        (r,) = post(url, [{**BODY, "fault": "http500"}])
    assert r["status"] == 500 and r["error"] == "HTTP 500: " + "E" * 500


def test_connection_cut_inside_an_event_is_a_recorded_broken_stream():
    with fault_server() as (url, _):
        (r,) = post(url, [{**BODY, "fault": "cut"}])
    assert r["status"] == 200 and r["text"] == "Hel"
    assert r["error"].startswith(("broken stream", "stream ended without [DONE]", "server disconnected"))
    assert r["done"] is False


def test_a_stream_that_stalls_mid_reply_is_a_recorded_timeout_tapped_or_not():
    # failed before 19: the tapped read waited for the body's end outside the timeout, so a stream silent for 60 s
    # under a 3 s limit came back as a successful reply once the server went on
    for tap in (True, False):
        async def go(url: str, tap: bool = tap) -> dict:
            async with Client(Endpoint.parse(url), timeout_s=3.0, tap=tap) as c:
                return (await c.post("/v1/chat/completions", {**BODY, "fault": "stall:60"})).to_reply(id="s")

        with fault_server() as (url, _):
            r = asyncio.run(go(url))
        assert r["status"] == 200 and r["error"].startswith("timeout: no complete reply within 3 s"), (tap, r)
        assert r["text"] == "Hel" and r["done"] is False  # the token before the stall is kept


def test_the_read_idle_limit_ends_a_silent_stream_and_spares_a_slow_steady_one():
    # issue 19: a second limit between bytes (--read-timeout), beside the whole-exchange --timeout
    for tap in (True, False):
        async def go(url: str, tap: bool = tap) -> tuple[dict, dict, dict]:
            async with Client(Endpoint.parse(url), timeout_s=120.0, read_timeout_s=1.0, tap=tap) as c:
                stalled = (await c.post("/v1/chat/completions", {**BODY, "fault": "stall:60"})).to_reply(id="s")
                silent = (await c.post("/v1/chat/completions", {**BODY, "fault": "hang:60"})).to_reply(id="h")
                # 0.4 s gaps under a 1 s idle limit, 2 s in all: each gap resets it
                steady = (await c.post("/v1/chat/completions", {**BODY, "fault": "stall:0.4"})).to_reply(id="ok")
                return stalled, silent, steady

        with fault_server() as (url, _):
            stalled, silent, steady = asyncio.run(go(url))
        assert stalled["status"] == 200 and stalled["error"].startswith("read timeout: no byte"), (tap, stalled)
        assert stalled["text"] == "Hel" and stalled["done"] is False
        assert silent["status"] == 0 and silent["error"].startswith("read timeout: no byte"), (tap, silent)
        assert "error" not in steady and steady["text"] == "Hello", (tap, steady)


def test_read_timeout_flag_reaches_the_client_and_is_recorded(tmp_path):
    from inferencekit.cli import main

    with fault_server() as (url, _):
        code = main(["bench", "serve", "--base-url", url, "--concurrency", "1", "--num-prompts", "2", "--max-tokens",
                     "4", "--warmup", "0", "--read-timeout", "1", "--extra-body", '{"fault": "stall:60"}',
                     "--run-dir", str(tmp_path / "run"), "--quiet"])
    replies = [json.loads(p.read_text()) for p in (tmp_path / "run" / "outputs").rglob("load-c1/*/*.json")]
    assert code in (1, 3) and len(replies) == 2
    assert all(r["error"].startswith("read timeout: no byte for 1 s") for r in replies), replies
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_json["client_limits"] == {"timeout_s": 600.0, "read_timeout_s": 1.0}
    assert main(["bench", "serve", "--base-url", url, "--read-timeout", "-1", "--quiet"]) == 2


def test_a_timeout_on_a_reused_connection_is_not_sent_again():
    # failed before 19: a request that timed out on a pooled keep-alive connection was taken for a stale
    # connection and sent up to 16 more times, while its error said "within 1 s"
    async def go(url: str) -> list[dict]:
        async with Client(Endpoint.parse(url), timeout_s=1.0) as c:
            first = (await c.post("/v1/chat/completions", BODY)).to_reply(id="a")  # leaves a pooled connection
            hung = (await c.post("/v1/chat/completions", {**BODY, "fault": "hang:30"})).to_reply(id="b")
            return [first, hung]

    with fault_server() as (url, seen):
        first, hung = asyncio.run(go(url))
    assert first["status"] == 200 and hung["status"] == 0
    assert hung["error"] == "timeout: no complete reply within 1 s" and "retried" not in hung
    assert [s["body"].get("fault") for s in seen] == [None, "hang:30"]  # sent once


def test_engine_detection_waits_as_long_as_the_client_timeout_says():
    # failed before 19: detection's GETs had a fixed 10 s limit whatever --timeout said (a resume against an engine
    # still busy was refused); here the limit follows the client's timeout both ways
    from inferencekit.api.detect import list_models

    async def go(url: str, timeout_s: float) -> tuple:
        async with Client(Endpoint.parse(url), timeout_s=timeout_s) as c:
            return await list_models(c)

    with fault_server(models_delay_s=1.5) as (url, _):
        short = asyncio.run(go(url, 0.5))
        long = asyncio.run(go(url, 5.0))
    assert short[0] == [] and short[1].startswith("timeout: no complete reply within 0.5 s")
    assert long[1] is None and [m["id"] for m in long[0]] == ["fault-model"]


def test_lines_that_are_not_sse_and_streams_without_tokens_are_failures_not_silence():
    # failed before 19: bare JSON lines were dropped as if the server had sent nothing, and a stream with no token
    # event but usage of 5 tokens counted as a completed reply (its usage into throughput)
    with fault_server() as (url, _):
        bare, claimed = post(url, [{**BODY, "fault": "bare"}, {**BODY, "fault": "usage_only"}])
    assert bare["status"] == 200 and bare["error"].startswith("protocol error: 1 line(s) of the stream are not SSE")
    assert '{"choices"' in bare["error"]
    assert claimed["error"] == ("protocol error: the stream carried no token event but usage claims 5 completion "
                                "tokens")


def test_a_request_the_server_read_then_reset_is_sent_once_and_the_reply_says_why():
    # failed before 19: a reset on a reused keep-alive connection was taken for a stale connection and the request
    # went out again, up to 16 times; the server had read it each time (issue 19, item 3)
    async def go(url: str) -> list[dict]:
        async with Client(Endpoint.parse(url), timeout_s=10.0) as c:
            first = (await c.post("/v1/chat/completions", BODY)).to_reply(id="a")  # leaves a pooled connection
            reset = (await c.post("/v1/chat/completions", {**BODY, "fault": "reset"})).to_reply(id="b")  # reused
            dropped = (await c.post("/v1/chat/completions", {**BODY, "fault": "drop"})).to_reply(id="c")  # fresh
        async with Client(Endpoint.parse(url), timeout_s=10.0) as c:
            fresh = (await c.post("/v1/chat/completions", {**BODY, "fault": "reset"})).to_reply(id="d")
        return [first, reset, dropped, fresh]

    with fault_server() as (url, seen):
        first, *failed = asyncio.run(go(url))
    assert first["status"] == 200 and "error" not in first
    assert [s["body"].get("fault") for s in seen] == [None, "reset", "drop", "reset"]  # each sent exactly once
    for r in failed:
        assert r["status"] == 0 and "retried" not in r, r
        assert r["error"].startswith(("connection error: connection reset by peer", "server disconnected")), r["error"]
    assert seen[1]["peer"] == seen[0]["peer"]  # the reset came on the kept-alive connection
    assert failed[0]["error"].endswith("the request may have been read, so it is not re-sent; later requests open "
                                       "their own connection)")
    assert seen[2]["peer"] != seen[1]["peer"]  # and from then on the client opened a connection per request


def test_an_engine_that_closes_kept_alive_connections_gets_a_connection_per_request():
    # llama-server closes a connection ~100 ms after each stream while announcing keep-alive (its dialect says so);
    # a request written on it in that window would be lost, and is never re-sent: so none is written on one
    from inferencekit.api.detect import detect_engine

    async def go(url: str) -> tuple[str, bool, list[dict]]:
        async with Client(Endpoint.parse(url), timeout_s=10.0) as c:
            info = await detect_engine(c)
            return info.engine, c.fresh_connections, [(await c.post("/v1/chat/completions", BODY)).to_reply()
                                                      for _ in range(3)]

    with fault_server(props={"total_slots": 2, "build_info": "b1"}) as (url, seen):
        engine, fresh, replies = asyncio.run(go(url))
    assert engine == "llama-server" and fresh
    assert all(r["status"] == 200 and "error" not in r for r in replies)
    assert len({s["peer"] for s in seen}) == 3 and all(s["headers"].get("Connection") == "close" for s in seen)


def test_a_pooled_connection_the_server_closed_is_not_written_on():
    # llama-server closes after every stream while announcing keep-alive; until the client's loop handles the FIN
    # the dead connection sits in the pool. The loop is blocked here so that it cannot: the request must go out on
    # another connection, once, with nothing to re-send (the old rule re-sent it after writing it on the dead one)
    async def go(url: str) -> tuple[dict, dict]:
        async with Client(Endpoint.parse(url), timeout_s=10.0) as c:
            first = (await c.post("/v1/chat/completions", {**BODY, "fault": "close_after"})).to_reply(id="a")
            time.sleep(0.5)  # the FIN arrives; the event loop, blocked, does not see it
            second = (await c.post("/v1/chat/completions", BODY)).to_reply(id="b")
        return first, second

    with fault_server() as (url, seen):
        first, second = asyncio.run(go(url))
    assert first["status"] == 200 and "error" not in first and first["text"] == "Hello"
    assert second["status"] == 200 and "error" not in second and "retried" not in second, second
    assert len(seen) == 2


@pytest.mark.parametrize("exc,expected", [
    (aiohttp.ServerDisconnectedError(), False),
    (aiohttp.ClientOSError(104, "Connection reset by peer"), False),
    (aiohttp.ClientConnectionResetError("Connection lost"), False),  # drain after a write: bytes went out
    (TimeoutError(), False),
])
def test_only_a_refused_first_write_counts_as_unwritten(exc, expected):
    assert unwritten(exc) is expected


def test_aiohttp_refuses_to_write_on_a_closing_transport_and_that_is_unwritten():
    # the aiohttp behaviour the resend rule rests on (http_writer.StreamWriter._write, pinned aiohttp): on a protocol
    # whose transport is gone, a write raises before handing over a byte; the body writer wraps it in ClientOSError
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.http_writer import StreamWriter
    from multidict import CIMultiDict

    async def go() -> BaseException:
        loop = asyncio.get_running_loop()
        writer = StreamWriter(BaseProtocol(loop), loop)
        await writer.write_headers("POST /v1/chat/completions HTTP/1.1", CIMultiDict())
        try:
            await writer.write(b"{}")
        except aiohttp.ClientConnectionResetError as e:
            return e
        raise AssertionError("aiohttp wrote on a transport that is gone")

    refused = asyncio.run(go())
    assert unwritten(refused)
    wrapped = aiohttp.ClientOSError(None, "Can not write request body for http://x")
    wrapped.__cause__ = refused
    assert unwritten(wrapped)


@pytest.mark.parametrize("tap", [True, False], ids=["tapped", "untapped"])
@pytest.mark.parametrize("fault,status,message", [("http503", 503, "server overloaded"),
                                                  ("http429", 429, "rate limit exceeded")])
def test_an_overloaded_or_rate_limited_server_is_recorded_with_its_words_and_not_resent(fault, status, message, tap):
    # issue 19's campaign: HTTP 503 and 429 recorded per request (a 429's Retry-After is not a reason to send again)
    async def go(url: str) -> dict:
        async with Client(Endpoint.parse(url), timeout_s=10.0, tap=tap) as c:
            return (await c.post("/v1/chat/completions", {**BODY, "fault": fault})).to_reply(id="x")

    with fault_server() as (url, seen):
        r = asyncio.run(go(url))
    assert r["status"] == status and r["error"].startswith(f"HTTP {status}: ") and message in r["error"], r
    assert r["done"] is False and "retried" not in r and len(seen) == 1


@pytest.mark.parametrize("tap", [True, False], ids=["tapped", "untapped"])
def test_garbage_bytes_for_a_stream_are_a_recorded_protocol_error(tap):
    # issue 19's campaign: 4 KB of random bytes (invalid UTF-8, NULs, no event end) with status 200
    async def go(url: str) -> dict:
        async with Client(Endpoint.parse(url), timeout_s=10.0, tap=tap) as c:
            return (await c.post("/v1/chat/completions", {**BODY, "fault": "garbage"})).to_reply(id="g")

    with fault_server() as (url, _):
        r = asyncio.run(go(url))
    assert r["status"] == 200 and r["error"].startswith("protocol error: ") and "not SSE" in r["error"], r["error"]
    assert r["done"] is False and not r.get("text")


@pytest.mark.parametrize("tap", [True, False], ids=["tapped", "untapped"])
def test_a_10_mb_event_is_read_whole(tap):
    # issue 19's campaign: one event of 10 MB (aiohttp's read buffer and the tap's must not cut or stall it)
    from tests.fault_server import BIG_EVENT

    async def go(url: str) -> dict:
        async with Client(Endpoint.parse(url), timeout_s=60.0, tap=tap) as c:
            return (await c.post("/v1/chat/completions", {**BODY, "fault": "big"})).to_reply(id="b")

    with fault_server() as (url, _):
        r = asyncio.run(go(url))
    assert r["status"] == 200 and "error" not in r and r["done"] is True, r.get("error")
    assert r["text"] == "x" * BIG_EVENT


@pytest.mark.parametrize("tap", [True, False], ids=["tapped", "untapped"])
def test_a_gzip_encoded_stream_is_decoded_and_read_as_any_other(tap):
    # issue 19's campaign: Content-Encoding: gzip on an event stream, flushed event by event
    async def go(url: str) -> dict:
        async with Client(Endpoint.parse(url), timeout_s=10.0, tap=tap) as c:
            return (await c.post("/v1/chat/completions", {**BODY, "fault": "gzip"})).to_reply(id="z")

    with fault_server() as (url, _):
        r = asyncio.run(go(url))
    assert r["status"] == 200 and "error" not in r and r["done"] is True, r.get("error")
    assert r["text"] == "Hello" and r["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}


def test_a_request_refused_before_its_first_byte_was_written_is_resent_once_and_the_reply_says_so(monkeypatch):
    # issue 19, item 3: "every resend is recorded on the reply". The pooled connection is alive when the next request
    # takes it (the server closes it 1 s after its reply, later than LiveConnector's check); a hook on that request's
    # headers (run before aiohttp writes a byte) holds it until the client's loop has handled the close, so aiohttp
    # refuses to write on the closing transport: the one case a request is sent again. The request is engine
    # detection's GET (no body: aiohttp's send raises the refusal itself); the server gets it once. The client reads
    # every request through aiohttp (tap=False), so the first POST leaves its connection in aiohttp's pool
    import inferencekit.api.client as client_mod

    real = client_mod._trace_config
    held: list[str] = []

    async def hold_once(session, ctx, params) -> None:
        ex = ctx.trace_request_ctx
        if isinstance(ex, client_mod.Exchange) and ex.path == "/v1/models" and not held:
            held.append(ex.path)
            for _ in range(200):  # until the loop has handled the server's FIN on the connection this request holds
                if all(p.transport is None or p.transport.is_closing() for p in session.connector._acquired):
                    break
                await asyncio.sleep(0.05)

    def traced() -> aiohttp.TraceConfig:
        tc = real()
        tc.on_request_headers_sent.append(hold_once)
        return tc

    monkeypatch.setattr(client_mod, "_trace_config", traced)

    async def go(url: str) -> tuple[dict, client_mod.Exchange]:
        async with Client(Endpoint.parse(url), timeout_s=10.0, tap=False) as c:
            first = (await c.post("/v1/chat/completions", {**BODY, "fault": "close_later"})).to_reply(id="a")
            return first, await c.get("/v1/models")

    hits: list[str] = []
    with fault_server(hits=hits) as (url, _):
        first, models = asyncio.run(go(url))
    assert held == ["/v1/models"]
    assert first["status"] == 200 and "error" not in first
    assert models.status == 200 and models.error is None and models.json()["data"][0]["id"] == "fault-model"
    assert models.retried == ("sent 2 times: the connection failed before any byte of the request was written "
                              "(connection closed before the request was written)")
    assert hits == ["POST /v1/chat/completions", "GET /v1/models"]  # the server got the request once
