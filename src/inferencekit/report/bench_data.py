"""A finished bench serve run dir, read for its pictures: the bench record and every level's reply files.

Collect (``load_bench_run``: reads files through ``rundir.py``'s readers) and pure helpers (``ecdf``,
``pareto_front``, ``thin``) are kept apart so the helpers are tested on plain lists.

What is read, and from where (docs/design.md, "Run directory"; ``bench/serve.py`` ``bench_record``):

- ``run.json`` ``bench_record`` → ``evidence/<id>.json``: the record (``kind`` ``bench``); its ``data.levels``
  hold each level's summaries (``ttft_ms``, ``itl_ms``, ``e2el_ms``, ``throughput``, ``client``, …) exactly as
  the card prints them, and ``data.sweep`` (``bench sweep``) when the run is a sweep;
- ``outputs/<engine>/load-<level>/<bucket>/<id>.json[.gz]``: one reply per request, for the per-request
  points (send time, TTFT, E2EL, ITL gaps). Every field is untrusted: a value of the wrong type is left out
  (counted as not measured), never an exception;
- the record's own integrity (``evidence/record.py`` ``integrity_problems``: its id, and every file it lists):
  a changed run dir is drawn as it is now, under a warning;
- ``outputs/<engine>/load-<level>/client.json``: the client processes' event-loop lag (``bench/pace.py``),
  for the sample counts behind the self-check the record holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.record import integrity_problems
from inferencekit.report.export_vllm import bench_record_of
from inferencekit.rundir import CLIENT_FILE, RunDir, read_json
from inferencekit.shapes import is_ok, reply_end_ns, reply_start_ns

__all__ = ["BenchRun", "Level", "Request", "ecdf", "is_bench_run", "load_bench_run", "num", "pareto_front", "sub",
           "thin"]


def sub(m: Any, key: str) -> dict[str, Any]:
    """``m[key]`` when ``m`` is a mapping and that value is a JSON object, else {} (untrusted JSON read safely)."""
    v = m.get(key) if isinstance(m, Mapping) else None
    return v if isinstance(v, dict) else {}


def num(x: Any) -> float | None:
    """``x`` as a finite float when it is a JSON number (not a bool, not NaN/inf), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Request:
    """One request of a level, as its reply file says.

    ``send_s``: seconds from the run's first send (see ``BenchRun.clock``); ``ttft_ms``/``e2el_ms`` None when not
    measured (a failed request, or a field of the wrong type); ``itl_ms`` the gaps (ms) of a completed request.
    """

    key: str
    ok: bool
    send_s: float | None
    ttft_ms: float | None
    e2el_ms: float | None
    itl_ms: tuple[float, ...] = ()


@dataclass
class Level:
    """One load level: its label, the record's summaries (``data.levels[label]``, {} when the record has none) and
    its requests in send order; ``lag_samples`` is the event-loop lag sample count summed over its client
    processes (None without ``client.json``)."""

    label: str
    summary: dict[str, Any]
    requests: list[Request] = field(default_factory=list)
    lag_samples: int | None = None

    @property
    def completed(self) -> list[Request]:
        return [r for r in self.requests if r.ok]


@dataclass
class BenchRun:
    """A bench run dir read for its report.

    ``clock``: ``"common"`` when every reply's send time is on one clock (one host's monotonic clock, or the
    wall clock of ``--workers``/``--ray`` replies that carry ``clock_offset_ns``), so ``send_s`` is time since
    the run's first send; ``"per-level"`` when the levels mix the two (each level then starts where the
    previous one ended, and the page says so).
    """

    path: Path
    record: dict[str, Any]
    engine: str
    levels: list[Level]
    clock: str
    run: RunDir
    integrity: list[str] = field(default_factory=list)
    origin_ns: int | None = None  # the run's first send on the common clock (None: no send time, or per-level)
    wall_clock: bool = False  # the common clock is the wall clock (replies with clock_offset_ns)

    @property
    def data(self) -> dict[str, Any]:
        d = self.record.get("data")
        return d if isinstance(d, dict) else {}

    @property
    def sweep(self) -> dict[str, Any] | None:
        s = self.data.get("sweep")
        return s if isinstance(s, dict) else None


def is_bench_run(run: RunDir) -> bool:
    """True when ``run.json`` names a bench record or says the operation was ``bench.serve``."""
    stored = run.read_run()
    return bool(stored.get("bench_record")) or stored.get("operation") == "bench.serve"


def _request(r: Mapping[str, Any], key: str) -> tuple[Request, int | None, bool]:
    """The Request of one reply (send time filled in later), its send time in ns, and whether that time is on the
    wall clock (the reply carries ``clock_offset_ns``)."""
    ok = is_ok(r) and r.get("no_tokens") is not True and r.get("chunks") != 0  # bench/metrics.py's "completed"
    gaps = r.get("itl_ms")
    itl = tuple(g for g in (num(x) for x in gaps) if g is not None) if ok and isinstance(gaps, list) else ()
    try:
        start = reply_start_ns(r)
    except TypeError:  # a clock offset of the wrong type
        start = None
    req = Request(key=key, ok=ok, send_s=None, ttft_ms=num(r.get("ttft_ms")) if ok else None,
                  e2el_ms=num(r.get("e2el_ms")) if ok else None, itl_ms=itl)
    return req, start, isinstance(r.get("clock_offset_ns"), int)


def _end_ns(r: Mapping[str, Any]) -> int | None:
    try:
        return reply_end_ns(r)
    except (TypeError, ValueError, IndexError, KeyError):
        return None


def load_bench_run(path: str | Path) -> BenchRun:
    """Read a finished bench serve run dir.

    Raises:
        OpError: no such run dir, no run.json, no bench record, or the record is unreadable (messages name the
            path; ``report/export_vllm.py`` ``bench_record_of``).
    """
    run = RunDir.open(path)
    record = bench_record_of(run)
    data = sub(record, "data")
    engine = data.get("engine_label")
    if not isinstance(engine, str) or not engine:
        engines = run.load_engines()
        if len(engines) != 1:
            raise OpError(f"{str(run.path)!r}: the bench record names no engine label and the run dir holds "
                          f"{len(engines)} engines with load levels")
        engine = engines[0]
    summaries = sub(data, "levels")
    labels = list(summaries) + [lb for lb in run.levels(engine) if lb not in summaries]
    raw: list[tuple[Level, list[tuple[Request, int | None]], list[int]]] = []
    wall = set()
    for label in labels:
        s = summaries.get(label)
        level = Level(label, s if isinstance(s, dict) else {})
        rows, ends = [], []
        for p in run.level_files("outputs", engine, label):
            r = read_json(p)
            if not isinstance(r, dict):
                continue
            key = p.name.split(".json")[0]
            req, start, on_wall = _request(r, key)
            if start is not None:
                wall.add(on_wall)
            end = _end_ns(r)
            if end is not None:
                ends.append(end)
            rows.append((req, start))
        procs = (read_json(run.level_dir("outputs", engine, label) / CLIENT_FILE) or {})
        procs = procs.get("processes") if isinstance(procs, dict) else None
        if isinstance(procs, list):
            level.lag_samples = sum(int(n) for p in procs if isinstance(p, dict)
                                    for n in [((p.get("loop") or {}).get("loop_lag_ms") or {}).get("n")]
                                    if isinstance(n, int))
        raw.append((level, rows, ends))
    clock = "common" if len(wall) <= 1 else "per-level"
    starts = [s for _, rows, _ in raw for _, s in rows if s is not None]
    origin = min(starts) if starts else 0
    offset_s = 0.0  # per-level clock: where the next level starts on the page's time axis
    levels = []
    for level, rows, ends in raw:
        own = [s for _, s in rows if s is not None]
        base = origin if clock == "common" else (min(own) if own else 0)
        for req, start in sorted(rows, key=lambda x: (x[1] is None, x[1] or 0, x[0].key)):
            t = None if start is None else (start - base) / 1e9 + (0.0 if clock == "common" else offset_s)
            level.requests.append(Request(req.key, req.ok, t, req.ttft_ms, req.e2el_ms, req.itl_ms))
        if clock == "per-level" and own:
            offset_s += (max([*ends, *own]) - min(own)) / 1e9 + 1.0
        levels.append(level)
    return BenchRun(run.path, record, engine, levels, clock, run, integrity_problems(record, run.path),
                    origin_ns=origin if starts and clock == "common" else None, wall_clock=wall == {True})


# ---------------------------------------------------------------------------------------------- pure helpers

def ecdf(values: Sequence[float], max_steps: int = 400) -> tuple[list[float], list[float], bool]:
    """The empirical CDF of ``values`` as step points ``(x sorted, F(x) = i/n)``, and whether it was thinned.

    With more than ``max_steps`` values, the points kept are the order statistics at ``max_steps`` evenly spaced
    ranks (the first and last always kept), so the drawn line stays within 1/max_steps of the exact ECDF in F.
    """
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return [], [], False
    if n <= max_steps:
        return xs, [(i + 1) / n for i in range(n)], False
    idx = sorted({round(k * (n - 1) / (max_steps - 1)) for k in range(max_steps)})
    return [xs[i] for i in idx], [(i + 1) / n for i in idx], True


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points of ``(latency, throughput)`` pairs: lower latency and higher
    throughput are better; a point is dominated when another is at least as good on both and better on one.
    Returned in order of latency (then throughput, descending). Duplicates are both kept."""
    keep = []
    for i, (lat, thr) in enumerate(points):
        dominated = any((lat2 <= lat and thr2 >= thr) and (lat2 < lat or thr2 > thr)
                        for j, (lat2, thr2) in enumerate(points) if j != i)
        if not dominated:
            keep.append(i)
    return sorted(keep, key=lambda i: (points[i][0], -points[i][1]))


def thin(n: int, limit: int) -> int:
    """The stride that keeps at most ``limit`` of ``n`` items when every stride-th is kept (1: all)."""
    return max(1, math.ceil(n / limit)) if limit > 0 else 1
