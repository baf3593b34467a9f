"""Evidence records: build one, give it its content id, and check it later.

A record (docs/design.md, "Evidence record") is canonical JSON whose ``evidence_id`` is ``ev_`` plus the
first 24 hex digits of the SHA-256 of the canonical JSON of every other field. Each artifact (a
reply file, a sub-record, a table) is listed with its path relative to the run directory and its
SHA-256, so editing any byte of a record or of a file it lists is evident. A content id is not a
signature: anyone can edit a run and recompute every hash; it proves integrity, not authorship.

A record also *covers* the parts of the run dir its files lie in (``covers``): each folder one operation writes
in full (``part_folder``: a load level, a side folder of a load, an appliance section, a quality item store or
trajectory set), every file of which the record lists. A file found there later that it does not list is
"added", as a listed one missing or changed is; files in folders several operations share (``probes/``,
``evidence/``, a quality task's results) are each a part of their own. A later operation writes its own parts
and its own record.
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

__all__ = ["FORMAT", "KINDS", "PART_FILE", "build_record", "compute_id", "integrity_problems", "integrity_problem",
           "artifact", "metric", "part_folder", "part_summary", "tool_identity", "host_identity"]

FORMAT = "inferencekit.evidence.v1"
KINDS = ("bench", "appliance", "gates", "quality_trajectory", "quality_score", "quality_task", "verification",
         "probe")
PART_FILE = "part file"  # the role of a file a record lists because it lies in a part the record covers


def part_folder(rel: str, base: Path) -> str | None:
    """The folder one operation writes in full that holds the run-dir file ``rel`` (POSIX, relative to ``base``),
    or None when the file lies in a folder several operations share (docs/design.md, "Run directory").

    ``<inputs|outputs>/<engine>/load-<level>/…`` (a load level), ``…/<engine>/{warmup,probes}/…``,
    ``…/<engine>/kat/{alone,load}/…`` and ``…/<engine>/structured/{alone,load-<level>}/…`` (a load's side requests),
    ``…/<engine>/appliance-<section>/…`` (an appliance section), ``appliance/…`` (the receipt and its card),
    ``quality/<task>/<label>/…`` (a quality task's item store) and ``quality/<label>/…`` when it holds an
    ``index.json`` (a trajectory set). Not parts: the run dir's top, ``probes/`` (a gate run's log, the capability
    probe's), ``evidence/``, ``quality/<task>/<label>.jsonl`` (results beside other labels')."""
    parts = rel.split("/")
    if parts[0] in ("inputs", "outputs") and len(parts) >= 4:
        if parts[2].startswith(("load-", "appliance-")) or parts[2] in ("warmup", "probes"):
            return "/".join(parts[:3])
        if parts[2] == "kat" and len(parts) >= 5 and parts[3] in ("alone", "load"):
            return "/".join(parts[:4])
        if parts[2] == "structured" and len(parts) >= 5 and (parts[3] == "alone" or parts[3].startswith("load-")):
            return "/".join(parts[:4])
        return None
    if parts[0] == "appliance" and len(parts) >= 2:
        return "appliance"
    if parts[0] == "quality":
        if len(parts) >= 4:
            return "/".join(parts[:3])
        if len(parts) == 3 and (Path(base) / "quality" / parts[1] / "index.json").is_file():
            return "/".join(parts[:2])
    return None


def _part_files(base: Path, folder: str) -> list[Path]:
    """Every file below ``base/folder``, an atomic write's temp file (``.<name>.<random>.tmp``) left out."""
    d = Path(base) / folder
    return sorted(p for p in d.rglob("*") if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp"))
                  ) if d.is_dir() else []


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
                 covers: Iterable[str] = (), base: Path | None = None) -> dict[str, Any]:
    """A complete record with its ``evidence_id``.

    ``covers``: folders (relative to the run dir) whose every file the record lists: verifying then calls a file
    found there that the record does not list an added file (``integrity_problems``). To the folders given, the
    parts of the run dir its artifacts lie in are added (``part_folder``), and every file of a covered folder that
    ``artifacts`` does not hold is listed too, with the role ``PART_FILE``: a record lists every file of its parts.
    ``base``: the run dir the artifact paths are relative to (default: ``data["run_dir"]``, which every record of
    a run dir names); without one, only the ``covers`` given are recorded.

    Raises:
        ValueError: unknown kind or claim class, or a non-finite number anywhere.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown evidence kind {kind!r}")
    if claim_class not in ("observed", "derived"):
        raise ValueError(f"unknown claim_class {claim_class!r}")
    artifacts = list(artifacts)
    folders = set(covers)
    hint = (data or {}).get("run_dir")
    root = Path(base) if base is not None else (Path(hint) if isinstance(hint, str) and Path(hint).is_dir() else None)
    if root is not None:
        folders |= {f for a in artifacts if a.get("role") != "record"
                    and (f := part_folder(a["path"], root)) is not None}
        listed = {a["path"] for a in artifacts}
        for folder in sorted(folders):
            for p in _part_files(root, folder):
                rel = p.relative_to(root).as_posix()
                if rel not in listed:
                    artifacts.append(artifact(p, root, PART_FILE))
                    listed.add(rel)
    rec: dict[str, Any] = {
        "format": FORMAT, "kind": kind, "claim_class": claim_class,
        "created_at": created_at or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "tool": tool_identity(), "summary": summary,
        "identity": {"host": host_identity(), **identity},
        "metrics": list(metrics), "artifacts": sorted(artifacts, key=lambda a: a["path"]),
        "missing": list(missing), "limitations": list(limitations), "data": data or {},
    }
    if folders:
        rec["covers"] = sorted(folders)
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
        found = [p.relative_to(base).as_posix() for p in _part_files(Path(base), folder)]
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


def part_summary(record: dict[str, Any]) -> str:
    """What a record covers, in one line: its folders (``covers``) and the files it lists outside them, e.g.
    ``outputs/e/load-c1, inputs/e/load-c1 + 2 other files`` or ``probes/capabilities.jsonl``; sub-records are
    named by count."""
    arts = [a for a in record.get("artifacts") or [] if isinstance(a, dict) and isinstance(a.get("path"), str)]
    covers = [c for c in record.get("covers") or [] if isinstance(c, str)]
    subs = [a for a in arts if a.get("role") == "record"]
    loose = [a["path"] for a in arts if a.get("role") != "record"
             and not any(a["path"].startswith(c.rstrip("/") + "/") for c in covers)]
    out = ", ".join(covers[:4]) + (f" and {len(covers) - 4} more folders" if len(covers) > 4 else "")
    if loose:
        what = loose[0] if len(loose) == 1 else f"{len(loose)} files"
        out = f"{out} + {what} outside them" if covers else (loose[0] if len(loose) == 1 else f"{len(loose)} files: "
                                                             + ", ".join(loose[:3]) + (", …" if len(loose) > 3 else ""))
    if subs:
        out = f"{out} + {len(subs)} sub-record(s)" if out else f"{len(subs)} sub-record(s)"
    return out or "no file"


def integrity_problem(record: dict[str, Any], base: Path | None) -> str | None:
    """The first integrity problem of ``record``, or None when it and its artifacts are intact."""
    probs = integrity_problems(record, base)
    return probs[0] if probs else None
