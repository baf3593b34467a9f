"""``inferencekit bench compare``: two appliance receipts side by side, refused when not measured alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from inferencekit.bench.compare import (ABSENT, Difference, compare_receipts, load_receipt, receipt_differences,
                                        receipt_integrity, receipt_notes)
from inferencekit.errors import OpError
from inferencekit.registry import Arg, Call, Outcome, operation

__all__ = ["NOISE_RULE", "bench_compare", "render_compare"]

NOISE_RULE = ("B/A = B's median ÷ A's median (> 1: B is faster). Beyond noise = the run-to-run ranges "
              "[min, max] of A and B do not overlap; ranges that touch or overlap are within noise. "
              "Rates in tokens/s.")


def _value(v: Any) -> str:
    if v == ABSENT:
        return ABSENT
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _lines(diffs: list[Difference]) -> list[str]:
    return [f"  {d.field}: A={_value(d.a)}  B={_value(d.b)}" for d in diffs]


def _label(receipt: dict[str, Any], path: str) -> str:
    run = receipt.get("run")
    label = run.get("label") if isinstance(run, dict) else None
    return str(label) if label else Path(path).name


@operation(("bench", "compare"), "Compare two appliance receipts figure by figure (B against baseline A).",
           description="Reads two receipts of `bench appliance` (a receipt.json or its run directory) and prints, "
                       "for each decode workload, prefill depth (cold and warm) and concurrency level present in "
                       "both, the median and run-to-run range of each side, the ratio B/A and whether the ranges "
                       "overlap (within noise) or not (beyond noise). Receipts measured differently (protocol, "
                       "prompts, comparison id, any setting but the prefill cache-isolation method, or a section "
                       "skipped on one side) are refused with every differing field listed, unless "
                       "--allow-mismatch is given. Engine, hardware, model and verdict differences are shown as "
                       "notes. No verdict: exit 0 when compared.",
           example="inferencekit bench compare runs/llama-server/appliance/receipt.json runs/vllm",
           args=[Arg("a", "string", "Receipt A, the baseline: a receipt.json or a run directory holding "
                     "appliance/receipt.json.", required=True, positional=True, metavar="A"),
                 Arg("b", "string", "Receipt B, compared against A: a receipt.json or a run directory holding "
                     "appliance/receipt.json.", required=True, positional=True, metavar="B"),
                 Arg("allow_mismatch", "boolean", "Compare even when the receipts were measured differently; the "
                     "differences are printed on stderr as a warning and kept in the output.", default=False)])
def bench_compare(call: Call, *, a: str, b: str, allow_mismatch: bool = False) -> Outcome:
    ra, rb = load_receipt(a), load_receipt(b)
    diffs = receipt_differences(ra, rb)
    if diffs and not allow_mismatch:
        head = (f"{a} and {b} were not measured alike; refusing to compare them "
                f"({len(diffs)} differing field{'s' if len(diffs) != 1 else ''}):")
        tail = ("Give --allow-mismatch to compare them anyway (the differences are then printed as a warning and "
                "kept in the output).")
        raise OpError("\n".join([head, *_lines(diffs), tail]))
    if diffs:
        head = "inferencekit: warning: the receipts were not measured alike (--allow-mismatch); these fields differ:"
        print("\n".join([head, *_lines(diffs)]), file=sys.stderr)
    notes = receipt_notes(ra, rb)
    rows = compare_receipts(ra, rb)
    checks = {side: receipt_integrity(path) for side, path in (("a", a), ("b", b))}
    for side, (status, msg) in checks.items():
        if status == "changed":
            print(f"inferencekit: warning: {side.upper()}: {msg}", file=sys.stderr)
    payload = {"a": {"label": _label(ra, a), "path": str(a), "integrity": checks["a"][0]},
               "b": {"label": _label(rb, b), "path": str(b), "integrity": checks["b"][0]},
               "differences": [d.to_dict() for d in diffs], "notes": [d.to_dict() for d in notes], "rows": rows}
    return Outcome(payload, None, lambda console: render_compare(console, payload))


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _cell(median: float | None, rng: list[float] | None) -> str:
    if median is None:
        return "—"
    if rng is None:
        return _fmt(median)
    return f"{_fmt(median)} ({_fmt(rng[0])}–{_fmt(rng[1])})"


def _noise(row: dict[str, Any]) -> tuple[str, str]:
    if row["a_range"] is None or row["b_range"] is None or row["beyond_noise"] is None:
        return "not judged", "dim"
    return ("beyond noise", "bold") if row["beyond_noise"] else ("within noise", "dim")


def render_compare(console: Any, payload: dict[str, Any]) -> None:
    """Draw the comparison table, the notes, any accepted mismatches and how ratio and noise are defined."""
    from rich.table import Table
    from rich.text import Text

    pa, pb = payload["a"], payload["b"]
    t = Table(title=f"bench compare — A: {pa['label']}  vs  B: {pb['label']} (tokens/s, median (min–max) over runs)",
              title_justify="left")
    for col in ("section", "key", "figure", "A median (min–max)", "B median (min–max)", "B/A", "noise"):
        t.add_column(col, justify="left" if col in ("section", "key", "figure", "noise") else "right")
    for row in payload["rows"]:
        ratio = "—" if row["ratio_b_over_a"] is None else f"{row['ratio_b_over_a']:.3f}×"
        noise, style = _noise(row)
        t.add_row(row["section"], row["key"], row["metric"].removesuffix("_tokens_per_second"),
                  _cell(row["a_median"], row["a_range"]), _cell(row["b_median"], row["b_range"]), ratio,
                  Text(noise, style=style))
    console.print(t)
    console.print(f"A: {pa['path']}   B: {pb['path']}", markup=False)
    if not payload["rows"]:
        console.print("no figure is present in both receipts", markup=False, style="yellow")
    for row in payload["rows"]:
        if row.get("note") and not row["note"].startswith("one pooled figure"):
            console.print(f"note: {row['section']} {row['key']} {row['metric']}: {row['note']}", markup=False,
                          style="yellow")
    for d in payload["notes"]:
        console.print(f"differs (noted, not refused): {d['field']}: A={_value(d['a'])}  B={_value(d['b'])}",
                      markup=False)
    for d in payload["differences"]:
        console.print(f"MISMATCH (allowed by --allow-mismatch): {d['field']}: A={_value(d['a'])}  "
                      f"B={_value(d['b'])}", markup=False, style="bold yellow")
    console.print(NOISE_RULE + " Pooled decode figures have no range: noise not judged.", markup=False,
                  style="dim")
