"""The recorded bench run the report's tests read, and a copy of it carrying a hand-written sweep block.

``tests/fixtures/bench_run/`` is a real ``bench serve`` run dir on the embedded engine (llama-cpp-python, SmolLM2-135M
Q4_1), recorded once with ``--concurrency 1,2 --request-rate 2 --num-prompts 6 --max-tokens 16 --warmup 1 --slo
ttft=500,tpot=50 --seed 7`` (the engine log left out). ``tests/fixtures/bench_sweep_block.json`` is a ``data.sweep``
block written by hand (its ``_note`` says so); ``sweep_copy`` puts it into a copy of the record and re-ids the record
(``compute_id``), so the copy's integrity check passes and the page shows the sweep as a sweep run would.

The embedded engine serves no ``/metrics``, so the recorded run has no server telemetry. ``tests/fixtures/
bench_telemetry/llama-server/<level>.server_metrics.jsonl.gz`` are two real telemetry files, from a ``bench serve
--base-url <llama-server --parallel 2 --metrics> --concurrency 1,2 --num-prompts 6 --max-tokens 16
--metrics-interval 0.5`` run (levels c1, c2; 71 and 97 scrapes). ``with_telemetry`` transplants them into the
copy's levels c1 and c2, every ``t_ns``/``t_unix_ns`` shifted by one constant per level so that each scrape keeps its
offset from its level's first send (``TELEMETRY_FIRST_SEND_NS``, that run's first sends); the files are then listed
in the record as artifacts (re-identified), as bench serve lists them.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencekit.evidence import artifact
from inferencekit.evidence.record import compute_id
from tests.paths import FIXTURES

BENCH_RUN = FIXTURES / "bench_run"
# a real `bench sweep` run dir on the embedded engine: --concurrency 1,2,4 --num-prompts 4 --max-tokens 8 --warmup 1
# --seed 7 --slo-target ttft_p50=2500 --kat 0 --no-count-tokens (the engine log left out); boundary 1 stream
SWEEP_RUN = FIXTURES / "bench_sweep_run"
SWEEP_BLOCK = FIXTURES / "bench_sweep_block.json"
TELEMETRY = FIXTURES / "bench_telemetry" / "llama-server"
TELEMETRY_FILE = "server_metrics.jsonl.gz"
# the first send of each level of the llama-server run the telemetry files come from (its reply files' sent_ns)
TELEMETRY_FIRST_SEND_NS = {"c1": 42249612802149, "c2": 42284652625959}


def record_path(run_dir: Path) -> Path:
    rec_id = json.loads((run_dir / "run.json").read_text())["bench_record"]
    return run_dir / "evidence" / f"{rec_id}.json"


def copy_run(dest: Path) -> Path:
    shutil.copytree(BENCH_RUN, dest)
    return dest


def _first_send_ns(level_dir: Path) -> int:
    return min(json.loads(p.read_text())["sent_ns"] for p in level_dir.glob("*/*.json"))


def _transplant(run_dir: Path, level: str) -> Path:
    """Write the recorded telemetry of ``level`` into the copy's level, time-shifted (module docstring)."""
    level_dir = run_dir / "outputs" / "llama-cpp-python" / f"load-{level}"
    shift = _first_send_ns(level_dir) - TELEMETRY_FIRST_SEND_NS[level]
    raw = gzip.decompress((TELEMETRY / f"{level}.{TELEMETRY_FILE}").read_bytes())
    lines = [json.loads(x) for x in raw.splitlines()]
    for x in lines:
        if x.get("kind") == "scrape":
            x["t_ns"] += shift
            x["t_unix_ns"] += shift
    out = level_dir / TELEMETRY_FILE
    out.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode(), mtime=0))
    return out


def rewrite_record(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply ``change`` to the run's bench record, re-identify it (``compute_id``) and point run.json at it."""
    old = record_path(run_dir)
    rec = json.loads(old.read_text())
    change(rec)
    rec["evidence_id"] = compute_id(rec)
    old.unlink()
    (run_dir / "evidence" / f"{rec['evidence_id']}.json").write_text(json.dumps(rec))
    run = json.loads((run_dir / "run.json").read_text())
    run["bench_record"] = rec["evidence_id"]
    (run_dir / "run.json").write_text(json.dumps(run))
    return rec


def sweep_copy(dest: Path, *, telemetry: bool = False) -> Path:
    """A copy of the recorded run whose record's ``data.sweep`` is the hand-written block (and, with ``telemetry``,
    levels c1 and c2 carry the transplanted server telemetry), re-identified."""
    run_dir = copy_run(dest)

    def change(rec: dict[str, Any]) -> None:
        rec["data"]["sweep"] = json.loads(SWEEP_BLOCK.read_text())
        if telemetry:
            for level in ("c1", "c2"):
                rec["artifacts"].append(artifact(_transplant(run_dir, level), run_dir, "server telemetry"))

    rewrite_record(run_dir, change)
    return run_dir
