"""Issue 23's live checks on llama-server ``--parallel 4``: a multi-turn conversation run, a Mooncake-format trace
replay and a shared-prefix run (prompt cache on and off) each complete, and ``gates check`` on each run dir gives no
FAIL.

    .venv/bin/python benchmarks/workload_runs.py                       # every phase (~15 min on 2 idle cores)
    .venv/bin/python benchmarks/workload_runs.py --phases trace --time-scale 4

Phases:

- ``conversations``: ``bench serve --dataset conversations --turns 4 --input-len 64 --num-prompts 16
  --concurrency 4 --max-tokens 32`` (16 sessions × 4 turns);
- ``trace``: the packaged 200-request Mooncake sample made lighter for 2 cores (every length ÷ 8 and each row's
  hash ids cut to its new length at 8 tokens per block, so the sharing structure is the sample's; outputs ÷ 4),
  replayed with ``--trace-block-size 8 --time-scale S --ignore-eos``;
- ``shared``: ``--dataset random --input-len 64 --shared-prefix-tokens 512 --prefix-groups 4 --num-prompts 16
  --concurrency 1``, prompt cache on, then off (``--extra-body '{"cache_prompt": false}'``).

Each run's card figures and its ``gates check`` verdicts go to ``benchmarks/results/workload_runs-<date>.json``. Run
by hand, never by ``make test``; the timings depend on the machine and on what else it runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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
SAMPLE = ROOT / "src" / "inferencekit" / "data" / "traces" / "mooncake_sample.jsonl"


def cli(*args: str) -> tuple[int, dict[str, Any], float]:
    """One ``inferencekit ... --json --quiet`` in a fresh process: (exit code, its JSON document, wall seconds)."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "inferencekit", *args, "--json", "--quiet"], capture_output=True,
                          text=True, check=False)
    try:
        doc: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{args[:2]} exited {done.returncode} without JSON: {done.stderr[-2000:]}") from None
    return done.returncode, doc, time.monotonic() - t0


def light_trace(path: Path, shrink: int = 8, out_shrink: int = 4) -> dict[str, Any]:
    """The packaged Mooncake sample with every input length ÷ ``shrink`` (rounded up) and its hash ids cut to the
    new length at 64/``shrink`` tokens per block (ceil(ceil(n/8)/8) = ceil(n/64): the ids kept are the sample's
    own leading ids, so who shares what is unchanged), outputs ÷ ``out_shrink``."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    block = 64 // shrink
    with path.open("w") as f:
        for r in rows:
            n = math.ceil(r["input_length"] / shrink)
            f.write(json.dumps({"timestamp": r["timestamp"], "input_length": n,
                                "output_length": max(1, math.ceil(r["output_length"] / out_shrink)),
                                "hash_ids": r["hash_ids"][:math.ceil(n / block)]}) + "\n")
    return {"rows": len(rows), "block_size": block, "from": str(SAMPLE.relative_to(ROOT)), "input_shrink": shrink,
            "output_shrink": out_shrink}


def judged(run: Path) -> dict[str, str]:
    code, doc, _ = cli("gates", "check", str(run))
    return {k: v["verdict"] for k, v in (doc.get("gates") or {}).items()} | {"_exit": str(code)}


def serve(url: str, run: Path, *args: str) -> dict[str, Any]:
    code, doc, wall = cli("bench", "serve", "--base-url", url, *args, "--run-dir", str(run))
    record = json.loads((run / "evidence" / f"{doc['evidence_id']}.json").read_text()) if doc.get("evidence_id") \
        else {}
    data = record.get("data") or {}
    levels = {k: {"requests": v["requests"], "ttft_p50_ms": v["ttft_ms"]["p50"], "ttft_p99_ms": v["ttft_ms"]["p99"],
                  "client_valid": (v.get("client") or {}).get("valid")} for k, v in (data.get("levels") or {}).items()}
    return {"args": list(args), "exit": code, "wall_s": round(wall, 1), "verdict": doc.get("verdict"),
            "levels": levels, "limitations": record.get("limitations"),
            **{k: data[k] for k in ("conversations", "shared_prefix") if k in data}, "gates": judged(run)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="conversations,trace,shared")
    ap.add_argument("--time-scale", type=float, default=3.0)
    args = ap.parse_args()
    phases = args.phases.split(",")
    result: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    with tempfile.TemporaryDirectory(prefix="ik-workload-runs-") as tmp:
        work = Path(tmp)
        eng = start_engine("llama-server", work / "log", parallel=4)
        try:
            if "conversations" in phases:
                result["conversations"] = serve(eng.url, work / "conv", "--dataset", "conversations", "--turns", "4",
                                                 "--input-len", "64", "--num-prompts", "16", "--concurrency", "4",
                                                 "--max-tokens", "32")
                print("conversations:", result["conversations"]["exit"], flush=True)
            if "trace" in phases:
                trace = work / "trace.jsonl"
                result["trace_file"] = light_trace(trace)
                result["trace"] = serve(eng.url, work / "trace", "--trace", str(trace), "--trace-block-size",
                                        str(result["trace_file"]["block_size"]), "--time-scale", str(args.time_scale),
                                        "--ignore-eos")
                result["trace"]["prompt_set"] = json.loads((work / "trace" / "run.json").read_text())["prompt_set"]
                print("trace:", result["trace"]["exit"], flush=True)
            if "shared" in phases:
                common = ["--dataset", "random", "--input-len", "64", "--shared-prefix-tokens", "512",
                          "--prefix-groups", "4", "--num-prompts", "16", "--concurrency", "1", "--max-tokens", "8"]
                result["shared_cache_on"] = serve(eng.url, work / "sp-on", *common)
                result["shared_cache_off"] = serve(eng.url, work / "sp-off", *common, "--extra-body",
                                                   '{"cache_prompt": false}')
                print("shared:", result["shared_cache_on"]["exit"], result["shared_cache_off"]["exit"], flush=True)
        finally:
            stop_engine(eng)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"workload_runs-{dt.date.today():%Y%m%d}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
