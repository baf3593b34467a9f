"""The verification card: headline figures, every part's verdict with its record, and the run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.report.card import bench_table, render_bench_notes, verdict_style
from inferencekit.rundir import RunDir

__all__ = ["render_verification"]


def _workload(rec: dict[str, Any]) -> str:
    w = rec["data"].get("workload") or "dev"
    return "" if w == "dev" else f", workload {w}"


def render_verification(console: Any, rec: dict[str, Any], subs: dict[str, dict[str, Any]]) -> None:
    """Print the card for a ``verification`` record and its probe and bench sub-records."""
    from rich.panel import Panel
    from rich.table import Table

    eng = rec["identity"]["engine"]
    console.print(Panel.fit(f"[{verdict_style(rec['verdict'])}]{rec['verdict']}[/]  inferencekit verify "
                            f"({rec['data']['profile']}{_workload(rec)}) — {eng.get('engine')} "
                            f"{eng.get('version') or ''}, model {rec['identity']['model']['id']}", title="verdict"))
    console.print(bench_table(subs["bench"]))
    caps = subs["probe"]["data"]["capabilities"]
    console.print("capabilities (judged by effect): " + ", ".join(f"{k} {v['status']}" for k, v in caps.items()),
                  markup=False)
    t = Table("part", "verdict", "why", "record", title="parts", title_justify="left")
    for p in rec["data"]["parts"]:
        v = p["verdict"] or "info"
        t.add_row(p["part"], f"[{verdict_style(p['verdict'])}]{v}[/]", p["reason"], p["evidence_id"] or "—")
    console.print(t)
    for prop in rec["data"].get("properties") or ():
        console.print(f"property ({prop.get('part')}), not a verdict: {prop.get('property')}: {prop.get('shown_by')} "
                      f"(an honest engine may lack it: docs/properties.md; --strict: {prop.get('strict')})",
                      markup=False, style="yellow")
    if (rec["data"].get("budget") or {}).get("line"):
        console.print(rec["data"]["budget"]["line"], style="dim", markup=False)
    console.print(f"overall: {rec['data']['combine']}", style="dim", markup=False)
    render_bench_notes(console, subs["bench"])
    # --extra-body fields a part sets itself and did not send (the bench part's are among the bench notes above)
    for part, lines in (rec["data"].get("request_notes") or {}).items():
        for line in lines if part != "bench serve" else ():
            console.print(f"note: {part}: {line}", markup=False, style="yellow")
    if subs.get("appliance"):
        run = RunDir(Path(rec["data"]["run_dir"]))
        console.print(f"appliance receipt: {run.appliance_path('receipt.json')}, card {run.appliance_path('card.txt')} "
                      f"(reprint: inferencekit report {run.path})", markup=False)
    console.print(f"record: {rec['evidence_id']}  (check: inferencekit evidence verify {rec['evidence_id']})",
                  markup=False)
    console.print(f"run dir: {rec['data']['run_dir']}", markup=False)
