"""The appliance receipt's format and integrity: find it, read it, check it against its evidence record.

A receipt (``inferencekit.appliance.v1``, docs/appliance.md) is written by ``bench appliance`` into
``<run-dir>/appliance/receipt.json`` and listed, with every reply file it summarises, in the run's
``appliance`` evidence record; ``bench compare`` and ``report`` read receipts through here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.record import integrity_problem
from inferencekit.rundir import RunDir

__all__ = ["RECEIPT_FORMAT", "load_receipt", "receipt_file", "receipt_integrity"]

RECEIPT_FORMAT = "inferencekit.appliance.v1"  # the receipt's "format" (docs/appliance.md)

_SECTION_TYPES = {"protocol": dict, "tool": dict, "run": dict, "settings": dict, "decode": dict, "prefill": dict,
                  "concurrency": dict, "skipped": dict, "limitations": list}


def receipt_file(path: str | Path) -> Path:
    """The receipt file behind ``path``: the file itself, or a run directory's ``appliance/receipt.json``.

    Raises:
        OpError: nothing there (the message names the path looked for).
    """
    p = Path(path)
    if p.is_dir():
        inner = RunDir(p).appliance_path("receipt.json")
        if not inner.is_file():
            raise OpError(f"{p} is a directory without appliance/receipt.json ({inner} does not exist; give a receipt "
                          "file or the run directory of a bench appliance run)")
        return inner
    if not p.exists():
        raise OpError(f"{p}: no such receipt file or run directory")
    return p


def receipt_integrity(path: str | Path) -> tuple[str, str]:
    """``(status, message)``: whether the receipt still matches the ``appliance`` record made with it.

    ``status`` is ``"intact"`` (the record beside it in its run dir lists this receipt and every reply file
    with unchanged SHA-256), ``"changed"`` (the record names what differs), or ``"unchecked"`` (a copy
    outside its run dir, or no record there). A content id shows edits; it is not a signature.
    """
    p = receipt_file(path).resolve()
    run = RunDir(p.parent.parent)
    run_dir, run_json = run.path, run.path / "run.json"
    if p.parent != run.appliance_path("receipt.json").parent or not run_json.is_file():
        return "unchecked", f"{p} is not inside its run dir: not checked against its evidence record"
    try:
        rec_id = json.loads(run_json.read_text()).get("appliance_record")
        record = json.loads((run.evidence_dir / f"{rec_id}.json").read_text()) if rec_id else None
    except (OSError, json.JSONDecodeError):
        record = None
    if not isinstance(record, dict):
        return "unchecked", f"{run_dir} holds no appliance record for {p.name}: not checked"
    problem = integrity_problem(record, run_dir)
    if problem:
        return "changed", f"{p} no longer matches its evidence record {record.get('evidence_id')}: {problem}"
    return "intact", f"matches evidence record {record.get('evidence_id')}"


def load_receipt(path: str | Path) -> dict[str, Any]:
    """Read an appliance receipt: a receipt JSON file, or a run directory holding ``appliance/receipt.json``.

    Returns:
        The receipt as a dict (docs/appliance.md, Receipt).

    Raises:
        OpError: the path (or the run directory's receipt) does not exist, is not readable JSON, is
            not a JSON object, its ``format`` is not ``inferencekit.appliance.v1``, or a top-level
            section has the wrong JSON type. The message names the path.
    """
    p = receipt_file(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OpError(f"{p}: not a readable JSON receipt ({e})") from None
    if not isinstance(doc, dict):
        raise OpError(f"{p}: not an appliance receipt (a JSON {type(doc).__name__}, expected an object with "
                      f"\"format\": \"{RECEIPT_FORMAT}\")")
    if doc.get("format") != RECEIPT_FORMAT:
        raise OpError(f"{p}: not an appliance receipt (format {doc.get('format')!r}, expected {RECEIPT_FORMAT!r})")
    for key, typ in _SECTION_TYPES.items():
        if doc.get(key) is not None and not isinstance(doc[key], typ):
            raise OpError(f"{p}: damaged receipt: {key!r} is not a JSON {'object' if typ is dict else 'array'}")
    return doc
