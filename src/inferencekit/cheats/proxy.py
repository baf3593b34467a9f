"""The cheat proxy: an aiohttp server that forwards everything to a real engine and cheats on the way.

Every request — any method, any path (/v1/chat/completions, /v1/completions, /v1/models, /health,
/props, /tokenize, /detokenize, /extras/tokenize, …) — goes to the upstream with its headers
(Authorization included; hop-by-hop headers, Host and Accept-Encoding dropped) and its query
string, and the reply comes back with its status and headers. The cheats (``state.CheatSet``)
apply only to POST chat-completions and completions requests whose body is a JSON object, and only
to successful (HTTP 200) replies.

Overhead is kept small: a reply no cheat rewrites is relayed chunk by chunk as it arrives, without
SSE parsing (a cache records the raw chunks and splits them after the stream ends); a rewritten
stream is split into events incrementally and each upstream chunk's events leave in one write. The
upstream connection pool is kept alive; a request whose *reused* pooled connection turns out dead
before any reply (llama-server closes after every stream while announcing keep-alive) is sent again.
When the client goes away mid-stream the handler is cancelled and the upstream connection closed,
so the engine stops generating.

A *mix* (``Mix``, ``--mix-upstream`` with ``--mix-share``) routes a seeded random share of the generation
requests to a second engine: a randomised substitution (a cheaper model behind some replies), which the
equivalence audit must catch. Cheats apply to the mixed replies as to the others.

``running_proxy`` starts ``python -m inferencekit cheat-proxy`` as a subprocess for tests and
benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import random
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from inferencekit.api.client import describe_exception
from inferencekit.cheats.state import CheatSet, RecordedReply, successful_stream
from inferencekit.cheats.transforms import UNDER_LOAD, ReplyRewriter, generation_kind
from inferencekit.errors import OpError

__all__ = ["CheatProxy", "Mix", "SseFramer", "listening_line", "running_proxy", "serve"]

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
_MAX_STALE_RETRIES = 16  # re-sends after failures on reused (dead) pooled connections, as in api/client.py
_CONNECT_TIMEOUT_S = 30.0
_CHECK_TIMEOUT_S = 10.0
_LISTENING = re.compile(r"cheat-proxy: listening on (\S+)")


class SseFramer:
    """Incremental SSE framing for the proxy: upstream bytes in, events out, nothing lost.

    ``feed`` returns the events its chunk completed as ``(other, payload)``: ``other`` holds the
    event's non-``data`` lines (comments, ``event:``, ``id:``) verbatim, each ending in LF; ``payload``
    is the event's ``data`` lines joined with LF (None when it had none). Line ends may be LF, CRLF or
    CR; an event ends at a blank line. ``close`` returns what was left without its blank line.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes | None]]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            tail_cr = buf.endswith(b"\r")  # maybe half of a CRLF split across chunks
            buf = (buf[:-1] if tail_cr else buf).replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (
                b"\r" if tail_cr else b"")
        out = []
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            if end > start:
                out.append(self._event(buf[start:end]))
            start = end + 2
        self._buf = buf[start:]
        return out

    def close(self) -> list[tuple[bytes, bytes | None]]:
        rest, self._buf = self._buf.rstrip(b"\r\n"), b""
        return [self._event(rest)] if rest else []

    @staticmethod
    def _event(block: bytes) -> tuple[bytes, bytes | None]:
        if block.startswith(b"data:") and b"\n" not in block:  # the usual case: one data line
            v = block[5:]
            return b"", v[1:] if v[:1] == b" " else v
        other: list[bytes] = []
        data: list[bytes] = []
        for line in block.strip(b"\n").split(b"\n"):
            if line.startswith(b"data:"):
                v = line[5:]
                data.append(v[1:] if v[:1] == b" " else v)
            else:
                other.append(line + b"\n")
        return b"".join(other), (b"\n".join(data) if data else None)


def _frame(other: bytes, payload: bytes | None) -> bytes:
    """One SSE event back to bytes: its other lines, its data line(s), the blank line."""
    if payload is None:
        return other + b"\n"
    if b"\n" in payload:
        return other + b"".join(b"data: " + line + b"\n" for line in payload.split(b"\n")) + b"\n"
    return other + b"data: " + payload + b"\n\n"


def _split_recorded(chunks: Sequence[bytes]) -> list[bytes]:
    """The data payloads of a raw recorded stream (after it ended; off the hot path)."""
    framer = SseFramer()
    events = framer.feed(b"".join(chunks)) + framer.close()
    return [p for _, p in events if p is not None]


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _request_headers(headers: Any) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():
        low = k.lower()
        if low not in _HOP_BY_HOP and low != "accept-encoding":
            out.add(k, v)
    return out


def _response_headers(headers: Any) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():
        low = k.lower()
        if low not in _HOP_BY_HOP and low != "content-encoding":  # bodies arrive decompressed
            out.add(k, v)
    return out


def _error_response(status: int, message: str) -> web.Response:
    body = {"error": {"code": status, "message": message, "type": "cheat_proxy_upstream_error"}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, types.SimpleNamespace):
        ctx.trace_request_ctx.reused = True


class Mix:
    """Where a share of the generation requests goes instead of the upstream.

    Args:
        root: the second engine's root (no ``/v1``).
        share: the probability, per generation request, of routing it there (0 < share ≤ 1).
        seed: seeds the per-request draws (``random.Random``), so a run can be repeated.
        under_load: route only requests that arrive while at least ``UNDER_LOAD`` generation requests are in flight
            at the proxy (this one included): an engine that swaps to a cheaper model or quantisation when batches
            fill and answers alone with the claimed one (the order gate's known answers must catch it).

    Raises:
        ValueError: a share outside (0, 1].
    """

    def __init__(self, root: str, share: float, seed: int = 0, under_load: bool = False) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"the mix share must be in (0, 1], got {share!r}")
        self.root, self.share, self.seed, self.under_load = root, share, seed, under_load
        self._rng = random.Random(seed)

    def draw(self, in_flight: int = 1) -> bool:
        """True when the next generation request goes to the mix's engine; ``in_flight``: generation requests in
        flight at the proxy with this one (``under_load`` routes none below ``UNDER_LOAD``; no draw is spent)."""
        if self.under_load and in_flight < UNDER_LOAD:
            return False
        return self._rng.random() < self.share


class CheatProxy:
    """The proxy's request handling, bound to one upstream root and one ``CheatSet``.

    Args:
        root: the upstream server root without ``/v1`` (``endpoint.normalize_base_url``'s form).
        cheats: the cheats and their state.

    ``stats`` counts requests (``requests``, ``generation``, ``forwarded``, ``delayed``,
    ``<cache> hits``, ``upstream errors``, ``client gone``). ``in_flight`` is the number of generation
    requests forwarded upstream whose reply has not yet been relayed in full (json-broken-under-load's
    measure of load; a cache hit or a request still in prefix-cache-only's delay is not counted).
    """

    def __init__(self, root: str, cheats: CheatSet, mix: Mix | None = None) -> None:
        self.root = root
        self.cheats = cheats
        self.mix = mix
        self.stats: Counter[str] = Counter()
        self.in_flight = 0
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        """Create the upstream connection pool (inside the running event loop)."""
        tc = aiohttp.TraceConfig()
        tc.on_connection_reuseconn.append(_on_reuse)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300), trace_configs=[tc], auto_decompress=True,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=_CONNECT_TIMEOUT_S))

    async def close(self) -> None:
        """Close the upstream connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def check_upstream(self) -> None:
        """GET ``/v1/models`` on the upstream; any HTTP answer will do.

        Raises:
            OpError: no HTTP answer (refused, unreachable, timeout), with what to do.
        """
        assert self._session is not None
        roots = [("--upstream", self.root)] + ([("--mix-upstream", self.mix.root)] if self.mix else [])
        for flag, root in roots:
            try:
                async with self._session.get(root + "/v1/models",
                                             timeout=aiohttp.ClientTimeout(total=_CHECK_TIMEOUT_S)) as resp:
                    await resp.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise OpError(f"{flag} {root} does not answer ({describe_exception(e, _CHECK_TIMEOUT_S)}); "
                              "start the engine first or fix the URL") from None

    def application(self) -> web.Application:
        """The aiohttp application: one catch-all route to ``handle``."""
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Forward one request, applying the cheats to generation requests (see the module doc)."""
        self.stats["requests"] += 1
        body = await request.read()
        generation = generation_kind(request.path) if request.method == "POST" else None
        if generation is not None:
            self.stats["generation"] += 1  # also in pass-through: the requests a benchmark counts
        kind = generation if self.cheats.names or self.mix else None
        original = _json_object(body) if kind is not None else None
        if kind is None or original is None:
            return await self._forward(request, body)
        root = self.root
        if self.mix is not None and self.mix.draw(self.in_flight + 1):
            self.stats["mixed"] += 1
            root = self.mix.root
        forwarded = self.cheats.rewrite_request(original)
        rewriter = self.cheats.reply_rewriter(original, forwarded, in_flight=self.in_flight + 1)  # with this one
        hit = self.cheats.lookup(original)
        if hit is not None:
            self.stats[f"{hit[0]} hits"] += 1
            return self._replay(hit[1], forwarded.get("stream") is True, rewriter)
        delay_s = self.cheats.prefill_delay_s(original)
        if delay_s:
            self.stats["delayed"] += 1
            await asyncio.sleep(delay_s)
        data = body if forwarded is original else orjson.dumps(forwarded)
        self.in_flight += 1
        try:
            return await self._forward(request, data, kind=kind, original=original, rewriter=rewriter, root=root)
        finally:
            self.in_flight -= 1

    @staticmethod
    def _replay(rec: RecordedReply, stream: bool, rewriter: ReplyRewriter | None) -> web.Response:
        """A stored reply, sent at once: every event in one write (or the JSON body)."""
        if stream:
            payloads = rec.as_payloads()
            if rewriter is not None:
                payloads = [rewriter.payload(p) for p in payloads]
            return web.Response(body=b"".join(_frame(b"", p) for p in payloads),
                                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        raw = rec.as_body()
        return web.Response(body=rewriter.body(raw) if rewriter is not None else raw,
                            headers={"Content-Type": "application/json; charset=utf-8"})

    async def _open(self, request: web.Request, data: bytes, root: str) -> aiohttp.ClientResponse:
        """Send to ``root``; again while a *reused* pooled connection fails before any reply."""
        assert self._session is not None
        url = URL(root + request.raw_path, encoded=True)
        headers = _request_headers(request.headers)
        for attempt in range(_MAX_STALE_RETRIES + 1):
            ctx = types.SimpleNamespace(reused=False)
            try:
                return await self._session.request(request.method, url, data=data or None, headers=headers,
                                                   allow_redirects=False, trace_request_ctx=ctx)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if not ctx.reused or attempt == _MAX_STALE_RETRIES:
                    raise
        raise AssertionError("unreachable")

    async def _forward(self, request: web.Request, data: bytes, *, kind: str | None = None,
                       original: dict[str, Any] | None = None,
                       rewriter: ReplyRewriter | None = None, root: str | None = None) -> web.StreamResponse:
        self.stats["forwarded"] += 1
        root = root or self.root
        try:
            resp = await self._open(request, data, root)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            self.stats["upstream errors"] += 1
            return _error_response(502, f"cheat-proxy: upstream {root} failed: {describe_exception(e)}")
        clean = False
        try:
            headers = _response_headers(resp.headers)
            ok = resp.status == 200 and kind is not None
            sse = "text/event-stream" in resp.headers.get("Content-Type", "")
            record = ok and original is not None and self.cheats.records
            if ok and not sse and (rewriter is not None or record):
                raw = await resp.read()
                if record and _json_object(raw) is not None:
                    self.cheats.record(original, RecordedReply(kind, body=raw))  # type: ignore[arg-type]
                clean = True
                return web.Response(status=resp.status, reason=resp.reason, headers=headers,
                                    body=rewriter.body(raw) if rewriter is not None else raw)
            out = web.StreamResponse(status=resp.status, reason=resp.reason, headers=headers)
            if resp.content_length is not None and "Content-Encoding" not in resp.headers:
                out.content_length = resp.content_length
            await out.prepare(request)
            try:
                if ok and sse and rewriter is not None:
                    payloads = await self._pump_rewritten(resp, out, rewriter, record)
                else:
                    payloads = await self._pump_raw(resp, out, record and sse)
                clean = True
            except ConnectionError:  # the client went away (aiohttp's ClientConnectionResetError on our write)
                self.stats["client gone"] += 1
                return out
            except asyncio.CancelledError:  # the client went away (aiohttp cancels the handler)
                self.stats["client gone"] += 1
                raise
            except (TimeoutError, aiohttp.ClientError) as e:  # the upstream broke mid-reply: so does ours
                self.stats["upstream errors"] += 1
                sys.stderr.write(f"cheat-proxy: upstream broke mid-reply: {describe_exception(e)}\n")
                if request.transport is not None:
                    request.transport.close()  # what was sent is flushed; no chunked terminator follows
                return out
            if record and payloads and successful_stream(payloads):
                self.cheats.record(original, RecordedReply(kind, payloads=tuple(payloads)))  # type: ignore[arg-type]
            with contextlib.suppress(ConnectionError):
                await out.write_eof()
            return out
        finally:
            if clean:
                resp.release()
            else:
                resp.close()

    @staticmethod
    async def _pump_raw(resp: aiohttp.ClientResponse, out: web.StreamResponse, record: bool) -> list[bytes] | None:
        """Relay chunk by chunk untouched; with ``record``, keep the chunks and split them afterwards."""
        chunks: list[bytes] | None = [] if record else None
        write = out.write
        async for chunk in resp.content.iter_any():
            await write(chunk)
            if chunks is not None:
                chunks.append(chunk)
        return _split_recorded(chunks) if chunks is not None else None

    @staticmethod
    async def _pump_rewritten(resp: aiohttp.ClientResponse, out: web.StreamResponse, rewriter: ReplyRewriter,
                              record: bool) -> list[bytes] | None:
        """Relay an SSE stream event by event through ``rewriter``; each chunk's events in one write.
        With ``record``, keep the upstream payloads as they came."""
        framer = SseFramer()
        kept: list[bytes] | None = [] if record else None
        rewrite = rewriter.payload

        def emit(events: list[tuple[bytes, bytes | None]]) -> bytes:
            parts = []
            for other, payload in events:
                if payload is not None:
                    if kept is not None:
                        kept.append(payload)
                    payload = rewrite(payload)
                parts.append(_frame(other, payload))
            return b"".join(parts)

        async for chunk in resp.content.iter_any():
            events = framer.feed(chunk)
            if events:
                await out.write(emit(events))
        tail = framer.close()
        if tail:
            await out.write(emit(tail))
        return kept


def listening_line(url: str, root: str, names: Sequence[str], mix: Mix | None = None) -> str:
    """The one line printed once the proxy is ready (``running_proxy`` waits for it)."""
    when = " under load" if mix and mix.under_load else ""
    mixed = f"; {mix.share:g} of generation requests{when} to {mix.root}, seed {mix.seed}" if mix else ""
    return f"cheat-proxy: listening on {url} (upstream {root}; cheats {', '.join(names) or 'none'}{mixed})"


async def serve(root: str, cheats: CheatSet, *, host: str = "127.0.0.1", port: int = 0,
                on_ready: Callable[[str], None] | None = None, stop: asyncio.Event | None = None,
                handle_signals: bool = True, mix: Mix | None = None) -> dict[str, int]:
    """Run the proxy until ``stop`` is set (or SIGINT/SIGTERM with ``handle_signals``); returns its stats
    (``CheatProxy.stats`` with ``CheatSet.stats``).

    Args:
        root: upstream server root (no ``/v1``).
        mix: a share of the generation requests routed to a second engine (``Mix``), or None.
        host, port: where to listen; port 0 picks a free one.
        on_ready: called with the proxy's URL (``http://host:port``) once it accepts connections.

    Raises:
        OpError: the upstream does not answer, or the address cannot be bound.
    """
    proxy = CheatProxy(root, cheats, mix)
    await proxy.open()
    runner = web.AppRunner(proxy.application(), handle_signals=False, access_log=None, handler_cancellation=True,
                           shutdown_timeout=2.0)
    try:
        await proxy.check_upstream()
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as e:
            raise OpError(f"cannot listen on {host}:{port}: {e.strerror or e}; pick another --host/--port") from None
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        url = f"http://{shown}:{bound[1]}"
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                on_ready(url)
            await stop.wait()
        finally:
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
    finally:
        await runner.cleanup()
        await proxy.close()
    return {**proxy.stats, **cheats.stats}


# --------------------------------------------------------------------------------------------------
# running_proxy: the subprocess helper for tests and benchmarks


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _read_tail(f: IO[bytes], limit: int = 4000) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")[-limit:].strip()


def _wait_listening(proc: subprocess.Popen[bytes], err: IO[bytes], timeout_s: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            m = _LISTENING.search(buf.decode("utf-8", "replace"))
            if m and b"\n" in buf[buf.find(b"listening on"):]:
                return m.group(1)
            left = deadline - time.monotonic()
            if left <= 0:
                raise OpError(f"cheat-proxy did not print its listening line within {timeout_s:g} s; stderr: "
                              f"{_read_tail(err) or '(empty)'}")
            if sel.select(min(left, 0.5)):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if chunk:
                    buf += chunk
                    continue
            if proc.poll() is not None:
                raise OpError(f"cheat-proxy exited with code {proc.returncode} before listening; stderr: "
                              f"{_read_tail(err) or '(empty)'}")


@contextlib.contextmanager
def running_proxy(upstream: str, cheats: Sequence[str], *, host: str = "127.0.0.1", port: int = 0,
                  mask_block: str | None = None, ready_timeout_s: float = 60.0,
                  python: str | None = None, mix_upstream: str | None = None, mix_share: float | None = None,
                  mix_seed: int = 0, truncate_chars: int | None = None, corrupt_share: float | None = None,
                  corrupt_seed: int | None = None, prefill_ms: float | None = None,
                  mix_under_load: bool = False) -> Iterator[str]:
    """Run ``python -m inferencekit cheat-proxy`` in front of ``upstream`` for the ``with`` block.

    Args:
        upstream: the real engine's URL (with or without ``/v1``).
        cheats: cheat names (``[]`` = pass-through, sent as ``--cheat none``).
        host, port: where the proxy listens (port 0: a free one).
        mask_block: vocab-mask's ``--mask-block``.
        mix_upstream, mix_share, mix_seed, mix_under_load: ``--mix-upstream`` / ``--mix-share`` / ``--mix-seed`` /
            ``--mix-under-load`` (``Mix``).
        truncate_chars: silent-truncate's ``--truncate-chars``.
        corrupt_share, corrupt_seed: json-broken-under-load's ``--corrupt-share`` / ``--corrupt-seed``.
        prefill_ms: prefix-cache-only's ``--prefill-ms``.
        ready_timeout_s: how long to wait for the listening line, in seconds.
        python: the interpreter (default: this one).

    Yields:
        The proxy's base URL, ``http://HOST:PORT`` (no ``/v1``).

    Raises:
        OpError: the proxy exits before listening (its exit code and stderr in the message) or does not
            listen within ``ready_timeout_s``.

    On exit the proxy gets SIGTERM (SIGKILL after 10 s); it also gets SIGTERM if this process dies.
    """
    argv = [python or sys.executable, "-m", "inferencekit", "cheat-proxy", "--upstream", upstream,
            "--cheat", ",".join(cheats) or "none", "--host", host, "--port", str(port), "--quiet"]
    if mask_block:
        argv += ["--mask-block", mask_block]
    if mix_upstream:
        argv += ["--mix-upstream", mix_upstream, "--mix-share", repr(mix_share), "--mix-seed", str(mix_seed)]
        argv += ["--mix-under-load"] if mix_under_load else []
    for flag, value in (("--truncate-chars", truncate_chars), ("--corrupt-share", corrupt_share),
                        ("--corrupt-seed", corrupt_seed), ("--prefill-ms", prefill_ms)):
        if value is not None:
            argv += [flag, repr(value)]
    with tempfile.TemporaryFile() as err, subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None) as proc:  # noqa: PLW1509 (prctl only)
        try:
            yield _wait_listening(proc, err, ready_timeout_s)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
