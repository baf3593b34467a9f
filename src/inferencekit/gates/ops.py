"""``inferencekit gates check``: re-judge a recorded run dir offline and write a ``gates`` record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.gates.check import check_run_dir, engines_in
from inferencekit.gates.probe_collect import probe_logs
from inferencekit.gates.result import Gate, overall
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import verdict_style
from inferencekit.rundir import RunDir

__all__ = ["gates_check", "gates_record", "render_gates"]


def gates_record(run: RunDir, gates: list[Gate], *, engine: str, files: list[str], mode: str,
                 settings: dict[str, Any]) -> dict[str, Any]:
    """The ``gates`` evidence record: every gate's verdict and reason, the files judged as artifacts, the
    combined verdict (an applicable gate that did not run counts as UNPROVEN). Saved to the store and the
    run dir."""
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
                 for g in gates for k, v in g.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)],
        artifacts=arts, verdict=verdict,
        missing=[f"{g.gate}: {g.reason}" for g in gates if g.verdict == "NOT RUN" and g.applicable],
        limitations=[f"{g.gate}: {x}" for g in gates for x in g.limitations],
        data={"run_dir": str(run.path.resolve()), "mode": mode, "settings": settings,
              "gates": [g.to_json() for g in gates]})
    save_record(rec, run)
    return rec


def render_gates(console: Any, rec: dict[str, Any]) -> None:
    """A table of the gates: verdict, reason; then limitations, the record id and how to check it."""
    from rich.table import Table

    t = Table("gate", "verdict", "reason", title=f"gates — {rec['summary'].split(':')[0]}", title_justify="left")
    for g in rec["data"]["gates"]:
        shown = g["verdict"] + ("" if g["applicable"] or g["verdict"] != "NOT RUN" else " (not asked)")
        t.add_row(g["gate"], f"[{verdict_style(g['verdict'])}]{shown}[/]", g["reason"])
    console.print(t)
    for line in rec["limitations"]:
        console.print(f"limitation: {line}", markup=False, highlight=False)
    console.print(f"verdict: {rec['verdict']}   record: {rec['evidence_id']}  (check: inferencekit evidence verify "
                  f"{rec['evidence_id']})", markup=False, highlight=False)


@operation(("gates", "check"), "Re-judge a recorded run dir offline with the gates that need no server.",
           description="Reads a run directory and judges, with the code the live gates use: token_count (usage vs "
                       "streamed token ids or logprob entries vs re-tokenized text), output_length (exact-length "
                       "requests came back exactly max_tokens long; lengths against a reference engine's outputs when "
                       "given) and unique_prompts (no prompt repeats inside a load level) on the load replies; every "
                       "gate run's probes (probes/<gate-run>.jsonl, written by `gates run`: caching, hidden_probes, "
                       "rare_tokens, spec_exact, …) with the settings recorded there; and the hidden probes a load "
                       "mixed in (bench serve --probes). A live gate without probe replies is NOT RUN. Writes a "
                       "'gates' evidence record into the run dir. Exit 0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit gates check runs/<run-id>",
           args=[Arg("run_dir", "string", "The run directory to judge.", required=True, positional=True,
                     metavar="RUN_DIR"),
                 Arg("engine", "string", "Which outputs/<engine>/ to judge (default: the only one)."),
                 Arg("reference_outputs", "string", "Another engine's outputs folder (outputs/<engine> of the same "
                     "layout) for output_length's per-prompt comparison."),
                 Arg("length_tolerance", "number", "output_length: per-prompt length tolerance against the reference.",
                     default=0.10),
                 Arg("max_length_outliers", "number", "output_length: share of prompts allowed outside the tolerance "
                     "(missing outputs count).", default=0.10),
                 Arg("gate_run", "array", "Judge only these gate runs (probes/<name>.jsonl; default: all of them).")])
def gates_check(call: Call, run_dir: str, engine: str | None = None, reference_outputs: str | None = None,
                length_tolerance: float = 0.10, max_length_outliers: float = 0.10,
                gate_run: list[str] | None = None) -> Outcome:
    run = RunDir.open(run_dir)
    labels = engines_in(run.path)
    if engine is None:
        if len(labels) != 1:
            raise OpError(f"{run_dir} holds outputs of {len(labels)} engines ({', '.join(labels) or 'none'}); "
                          "pass --engine")
        engine = labels[0]
    elif engine not in labels:
        raise OpError(f"{run_dir} has no outputs/{engine}/ (it has: {', '.join(labels) or 'none'})")
    ref = Path(reference_outputs) if reference_outputs else None
    if ref is not None and not ref.is_dir():
        raise OpError(f"--reference-outputs {reference_outputs}: not a directory")
    if not 0 <= length_tolerance < 1 or not 0 <= max_length_outliers <= 1:
        raise OpError("--length-tolerance must be in [0, 1) and --max-length-outliers in [0, 1]")
    known = {p.stem for p in probe_logs(run.path)}
    unknown = sorted(set(gate_run or ()) - known)
    if unknown:
        raise OpError(f"--gate-run {', '.join(unknown)}: no probes/<name>.jsonl of that name in {run_dir} (it has: "
                      f"{', '.join(sorted(known)) or 'none'})")
    gates, files = check_run_dir(run.path, engine, reference=ref, length_tolerance=length_tolerance,
                                 max_length_outliers=max_length_outliers, gate_runs=gate_run or None)
    settings = {"engine": engine, "reference_outputs": reference_outputs, "length_tolerance": length_tolerance,
                "max_length_outliers": max_length_outliers, "gate_runs": gate_run}
    rec = gates_record(run, gates, engine=engine, files=files, mode="check", settings=settings)
    return Outcome({"evidence_id": rec["evidence_id"], "verdict": rec["verdict"],
                    "gates": {g.gate: {"verdict": g.verdict, "reason": g.reason} for g in gates}},
                   rec["verdict"], lambda console: render_gates(console, rec))
