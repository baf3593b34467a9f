"""Server telemetry, collected: the endpoint's Prometheus ``/metrics`` scraped while a level runs (I/O).

``async with level_telemetry(client, run, engine, label, interval_s=1.0):`` around a level: one scrape before the
level's first request, one every ``interval_s`` on a fixed grid while it runs (a scrape that overruns skips the ticks
it missed), and one after its last reply (after ``SETTLE_S``, so a counter the server updates just after its last
event is in it). vLLM, SGLang and llama-server (``--metrics``, which ``engine up`` sets) serve ``/metrics`` at the
server root; AIPerf scrapes it by default too (every 100 ms).

The load must not feel it:

* its own aiohttp session and one connection (never a slot of the load's pool), each scrape bounded by
  ``timeout_s`` (default ``min(max(2 × interval, 1 s), 10 s)``); a failure (timeout, refused, HTTP 5xx) is counted
  and written on its line, never raised;
* during the level the reply bodies are only kept as bytes: parsing (``telemetry_judge.parse_exposition``, pure
  Python, ~5–20 ms for vLLM's ~60 KB) would hold the event loop that timestamps the load's tokens, so every scrape but
  the first (parsed at once, before any request, to tell "no telemetry") is parsed after the level's last reply;
* an endpoint without /metrics (HTTP 404/405/501, or a body that is not Prometheus text) is recorded once, as
  ``no_telemetry`` with the reason, and not asked again for that level.

The level's file, ``outputs/<engine>/load-<level>/server_metrics.jsonl.gz`` (``rundir.TELEMETRY_FILE``), is written
once, atomically (``rundir.write_bytes``), when the level ends; one JSON object per line, by ``kind``:

* ``header``: ``format`` (1), ``url``, ``level``, ``interval_s``, ``timeout_s``, ``clocks`` (what ``t_ns`` and
  ``t_unix_ns`` are);
* ``scrape`` (one per scrape, in order): ``i``, ``t_ns`` (the client's ``perf_counter_ns`` when the GET was sent: the
  reply files' ``sent_ns`` clock), ``t_unix_ns`` (``time.time_ns()``), ``dur_ms``, ``status``, ``bytes``, and either
  ``families`` (``{family: {"type", "samples": [[name, labels, value]]}}``, the engine's own families: see
  ``parse_exposition``) or ``error``;
* ``raw`` (two): ``which`` ``first``/``last``, ``i``, ``text``: the whole exposition text of the first and last good
  scrape, every family included, so the deltas can be checked again by anyone;
* ``no_telemetry``: ``reason`` (instead of further scrapes);
* ``summary``: ``scrapes``, ``ok``, ``failed``, ``errors`` (``{message: count}``).

``read_telemetry`` reads it back; ``server_block`` judges a level (``telemetry_judge.judge_level``) for the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from inferencekit.api.client import Client
from inferencekit.bench.telemetry_judge import TelemetryParseError, judge_level, parse_exposition
from inferencekit.rundir import RunDir, read_json, write_bytes

__all__ = ["METRICS_PATH", "SETTLE_S", "Scraper", "level_telemetry", "read_telemetry", "server_block"]

METRICS_PATH = "/metrics"
SETTLE_S = 0.2  # wait after the level's last reply before the last scrape (see the module docstring)
MAX_BODY = 16 * 1024 * 1024  # a /metrics body larger than this is a failed scrape (not kept)
ABSENT = (404, 405, 501)  # statuses that mean "this server has no /metrics"


def default_timeout(interval_s: float) -> float:
    """Bound of one scrape in seconds: ``min(max(2 × interval, 1), 10)``."""
    return min(max(2.0 * interval_s, 1.0), 10.0)


@dataclass
class Scraper:
    """The scrapes of one level, kept in memory until ``lines()`` (bodies as bytes; parsed there)."""

    url: str
    headers: dict[str, str]
    interval_s: float
    timeout_s: float
    label: str = ""
    raw: list[dict[str, Any]] = field(default_factory=list)  # {"i", "t_ns", "t_unix_ns", "dur_ms", "status", ...}
    absent: str | None = None
    first_families: dict[str, Any] | None = None
    _session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                              timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape(self) -> None:
        """One GET; its outcome appended to ``raw``. Never raises (but for cancellation)."""
        if self.absent is not None or self._session is None:
            return
        rec: dict[str, Any] = {"i": len(self.raw), "t_ns": time.perf_counter_ns(), "t_unix_ns": time.time_ns(),
                               "status": 0}
        try:
            async with self._session.get(self.url, headers=self.headers) as resp:
                rec["status"] = resp.status
                body = await resp.content.read(MAX_BODY + 1)
                if resp.status == 200 and len(body) <= MAX_BODY:
                    rec["body"] = body
                elif resp.status == 200:
                    rec["error"] = f"body over {MAX_BODY} bytes"
                else:
                    rec["error"] = f"HTTP {resp.status}: " + " ".join(body[:200].decode("utf-8", "replace").split())
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:160]}" if str(e) else type(e).__name__
        rec["dur_ms"] = round((time.perf_counter_ns() - rec["t_ns"]) / 1e6, 3)
        if "body" in rec:
            rec["bytes"] = len(rec["body"])
        self.raw.append(rec)
        if rec["i"] == 0:
            self._check_first(rec)

    def _check_first(self, rec: dict[str, Any]) -> None:
        """The first scrape, parsed at once (before any request): a server without /metrics is told here."""
        if rec.get("status") in ABSENT:
            self.absent = f"GET {METRICS_PATH}: {rec.get('error')}"
        elif "body" in rec:
            try:
                self.first_families = parse_exposition(rec["body"].decode("utf-8", "replace"))
            except TelemetryParseError as e:
                self.absent = f"GET {METRICS_PATH} answered 200 with a body that is not Prometheus text ({e})"

    async def loop(self) -> None:
        """Scrape every ``interval_s`` on a fixed grid from now (missed ticks skipped) until cancelled."""
        t0 = time.monotonic()
        k = 0
        while self.absent is None:
            k = max(k + 1, int((time.monotonic() - t0) / self.interval_s) + 1)
            await asyncio.sleep(max(0.0, t0 + k * self.interval_s - time.monotonic()))
            await self.scrape()

    def lines(self) -> list[dict[str, Any]]:
        """The file's lines (module docstring): bodies parsed now, off the load's path."""
        out: list[dict[str, Any]] = [{
            "kind": "header", "format": 1, "url": self.url, "level": self.label, "interval_s": self.interval_s,
            "timeout_s": self.timeout_s,
            "clocks": {"t_ns": "client perf_counter_ns at the GET (the reply files' sent_ns clock)",
                       "t_unix_ns": "client time.time_ns() at the GET"}}]
        errors: dict[str, int] = {}
        good: list[tuple[int, str]] = []
        for rec in self.raw:
            line = {"kind": "scrape", **{k: v for k, v in rec.items() if k != "body"}}
            if "body" in rec:
                text = rec["body"].decode("utf-8", "replace")
                try:
                    fams = self.first_families if rec["i"] == 0 and self.first_families is not None else \
                        parse_exposition(text)
                    line["families"] = fams
                    good.append((rec["i"], text))
                except TelemetryParseError as e:
                    line["error"] = str(e)
            if "error" in line:
                errors[line["error"]] = errors.get(line["error"], 0) + 1
            out.append(line)
        if self.absent is not None:
            out.append({"kind": "no_telemetry", "reason": self.absent})
        elif good:
            out.append({"kind": "raw", "which": "first", "i": good[0][0], "text": good[0][1]})
            out.append({"kind": "raw", "which": "last", "i": good[-1][0], "text": good[-1][1]})
        out.append({"kind": "summary", "scrapes": len(self.raw), "ok": len(good), "failed": len(self.raw) - len(good)
                    if self.absent is None else 0, "errors": errors})
        return out


@contextlib.asynccontextmanager
async def level_telemetry(client: Client, run: RunDir, engine: str, label: str, *, interval_s: float = 1.0,
                          timeout_s: float | None = None) -> AsyncIterator[Scraper | None]:
    """Scrape ``<root>/metrics`` while the ``with`` block (one level) runs; write the level's telemetry file at its
    end. ``interval_s`` ≤ 0: off (yields None, writes nothing). The file is written even when the block raises (what
    was scraped is kept), but then without the last scrape, and a failure to write it does not hide the block's own
    exception."""
    if not interval_s or interval_s <= 0:
        yield None
        return
    sc = Scraper(url=client.endpoint.url(METRICS_PATH), headers=dict(client.endpoint.headers()),
                 interval_s=float(interval_s), timeout_s=timeout_s or default_timeout(interval_s), label=label)
    await sc.open()
    task: asyncio.Task[None] | None = None
    failed = True
    try:
        await sc.scrape()
        task = asyncio.create_task(sc.loop())
        yield sc
        failed = False
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            if not failed and sc.absent is None:
                await asyncio.sleep(SETTLE_S)
                await sc.scrape()
        finally:
            await sc.close()
            try:
                _write(run, engine, label, sc.lines())
            except Exception:
                if not failed:
                    raise


def _write(run: RunDir, engine: str, label: str, lines: list[dict[str, Any]]) -> None:
    data = b"".join(orjson.dumps(x, option=orjson.OPT_NON_STR_KEYS) + b"\n" for x in lines)
    write_bytes(run.telemetry_path(engine, label), gzip.compress(data, compresslevel=6, mtime=0))


def read_telemetry(run: RunDir, engine: str, label: str) -> list[dict[str, Any]] | None:
    """The lines of a level's telemetry file (``RunDir.telemetry_lines``), or None when it has none (telemetry off, or
    an older run)."""
    return run.telemetry_lines(engine, label)


def server_block(run: RunDir, engine: str, label: str) -> dict[str, Any] | None:
    """The ``server`` block of one level for the bench record (``telemetry_judge.judge_level``) with ``file`` (its
    path in the run dir), or None when the level has no telemetry file."""
    lines = read_telemetry(run, engine, label)
    if lines is None:
        return None
    level = [r for p in run.replies(engine, label) if isinstance(r := read_json(p), dict)]
    side = [r for _f, p in run.side_replies(engine) if isinstance(r := read_json(p), dict)]
    block = judge_level(label, lines, level, side)
    block["file"] = run.telemetry_path(engine, label).relative_to(run.path).as_posix()
    return block
