"""The run directory: layout, atomic writes, and the pins that must not change between parts.

Layout (docs/design.md, "Run directory")::

    runs/<run-id>/run.json
    inputs/<engine>/load-<level>/<bucket>/<id>[~k].json     request bodies
    outputs/<engine>/load-<level>/<bucket>/<id>[~k].json    reply files
    outputs/<engine>/warmup/<id>.json                        warm-up replies (not counted)
    outputs/<engine>/probes/<id>.json                        probe replies
    outputs/<engine>/kat/{alone,load}/<id>.json              known answers (bench serve --kat)
    outputs/<engine>/structured/alone/<id>.json              structured requests alone (bench serve --structured)
    outputs/<engine>/structured/load-<level>/<id>.json       the same requests inside each load level
    evidence/ev_<id>.json                                    copies of the run's records
    engine/                                                  logs of engines inferencekit started

Every file is written through ``write_json`` (temp file in the same folder + ``os.replace``), so a
reader never sees half a file and a crash loses at most the request in flight.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import os
import re
import secrets
import shutil
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from inferencekit.errors import OpError
from inferencekit.redact import scrub

__all__ = ["CLIENT_FILE", "EXTRA_FOLDERS", "GATE_RUN_NAME", "KAT_ALONE", "KAT_LOAD", "PROBES_FOLDER", "TELEMETRY_FILE",
           "RETOKENIZED_FILE", "STRUCTURED_ALONE", "STRUCTURED_FOLDER", "RunDir", "kat_folder", "structured_folder",
           "file_key",
           "gate_run_name", "journal_paths", "quality_sets_in",
           "walk_engine_folder",
           "write_json", "read_json", "write_bytes", "new_run_id", "safe_name", "default_runs_root",
           "data_home"]

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.~-]{0,127}$")


def safe_name(name: str, what: str = "name") -> str:
    """``name`` if it is usable as one path component, else OpError."""
    if not isinstance(name, str) or not _SAFE.match(name) or ".." in name:
        raise OpError(f"{what} {name!r} is not a safe file name (letters, digits, _ . - ~; at most 128)")
    return name


# The reuse tag docs/design.md gives a prompt repeated inside one load level: "[ik-<salt>] " at the start of its
# first user message (bench/plan.py writes it; the gates read it back). Group 1 is the hex salt.
SALT_PATTERN = re.compile(r"^\[ik-([0-9a-f]{8,32})\] ")

# a level's re-tokenized counts, and the texts the tokenizer refused (absent when none):
# {"tokenizer", "counts": {file stem: n}, "errors"?: {file stem: error}}
RETOKENIZED_FILE = "retokenized.json"
CAPABILITIES_FILE = "capabilities.jsonl"  # the capability probe's log under probes/ (api/probe.py)
CLIENT_FILE = "client.json"  # a level's client pace figures (bench/pace.py)
SWEEP_FILE = "sweep.json"  # a bench sweep's points, their judgements and the boundary (bench/sweep_run.py)
# a level's server telemetry: its Prometheus /metrics scraped while it ran (bench/telemetry.py gives the lines)
TELEMETRY_FILE = "server_metrics.jsonl.gz"
JOURNAL_GLOB = "journal*.jsonl"  # a level's journals: journal.jsonl, and journal-w<i>.jsonl per --workers process
GATE_RUN_NAME = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")  # a gate run's name: UTC time, 6 random hex digits

# The folders of the extra requests a caller mixes into a load (``shapes.ExtraRequests``): hidden probes, and the
# known answers sent alone and inside the heaviest level (``outputs/<engine>/<folder>/<id>.json``).
PROBES_FOLDER, KAT_ALONE, KAT_LOAD = "probes", "kat/alone", "kat/load"
EXTRA_FOLDERS = (PROBES_FOLDER, KAT_ALONE, KAT_LOAD)
# The structured-output and tool-call requests of ``bench serve --structured``: sent alone into ``structured/alone``,
# and again inside every level into ``structured/load-<level>`` (one folder per level, named as the level's own).
STRUCTURED_FOLDER = "structured"
STRUCTURED_ALONE = f"{STRUCTURED_FOLDER}/alone"


def kat_folder(level: str | None) -> str:
    """The folder of the known-answer copies sent inside a load level: ``kat/load`` for the one level ``bench serve
    --kat`` sends them into (``level`` None), ``kat/load-<level>`` for each level of a ``bench sweep``, which sends
    them inside every point."""
    return KAT_LOAD if level is None else f"{KAT_LOAD}-{safe_name(level, 'level')}"


def structured_folder(level: str | None) -> str:
    """The folder (under ``outputs/<engine>/`` and ``inputs/<engine>/``) of the structured requests sent alone
    (``level`` None: ``structured/alone``) or inside one load level (``structured/load-<level>``)."""
    return STRUCTURED_ALONE if level is None else f"{STRUCTURED_FOLDER}/load-{safe_name(level, 'level')}"


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
            f.write(scrub(data))  # an API key never reaches disk (redact.py)
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
    """Parsed JSON of ``path`` (``.json``, or gzipped ``.json.gz``), or None when it is missing or unreadable."""
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return orjson.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, orjson.JSONDecodeError):  # zlib.error: damaged deflate
        return None


def file_key(path: Path) -> str:
    """A request file's key: its name less ``.json`` / ``.json.gz`` (``<id>[~k]``)."""
    n = path.name
    return n[: -len(".json.gz")] if n.endswith(".json.gz") else n.removesuffix(".json")


def gate_run_name(path: Path) -> str:
    """A gate run's name from its probe log's path: ``probes/<name>.jsonl`` or ``probes/<name>.jsonl.gz``."""
    n = path.name
    return n[: -len(".jsonl.gz")] if n.endswith(".jsonl.gz") else n.removesuffix(".jsonl")


def journal_paths(level_dir: Path) -> list[Path]:
    """The journals of one level folder: ``journal.jsonl`` and, with ``--workers``, ``journal-w<i>.jsonl``."""
    return sorted(level_dir.glob(JOURNAL_GLOB)) if level_dir.is_dir() else []


def _bucket_files(folder: Path, *, gz: bool = True) -> list[Path]:
    """``folder/<bucket>/*.json`` (and ``*.json.gz``), sorted."""
    if not folder.is_dir():
        return []
    pats = ("*/*.json", "*/*.json.gz") if gz else ("*/*.json",)
    return sorted(p for pat in pats for p in folder.glob(pat) if p.is_file())


def walk_engine_folder(folder: Path) -> Iterator[tuple[str | None, Path]]:
    """``(level or None, file)`` of one engine's folder (``inputs/<engine>`` or ``outputs/<engine>``, of this run dir
    or another's): its top-level bucket files first (``<bucket>/<id>.json[.gz]``: fixed-length and single requests,
    not the warm-up or the extra requests' folders), then every ``load-<level>/<bucket>/<id>.json[.gz]``. Sorted."""
    skipped = {"warmup", STRUCTURED_FOLDER, *(f.split("/")[0] for f in EXTRA_FOLDERS)}
    for p in _bucket_files(folder):
        if not p.parent.name.startswith("load-") and p.parent.name not in skipped:
            yield None, p
    levels = sorted(d for d in folder.glob("load-*") if d.is_dir()) if folder.is_dir() else []
    for d in levels:
        for p in _bucket_files(d):
            yield d.name[len("load-"):], p


def quality_sets_in(folder: Path) -> list[Path]:
    """The trajectory-set folders directly inside ``folder`` (those holding an ``index.json``), sorted."""
    return sorted(c for c in folder.iterdir() if (c / "index.json").is_file()) if folder.is_dir() else []


def new_run_id() -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` (UTC, 4 random hex)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def data_home() -> Path:
    """``$INFERENCEKIT_HOME``, else ``$XDG_DATA_HOME/inferencekit`` (``~/.local/share/inferencekit``)."""
    if os.environ.get("INFERENCEKIT_HOME"):
        return Path(os.environ["INFERENCEKIT_HOME"])
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "inferencekit"


def default_runs_root() -> Path:
    """``$INFERENCEKIT_RUNS`` or ``./runs``."""
    return Path(os.environ.get("INFERENCEKIT_RUNS", "runs"))


def _check_writable(path: Path) -> None:
    """Create and remove one small file in ``path``: a read-only folder or a full disk is an ``OpError`` here, before
    anything is sent, not a traceback after. (As root, permission bits do not stop writes; a read-only mount does.)"""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ik-writable.", dir=path)
        try:
            os.write(fd, b"0" * 4096)
        finally:
            os.close(fd)
            os.unlink(tmp)
    except OSError as e:
        raise OpError(f"run dir {str(path)!r} is not writable: {e.strerror or e} (free space, or pass a --run-dir "
                      "on a writable disk); nothing was sent") from None


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
        _check_writable(p)
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
    def open(cls, path: str | Path, *, writable: bool = False) -> RunDir:
        """An existing run directory.

        Raises:
            OpError: no such folder, no run.json, or (``writable``) a file cannot be created in it: a
                read-only or full disk is refused before the first request.
        """
        p = Path(path)
        if not p.is_dir():
            raise OpError(f"run directory {str(p)!r} does not exist")
        if not (p / "run.json").is_file():
            raise OpError(f"{str(p)!r} is not a run directory (no run.json)")
        if writable:
            _check_writable(p)
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

    def special_path(self, engine: str, folder: str, name: str, kind: str = "outputs") -> Path:
        """``<kind>/<engine>/<folder>/<name>.json`` for the requests outside the load levels: ``warmup/`` and the
        extra requests' folders (``probes/``, ``kat/alone/``, ``kat/load/``, ``structured_folder``); ``kind`` is
        ``outputs`` (replies) or ``inputs`` (request bodies)."""
        return self.path / kind / safe_name(engine) / folder / (safe_name(name, "request id") + ".json")

    def level_dir(self, kind: str, engine: str, level: str) -> Path:
        return self.path / kind / engine / f"load-{level}"

    def telemetry_path(self, engine: str, level: str) -> Path:
        """``outputs/<engine>/load-<level>/server_metrics.jsonl.gz``: one level's server telemetry
        (``TELEMETRY_FILE``; ``bench/telemetry.py`` writes it)."""
        return self.level_dir("outputs", safe_name(engine, "engine label"), safe_name(level, "level")) / TELEMETRY_FILE

    def telemetry_lines(self, engine: str, level: str) -> list[dict[str, Any]] | None:
        """The JSON lines of one level's server telemetry (``telemetry_path``; their kinds: ``bench/telemetry.py``),
        or None when the level has none (telemetry off, an older run) or it cannot be read; a damaged line is
        skipped."""
        try:
            raw = gzip.decompress(self.telemetry_path(engine, level).read_bytes())
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
            return None
        out: list[dict[str, Any]] = []
        for line in raw.splitlines():
            try:
                val = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(val, dict):
                out.append(val)
        return out

    def engine_outputs(self, engine: str) -> Path:
        """``outputs/<engine>/``: every reply of one engine (fixed-length buckets, load levels, side requests)."""
        return self.path / "outputs" / safe_name(engine, "engine label")

    def quality_dir(self, *parts: str) -> Path:
        """``quality/<part>/…``: a trajectory set (``quality/<label>/``), a task's item store
        (``quality/<task>/<label>/``) or a task's folder (``quality/gsm8k``); every part a safe name."""
        return self.path.joinpath("quality", *(safe_name(p, "quality folder") for p in parts))

    def quality_file(self, *parts: str) -> Path:
        """``quality/…/<name>``: a file of the quality folders (``quality/score.json``,
        ``quality/sampling/<label>.json``); the last part is the file's whole name."""
        *folders, name = parts
        return self.quality_dir(*folders) / safe_name(name, "quality file")

    def appliance_path(self, name: str) -> Path:
        """``appliance/<name>``: the receipt (``receipt.json``), its partial form while it is collected
        (``receipt.partial.json``) and its card (``card.txt``, ``card.json``)."""
        return self.path / "appliance" / safe_name(name, "appliance file")

    @property
    def capabilities_log(self) -> Path:
        """``probes/capabilities.jsonl``: the capability probe's requests and reply summaries (``api/probe.py``)."""
        return self.path / "probes" / CAPABILITIES_FILE

    # ---- readers: every walk over the layout is here (callers never glob a run dir themselves)
    def engines(self) -> list[str]:
        """Engine labels with a folder under ``outputs/``, sorted."""
        base = self.path / "outputs"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def levels(self, engine: str, kind: str = "outputs") -> list[str]:
        """Load-level labels of ``engine`` (``<kind>/<engine>/load-<level>/``), sorted."""
        base = self.path / kind / engine
        return sorted(d.name[len("load-"):] for d in base.glob("load-*") if d.is_dir()) if base.is_dir() else []

    def load_engines(self, kind: str = "outputs") -> list[str]:
        """Engine labels that have at least one load level under ``<kind>/``, sorted."""
        base = self.path / kind
        return sorted(p.name for p in base.iterdir() if p.is_dir() and self.levels(p.name, kind)) if base.is_dir() \
            else []

    def replies(self, engine: str, level: str) -> Iterator[Path]:
        """Reply files of one load level (``outputs/<engine>/load-<level>/<bucket>/<id>.json``), sorted."""
        return iter(self.level_files("outputs", engine, level, gz=False))

    def level_files(self, kind: str, engine: str, level: str, *, gz: bool = True) -> list[Path]:
        """``<kind>/<engine>/load-<level>/<bucket>/<id>.json`` (and ``.json.gz`` unless ``gz`` is False), sorted."""
        return _bucket_files(self.level_dir(kind, engine, level), gz=gz)

    def walk(self, kind: str, engine: str) -> Iterator[tuple[str | None, Path]]:
        """``(level or None, file)`` for the top-level buckets, then every load level, of one engine's ``<kind>``
        folder (``walk_engine_folder``)."""
        return walk_engine_folder(self.path / kind / engine)

    def input_of(self, reply_path: Path) -> Path:
        """The request body file beside a reply file: the same relative path under ``inputs/``; for a reply
        compressed on its own (``.json.gz``) or a body compressed alone, whichever of the two exists."""
        same = self.path / "inputs" / reply_path.relative_to(self.path / "outputs")
        if same.exists():
            return same
        other = same.with_name(f"{file_key(same)}.json" if same.name.endswith(".gz") else f"{same.name}.gz")
        return other if other.exists() else same

    def journals(self, engine: str | None = None) -> list[Path]:
        """Load-level journals never turned into files (an interrupted client), of one engine or all, sorted."""
        engines = [engine] if engine is not None else self.engines()
        return [p for e in engines for level in self.levels(e) for p in journal_paths(self.level_dir("outputs", e,
                                                                                                    level))]

    def extra_files(self, engine: str, folder: str, *, gz: bool = False) -> list[Path]:
        """Reply files of one extra-request folder (``outputs/<engine>/<folder>/<id>.json``, and ``.json.gz`` when
        ``gz``), sorted."""
        d = self.path / "outputs" / engine / folder
        pats = ("*.json", "*.json.gz") if gz else ("*.json",)
        return sorted(p for pat in pats for p in d.glob(pat)) if d.is_dir() else []

    def schedule_files(self) -> list[Path]:
        """Load schedules another harness left in the run dir: any ``*schedule*.jsonl`` or ``*requests*.jsonl``
        below it (one load request per line; the seed's layout, read by unique_prompts when the run dir holds no
        load level of its own), sorted. Probe logs and journals are not schedules."""
        skip = {"probes", "superseded", "quality", "evidence"}
        return sorted(p for pat in ("*schedule*.jsonl", "*requests*.jsonl") for p in self.path.rglob(pat)
                      if p.is_file() and not skip & set(p.relative_to(self.path).parts[:1])
                      and not p.name.startswith("journal"))

    def structured_folders(self, engine: str) -> list[tuple[str | None, str]]:
        """``(level or None, folder)`` of the structured-request folders of ``engine`` that exist: ``structured/alone``
        first (level None), then each ``structured/load-<level>``, sorted by folder name."""
        base = self.path / "outputs" / engine / STRUCTURED_FOLDER
        if not base.is_dir():
            return []
        out: list[tuple[str | None, str]] = [(None, STRUCTURED_ALONE)] if (base / "alone").is_dir() else []
        return out + [(d.name[len("load-"):], f"{STRUCTURED_FOLDER}/{d.name}")
                      for d in sorted(base.glob("load-*")) if d.is_dir()]

    def kat_level_folders(self, engine: str) -> list[tuple[str, str]]:
        """``(level, folder)`` of each ``kat/load-<level>`` folder of ``engine`` (``bench sweep``), by folder name."""
        base = self.path / "outputs" / engine / "kat"
        return [(d.name[len("load-"):], f"kat/{d.name}") for d in sorted(base.glob("load-*")) if d.is_dir()] \
            if base.is_dir() else []

    def _extra_folders(self, engine: str) -> list[str]:
        return [*EXTRA_FOLDERS, *(folder for _, folder in self.kat_level_folders(engine)),
                *(folder for _, folder in self.structured_folders(engine))]

    def extra_replies(self, engine: str) -> list[tuple[str, Path]]:
        """``(folder, reply file)`` of every extra request a load mixed in (``EXTRA_FOLDERS``, then the structured
        requests' folders), sorted."""
        return [(folder, p) for folder in self._extra_folders(engine) for p in self.extra_files(engine, folder)]

    def sent_keys(self, engine: str) -> list[str]:
        """File stems of every request this run sent to ``engine`` (superseded levels included)."""
        stems = [p.stem for p in (self.path / "outputs" / engine).glob("**/*.json")]
        sup = self.path / "superseded"
        if sup.is_dir():
            stems += [p.stem for p in sup.glob(f"*/outputs/{engine}/**/*.json")]
        return [s for s in stems if s not in (RETOKENIZED_FILE[:-5], CLIENT_FILE[:-5])]

    def gate_run_log(self, name: str) -> Path:
        """``probes/<gate-run>.jsonl``: one gate run's probe log (``gates/probes/collect.py`` writes it)."""
        return self.path / "probes" / f"{safe_name(name, 'gate run')}.jsonl"

    def gate_run_logs(self) -> list[Path]:
        """The gate runs' probe logs (``probes/<gate-run>.jsonl``, or ``.jsonl.gz`` in an archived run), oldest
        first: names start with a sortable UTC time. A run with both forms of one log gives the plain one. Other
        ``probes/*.jsonl`` files (the capability probe's ``capabilities.jsonl``) are not gate runs."""
        base = self.path / "probes"
        if not base.is_dir():
            return []
        found: dict[str, Path] = {}
        for p in sorted(base.glob("*.jsonl.gz")) + sorted(base.glob("*.jsonl")):  # the plain one last: it wins
            if GATE_RUN_NAME.match(gate_run_name(p)):
                found[gate_run_name(p)] = p
        return [found[k] for k in sorted(found)]

    def side_retokenized(self, engine: str) -> Path:
        """``outputs/<engine>/retokenized.json``: re-tokenized counts of the replies outside the load levels (warm-up,
        hidden probes, known answers, structured requests), keyed ``<folder>/<file key>`` (``bench/serve.py`` writes
        it, token_count reads it)."""
        return self.path / "outputs" / engine / RETOKENIZED_FILE

    def side_replies(self, engine: str) -> list[tuple[str, Path]]:
        """``(folder, reply file)`` of every request of ``engine`` outside the load levels: the warm-up
        (``warmup/``) and the extra requests a load mixed in (``EXTRA_FOLDERS``, the structured requests' folders),
        ``.json`` and ``.json.gz``, sorted by folder then name."""
        return [(folder, p) for folder in ("warmup", *self._extra_folders(engine))
                for p in self.extra_files(engine, folder, gz=True)]

    def supersede_level(self, engine: str, level: str, extras: Sequence[tuple[str, str]] = ()) -> str | None:
        """Move an interrupted level's files (inputs and outputs) to ``superseded/<n>/``; returns that folder, or None
        when the level had no files. ``extras``: ``(folder, request id)`` of the extra requests sent inside the level
        (known answers, hidden probes): their files move too, so the level's next attempt sends them again."""
        moved = None
        root = self.path / "superseded"
        n = len(list(root.iterdir())) + 1 if root.is_dir() else 1
        for kind in ("inputs", "outputs"):
            src = self.level_dir(kind, engine, level)
            if src.exists():
                dst = root / str(n) / kind / engine / src.name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(src), str(dst))
                moved = str(root / str(n))
            for folder, name in extras:
                f = self.special_path(engine, folder, name, kind)
                if f.is_file():
                    dst = root / str(n) / f.relative_to(self.path)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(f), str(dst))
                    moved = str(root / str(n))
        return moved

    def appliance_files(self, kind: str) -> list[Path]:
        """An appliance receipt's request bodies (``kind`` ``inputs``) or replies (``outputs``):
        ``<kind>/<engine>/appliance-<section>/<case>/<id>.json``, sorted."""
        return sorted(self.path.glob(f"{kind}/*/appliance-*/*/*.json"))

    def quality_sets(self) -> list[Path]:
        """The trajectory sets of the run (``quality/<label>/`` holding an ``index.json``), sorted."""
        return quality_sets_in(self.path / "quality")

    def evidence_files(self) -> list[Path]:
        """The run's record copies (``evidence/ev_<id>.json``), sorted."""
        return sorted(self.evidence_dir.glob("ev_*.json")) if self.evidence_dir.is_dir() else []

    @property
    def evidence_dir(self) -> Path:
        return self.path / "evidence"

    @property
    def sweep_path(self) -> Path:
        """``sweep.json``: a ``bench sweep`` run's points and boundary (``bench/sweep_run.py``)."""
        return self.path / SWEEP_FILE

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
