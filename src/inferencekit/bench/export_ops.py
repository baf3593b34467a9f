"""``inferencekit bench export``: a finished bench serve run dir in another tool's result format."""

from __future__ import annotations

from typing import Any

from inferencekit.bench.export_vllm import FORMATS, export_run
from inferencekit.registry import Arg, Call, Outcome, operation

__all__ = ["bench_export"]


@operation(("bench", "export"), "Write a finished bench serve run in vLLM's result format (one file per level).",
           description="Reads a bench serve run directory (its bench record, reply files and re-tokenized counts; "
                       "nothing is sent) and writes each load level as vLLM's `vllm bench serve --save-result "
                       "--save-detailed` JSON: per-request lists (ttfts, itls, latencies, start_times on "
                       "perf_counter's clock, output_lens, errors, ...) and mean/median/std/p50/p90/p99 of TTFT, "
                       "TPOT, ITL and E2EL computed the way vLLM computes them. Default files: "
                       "<run-dir>/export/vllm-<level>.json. A directory that holds no finished bench serve run is "
                       "refused (exit 2). Field mapping and the fields written as null: docs/export.md.",
           example="inferencekit bench export runs/20261130-061502-3fa1 --level c4 --output results/vllm.json",
           args=[Arg("run_dir", "string", "The bench serve run directory.", required=True, positional=True,
                     metavar="RUN_DIR"),
                 Arg("format", "string", "Output format: vllm-json = vLLM's --save-result --save-detailed JSON.",
                     default="vllm-json", choices=FORMATS),
                 Arg("level", "string", "Only this level (its label, e.g. c4 or r2; default: every level)."),
                 Arg("output", "string", "The file to write for a single level, or a template with {level} for "
                     "several (default: <run-dir>/export/vllm-<level>.json).")])
def bench_export(call: Call, *, run_dir: str, format: str = "vllm-json", level: str | None = None,
                 output: str | None = None) -> Outcome:
    paths = export_run(run_dir, format, level=level, path=output, flag="--output")
    payload: dict[str, Any] = {"run_dir": run_dir, "format": format, "exports": [str(p) for p in paths]}

    def render(console: Any) -> None:
        for p in paths:
            console.print(f"wrote {p}", markup=False)

    return Outcome(payload, None, render)
