"""bench/telemetry.py: the /metrics scraper against real local HTTP servers (aiohttp.web on loopback).

The servers answer with the recorded exposition texts of tests/fixtures/telemetry/, a 404, an HTML page, or never
(a hang): the scraper must write what it saw, say "no telemetry" once, and count failures without raising.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint
from inferencekit.bench.telemetry import level_telemetry, read_telemetry
from inferencekit.bench.telemetry_judge import level_deltas
from inferencekit.rundir import RunDir
from tests.paths import FIXTURES

TEL = FIXTURES / "telemetry" / "llama-server"


@asynccontextmanager
async def server(handler: Callable[[web.Request], Any]) -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback server whose every request goes to ``handler``; yields its URL and the paths it was asked."""
    hits: list[str] = []

    async def handle(req: web.Request) -> web.StreamResponse:
        hits.append(req.path)
        return await handler(req)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", hits
    finally:
        await runner.cleanup()


def run_level(tmp_path: Path, handler: Callable[[web.Request], Any], *, interval_s: float = 0.02,
              timeout_s: float | None = None, body: Callable[[], Any] | None = None, url: str | None = None
              ) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """One "level" (``body``, default: sleep until three scrapes were asked) inside ``level_telemetry``."""
    run = RunDir.create(tmp_path / "run")

    async def go() -> list[str]:
        async with server(handler) as (root, hits):
            async with Client(Endpoint.parse(url or root)) as client:
                async with level_telemetry(client, run, "eng", "c1", interval_s=interval_s, timeout_s=timeout_s):
                    if body is not None:
                        await body()
                    else:
                        while len(hits) < 3:
                            await asyncio.sleep(0.01)
            return hits

    hits = asyncio.run(go())
    return read_telemetry(run, "eng", "c1"), hits


def test_scrapes_written_with_raw_first_and_last(tmp_path: Path) -> None:
    texts = [(TEL / "before.txt").read_text(), (TEL / "after.txt").read_text()]
    n = {"i": 0}

    async def metrics(req: web.Request) -> web.Response:
        t = texts[min(n["i"], 1)]
        n["i"] += 1
        return web.Response(text=t, content_type="text/plain")

    lines, hits = run_level(tmp_path, metrics)
    assert lines is not None and set(hits) == {"/metrics"}
    kinds = [x["kind"] for x in lines]
    assert kinds[0] == "header" and kinds[-1] == "summary" and kinds.count("raw") == 2
    scrapes = [x for x in lines if x["kind"] == "scrape"]
    assert len(scrapes) == len(hits) >= 4  # the first, ≥ 2 while the level ran, the last after it
    assert [s["i"] for s in scrapes] == list(range(len(scrapes)))
    assert all(a["t_ns"] < b["t_ns"] for a, b in zip(scrapes, scrapes[1:], strict=False))
    raw = {x["which"]: x for x in lines if x["kind"] == "raw"}
    assert raw["first"]["text"] == texts[0] and raw["last"]["text"] == texts[1]
    assert lines[-1] == {"kind": "summary", "scrapes": len(scrapes), "ok": len(scrapes), "failed": 0, "errors": {}}
    d = level_deltas(lines)
    assert d["counters"]["llamacpp:tokens_predicted_total"]["delta"] == 63


@pytest.mark.parametrize(("status", "body", "why"), [
    (404, "File Not Found", "HTTP 404"),
    (200, "<html><body>hello</body></html>", "not Prometheus text"),
])
def test_no_telemetry_recorded_once(tmp_path: Path, status: int, body: str, why: str) -> None:
    async def metrics(req: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="text/html")

    lines, hits = run_level(tmp_path, metrics, body=lambda: asyncio.sleep(0.2))
    assert hits == ["/metrics"]  # asked once, never again
    assert lines is not None
    none = [x for x in lines if x["kind"] == "no_telemetry"]
    assert len(none) == 1 and why in none[0]["reason"]
    assert level_deltas(lines)["telemetry"] == "none"


def test_hanging_endpoint_is_counted_not_raised(tmp_path: Path) -> None:
    async def metrics(req: web.Request) -> web.Response:
        if len(seen) == 0:
            seen.append(1)
            return web.Response(text=(TEL / "before.txt").read_text())
        await asyncio.sleep(1)
        return web.Response(text="")

    seen: list[int] = []
    done: list[bool] = []

    async def level() -> None:
        await asyncio.sleep(0.5)
        done.append(True)

    lines, _hits = run_level(tmp_path, metrics, interval_s=0.05, timeout_s=0.1, body=level)
    assert done == [True]
    assert lines is not None
    summary = lines[-1]
    assert summary["ok"] == 1 and summary["failed"] >= 1
    assert all("Timeout" in k for k in summary["errors"])
    assert level_deltas(lines)["telemetry"] == "insufficient"


def test_off_and_refused(tmp_path: Path) -> None:
    lines, hits = run_level(tmp_path / "a", lambda r: web.Response(text=""), interval_s=0,
                            body=lambda: asyncio.sleep(0))
    assert lines is None and hits == []  # off: nothing asked, nothing written
    # nothing listens on port 9 (discard) on loopback: every scrape is refused, counted, and the level goes on
    lines, _ = run_level(tmp_path / "b", lambda r: web.Response(text=""), url="http://127.0.0.1:9",
                         body=lambda: asyncio.sleep(0.1))
    assert lines is not None and lines[-1]["ok"] == 0 and lines[-1]["failed"] >= 2


def test_file_kept_when_the_level_raises(tmp_path: Path) -> None:
    async def metrics(req: web.Request) -> web.Response:
        return web.Response(text=(TEL / "after.txt").read_text())

    async def broken() -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("level failed")

    with pytest.raises(RuntimeError, match="level failed"):
        run_level(tmp_path, metrics, body=broken)
    lines = read_telemetry(RunDir(tmp_path / "run"), "eng", "c1")
    assert lines is not None and lines[-1]["ok"] >= 1


def test_reader_skips_damaged_lines_and_refuses_damaged_files(tmp_path: Path) -> None:
    import gzip

    from inferencekit.rundir import write_bytes

    run = RunDir.create(tmp_path / "run")
    path = run.telemetry_path("eng", "c1")
    write_bytes(path, gzip.compress(b'{"kind": "header"}\n{"kind": "scr\n[1, 2]\n{"kind": "summary"}\n'))
    assert run.telemetry_lines("eng", "c1") == [{"kind": "header"}, {"kind": "summary"}]
    write_bytes(path, b"not gzip")
    assert run.telemetry_lines("eng", "c1") is None
    assert run.telemetry_lines("eng", "c2") is None
