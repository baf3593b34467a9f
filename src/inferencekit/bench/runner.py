"""Load generation: send a level's requests closed- or open-loop and keep each one as it ends.

Collect only: each finished exchange is appended raw to the level's journal at once (nothing
finished is lost), and the per-request input and reply files are written from it after the level
(``bench/journal.py``), off the timing path. The extra requests a caller mixes into a level (hidden
probes, known answers: ``shapes.ExtraRequests``) go through the same journal into their own folders.
Nothing here judges; metrics come later from the files (``bench/metrics.py``), verdicts on the extra
requests from the gates.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from inferencekit.api.client import Client, Exchange
from inferencekit.bench.journal import JOURNAL_NAME, Journal, materialise
from inferencekit.bench.pace import LoopLagMonitor, process_identity
from inferencekit.bench.plan import LevelSpec, PlannedRequest, Planner
from inferencekit.bench.schedule import arrival_offsets_s, ramp_offsets_s
from inferencekit.errors import STORAGE_ERRNOS, StorageError, storage_message
from inferencekit.redact import has_secrets
from inferencekit.rundir import CLIENT_FILE, PROBES_FOLDER, RunDir, write_json
from inferencekit.shapes import ExtraRequests, ProbeRecord

__all__ = ["LoadRunner", "LevelOutcome", "endpoint_path", "sleep_until_ns"]

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
    client: dict[str, Any] = field(default_factory=dict)

    def count(self, reply: dict[str, Any]) -> None:
        if "error" in reply:
            self.failed += 1
            self.transport_failures += reply.get("status") == 0
        else:
            self.ok += 1


async def sleep_until_ns(due_ns: int, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Return once ``time.perf_counter_ns()`` has reached ``due_ns`` (an open-loop send's scheduled moment).

    An event loop's timer may fire up to its clock's granularity early (libuv, under uvloop, keeps
    milliseconds), so one sleep of the remaining time is not enough: sleep again until the moment has truly
    passed, so nothing is sent before it is due (``sent_ns ≥ dispatched_ns ≥ scheduled_ns`` on every reply).
    """
    while (left_ns := due_ns - time.perf_counter_ns()) > 0:
        await sleep(left_ns / 1e9)


SENDS_PER_TURN = 16  # a closed level's sends between two looks at the network (SendTurns)


class SendTurns:
    """At most ``per_turn`` closed-loop sends in one turn of the event loop; a later one waits for the next turn,
    after the loop has read the network.

    A closed level's c streams start together, and end together when their replies are alike: without this the loop
    sent all c in one turn (~70 µs each: 1,024 sends took 70-130 ms), and every reply byte that came meanwhile was
    stamped that much late. Measured at 1,024 streams (one core, 256 tokens): event-loop lag p99 9-31 ms, of which
    the start alone was 14-26 of the ~2,050 five-millisecond ticks; a send is not delayed by it beyond the turns it
    would have waited for anyway, since each turn costs the same CPU. 32 a turn at first; a send costs ~100-150 µs
    of the loop's time here (the write alone, through loopback into the server, ~20 µs: perf), so 32 made a turn of
    3-5 ms while streams ended together, and that was the lag p99. 16 a turn, same set-up, 7 Dec 2026: lag p99
    1.75 and 1.85 ms, 98.2 and 98.1% of ideal; 32: 1.8-5.2 ms, 98.1-98.5%; 8: 1.1-2.1 ms, 97.7-98.4% (client on
    one core, benchmarks/README.md). A turn ends where the loop next runs the
    callback this arms (``call_soon``: after the callbacks ready now, then the network). Open-loop sends keep their
    schedule (their lateness is measured from ``dispatched_ns``, before the send)."""

    def __init__(self, per_turn: int = SENDS_PER_TURN) -> None:
        self.per_turn = per_turn
        self.sent = 0  # sends let through since the turn began
        self._armed = False
        self._waiting: deque[asyncio.Future[None]] = deque()  # first come, first sent

    async def wait(self) -> None:
        if self.sent < self.per_turn and not self._waiting:
            self.sent += 1
            self._arm()
        else:  # woken by a later turn, which counts it and arms the next (no task spins a turn while it waits)
            fut = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            await fut

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._armed = False
        self.sent = 0
        while self._waiting and self.sent < self.per_turn:
            fut = self._waiting.popleft()
            if not fut.done():  # a cancelled wait is passed over
                fut.set_result(None)
                self.sent += 1
        if self._waiting or self.sent:
            self._arm()


class LoadRunner:
    """Sends planned requests for one engine into one run dir.

    Args:
        client: an open ``Client``.
        run: the run directory.
        engine: the engine label (``outputs/<engine>/``).
        body_for: PlannedRequest → JSON body.
        optional: request fields that may be dropped when the server rejects them (HTTP 400).
        on_done: progress callback ``(level label, ok)`` called after each reply is written.
        extras: requests the caller mixes in (``shapes.ExtraRequests``); their own ``optional`` fields apply to them.
    """

    def __init__(self, client: Client, run: RunDir, engine: str, body_for: Callable[[PlannedRequest], dict[str, Any]],
                 *, optional: tuple[str, ...] = (), on_done: Progress | None = None,
                 extras: ExtraRequests | None = None) -> None:
        self.client = client
        self.run = run
        self.engine = engine
        self.body_for = body_for
        self.optional = optional
        self.on_done = on_done
        self.extras: ExtraRequests = extras or {"alone": [], "by_level": {}, "optional": []}
        # open-loop levels sent at given offsets (s after the level's start) rather than drawn ones: a trace replay
        self.offsets_for: dict[str, list[float]] = {}
        self.think_time_s = 0.0  # between a session's turns (--think-time; data/conversations.py)

    def _meta(self, req: PlannedRequest, level: str | None, scheduled_ns: int | None,
              dispatched_ns: int | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"id": req.prompt.id, "engine": self.engine}
        if level is not None:
            meta["level"] = level
        meta["bucket"] = req.prompt.bucket
        if req.salt:
            meta["salt"] = req.salt
        if req.prompt.shared_prefix_id:
            meta["shared_prefix_id"] = req.prompt.shared_prefix_id
        if req.prompt.session_id:
            meta.update(session_id=req.prompt.session_id, turn=req.prompt.turn, session_turns=req.prompt.session_turns)
        if scheduled_ns is not None:
            meta["scheduled_ns"] = scheduled_ns
        if dispatched_ns is not None:
            meta["dispatched_ns"] = dispatched_ns
        return meta

    async def send_one(self, req: PlannedRequest, folder: str) -> dict[str, Any]:
        """Send one request outside any level (warm-up, probes) and write its reply file at once."""
        ex = await self.client.post(endpoint_path(req), self.body_for(req), optional=self.optional)
        reply = ex.to_reply(**self._meta(req, None, None))
        write_json(self.run.special_path(self.engine, folder, req.key), reply)
        if self.on_done:
            self.on_done(folder, "error" not in reply)
        return reply

    async def _send(self, req: PlannedRequest, level: str, journal: Journal, outcome: LevelOutcome,
                    scheduled_ns: int | None = None, dispatched_ns: int | None = None, *,
                    read_here: bool = False) -> Exchange:
        """Send one load request and queue its exchange for the journal. A reply nobody reads before the level ends
        streams into the journal as it comes (``Journal.parts``: at 1,024 streams, whole replies held until their end
        were most of the client's memory); one the caller reads at once (``read_here``: a session's turn), or any
        with an API key registered (its bytes are scrubbed before they are written), is held whole."""
        sink = None if read_here or has_secrets() else journal.parts()
        ex = await self.client.post(endpoint_path(req), self.body_for(req), optional=self.optional, sink=sink)
        journal.append(req.key, req.prompt.bucket, self._meta(req, level, scheduled_ns, dispatched_ns), ex, sink)
        outcome.sent += 1
        outcome.keys.append(req.key)
        if self.on_done:
            self.on_done(level, ex.ok)
        return ex

    async def _unit(self, req: PlannedRequest, level: str, journal: Journal, outcome: LevelOutcome,
                    scheduled_ns: int | None = None, dispatched_ns: int | None = None) -> None:
        """One unit of work, closed- or open-loop: a request, or a whole multi-turn session when the prompt has
        later turns (``Prompt.followups``). ``scheduled_ns``/``dispatched_ns``: an open-loop arrival's place in the
        schedule and when the loop got to it (perf_counter ns), recorded on the request (a session's first turn)."""
        if not req.prompt.followups:
            await self._send(req, level, journal, outcome, scheduled_ns, dispatched_ns)
            return
        await self._session(req, level, journal, outcome, scheduled_ns, dispatched_ns)

    async def _session(self, req: PlannedRequest, level: str, journal: Journal, outcome: LevelOutcome,
                       scheduled_ns: int | None = None, dispatched_ns: int | None = None) -> None:
        """A multi-turn session: turn 1 is the prompt's first user message; turn k sends every user message so far
        with the model's own replies between them (the text derived from each reply's events, as received), after
        ``think_time_s``. Files ``<key>.t<k>``; each reply names its ``session_id``, ``turn`` and ``session_turns``. A
        failed turn ends the session: there is no reply to put in the next turn's history. In an open-loop level the
        session's start is the scheduled arrival: only turn 1 carries ``scheduled_ns``/``dispatched_ns``; later turns
        follow their predecessor's reply, so they have no schedule to be late against (``bench/pace_judge.py``)."""
        p = req.prompt
        history: list[dict[str, Any]] = [dict(m) for m in (p.messages or ())]
        n_turns = len(p.followups) + 1
        for k in range(n_turns):
            if k:
                if self.think_time_s > 0:
                    await asyncio.sleep(self.think_time_s)
                history.append({"role": "user", "content": p.followups[k - 1]})
            turn = replace(p, messages=tuple(dict(m) for m in history), followups=(), session_id=p.id, turn=k + 1,
                           session_turns=n_turns)
            ex = await self._send(PlannedRequest(f"{req.key}.t{k + 1}", turn, req.salt), level, journal, outcome,
                                  *((scheduled_ns, dispatched_ns) if k == 0 else (None, None)), read_here=True)
            if not ex.ok:
                return
            reply = ex.to_reply()
            if reply.get("stream_error") or reply.get("no_tokens"):
                return
            history.append({"role": "assistant", "content": reply.get("text") or ""})

    def _extra_meta(self, probe: ProbeRecord, level: str | None) -> dict[str, Any]:
        """The fields an extra request's reply file carries besides the exchange: its id, engine, level, probe
        kind, and the planner's ``meta`` as ``probe_meta`` when it has any (e.g. ``prompt_source``, which the
        hidden_probes gate reads back to state probes drawn from the public dev set)."""
        meta = probe.get("meta")
        return {"id": probe["id"], "engine": self.engine, **({"level": level} if level else {}),
                "probe_kind": probe["kind"], **({"probe_meta": dict(meta)} if meta else {})}

    async def send_alone(self, probe: ProbeRecord) -> None:
        """Send one extra request outside any level (``ExtraRequests.alone``) and write its body to
        ``inputs/<engine>/<folder>/<id>.json`` and its reply to ``outputs/<engine>/<folder>/<id>.json`` at once
        (no level is running, so nothing is timed meanwhile)."""
        folder = probe.get("folder", PROBES_FOLDER)
        out = self.run.special_path(self.engine, folder, probe["id"])
        write_json(self.run.special_path(self.engine, folder, probe["id"], kind="inputs"), probe["body"])
        ex = await self.client.post(probe["endpoint"], probe["body"], optional=self.extras["optional"])
        write_json(out, ex.to_reply(**self._extra_meta(probe, None)))
        if self.on_done:
            self.on_done(folder, ex.ok)

    async def _send_extra(self, probe: ProbeRecord, level: str, journal: Journal) -> None:
        """Send one extra request inside a level: its exchange goes to the level's journal, and ``materialise`` writes
        it to its own folder after the level (no parsing or file writes on the loop while the level runs)."""
        ex = await self.client.post(probe["endpoint"], probe["body"], optional=self.extras["optional"])
        journal.append(probe["id"], "", {**self._extra_meta(probe, level),
                                         "folder": probe.get("folder", PROBES_FOLDER)}, ex)

    def _probe_turns(self, label: str, n: int | None) -> tuple[list[ProbeRecord], int]:
        """This level's unsent extra requests and how many load requests go between two of them."""
        todo = [p for p in self.extras["by_level"].get(label, ()) if self.unsent(p)]
        return todo, max(1, (n or 64) // (len(todo) + 1)) if todo else 0

    def unsent(self, probe: ProbeRecord) -> bool:
        """False once the request's reply file exists (a resumed run does not send it again)."""
        return not self.run.special_path(self.engine, probe.get("folder", PROBES_FOLDER), probe["id"]).is_file()

    async def preconnect(self, n: int) -> int:
        """Open ``n`` keep-alive connections before a level (``Client.preconnect``, at once), so its first
        requests do not open ``n`` TCP connections in one burst: at 1,024 streams that burst held the client's loop
        ~0.15 s (every later stream started that much late) and can overflow a server's accept queue, which then
        shows as 1–3 s SYN-retry outliers in the first requests' TTFT. As wrk and k6 do. Returns the connections
        opened (0: nothing to do); a server that drops them just has them re-opened by the requests."""
        if n < 2:
            return 0
        return await self.client.preconnect(n)

    async def warmup(self, planner: Planner, n: int) -> list[dict[str, Any]]:
        """``n`` requests one at a time into ``outputs/<engine>/warmup/`` (not counted in any level)."""
        return [await self.send_one(planner.take(), "warmup") for _ in range(n)]

    async def run_level(self, spec: LevelSpec, planner: Planner, *, num_requests: int | None,
                        duration_s: float | None, seed: int, journal_name: str = JOURNAL_NAME,
                        materialise_after: bool = True, part: tuple[int, int] | None = None,
                        start_at_ns: int | None = None) -> LevelOutcome:
        """Run one level until ``num_requests`` were sent, or for ``duration_s`` seconds of sending,
        then write its files from the journal (unless ``materialise_after`` is False: a ``--workers``
        process leaves its journal for the parent). The client's own pace figures (event-loop lag, CPU)
        are in ``outcome.client`` and, when materialised here, in the level's ``client.json``. ``part`` and
        ``start_at_ns`` (perf_counter) are a ``--workers`` process's place in an open-loop level: its schedule is
        process i of k's (``schedule.arrival_offsets_s``) and starts at the instant all the processes share."""
        t0 = time.monotonic()
        outcome = LevelOutcome(spec.label)
        level_dir = self.run.level_dir("outputs", self.engine, spec.label)
        path = level_dir / journal_name
        warm = await self.preconnect(spec.concurrency)
        journal = Journal(path)
        monitor = LoopLagMonitor()
        # the cyclic GC is off for the level (what is alive now frozen out of its reach, automatic collections
        # stopped, a valve against growth): bench/pace.py LoopLagMonitor.start, docs/load-generation.md
        monitor.start()
        try:
            if spec.mode == "closed":
                await self._closed(spec, planner, num_requests, duration_s, journal, outcome)
            else:
                await self._open(spec, planner, num_requests, duration_s, seed, journal, outcome, part, start_at_ns)
        finally:
            # also when interrupted (Ctrl-C): what finished becomes files; the level stays 'running'
            outcome.client = {**process_identity(), "loop": monitor.stop(), "preconnected": warm}
            journal.close()
            outcome.wall_s = time.monotonic() - t0
            failure = journal.error
            if materialise_after:
                try:
                    write_json(level_dir / CLIENT_FILE, {"processes": [outcome.client]})
                    for reply in materialise(self.run, self.engine, spec.label, path):
                        outcome.count(reply)
                except OSError as e:  # the journal stays: --resume materialises it
                    if e.errno not in STORAGE_ERRNOS:
                        raise
                    failure = failure or e
        if failure is not None:
            raise self._stopped(spec.label, failure, outcome, journal)
        return outcome

    def _stopped(self, label: str, failure: BaseException, outcome: LevelOutcome, journal: Journal) -> BaseException:
        """The error that ends a level whose files could not be written: a ``StorageError`` for a full or read-only
        disk; any other failure of the writer is a bug and is returned as it was."""
        if not isinstance(failure, OSError) or failure.errno not in STORAGE_ERRNOS:
            return failure
        progress = {"level": label, "sent": outcome.sent, "on_disk": journal.written, "lost": journal.lost}
        return StorageError(
            f"{storage_message(failure, journal.path)}; stopped sending in level {label} after {outcome.sent} "
            f"requests: "
            f"{journal.written} finished requests are on disk, {journal.lost} that finished after the failure are "
            f"not; free space or make {self.run.path} writable, then finish the "
            f"run with --resume {self.run.path} (the level runs again whole; this attempt is kept under superseded/)",
            failure, progress)

    async def _closed(self, spec: LevelSpec, planner: Planner, n: int | None, duration_s: float | None,
                      journal: Journal, outcome: LevelOutcome) -> None:
        deadline = time.monotonic() + duration_s if duration_s else math.inf
        remaining = [n if n is not None else math.inf]
        probes, every = self._probe_turns(spec.label, n)
        taken = [0]
        turns = SendTurns()

        async def worker() -> None:
            # a probe takes the slot of the next load request after every `every` of them, so the level's
            # concurrency stays what it says; probes left when the level ends are sent in its last slots
            while not journal.failed and ((remaining[0] > 0 and time.monotonic() < deadline) or probes):
                await turns.wait()
                if probes and (taken[0] >= every or remaining[0] <= 0 or time.monotonic() >= deadline):
                    taken[0] = 0
                    await self._send_extra(probes.pop(0), spec.label, journal)
                    continue
                if not (remaining[0] > 0 and time.monotonic() < deadline):
                    continue  # the level ended during the wait: only probes may be left
                remaining[0] -= 1
                taken[0] += 1
                await self._unit(planner.take(), spec.label, journal, outcome)

        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))

    async def _open(self, spec: LevelSpec, planner: Planner, n: int | None, duration_s: float | None, seed: int,
                    journal: Journal, outcome: LevelOutcome, part: tuple[int, int] | None = None,
                    start_at_ns: int | None = None) -> None:
        # arrivals per second: requests, or a session level's session starts (LevelSpec.start_rate: --rate-of)
        count = n if n is not None else max(1, math.ceil(spec.start_rate * (duration_s or 0)))
        offsets: Sequence[float] | np.ndarray
        if spec.label in self.offsets_for:  # a trace's own times (bench serve --trace, one client process)
            offsets = self.offsets_for[spec.label][:count]
        elif spec.ramp:  # one client process sends a ramp (bench serve refuses --workers and --duration with it)
            offsets = ramp_offsets_s(count, spec.ramp, spec.ramp_start, spec.ramp_end, spec.arrival,
                                     burstiness=spec.burstiness, seed=seed)
        else:
            offsets = arrival_offsets_s(count, spec.start_rate, spec.arrival, burstiness=spec.burstiness, seed=seed,
                                        part=part)
        cap = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        tasks: list[asyncio.Task[None]] = []

        async def one(req: PlannedRequest, scheduled_ns: int) -> None:
            # the moment the loop got to this send: its lateness against the schedule is the client's own
            # (waiting for a --max-concurrency slot comes after and is the server's queue); a session holds its
            # slot from its first turn to its last, so the cap is on sessions in flight
            dispatched_ns = time.perf_counter_ns()
            if cap is None:
                return await self._unit(req, spec.label, journal, outcome, scheduled_ns, dispatched_ns)
            async with cap:
                return await self._unit(req, spec.label, journal, outcome, scheduled_ns, dispatched_ns)

        probes, every = self._probe_turns(spec.label, count)

        async def probe(p: ProbeRecord) -> None:
            if cap is None:
                return await self._send_extra(p, spec.label, journal)
            async with cap:
                return await self._send_extra(p, spec.label, journal)

        start_ns = start_at_ns or time.perf_counter_ns()
        side: list[asyncio.Task[None]] = []
        for i, off in enumerate(offsets):
            due_ns = start_ns + int(off * 1e9)
            await sleep_until_ns(due_ns)
            if journal.failed:  # the disk stopped taking records: send nothing more
                break
            tasks.append(asyncio.create_task(one(planner.take(), due_ns)))
            if probes and (i + 1) % every == 0:  # off the schedule, between arrivals
                side.append(asyncio.create_task(probe(probes.pop(0))))
        side += [asyncio.create_task(probe(p)) for p in probes if not journal.failed]
        await asyncio.gather(*tasks, *side)
