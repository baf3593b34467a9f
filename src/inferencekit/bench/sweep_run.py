"""The ``bench sweep`` job: run load points one at a time into one bench run dir, choosing each next point from
the last one's figures (``bench/sweep.py``), judge every point against the SLO (``bench/sweep_point.py``) and its
correctness at that load (the order gate on the known answers sent inside it), and write ``sweep.json``.

Every point is a normal level of the run dir (``load-<label>/``), so ``gates check``, ``report`` and ``bench export``
read a sweep as they read any bench serve run; the bench record's data holds the sweep under ``sweep``.

The known answers (``--kat N``) are sent once alone after the warm-up, then inside every point
(``kat/load-<level>/``); the hidden probes (``--probes``) are dealt one group per point, in run order, as bench
serve deals them over its levels; the structured requests (``--structured N``) go inside every point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.pace_judge import judge_client_pace
from inferencekit.bench.plan import LevelSpec, parse_levels
from inferencekit.bench.serve import ServeSession, load_level_replies
from inferencekit.bench.sweep import SearchSpace, Target, boundary, next_point
from inferencekit.bench.sweep_point import judge_point
from inferencekit.data.prompts import Prompt
from inferencekit.rundir import (
    CLIENT_FILE,
    KAT_ALONE,
    PROBES_FOLDER,
    RETOKENIZED_FILE,
    STRUCTURED_ALONE,
    RunDir,
    kat_folder,
    read_json,
    structured_folder,
    write_json,
)
from inferencekit.shapes import ExtraRequests, ProbeRecord

__all__ = ["MAX_POINTS", "SWEEP_FORMAT", "SweepSettings", "probe_slots", "run_sweep"]

SWEEP_FORMAT = "inferencekit.sweep.v1"
MAX_POINTS = 24  # a search that has not converged after this many points stops and says so


@dataclass(frozen=True, slots=True)
class SweepSettings:
    """What one sweep asks (stored in run.json as ``sweep_settings``): the walk, the SLO, and how each point runs."""

    space: SearchSpace
    targets: tuple[Target, ...]
    slo: dict[str, float]
    min_goodput: float | None
    repeats: int = 1
    hold: bool = True
    reset_cache: bool = False
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["space"] = asdict(self.space)
        d["targets"] = [asdict(t) for t in self.targets]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepSettings:
        """The settings ``to_json`` stored (``bench sweep --resume``)."""
        d = dict(d)
        space = dict(d.pop("space"))
        space["grid"] = tuple(space.get("grid") or ())
        return cls(space=SearchSpace(**space), targets=tuple(Target(**t) for t in d.pop("targets")),
                   **{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def point_specs(self, value: float) -> list[LevelSpec]:
        """The level(s) of the point at ``value``: one, or ``repeats`` labelled ``<point>_rep<i>`` (run back to back:
        a search cannot interleave points it has not chosen yet)."""
        if self.space.axis == "concurrency":
            base = parse_levels([int(value)], None)[0]
        else:
            base = parse_levels(None, [value], arrival=self.arrival, burstiness=self.burstiness,
                                max_concurrency=self.max_concurrency or None)[0]
        if self.repeats == 1:
            return [base]
        return [replace(base, label=f"{base.label}_rep{i}", point=base.label, repeat=i)
                for i in range(1, self.repeats + 1)]

    def hold_spec(self, value: float) -> LevelSpec:
        """The boundary point's second run, ``<point>_hold``."""
        base = self.point_specs(value)[0]
        label = base.point_label
        return replace(base, label=f"{label}_hold", point=label, repeat=0)


def probe_slots(n: int = MAX_POINTS + 1) -> list[str]:
    """Placeholder level names ``p0, p1, ...`` over which the hidden probes' groups are dealt before the points are
    known; the i-th point run takes slot i's group."""
    return [f"p{i}" for i in range(n)]


def _point_extras(plan: ExtraRequests | None, slot: str, label: str) -> list[ProbeRecord]:
    """The extra requests sent inside the point ``label``: every known answer and structured request (the copies
    sent alone, into this level's folders) and slot ``slot``'s hidden probes."""
    if plan is None:
        return []
    out: list[ProbeRecord] = []
    for p in plan["alone"]:
        if p.get("folder") == KAT_ALONE:
            out.append({**p, "folder": kat_folder(label)})
        elif p.get("folder") == STRUCTURED_ALONE:
            out.append({**p, "folder": structured_folder(label)})
    out += [p for p in plan["by_level"].get(slot, []) if p.get("folder") == PROBES_FOLDER]
    return out


async def _reset_cache(client: Client, info: EngineInfo) -> dict[str, Any]:
    """Empty the server's prefix cache where its dialect can (vLLM ``/reset_prefix_cache``, served with
    ``VLLM_SERVER_DEV_MODE=1``; SGLang ``/flush_cache``); the outcome, recorded per point."""
    path = info.dialect.cache_reset_path
    if not path:
        return {"reset": False, "why": f"{info.engine} has no known prefix-cache reset endpoint"}
    ex = await client.post(path, {}, timeout_s=30.0)
    if ex.error:
        return {"reset": False, "path": path, "why": ex.error[:300]}
    return {"reset": True, "path": path, "status": ex.status}


def _level_inputs(run: RunDir, engine: str, labels: Sequence[str]
                  ) -> tuple[list[list[dict[str, Any]]], list[dict[str, int] | None]]:
    replies = [load_level_replies(run, engine, lb) for lb in labels]
    retok = []
    for lb in labels:
        doc = read_json(run.level_dir("outputs", engine, lb) / RETOKENIZED_FILE)
        retok.append(doc.get("counts") if isinstance(doc, dict) and isinstance(doc.get("counts"), dict) else None)
    return replies, retok


Correctness = Callable[[RunDir, str, Sequence[str]], dict[str, Any]]


def _not_judged(run: RunDir, engine: str, labels: Sequence[str]) -> dict[str, Any]:
    return {"verdict": "NOT RUN", "reason": "no correctness judge was given"}


async def run_sweep(sw: SweepSettings, cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir,
                    prompts: Sequence[Prompt], *, extras: ExtraRequests | None,
                    on_done: Callable[[str, bool], None] | None = None,
                    on_level: Callable[[str, int], None] | None = None, resume: bool = False,
                    on_point: Callable[[dict[str, Any]], None] | None = None,
                    correctness: Correctness = _not_judged) -> dict[str, Any]:
    """Walk the sweep and return the bench record (saved), whose ``data.sweep`` is the sweep document also written
    to ``sweep.json``.

    Args:
        cfg: the run's settings; its ``levels`` are filled here, point by point (stored in run.json as they grow).
        extras: the extra-request plan over ``probe_slots()`` (``verify.bench_extras``), or None.
        resume: levels finished before are judged from their files, not sent again; the walk, being a function of
            the points' results, retraces its steps and goes on where it stopped.
        on_point: called with each point's judgement as it is known.
        correctness: the verdict on the point's extra requests, ``(run, engine, the point's level labels) ->
            {"verdict", "reason", ...}``: the gates judge them, and the command composes the two (bench does not
            import the gates, docs/architecture.md).
    """
    cfg.levels = []
    session = ServeSession(cfg, client, info, run, prompts, on_done=on_done, on_level=on_level, resume=resume,
                           extras=extras)
    points: list[dict[str, Any]] = []
    cache_resets: list[dict[str, Any]] = []
    try:
        await session.start()
        stopped: str | None = None
        while True:
            tested = {float(p["value"]): bool(p["meets"]) for p in points if not p.get("hold")}
            value = next_point(sw.space, tested)
            if value is None:
                break
            if len(points) >= MAX_POINTS:
                stopped = f"stopped after {MAX_POINTS} points without converging"
                break
            points.append(await _run_point(sw, cfg, client, info, run, session, extras, value, len(points),
                                           cache_resets, correctness))
            if on_point:
                on_point(points[-1])
        bound = boundary(sw.space, [p for p in points if not p.get("hold")])
        if sw.hold and bound["found"] and not sw.space.grid and bound["value"] is not None:
            held = await _run_point(sw, cfg, client, info, run, session, extras, bound["value"], len(points),
                                    cache_resets, correctness, hold=True)
            points.append(held)
            if on_point:
                on_point(held)
        await session.retokenize()
        for p in points:  # re-judged with the re-tokenized counts (TPOT's N_out) now on disk
            _judge(p, sw, run, session.engine, cfg)
        for h in (p for p in points if p.get("hold")):
            for p in points:
                if p["value"] == h["value"] and not p.get("hold"):
                    p["held"] = h["meets"]
        bound = boundary(sw.space, [p for p in points if not p.get("hold")])
        doc = {"format": SWEEP_FORMAT, "axis": sw.space.axis, "space": sw.space.to_json(),
               "targets": [t.to_json() for t in sw.targets], "resolution": sw.space.resolution,
               "goodput": {"slo": sw.slo, "min_fraction": sw.min_goodput} if sw.min_goodput is not None else None,
               "repeats": sw.repeats, "points": points, "boundary": bound, "stopped": stopped,
               "cache_reset": {"asked": sw.reset_cache, "points": cache_resets} if sw.reset_cache else
               {"asked": False, "note": "the prefix cache was not reset between points (--reset-cache not given); "
                                        "every load request is new or salted at its start, so none of the measured "
                                        "requests is served from it (the known answers repeat by design and are "
                                        "not in the figures)"}}
        path = run.sweep_path
        write_json(path, doc, indent=True)
        return await session.finish(extra_data={"sweep": doc}, extra_artifacts=[(path, "sweep")])
    finally:
        session.close()


async def _run_point(sw: SweepSettings, cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir,
                     session: ServeSession, extras: ExtraRequests | None, value: float, order: int,
                     cache_resets: list[dict[str, Any]], correctness: Correctness, *, hold: bool = False
                     ) -> dict[str, Any]:
    specs = [sw.hold_spec(value)] if hold else sw.point_specs(value)
    for spec in specs:
        if spec.label not in {lv.label for lv in cfg.levels}:
            cfg.levels.append(spec)
        run.update_run(bench_config=cfg.to_json())
        session.runner.extras["by_level"][spec.label] = _point_extras(extras, f"p{order}", spec.label)
        if sw.reset_cache and not session.level_done(spec.label):
            cache_resets.append({"level": spec.label, **await _reset_cache(client, info)})
        await session.run_level(spec)
    labels = [s.label for s in specs]
    point = {"label": specs[0].point_label, "value": value, "order": order, "levels": labels, "hold": hold,
             "correctness": correctness(run, session.engine, labels)}
    _judge(point, sw, run, session.engine, cfg)
    return point


def _judge(point: dict[str, Any], sw: SweepSettings, run: RunDir, engine: str, cfg: ServeConfig) -> None:
    """Judge a point from its levels' files, in place (``judge_point``). A level the client could not pace
    (``pace_judge.judge_client_pace``: the same self-check that makes a bench serve level invalid) makes the point
    invalid: ``meets`` False and ``certain`` ``"invalid"``, so the search goes below it and neither the boundary nor
    its interval rests on figures that say what the client did rather than the server."""
    replies, retok = _level_inputs(run, engine, point["levels"])
    point.update(judge_point(replies, sw.targets, slo=sw.slo, min_goodput=sw.min_goodput, retokenized=retok))
    specs = {s.label: s for s in cfg.levels}
    reasons: list[str] = []
    for label, rs in zip(point["levels"], replies):
        spec = specs.get(label)
        if spec is None:
            continue
        procs = (read_json(run.level_dir("outputs", engine, label) / CLIENT_FILE) or {}).get("processes") or []
        pace = judge_client_pace(procs, rs, rate=spec.rate if spec.mode == "open" else None,
                                 streams=spec.concurrency or None)
        if pace["valid"] is False:
            reasons += [f"{label}: {x}" for x in pace["reasons"]]
    point["client_valid"] = not reasons
    if reasons:
        point.update(meets=False, certain="invalid",
                     reason=f"invalid, the client set its pace ({reasons[0]}): not a measurement of the server")
