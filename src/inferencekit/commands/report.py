"""``inferencekit report``: reprint the card of an appliance receipt or a bench serve run, optionally as an HTML page
(docs/report.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.receipt import load_receipt as read_receipt
from inferencekit.evidence.receipt import receipt_file, receipt_integrity
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.appliance_card import render_appliance
from inferencekit.report.bench_data import is_bench_run, load_bench_run
from inferencekit.report.bench_html import bench_page
from inferencekit.report.card import render_bench
from inferencekit.rundir import RunDir, write_bytes

__all__ = ["load_receipt", "report"]

def load_receipt(result: str | Path) -> tuple[Path, dict[str, Any]]:
    """The receipt file and its parsed content, from a receipt JSON file or a run dir.

    Raises:
        OpError: see ``inferencekit.evidence.receipt.load_receipt``; the message names the path.
    """
    path = receipt_file(result)
    return path, read_receipt(path)


@operation(("report",), "Reprint a run's card; --html writes its pictures as one self-contained page.",
           description="Reads a run dir (or an appliance receipt file) and prints its card again. An appliance run "
                       "(written by `inferencekit bench appliance`: the receipt JSON file, or the run dir holding "
                       "appliance/receipt.json): metadata, decode, prefill and concurrency tables with how each "
                       "figure was measured, skipped sections, the verdict and the limitations; --html writes one "
                       "page with the same tables and an inline SVG chart per section. A bench serve run (a run dir "
                       "whose run.json names a bench record): the level tables; --html writes a page with, per "
                       "level, the CDFs of TTFT, ITL and E2EL, each request's latency over the run's time, "
                       "throughput against TTFT p50/p99 with the Pareto front (and a sweep's points and boundary "
                       "when the record holds one), the client's self-check and the server's telemetry when "
                       "recorded (docs/report.md). Nothing is measured: the run's own figures are shown, and the "
                       "exit code is 0 whenever the run could be read; a dir holding neither is exit 2.",
           example="inferencekit report runs/<run-id> --html",
           args=[Arg("result", "string", "A run dir (bench serve, or one holding appliance/receipt.json), or a "
                     "receipt JSON file.", required=True, positional=True, metavar="RESULT"),
                 Arg("html", "string", "Also write the run as a self-contained HTML page: to PAGE when given, else "
                     "to --output, else beside the run (<run dir>/report.html for a bench run, the receipt's "
                     "name with .html for a receipt).", metavar="PAGE", const=""),
                 Arg("output", "string", "The page's file (implies --html).", metavar="FILE")])
def report(call: Call, *, result: str, html: str | None = None, output: str | None = None) -> Outcome:
    if html and output and Path(html) != Path(output):
        raise OpError(f"--html {html} and --output {output} name two different pages; give one")
    page_to = html or output or (None if html is None else "")
    if _is_bench_dir(result):
        return _report_bench(result, page_to)
    receipt_at = Path(result) / "appliance" / "receipt.json"
    if Path(result).is_dir() and not receipt_at.exists():
        run_json = Path(result) / "run.json"
        why = (f"run.json names no bench record; its operation is "
               f"{RunDir.open(result).read_run().get('operation') or 'unknown'}" if run_json.is_file()
               else "no run.json")
        raise OpError(f"{result!r} holds neither an appliance receipt ({receipt_at} does not exist) nor a bench "
                      f"serve run ({why}): nothing to report")
    path, receipt = load_receipt(result)
    integrity, message = receipt_integrity(path)
    if integrity == "changed":
        print(f"inferencekit: warning: {message}", file=sys.stderr)
    page: Path | None = None
    if page_to is not None:
        from inferencekit.report.appliance_html import write_html

        target = page_to or str(path.with_suffix(".html"))
        try:
            page = write_html(receipt, target)
        except OSError as e:
            raise OpError(f"--html {target}: cannot write the page ({e.strerror or e})") from None
    payload = {"receipt": str(path), "html": str(page) if page is not None else None,
               "verdict": receipt.get("verdict"), "integrity": integrity, "integrity_detail": message}

    def render(console: Any) -> None:
        render_appliance(console, receipt)
        console.print(f"integrity: {integrity} ({message})", markup=False, highlight=False,
                      style="bold red" if integrity == "changed" else "dim")
        console.print(f"receipt: {path}" + (f"   page: {page}" if page is not None else ""), markup=False,
                      highlight=False)

    return Outcome(payload, None, render)


def _is_bench_dir(result: str) -> bool:
    """A run dir whose run.json names a bench record, or says it was a ``bench serve`` run (an unfinished one is
    then refused by ``load_bench_run`` with how to finish it)."""
    p = Path(result)
    return p.is_dir() and (p / "run.json").is_file() and is_bench_run(RunDir.open(p))


def _report_bench(result: str, page_to: str | None) -> Outcome:
    """The bench record's card, and with ``page_to`` (a path, or "" for ``<run dir>/report.html``) its page."""
    run = load_bench_run(result)
    page: Path | None = None
    if page_to is not None:
        target = Path(page_to) if page_to else run.path / "report.html"
        if target.is_dir():
            raise OpError(f"--html {target}: is a directory; give the page's file name")
        try:
            page = target
            write_bytes(target, bench_page(run).encode("utf-8"))
        except OSError as e:
            raise OpError(f"--html {target}: cannot write the page ({e.strerror or e})") from None
    payload = {"run_dir": str(run.path), "kind": "bench", "record": run.record.get("evidence_id"),
               "html": str(page) if page is not None else None, "verdict": run.record.get("verdict"),
               "levels": [lv.label for lv in run.levels], "integrity": "changed" if run.integrity else "intact",
               "integrity_detail": run.integrity}
    if run.integrity:
        print(f"inferencekit: warning: {run.path} no longer matches its bench record: {run.integrity[0]}"
              + (f" (and {len(run.integrity) - 1} more)" if len(run.integrity) > 1 else ""), file=sys.stderr)

    def render(console: Any) -> None:
        render_bench(console, run.record)
        if page is not None:
            console.print(f"page: {page}", markup=False, highlight=False)

    return Outcome(payload, None, render)
