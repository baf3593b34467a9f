"""The API contract's repeat runs (issue 21): every cheat must FAIL its item in each of N runs, and the honest
engines must FAIL no item in N runs each.

    .venv/bin/python benchmarks/contract_runs.py --runs 10 --engines llama-server,llama-cpp-python
    .venv/bin/python benchmarks/contract_runs.py --runs 10 --cheats all --engines none

Each run is ``inferencekit probe --contract --json`` in a fresh process (the command a user types): honest runs
judge every item on the engine started here (llama-server and llama-cpp-python serving the embedded SmolLM2
GGUF; vLLM on CPU with ``make vllm``); cheat runs send only the cheat's item (``--items``) through
``cheat-proxy`` in front of llama-server, with json-broken-under-load at the issue's 5% share and 96 structured
requests under load. Every run's verdict per item is appended as it finishes to
``benchmarks/results/contract_runs/<name>.jsonl`` (resumable); ``--table`` prints and writes the counts
(``benchmarks/results/contract_runs-<date>.json``). Run by hand or ``make bench-contract``, never by ``make test``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.cheats.proxy import running_proxy  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.engines.model import embedded_gguf  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "contract_runs"
#: cheat → the item group it should FAIL (docs/cheat-proxy.md), and its proxy settings
CHEATS: dict[str, tuple[str, dict[str, Any]]] = {
    "top-p-dropped": ("top_p", {}),
    "logit-bias-dropped": ("logit_bias", {}),
    "penalty-dropped": ("penalties", {}),
    "stop-ignored": ("stop", {}),
    "prompt-tokens-inflated": ("accounting", {}),
    "silent-truncate": ("context", {"truncate_chars": 2000}),
    "json-broken-under-load": ("json", {"corrupt_share": 0.05}),
}
ENGINES = ("llama-server", "llama-cpp-python", "vllm")


def contract_run(url: str, run_dir: Path, args: list[str]) -> dict[str, Any]:
    """One ``probe --contract --json`` in a fresh process: its JSON document (exit codes 0, 1 and 3 are verdicts)."""
    cmd = [sys.executable, "-m", "inferencekit", "probe", "--base-url", url, "--contract", "--json", "--quiet",
           "--run-dir", str(run_dir), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"probe --contract exited {done.returncode}: {done.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def record(name: str, i: int, doc: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    row = {"run": i, "name": name, "verdict": doc["verdict"], "evidence_id": doc["evidence_id"],
           "items": {it["item"]: it["verdict"] for it in doc["items"]},
           "reasons": {it["item"]: it["reason"] for it in doc["items"] if it["verdict"] in ("FAIL", "UNPROVEN")}}
    with open(OUT / f"{name}.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    bad = [k for k, v in row["items"].items() if v == "FAIL"]
    print(f"{name} run {i}: {doc['verdict']} (FAIL: {', '.join(bad) or 'none'})", file=sys.stderr)


def done_runs(name: str) -> set[int]:
    path = OUT / f"{name}.jsonl"
    if not path.exists():
        return set()
    return {json.loads(line)["run"] for line in path.read_text().splitlines() if line.strip()}


def honest(engine: str, runs: int, json_load: int, work: Path) -> None:
    todo = [i for i in range(runs) if i not in done_runs(engine)]
    if not todo:
        return
    eng = start_engine(engine, work / engine, tie_to_parent=True)
    try:
        extra = ["--json-load", str(json_load)]
        if engine == "llama-cpp-python":  # no route renders and counts a chat prompt: count with the model's GGUF
            extra += ["--tokenizer", str(embedded_gguf())]
        for i in todo:
            record(engine, i, contract_run(eng.url, work / f"{engine}-{i}", extra))
    finally:
        stop_engine(eng)


def cheats(names: list[str], runs: int, json_load: int, work: Path) -> None:
    todo = {n: [i for i in range(runs) if i not in done_runs(n)] for n in names}
    if not any(todo.values()):
        return
    eng = start_engine("llama-server", work / "llama-server-cheats", tie_to_parent=True)
    try:
        for name, idx in todo.items():
            if not idx:
                continue
            group, kw = CHEATS[name]
            with running_proxy(eng.url, [name], **kw) as url:
                for i in idx:
                    record(name, i, contract_run(url, work / f"{name}-{i}",
                                                 ["--items", group, "--json-load", str(json_load)]))
    finally:
        stop_engine(eng)


def table() -> dict[str, Any]:
    """Per engine and cheat: runs, verdicts per item (counts), and the runs whose item did not FAIL (cheats) or
    that FAILed an item (honest engines)."""
    out: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "rows": {}}
    for path in sorted(OUT.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        items: dict[str, Counter[str]] = {}
        for r in rows:
            for k, v in r["items"].items():
                items.setdefault(k, Counter())[str(v)] += 1
        name = path.stem
        entry: dict[str, Any] = {"runs": len(rows), "items": {k: dict(c) for k, c in items.items()}}
        if name in CHEATS:
            entry["cheat_missed_runs"] = [r["run"] for r in rows if r["verdict"] != "FAIL"]
        else:
            entry["runs_with_a_fail"] = [r["run"] for r in rows if "FAIL" in r["items"].values()]
        out["rows"][name] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--engines", default="llama-server,llama-cpp-python", help=f"honest engines ({', '.join(ENGINES)}"
                    ") or 'none'")
    ap.add_argument("--cheats", default="all", help="cheats (comma list), 'all' or 'none'")
    ap.add_argument("--json-load", type=int, default=96)
    ap.add_argument("--table", action="store_true", help="only print and write the table of what is recorded")
    a = ap.parse_args()
    if not a.table:
        work = Path(tempfile.mkdtemp(prefix="ik-contract-"))
        names = list(CHEATS) if a.cheats == "all" else [] if a.cheats == "none" else a.cheats.split(",")
        unknown = [n for n in names if n not in CHEATS] + [e for e in a.engines.split(",")
                                                          if e not in (*ENGINES, "none")]
        if unknown:
            raise SystemExit(f"unknown: {unknown}")
        cheats(names, a.runs, a.json_load, work)
        for engine in a.engines.split(","):
            if engine != "none":
                honest(engine, a.runs, a.json_load, work)
    doc = table()
    path = ROOT / "benchmarks" / "results" / f"contract_runs-{dt.datetime.now(dt.UTC):%Y%m%d}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for name, e in doc["rows"].items():
        said = (f"item did not FAIL in runs {e['cheat_missed_runs']}" if "cheat_missed_runs" in e
                else f"runs with a FAIL: {e['runs_with_a_fail']}")
        print(f"{name}: {e['runs']} runs; {said}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
