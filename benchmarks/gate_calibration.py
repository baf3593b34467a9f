#!/usr/bin/env python3
"""Do the gates bite? Each cheat of the cheat proxy, in front of a real engine, against its target gate.

    .venv/bin/python benchmarks/gate_calibration.py [--runs 10] [--full-runs 2] [--upstream URL]
    make bench-gates

For every cheat (``inferencekit cheat-proxy``) and for the honest engine (the same proxy with no
cheat), this runs ``inferencekit gates run`` through the proxy: the cheat's target gate ``--runs``
times, and the whole suite ``--full-runs`` times. The engine straight, without the proxy, is the
reference (``--reference-url`` for rare_tokens, ``--spec-off-url`` for spec_exact). Every run is a
fresh ``inferencekit`` process with its own run dir and a fresh probe seed.

The engine is llama.cpp's llama-server (started here unless ``--upstream`` is given): it reports
usage in streams, honours ignore_eos and streams token ids, so every cheat has something to bend.
Its prompt cache is bypassed per request (``cache_prompt: false``) on every probe. Since issue 23 the caching
gate's own probes carry that bypass whatever ``--extra-body`` says (the dialect's per-request bypass), so an honest
llama-server with its cache on no longer FAILs caching (tests/integration/test_gates_run.py). Every run sends the
fixed plan (``--fixed``): the counts here are the plan's, and the sequential rules are calibrated apart
(``benchmarks/sequential_calibration.py``).

Writes ``benchmarks/results/gate_calibration-<date>.json`` (every run's verdicts and reasons, N,
date, engine) and prints a table gate × cheat of FAIL / UNPROVEN / PASS / NOT RUN counts with a
Wilson 95% interval for the FAIL rate, and which expected cells held (the issue's expectations are
in ``EXPECT`` below).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.cheats.proxy import running_proxy  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.stats import wilson_interval  # noqa: E402

GATES = ("caching", "token_count", "output_length", "hidden_probes", "rare_tokens", "spec_exact")
# cheat → its target gate (None: the order gate of a later issue; full-suite runs only)
TARGET = {
    "honest": None, "output-cache": "caching", "near-duplicate-cache": "caching", "prefix-cache-only": "caching",
    "usage-inflate": "token_count", "usage-deflate": "token_count", "ignore-eos-dropped": "output_length",
    "temperature-ignored": "hidden_probes", "seed-ignored": "hidden_probes", "logprobs-unnormalised": "hidden_probes",
    "vocab-mask": "rare_tokens", "spec-inexact": "spec_exact", "order-dependent": None,
}
# Expected cells: "FAIL" must fail (≥ 9 of 10 targeted runs), "may" may fail, anything else must not fail.
EXPECT = {("output-cache", "caching"): "FAIL", ("near-duplicate-cache", "caching"): "FAIL",
          ("prefix-cache-only", "caching"): "FAIL", ("usage-inflate", "token_count"): "FAIL",
          ("usage-deflate", "token_count"): "FAIL", ("ignore-eos-dropped", "output_length"): "FAIL",
          ("temperature-ignored", "hidden_probes"): "FAIL", ("logprobs-unnormalised", "hidden_probes"): "FAIL",
          ("vocab-mask", "rare_tokens"): "FAIL", ("spec-inexact", "spec_exact"): "FAIL",
          ("usage-inflate", "output_length"): "may", ("usage-deflate", "output_length"): "may",
          ("ignore-eos-dropped", "token_count"): "may",
          # these two change greedy tokens, which rare_tokens (a copy against the reference engine) and
          # spec_exact (greedy against the reference engine) compare: they break those gates' evidence too
          ("spec-inexact", "rare_tokens"): "may", ("order-dependent", "rare_tokens"): "may",
          ("order-dependent", "spec_exact"): "may"}
# What a FAIL's reason must name for the cheat's symptom (lower case substrings, any of them).
SYMPTOM = {"output-cache": ("output cach",), "near-duplicate-cache": ("near-duplicate", "output cach"),
           "prefix-cache-only": ("prefix",), "usage-inflate": ("usage",), "usage-deflate": ("usage",),
           "ignore-eos-dropped": ("max_tokens", "stream"), "temperature-ignored": ("temperature",),
           "logprobs-unnormalised": ("normalis", "> 0", "<= 0", "≤ 0"), "vocab-mask": ("hangul",),
           "spec-inexact": ("diverge",)}
NO_CACHE = json.dumps({"cache_prompt": False})
# Per engine: what makes its prompt cache miss on every request (llama-server's cache_prompt per request;
# llama-cpp-python keeps no cache between different prompts; vLLM is started without prefix caching, since its
# per-request bypass, a fresh cache_salt, cannot be written into one --extra-body), the engine's extra start
# flags, and how it is described in the results file. With prefix caching on, the caching gate FAILs an honest
# vLLM as a prefix cache, which is what it is there to say.
ENGINES = {"llama-server": (["--extra-body", NO_CACHE], (), "llama-server (llama.cpp), cache_prompt false per "
                            "request"),
           "llama-cpp-python": ([], (), "llama-cpp-python (the embedded engine), one request at a time"),
           "vllm": ([], ("--no-enable-prefix-caching",), "vLLM on CPU (float32 conversion of the GGUF), started with "
                    "--no-enable-prefix-caching")}
# Short probes keep a run under a minute; --timeout bounds one request, so a stuck request is recorded as a
# failed probe (UNPROVEN) instead of stalling the calibration.
PROBE_FLAGS = ["--max-tokens", "16", "--echo-tokens", "40", "--spec-limit", "6", "--spec-max-tokens", "40",
               "--timeout", "120", "--fixed"]
# The full-suite runs look for a cheat tripping gates it does not target: fewer probes per gate.
FULL_FLAGS = ["--sampling-prompts", "4", "--cache-prompts", "4"]


def gates_run(url: str, direct: str, gates: list[str], run_dir: Path, timeout_s: float,
              engine: str = "llama-server") -> dict[str, Any]:
    """One ``inferencekit gates run`` process; its JSON (verdict per gate) or the error."""
    cmd = [sys.executable, "-m", "inferencekit", "gates", "run", "--base-url", url, "--gates", ",".join(gates),
           "--reference-url", direct, *PROBE_FLAGS, *ENGINES[engine][0], *(FULL_FLAGS if len(gates) > 1 else []),
           "--run-dir", str(run_dir), "--json", "--quiet"]
    if "spec_exact" in gates:
        cmd += ["--spec-off-url", direct]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    except subprocess.TimeoutExpired:
        return {"error": f"gates run did not finish in {timeout_s:g} s (run dir kept: {run_dir})", "exit_code": None,
                "wall_s": round(time.monotonic() - t0, 1)}
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:
        out = {"error": (p.stderr or p.stdout)[-500:]}
    out["exit_code"] = p.returncode
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def calibrate(direct: str, runs: int, full_runs: int, cheats: list[str], work: Path, timeout_s: float,
              log: Any, engine: str = "llama-server") -> list[dict[str, Any]]:
    rows = []
    for cheat in cheats:
        target = TARGET[cheat]
        plans = ([[target]] * runs if target else []) + [list(GATES)] * full_runs
        if cheat == "honest":  # the honest engine the same way: every gate's targeted runs
            plans = [[g] for g in GATES for _ in range(runs)] + [list(GATES)] * full_runs
        with running_proxy(direct, [] if cheat == "honest" else [cheat]) as url:
            for i, gates in enumerate(plans):
                res = gates_run(url, direct, gates, work / f"{cheat}-{i}", timeout_s, engine)
                row = {"cheat": cheat, "mode": "full" if len(gates) > 1 else "target", "gates_asked": gates,
                       "verdicts": {g: v["verdict"] for g, v in (res.get("gates") or {}).items() if g in gates},
                       "reasons": {g: v["reason"] for g, v in (res.get("gates") or {}).items() if g in gates},
                       "exit_code": res["exit_code"], "wall_s": res["wall_s"], "error": res.get("error")}
                rows.append(row)
                print(f"{cheat:22s} {row['mode']:6s} {row['wall_s']:6.1f}s "
                      + " ".join(f"{g}={v}" for g, v in row["verdicts"].items()) + (f" ERROR {row['error']}"
                                                                                       if row["error"] else ""),
                      file=log, flush=True)
    return rows


def rejudge(work: Path) -> list[dict[str, Any]]:
    """Rows rebuilt from kept run dirs (``<cheat>-<i>/``) by ``gates check``'s code, as it is now: a calibration
    whose judging code changed mid-way is re-read with one version (the replies are the evidence)."""
    from inferencekit.gates.check import check_run_dir, engines_in
    from inferencekit.gates.probes.collect import read_probe_log
    from inferencekit.rundir import RunDir

    rows = []
    for run_dir in sorted((p for p in work.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] in TARGET),
                          key=lambda p: (list(TARGET).index(p.name.rsplit("-", 1)[0]), int(p.name.rsplit("-", 1)[1]))):
        logs = RunDir(run_dir).gate_run_logs()
        if not logs:
            continue
        asked = list((read_probe_log(logs[0])[0].get("settings") or {}).get("gates") or ())
        engines = engines_in(run_dir)
        gates = check_run_dir(run_dir, engines[0]).gates if engines else []
        rows.append({"cheat": run_dir.name.rsplit("-", 1)[0], "mode": "full" if len(asked) > 1 else "target",
                     "gates_asked": asked, "verdicts": {g.gate: g.verdict for g in gates if g.gate in asked},
                     "reasons": {g.gate: g.reason for g in gates if g.gate in asked}, "exit_code": None,
                     "wall_s": None, "error": None if gates else "no engine output"})
    return rows


def table(rows: list[dict[str, Any]], cheats: list[str]) -> tuple[str, list[str]]:
    """Markdown table gate × cheat: ``F/U/P/N`` counts over every run that asked the gate, and the FAIL rate's
    Wilson 95% interval; and the list of broken expectations."""
    lines = ["| cheat | " + " | ".join(GATES) + " |", "|---|" + "---|" * len(GATES)]
    broken = []
    for cheat in cheats:
        cells = []
        for g in GATES:
            vs = [r["verdicts"].get(g) for r in rows if r["cheat"] == cheat and g in r["gates_asked"]]
            vs = [v or "ERROR" for v in vs]
            if not vs:
                cells.append("—")
                continue
            c = Counter(vs)
            lo, hi = wilson_interval(c["FAIL"], len(vs))
            cells.append(f"F{c['FAIL']} U{c['UNPROVEN']} P{c['PASS']}" + (f" N{c['NOT RUN']}" if c["NOT RUN"] else "")
                         + (f" E{c['ERROR']}" if c["ERROR"] else "") + f" ({lo:.2f}–{hi:.2f})")
            want = EXPECT.get((cheat, g))
            target_runs = [r for r in rows if r["cheat"] == cheat and r["mode"] == "target" and g in r["gates_asked"]]
            if want == "FAIL":
                fails = [r for r in target_runs if r["verdicts"].get(g) == "FAIL"]
                if len(fails) < 0.9 * len(target_runs):
                    broken.append(f"{cheat} → {g}: FAIL in {len(fails)}/{len(target_runs)} targeted runs (need ≥ 90%)")
                named = SYMPTOM.get(cheat, ())
                unnamed = [r for r in fails if not any(s in r["reasons"][g].lower() for s in named)]
                if unnamed:
                    broken.append(f"{cheat} → {g}: {len(unnamed)} FAIL reason(s) do not name the symptom {named}")
                if cheat == "prefix-cache-only":
                    wrong = [r for r in fails if "output cach" in r["reasons"][g].lower()]
                    if wrong:
                        broken.append(f"prefix-cache-only → caching: {len(wrong)} FAIL(s) give the output-cache reason")
            elif want is None and c["FAIL"]:
                broken.append(f"{cheat} → {g}: {c['FAIL']}/{len(vs)} FAIL where none is allowed")
        lines.append(f"| {cheat} | " + " | ".join(cells) + " |")
    return "\n".join(lines), broken


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="targeted runs per cheat (default 10)")
    ap.add_argument("--full-runs", type=int, default=2, help="full-suite runs per cheat (default 2)")
    ap.add_argument("--cheats", default=",".join(TARGET), help="comma list (default: all, and honest)")
    ap.add_argument("--engine", default="llama-server", choices=tuple(ENGINES),
                    help="the honest engine behind the proxy (default llama-server; started here)")
    ap.add_argument("--upstream", help="a running server of --engine (default: start one)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per gates run")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--rejudge", metavar="DIR", help="re-judge the kept run dirs of an earlier calibration (the folder "
                    "it named) with the current code, and write the table; nothing is sent")
    a = ap.parse_args()
    cheats = [c for c in a.cheats.split(",") if c]
    unknown = [c for c in cheats if c not in TARGET]
    if unknown:
        print(f"unknown cheat(s): {', '.join(unknown)} (known: {', '.join(TARGET)})", file=sys.stderr)
        return 2
    started = None
    t0 = time.time()
    if a.rejudge:
        work = Path(a.rejudge)
        rows = rejudge(work)
        cheats = [c for c in TARGET if any(r["cheat"] == c for r in rows)]
    else:
        work = Path(tempfile.mkdtemp(prefix="ik-gate-cal-"))  # kept: every run dir, for a second look
        print(f"run dirs under {work}", file=sys.stderr)
        if a.upstream:
            direct = a.upstream
        else:
            started = start_engine(a.engine, work / "engine", tie_to_parent=True, extra=ENGINES[a.engine][1])
            direct = started.url
        try:
            rows = calibrate(direct, a.runs, a.full_runs, cheats, work, a.timeout, sys.stderr, a.engine)
        finally:
            if started is not None:
                stop_engine(started)
    md, broken = table(rows, cheats)
    date = dt.datetime.now(dt.UTC)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "" if a.engine == "llama-server" else f"-{a.engine}"
    path = out / f"gate_calibration{tag}-{date:%Y%m%d-%H%M}{'-rejudged' if a.rejudge else ''}.json"
    path.write_text(json.dumps({"date": date.isoformat(timespec="seconds"),
                                "engine": f"{ENGINES[a.engine][2]}, SmolLM2-135M-Instruct",
                                "runs_per_target": a.runs, "full_runs": a.full_runs, "wall_s": round(time.time() - t0),
                                "rejudged_from": a.rejudge,
                                "probe_flags": PROBE_FLAGS, "full_suite_flags": FULL_FLAGS, "run_dirs": str(work),
                                "expected": {f"{k[0]}→{k[1]}": v for k, v in EXPECT.items()},
                                "table_markdown": md, "broken_expectations": broken, "runs": rows}, indent=1))
    print(md)
    print("\nexpectations: " + ("all held" if not broken else "BROKEN:\n- " + "\n- ".join(broken)))
    print(f"written: {path}")
    return 0 if not broken else 1


if __name__ == "__main__":
    raise SystemExit(main())
