"""Imports every module that declares operations (the registry reads this), and ``inferencekit ops``."""

from __future__ import annotations

from typing import Any

from inferencekit import verify  # noqa: F401
from inferencekit.api import probe  # noqa: F401
from inferencekit.bench import appliance_ops as _appliance_ops  # noqa: F401
from inferencekit.bench import compare_ops as _compare_ops  # noqa: F401
from inferencekit.bench import configure_ops as _configure_ops  # noqa: F401
from inferencekit.bench import export_ops as _export_ops  # noqa: F401
from inferencekit.bench import ops as _bench_ops  # noqa: F401
from inferencekit.cheats import ops as _cheat_ops  # noqa: F401
from inferencekit.engines import ops as _engine_ops  # noqa: F401
from inferencekit.evidence import ops as _evidence_ops  # noqa: F401
from inferencekit.gates import ops as _gates_ops  # noqa: F401
from inferencekit.gates import order_ops as _gates_order_ops  # noqa: F401
from inferencekit.gates import run_ops as _gates_run_ops  # noqa: F401
from inferencekit.quality import gsm8k_ops as _quality_gsm8k_ops  # noqa: F401
from inferencekit.quality import niah_ops as _quality_niah_ops  # noqa: F401
from inferencekit.quality import score_ops as _quality_score_ops  # noqa: F401
from inferencekit.quality import sampling_ops as _quality_sampling_ops  # noqa: F401
from inferencekit.quality import trajectory_ops as _quality_traj_ops  # noqa: F401
from inferencekit.registry import Call, Outcome, operation, schema
from inferencekit.report import ops as _report_ops  # noqa: F401


@operation(("ops",), "List every operation (with --json: the JSON schema of each, for agents).",
           description="Prints each command with its one-line summary; with --json, one JSON document holding every "
                       "operation's parameters as JSON schema, its example and the exit codes.",
           example="inferencekit ops --json")
def list_ops(call: Call) -> Outcome:
    doc = schema()

    def render(console: Any) -> None:
        for op in doc["operations"]:
            console.print(f"[bold]{op['command']}[/]  {op['summary']}")

    return Outcome(doc, None, render)
