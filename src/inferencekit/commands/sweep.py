"""``inferencekit bench sweep``: a grid over load, or a search for the highest load that meets an SLO, with the
known answers' verdict at every point (``bench/sweep.py``, ``bench/sweep_point.py``, ``bench/sweep_run.py``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint, normalize_base_url
from inferencekit.api.loop import run as run_loop
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.plan import RATE_RANGE, LevelSpec, parse_slo
from inferencekit.bench.serve import prepare_serve
from inferencekit.bench.sweep import SearchSpace, parse_targets
from inferencekit.bench.sweep_run import MAX_POINTS, SweepSettings, probe_slots, run_sweep
from inferencekit.commands.bench import BENCH_ARGS, config_from_args, judge_extras
from inferencekit.commands.gates import render_gates
from inferencekit.data.datasets import load_static
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.gates.check import read_kat
from inferencekit.gates.judges.order import judge_kat
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations, verdict_style
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir
from inferencekit.stats import combine_claims
from inferencekit.verify import bench_extras

__all__ = ["bench_sweep", "sweep_settings"]

_NOT_FOR_SWEEP = ("concurrency", "request_rate", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
                  "repeats", "export", "export_path", "kat", "ray", "workers")
SWEEP_ARGS: tuple[Arg, ...] = (
    Arg("slo_target", "string", "Percentile targets a point must meet, in ms: <metric>_<stat>=limit with metric ttft, "
        "ttfo, tpot, itl, e2el and stat p50, p90, p95, p99, mean, e.g. ttft_p99=500,tpot_p90=50."),
    Arg("goodput", "number", "The least fraction of a point's requests that must meet every --slo limit (e.g. 0.9)."),
    Arg("axis", "string", "The load to search over: open-loop request rate (requests/s) or closed-loop concurrency "
        "(streams).", default="rate", choices=("rate", "concurrency")),
    Arg("concurrency", "array", "A grid of closed-loop points instead of a search, e.g. 1,2,4,8.", items="integer"),
    Arg("request_rate", "array", "A grid of open-loop points in requests/s instead of a search, e.g. 1,2,4.",
        items="number"),
    Arg("start", "number", "Search: the first point (default 1).", default=1.0),
    Arg("min", "number", "Search: the lowest point it may go down to (default: 1/16 of --start for rates, 1 stream)."),
    Arg("max", "number", "Search: the highest point it may go up to (default 64).", default=64.0),
    Arg("resolution", "number", "Search: stop when the bracket is this narrow: a fraction of the lower end for "
        "rates (default 0.1 = 10%), streams for concurrency (default 1).", default=0.1),
    Arg("repeats", "integer", "Run every point this many times, back to back; its figures are then the mean of the "
        "repeats with a Student t 95% interval.", default=1),
    Arg("kat", "integer", "Known-answer requests (dev prompts, greedy) sent alone after the warm-up and again inside "
        "every point; each point's order-gate verdict says whether the replies under that load match (0 = none).",
        default=8),
    Arg("reset_cache", "boolean", "Empty the server's prefix cache before every point where its dialect can (vLLM "
        "/reset_prefix_cache, needs VLLM_SERVER_DEV_MODE=1, which `engine up --engine vllm` sets; SGLang "
        "/flush_cache); elsewhere the sweep records that it was not reset."),
    Arg("no_hold", "boolean", "Search: do not run the boundary point a second time to check that it holds."),
    Arg("resume", "string", "Finish the interrupted sweep in this run directory with its stored settings: finished "
        "points are judged from their files, the walk retraces its steps and goes on (--base-url may differ).",
        metavar="RUN_DIR"),
)


def sweep_settings(a: dict[str, Any]) -> SweepSettings:
    """Validate the sweep's own flags (before anything is sent).

    Raises:
        OpError: no target, a bad target, --goodput without --slo, a grid on both axes, a bad search range.
    """
    targets = tuple(parse_targets(a.get("slo_target")))
    slo = parse_slo(a.get("slo"))
    g = a.get("goodput")
    if g is not None and not (0 < g <= 1):
        raise OpError(f"--goodput is a fraction of requests in (0, 1], got {g}")
    if g is not None and not slo:
        raise OpError("--goodput needs --slo: the per-request limits a good request meets (e.g. --slo ttft=500)")
    if not targets and g is None:
        raise OpError("bench sweep needs an SLO to judge points by: --slo-target ttft_p99=500 and/or "
                      "--goodput 0.9 with --slo ttft=500,tpot=50")
    conc, rates = a.get("concurrency"), a.get("request_rate")
    if conc and rates:
        raise OpError("give one grid: --concurrency or --request-rate")
    axis = "concurrency" if conc else "rate" if rates else a["axis"]
    grid = tuple(float(x) for x in (conc or rates or ()))
    if conc and any(c < 1 for c in conc):
        raise OpError("--concurrency values must be ≥ 1")
    if rates and any(not (math.isfinite(r) and RATE_RANGE[0] <= r <= RATE_RANGE[1]) for r in rates):
        raise OpError(f"--request-rate values must lie within {RATE_RANGE[0]:g}..{RATE_RANGE[1]:g} requests/s")
    if len(set(grid)) != len(grid):
        raise OpError("the grid repeats a point")
    start, top = a["start"], a["max"]
    low = a.get("min")
    if low is None:
        low = 1.0 if axis == "concurrency" else max(RATE_RANGE[0], start / 16)
    for name, v in (("--start", start), ("--min", low), ("--max", top)):
        if not (math.isfinite(v) and v > 0):
            raise OpError(f"{name} must be a finite number > 0, got {v}")
    if not low <= start <= top:
        raise OpError(f"need --min ≤ --start ≤ --max, got {low:g}, {start:g}, {top:g}")
    if axis == "concurrency" and (start != int(start) or top != int(top) or low != int(low)):
        raise OpError("a concurrency search runs whole streams: give --start, --min and --max as integers")
    res = a["resolution"]
    if not (math.isfinite(res) and res > 0) or (axis == "rate" and res >= 1):
        raise OpError(f"--resolution must be > 0 (and < 1 for rates, a fraction of the rate), got {res}")
    reps = a["repeats"]
    if reps < 1:
        raise OpError(f"--repeats must be ≥ 1, got {reps}")
    if a.get("max_concurrency") and axis == "concurrency":
        raise OpError("--max-concurrency caps open-loop points; a concurrency sweep is closed loop")
    space = SearchSpace(axis, float(start), float(low), float(top), float(res if axis == "rate" else max(1, res)),
                        grid)
    return SweepSettings(space, targets, slo, g, repeats=reps, hold=not a["no_hold"],
                         reset_cache=bool(a["reset_cache"]), arrival=a["arrival"], burstiness=a["burstiness"],
                         max_concurrency=a.get("max_concurrency") or 0)


def kat_correctness(kat: int) -> Any:
    """The judge of a point's correctness: the order gate on the known answers sent inside the point's levels
    against their copies sent alone (``gates/judges/order.py`` ``judge_kat``); NOT RUN without ``--kat``."""

    def judge(run: RunDir, engine: str, labels: Sequence[str]) -> dict[str, Any]:
        if not kat:
            return {"gate": "order", "verdict": "NOT RUN", "reason": "no known answers were sent (--kat 0)"}
        rows, files, level = read_kat(run, engine, levels=list(labels))
        gate = judge_kat(rows, level)
        return {"gate": "order", "verdict": gate.verdict, "reason": gate.reason, "files": files}

    return judge


def _serve_config(a: dict[str, Any]) -> ServeConfig:
    """The run's settings through bench serve's own checks (one placeholder level; the sweep adds the points)."""
    b = {**a, "concurrency": [1], "request_rate": None, "ramp_up_strategy": None, "ramp_up_start_rps": None,
         "ramp_up_end_rps": None, "repeats": 1, "max_concurrency": None, "workers": 1, "ray": None}
    cfg = config_from_args(b)
    cfg.levels = []
    return cfg


@operation(("bench", "sweep"), "Find the highest load that meets an SLO (or run a grid), with correctness at each "
           "point.",
           description="Runs load points one at a time into one bench run dir: a grid (--request-rate or "
                       "--concurrency), or a search that doubles the load while the SLO holds, halves it while it "
                       "does not, then bisects to --resolution, and runs the boundary once more to check it holds. "
                       "The SLO: --slo-target percentile limits and/or --goodput with --slo per-request limits. Each "
                       "point's figures carry a 95% interval (order statistics within a run, Student t across "
                       "--repeats), and known-answer requests (--kat) are sent inside every point, so the boundary "
                       "is reported with the order gate's verdict at that load. Every point is a normal level: "
                       "gates check, report and bench export read the run dir as any bench serve run; the sweep is "
                       "in sweep.json and the bench record. Exit 0 when a boundary was found and the known answers "
                       "held, 1 when they did not, 3 when no boundary was found or requests failed.",
           example="inferencekit bench sweep --base-url http://127.0.0.1:8080 --slo-target ttft_p90=800 "
                   "--num-prompts 48 --max-tokens 32",
           args=[*CLIENT_ARGS, *(x for x in BENCH_ARGS if x.name not in _NOT_FOR_SWEEP), *SWEEP_ARGS])
def bench_sweep(call: Call, **a: Any) -> Outcome:
    check_client_args(a.get("base_url"), a.get("api_key_env"), a["timeout"])
    resume = a.pop("resume")
    if resume:
        run, sw, cfg, stored_url = _resume(resume, a)
        base_url = a.get("base_url") or stored_url
    else:
        sw = sweep_settings(a)
        cfg = _serve_config(a)
        if cfg.trace or cfg.dataset == "conversations":
            raise OpError("bench sweep runs single-request points; --trace and --dataset conversations are bench "
                          "serve workloads")
        cfg.kat = a["kat"]
        if cfg.kat < 0:
            raise OpError("--kat must be ≥ 0")
        cfg.repeats = sw.repeats
        base_url = a.get("base_url")
    static = load_static(cfg.dataset)
    if not resume:
        run = RunDir.create(a.get("run_dir"))
        run.update_run(operation=call.operation, target=normalize_base_url(base_url) if base_url else "embedded",
                       sweep_settings=sw.to_json())
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _started):
            endpoint = Endpoint.parse(url, a.get("api_key_env"))
            record = run_loop(_sweep(call, sw, cfg, endpoint, run, a.get("model"), static, a.get("api_key_env"),
                                     bool(resume)))
    except OpError:
        run.discard_if_empty()
        raise
    gates = judge_extras(run, cfg, record)
    doc = record["data"]["sweep"]
    bound = doc["boundary"]
    at = next((p for p in doc["points"] if not p.get("hold") and p["value"] == bound.get("value")), None)
    correctness = (at or {}).get("correctness") or {}
    parts = [v for v in (record.get("verdict"), gates and gates["verdict"], correctness.get("verdict")) if v]
    verdict: str | None = combine_claims(parts) if parts else None
    if not bound["found"] and verdict in (None, "PASS"):
        verdict = "UNPROVEN"  # a sweep that found no boundary has not shown what it was asked
    payload = {"evidence_id": record["evidence_id"], "run_dir": str(run.path), "verdict": verdict,
               "boundary": bound, "correctness_at_boundary": correctness,
               "points": [{k: p.get(k) for k in ("order", "label", "value", "hold", "meets", "certain", "reason",
                                                  "levels")} | {"correctness": p["correctness"]["verdict"]}
                          for p in doc["points"]],
               "limitations": record["limitations"]}
    if gates is not None:
        payload.update(gates_evidence_id=gates["evidence_id"],
                       gates={g["gate"]: {"verdict": g["verdict"], "reason": g["reason"]}
                              for g in gates["data"]["gates"]})

    def render(console: Any) -> None:
        render_sweep(console, record, verdict)
        if gates is not None:
            render_gates(console, gates)

    return Outcome(payload, verdict, render)


def _resume(path: str, a: dict[str, Any]) -> tuple[RunDir, SweepSettings, ServeConfig, str | None]:
    """The run dir, sweep settings, run settings and stored target of a sweep to finish.

    Raises:
        OpError: not a bench sweep run dir, or flags that shape the sweep given with --resume.
    """
    run = RunDir.open(path, writable=True)
    stored = run.read_run()
    if stored.get("operation") != "bench.sweep" or not stored.get("sweep_settings") or not stored.get("bench_config"):
        op = stored.get("operation")
        raise OpError(f"--resume finishes bench sweep runs; {path!r} holds "
                      + (f"a {op} run" if op else "no recognisable run"))
    shaping = {x.name: x for x in (*BENCH_ARGS, *SWEEP_ARGS) if x.name not in ("run_dir", "resume")}
    given = [n for n, x in shaping.items() if a.get(n) is not None and a.get(n) != x.default
             and not (x.type == "array" and not a.get(n)) and not (x.type == "boolean" and a.get(n) is False)]
    if given:
        raise OpError("--resume replays the sweep's stored settings; drop "
                      + ", ".join("--" + n.replace("_", "-") for n in given))
    cfg = ServeConfig.from_json(stored["bench_config"])
    cfg.timeout_s = a["timeout"]
    target = stored.get("target")
    return run, SweepSettings.from_json(stored["sweep_settings"]), cfg, None if target in (None, "embedded") else target


async def _sweep(call: Call, sw: SweepSettings, cfg: ServeConfig, endpoint: Endpoint, run: RunDir, model: str | None,
                 static: Any, api_key_env: str | None, resume: bool = False) -> dict[str, Any]:
    async with Client(endpoint, timeout_s=cfg.timeout_s) as client:
        # prepare_serve sizes a built dataset (--dataset random, sharegpt) by the levels: one, so a resumed sweep
        # draws the same prompts
        cfg.levels = [LevelSpec("c1", "closed", concurrency=1)]
        info, prompts = await prepare_serve(cfg, client, run, model, static, argv=call.argv, resume=resume,
                                            operation=call.operation, api_key_env=api_key_env, quiet=call.quiet)
        slots = [LevelSpec(s, "closed", concurrency=1) for s in probe_slots(MAX_POINTS + 1)]
        extras = bench_extras(replace(cfg, levels=slots), info, prompts)
        with ProgressBar(call.quiet) as bar:
            return await run_sweep(sw, cfg, client, info, run, prompts, extras=extras, on_done=bar.on_done,
                                   on_level=bar.on_level, resume=resume, correctness=kat_correctness(cfg.kat))


def _cell(fig: dict[str, Any] | None) -> str:
    if not fig or fig.get("value") is None:
        return "—"
    ci = fig.get("ci95")
    mark = {"pass": "✓", "fail": "✗", "uncertain": "?"}.get(fig.get("status", ""), "")
    s = f"{fig['value']:.1f}"
    return s + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else " [n too small]") + f" {mark}"


def _slo_text(slo: Any) -> str:
    """``{"ttft_ms": 800.0}`` (the per-request goodput SLO) as ``TTFT ≤ 800 ms``."""
    if not isinstance(slo, dict):
        return str(slo)
    return ", ".join(f"{str(k).removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in slo.items())


def render_sweep(console: Any, record: dict[str, Any], verdict: str | None = None) -> None:
    """The sweep card: one row per point in run order (figures with their 95% interval and ✓ within the limit for
    the whole interval, ✗ beyond it, ? straddling), then the boundary, the known answers' verdict there and the
    sweep's own verdict (``verdict``: the bench record's, the gates' and the known answers' combined)."""
    from rich.table import Table

    doc = record["data"]["sweep"]
    unit = "req/s" if doc["axis"] == "rate" else "streams"
    names = [t["name"] for t in doc["targets"]]
    limits = ", ".join(f"{t['name']} ≤ {t['limit_ms']:g} ms" for t in doc["targets"])
    if doc.get("goodput"):
        g = doc["goodput"]
        limits += (", " if limits else "") + f"goodput ≥ {g['min_fraction']:g} of requests within {_slo_text(g['slo'])}"
    t = Table(title=f"bench sweep — SLO: {limits}; client-side, 95% intervals", title_justify="left")
    for col in ("#", f"point ({unit})", "requests", *names, *(["goodput"] if doc.get("goodput") else []),
                "meets", "known answers"):
        t.add_column(col, justify="left" if col in ("#", "meets", "known answers") else "right")
    for p in doc["points"]:
        row = [str(p["order"] + 1), f"{p['value']:g}" + (" (hold)" if p.get("hold") else ""),
               f"{p['requests'] - p['failed']}/{p['requests']}", *(_cell(p["figures"].get(n)) for n in names)]
        if doc.get("goodput"):
            gp = p.get("goodput") or {}
            row.append("—" if gp.get("fraction") is None else
                       f"{gp['fraction']:.2f} [{gp['ci95'][0]:.2f}, {gp['ci95'][1]:.2f}]")
        row += [("yes" if p["meets"] else "no") + f" ({p['certain']})", p["correctness"]["verdict"]]
        t.add_row(*row)
    console.print(t)
    b = doc["boundary"]
    ci = b.get("ci95") or [None, None]
    lo = "—" if ci[0] is None else f"{ci[0]:g}"
    hi = "—" if ci[1] is None else f"{ci[1]:g}"
    def amount(v: float) -> str:
        return f"{v:g} {b['unit'].removesuffix('s') if v == 1 and b['unit'] == 'streams' else b['unit']}"

    if b["found"]:
        head = f"boundary: {amount(b['value'])}"
    elif b.get("value") is not None:
        head = f"no boundary found (the highest point run, {amount(b['value'])}, met the SLO)"
    else:
        head = "no boundary found"
    console.print(f"{head}, 95% interval [{lo}, {hi}] (points run whose intervals lie wholly within / beyond the SLO)"
                  f" — {b['reason']}", style="bold" if b["found"] else "bold yellow", markup=False)
    at = next((p for p in doc["points"] if not p.get("hold") and p["value"] == b.get("value")), None)
    if at is not None:
        c = at["correctness"]
        console.print(f"known answers at the boundary: {c['verdict']} — {c['reason']}", style=verdict_style(
            c["verdict"]), markup=False)
    if not doc["cache_reset"]["asked"]:
        console.print(doc["cache_reset"]["note"], markup=False)
    if verdict is not None:
        why = {"PASS": "a boundary, known answers held and the gates passed",
               "FAIL": "the known answers or a gate failed (above)",
               "UNPROVEN": "no boundary found, a level invalid or requests lost (limitations below)"}.get(verdict, "")
        console.print(f"sweep verdict: {verdict}" + (f" — {why}" if why else ""), style=verdict_style(verdict),
                      markup=False)
    print_limitations(console, record["limitations"])
    console.print(f"record {record['evidence_id']} · run dir {record['data']['run_dir']} · sweep.json",
                  markup=False)
