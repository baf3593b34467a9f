#!/usr/bin/env python3
"""Do the sequential rules keep the error rates they state? The caching gate's family (issue 24 item 2).

    .venv/bin/python benchmarks/sequential_calibration.py [--runs 8] [--resamples 10000] [--engine ENGINE] [--busy]
    .venv/bin/python benchmarks/sequential_calibration.py --replay-from results/sequential_calibration-….json
    make bench-sequential

Against llama-server ``--parallel 4`` with its prompt cache on (started here), for the honest engine and each cheat
the caching gate must catch (output-cache, near-duplicate-cache, prefix-cache-only, through the cheat proxy):

1. ``--runs`` live ``gates run --gates caching --fixed`` runs (every pair of the plan sent, and since 8 Dec 2026 as
   many control pairs: two first-seen requests sent back to back) and as many sequential
   ones (the default), each a fresh process with a fresh probe seed; their verdicts, requests sent and wall time;
2. every fixed run's trials kept (the caching probes' timing fields and texts, ``slim``) in the results file;
3. the replay: ``--resamples`` trial sequences per cell, each drawn from one fixed run chosen at random (its timing
   pairs and echo pairs drawn with replacement, in random order, so a run's own noise stays together), fed pair by
   pair to the sequential rules (``gates/judges/caching.py`` ``sequential_states``; a family stops at its boundary,
   as in the live collector, which may also complete one pair already opened), then the gate's rule on what was
   sent, and to the fixed rule (``gate_caching`` on the whole draw). The false-FAIL rate
   (honest) and the miss rate (a cheat not FAILed) of each mode, with Wilson 95% intervals, against the α and β
   the rule states.
4. the same in recorded order: each fixed run's pairs as they went out (no resampling), through both rules. The
   resampled replay shuffles a run's pairs and so hides a drift during the chain (a repeat always goes out after
   its first: an engine speeding up shows as hits on the first pairs); this one keeps it, over as many sequences
   as there are fixed runs.

``--engine llama-cpp-python`` runs the cells against the embedded engine instead (one request at a time); ``--busy``
runs a spinning process per core beside the live runs (a busy host). Control pairs are resampled beside the timing
pairs, and replayed alternating with them; results recorded before control pairs replay under the A/A rule.
``--replay-from FILE`` sends nothing: it replays the fixed trials kept in an earlier results file through today's
rules (steps 3 and 4) and writes ``…-replay.json`` beside the live figures it read.

Writes ``benchmarks/results/sequential_calibration-<date>.json`` and prints one table: both modes' verdicts,
requests and wall time per cell, live and replayed. Run by hand, never by ``make test``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.cheats.proxy import running_proxy  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.gates.judges.caching import (  # noqa: E402
    CACHE_KINDS,
    CONTROL_KINDS,
    SEQ_ALPHA,
    SEQ_BETA,
    echo_rule,
    gate_caching,
    sequential_states,
    timing_rule,
)
from inferencekit.gates.probes.collect import read_probe_log  # noqa: E402
from inferencekit.stats import wilson_interval  # noqa: E402

CELLS = {"honest": [], "output-cache": ["output-cache"], "near-duplicate-cache": ["near-duplicate-cache"],
         "prefix-cache-only": ["prefix-cache-only"]}
CACHE_PROMPTS, ECHO_PAIRS = 6, 4  # gates run's defaults: the fixed plan, and the sequential cap
FLAGS = ["--gates", "caching", "--max-tokens", "16", "--echo-tokens", "40", "--cache-prompts", str(CACHE_PROMPTS),
         "--timeout", "120"]
REPLY_FIELDS = ("status", "error", "ttft_ms", "e2el_ms", "usage", "n_streamed", "chunks", "text", "reasoning")


def slim(rec: dict[str, Any]) -> dict[str, Any]:
    """A caching probe record with only what the caching gate reads: kind, key, meta, the bypass fields of its
    body and its reply's timing, counts and text (no events)."""
    reply = rec.get("reply") or {}
    body = rec.get("body") or {}
    return {"id": rec.get("id"), "kind": rec.get("kind"), "key": rec.get("key"), "meta": rec.get("meta") or {},
            "body": {k: body[k] for k in ("cache_prompt", "cache_salt") if k in body},
            "reply": {k: reply[k] for k in REPLY_FIELDS if k in reply} if reply else None}


def live_run(url: str, run_dir: Path, fixed: bool) -> dict[str, Any]:
    """One ``gates run`` process: verdict, reason, caching requests sent, wall seconds and (fixed) the slim trials."""
    cmd = [sys.executable, "-m", "inferencekit", "gates", "run", "--base-url", url, *FLAGS,
           *(["--fixed"] if fixed else []), "--run-dir", str(run_dir), "--json", "--quiet"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = round(time.monotonic() - t0, 1)
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stderr or p.stdout)[-500:], "wall_s": wall, "exit_code": p.returncode}
    log = next((run_dir / "probes").glob("*.jsonl"))
    header, records, _ = read_probe_log(log)
    caching = [slim(dict(r)) for r in records if r.get("kind") in CACHE_KINDS]
    gate = out["gates"]["caching"]
    row: dict[str, Any] = {"verdict": gate["verdict"], "reason": gate["reason"], "exit_code": p.returncode,
                           "wall_s": wall, "requests": len(caching),
                           "sequential": header.get("sequential", {}).get("caching")}
    if fixed:
        row["trials"] = caching
    return row


def _pairs(trials: list[dict[str, Any]], first: str, second: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by = {(r["kind"], r["key"]): r for r in trials}
    return [(by[(first, k)], by[(second, k)]) for kind, k in by if kind == first and (second, k) in by]


def _relabel(draw: list[tuple[dict[str, Any], dict[str, Any]]], prefix: str) -> list[list[dict[str, Any]]]:
    """Pairs drawn with replacement get fresh keys, so a pair drawn twice stays two pairs."""
    return [[{**a, "key": f"{prefix}{i}"}, {**b, "key": f"{prefix}{i}"}] for i, (a, b) in enumerate(draw)]


def sequential_take(timing: list[list[dict[str, Any]]], echoes: list[list[dict[str, Any]]], timing_cap: int,
                    echo_cap: int, controls: list[list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The records the live collector would have sent: pairs complete one by one, the families in turn, and a
    family stops once its rule decides (``sequential_states``). ``controls`` (control pairs, of the timing family)
    alternate with the timing pairs, as the random interleaving sends them on average."""
    taken: list[dict[str, Any]] = []
    units = [u for pair in zip(timing, controls) for u in pair] if controls else list(timing)
    if controls:
        units += timing[len(controls):] + controls[len(timing):]
    queues = {"timing": units, "echo": list(echoes)}
    while active := [fam for fam, q in queues.items() if q]:
        for fam in active:
            taken += queues[fam].pop(0)
            if sequential_states(taken, 0.10, timing_cap, echo_cap, controls_planned=bool(controls)
                                 )[fam].decision in ("PASS", "FAIL"):
                queues[fam] = []  # decided: its other pairs are not sent
    return taken


def replay(runs: list[dict[str, Any]], resamples: int, seed: int) -> dict[str, Any]:
    """The two modes on ``resamples`` trial sequences drawn from the fixed runs (module docstring, step 3)."""
    rng = random.Random(seed)
    pools = [(_pairs(r["trials"], "cache_first", "cache_repeat"), _pairs(r["trials"], "echo_orig", "echo_perturbed"),
              _pairs(r["trials"], "cache_control_a", "cache_control_b")) for r in runs if r.get("trials")]
    pools = [p for p in pools if p[0]]
    seq_v: Counter[str] = Counter()
    fix_v: Counter[str] = Counter()
    sent: list[int] = []
    for _ in range(resamples):
        timing, echoes, ctl = rng.choice(pools)
        t = _relabel([rng.choice(timing) for _ in range(CACHE_PROMPTS)], "c")
        e = _relabel([rng.choice(echoes) for _ in range(ECHO_PAIRS)], "e") if echoes else []
        k = _relabel([rng.choice(ctl) for _ in range(CACHE_PROMPTS)], "k") if ctl else []
        fix_v[str(gate_caching([x for pair in t + k + e for x in pair]).verdict)] += 1
        taken = sequential_take(t, e, CACHE_PROMPTS, ECHO_PAIRS, k or None)
        seq_v[str(gate_caching(taken, sequential={"stopped": {}}).verdict)] += 1
        sent.append(len(taken))
    return {"resamples": resamples, "runs_pooled": len(pools), "fixed": dict(fix_v), "sequential": dict(seq_v),
            "sequential_requests_mean": sum(sent) / len(sent), "fixed_requests": 2 * (CACHE_PROMPTS + ECHO_PAIRS)}


def replay_in_order(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each fixed run's recorded pairs in the order they went out, through both rules (module docstring, step 4).
    The live collector sends the timing pairs staggered (``f0 f1 t0 f2 t1 …``), so pair i completes in key order."""
    seq_v: Counter[str] = Counter()
    fix_v: Counter[str] = Counter()
    sent: list[int] = []
    for r in runs:
        timing = _pairs(r.get("trials") or [], "cache_first", "cache_repeat")
        echoes = _pairs(r.get("trials") or [], "echo_orig", "echo_perturbed")
        ctl = _pairs(r.get("trials") or [], "cache_control_a", "cache_control_b")
        if not timing:
            continue
        fix_v[str(gate_caching([x for pair in timing + ctl + echoes for x in pair]).verdict)] += 1
        taken = sequential_take([list(p) for p in timing], [list(p) for p in echoes], len(timing), max(1, len(echoes)),
                                [list(p) for p in ctl] or None)
        seq_v[str(gate_caching(taken, sequential={"stopped": {}}).verdict)] += 1
        sent.append(len(taken))
    return {"sequences": len(sent), "fixed": dict(fix_v), "sequential": dict(seq_v),
            "sequential_requests_mean": sum(sent) / len(sent) if sent else None}


def rate(counter: dict[str, int], what: str) -> dict[str, Any]:
    n = sum(counter.values())
    k = counter.get("FAIL", 0) if what == "FAIL" else n - counter.get("FAIL", 0)
    lo, hi = wilson_interval(k, n) if n else (0.0, 1.0)
    return {"k": k, "n": n, "rate": k / n if n else None, "wilson95": [lo, hi]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8, help="live runs per cell and mode")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--engine", default="llama-server", choices=["llama-server", "llama-cpp-python"])
    ap.add_argument("--replay-from", type=Path, help="replay an earlier results file's fixed trials; send nothing")
    ap.add_argument("--busy", action="store_true", help="a spinning process per core (nice 0) beside the live runs")
    args = ap.parse_args()
    if args.replay_from:
        return replay_file(args.replay_from, args.resamples)
    cells = args.cells.split(",")
    t_all = time.monotonic()
    result: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "engine": ("llama-server --parallel 4 (llama.cpp), prompt cache on (its default); every "
                                         "caching probe carries cache_prompt: false" if args.engine == "llama-server"
                                         else "llama-cpp-python (the embedded engine: one request at a time)"),
                              "rules": {"timing": timing_rule(CACHE_PROMPTS).describe(),
                                        "echo": echo_rule(ECHO_PAIRS).describe()},
                              "alpha": SEQ_ALPHA, "beta": SEQ_BETA, "runs_per_mode": args.runs, "cells": {}}
    result["host"] = "busy: one spinning process per core beside the runs" if args.busy else "idle"
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
                for _ in range(os.cpu_count() or 1)] if args.busy else []
    with tempfile.TemporaryDirectory(prefix="ik-seq-cal-") as tmp:
        work = Path(tmp)
        eng = start_engine(args.engine, work / "engine", parallel=4)
        try:
            for cell in cells:
                live: dict[str, list[dict[str, Any]]] = {"fixed": [], "sequential": []}
                with running_proxy(eng.url, CELLS[cell] or ["none"]) as url:
                    for i in range(args.runs):  # interleaved: the host's drift touches both modes alike
                        for mode in ("fixed", "sequential"):
                            row = live_run(url, work / f"{cell}-{mode}-{i}", mode == "fixed")
                            live[mode].append(row)
                            print(f"{cell} {mode} {i}: {row.get('verdict')} {row.get('requests')} requests "
                                  f"{row.get('wall_s')} s", flush=True)
                result["cells"][cell] = judge_cell(cell, live, args.resamples)
        finally:
            stop_engine(eng)
            for sp in spinners:
                sp.kill()
                sp.wait()
    result["wall_s"] = round(time.monotonic() - t_all)
    return write(result, "-busy" if args.busy else "")


def judge_cell(cell: str, live: dict[str, list[dict[str, Any]]], resamples: int) -> dict[str, Any]:
    """One cell's replays (steps 3 and 4), error rates and live summaries."""
    rep = replay(live["fixed"], resamples, seed=zlib.crc32(cell.encode()))
    ordered = replay_in_order(live["fixed"])
    want = "not FAIL" if cell == "honest" else "FAIL"
    what = "FAIL" if cell == "honest" else "miss"
    error_rate = {m: rate(rep[m], what) for m in ("fixed", "sequential")}
    # the same trials without their control pairs: the A/A rule (before 8 Dec 2026) on identical data, side by side
    stripped = [{**r, "trials": [x for x in r.get("trials") or [] if x.get("kind") not in CONTROL_KINDS]}
                for r in live["fixed"]]
    with_controls = any(x.get("kind") in CONTROL_KINDS for r in live["fixed"] for x in r.get("trials") or [])
    aa = replay(stripped, resamples, seed=zlib.crc32(cell.encode())) if with_controls else None
    bound = SEQ_ALPHA if cell == "honest" else SEQ_BETA
    return {"expected": want, "live": live, "replay": rep, "replay_in_order": ordered, "error_rate": error_rate,
            "error_rate_in_order": {m: rate(ordered[m], what) for m in ("fixed", "sequential")}, "stated": bound,
            "within_stated": (error_rate["sequential"]["rate"] or 0.0) <= bound,
            "live_verdicts": {m: dict(Counter(r.get("verdict") for r in live[m])) for m in live},
            "live_requests_mean": {m: sum(r.get("requests") or 0 for r in live[m]) / max(1, len(live[m]))
                                   for m in live},
            "live_wall_s_mean": {m: sum(r.get("wall_s") or 0 for r in live[m]) / max(1, len(live[m])) for m in live},
            "aa_rule_same_trials": None if aa is None else {"replay": aa, "error_rate": {
                m: rate(aa[m], what) for m in ("fixed", "sequential")}}}


def replay_file(path: Path, resamples: int) -> int:
    """Steps 3 and 4 on the fixed trials kept in ``path`` under today's rules; the live figures are copied."""
    old = json.loads(path.read_text())
    result = {**{k: v for k, v in old.items() if k not in ("cells", "table_markdown", "wall_s")},
              "replayed_from": path.name, "replayed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "rules": {"timing": timing_rule(CACHE_PROMPTS).describe(), "echo": echo_rule(ECHO_PAIRS).describe()},
              "cells": {}}
    for cell, c in old["cells"].items():
        result["cells"][cell] = judge_cell(cell, c["live"], resamples)
    return write(result, "-replay")


def _share(r: dict[str, Any] | None) -> str:
    return "—" if not r else f"{r['k']}/{r['n']} = {r['rate']:.4f}"


def write(result: dict[str, Any], suffix: str) -> int:
    lines = ["| cell | mode | live verdicts | live requests (mean) | live wall s (mean) | replayed error rate "
             "[Wilson 95%] | in recorded order | A/A rule, same trials | stated |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cell, c in result["cells"].items():
        for m in ("fixed", "sequential"):
            er, eo = c["error_rate"][m], c["error_rate_in_order"][m]
            aa = (c.get("aa_rule_same_trials") or {}).get("error_rate", {}).get(m)
            lines.append(f"| {cell} | {m} | {c['live_verdicts'][m]} | {c['live_requests_mean'][m]:.1f} | "
                         f"{c['live_wall_s_mean'][m]:.1f} | {er['k']}/{er['n']} = {er['rate']:.4f} "
                         f"[{er['wilson95'][0]:.4f}, {er['wilson95'][1]:.4f}] | {eo['k']}/{eo['n']} | "
                         f"{_share(aa)} | "
                         f"{'α' if cell == 'honest' else 'β'} {c['stated']} |")
    result["table_markdown"] = "\n".join(lines)
    print(result["table_markdown"])
    stamp = f"{dt.datetime.now(dt.UTC):%Y%m%d-%H%M}"
    out = ROOT / "benchmarks" / "results" / f"sequential_calibration-{stamp}{suffix}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
