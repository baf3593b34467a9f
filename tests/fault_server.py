"""A small real HTTP/SSE server for faults a real engine cannot be made to show on demand.

It speaks HTTP over loopback (aiohttp.web); it never mocks the client's transport. Behaviour is
chosen per request by the ``X-Fault`` header or by fields in the body.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import orjson
from aiohttp import web

SEEN = web.AppKey("seen", list)
HITS = web.AppKey("hits", list)  # every request of any kind, as "METHOD /path" (``fault_server(hits=...)``)
REJECT = web.AppKey("reject_stream_options", bool)
LOGPROBS = web.AppKey("logprobs", dict)  # {"cap": int | None, "refuse": bool}
EMPTY = web.AppKey("empty_replies", bool)
ECHO_AUTH = web.AppKey("echo_auth", bool)
ON_REQUEST = web.AppKey("on_request", object)  # called with the count of requests seen, in the server's thread


# ``wrong:<field>``: a stream that is well formed but for one event whose field has a wrong type (issue 19's list),
# and the words the reply's protocol error must name (api/wire.py)
WRONG_TYPES: dict[str, tuple[dict, str]] = {
    "content": ({"choices": [{"index": 0, "delta": {"content": 5}}]}, "choices[0].delta.content is int"),
    "usage": ({"choices": [], "usage": "lots"}, "usage is str"),
    "choices": ({"choices": {"index": 0, "delta": {"content": "x"}}}, "choices is dict"),
    "tool_calls": ({"choices": [{"index": 0, "delta": {"tool_calls": True}}]}, "delta.tool_calls is boolean"),
    "index": ({"choices": [{"index": None, "delta": {"content": "x"}}]}, "choices[0].index is null"),
    "function": ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]},
                 "tool_calls[0].function is str"),
    "name": ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 5}}]}}]},
             "function.name is int"),
    "top_logprobs": ({"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [
        {"token": "x", "logprob": -0.1, "top_logprobs": 5}]}}]}, "content[0].top_logprobs is int"),
    "token_logprobs": ({"choices": [{"index": 0, "text": "x", "logprobs": {"tokens": ["x"], "token_logprobs": {}}}]},
                       "logprobs.token_logprobs is dict"),
    "error": ({"error": {"message": {"detail": "overloaded"}}}, "error.message is dict"),
}


BIG_EVENT = 10 * 2**20  # ``big``: the size of one event's content, in characters (10 MB)


def _chunk(content: str) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}) + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[SEEN].append({"headers": dict(request.headers), "body": body,
                              "peer": request.transport.get_extra_info("peername") if request.transport else None})
    if request.app[ON_REQUEST] is not None:  # the test's hook: fill a disk once N requests arrived, say
        request.app[ON_REQUEST](len(request.app[SEEN]))  # type: ignore[operator]
    fault = request.headers.get("X-Fault") or body.get("fault", "")
    if request.app[ECHO_AUTH]:  # a careless server: a 401 that quotes the request's Authorization header back
        return web.json_response({"error": {"message": f"invalid credentials: {request.headers.get('Authorization')}",
                                            "headers": dict(request.headers)}}, status=401)
    if "stream_options" in body and request.app[REJECT]:
        return web.json_response({"error": {"message": "Unrecognized request argument supplied: stream_options"}},
                                 status=400)
    if fault == "drop":  # close the connection before any byte of a reply: a transport failure (status 0)
        request.transport.close()
        return web.Response()
    if fault == "reset":  # the request read, the connection reset (RST, not FIN): it may have been applied
        sock = request.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        request.transport.abort()
        return web.Response()
    if fault == "http400":  # a 400 whose message names no field (the cause is elsewhere in the request)
        return web.json_response({"error": {"message": "Bad Request"}}, status=400)
    if fault == "http500":
        return web.Response(status=500, text="E" * 2000)
    if fault == "http503":  # overloaded: an OpenAI-style error object
        return web.json_response({"error": {"message": "server overloaded", "code": 503}}, status=503)
    if fault == "http429":  # rate limited, with the Retry-After a client may honour (inferencekit does not re-send)
        return web.json_response({"error": {"message": "rate limit exceeded", "code": 429}}, status=429,
                                 headers={"Retry-After": "1"})
    if fault.startswith("hang"):  # no byte of a reply for N seconds ("hang:N"): a server busy or stuck
        await asyncio.sleep(float(fault.partition(":")[2] or 3600))
    if not body.get("stream"):
        return _plain(body, request.app[LOGPROBS])
    if fault == "gzip":  # a whole, well-formed stream sent gzip-encoded (Content-Encoding), each event flushed
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"})
        await resp.prepare(request)
        z = zlib.compressobj(wbits=31)
        for ev in (_chunk("Hel"), _chunk("lo"), b'data: {"choices": [], "usage": {"prompt_tokens": 3, '
                                                 b'"completion_tokens": 2}}\n\n', b"data: [DONE]\n\n"):
            await resp.write(z.compress(ev) + z.flush(zlib.Z_SYNC_FLUSH))
        await resp.write(z.flush())
        return resp
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if fault == "cut":  # close the connection in the middle of an event
        await resp.write(_chunk("Hel"))
        await resp.write(b'data: {"choices": [{"delta": {"conte')
        request.transport.close()
        return resp
    if fault.startswith("stall"):  # one token, then silence mid-stream for N seconds ("stall:N"), then the rest
        await resp.write(_chunk("Hel"))
        await asyncio.sleep(float(fault.partition(":")[2] or 3600))
        await resp.write(_chunk("lo"))
        await resp.write(b"data: [DONE]\n\n")
        return resp
    if fault.startswith("wrong:"):  # one token, then an event with a wrong-typed field (WRONG_TYPES), then the end
        await resp.write(_chunk("Hel"))
        await resp.write(b"data: " + orjson.dumps(WRONG_TYPES[fault.partition(":")[2]][0]) + b"\n\n")
        await resp.write(_chunk("lo"))
        await resp.write(b"data: [DONE]\n\n")
        return resp
    if fault == "close_after":  # a whole reply on a keep-alive connection, then the connection closed (FIN), as
        # llama-server does after every stream: the client's pool holds a dead connection until its loop sees the FIN
        await resp.write(_chunk("Hello"))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        request.transport.close()
        return resp
    if fault == "garbage":  # a 200 event stream of seeded random bytes (invalid UTF-8, NULs, no event end), no [DONE]
        await resp.write(random.Random(19).randbytes(4096))
        return resp
    if fault == "big":  # one event of 10 MB of content, then a proper end
        await resp.write(_chunk("x" * BIG_EVENT))
        await resp.write(b"data: [DONE]\n\n")
        return resp
    if fault == "close_later":  # a whole reply on a keep-alive connection, closed (FIN) 1 s after it ended: later
        # than the client's check of a pooled connection before its next request (a test then holds that request)
        await resp.write(_chunk("Hello"))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        asyncio.get_running_loop().call_later(1.0, request.transport.close)
        return resp
    if fault == "bare":  # JSON lines without "data:" (not SSE), then a proper end
        await resp.write(orjson.dumps({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp
    if fault == "usage_only":  # no token event, yet usage claims five completion tokens
        await resp.write(b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                                   "usage": {"prompt_tokens": 3, "completion_tokens": 5}}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp
    if request.app[EMPTY]:  # a well-formed stream that carries no output at all: role, finish, usage, [DONE]
        for ev in ({"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
                   {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                   {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}):
            await resp.write(b"data: " + orjson.dumps(ev) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp
    # comments, a keep-alive, an event split across two writes, CRLF line ends
    await resp.write(b": keep-alive\n\n")
    await resp.write(_chunk("Hel"))
    part = _chunk("lo")
    await resp.write(part[:9])
    await asyncio.sleep(0.01)
    await resp.write(part[9:].replace(b"\n\n", b"\r\n\r\n"))
    await resp.write(b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                     + b"\n\n")
    await resp.write(b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n')
    await resp.write(b"data: [DONE]\n\n")
    return resp


def _plain(body: dict, lp: dict) -> web.Response:
    """A non-streamed greedy reply; with logprobs asked, top-k entries with ids (llama-server's shape). Faults a
    real engine here cannot show on demand: ``refuse`` answers any logprobs request with a 400, ``cap`` one that
    asks more than ``cap`` alternatives (vLLM's wording)."""
    k = body.get("top_logprobs") or 0
    if body.get("logprobs") and lp.get("refuse"):
        return web.json_response({"error": {"message": "logprobs are not supported by this server"}}, status=400)
    if body.get("logprobs") and lp.get("cap") is not None and k > lp["cap"]:
        return web.json_response({"error": {"message": f"top_logprobs ({k}) is greater than max allowed: "
                                                       f"{lp['cap']}"}}, status=400)
    words = ["Hel", "lo", " there"][: body.get("max_tokens", 3)]
    choice: dict = {"index": 0, "message": {"role": "assistant", "content": "".join(words)}, "finish_reason": "length"}
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [
            {"id": 100 + i, "token": w, "logprob": -0.1,
             "top_logprobs": [{"id": 100 + i + j, "token": w if j == 0 else f"alt{j}", "logprob": -0.1 - j}
                              for j in range(k)]} for i, w in enumerate(words)]}
    return web.json_response({"choices": [choice], "usage": {"prompt_tokens": 4, "completion_tokens": len(words)}})


async def tokenize(request: web.Request) -> web.Response:
    """llama-cpp-python's ``/extras/tokenize`` for a model whose GGUF adds BOS: one id per character after BOS
    (id 1), with no switch to leave it out; ``"422"`` as the text is refused the way a validation error is."""
    body = await request.json()
    text = body.get("input")
    if text == "422":
        return web.json_response({"detail": [{"msg": "field required"}]}, status=422)
    return web.json_response({"tokens": [1, *(1000 + ord(c) for c in str(text))]})


MODELS = web.AppKey("models", list)


MODELS_DELAY = web.AppKey("models_delay_s", float)
PROPS = web.AppKey("props", dict)


async def props_handler(request: web.Request) -> web.Response:
    """llama-server's ``/props`` when the server plays one (``props=``), else 404 as other servers answer."""
    if not request.app[PROPS]:
        raise web.HTTPNotFound()
    return web.json_response(request.app[PROPS])


async def models(request: web.Request) -> web.Response:
    await asyncio.sleep(request.app[MODELS_DELAY])  # an engine still busy (with a killed client's request, say)
    return web.json_response({"data": [{"id": m, "owned_by": "test"} for m in request.app[MODELS]]})


@web.middleware
async def _count(request: web.Request, handler: Callable) -> web.StreamResponse:
    request.app[HITS].append(f"{request.method} {request.path}")
    return await handler(request)  # type: ignore[no-any-return]


@contextmanager
def fault_server(*, reject_stream_options: bool = False, logprob_cap: int | None = None,
                 refuse_logprobs: bool = False, empty_replies: bool = False,
                 model_ids: tuple[str, ...] = ("fault-model",), models_delay_s: float = 0.0,
                 echo_auth: bool = False, on_request: Callable[[int], None] | None = None,
                 props: dict | None = None, hits: list | None = None) -> Iterator[tuple[str, list]]:
    """Run the server in a thread; yields (base URL, list of received requests: headers, body, peer address).
    ``on_request(n)`` runs in the server's thread as the n-th chat request arrives; ``props`` is served at
    ``/props`` (llama-server's, e.g. ``{"total_slots": 4, "build_info": "b1"}``, makes the server detected as one);
    ``hits`` gets every request of any kind (``GET /v1/models`` included), to prove that nothing was sent."""
    seen: list = []
    ready = threading.Event()
    state: dict = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = web.Application(middlewares=[_count])
        app[SEEN] = seen
        app[HITS] = hits if hits is not None else []
        app[REJECT] = reject_stream_options
        app[LOGPROBS] = {"cap": logprob_cap, "refuse": refuse_logprobs}
        app[EMPTY] = empty_replies
        app[ECHO_AUTH] = echo_auth
        app[ON_REQUEST] = on_request
        app[MODELS] = list(model_ids)
        app[MODELS_DELAY] = models_delay_s
        app[PROPS] = dict(props or {})
        app.router.add_get("/props", props_handler)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/{prefix}/v1/chat/completions", chat)  # a server mounted under a path prefix
        app.router.add_get("/{prefix}/v1/models", models)
        app.router.add_post("/extras/tokenize", tokenize)
        runner = web.AppRunner(app, shutdown_timeout=1.0)  # a stalled handler is not waited for at the end
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        state["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        state["loop"], state["runner"] = loop, runner
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        pending = asyncio.all_tasks(loop)  # a handler still stalling: cancelled, not left to die with the loop
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}", seen
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        t.join(10)
