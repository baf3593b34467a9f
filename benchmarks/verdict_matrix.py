#!/usr/bin/env python3
"""The verdict matrix: does ``verify`` give honest engines PASS and cheats FAIL, and how often is it wrong? (issue 42)

    .venv/bin/python benchmarks/verdict_matrix.py --rows llama-server-p4:quick:20,embedded:quick:10 [--busy]
    .venv/bin/python benchmarks/verdict_matrix.py --cheats output-cache,usage-inflate --runs 3
    .venv/bin/python benchmarks/verdict_matrix.py --table          # the table from the results file alone
    .venv/bin/python benchmarks/verdict_matrix.py --since COMMIT …  # only rows made under the rules since COMMIT
    .venv/bin/python benchmarks/verdict_matrix.py --rejudge --work DIR  # kept run dirs re-judged with today's code
    make bench-verdicts BENCH_VERDICTS_ARGS="…"

Each run is one fresh ``inferencekit verify --profile P --json`` process (seed = run number), appended as one line
to ``benchmarks/results/verdict_matrix.jsonl`` as soon as it ends: the file is the matrix, rows are added run by
run, and a later call runs only what a row still lacks (resumable; a cut run leaves its finished lines). Each line:
target, profile, busy, seed, exit code, wall seconds, the verdict, every part's verdict and reason, the properties
reported, the date, the machine and the commit (``git describe --dirty``) the run was made with.

Targets:

- ``embedded``: ``verify`` with no URL (llama-cpp-python serving SmolLM2-135M-Instruct Q4_1, started by verify);
- ``llama-server-p1``, ``llama-server-p4``: llama.cpp's llama-server ``--parallel 1`` / ``4`` (prompt cache on),
  started here once per row, ``--quality-reference embedded --claim Q4_1`` (it serves the same GGUF);
- ``vllm``: vLLM on CPU (``make vllm``) serving SmolLM2 in float32;
- ``cheat:NAME``: ``cheat-proxy --cheat NAME`` (default parameters) in front of llama-server ``--parallel 4``;
- ``cheat:quantised-under-load``: ``cheat-proxy --mix-upstream Q40 --mix-share 1 --mix-under-load``, the
  claimed Q4_1 llama-server ``--parallel 4`` answering alone and the zoo's Q4_0 (``make zoo ZOO=q4_0``) on a second
  llama-server answering every request sent while another is in flight.

``--busy`` runs a busy loop per core (nice 0) beside every run of the row: a host whose other work stretches the
engine's timings. The table (``--table``, and printed after every call) gives per target and profile the verdict
counts and, for honest targets, the false-FAIL rate with its Wilson 95% upper bound on the independent runs, per
part too; for cheats, the share of runs FAILed and the parts that FAILed. The rates hold for these engines, this
machine and these known cheats only. Run by hand, never by ``make test``.
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
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.engines.recipes import cache_root  # noqa: E402
from inferencekit.stats import wilson_interval  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
RESULTS = ROOT / "benchmarks" / "results" / "verdict_matrix.jsonl"
# the verify part each cheat is meant to be caught by (docs/cheat-proxy.md), or why verify cannot catch it
CAUGHT_BY = {
    "output-cache": "gates: caching", "near-duplicate-cache": "gates: caching", "prefix-cache-only": "gates: caching",
    "usage-inflate": "gates: token_count", "usage-deflate": "gates: token_count",
    "prompt-tokens-inflated": "gates: contract", "ignore-eos-dropped": "gates: output_length",
    "temperature-ignored": "gates: hidden_probes", "top-p-dropped": "gates: contract",
    "logit-bias-dropped": "gates: contract", "penalty-dropped": "gates: contract", "stop-ignored": "gates: contract",
    "silent-truncate": "gates: contract", "logprobs-unnormalised": "gates: hidden_probes",
    "order-dependent": "gates: order", "json-broken-under-load": "gates: contract",
    "quantised-under-load": "quality: equivalence audit, standard (its prompts go out 4 at a time, inside the load; "
                            "quick's order rule misses it: results/order_noise-20261207.json)",
    "vocab-mask": "gates: rare_tokens (UNPROVEN without a reference engine: verify has none)",
    "spec-inexact": "none: needs a second engine (gates spec-exact)",
    "seed-ignored": "none: a documented limitation (honest engines are nondeterministic under batching too)",
}


@contextmanager
def busy_loop(on: bool) -> Iterator[None]:
    """One spinning process per core, nice 0, while the block runs (nothing when ``on`` is False)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(os.cpu_count() or 1)] if on else []
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextmanager
def target_url(target: str, work: Path) -> Iterator[str | None]:
    """The URL verify is pointed at for ``target`` (None: the embedded engine, which verify starts itself)."""
    if target == "embedded":
        yield None
        return
    engine, parallel = {"llama-server-p1": ("llama-server", 1), "vllm": ("vllm", 4)}.get(target, ("llama-server", 4))
    eng = start_engine(engine, work / "engine", parallel=parallel, tie_to_parent=True)
    second = None
    try:
        if target == "cheat:quantised-under-load":  # the zoo's Q4_0 answers every request sent inside a load
            from inferencekit.cheats.proxy import running_proxy

            second = start_engine("llama-server", work / "engine-q4_0", parallel=4, tie_to_parent=True,
                                  gguf=cache_root() / "zoo" / "smollm2-135m-q4_0.gguf")
            with running_proxy(eng.url, [], mix_upstream=second.url, mix_share=1.0, mix_under_load=True) as url:
                yield url
        elif target.startswith("cheat:"):
            from inferencekit.cheats.proxy import running_proxy

            with running_proxy(eng.url, [target.removeprefix("cheat:")]) as url:
                yield url
        else:
            yield eng.url
    finally:
        stop_engine(eng)
        if second is not None:
            stop_engine(second)


def one_run(target: str, profile: str, seed: int, url: str | None, run_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "inferencekit", "verify", "--profile", profile, "--seed", str(seed),
           "--run-dir", str(run_dir), "--json", "--quiet"]
    if url:
        cmd += ["--base-url", url, "--quality-reference", "embedded", "--claim", "Q4_1"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV, stdin=subprocess.DEVNULL)
    row: dict[str, Any] = {"exit_code": p.returncode, "wall_s": round(time.monotonic() - t0, 1)}
    try:
        out = json.loads(p.stdout)
        rec = json.loads((run_dir / "evidence" / f"{out['evidence_id']}.json").read_text())
    except (json.JSONDecodeError, KeyError, OSError):
        row["error"] = (p.stderr or p.stdout)[-800:]
        return row
    row.update({"verdict": rec["verdict"], "evidence_id": rec["evidence_id"],
                "parts": [{"part": x["part"], "verdict": x["verdict"], "reason": str(x.get("reason") or "")[:400]}
                          for x in rec["data"]["parts"] if x["verdict"] is not None],
                "properties": [{"part": q.get("part"), "property": q.get("property")}
                               for q in rec["data"].get("properties") or ()]})
    return row


def run_dir_of(work: Path, target: str, profile: str, busy: bool, seed: int) -> Path:
    """Where a row's verify run dir was kept under ``--work`` before rows named theirs (``run_dir``)."""
    return work / f"{target.replace(':', '-')}-{profile}-{'busy' if busy else 'idle'}-{seed}"


def new_run_dir(work: Path, target: str, profile: str, busy: bool, seed: int, commit: str | None) -> Path:
    """A fresh run dir for a row under ``--work``: the old name plus the commit, and a count when a run of the same
    commit was kept there already (an interrupted or failed attempt: verify refuses a run dir holding a run)."""
    base = f"{run_dir_of(work, target, profile, busy, seed).name}-{commit or 'nocommit'}"
    n, path = 1, work / base
    while path.exists():
        n += 1
        path = work / f"{base}.{n}"
    return path


def rejudge(row: dict[str, Any], work: Path) -> dict[str, Any] | None:
    """The row re-judged with today's code from its kept run dir: every gate part judged again from the run dir
    (``gates check``'s code on the gate runs verify recorded) and held to the error budget, as verify does; the other
    parts (load, quality) as recorded. None when the run dir is not under ``work``."""
    from inferencekit.gates.budget import apply_budget
    from inferencekit.gates.check import check_run_dir
    from inferencekit.stats import combine_claims

    run_dir = (work / row["run_dir"] if row.get("run_dir")
               else run_dir_of(work, row["target"], row["profile"], bool(row.get("busy")), row["seed"]))
    try:
        rec = json.loads((run_dir / "evidence" / f"{row['evidence_id']}.json").read_text())
        gid = next(p["evidence_id"] for p in rec["data"]["parts"] if p["part"].startswith("gates: ")
                   and p.get("evidence_id"))
        settings = json.loads((run_dir / "evidence" / f"{gid}.json").read_text())["data"]["settings"]
    except (OSError, KeyError, StopIteration, json.JSONDecodeError):
        return None
    checked = check_run_dir(run_dir, settings["engine"], gate_runs=settings.get("gate_runs"))
    gates, budget = apply_budget(checked.gates)
    now = {f"gates: {g.gate}": g for g in gates}
    parts = [{"part": p["part"], "verdict": str(now[p["part"]].verdict) if p["part"] in now else p["verdict"],
              "reason": (now[p["part"]].reason if p["part"] in now else str(p.get("reason") or ""))[:400]}
             for p in rec["data"]["parts"] if p["verdict"] is not None]
    verdict = str(combine_claims("UNPROVEN" if p["verdict"] == "NOT RUN" else p["verdict"] for p in parts))
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False).stdout.strip() or None
    return {**row, "verdict": verdict, "parts": parts, "recorded_verdict": row["verdict"], "rejudged_commit": commit,
            "budget": budget.to_json()["line"],
            "properties": [{"part": f"gates: {g.gate}", "property": q.get("property")} for g in gates
                           for q in g.properties]}


def read_rows(path: Path, since: str | None = None) -> list[dict[str, Any]]:
    """The rows of the results file; with ``since`` (a commit) only those made at that commit or a later one (rules
    change between commits: older rows are kept in the file, never counted again), and never a ``-dirty`` one."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows if since is None else [r for r in rows if _descends(str(r.get("commit") or ""), since)]


def _descends(commit: str, since: str) -> bool:
    if not commit or commit.endswith("-dirty"):
        return False
    head = commit.rsplit("-g", 1)[-1]  # git describe's tag-N-gHASH, else the bare hash
    return subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", since, head],
                          capture_output=True, check=False).returncode == 0


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per target × profile × busy, then the parts that decided against honest targets."""
    groups: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["target"], r["profile"], bool(r.get("busy"))), []).append(r)
    out = ["| target | profile | host | runs | PASS | UNPROVEN | FAIL | errors | false FAIL (Wilson 95% upper) / "
           "cheat caught | parts that FAILed | properties |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (target, profile, busy), rs in sorted(groups.items()):
        done = [r for r in rs if "verdict" in r]
        v = Counter(r["verdict"] for r in done)
        fails = Counter(p["part"] for r in done for p in r["parts"] if p["verdict"] == "FAIL")
        props = Counter(q["property"] for r in done for q in r.get("properties") or ())
        if target.startswith("cheat:"):
            rate = f"caught {v['FAIL']}/{len(done)} (meant: {CAUGHT_BY.get(target[6:], '?')})"
        elif done:
            rate = f"{v['FAIL']}/{len(done)} (≤ {wilson_interval(v['FAIL'], len(done))[1]:.2f})"
        else:
            rate = "—"
        out.append(f"| {target} | {profile} | {'busy' if busy else 'idle'} | {len(rs)} | {v['PASS']} | "
                   f"{v['UNPROVEN']} | {v['FAIL']} | {len(rs) - len(done)} | {rate} | "
                   f"{', '.join(f'{k} ×{n}' for k, n in fails.most_common()) or '—'} | "
                   f"{', '.join(f'{k} ×{n}' for k, n in props.most_common()) or '—'} |")
    honest = [r for r in rows if not r["target"].startswith("cheat:") and "verdict" in r]
    parts = sorted({p["part"] for r in honest for p in r["parts"]})
    if parts:
        out += ["", "Honest targets, per part (runs: PASS / UNPROVEN / FAIL, false FAIL's Wilson 95% upper bound):", "",
                "| part | PASS | UNPROVEN | FAIL | NOT RUN | false FAIL ≤ |", "|---|---|---|---|---|---|"]
        for name in parts:
            c = Counter(p["verdict"] for r in honest for p in r["parts"] if p["part"] == name)
            n = sum(c.values())
            out.append(f"| {name} | {c['PASS']} | {c['UNPROVEN']} | {c['FAIL']} | {c['NOT RUN']} | "
                       f"{wilson_interval(c['FAIL'], n)[1]:.2f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="", help="TARGET:PROFILE:RUNS, comma-separated (e.g. llama-server-p4:quick:20)")
    ap.add_argument("--cheats", default="", help="cheat names: each a row cheat:NAME:quick:--runs")
    ap.add_argument("--runs", type=int, default=3, help="runs per cheat row")
    ap.add_argument("--busy", action="store_true", help="a busy loop per core beside every run of these rows")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--work", default=None, help="folder for the run dirs, kept (default: a new temporary folder)")
    ap.add_argument("--table", action="store_true", help="print the table of the results file and stop")
    ap.add_argument("--since", default=None, help="count only rows made at this commit or a later one (resume and "
                    "table): the rules in force since then")
    ap.add_argument("--rejudge", action="store_true", help="re-judge every row whose run dir is kept under --work "
                    "with today's code (gate parts and the error budget; load and quality parts as recorded) into "
                    "results/verdict_matrix-rejudged.jsonl, and print their table; runs nothing")
    a = ap.parse_args()
    path = Path(a.results)
    if a.table:
        print(table(read_rows(path, a.since)))
        return 0
    if a.rejudge:
        if not a.work:
            ap.error("--rejudge needs --work (the folder the run dirs were kept in)")
        again = [r2 for r in read_rows(path, a.since) if "verdict" in r
                 for r2 in [rejudge(r, Path(a.work))] if r2 is not None]
        out = path.with_name(path.stem + "-rejudged.jsonl")
        out.write_text("".join(json.dumps(r) + "\n" for r in again))
        changed = sum(r["verdict"] != r["recorded_verdict"] for r in again)
        print(f"re-judged {len(again)} row(s) from {a.work} ({changed} changed verdict) into {out}")
        print(table(again))
        return 0
    wanted = [tuple(x.rsplit(":", 2)) for x in a.rows.split(",") if x]
    wanted += [(f"cheat:{c}", "quick", str(a.runs)) for c in a.cheats.split(",") if c]
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="ik-verdicts-"))
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "python": platform.python_version()}
    for target, profile, runs in wanted:
        have = [r for r in read_rows(path, a.since) if r["target"] == target and r["profile"] == profile
                and bool(r.get("busy")) == a.busy and "verdict" in r]
        seeds = [s for s in range(int(runs)) if s not in {r["seed"] for r in have}]
        if not seeds:
            continue
        with target_url(target, work / target.replace(":", "-")) as url:
            for seed in seeds:
                commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                        capture_output=True, text=True, check=False).stdout.strip() or None
                run_dir = new_run_dir(work, target, profile, a.busy, seed, commit)
                with busy_loop(a.busy):
                    row = one_run(target, profile, seed, url, run_dir)
                row = {"target": target, "profile": profile, "busy": a.busy, "seed": seed,
                       "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": machine,
                       "commit": commit, "run_dir": run_dir.name, **row}
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{target} {profile} {'busy' if a.busy else 'idle'} seed {seed}: {row.get('verdict', 'error')} "
                      f"({row['wall_s']} s)", flush=True)
    print(table(read_rows(path, a.since)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
