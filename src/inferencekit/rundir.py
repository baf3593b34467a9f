"""The run directory: layout, atomic writes, and the pins that must not change between parts.

Layout (DESIGN.md, "Run directory")::

    runs/<run-id>/run.json
    inputs/<engine>/load-<level>/<bucket>/<id>[~k].json     request bodies
    outputs/<engine>/load-<level>/<bucket>/<id>[~k].json    reply files
    outputs/<engine>/warmup/<id>.json                        warm-up replies (not counted)
    outputs/<engine>/probes/<id>.json                        probe replies
    evidence/ev_<id>.json                                    copies of the run's records
    engine/                                                  logs of engines inferencekit started

Every file is written through ``write_json`` (temp file in the same folder + ``os.replace``), so a
reader never sees half a file and a crash loses at most the request in flight.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from inferencekit.errors import OpError

__all__ = ["RunDir", "write_json", "read_json", "write_bytes", "new_run_id", "safe_name", "default_runs_root",
           "data_home"]

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.~-]{0,127}$")


def safe_name(name: str, what: str = "name") -> str:
    """``name`` if it is usable as one path component, else OpError."""
    if not isinstance(name, str) or not _SAFE.match(name) or ".." in name:
        raise OpError(f"{what} {name!r} is not a safe file name (letters, digits, _ . - ~; at most 128)")
    return name


# The reuse tag DESIGN.md gives a prompt repeated inside one load level: "[ik-<salt>] " at the start of its
# first user message (bench/plan.py writes it; the gates read it back). Group 1 is the hex salt.
SALT_PATTERN = re.compile(r"^\[ik-([0-9a-f]{8,32})\] ")

_MADE: set[Path] = set()
_UMASK = os.umask(0o022)  # read once (os.umask can only be read by setting it) and put back at once
os.umask(_UMASK)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync-free rename), with the
    permissions an ordinary ``open()`` would give (mkstemp's own are owner-only)."""
    if path.parent not in _MADE:
        path.parent.mkdir(parents=True, exist_ok=True)
        _MADE.add(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # the folder was moved away since (--resume supersedes a level)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, obj: Any, *, indent: bool = False) -> None:
    """Atomically write ``obj`` as UTF-8 JSON (orjson; non-str keys allowed)."""
    opt = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    write_bytes(path, orjson.dumps(obj, option=opt))


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``, or None when it is missing or unreadable."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def new_run_id() -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` (UTC, 4 random hex)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def data_home() -> Path:
    """``$INFERENCEKIT_HOME``, else ``$XDG_DATA_HOME/inferencekit`` (``~/.local/share/inferencekit``)."""
    if os.environ.get("INFERENCEKIT_HOME"):
        return Path(os.environ["INFERENCEKIT_HOME"])
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "inferencekit"


def default_runs_root() -> Path:
    """``$INFERENCEKIT_RUNS`` or ``./runs``."""
    return Path(os.environ.get("INFERENCEKIT_RUNS", "runs"))


class RunDir:
    """One run directory. ``RunDir.create()`` makes a new one; ``RunDir.open()`` an existing one."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.created = False  # made by this process (see discard_if_empty)

    @classmethod
    def create(cls, path: str | Path | None = None) -> RunDir:
        """A new run directory (``path`` or ``runs/<run-id>``).

        Raises:
            OpError: ``path`` already holds a run (its run.json would be mixed with this one's), is a
                file, or cannot be created.
        """
        p = Path(path) if path else default_runs_root() / new_run_id()
        if (p / "run.json").exists():
            op = (read_json(p / "run.json") or {}).get("operation", "another operation")
            raise OpError(f"run dir {str(p)!r} already holds a run ({op}); pass a new --run-dir (bench serve "
                          "finishes an interrupted run with --resume)")
        try:
            p.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise OpError(f"--run-dir {str(p)!r} exists and is not a directory") from None
        except OSError as e:
            raise OpError(f"cannot create run dir {str(p)!r}: {e.strerror or e}") from None
        run = cls(p)
        run.created = True
        return run

    def discard_if_empty(self) -> None:
        """Remove a run dir this process created when it holds no request, reply or engine log (a user error
        stopped the operation before anything was sent)."""
        if not self.created:
            return
        leftovers = [q for q in self.path.rglob("*") if q.is_file() and q.name != "run.json"]
        if not leftovers:
            shutil.rmtree(self.path, ignore_errors=True)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        p = Path(path)
        if not p.is_dir():
            raise OpError(f"run directory {str(p)!r} does not exist")
        if not (p / "run.json").is_file():
            raise OpError(f"{str(p)!r} is not a run directory (no run.json)")
        return cls(p)

    # ---- layout
    def _rel(self, kind: str, engine: str, level: str | None, bucket: str | None, name: str) -> Path:
        parts = [kind, safe_name(engine, "engine label")]
        if level is not None:
            parts.append(f"load-{safe_name(level, 'level')}")
        if bucket is not None:
            parts.append(safe_name(bucket, "bucket"))
        return self.path.joinpath(*parts, safe_name(name, "request id") + ".json")

    def input_path(self, engine: str, level: str | None, bucket: str | None, name: str) -> Path:
        return self._rel("inputs", engine, level, bucket, name)

    def output_path(self, engine: str, level: str | None, bucket: str | None, name: str) -> Path:
        return self._rel("outputs", engine, level, bucket, name)

    def special_path(self, engine: str, folder: str, name: str) -> Path:
        """``outputs/<engine>/<folder>/<name>.json`` for warmup/ and probes/."""
        return self.path / "outputs" / safe_name(engine) / folder / (safe_name(name, "request id") + ".json")

    def level_dir(self, kind: str, engine: str, level: str) -> Path:
        return self.path / kind / engine / f"load-{level}"

    def replies(self, engine: str, level: str) -> Iterator[Path]:
        """Reply files of one load level, sorted."""
        d = self.level_dir("outputs", engine, level)
        return iter(sorted(d.glob("*/*.json"))) if d.is_dir() else iter(())

    @property
    def evidence_dir(self) -> Path:
        return self.path / "evidence"

    @property
    def engine_dir(self) -> Path:
        return self.path / "engine"

    # ---- run.json and pins
    def read_run(self) -> dict[str, Any]:
        val = read_json(self.path / "run.json")
        return val if isinstance(val, dict) else {}

    def update_run(self, **fields: Any) -> dict[str, Any]:
        run = self.read_run()
        run.update(fields)
        write_json(self.path / "run.json", run, indent=True)
        return run

    def pin(self, key: str, value: Any) -> Any:
        """Record ``value`` under ``pins[key]`` on first use; later a different value is refused.

        Raises:
            OpError: the run dir already pins another value for ``key`` (both values named).
        """
        run = self.read_run()
        pins = run.setdefault("pins", {})
        if key in pins and pins[key] != value:
            raise OpError(f"run dir {str(self.path)!r} pins {key} = {orjson.dumps(pins[key]).decode()}; this "
                          f"operation has {orjson.dumps(value).decode()}. Use a new run dir, or the same setting")
        if key not in pins:
            pins[key] = value
            write_json(self.path / "run.json", run, indent=True)
        return pins[key]
