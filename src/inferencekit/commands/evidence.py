"""``inferencekit evidence list|show|verify``."""

from __future__ import annotations

import sys
from typing import Any

from inferencekit.evidence.record import KINDS, integrity_problems
from inferencekit.evidence.store import Store, check_tree, record_base, record_path, resolve_record
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import read_json

__all__ = ["evidence_list", "evidence_show", "evidence_verify"]

_ID = Arg("record", "string", "An evidence id (ev_…), a unique prefix of one, or a record file's path.",
          required=True, positional=True)


@operation(("evidence", "verify"), "Check that a record and every file it lists are unchanged.",
           description="Recomputes the record's content id and the SHA-256 of every artifact (reply files, "
                       "sub-records, recursively), and looks for files added to the parts of the run dir each record "
                       "covers. Prints a line per record (its kind, what it covers, how many files) and 'intact', or "
                       "names each changed, missing or added file. A record file given by path that is not a "
                       "readable record is changed too. A content id makes an edit evident; it is not a signature. "
                       "Exit 0 intact, 1 changed.",
           example="inferencekit evidence verify ev_3f2a9c", args=[_ID])
def evidence_verify(call: Call, record: str) -> Outcome:
    path = record_path(record)  # OpError (exit 2) when there is no such file or record
    rec = read_json(path)
    if not isinstance(rec, dict) or "evidence_id" not in rec:
        # a file that was a record and no longer reads as one (truncated, edited into garbage) is a changed record
        why = (f"{path}: not a readable evidence record (" + ("not JSON" if rec is None else "JSON, but no "
                                                              "evidence_id") + ")")
        bad = {"evidence_id": None, "intact": False, "records_checked": 1, "artifacts_checked": 0, "problems": [why],
               "records": []}
        return Outcome(bad, "FAIL", lambda console: console.print(f"CHANGED {why}", style="bold red", markup=False))
    rows = check_tree(rec, path)
    problems = [f"{r['evidence_id']}: {p}" for r in rows for p in r["problems"]]
    verdict = "FAIL" if problems else "PASS"
    payload = {"evidence_id": rec.get("evidence_id"), "intact": not problems, "records_checked": len(rows),
               "artifacts_checked": sum(r["artifacts"] for r in rows),
               "problems": problems, "records": rows}

    def render(console: Any) -> None:
        for r in rows:  # which record covers what
            console.print(f"  {r['evidence_id']}  {r['kind']}: {r['part']} — {r['files']} file(s)"
                          + ("" if not r["problems"] else f" — {len(r['problems'])} problem(s)"), markup=False)
        if problems:
            console.print(f"[bold red]CHANGED[/] {rec.get('evidence_id')} ({len(problems)} problem(s)):")
            for p in problems:
                console.print(f"  - {p}", markup=False)
        else:
            console.print(f"[bold green]intact[/] {rec.get('evidence_id')}: {len(rows)} record(s), "
                          f"{payload['artifacts_checked']} artifact(s) match their SHA-256")

    return Outcome(payload, verdict, render)


@operation(("evidence", "show"), "Print one evidence record.",
           description="Prints the record as JSON (with --json) or a short summary: kind, verdict, summary, "
                       "metrics, missing parts and limitations.",
           example="inferencekit evidence show ev_3f2a9c --json", args=[_ID])
def evidence_show(call: Call, record: str) -> Outcome:
    rec, path = resolve_record(record)
    problems = integrity_problems(rec, record_base(path, rec))
    if problems:
        print(f"inferencekit: WARNING: this record does not verify ({problems[0]}); its figures cannot be trusted. "
              "Run `inferencekit evidence verify` for every problem.", file=sys.stderr)

    def render(console: Any) -> None:
        console.print(f"[bold]{rec['evidence_id']}[/]  kind={rec.get('kind')}  verdict={rec.get('verdict', '-')}  "
                      f"created={rec.get('created_at')}")
        console.print(rec.get("summary", ""), markup=False)
        for m in rec.get("metrics", [])[:40]:
            console.print(f"  {m.get('subject') or ''} {m['name']} {m['stat']} = {m['value']} {m['unit']} "
                          f"(n={m['n']})", markup=False)
        for x in rec.get("missing", []):
            console.print(f"  missing: {x}", markup=False)
        for x in rec.get("limitations", []):
            console.print(f"  limitation: {x}", markup=False)
        console.print(f"  file: {path}", markup=False)

    return Outcome(rec, None, render)


@operation(("evidence", "list"), "List the records in the evidence store.",
           description="One line per record in the store ($INFERENCEKIT_HOME/evidence, else the user data dir), "
                       "oldest first: id, kind, verdict, created_at, summary.",
           example="inferencekit evidence list --json",
           args=[Arg("kind", "string", "Only records of this kind.", choices=KINDS)])
def evidence_list(call: Call, kind: str | None) -> Outcome:
    store = Store()
    rows = []
    for p in store.all():
        rec = read_json(p)
        if not isinstance(rec, dict) or (kind and rec.get("kind") != kind):
            continue
        rows.append({"evidence_id": rec.get("evidence_id"), "kind": rec.get("kind"), "verdict": rec.get("verdict"),
                     "created_at": rec.get("created_at"), "summary": rec.get("summary"), "path": str(p)})

    def render(console: Any) -> None:
        from rich.table import Table

        t = Table("id", "kind", "verdict", "created", "summary", title=f"evidence store {store.root}")
        for r in rows:
            t.add_row(r["evidence_id"], r["kind"], r["verdict"] or "-", r["created_at"], (r["summary"] or "")[:80])
        console.print(t)

    return Outcome({"store": str(store.root), "records": rows}, None, render)
