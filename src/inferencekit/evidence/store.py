"""The evidence store: a folder of records, plus a copy of each in its run directory.

Default store: ``$INFERENCEKIT_HOME/evidence``, else ``$XDG_DATA_HOME/inferencekit/evidence``
(``~/.local/share/inferencekit/evidence``). A record is found by id, unique id prefix, or path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.canonical import canonical_json
from inferencekit.evidence.record import integrity_problems, part_summary
from inferencekit.rundir import RunDir, data_home, read_json, write_bytes

__all__ = ["Store", "check_tree", "save_record", "record_path", "resolve_record", "record_base"]


def _default_root() -> Path:
    return data_home() / "evidence"


class Store:
    """A folder of ``ev_<id>.json`` records."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root else _default_root()

    def save(self, record: dict[str, Any]) -> Path:
        p = self.root / f"{record['evidence_id']}.json"
        write_bytes(p, canonical_json(record))
        return p

    def find(self, id_or_prefix: str) -> Path | None:
        """The record file for an id or unique prefix (``ev_`` optional), else None.

        Raises:
            OpError: the prefix matches more than one record.
        """
        key = id_or_prefix if id_or_prefix.startswith("ev_") else "ev_" + id_or_prefix
        exact = self.root / f"{key}.json"
        if exact.is_file():
            return exact
        hits = sorted(self.root.glob(f"{key}*.json")) if self.root.is_dir() else []
        if len(hits) > 1:
            raise OpError(f"{id_or_prefix!r} matches {len(hits)} records; give more of the id")
        return hits[0] if hits else None

    def all(self) -> list[Path]:
        return sorted(self.root.glob("ev_*.json"), key=lambda p: p.stat().st_mtime) if self.root.is_dir() else []


def save_record(record: dict[str, Any], run: RunDir | None, store: Store | None = None) -> Path:
    """Write ``record`` to the store and, when given, to ``<run>/evidence/``; returns the run-dir copy's path
    (or the store's when there is no run dir)."""
    store_path = (store or Store()).save(record)
    if run is None:
        return store_path
    p = run.evidence_dir / f"{record['evidence_id']}.json"
    write_bytes(p, canonical_json(record))
    return p


def record_base(path: Path, record: dict[str, Any]) -> Path | None:
    """The run directory a record's artifact paths are relative to: the folder above ``evidence/``
    when the record sits in a run dir, else ``data.run_dir`` when that exists."""
    path = Path(path).resolve()
    if path.parent.name == "evidence" and (path.parent.parent / "run.json").is_file():
        return path.parent.parent
    hint = (record.get("data") or {}).get("run_dir")
    if isinstance(hint, str) and Path(hint).is_dir():
        return Path(hint)
    return None


def record_path(id_or_path: str, store: Store | None = None) -> Path:
    """The file of a record given as a file path, an id, or an id prefix (not read).

    Raises:
        OpError: nothing found.
    """
    p = Path(id_or_path)
    if not p.is_file():
        found = (store or Store()).find(id_or_path)
        if found is None:
            raise OpError(f"no evidence record {id_or_path!r} (not a file, not in the store "
                          f"{str((store or Store()).root)!r})")
        p = found
    return p


def resolve_record(id_or_path: str, store: Store | None = None) -> tuple[dict[str, Any], Path]:
    """Load a record given as a file path, an id, or an id prefix.

    Raises:
        OpError: nothing found, or the file is not a JSON record.
    """
    p = record_path(id_or_path, store)
    rec = read_json(p)
    if not isinstance(rec, dict) or "evidence_id" not in rec:
        raise OpError(f"{str(p)!r} is not an evidence record")
    return rec, p


def _copy_problems(record: dict[str, Any], path: Path, base: Path | None) -> list[str]:
    """A record read from outside its run dir (the store, by id) against the run dir's own copy
    (``<run>/evidence/<id>.json``): the copy must be there, byte for byte the same record."""
    if base is None or Path(path).resolve().parent == (base / "evidence").resolve():
        return []
    copy = base / "evidence" / f"{record.get('evidence_id')}.json"
    if not copy.is_file():
        return [f"the run directory's copy of the record is missing: evidence/{copy.name}"]
    if copy.read_bytes() != Path(path).read_bytes():
        return [f"the run directory's copy of the record differs from {path}: evidence/{copy.name}"]
    return []


def check_tree(record: dict[str, Any], path: Path, seen: set[str] | None = None) -> list[dict[str, Any]]:
    """Check ``record`` and, recursively, every record it lists as an artifact of role ``record``.

    Returns one row per record: ``{evidence_id, kind, path, base, artifacts, files, part, problems}``: ``files``
    counts the run-dir files it lists (sub-records aside), ``part`` says what it covers (``part_summary``).
    """
    seen = seen if seen is not None else set()
    base = record_base(path, record)
    arts = record.get("artifacts", [])
    arts = arts if isinstance(arts, list) else []
    rows = [{"evidence_id": record.get("evidence_id"), "kind": record.get("kind"), "path": str(path),
             "base": str(base) if base else None, "artifacts": len(arts),
             "files": sum(1 for a in arts if not isinstance(a, dict) or a.get("role") != "record"),
             "part": part_summary(record),
             "problems": integrity_problems(record, base) + _copy_problems(record, path, base)}]
    seen.add(str(record.get("evidence_id")))
    for a in arts:
        if not isinstance(a, dict) or a.get("role") != "record" or base is None or not isinstance(a.get("path"), str):
            continue
        sub_path = base / a["path"]
        sub = read_json(sub_path)
        if isinstance(sub, dict) and str(sub.get("evidence_id")) not in seen:
            rows.extend(check_tree(sub, sub_path, seen))
    return rows
