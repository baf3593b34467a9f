"""Read trajectory sets back, and check that nobody changed them since they were captured.

Two layers catch an edit: ``index.json`` holds every trajectory file's SHA-256 (a file edited on its
own no longer matches), and the ``quality_trajectory`` evidence record that ``quality trajectory``
wrote lists ``index.json`` by its SHA-256 (an index rewritten to match edited files is then listed by
no intact record). A content hash makes an edit evident; it does not stop someone who forges the
record too (docs/design.md, "Evidence record").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.evidence.canonical import sha256_file
from inferencekit.evidence.record import compute_id
from inferencekit.evidence.store import Store
from inferencekit.quality.trajectory import INDEX_FORMAT, TRAJ_FORMAT
from inferencekit.rundir import RunDir, quality_sets_in, read_json

__all__ = ["TrajectorySet", "label_dirs", "load_set", "run_of"]


@dataclass(slots=True)
class TrajectorySet:
    """One ``quality/<label>/`` folder as read back.

    Attributes:
        docs: prompt id → trajectory, only files that match the index.
        ids: every prompt id the index names (captured or failed).
        problems: integrity problems, one line each ([] = intact).
    """

    dir: Path
    label: str
    engine: str | None
    model: str | None
    docs: dict[str, dict[str, Any]]
    failed: dict[str, str]
    ids: set[str]
    prompts_sha256: str | None
    index_sha256: str
    problems: list[str] = field(default_factory=list)


def run_of(d: Path) -> Path | None:
    """The run directory of ``<run>/quality/<label>``, or None when ``d`` is not laid out so."""
    return d.parent.parent if d.parent.name == "quality" else None


def label_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Trajectory folders (holding ``index.json``) named by ``paths``: a folder itself, or every child of a
    ``quality/`` folder or run dir that holds one.

    Raises:
        OpError: a path that does not exist, or none found.
    """
    out: list[Path] = []
    for p in paths:
        d = Path(p)
        if (d / "index.json").is_file():
            out.append(d)
            continue
        if not d.is_dir():
            raise OpError(f"trajectories: {p} is not a directory")
        out.extend(RunDir(d).quality_sets() if (d / "quality").is_dir() else quality_sets_in(d))
    if not out:
        raise OpError(f"no trajectory folders (with index.json) under {', '.join(map(str, paths))}")
    return out


def _listed_by_record(d: Path, index_sha: str, store: Store | None) -> str | None:
    """None when an intact ``quality_trajectory`` record (the run's copies first, then the store) lists
    this index by SHA-256; else the problem."""
    def lists(rec: Any) -> bool:
        return (isinstance(rec, dict) and rec.get("kind") == "quality_trajectory"
                and rec.get("claim_class") == "observed"
                and any(a.get("role") == "trajectory_index" and a.get("sha256") == index_sha
                        for a in rec.get("artifacts") or []))

    run = run_of(d)
    candidates = RunDir(run).evidence_files() if run else []
    edited = False
    for group in (candidates, (store or Store()).all()):
        for path in group:
            rec = read_json(path)
            if lists(rec):
                try:
                    intact = compute_id(rec) == rec.get("evidence_id")
                except ValueError:
                    intact = False
                if intact:
                    return None
                edited = True
    if edited:
        return f"{d.name}: the quality_trajectory record listing its index.json was edited after capture"
    return (f"{d.name}/index.json is listed by no quality_trajectory evidence record (rewritten after capture, or "
            "not written by quality trajectory)")


def load_set(d: Path, store: Store | None = None) -> TrajectorySet:
    """Read one trajectory folder and check it against its index and evidence record.

    Raises:
        OpError: ``index.json`` unreadable or not an index.
    """
    index_path = d / "index.json"
    index = read_json(index_path)
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise OpError(f"{index_path}: not a trajectory index ({INDEX_FORMAT})")
    index_sha = sha256_file(index_path)
    problems: list[str] = []
    docs: dict[str, dict[str, Any]] = {}
    for pid, meta in sorted((index.get("files") or {}).items()):
        f = d / str(meta.get("file", ""))
        if not f.is_file():
            problems.append(f"{d.name}/{meta.get('file')} is missing")
        elif sha256_file(f) != meta.get("sha256"):
            problems.append(f"{d.name}/{meta.get('file')} does not match index.json (edited after capture?)")
        else:
            doc = read_json(f)
            if isinstance(doc, dict) and doc.get("format") == TRAJ_FORMAT:
                docs[pid] = doc
            else:
                problems.append(f"{d.name}/{meta.get('file')} is not a trajectory file")
    problem = _listed_by_record(d, index_sha, store)
    if problem:
        problems.append(problem)
    failed = {str(k): str(v) for k, v in (index.get("failed") or {}).items()}
    return TrajectorySet(dir=d, label=str(index.get("label") or d.name), engine=index.get("engine"),
                         model=index.get("model"), docs=docs, failed=failed,
                         ids=set(index.get("files") or {}) | set(failed), prompts_sha256=index.get("prompts_sha256"),
                         index_sha256=index_sha, problems=problems)
