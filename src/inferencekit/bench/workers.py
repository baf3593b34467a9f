"""``bench serve --workers N``: one level sent by N client processes, merged into one run dir.

Each process has its own event loop and HTTP client and sends its ``Share`` of the level
(``bench/split.py``). The parent keeps everything else (detection, warm-up, known answers, the
record). A level runs in three steps so that the processes start together:

1. ``prepare``: every process gets its task (share, prompts, request recipe) and answers when ready;
2. ``go``: the parent picks a start time (wall clock, a little ahead) and each process sleeps until it;
3. each process runs ``LoadRunner.run_level`` into its own journal (``journal-w<i>.jsonl``) and
   returns its figures: host, pid, node, clock anchor, event-loop lag; the parent then turns every
   journal into the level's reply files (``materialise``), tagging each reply with its ``worker``
   and ``clock_offset_ns`` (wall − perf_counter of that process), so the level window is merged on
   the wall clock (``bench/metrics.py``).

The same ``LevelWorker`` runs inside a local process (``ProcessPool``, this module) or a Ray actor
(``bench/ray_pool.py``). With a shared filesystem the journal goes straight into the run dir; without
one (Ray on other nodes) the process writes into a temporary run dir and returns its files' bytes.

Clock: the parent measures each process's wall-clock offset by a round trip at ``go``
(``offset = t_worker − (t0 + t1)/2``, bound ``(t1 − t0)/2``, NTP's estimate); the level's skew bound
is the largest ``|offset_i − offset_j| + bound_i + bound_j`` and is recorded in ``client.json``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.loop import run as run_loop
from inferencekit.bench.journal import materialise
from inferencekit.bench.plan import PlannedRequest, Planner, request_body
from inferencekit.bench.runner import LevelOutcome, LoadRunner
from inferencekit.bench.split import ListPlanner, Share, StridedPlanner
from inferencekit.data.prompts import Prompt
from inferencekit.errors import StorageError
from inferencekit.rundir import CLIENT_FILE, RunDir, write_bytes, write_json
from inferencekit.shapes import ExtraRequests

__all__ = ["WorkerTask", "LevelWorker", "ProcessPool", "run_level_split", "clock_skew"]

Progress = Callable[[str, bool], None]
SCHEDULE_LEAD_S = 0.1


@dataclass(slots=True)
class WorkerTask:
    """Everything one process needs for one level (picklable)."""

    share: Share
    url: str
    api_key_env: str | None
    timeout_s: float
    engine: str
    run_path: str | None  # the run dir when the filesystem is shared, else None (files come back as bytes)
    prompts: list[Prompt]
    planner_seed: int
    used_keys: list[str]
    salt_first_use: bool
    body: dict[str, Any]  # request_body's keyword arguments (model, max_tokens, extra, fixed, chat_template_kwargs)
    optional: tuple[str, ...]
    rejected_fields: list[str]
    duration_s: float | None
    extras: ExtraRequests | None = None  # the level's extra requests (process 0 only), ``by_level`` keyed by its label
    requests: list[PlannedRequest] | None = None  # the share's requests, drawn by the parent (count mode)
    read_timeout_s: float | None = None  # --read-timeout (the parent client's), None: off
    # the parent client's Client.fresh_connections (an engine that closes kept-alive connections, api/client.py)
    fresh_connections: bool = False


class LevelWorker:
    """One client process's part of a level: ``prepare(task)``, then ``await run(go_wall_ns)``."""

    def __init__(self) -> None:
        self.task: WorkerTask | None = None
        self.done = [0, 0]  # ok, failed, for progress
        self.node_id: str | None = None

    def prepare(self, task: WorkerTask) -> dict[str, Any]:
        self.task = task
        self.done = [0, 0]
        return {"worker": task.share.worker, "pid": os.getpid(), "wall_ns": time.time_ns()}

    def clock(self) -> int:
        return time.time_ns()

    def progress(self) -> tuple[int, int]:
        return self.done[0], self.done[1]

    async def run(self, go_wall_ns: int) -> dict[str, Any]:
        t = self.task
        assert t is not None, "prepare() first"
        share = t.share
        tmp = None if t.run_path else Path(tempfile.mkdtemp(prefix=f"ik-worker{share.worker}-"))
        run = RunDir(Path(t.run_path) if t.run_path else tmp)  # type: ignore[arg-type]
        if t.requests is not None:  # count mode: the parent drew exactly the level's requests and dealt them
            source: Any = ListPlanner(t.requests)
        else:  # duration mode: this process's every k-th draw of the run's sequence, drawn here
            planner = Planner(t.prompts, t.planner_seed, salt_first_use=t.salt_first_use)
            planner.restore(t.used_keys)
            source = StridedPlanner(planner, share.worker, share.of)

        def body_for(req: PlannedRequest) -> dict[str, Any]:
            return request_body(req, **t.body)

        def on_done(_label: str, ok: bool) -> None:
            self.done[0 if ok else 1] += 1

        delay_ns = go_wall_ns - time.time_ns()
        # the open-loop schedule's origin, the same wall-clock instant in every process (up to their clocks' skew):
        # SCHEDULE_LEAD_S after the go, so each process's own set-up (client, journal, connections) fits before it
        start_at_ns = time.perf_counter_ns() + delay_ns + int(SCHEDULE_LEAD_S * 1e9)
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)
        started_wall_ns = time.time_ns()
        async with Client(Endpoint.parse(t.url, t.api_key_env), timeout_s=t.timeout_s,
                          read_timeout_s=t.read_timeout_s, fresh_connections=t.fresh_connections) as client:
            client.rejected_fields.update(t.rejected_fields)
            runner = LoadRunner(client, run, t.engine, body_for, optional=t.optional, on_done=on_done, extras=t.extras)
            name = f"journal-w{share.worker}.jsonl"
            outcome: LevelOutcome = await runner.run_level(
                share.spec, source, num_requests=share.num_requests, duration_s=t.duration_s,
                seed=share.arrival_seed, journal_name=name, materialise_after=False,
                part=(share.worker, share.of) if share.of > 1 else None, start_at_ns=start_at_ns)
            rejected = sorted(client.rejected_fields)
        out: dict[str, Any] = {
            "worker": share.worker, "journal": name, "sent": outcome.sent, "wall_s": outcome.wall_s,
            "draws": getattr(source, "draws", 0),
            "started_wall_ns": started_wall_ns, "ended_wall_ns": time.time_ns(), "rejected_fields": rejected,
            "client": {**outcome.client, "worker": share.worker, "node_id": self.node_id,
                       "share": {"concurrency": share.spec.concurrency, "rate_req_s": share.spec.rate or None,
                                 "num_requests": share.num_requests, "arrival_seed": share.arrival_seed}}}
        if tmp is not None:  # no shared filesystem: the files travel back with the result
            out["files"] = {str(p.relative_to(tmp)): p.read_bytes() for p in tmp.rglob("*") if p.is_file()}
            shutil.rmtree(tmp, ignore_errors=True)
        return out


def clock_skew(rounds: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """Wall-clock offsets of the processes against the parent and the bound on their mutual skew.

    Args:
        rounds: per process ``(t0, t_worker, t1)``: parent's wall ns before asking, the process's wall ns,
            the parent's after the answer.

    Returns:
        ``{"method", "offsets_ns": [...], "bounds_ns": [...], "skew_bound_ms"}``; the skew bound is
        ``max |offset_i − offset_j| + bound_i + bound_j`` over pairs (0 pairs → the single bound).
    """
    offs = [tw - (t0 + t1) // 2 for t0, tw, t1 in rounds]
    bounds = [(t1 - t0) // 2 for t0, _tw, t1 in rounds]
    pairs = [abs(offs[i] - offs[j]) + bounds[i] + bounds[j] for i in range(len(offs)) for j in range(i + 1, len(offs))]
    skew = max(pairs) if pairs else (bounds[0] if bounds else 0)
    return {"method": "round trip from the parent at the level's start (offset = t_worker − (t0 + t1)/2, "
                      "bound = (t1 − t0)/2)", "offsets_ns": offs, "bounds_ns": bounds, "skew_bound_ms": skew / 1e6}


# ------------------------------------------------------------------------------------------- local processes

def _process_main(conn: Any) -> None:
    """A worker process: serve ``prepare`` / ``clock`` / ``run`` messages until ``None``."""
    worker = LevelWorker()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, arg = msg
        try:
            if kind == "prepare":
                conn.send(("ok", worker.prepare(arg)))
            elif kind == "clock":
                conn.send(("ok", worker.clock()))
            elif kind == "run":
                conn.send(("ok", run_loop(_run_reporting(worker, arg, conn))))
        except StorageError as exc:  # a full or read-only disk: the parent stops the run the same way
            conn.send(("storage", str(exc)))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            if isinstance(exc, KeyboardInterrupt):
                return


async def _run_reporting(worker: LevelWorker, go_wall_ns: int, conn: Any) -> dict[str, Any]:
    """Run, sending ``("progress", ok, failed)`` every half second."""
    async def report() -> None:
        last = (0, 0)
        while True:
            await asyncio.sleep(0.5)
            now = worker.progress()
            if now != last:
                conn.send(("progress", now))
                last = now

    reporter = asyncio.create_task(report())
    try:
        return await worker.run(go_wall_ns)
    finally:
        reporter.cancel()


class ProcessPool:
    """N local worker processes (spawned, so each starts clean), kept for the whole run."""

    shared_fs = True

    def __init__(self, n: int) -> None:
        self.size = n
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for i in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_process_main, args=(child,), name=f"inferencekit-worker-{i}", daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    def describe(self) -> dict[str, Any]:
        return {"kind": "processes", "workers": len(self.procs), "host": os.uname().nodename}

    async def _call(self, i: int, kind: str, arg: Any, on_progress: Callable[[int, tuple[int, int]], None] | None = None
                    ) -> Any:
        conn = self.conns[i]
        conn.send((kind, arg))
        while True:
            status, val = await asyncio.to_thread(conn.recv)
            if status == "progress":
                if on_progress:
                    on_progress(i, val)
                continue
            if status == "storage":
                raise StorageError(f"worker {i}: {val}")
            if status == "error":
                raise RuntimeError(f"worker {i}: {val}")
            return val

    async def prepare(self, tasks: Sequence[WorkerTask]) -> None:
        await asyncio.gather(*(self._call(i, "prepare", t) for i, t in enumerate(tasks)))

    async def clock(self, i: int) -> int:
        wall_ns: int = await self._call(i, "clock", None)
        return wall_ns

    async def run(self, n: int, go_wall_ns: int, on_progress: Callable[[int, tuple[int, int]], None]
                  ) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._call(i, "run", go_wall_ns, on_progress) for i in range(n))))

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


async def run_level_split(pool: Any, run: RunDir, engine: str, shares: Sequence[Share],
                          make_task: Callable[[Share], WorkerTask],
                          *, on_done: Progress | None = None, start_lead_s: float = 0.5) -> LevelOutcome:
    """Run one level on ``pool`` (``ProcessPool`` or a Ray pool) and merge it into ``run``.

    Returns the merged ``LevelOutcome`` (counts from the reply files; ``client`` holds every process's
    figures and the clock-skew bound, also written to the level's ``client.json``).
    """
    label = shares[0].spec.label
    tasks = [make_task(s) for s in shares]
    await pool.prepare(tasks)
    rounds = []
    for i in range(len(tasks)):
        t0 = time.time_ns()
        tw = await pool.clock(i)
        rounds.append((t0, tw, time.time_ns()))
    skew = clock_skew(rounds)
    seen = [(0, 0)] * len(tasks)

    def on_progress(i: int, now: tuple[int, int]) -> None:
        if on_done:
            for _ in range(now[0] - seen[i][0]):
                on_done(label, True)
            for _ in range(now[1] - seen[i][1]):
                on_done(label, False)
        seen[i] = now

    started = time.monotonic()
    results = await pool.run(len(tasks), time.time_ns() + int(start_lead_s * 1e9), on_progress)
    outcome = LevelOutcome(label)
    outcome.wall_s = time.monotonic() - started
    level_dir = run.level_dir("outputs", engine, label)
    processes = []
    for res in sorted(results, key=lambda r: r["worker"]):
        for rel, data in (res.get("files") or {}).items():
            write_bytes(run.path / rel, data)
        proc = res["client"]
        processes.append(proc)
        anchor = proc["anchor"]
        extra = {"worker": res["worker"], "clock_offset_ns": anchor["wall_ns"] - anchor["perf_ns"]}
        mine = LevelOutcome(label)
        for reply in materialise(run, engine, label, level_dir / res["journal"], extra_meta=extra):
            mine.count(reply)
        on_progress(res["worker"], (mine.ok, mine.failed))  # the last moments since the process's last report
        outcome.ok += mine.ok
        outcome.failed += mine.failed
        outcome.transport_failures += mine.transport_failures
        outcome.sent += res["sent"]
    outcome.client = {"processes": processes, "clock": skew, "pool": pool.describe(),
                      "draws": [r.get("draws", 0) for r in results],
                      "rejected_fields": sorted({f for r in results for f in r["rejected_fields"]})}
    write_json(level_dir / CLIENT_FILE, outcome.client)
    return outcome
