"""The ``gates`` evidence record: every gate's verdict, the files it judged, the combined verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.gates.result import Gate, overall
from inferencekit.rundir import RunDir

__all__ = ["gates_record"]


def gates_record(run: RunDir, gates: Sequence[Gate], *, engine: str, files: Sequence[str], mode: str,
                 settings: dict[str, Any], notes: Sequence[str] = ()) -> dict[str, Any]:
    """The ``gates`` evidence record: every gate's verdict and reason, the files judged as artifacts, the
    combined verdict (an applicable gate that did not run counts as UNPROVEN). ``notes``: what the reading of
    the run dir found (a torn probe-log line, fields ``--extra-body`` could not set), kept as limitations.
    Saved to the store and the run dir."""
    verdict = overall(gates)
    run_json = run.read_run()
    arts = [artifact(run.path / f, run.path, "reply") for f in files]
    rec = build_record(
        kind="gates", claim_class="derived",
        summary=f"gates ({mode}) on {engine}: {verdict} — " + ", ".join(f"{g.gate} {g.verdict}" for g in gates),
        identity={"engine": run_json.get("engine") or {"engine": engine}, "model": {"id": (run_json.get("pins") or {})
                                                                                     .get("model")},
                  "workload": {"mode": mode, "engine_label": engine}},
        metrics=[{"name": f"{g.gate}.{k}", "value": v, "unit": "count", "stat": "value", "n": 1}
                 for g in gates for k, v in g.metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)],
        artifacts=arts, verdict=verdict,
        missing=[f"{g.gate}: {g.reason}" for g in gates if g.verdict == "NOT RUN" and g.applicable],
        limitations=[*notes, *(f"{g.gate}: {x}" for g in gates for x in g.limitations)],
        data={"run_dir": str(run.path.resolve()), "mode": mode, "settings": settings,
              "gates": [g.to_json() for g in gates]})
    save_record(rec, run)
    return rec
