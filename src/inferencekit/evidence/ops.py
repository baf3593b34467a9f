"""``inferencekit evidence list|show|verify``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from inferencekit.evidence.record import KINDS, integrity_problems
from inferencekit.evidence.store import Store, record_base, resolve_record
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import read_json

_ID = Arg("record", "string", "An evidence id (ev_…), a unique prefix of one, or a record file's path.",
          required=True, positional=True)


def check_tree(record: dict[str, Any], path: Path, seen: set[str] | None = None) -> list[dict[str, Any]]:
    """Check ``record`` and, recursively, every record it lists as an artifact of role ``record``.

    Returns one row per record: ``{evidence_id, kind, path, problems}``.
    """
    seen = seen if seen is not None else set()
    base = record_base(path, record)
    rows = [{"evidence_id": record.get("evidence_id"), "kind": record.get("kind"), "path": str(path),
             "base": str(base) if base else None, "artifacts": len(record.get("artifacts", [])),
             "problems": integrity_problems(record, base)}]
    seen.add(str(record.get("evidence_id")))
    for a in record.get("artifacts", []):
        if a.get("role") != "record" or base is None:
            continue
        sub_path = base / a["path"]
        sub = read_json(sub_path)
        if isinstance(sub, dict) and str(sub.get("evidence_id")) not in seen:
            rows.extend(check_tree(sub, sub_path, seen))
    return rows


@operation(("evidence", "verify"), "Check that a record and every file it lists are unchanged.",
           description="Recomputes the record's content id and the SHA-256 of every artifact (reply files, "
                       "sub-records, recursively). Prints 'intact' or names each changed or missing file. A "
                       "content id makes an edit evident; it is not a signature. Exit 0 intact, 1 changed.",
           example="inferencekit evidence verify ev_3f2a9c", args=[_ID])
def evidence_verify(call: Call, record: str) -> Outcome:
    rec, path = resolve_record(record)
    rows = check_tree(rec, path)
    problems = [f"{r['evidence_id']}: {p}" for r in rows for p in r["problems"]]
    verdict = "FAIL" if problems else "PASS"
    payload = {"evidence_id": rec.get("evidence_id"), "intact": not problems, "records_checked": len(rows),
               "artifacts_checked": sum(r["artifacts"] for r in rows),
               "problems": problems, "records": rows}

    def render(console: Any) -> None:
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
