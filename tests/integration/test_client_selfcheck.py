"""The client's self-check against the real embedded engine: a level whose event loop was blocked on purpose
is judged invalid from what the level recorded (no timing assertion: a 200 ms block per finished request is
the injected fault, and the judgement must see it).

The level runs through ``LoadRunner.run_level`` (bench serve's production path) with an ``on_done`` callback
that calls ``time.sleep`` on the event loop: while it sleeps no chunk can be stamped and no request sent,
which is what a client that cannot keep up does to its figures.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint
from inferencekit.bench.pace_judge import judge_client_pace
from inferencekit.bench.plan import LevelSpec, Planner, request_body
from inferencekit.bench.runner import LoadRunner
from inferencekit.bench.serve import load_level_replies
from inferencekit.data.prompts import load_prompt_set
from inferencekit.rundir import CLIENT_FILE, RunDir, read_json

pytestmark = pytest.mark.engine

BLOCK_S = 0.2


def _level(url: str, run: RunDir, on_done) -> None:
    prompts = [p for p in load_prompt_set("dev").prompts if p.bucket == "short"]

    def body_for(req):
        return request_body(req, model="smollm2", max_tokens=24, fixed={"temperature": 0.0})

    async def main() -> None:
        async with Client(Endpoint.parse(url), timeout_s=300) as client:
            runner = LoadRunner(client, run, "eng", body_for, optional=("stream_options",), on_done=on_done)
            await runner.run_level(LevelSpec("c2", "closed", concurrency=2), Planner(prompts, 7), num_requests=6,
                                   duration_s=None, seed=0)

    asyncio.run(main())


def test_a_blocked_event_loop_makes_the_level_invalid(embedded_engine, tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run")
    _level(embedded_engine.url, run, lambda label, ok: time.sleep(BLOCK_S))  # the injected fault

    replies = load_level_replies(run, "eng", "c2")
    assert len(replies) == 6 and all(r["status"] == 200 for r in replies)
    client = read_json(run.level_dir("outputs", "eng", "c2") / CLIENT_FILE)
    (proc,) = client["processes"]
    lag = proc["loop"]["loop_lag_ms"]
    assert lag["max"] >= BLOCK_S * 1000 * 0.9  # each block shows as one late timer of about its length
    verdict = judge_client_pace(client["processes"], replies)
    assert verdict["valid"] is False
    assert "event-loop lag p99" in verdict["reasons"][0] and f"pid {proc['pid']}" in verdict["reasons"][0]
    assert verdict["loop_lag_p99_ms"] > verdict["lag_limit_ms"]
