"""Async HTTP client for OpenAI-compatible servers: send, stamp, keep raw bytes.

A streamed POST goes through api/h1.py (httptools' llhttp under a protocol of its own: each network read stamped
with ``time.perf_counter_ns()`` as it arrives, its bytes kept, the framing taken apart after the reply);
everything else through aiohttp, whose loop only awaits the next network chunk, stamps it and appends the bytes
(docs/design.md principle 5). SSE splitting and JSON parsing happen afterwards (``sse.split_events``,
``reply.derive``). Every failure — refused
connection, HTTP error, broken stream, timeout — becomes a recorded ``Exchange`` with ``status``
(0 when no HTTP status arrived) and ``error``; nothing here raises for a server fault.

A request goes out once. It is sent again only when the connection failed before any byte of it was written
(``unwritten``: aiohttp's writer refused a transport already closing), at most ``MAX_RESENDS`` times, and the
reply says so (``retried``); a request whose bytes reached the socket is never re-sent, whatever came back
(RFC 9112 §9.3.1: a client must not retry a non-idempotent request it cannot show was never applied). A pooled
connection the server has already closed is found before anything is written on it (``LiveConnector``), so
that case needs no resend at all. A server that closes a kept-alive connection *later* than the next request
(llama-server, ~100 ms after each stream) cannot be caught that way: its dialect says so and the client then opens
a connection per request (``Client.fresh_connections``, set by ``api/detect.py``); a server not known to do it
that loses a request written on a reused connection puts the client in the same mode from then on (said in that
request's error).

Optional request fields (those an operation can live without, e.g. ``stream_options`` or
``return_token_ids``) that a server rejects with HTTP 400 are dropped and the request is sent once
more; the dropped names are recorded and the client keeps them dropped for later requests. When the
400 names no field, all the optional ones are dropped for that one retry, and kept dropped only if
the retry succeeds.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import numpy as np
import orjson

from inferencekit.api.endpoint import Endpoint
from inferencekit.api.h1 import ERROR_CAP, Origin, Pool, request, unframe
from inferencekit.api.reply import derive, loads_json
from inferencekit.api.sse import split_events
from inferencekit.api.tap import cut
from inferencekit.redact import has_secrets, scrub_chunks, scrub_text

__all__ = ["Client", "Exchange", "LiveConnector", "MAX_RESENDS", "describe_exception", "unwritten", "ERROR_BYTES",
           "READ_TIMEOUT"]

# X-Request-ID: a random 64-bit prefix per process and a counter, 32 hex digits like a uuid4's hex (uuid4 reads
# os.urandom for every request: ~20 µs a call on this VM, on the send path)
_ID_PREFIX = uuid.uuid4().hex[:16]
_id_counter = itertools.count(1)


def new_request_id() -> str:
    """A request id unique within the run (per-process random prefix + counter)."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


ERROR_BYTES = 500  # an HTTP error body is recorded up to this many bytes
# The read-idle limit (seconds; None: off) a command's clients take when not given one: ``--read-timeout`` is set
# here once by the CLI for the operation's run, rather than threaded through every command's signature.
READ_TIMEOUT: ContextVar[float | None] = ContextVar("READ_TIMEOUT", default=None)
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # RFC 3986 pchar and "/": kept; anything else percent-encoded (as yarl does)
MAX_RESENDS = 2  # re-sends of a request none of whose bytes was written (``unwritten``), each on another connection


@dataclass(slots=True)
class Exchange:
    """One request and what came back, before any parsing.

    Times are absolute ``perf_counter_ns``: ``call_ns`` just before the HTTP library is called,
    ``sent_ns`` when the library wrote the request body to the connection (its trace hook; the
    closest to the socket write aiohttp allows: connection set-up and the client's own queueing
    come before it), falling back to the headers' write, then to ``call_ns`` when nothing was
    written. ``status`` is the HTTP status or 0 when none arrived; ``error`` describes any failure
    (HTTP error body, connection error, broken stream), else None.
    """

    request_id: str
    path: str
    body: dict[str, Any]
    sent_ns: int
    call_ns: int = 0
    status: int = 0
    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    error: str | None = None
    content_type: str = ""
    dropped_fields: list[str] = field(default_factory=list)
    _body_stamped: bool = field(default=False, repr=False)
    retried: str | None = None
    # the failure came before any byte of the request was written (``unwritten``): the one case a resend is safe
    _unwritten: bool = field(default=False, repr=False)
    _attempts: int = field(default=0, repr=False)  # requests aiohttp started for this one (its own GET resend)
    _redirects: int = field(default=0, repr=False)
    _reused: bool = field(default=False, repr=False)  # the request went out on a pooled (kept-alive) connection
    _scrubbed: bool = field(default=False, repr=False)  # settle() has scrubbed the key from chunks and error
    # a streamed body not yet cut into chunks: (body bytes, body offset it starts at, read times, offsets)
    pending: tuple[bytes, int, Any, Any] | None = field(default=None, repr=False)
    # a streamed reply as api/h1.py read it (framing included), not yet taken apart: (raw, read times, read ends)
    framed: tuple[list[bytes] | bytes, Any, Any] | None = field(default=None, repr=False)
    # the first bytes of ``framed``'s reply went to a sink while it streamed (``Client.post(sink=...)``, a level's
    # journal): only the journal's record, read back, holds them all; the exchange cannot be taken apart here
    spilled: int = 0
    # a broken stream's "(after N chunks)" is added once its chunks can be counted (spilled: when read back)
    count_chunks: bool = False
    # held while the exchange is taken apart: the journal's writer thread and the loop (a multi-turn session reads
    # its reply at once) may both get to it first, and neither may see it half taken apart
    _lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)

    def _unframe(self) -> None:
        """``framed`` → ``pending`` (api/h1.py ``unframe``): done by whoever reads the exchange first (the journal's
        writer thread during a level), so the stream loop pays nothing for the framing. Callers hold ``_lock``."""
        if self.framed is None:
            return
        if self.spilled:
            raise RuntimeError(f"exchange {self.request_id}: its first {self.spilled} bytes went to the level's "
                               f"journal; read it back from there (bench/journal.py)")
        raw, times, ends = self.framed
        self.framed = None
        body, times, offsets, problem = unframe(raw, times, ends)
        self.pending = (body, 0, times, offsets)
        if problem and self.error is None:
            self.error = problem

    def raw_chunks(self) -> tuple[np.ndarray, np.ndarray, bytes]:
        """``(times, lengths, payload)``: the chunks as two int64 arrays [n] (arrival ns, byte length) and their bytes
        joined, without cutting a streamed body (what the journal stores; vectorised, cheap on the writer thread).
        With an API key registered (redact.py) the body is cut first so that the key is scrubbed from it."""
        with self._lock:
            return self._raw_chunks()

    def _raw_chunks(self) -> tuple[np.ndarray, np.ndarray, bytes]:
        self._unframe()
        if has_secrets():
            self.settle()
        t0 = np.fromiter((c[0] for c in self.chunks), np.int64, len(self.chunks))
        n0 = np.fromiter((len(c[1]) for c in self.chunks), np.int64, len(self.chunks))
        head = b"".join(c[1] for c in self.chunks)
        if self.pending is None:
            return t0, n0, head
        body, start, times, offsets = self.pending
        off = np.frombuffer(offsets, np.int64) if len(offsets) else np.zeros(0, np.int64)
        t = np.frombuffer(times, np.int64) if len(times) else np.zeros(0, np.int64)
        ends = np.maximum.accumulate(np.concatenate([[start], off]))
        lens = np.diff(ends)
        keep = lens > 0
        t, lens = t[keep], lens[keep]
        rest = start + len(body) - int(ends[-1])
        if rest > 0:  # cannot happen (the reads cover the body); kept, as tap.cut keeps it
            t = np.append(t, t[-1] if len(t) else self.sent_ns)
            lens = np.append(lens, rest)
        return np.concatenate([t0, t]), np.concatenate([n0, lens]), head + body

    def count_chunks_into_error(self) -> None:
        """Say in a broken stream's error how many chunks came before the break (``"(after N chunks)"``); takes the
        exchange apart to count them. Called by the client for a reply held whole, and by the journal's reader for
        one that went out in parts (``count_chunks``)."""
        n = len(self.settle())
        if n and self.error:
            self.error = f"{self.error} (after {n} chunks)"

    def settle(self) -> list[tuple[int, bytes]]:
        """``chunks``, after cutting a streamed body into them (api/tap.py) if that was left for later: the stream
        loop leaves it to whoever reads the exchange first (the journal's writer thread), off the event loop."""
        with self._lock:
            return self._settle()

    def _settle(self) -> list[tuple[int, bytes]]:
        self._unframe()
        if self.pending is not None:
            body, start, times, offsets = self.pending
            self.pending = None
            self.chunks.extend(cut(body, start, times, offsets))
        if has_secrets() and not self._scrubbed:  # a server that echoes the key back (a 401 quoting the header)
            self.chunks[:] = scrub_chunks(self.chunks)
            self.error = scrub_text(self.error) if self.error else self.error
            self._scrubbed = True
        return self.chunks

    def events(self, foreign: list[bytes] | None = None) -> tuple[list[list[Any]], bool]:
        """``([[t_ns relative to sent_ns, payload], ...], unterminated)`` for the reply file; lines of a stream
        that are not SSE go into ``foreign`` when given (``sse.split_events``).

        A JSON (non-SSE) body becomes one event holding the whole body, timed at its last chunk.
        """
        self.settle()
        if not self.chunks:
            return [], False
        if "text/event-stream" not in self.content_type and self.status == 200:
            body = b"".join(c for _, c in self.chunks).decode("utf-8", "replace")
            return [[self.chunks[-1][0] - self.sent_ns, body]], False
        evs, unterminated = split_events(self.chunks, foreign)
        return [[t - self.sent_ns, p] for t, p in evs], unterminated

    def to_journal(self) -> dict[str, Any]:
        """A JSON-able copy that keeps the raw bytes exactly (latin-1 maps bytes 1:1 to code points)."""
        self.settle()
        return {"request_id": self.request_id, "path": self.path, "body": self.body, "sent_ns": self.sent_ns,
                "call_ns": self.call_ns, "status": self.status, "error": self.error,
                "content_type": self.content_type, "dropped_fields": self.dropped_fields, "retried": self.retried,
                "chunks": [[t, c.decode("latin-1")] for t, c in self.chunks]}

    @classmethod
    def from_journal(cls, d: dict[str, Any]) -> Exchange:
        return cls(request_id=d["request_id"], path=d["path"], body=d["body"], sent_ns=d["sent_ns"],
                   call_ns=d.get("call_ns", 0), status=d["status"], error=d["error"],
                   content_type=d["content_type"], dropped_fields=list(d["dropped_fields"]), retried=d.get("retried"),
                   chunks=[(int(t), c.encode("latin-1")) for t, c in d["chunks"]])

    @property
    def ok(self) -> bool:
        """HTTP 200 and no transport error (errors inside the stream show only after ``to_reply``)."""
        return self.status == 200 and self.error is None

    def json(self) -> Any:
        """The body parsed as JSON (non-streamed replies), or None when it is not JSON."""
        self.settle()
        try:
            return loads_json(b"".join(c for _, c in self.chunks))
        except orjson.JSONDecodeError:
            return None

    def to_reply(self, **meta: Any) -> dict[str, Any]:
        """The reply-file dict (docs/design.md) for this exchange; ``meta`` adds id, engine, level, ..."""
        foreign: list[bytes] = []
        events, unterminated = self.events(foreign)
        derived = derive(events)
        stream_error = derived.pop("stream_error")
        empty_error = derived.pop("empty_error")
        error = self.error or stream_error
        streamed = self.status == 200 and "text/event-stream" in self.content_type
        if error is None and streamed and foreign:
            error = (f"protocol error: {len(foreign)} line(s) of the stream are not SSE (no data: field; first: "
                     f"{foreign[0][:120].decode('utf-8', 'replace')!r})")
        if error is None and streamed and not derived["done"]:
            error = "stream ended without [DONE]" + (" inside an event" if unterminated else "")
        if error is None:
            error = empty_error
        reply: dict[str, Any] = {**meta, "request_id": self.request_id, "endpoint": self.path,
                                 "sent_ns": self.sent_ns, "call_ns": self.call_ns, "status": self.status}
        if error:
            reply["error"] = error
        reply["events"] = events
        reply.update(derived)
        reply["dropped_fields"] = list(self.dropped_fields)
        if self.retried:
            reply["retried"] = self.retried
        return reply


def describe_exception(exc: BaseException, timeout_s: float | None = None, read_timeout_s: float | None = None
                       ) -> str:
    """One line for a transport failure; the single place aiohttp's errors are mapped."""
    if isinstance(exc, aiohttp.SocketTimeoutError):  # aiohttp's sock_read timer: --read-timeout
        return f"read timeout: no byte for {read_timeout_s:g} s" if read_timeout_s else "read timeout"
    if isinstance(exc, asyncio.TimeoutError):
        return f"timeout: no complete reply within {timeout_s:g} s" if timeout_s else "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed: {exc.os_error or exc}"
    if unwritten(exc):
        return "connection closed before the request was written"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected before the reply ended"
    if isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__ or (exc.args[1] if len(exc.args) > 1 else None)
        return "broken stream: the connection closed before the reply ended" + (
            f" ({type(cause).__name__})" if cause else "")
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"bad HTTP response: {exc.status} {exc.message}"
    if isinstance(exc, OSError) and exc.strerror:  # aiohttp.ClientOSError is an OSError too
        return f"connection error: {exc.strerror.lower()}"
    return f"{type(exc).__name__}: {exc}"


async def _on_headers_sent(session: Any, ctx: Any, params: Any) -> None:
    ex = ctx.trace_request_ctx
    if isinstance(ex, Exchange):
        ex._attempts += 1  # once per request aiohttp starts: more than once is its own resend of an idempotent GET
        if not ex.sent_ns:
            ex.sent_ns = time.perf_counter_ns()


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    ex = ctx.trace_request_ctx
    if isinstance(ex, Exchange):
        ex._reused = True


async def _on_create(session: Any, ctx: Any, params: Any) -> None:  # a new connection after all (LiveConnector)
    ex = ctx.trace_request_ctx
    if isinstance(ex, Exchange):
        ex._reused = False


async def _on_redirect(session: Any, ctx: Any, params: Any) -> None:
    ex = ctx.trace_request_ctx
    if isinstance(ex, Exchange):
        ex._redirects += 1


async def _on_body_sent(session: Any, ctx: Any, params: Any) -> None:
    ex = ctx.trace_request_ctx
    if isinstance(ex, Exchange) and not ex._body_stamped:
        ex.sent_ns = time.perf_counter_ns()
        ex._body_stamped = True


def _trace_config() -> aiohttp.TraceConfig:
    tc = aiohttp.TraceConfig()
    tc.on_request_headers_sent.append(_on_headers_sent)
    tc.on_request_chunk_sent.append(_on_body_sent)
    tc.on_request_redirect.append(_on_redirect)
    tc.on_connection_reuseconn.append(_on_reuse)
    tc.on_connection_create_end.append(_on_create)
    return tc


# aiohttp's StreamWriter refuses to write on a transport that is closing, before handing it a byte
# (http_writer.py ``_write`` / ``_writelines``, aiohttp 3.14): the one failure that proves nothing was written
_REFUSED_WRITE = "Cannot write to closing transport"


def unwritten(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) is aiohttp's writer refusing a closing transport:
    the request's first write never happened, so no byte of it reached the socket and it is safe to send again.

    aiohttp coalesces a request's headers with its body into one write (``StreamWriter._send_headers_with_payload``;
    a bytes body is one write), and raises ``ClientConnectionResetError("Cannot write to closing transport")``
    instead of writing when the transport is already closing: directly from ``ClientRequest.send`` for a request
    without a body, and from the body-writer task, wrapped in ``ClientOSError("Can not write request body …")``
    with the refusal as its ``__cause__``, for one with a body. Every other failure — a reset, an EOF or a timeout
    once the bytes were handed to the transport (``ServerDisconnectedError``, ``ClientOSError`` with an errno),
    a refusal after an earlier write (``drain``'s "Connection lost") — may come after the server read the
    request, and is not a resend case. A failed connect (``ClientConnectorError``) wrote nothing either, but a
    server that refuses connections now will refuse a resend too, so it is recorded, not re-sent.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, aiohttp.ClientConnectionResetError) and str(e) == _REFUSED_WRITE:
            return True
        e = e.__cause__ or e.__context__
    return False


def _dropped(transport: Any) -> bool:
    """True when an idle pooled connection's socket is readable: the server closed it (EOF), reset it, or sent bytes
    no request asked for, and the event loop has not handled that yet. urllib3 tests a pooled connection the same
    way before reusing it (``urllib3.util.connection.is_connection_dropped``: ``wait_for_read(sock, timeout=0)``).
    A transport whose socket cannot be polled is taken as alive."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        fd = sock.fileno() if sock is not None else -1
    except (OSError, ValueError):
        return True
    if fd < 0:
        return sock is not None
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(fd, select.POLLIN | select.POLLPRI)
            return bool(p.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class LiveConnector(aiohttp.TCPConnector):
    """aiohttp's pool, which also drops a pooled connection the server has already closed before handing it out.

    aiohttp reuses a pooled connection unless its event loop has already seen the close (``proto.is_connected()``);
    a server that closes after a reply (llama-server closes after every stream while announcing keep-alive) leaves a
    window where the FIN sits in the socket unread and the next request is written onto a dead connection. Its
    bytes have then reached the socket, so by the resend rule (module docstring) it could not be sent again; this
    pool looks at the socket first (``_dropped``) and takes another connection, or a new one, instead. Overrides
    ``TCPConnector._get`` (aiohttp's pool look-up, pinned in pyproject.toml): the connection it returns is the one
    checked, nothing else of aiohttp's is touched.
    """

    async def _get(self, key: Any, traces: Any) -> Any:
        while True:
            conn = await super()._get(key, traces)
            if conn is None or not _dropped(conn.transport):
                return conn
            conn.close()


def _named_in(fields: Iterable[str], message: str) -> list[str]:
    low = message.lower()
    return [f for f in fields if f.lower() in low]


class Client:
    """One endpoint's connections: api/h1.py's pool for streamed POSTs, an aiohttp session for every other request.
    Use as ``async with Client(endpoint) as c:``.

    Args:
        endpoint: where to send, with the API-key variable's name.
        timeout_s: whole-request limit in seconds (stream included).
        read_timeout_s: read-idle limit in seconds: the longest wait for the next byte, first one included
            (aiohttp's ``sock_read``; vLLM bench serve and GuideLLM have one total limit, this is the second one
            users of HTTP clients expect). None or 0: off. Default: ``READ_TIMEOUT`` as the command set it.
        max_connections: connection pool size (each pool's); 0 = unlimited (the load runner bounds concurrency).
        tap: streamed POSTs through api/h1.py (stamped where the bytes arrive); False (or ``INFERENCEKIT_TAP=0``):
            through aiohttp's ``readany()`` loop, stamped when the request's task runs (kept to compare the two).
        fresh_connections: open a connection per request (closed after its reply) instead of keeping them alive:
            for a server that closes kept-alive connections after a reply (``Dialect.keeps_connections``; set by
            ``detect_engine``, or by the client itself once such a server lost a request, see the module docstring).
    """

    def __init__(self, endpoint: Endpoint, *, timeout_s: float = 600.0, max_connections: int = 0,
                 tap: bool = True, read_timeout_s: float | None = None, fresh_connections: bool = False) -> None:
        self.endpoint = endpoint
        self.tap = tap and os.environ.get("INFERENCEKIT_TAP", "1") != "0"
        self.timeout_s = timeout_s
        self.read_timeout_s = (read_timeout_s if read_timeout_s is not None else READ_TIMEOUT.get()) or None
        self._limit = max_connections
        self.fresh_connections = fresh_connections
        self._session: aiohttp.ClientSession | None = None
        self._fresh_session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json", **endpoint.headers()}
        self._origin = Origin.parse(endpoint.root)
        self._pool: Pool | None = None
        # a key with CR or LF never gets here: read_api_key refuses it (Endpoint.headers)
        fixed = {"Host": self._origin.host_header, "Accept": "*/*", "Accept-Encoding": "gzip, deflate",
                 "User-Agent": "inferencekit", **self._headers}
        self._h1_headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self.rejected_fields: set[str] = set()

    def _new_session(self, *, force_close: bool) -> aiohttp.ClientSession:
        connector = (aiohttp.TCPConnector(limit=self._limit, ttl_dns_cache=300, force_close=True) if force_close else
                     LiveConnector(limit=self._limit, ttl_dns_cache=300, enable_cleanup_closed=False))
        return aiohttp.ClientSession(connector=connector, auto_decompress=True, trace_configs=[_trace_config()],
                                     timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def __aenter__(self) -> Client:
        self._session = self._new_session(force_close=False)
        self._pool = Pool(self._origin, _dropped, self._limit)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        for s in (self._session, self._fresh_session):
            if s is not None:
                await s.close()
        self._session = self._fresh_session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session the next request goes through: the pooled one, or with ``fresh_connections`` one whose every
        connection is closed after its reply (aiohttp's ``force_close``, which also sends ``Connection: close``)."""
        if self._session is None:
            raise RuntimeError("Client used outside `async with`")
        if not self.fresh_connections:
            return self._session
        if self._fresh_session is None:
            self._fresh_session = self._new_session(force_close=True)
        return self._fresh_session

    async def get(self, path: str, *, timeout_s: float | None = None) -> Exchange:
        """GET ``path`` (e.g. ``/v1/models``); never raises for server faults."""
        return await self._exchange("GET", path, None, new_request_id(), timeout_s)

    async def post(self, path: str, body: dict[str, Any], *, optional: Iterable[str] = (),
                   request_id: str | None = None, timeout_s: float | None = None,
                   sink: Callable[[list[bytearray]], None] | None = None) -> Exchange:
        """POST ``body`` to ``path``, streamed or not; drop-and-retry rejected ``optional`` fields once.

        Args:
            path: e.g. ``/v1/chat/completions``.
            body: the JSON request; not modified.
            optional: names of fields in ``body`` the caller can do without.
            request_id: sent as ``X-Request-ID`` (``new_request_id()`` when None).
            sink: for a streamed reply read by api/h1.py, where its full blocks go as it streams (a level's
                ``Journal.parts()``); the exchange then says how many bytes went (``spilled``) and can only be read
                back from the journal. Ignored on the aiohttp path.
        """
        rid = request_id or new_request_id()
        optional = [f for f in optional if f in body]
        dropped = [f for f in optional if f in self.rejected_fields]
        send = {k: v for k, v in body.items() if k not in dropped} if dropped else body
        ex = await self._exchange("POST", path, send, rid, timeout_s, sink)
        if ex.status == 400 and optional:
            left = [f for f in optional if f not in dropped]
            named = _named_in(left, ex.error or "")
            drop = named or left
            if drop:
                send = {k: v for k, v in body.items() if k not in dropped + drop}
                retry = await self._exchange("POST", path, send, rid, timeout_s, sink)
                # a field the error names is rejected for good; fields dropped blind (the message named none) are
                # kept dropped only when the request then went through: a retry that fails too shows they were not
                # the cause, and dropping them for the rest of the run would change every later request for nothing
                if named or retry.ok:
                    self.rejected_fields.update(drop)
                    dropped = dropped + drop
                    ex = retry
                else:
                    ex.retried = (f"resent once without {', '.join(drop)} (the HTTP 400 named no field); that failed "
                                  f"too (HTTP {retry.status}), so the fields are sent again on later requests")
        ex.dropped_fields = dropped
        return ex

    async def _exchange(self, method: str, path: str, body: dict[str, Any] | None, rid: str,
                        timeout_s: float | None, sink: Callable[[list[bytearray]], None] | None = None) -> Exchange:
        """One request, sent once; again (at most ``MAX_RESENDS`` times) only when the connection failed before
        any byte of it was written (``unwritten``). Every resend is said on the reply (``retried``), as is aiohttp's
        own resend of an idempotent GET whose pooled connection failed (``_attempts``)."""
        ex = await self._exchange_once(method, path, body, rid, timeout_s, sink)
        first_error = ex.error
        resends = 0
        while ex._unwritten and resends < MAX_RESENDS:
            resends += 1
            ex = await self._exchange_once(method, path, body, rid, timeout_s, sink)
        notes = []
        if resends:
            notes.append(f"sent {resends + 1} times: the connection failed before any byte of the request was "
                         f"written ({first_error})" + (", every time" if ex._unwritten else ""))
        extra = ex._attempts - ex._redirects - 1
        if extra > 0:
            notes.append(f"aiohttp sent this {method} {extra + 1} times: it re-sends an idempotent request once when "
                         f"its pooled connection fails")
        if notes:
            ex.retried = "; ".join(notes)
        return ex

    async def _exchange_once(self, method: str, path: str, body: dict[str, Any] | None, rid: str,
                             timeout_s: float | None, sink: Callable[[list[bytearray]], None] | None = None
                             ) -> Exchange:
        if self.tap and body is not None and body.get("stream") is True and method == "POST":
            return await self._streamed_once(path, body, rid, timeout_s, sink)
        headers = {**self._headers, "X-Request-ID": rid}
        data = orjson.dumps(body) if body is not None else None
        limit = timeout_s or self.timeout_s
        idle = self.read_timeout_s
        kw: dict[str, Any] = ({"timeout": aiohttp.ClientTimeout(total=limit, sock_read=idle)}
                              if timeout_s or idle else {})
        ex = Exchange(request_id=rid, path=path, body=body or {}, sent_ns=0)
        chunks = ex.chunks
        append = chunks.append
        clock = time.perf_counter_ns
        try:
            ex.call_ns = clock()
            async with self.session.request(method, self.endpoint.url(path), data=data, headers=headers,
                                            trace_request_ctx=ex, **kw) as resp:
                ex.status = resp.status
                ex.content_type = resp.headers.get("Content-Type", "")
                readany = resp.content.readany
                if resp.status != 200:
                    raw = await resp.content.read(ERROR_CAP)
                    append((clock(), raw))
                    # one line (an HTML error page has many); the raw bytes stay in the reply's events
                    ex.error = f"HTTP {resp.status}: " + " ".join(raw[:ERROR_BYTES].decode("utf-8", "replace").split())
                    return ex
                while True:
                    chunk = await readany()
                    if not chunk:
                        break
                    append((clock(), chunk))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            ex.error = describe_exception(exc, limit, idle)
            ex._unwritten = not chunks and ex.status == 0 and unwritten(exc)
            if (ex._reused and not ex._unwritten and not chunks and ex.status == 0 and not self.fresh_connections
                    and isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))
                    and not isinstance(exc, aiohttp.ClientConnectorError)):
                # written on a kept-alive connection that the server then closed without a reply: not re-sent (the
                # server may have read it); it is the mark of a server that closes kept-alive connections, so every
                # later request gets its own connection
                self.fresh_connections = True
                ex.error += (" (on a kept-alive connection the server closed before any reply; the request may "
                             "have been read, so it is not re-sent; later requests open their own connection)")
            if chunks:
                ex.error = f"{ex.error} (after {len(chunks)} chunks)"
        if not ex.sent_ns:
            ex.sent_ns = ex.call_ns
        return ex

    async def _streamed_once(self, path: str, body: dict[str, Any], rid: str, timeout_s: float | None,
                             sink: Callable[[list[bytearray]], None] | None = None) -> Exchange:
        """A streamed POST through api/h1.py: the reply's reads stamped as they arrive, its framing taken apart
        later (``Exchange.framed``). The same ``Exchange`` as the aiohttp path, in the same words."""
        limit = timeout_s or self.timeout_s
        fresh = self.fresh_connections
        close = "Connection: close\r\n" if fresh else ""
        data = orjson.dumps(body)
        target = quote(self._origin.prefix + path, safe=_PATH_SAFE)
        outbox = [(f"POST {target} HTTP/1.1\r\n{self._h1_headers}Content-Length: {len(data)}\r\n"
                   f"X-Request-ID: {rid}\r\n{close}\r\n").encode() + data]
        del data  # orjson's buffer (~4 KiB) and the request's bytes are not held for the length of the stream
        if self._pool is None:
            raise RuntimeError("Client used outside `async with`")
        ex = Exchange(request_id=rid, path=path, body=body, sent_ns=0)
        ex.call_ns = time.perf_counter_ns()
        loop = asyncio.get_running_loop()
        rep = await request(self._pool, outbox, fresh=fresh, deadline=loop.time() + limit if limit else None,
                            timeout_s=limit, idle_s=self.read_timeout_s, sink=sink)
        ex.status, ex.content_type, ex.error = rep.status, rep.content_type, rep.error
        ex.sent_ns = rep.sent_ns or ex.call_ns
        ex._reused, ex._unwritten = rep.reused, rep.unwritten
        ex.framed, ex.spilled = rep.framed, rep.spilled
        if ex.status not in (0, 200):  # an HTTP error: its words, one line, the raw bytes kept in the events
            raw = b"".join(c for _, c in ex.settle())
            cut = f" ({rep.error})" if rep.error else ""  # its body did not end: said, not hidden
            ex.error = f"HTTP {ex.status}: " + " ".join(raw[:ERROR_BYTES].decode("utf-8", "replace").split()) + cut
            return ex
        if ex.error is None:
            return ex
        if rep.cut_off and rep.reused and not fresh:
            # written on a kept-alive connection that the server then closed without a reply: as on the aiohttp path
            self.fresh_connections = True
            ex.error += (" (on a kept-alive connection the server closed before any reply; the request may "
                         "have been read, so it is not re-sent; later requests open their own connection)")
        if ex.spilled:  # its chunks are counted when the journal gives it back whole (Exchange.count_chunks)
            ex.count_chunks = True
        else:
            ex.count_chunks_into_error()
        return ex

    async def preconnect(self, n: int, timeout_s: float = 30.0) -> int:
        """Open ``n`` kept-alive connections for the streamed requests to come (none when each request opens its own:
        ``fresh_connections``); returns how many opened. Streamed POSTs go through api/h1.py's pool, everything else
        through aiohttp's: each pool is warmed with what its own requests will take."""
        if self.fresh_connections or n < 1:
            return 0
        if self.tap and self._pool is not None:
            return await self._pool.open(n, timeout_s)
        got = await asyncio.gather(*(self.get("/v1/models", timeout_s=timeout_s) for _ in range(n)))
        return sum(1 for ex in got if ex.ok)

    async def get_json(self, path: str, *, timeout_s: float | None = None) -> tuple[Any, str | None]:
        """``(parsed JSON, None)`` for a 200 reply, else ``(None, error line)``; bounded by ``timeout_s``, else by
        the client's own limit (``--timeout``: an engine still busy with an earlier request is waited for)."""
        ex = await self.get(path, timeout_s=timeout_s)
        if ex.error:
            return None, ex.error
        val = ex.json()
        return (val, None) if val is not None else (None, f"{path}: reply is not JSON")

    async def post_json(self, path: str, body: dict[str, Any], *,
                        timeout_s: float | None = None) -> tuple[Any, str | None]:
        """POST without streaming: ``(parsed JSON, None)`` for 200, else ``(None, error line)``."""
        ex = await self.post(path, body, timeout_s=timeout_s)
        if ex.error:
            return None, ex.error
        val = ex.json()
        return (val, None) if val is not None else (None, f"{path}: reply is not JSON")
