#!/usr/bin/env python3
"""The known-answer order rule on honest engines: how often does each rule FAIL them? (issue 42, item 2)

    .venv/bin/python benchmarks/order_noise.py [--engines llama-server-p4] [--runs 10]
    make bench-order-noise

For each engine, ``--runs`` fresh ``bench serve`` processes with verify quick's load and known answers
(``--concurrency 1,2,4 --num-prompts 8 --max-tokens 64 --warmup 1 --probes --kat 4 --kat-max-tokens 64``,
``--seed`` = run number), each judged twice from its run dir: by the rule verify uses now (the run's own
logprob noise, ``gates/judges/order_noise.py``) and by seed 004's byte rule (``gates check --strict``). Engines:

- ``llama-server-p4``: llama.cpp's llama-server ``--parallel 4`` (prompt cache on), started once;
- ``llama-server-p1``: the same with ``--parallel 1``;
- ``embedded``: llama-cpp-python serving the embedded GGUF, started once (``engine up`` path);
- ``quantised-under-load`` (a cheat): llama-server ``--parallel 4`` answers alone, and every request that arrives
  while another is in flight goes to a second llama-server serving the zoo's Q4_0 (``cheat-proxy --mix-upstream
  … --mix-share 1 --mix-under-load``).

Writes ``benchmarks/results/order_noise-<date>.json``: per run the two verdicts, the near-tie / confident /
undecided counts, the largest near-tie swing, the pooled noise figures, and each divergence; per engine the
false-FAIL count of each rule with its Wilson 95% upper bound on the independent runs. Run by hand, never by
``make test``. Also writes each run's known answers (alone and loaded) with the verdict they got, for the unit
tests' fixtures, under ``--fixtures DIR`` when given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.engines.recipes import cache_root  # noqa: E402
from inferencekit.gates.check import read_kat  # noqa: E402
from inferencekit.gates.judges.order import judge_kat  # noqa: E402
from inferencekit.gates.result import strict_gate  # noqa: E402
from inferencekit.rundir import KAT_ALONE, KAT_LOAD, RunDir, read_json  # noqa: E402
from inferencekit.stats import wilson_interval  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
LOAD = ["--concurrency", "1,2,4", "--num-prompts", "8", "--max-tokens", "64", "--warmup", "1", "--probes",
        "--kat", "4", "--kat-max-tokens", "64"]
ENGINES = {"llama-server-p4": ("llama-server", 4), "llama-server-p1": ("llama-server", 1),
           "embedded": ("llama-cpp-python", 1), "quantised-under-load": ("llama-server", 4)}


@contextmanager
def target(name: str, work: Path) -> Iterator[str]:
    """The URL of ``name``: its engine, or for ``quantised-under-load`` a cheat proxy that sends every request
    arriving with another in flight to a second llama-server serving the zoo's Q4_0 (``make zoo ZOO=q4_0``)."""
    engine, parallel = ENGINES[name]
    eng = start_engine(engine, work / f"{name}-engine", parallel=parallel, tie_to_parent=True)
    second = None
    try:
        if name != "quantised-under-load":
            yield eng.url
            return
        from inferencekit.cheats.proxy import running_proxy

        second = start_engine("llama-server", work / f"{name}-engine-q4_0", parallel=4, tie_to_parent=True,
                              gguf=cache_root() / "zoo" / "smollm2-135m-q4_0.gguf")
        with running_proxy(eng.url, [], mix_upstream=second.url, mix_share=1.0, mix_under_load=True) as url:
            yield url
    finally:
        stop_engine(eng)
        if second is not None:
            stop_engine(second)


def one_run(url: str, run_dir: Path, seed: int) -> dict[str, Any]:
    """One ``bench serve`` process and both judgements of its known answers."""
    cmd = [sys.executable, "-m", "inferencekit", "bench", "serve", "--base-url", url, "--seed", str(seed),
           "--run-dir", str(run_dir), "--json", "--quiet", *LOAD]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV, stdin=subprocess.DEVNULL)
    row: dict[str, Any] = {"seed": seed, "exit_code": p.returncode, "wall_s": round(time.monotonic() - t0, 1)}
    return judge_dir(run_dir, row, (p.stderr or p.stdout)[-800:])


def judge_dir(run_dir: Path, row: dict[str, Any], error: str = "no outputs") -> dict[str, Any]:
    """``row`` with the known answers of ``run_dir`` judged by both rules (``--rejudge`` calls it on kept run dirs)."""
    engines = [d.name for d in (run_dir / "outputs").iterdir()] if (run_dir / "outputs").is_dir() else []
    if not engines:
        row["error"] = error
        return row
    rows, _, level = read_kat(RunDir(run_dir), engines[0])
    gate = judge_kat(rows, level)
    m = gate.metrics
    row.update({"engine_label": engines[0], "level": level, "verdict": str(gate.verdict),
                "byte_rule_verdict": str(strict_gate(gate).verdict) if gate.properties else (
                    "FAIL" if m.get("differ") else str(gate.verdict)),
                "samples": m.get("samples"), "differ": m.get("differ"), "near_ties": m.get("near_ties"),
                "confident": m.get("confident"), "undecided": m.get("undecided"),
                "unexplained": m.get("unexplained"), "largest_near_tie_margin": m.get("largest_near_tie_margin"),
                **{k: m.get(k) for k in ("noise_samples", "noise_median", "noise_p99", "noise_max")},
                "reason": gate.reason[:600],
                "divergences": [{"sample": d["sample_id"], **x} for d in gate.details if d.get("status") == "DIFFER"
                                for x in d.get("divergences") or ()]})
    return row


def save_fixture(run_dir: Path, row: dict[str, Any], dest: Path) -> None:
    """The run's known answers, alone and loaded, with the verdict and counts they got (a unit-test fixture)."""
    label = row["engine_label"]
    run = RunDir(run_dir)
    alone = {p.name.split(".")[0]: read_json(p) for p in run.extra_files(label, KAT_ALONE, gz=True)}
    load = {p.name.split(".")[0]: read_json(p) for p in run.extra_files(label, KAT_LOAD, gz=True)}
    keep = ("status", "events", "error", "level")
    samples = {k: {"alone": {f: v for f, v in alone[k].items() if f in keep},
                   "load": {f: v for f, v in load[k].items() if f in keep}} for k in sorted(alone) if k in load}
    dest.write_text(json.dumps({"source": f"benchmarks/order_noise.py, {row['engine_label']}, seed {row['seed']}",
                                "expected": {k: row[k] for k in ("verdict", "near_ties", "confident")},
                                "samples": samples}, indent=1) + "\n")


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if "verdict" in r]
    out: dict[str, Any] = {"runs": len(done), "errors": len(rows) - len(done)}
    for rule, key in (("noise", "verdict"), ("byte", "byte_rule_verdict")):
        fails = sum(1 for r in done if r[key] == "FAIL")
        hi = wilson_interval(fails, len(done))[1] if done else None
        out[rule] = {"FAIL": fails, "PASS": sum(1 for r in done if r[key] == "PASS"),
                     "UNPROVEN": sum(1 for r in done if r[key] == "UNPROVEN"),
                     "false_fail_wilson95_upper": round(hi, 3) if hi is not None else None}
    out["runs_with_near_ties"] = sum(1 for r in done if r.get("near_ties"))
    out["near_ties_per_sample"] = (round(sum(r.get("near_ties") or 0 for r in done)
                                         / max(1, sum(r.get("samples") or 0 for r in done)), 4))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="llama-server-p4")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/order_noise-<date>.json)")
    ap.add_argument("--work", default=None, help="folder for the run dirs, kept (default: a new temporary folder)")
    ap.add_argument("--fixtures", default=None, help="write each run's known answers here (unit-test fixtures)")
    ap.add_argument("--rejudge", action="store_true", help="judge the run dirs kept in --work again with today's "
                    "rule and rewrite --out (keeping each run's exit code and wall time); nothing is sent")
    a = ap.parse_args()
    stamp = dt.datetime.now(dt.UTC)
    out = Path(a.out or ROOT / "benchmarks" / "results" / f"order_noise-{stamp:%Y%m%d}.json")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="ik-order-noise-"))
    # the day's file gathers every engine run that day (a later call adds its engines, replacing one run again)
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() and not a.rejudge else {"engines": {}}
    result.update({"date": stamp.isoformat(timespec="seconds"), "machine": {
        "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(), "load": LOAD},
        "rule": "gates/judges/order_noise.py (alpha 0.01) vs seed 004's byte rule"})
    if a.rejudge:
        old = json.loads(out.read_text())
        for name, block in old["engines"].items():
            rows = [judge_dir(work / f"{name}-{r['seed']}", {k: r[k] for k in ("seed", "exit_code", "wall_s")})
                    for r in block["runs"]]
            for r in rows:
                if a.fixtures and "verdict" in r:
                    save_fixture(work / f"{name}-{r['seed']}", r, Path(a.fixtures) / f"{name}-seed{r['seed']}.json")
            old["engines"][name] = {"runs": rows, "summary": summary(rows)}
        old["rejudged"] = stamp.isoformat(timespec="seconds")
        out.write_text(json.dumps(old, indent=1) + "\n")
        print(json.dumps({k: v["summary"] for k, v in old["engines"].items()}, indent=1))
        return 0
    for name in a.engines.split(","):
        rows: list[dict[str, Any]] = []
        with target(name, work) as url:
            for i in range(a.runs):
                run_dir = work / f"{name}-{i}"
                row = one_run(url, run_dir, seed=i)
                rows.append(row)
                print(f"{name} run {i}: {row.get('verdict')} (byte rule {row.get('byte_rule_verdict')}), "
                      f"{row.get('differ')} differ, {row.get('near_ties')} near-tie, {row.get('confident')} "
                      f"confident, noise max {row.get('noise_max')}, {row['wall_s']} s", flush=True)
                if a.fixtures and "verdict" in row:
                    Path(a.fixtures).mkdir(parents=True, exist_ok=True)
                    save_fixture(run_dir, row, Path(a.fixtures) / f"{name}-seed{i}.json")
                result["engines"][name] = {"runs": rows, "summary": summary(rows)}
                out.write_text(json.dumps(result, indent=1) + "\n")  # kept as it grows: a cut run keeps its rows
    print(json.dumps({k: v["summary"] for k, v in result["engines"].items()}, indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
