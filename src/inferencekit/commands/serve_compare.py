"""``bench compare RUN_A RUN_B`` for two ``bench serve`` run dirs: read the sides, refuse runs measured unalike,
compare point by point (``bench/compare_serve.py``), draw the card. ``commands/appliance.py`` ``bench_compare``
dispatches here when both arguments are serve run dirs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from inferencekit.bench.compare import ABSENT, Difference
from inferencekit.bench.compare_serve import COMPARE_RULE, compare_points, serve_differences, serve_notes
from inferencekit.errors import OpError
from inferencekit.registry import Outcome
from inferencekit.rundir import RunDir, read_json

__all__ = ["compare_serve_runs", "is_serve_run", "load_serve_side", "render_serve_compare"]


def is_serve_run(path: str) -> bool:
    """True when ``path`` is a run dir written by ``bench serve`` (or a command that records a bench run there):
    its run.json names a bench record, or its operation is ``bench.serve``."""
    p = Path(path)
    if not p.is_dir() or not (p / "run.json").is_file():
        return False
    rj = RunDir(p).read_run()
    return bool(rj.get("bench_record")) or str(rj.get("operation") or "").startswith("bench.serve")


def load_serve_side(path: str) -> dict[str, Any]:
    """``{"record", "prompt_set", "path", "label"}`` of a serve run dir.

    Raises:
        OpError: the run has no bench record yet (unfinished: ``bench serve --resume``), or it is missing or not a
            JSON object of kind ``bench``.
    """
    run = RunDir(Path(path))
    rj = run.read_run()
    rec_id = rj.get("bench_record")
    if not isinstance(rec_id, str) or not rec_id:
        raise OpError(f"{path}: a bench serve run dir without a bench record (the run did not finish; `inferencekit "
                      f"bench serve --resume {path}` finishes it)")
    rec = read_json(run.evidence_dir / f"{rec_id}.json")
    if not isinstance(rec, dict) or rec.get("kind") != "bench":
        raise OpError(f"{path}: its bench record {rec_id} is missing or damaged ({run.evidence_dir / rec_id}.json)")
    label = _obj(rec.get("data")).get("engine_label") or Path(path).name
    return {"record": rec, "prompt_set": rj.get("prompt_set"), "path": str(path), "label": str(label)}


def _obj(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _value(v: Any) -> str:
    return ABSENT if v == ABSENT else json.dumps(v, sort_keys=True, ensure_ascii=False)


def _lines(diffs: list[Difference]) -> list[str]:
    return [f"  {d.field}: A={_value(d.a)}  B={_value(d.b)}" for d in diffs]


def compare_serve_runs(a: str, b: str, *, allow_mismatch: bool = False) -> Outcome:
    """The ``bench compare`` outcome for two serve run dirs (A the baseline).

    Raises:
        OpError: a side cannot be read (``load_serve_side``), or the runs were measured unalike
            (``serve_differences``: every differing field listed) and ``allow_mismatch`` is not set.
    """
    sa, sb = load_serve_side(a), load_serve_side(b)
    diffs = serve_differences(sa, sb)
    if diffs and not allow_mismatch:
        head = (f"{a} and {b} were not measured alike; refusing to compare them "
                f"({len(diffs)} differing field{'s' if len(diffs) != 1 else ''}):")
        tail = ("Give --allow-mismatch to compare them anyway (the differences are then printed as a warning and "
                "kept in the output).")
        raise OpError("\n".join([head, *_lines(diffs), tail]))
    if diffs:
        print("\n".join(["inferencekit: warning: the runs were not measured alike (--allow-mismatch); these fields "
                         "differ:", *_lines(diffs)]), file=sys.stderr)
    rows = compare_points(sa, sb)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["finding"]] = counts.get(r["finding"], 0) + 1

    def side(s: dict[str, Any]) -> dict[str, Any]:
        rec = s["record"]
        return {"label": s["label"], "path": s["path"], "record": rec.get("evidence_id"),
                "engine": _obj(_obj(rec.get("identity")).get("engine")).get("engine")}

    payload = {"kind": "bench serve runs", "a": side(sa), "b": side(sb),
               "differences": [d.to_dict() for d in diffs], "notes": [d.to_dict() for d in serve_notes(sa, sb)],
               "rows": rows, "findings": counts, "rule": COMPARE_RULE}
    return Outcome(payload, None, lambda console: render_serve_compare(console, payload))


def _fmt(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def _cell(s: dict[str, Any]) -> str:
    ci = s.get("ci95")
    reps = f" ×{s['repeats']}" if s.get("repeats") else ""
    if not ci:
        return _fmt(s.get("mean")) + reps
    return f"{_fmt(s.get('mean'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]{reps}"


_STYLE = {"differs": "bold", "no difference": "green", "UNPROVEN": "yellow", "differs (within-run)": "yellow",
          "not judged": "dim"}


def render_serve_compare(console: Any, payload: dict[str, Any]) -> None:
    """Draw the point-by-point table (A and B: mean [95% interval] ×repeats; B/A [95%]; the finding in short), then
    each UNPROVEN or within-run finding as its sentence (with its reason), the widest "no difference", the counts,
    the notes, any accepted mismatches and the rule."""
    from rich.table import Table
    from rich.text import Text

    pa, pb = payload["a"], payload["b"]
    t = Table(title=f"bench compare — A: {pa['label']}  vs  B: {pb['label']} (bench serve runs; mean [95% CI] "
                    "×repeats)", title_justify="left")
    for col in ("point", "figure", "A", "B", "B/A [95%]", "finding"):
        t.add_column(col, justify="right" if col in ("A", "B", "B/A [95%]") else "left")
    for r in payload["rows"]:
        ratio = "—" if r["ratio_b_over_a"] is None else f"{r['ratio_b_over_a']:.3f}"
        if r["ratio_ci95"]:
            ratio += f" [{r['ratio_ci95'][0]:.3f}, {r['ratio_ci95'][1]:.3f}]"
        t.add_row(r["point"], f"{r['name']} ({r['unit']})", _cell(r["a"]), _cell(r["b"]), ratio,
                  Text(r["short"], style=_STYLE.get(r["finding"], "")))
    console.print(t)
    console.print(f"A: {pa['path']}   B: {pb['path']}", markup=False, soft_wrap=True)
    if not payload["rows"]:
        console.print("no load point is in both runs", markup=False, style="yellow")
    for r in payload["rows"]:  # the table says a difference or its absence in full; the others need their reason
        if r["finding"] not in ("no difference", "differs"):
            console.print(f"{r['point']}: {r['statement']}", markup=False, soft_wrap=True,
                          style=_STYLE.get(r["finding"], ""))
    same = [r for r in payload["rows"] if r["finding"] == "no difference"]
    if same:
        worst = max(same, key=lambda r: max(1 - r["ratio_ci95"][0], r["ratio_ci95"][1] - 1))
        console.print(f"no difference beyond noise in {len(same)} figure(s); the widest, {worst['point']} "
                      f"{worst['statement']}", markup=False, soft_wrap=True, style="green")
    found = ", ".join(f"{k} {v}" for k, v in payload["findings"].items())
    if found:
        console.print(f"findings: {found}", markup=False, soft_wrap=True)
    for d in payload["notes"]:
        console.print(f"differs (noted, not refused): {d['field']}: A={_value(d['a'])}  B={_value(d['b'])}",
                      markup=False, soft_wrap=True)
    for d in payload["differences"]:
        console.print(f"MISMATCH (allowed by --allow-mismatch): {d['field']}: A={_value(d['a'])}  "
                      f"B={_value(d['b'])}", markup=False, style="bold yellow", soft_wrap=True)
    console.print(payload["rule"], markup=False, style="dim")
