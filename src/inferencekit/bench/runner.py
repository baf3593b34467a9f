"""Load generation: send a level's requests closed- or open-loop and write each one as it ends.

Collect only: every request's body goes to ``inputs/`` before it is sent and its reply file to
``outputs/`` as soon as it ends (atomic writes), so an interrupted run keeps every finished
request. Nothing here judges; metrics come later from the files (``bench/metrics.py``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inferencekit.api.client import Client
from inferencekit.bench.plan import LevelSpec, PlannedRequest, Planner
from inferencekit.bench.schedule import arrival_offsets_s
from inferencekit.rundir import RunDir, write_json

__all__ = ["LoadRunner", "LevelOutcome", "endpoint_path"]

Progress = Callable[[str, bool], None]


def endpoint_path(req: PlannedRequest) -> str:
    return "/v1/chat/completions" if req.prompt.is_chat else "/v1/completions"


@dataclass(slots=True)
class LevelOutcome:
    """Counts for one level as it ran (the metrics come from the files)."""

    label: str
    sent: int = 0
    ok: int = 0
    failed: int = 0
    transport_failures: int = 0
    keys: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class LoadRunner:
    """Sends planned requests for one engine into one run dir.

    Args:
        client: an open ``Client``.
        run: the run directory.
        engine: the engine label (``outputs/<engine>/``).
        body_for: PlannedRequest → JSON body.
        optional: request fields that may be dropped when the server rejects them (HTTP 400).
        on_done: progress callback ``(level label, ok)`` called after each reply is written.
    """

    def __init__(self, client: Client, run: RunDir, engine: str, body_for: Callable[[PlannedRequest], dict[str, Any]],
                 *, optional: tuple[str, ...] = (), on_done: Progress | None = None) -> None:
        self.client = client
        self.run = run
        self.engine = engine
        self.body_for = body_for
        self.optional = optional
        self.on_done = on_done

    async def send(self, req: PlannedRequest, *, level: str | None, folder: str | None = None,
                   scheduled_ns: int | None = None) -> dict[str, Any]:
        """Send one request, write its input and reply files, return the reply."""
        body = self.body_for(req)
        bucket = req.prompt.bucket
        if folder is None:
            write_json(self.run.input_path(self.engine, level, bucket, req.key), body)
        ex = await self.client.post(endpoint_path(req), body, optional=self.optional)
        meta: dict[str, Any] = {"id": req.prompt.id, "engine": self.engine}
        if level is not None:
            meta["level"] = level
        meta["bucket"] = bucket
        if req.salt:
            meta["salt"] = req.salt
        if scheduled_ns is not None:
            meta["scheduled_ns"] = scheduled_ns
        reply = ex.to_reply(**meta)
        out = (self.run.special_path(self.engine, folder, req.key) if folder
               else self.run.output_path(self.engine, level, bucket, req.key))
        write_json(out, reply)
        if self.on_done:
            self.on_done(level or folder or "", "error" not in reply)
        return reply

    def _count(self, outcome: LevelOutcome, key: str, reply: dict[str, Any]) -> None:
        outcome.sent += 1
        outcome.keys.append(key)
        if "error" in reply:
            outcome.failed += 1
            outcome.transport_failures += reply.get("status") == 0
        else:
            outcome.ok += 1

    async def warmup(self, planner: Planner, n: int) -> list[dict[str, Any]]:
        """``n`` requests one at a time into ``outputs/<engine>/warmup/`` (not counted in any level)."""
        return [await self.send(planner.take(), level=None, folder="warmup") for _ in range(n)]

    async def run_level(self, spec: LevelSpec, planner: Planner, *, num_requests: int | None,
                        duration_s: float | None, seed: int) -> LevelOutcome:
        """Run one level until ``num_requests`` were sent, or for ``duration_s`` seconds of sending."""
        t0 = time.monotonic()
        if spec.mode == "closed":
            out = await self._closed(spec, planner, num_requests, duration_s)
        else:
            out = await self._open(spec, planner, num_requests, duration_s, seed)
        out.wall_s = time.monotonic() - t0
        return out

    async def _closed(self, spec: LevelSpec, planner: Planner, n: int | None, duration_s: float | None) -> LevelOutcome:
        outcome = LevelOutcome(spec.label)
        deadline = time.monotonic() + duration_s if duration_s else math.inf
        remaining = [n if n is not None else math.inf]

        async def worker() -> None:
            while remaining[0] > 0 and time.monotonic() < deadline:
                remaining[0] -= 1
                req = planner.take()
                reply = await self.send(req, level=spec.label)
                self._count(outcome, req.key, reply)

        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        return outcome

    async def _open(self, spec: LevelSpec, planner: Planner, n: int | None, duration_s: float | None,
                    seed: int) -> LevelOutcome:
        outcome = LevelOutcome(spec.label)
        count = n if n is not None else max(1, math.ceil(spec.rate * (duration_s or 0)))
        offsets = arrival_offsets_s(count, spec.rate, spec.arrival, burstiness=spec.burstiness, seed=seed)
        cap = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        tasks: list[asyncio.Task[None]] = []

        async def one(req: PlannedRequest, scheduled_ns: int) -> None:
            if cap is None:
                reply = await self.send(req, level=spec.label, scheduled_ns=scheduled_ns)
            else:
                async with cap:
                    reply = await self.send(req, level=spec.label, scheduled_ns=scheduled_ns)
            self._count(outcome, req.key, reply)

        start_ns = time.perf_counter_ns()
        for off in offsets:
            due_ns = start_ns + int(off * 1e9)
            delay = (due_ns - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(planner.take(), due_ns)))
        await asyncio.gather(*tasks)
        return outcome
