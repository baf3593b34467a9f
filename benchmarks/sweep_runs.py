"""Issue 22's live checks on llama-server: two sweeps of one server find boundaries inside each other's interval, and
``bench compare`` says "no difference beyond noise" for two runs of one server and detects a slowed one.

    .venv/bin/python benchmarks/sweep_runs.py                      # both phases (~11 min on 2 idle cores)
    .venv/bin/python benchmarks/sweep_runs.py --phases sweep --slo-target ttft_p90=800

Phase ``sweep``: llama-server ``--parallel 4`` (started here, the embedded SmolLM2 GGUF); ``bench sweep`` twice with
the same settings in fresh processes; for each: the boundary, its 95% interval, the points run and the known
answers' verdict at the boundary; then whether each boundary lies inside the other's interval.

Phase ``compare``: ``bench serve --repeats 3`` twice against llama-server ``--parallel 4`` and once against
``--parallel 1`` (the slowed server: one slot, so requests queue at concurrency 4); ``bench compare`` of the two
``--parallel 4`` runs, and of ``--parallel 4`` against ``--parallel 1``; each comparison's findings per figure.

Everything a run printed (its ``--json`` document) and the findings go to
``benchmarks/results/sweep_runs-<date>.json``. Run by hand or ``make bench-sweep``, never by ``make test``; the
figures depend on the machine and on what else it runs (say so when you quote them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402

OUT = ROOT / "benchmarks" / "results"


def cli(*args: str) -> tuple[int, dict[str, Any], float]:
    """One ``inferencekit ... --json --quiet`` in a fresh process: (exit code, its JSON document, wall seconds)."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "inferencekit", *args, "--json", "--quiet"], capture_output=True,
                          text=True, check=False)
    wall = time.monotonic() - t0
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{args[:2]} exited {done.returncode} without JSON: {done.stderr[-2000:]}") from None
    return done.returncode, doc, wall


def inside(x: float | None, ci: list[float | None]) -> bool | None:
    """x within [lo, hi] (an open side is unbounded); None when x is None."""
    if x is None:
        return None
    lo, hi = ci
    return (lo is None or x >= lo) and (hi is None or x <= hi)


def sweep_phase(work: Path, slo: str, num_prompts: int, max_tokens: int, data: list[str]) -> dict[str, Any]:
    eng = start_engine("llama-server", work / "ls4-log", parallel=4)
    runs = []
    try:
        for i in (1, 2):
            code, doc, wall = cli("bench", "sweep", "--base-url", eng.url, "--slo-target", slo, "--num-prompts",
                                  str(num_prompts), "--max-tokens", str(max_tokens), "--kat", "4", *data,
                                  "--run-dir", str(work / f"sweep{i}"))
            b = doc.get("boundary") or {}
            runs.append({"exit": code, "wall_s": round(wall, 1), "verdict": doc.get("verdict"),
                         "boundary": b.get("value"), "ci95": b.get("ci95"), "found": b.get("found"),
                         "held": b.get("held"), "reason": b.get("reason"),
                         "correctness_at_boundary": (doc.get("correctness_at_boundary") or {}).get("verdict"),
                         "points": [(p["value"], p["meets"], p["certain"], p["correctness"]) for p in
                                    doc.get("points") or []], "run_dir": str(work / f"sweep{i}")})
            print(f"sweep {i}: boundary {b.get('value')} req/s, 95% interval {b.get('ci95')}, {len(runs[-1]['points'])}"
                  f" points, {wall:.0f} s; known answers at the boundary: {runs[-1]['correctness_at_boundary']}",
                  flush=True)
    finally:
        stop_engine(eng)
    a, b = runs
    return {"slo_target": slo, "num_prompts": num_prompts, "max_tokens": max_tokens, "dataset": data, "runs": runs,
            "first_inside_second": inside(a["boundary"], b["ci95"] or [None, None]),
            "second_inside_first": inside(b["boundary"], a["ci95"] or [None, None])}


def compare_phase(work: Path, num_prompts: int, max_tokens: int, repeats: int, data: list[str]) -> dict[str, Any]:
    serve = ["--concurrency", "4", "--num-prompts", str(num_prompts), "--max-tokens", str(max_tokens),
             "--repeats", str(repeats), "--seed", "7", *data]
    dirs: dict[str, Path] = {}
    for name, parallel, n in (("p4", 4, 2), ("p1", 1, 1)):
        eng = start_engine("llama-server", work / f"{name}-log", parallel=parallel)
        try:
            for i in range(1, n + 1):
                d = work / f"{name}-run{i}"
                code, _, wall = cli("bench", "serve", "--base-url", eng.url, *serve, "--run-dir", str(d))
                print(f"bench serve {name} run {i}: exit {code}, {wall:.0f} s", flush=True)
                dirs[f"{name}-run{i}"] = d
        finally:
            stop_engine(eng)
    out: dict[str, Any] = {"serve_args": serve}
    for label, (a, b) in {"same server (p4 vs p4)": ("p4-run1", "p4-run2"),
                          "slowed server (p4 vs p1)": ("p4-run1", "p1-run1")}.items():
        code, doc, _ = cli("bench", "compare", str(dirs[a]), str(dirs[b]))
        out[label] = {"exit": code, "document": doc}
        print(f"bench compare {label}: exit {code}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="sweep,compare")
    ap.add_argument("--slo-target", default="ttft_p90=1000")
    ap.add_argument("--num-prompts", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--input-len", type=int, default=64,
                    help="--dataset random prompts of this many tokens (0: the packaged dev set, whose long prompts "
                         "saturate llama-server on 2 cores below 0.5 requests/s)")
    args = ap.parse_args()
    data = ["--dataset", "random", "--input-len", str(args.input_len)] if args.input_len else []
    phases = args.phases.split(",")
    result: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    with tempfile.TemporaryDirectory(prefix="ik-sweep-runs-") as tmp:
        work = Path(tmp)
        if "sweep" in phases:
            result["sweep"] = sweep_phase(work, args.slo_target, args.num_prompts, args.max_tokens, data)
        if "compare" in phases:
            result["compare"] = compare_phase(work, 16, args.max_tokens, args.repeats, data)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"sweep_runs-{dt.date.today():%Y%m%d}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
