"""Evidence records: build one, give it its content id, and check it later.

A record (docs/design.md, "Evidence record") is canonical JSON whose ``evidence_id`` is ``ev_`` plus the
first 24 hex digits of the SHA-256 of the canonical JSON of every other field. Each artifact (a
reply file, a sub-record, a table) is listed with its path relative to the run directory and its
SHA-256, so editing any byte of a record or of a file it lists is evident. A content id is not a
signature: anyone can edit a run and recompute every hash; it proves integrity, not authorship.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from inferencekit import __version__
from inferencekit.evidence.canonical import canonical_json, sha256_file, sha256_hex

__all__ = ["FORMAT", "KINDS", "build_record", "compute_id", "integrity_problems", "integrity_problem",
           "artifact", "metric", "tool_identity", "host_identity"]

FORMAT = "inferencekit.evidence.v1"
KINDS = ("bench", "appliance", "gates", "quality_trajectory", "quality_score", "quality_task", "verification",
         "probe")


@lru_cache(maxsize=1)
def tool_identity() -> dict[str, Any]:
    """``{name, version, git_revision, git_dirty}`` of the running inferencekit (git fields None outside a checkout)."""
    src = Path(__file__).resolve().parents[1]
    rev = dirty = None
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            rev = out.stdout.strip()
            st = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no", "--", "."],
                                capture_output=True, text=True, timeout=5)
            dirty = bool(st.stdout.strip()) if st.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"name": "inferencekit", "version": __version__, "git_revision": rev, "git_dirty": dirty}


@lru_cache(maxsize=1)
def host_identity() -> dict[str, Any]:
    """The client machine: OS, CPU count, Python (no hostname: records are meant to be shared)."""
    return {"os": platform.system(), "release": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version()}


def artifact(path: Path, base: Path, role: str) -> dict[str, str]:
    """``{path (relative to base, POSIX), sha256, role}`` for a file inside ``base``."""
    return {"path": Path(path).resolve().relative_to(Path(base).resolve()).as_posix(),
            "sha256": sha256_file(path), "role": role}


def metric(name: str, value: float | int | None, unit: str, stat: str, n: int, *,
           ci95: Sequence[float] | None = None, subject: str | None = None) -> dict[str, Any]:
    """One metric row: ``value`` in ``unit``, computed as ``stat`` over ``n`` samples."""
    out: dict[str, Any] = {"name": name, "value": value, "unit": unit, "stat": stat, "n": n}
    if ci95 is not None and ci95[0] is not None and ci95[1] is not None:  # an interval not computed is left out
        out["ci95"] = [float(ci95[0]), float(ci95[1])]
    if subject is not None:
        out["subject"] = subject
    return out


def compute_id(record: dict[str, Any]) -> str:
    """``ev_`` + first 24 hex of SHA-256 over the canonical JSON of the record without its id."""
    body = {k: v for k, v in record.items() if k != "evidence_id"}
    return "ev_" + sha256_hex(canonical_json(body))[:24]


def build_record(*, kind: str, claim_class: str, summary: str, identity: dict[str, Any],
                 metrics: Iterable[dict[str, Any]] = (), artifacts: Iterable[dict[str, str]] = (),
                 missing: Iterable[str] = (), limitations: Iterable[str] = (), data: dict[str, Any] | None = None,
                 verdict: str | None = None, created_at: str | None = None,
                 covers: Iterable[str] = ()) -> dict[str, Any]:
    """A complete record with its ``evidence_id``.

    ``covers``: folders (relative to the run dir) whose every file is one of ``artifacts``: verifying then
    calls a file found there that the record does not list an added file (``integrity_problems``).

    Raises:
        ValueError: unknown kind or claim class, or a non-finite number anywhere.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown evidence kind {kind!r}")
    if claim_class not in ("observed", "derived"):
        raise ValueError(f"unknown claim_class {claim_class!r}")
    rec: dict[str, Any] = {
        "format": FORMAT, "kind": kind, "claim_class": claim_class,
        "created_at": created_at or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "tool": tool_identity(), "summary": summary,
        "identity": {"host": host_identity(), **identity},
        "metrics": list(metrics), "artifacts": sorted(artifacts, key=lambda a: a["path"]),
        "missing": list(missing), "limitations": list(limitations), "data": data or {},
    }
    if covers:
        rec["covers"] = sorted(set(covers))
    if verdict is not None:
        rec["verdict"] = verdict
    rec["evidence_id"] = compute_id(rec)
    return rec


def integrity_problems(record: dict[str, Any], base: Path | None) -> list[str]:
    """Every way ``record`` or the files it lists differ from what it claims ([] = intact).

    Args:
        record: a parsed record.
        base: the run directory its artifact paths are relative to (None: only the id is checked).
    """
    problems = []
    if record.get("format") != FORMAT:
        problems.append(f"unknown format {record.get('format')!r}")
    try:
        actual = compute_id(record)
    except (ValueError, TypeError) as e:
        return [f"record cannot be hashed: {e}"]
    if actual != record.get("evidence_id"):
        problems.append(f"record content changed: its id is {record.get('evidence_id')} but its content hashes "
                        f"to {actual}")
    arts, covers = record.get("artifacts", []), record.get("covers", [])
    shape = _shape_problem(arts, covers)
    if shape:
        return [*problems, f"record malformed: {shape}"]
    if base is None:
        if arts:
            problems.append("artifacts not checked: the run directory was not found")
        return problems
    root = Path(base).resolve()
    for a in arts:
        p = Path(base) / a["path"]
        if not p.resolve().is_relative_to(root):
            problems.append(f"artifact outside the run directory: {a['path']}")
        elif not p.is_file():
            problems.append(f"artifact missing: {a['path']}")
        elif sha256_file(p) != a["sha256"]:
            problems.append(f"artifact changed: {a['path']} (sha256 {sha256_file(p)[:16]}…, record says "
                            f"{a['sha256'][:16]}…)")
    listed = {Path(a["path"]).as_posix() for a in arts}
    for folder in covers:
        d = Path(base) / folder
        if not d.resolve().is_relative_to(root):
            problems.append(f"covered folder outside the run directory: {folder}")
            continue
        found = sorted(p.relative_to(base).as_posix() for p in d.rglob("*") if p.is_file()) if d.is_dir() else []
        problems += [f"artifact added: {f} (in {folder}/, which the record lists in full)" for f in found
                     if f not in listed]
    return problems


def _shape_problem(arts: Any, covers: Any) -> str | None:
    """What is wrong with a record's ``artifacts`` / ``covers`` lists as JSON shapes, or None."""
    if not isinstance(arts, list):
        return f"artifacts is {type(arts).__name__}, not a list"
    for i, a in enumerate(arts):
        if not isinstance(a, dict) or not isinstance(a.get("path"), str) or not isinstance(a.get("sha256"), str):
            return f"artifacts[{i}] is not an object with string path and sha256"
    if not isinstance(covers, list) or not all(isinstance(c, str) for c in covers):
        return "covers is not a list of folder paths"
    return None


def integrity_problem(record: dict[str, Any], base: Path | None) -> str | None:
    """The first integrity problem of ``record``, or None when it and its artifacts are intact."""
    probs = integrity_problems(record, base)
    return probs[0] if probs else None
