"""``inferencekit report``: reprint the card of an appliance receipt, optionally as an HTML page."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.receipt import load_receipt as read_receipt
from inferencekit.evidence.receipt import receipt_file, receipt_integrity
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.appliance_card import render_appliance

__all__ = ["load_receipt", "report"]

def load_receipt(result: str | Path) -> tuple[Path, dict[str, Any]]:
    """The receipt file and its parsed content, from a receipt JSON file or a run dir.

    Raises:
        OpError: see ``inferencekit.evidence.receipt.load_receipt``; the message names the path.
    """
    path = receipt_file(result)
    return path, read_receipt(path)


@operation(("report",), "Reprint the card of an appliance receipt (--html: a page with a chart per section).",
           description="Reads a receipt written by `inferencekit bench appliance` (the JSON file, or the run dir "
                       "holding appliance/receipt.json) and prints its card again: metadata, decode, prefill and "
                       "concurrency tables with how each figure was measured, skipped sections, the verdict and "
                       "the limitations. --html writes one self-contained HTML page with the same tables and an "
                       "inline SVG chart per section. Nothing is measured: the receipt's own verdict is shown, and "
                       "the exit code is 0 whenever the receipt could be read.",
           example="inferencekit report runs/<run-id> --html receipt.html",
           args=[Arg("result", "string", "The receipt JSON file, or a run dir holding appliance/receipt.json.",
                     required=True, positional=True, metavar="RESULT"),
                 Arg("html", "string", "Also write the receipt as a self-contained HTML page to this file.",
                     metavar="PAGE")])
def report(call: Call, *, result: str, html: str | None = None) -> Outcome:
    path, receipt = load_receipt(result)
    integrity, message = receipt_integrity(path)
    if integrity == "changed":
        print(f"inferencekit: warning: {message}", file=sys.stderr)
    page: Path | None = None
    if html:
        from inferencekit.report.appliance_html import write_html

        try:
            page = write_html(receipt, html)
        except OSError as e:
            raise OpError(f"--html {html}: cannot write the page ({e.strerror or e})") from None
    payload = {"receipt": str(path), "html": str(page) if page is not None else None,
               "verdict": receipt.get("verdict"), "integrity": integrity, "integrity_detail": message}

    def render(console: Any) -> None:
        render_appliance(console, receipt)
        console.print(f"integrity: {integrity} ({message})", markup=False, highlight=False,
                      style="bold red" if integrity == "changed" else "dim")
        console.print(f"receipt: {path}" + (f"   page: {page}" if page is not None else ""), markup=False,
                      highlight=False)

    return Outcome(payload, None, render)
