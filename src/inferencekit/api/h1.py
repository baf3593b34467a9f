"""HTTP/1.1 for streamed replies: the bytes stamped as they arrive, the framing left for later.

Where the client's time went before this module (py-spy on ``shared/perf``'s synthetic server, chat, 256 tokens
out, c=64, itl 0; benchmarks/README.md, "client_vs_peers.py"): aiohttp's request path (connector, request
object, trace hooks, writer task) cost ~300 µs a request, and each network read went through aiohttp's
``ResponseHandler.data_received`` into its Python ``StreamReader`` (~1 µs). Both are gone from the streaming
path here:

- a read is one Python call: stamp it (``time.perf_counter_ns``), keep its bytes, hand them to llhttp
  (``httptools.HttpResponseParser``, the parser uvicorn uses) so that the end of the reply is known. No
  body callback is registered, so llhttp walks the chunked framing in C and calls back into Python only
  for the status line, the headers and the reply's end;
- the body is taken out of its framing afterwards (``unframe``), off the event loop, by parsing the kept
  bytes again read by read: each read gets the body bytes it completed, as ``api/tap.py`` ``cut`` expects.
  A gzip or deflate body is decoded there, read by read (aiohttp's ``auto_decompress`` does the same).

A request is one write of its head and body; ``Reply.sent_ns`` is stamped right after that write returns.
A connection carries one exchange at a time and goes back to the pool only after a whole reply that allows
keep-alive, with no byte after it. What is not done here: redirects (a 3xx is recorded as the reply it is),
proxies (aiohttp's session ignores them too), Brotli (not asked for: ``Accept-Encoding: gzip, deflate``).
Every server fault ends as ``Reply.error`` in the words ``client.describe_exception`` uses; nothing raises.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools

__all__ = ["Origin", "Pool", "Reply", "request", "unframe"]

ERROR_CAP = 64 * 1024  # an HTTP error body is read up to this many bytes (the aiohttp path reads the same)
BLOCK = 4096  # bytes per block of a reply kept in memory (Connection.blocks)
SPILL_BLOCKS = 4  # with a sink, a 200 reply's full blocks are handed to it once this many are held (16 KiB)
HEAD_CAP = 1 << 20  # a reply whose status line and headers have not ended once this much has come is refused
ERROR_IDLE_S = 1.0  # an error reply's body that stops coming is taken as it is after this long without a byte
KNOWN_ENCODINGS = (b"", b"identity", b"gzip", b"x-gzip", b"deflate")  # what unframe decodes


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a connection goes: from an ``Endpoint.root`` (``scheme://host[:port][/prefix]``)."""

    host: str
    port: int
    tls: bool
    prefix: str
    host_header: str

    @classmethod
    def parse(cls, root: str) -> Origin:
        parts = urlsplit(root)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname or ""
        shown = f"[{host}]" if ":" in host else host
        default = (tls and port == 443) or (not tls and port == 80)
        return cls(host, port, tls, parts.path.rstrip("/"), shown if default else f"{shown}:{port}")


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection's protocol; ``begin`` arms it for the next reply."""

    __slots__ = ("blocks", "cap", "clock", "complete", "ends", "error", "head_done", "headers", "keep_alive", "lost",
                 "lost_exc", "parser", "pos", "sink", "size", "spilled", "status", "stray", "times", "transport",
                 "waiter")

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.transport: Any = None
        self.lost = False
        self.lost_exc: BaseException | None = None
        self.stray = False  # bytes came that no request asked for: the connection is not used again
        self.waiter: asyncio.Future[None] | None = None
        self._clear()

    def _clear(self) -> None:
        """Forget the last reply (its bytes and stamps went with it, in ``Reply.framed``)."""
        # the reply's bytes in fixed blocks of BLOCK bytes, the last filled to ``pos``: each read copied in, no block
        # ever resized (a growing buffer per stream, realloc'd as it grows, fragments the heap across 1,024 streams;
        # and the loop's own read objects are kept large by uvloop), so memory is the bytes plus under one block
        self.blocks: list[bytearray] = []
        self.pos = BLOCK
        self.size = 0
        # where full blocks of a 200 reply go while it streams (a level's journal: Journal.parts), and how many bytes
        # went there; None: the whole reply stays in ``blocks``
        self.sink: Callable[[list[bytearray]], None] | None = None
        self.spilled = 0
        self.times = array("q")
        self.ends = array("q")
        self.parser: Any = None
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.head_done = False
        self.complete = False
        self.error: str | None = None
        self.cap = 1 << 62
        self.keep_alive = False

    def begin(self, waiter: asyncio.Future[None], sink: Callable[[list[bytearray]], None] | None = None) -> None:
        self._clear()
        self.waiter = waiter
        self.sink = sink
        self.parser = httptools.HttpResponseParser(self)

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = self.clock()
        if self.waiter is None or self.complete:  # between replies, or after this one's end
            self.stray = True
            return
        n = len(data)
        pos = self.pos
        if pos + n <= BLOCK:
            self.blocks[-1][pos:pos + n] = data
            self.pos = pos + n
        else:
            self._spill(data)
        self.size += n
        self.times.append(t)
        self.ends.append(self.size)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._end("bad HTTP response: the server switched protocols")
        except httptools.HttpParserError as e:
            if self.complete:  # bytes after the reply's end: the reply stands, the connection is not reused
                self.stray = True
            else:
                self._end(f"bad HTTP response: {e}")
        if not self.head_done and self.size > HEAD_CAP and self.error is None:
            self._end(f"bad HTTP response: the status line and headers had not ended when {HEAD_CAP // 2**20} MiB "
                      f"had come")
        if self.size > self.cap and not self.complete:  # an error body past ERROR_CAP: enough of it is kept
            self.complete = True
            self.stray = True
            self._wake()

    def _spill(self, data: bytes) -> None:
        view = memoryview(data)
        while len(view):
            if self.pos == BLOCK:
                if self.sink is not None and len(self.blocks) >= SPILL_BLOCKS and self.status == 200 and self.head_done:
                    # every block held is full: they go to the sink, so a long reply holds at most SPILL_BLOCKS + 1
                    # blocks here (at 1,024 streams of 256 tokens, ~54 KiB each, they were most of the memory)
                    self.sink(self.blocks)
                    self.spilled += BLOCK * len(self.blocks)
                    self.blocks = []
                self.blocks.append(bytearray(BLOCK))
                self.pos = 0
            k = min(BLOCK - self.pos, len(view))
            self.blocks[-1][self.pos:self.pos + k] = view[:k]
            self.pos += k
            view = view[k:]

    def raw(self) -> list[Any]:
        """The reply's bytes so far that were not handed to the sink (``spilled`` bytes were, before these), as pieces
        to join (the last block cut at its fill)."""
        if not self.blocks:
            return []
        return [*self.blocks[:-1], memoryview(self.blocks[-1])[:self.pos]]

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.lost_exc = exc
        if not self.complete and self.head_done and self.status >= 200 and self._until_close():
            self.complete = True  # a body delimited by the connection's close (no length, not chunked)
        self._wake()

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self.complete:  # a second reply on the connection, nobody asked for: not this one's, and not reused
            self.stray = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        key = name.lower()
        old = self.headers.get(key)
        self.headers[key] = value if old is None else old + b", " + value

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:
            return
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()  # llhttp's answer is only sound before the body
        if self.status != 200:
            self.cap = self.size + ERROR_CAP
            asyncio.get_running_loop().call_later(ERROR_IDLE_S, self._error_idle)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if 100 <= self.status < 200:  # an interim reply (100 Continue, 103): the real one follows
            self.status = 0
            self.headers = {}
            return
        self.complete = True
        self._wake()

    def _error_idle(self) -> None:
        """An error reply whose body has stopped coming is taken as it is after ERROR_IDLE_S without a byte (aiohttp's
        path reads what has come of it, up to ERROR_CAP, and does not wait for its end either)."""
        if self.complete or self.lost or self.waiter is None or self.waiter.done():
            return
        idle_s = (self.clock() - self.times[-1]) / 1e9 if len(self.times) else ERROR_IDLE_S
        if idle_s >= ERROR_IDLE_S:
            self.complete = True
            self.stray = True  # the rest of the body may still come: the connection is not reused
            self._wake()
        else:
            asyncio.get_running_loop().call_later(ERROR_IDLE_S - idle_s, self._error_idle)

    def _until_close(self) -> bool:
        return b"content-length" not in self.headers and b"chunked" not in self.headers.get(b"transfer-encoding", b"")

    def _end(self, error: str) -> None:
        self.error = error
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.lost and not self.stray

    def close(self) -> None:
        self.waiter = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Pool:
    """Kept-alive connections to one origin; ``fresh`` gives each request its own (closed after its reply).

    A pooled connection whose socket is already readable (the server closed it, or sent bytes nobody asked for)
    is dropped before it is handed out: ``dropped`` is ``client._dropped`` (urllib3's test of a pooled socket).
    """

    def __init__(self, origin: Origin, dropped: Callable[[Any], bool], limit: int = 0) -> None:
        self.origin = origin
        self.dropped = dropped
        self.idle: list[Connection] = []
        self.limit = max(limit, 0)
        self.slots = asyncio.Semaphore(limit) if limit > 0 else None
        self.clock = time.perf_counter_ns
        self._ssl: ssl.SSLContext | None = None

    async def acquire(self, fresh: bool) -> tuple[Connection, bool]:
        """``(connection, reused)``. Raises ``OSError`` when a new connection cannot be opened."""
        while self.idle and not fresh:
            conn = self.idle.pop()
            if conn.lost or conn.stray or self.dropped(conn.transport):
                conn.close()
                continue
            return conn, True
        o = self.origin
        if o.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: Connection(self.clock), o.host, o.port,
                                               ssl=self._ssl if o.tls else None,
                                               server_hostname=o.host if o.tls else None)
        return conn, False

    async def open(self, n: int, timeout_s: float) -> int:
        """Open ``n`` connections into the pool at once (no request on them); returns how many opened."""
        async def one() -> Connection | None:
            try:
                async with asyncio.timeout(timeout_s):
                    conn, _ = await self.acquire(fresh=True)
                    return conn
            except (OSError, TimeoutError):
                return None

        if self.limit:
            n = min(n, self.limit)
        opened = [c for c in await asyncio.gather(*(one() for _ in range(n))) if c is not None]
        self.idle.extend(opened)
        return len(opened)

    def release(self, conn: Connection, keep: bool) -> None:
        keep = keep and conn.reusable()
        conn.waiter = None
        conn._clear()
        if keep:
            self.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


@dataclass(slots=True)
class Reply:
    """What ``request`` brings back. ``framed``: the reply's bytes as read (head and framing included), each read's
    arrival time (``perf_counter_ns``) and the end offset of its bytes, for ``unframe``; None when nothing came."""

    status: int = 0
    content_type: str = ""
    error: str | None = None
    sent_ns: int = 0
    reused: bool = False
    unwritten: bool = False
    cut_off: bool = False  # the connection closed (or was reset) after the write, before any byte of a reply
    framed: tuple[list[Any], array[int], array[int]] | None = field(default=None, repr=False)
    spilled: int = 0  # the reply's first bytes, handed to the sink: not in ``framed``'s pieces (its ends count them)


def _lost_words(conn: Connection) -> str:
    exc = conn.lost_exc
    if not conn.head_done:
        if isinstance(exc, OSError) and exc.strerror:
            return f"connection error: {exc.strerror.lower()}"
        return "server disconnected before the reply ended"
    return "broken stream: the connection closed before the reply ended" + (
        f" ({type(exc).__name__})" if exc is not None else "")


async def request(pool: Pool, outbox: list[bytes], *, fresh: bool, deadline: float | None,
                  timeout_s: float | None, idle_s: float | None,
                  sink: Callable[[list[bytearray]], None] | None = None) -> Reply:
    """Send one request and read its reply. ``outbox`` holds the request's bytes (request line, headers, body) as
    its one item, taken out when written, so that nothing holds them for the length of the stream. ``sink``, when
    given, takes a 200 reply's full blocks as it streams (``SPILL_BLOCKS`` at a time, on the loop: it must only
    queue them); ``Reply.spilled`` says how many bytes it took, which ``framed`` then lacks at its front.

    ``deadline`` (event-loop time) bounds the whole exchange, connect included; ``idle_s`` the wait for each next
    byte after the write (``--read-timeout``), checked against the last read's stamp, so a read costs nothing
    more for it. Never raises for a server fault: every one is ``Reply.error``.
    """
    rep = Reply()
    loop = asyncio.get_running_loop()
    conn: Connection | None = None
    if pool.slots is not None:
        await pool.slots.acquire()
    try:
        async with asyncio.timeout_at(deadline):
            try:
                conn, rep.reused = await pool.acquire(fresh)
            except OSError as e:
                rep.error = f"connection failed: {e}"
                return rep
            transport = conn.transport
            if transport is None or transport.is_closing():  # nothing written: the one case a resend is safe
                rep.error = "connection closed before the request was written"
                rep.unwritten = True
                return rep
            waiter: asyncio.Future[None] = loop.create_future()
            conn.begin(waiter, sink)
            transport.write(outbox.pop())
            rep.sent_ns = pool.clock()
            if conn.lost:
                conn._wake()
            if idle_s is None:
                await waiter
            else:
                idle_ns = int(idle_s * 1e9)
                while not waiter.done():
                    last = conn.times[-1] if len(conn.times) else rep.sent_ns
                    left = (last + idle_ns - pool.clock()) / 1e9
                    if left <= 0:
                        rep.error = f"read timeout: no byte for {idle_s:g} s"
                        break
                    await asyncio.wait((waiter,), timeout=left)
    except TimeoutError:
        rep.error = f"timeout: no complete reply within {timeout_s:g} s" if timeout_s else "timeout"
    except BaseException:  # cancelled (Ctrl-C, a caller's own limit): the reply is cut off, so is its connection
        if conn is not None:
            pool.release(conn, keep=False)
        raise
    finally:
        if pool.slots is not None:
            pool.slots.release()
    if conn is None:
        return rep
    rep.status = conn.status if conn.head_done else 0
    rep.content_type = conn.headers.get(b"content-type", b"").decode("latin-1")
    if len(conn.times):
        rep.framed = (conn.raw(), conn.times, conn.ends)  # handed over, not copied: ``begin`` gives the next its own
        rep.spilled = conn.spilled
    encoding = conn.headers.get(b"content-encoding", b"").strip().lower()
    if rep.error is None and conn.head_done and encoding not in KNOWN_ENCODINGS:
        rep.error = f"bad HTTP response: Content-Encoding {encoding.decode('latin-1')} was not asked for"
    if rep.error is None:
        if conn.error is not None:
            rep.error = conn.error
        elif not conn.complete:
            rep.error = _lost_words(conn)
            rep.cut_off = not len(conn.times)
    pool.release(conn, keep=rep.error is None and not fresh)
    return rep


class _Body:
    """httptools callbacks for ``unframe``: the body's bytes, the interim replies skipped."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.status = 0
        self.done = False
        self.parser: Any = None
        self.encoding = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-encoding" and not self.done:
            self.encoding = value.strip().lower()

    def on_headers_complete(self) -> None:
        if not self.done:
            self.status = self.parser.get_status_code()

    def on_body(self, data: bytes) -> None:
        if not self.done:  # bytes after the reply's end (a second reply nobody asked for) are not its body
            self.parts.append(data)
            self.size += len(data)

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            self.encoding = b""
            return
        self.done = True


def unframe(raw: list[Any] | bytes, times: array[int], ends: Any
            ) -> tuple[bytes, array[int], array[int], str | None]:
    """The body of a reply read by ``request``, and each read's share of it.

    Args:
        raw: the reply's bytes as read (status line, headers, chunked framing), whole or as pieces to join.
        times, ends: per read, its arrival time (ns) and the end offset of its bytes in the joined reply.

    Returns:
        ``(body, times, offsets, problem)``: the body (decoded when its Content-Encoding is gzip or deflate),
        per read the body length once that read was taken in (non-decreasing; ``tap.cut``'s offsets with start
        0), and a sentence when the body could not be decoded (what was decoded is kept), else None.
    """
    cb = _Body()
    parser = httptools.HttpResponseParser(cb)
    cb.parser = parser
    offsets = array("q")
    out: list[bytes] = []
    size = 0
    decoder: Any = None
    taken = 0
    problem: str | None = None
    whole = memoryview(b"".join(raw) if isinstance(raw, list) else raw)
    for a, b in zip([0, *ends[:-1]], ends):
        piece = whole[a:b]
        if not cb.done:
            try:
                parser.feed_data(piece)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                cb.done = True  # what ``request`` found was recorded there; the body parsed so far stands
        if taken < len(cb.parts):
            fresh = b"".join(cb.parts[taken:])
            taken = len(cb.parts)
            if problem is not None:  # past a body that would not decode: nothing more of it is kept
                fresh = b""
            elif cb.encoding in (b"gzip", b"x-gzip", b"deflate"):
                try:
                    fresh, decoder = _inflate(cb.encoding, fresh, decoder)
                except zlib.error as e:
                    problem = f"broken stream: the {cb.encoding.decode()} body could not be decoded ({e})"
                    fresh = b""
            elif cb.encoding not in (b"", b"identity"):
                problem = f"bad HTTP response: Content-Encoding {cb.encoding.decode('latin-1')} was not asked for"
            out.append(fresh)
            size += len(fresh)
        offsets.append(size)
    return b"".join(out), times, offsets, problem


def _inflate(encoding: bytes, data: bytes, decoder: Any) -> tuple[bytes, Any]:
    """``data`` of a gzip or deflate body decoded, with the decoder to go on with. As aiohttp: a gzip body may be
    several members one after the other; a deflate body is zlib-wrapped (RFC 9110 §8.4.1.2) or, as some servers
    send it, raw deflate. Raises ``zlib.error`` on bytes that do not decode."""
    out = []
    while data:
        if decoder is None or decoder.eof:
            if encoding == b"deflate":
                zlib_header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] * 256 + data[1]) % 31 == 0
                decoder = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
            else:
                decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        out.append(decoder.decompress(data))
        data = decoder.unused_data if decoder.eof else b""
    return b"".join(out), decoder
