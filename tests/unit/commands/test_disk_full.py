"""A run dir that stops taking writes (issue 19, item 7): a disk that fills mid-level stops the sending, keeps
what is on disk, says so in one line (exit 3), and ``--resume`` finishes the run once space is freed; a
read-only run dir is refused before anything is sent (exit 2).

The disk is a real one where the suite may mount: a small tmpfs (root in a container that allows
``mount``), filled by the fault server's hook once a set number of requests have arrived, so the
failure lands in the middle of a level. Elsewhere the journal's writes are made to raise
``OSError(ENOSPC)`` (the same error a full disk gives), and the read-only case uses permission bits.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferencekit.bench import journal as journal_mod
from inferencekit.bench.journal import read_journal
from inferencekit.cli import main
from tests.fault_server import fault_server

N = 60
FILL_AT = 12  # the disk fills as the 12th request arrives


def _mount_tmpfs(where: Path, size: str) -> str | None:
    """Mount a tmpfs at ``where``; None when done, else why not."""
    if os.geteuid() != 0:
        return "not root: cannot mount a small tmpfs"
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True, check=False)
    return None if r.returncode == 0 else f"mount refused: {r.stderr.strip() or r.returncode}"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    why = _mount_tmpfs(disk, "16m")
    if why is not None:
        pytest.skip(f"no real small disk here ({why}); test_disk_full_injected covers the same path")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> None:
    """Write zeros into ``disk/ballast`` until the filesystem refuses (ENOSPC)."""
    with open(disk / "ballast", "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def _bench(url: str, run_dir: Path, *more: str) -> list[str]:
    return ["bench", "serve", "--base-url", url, "--concurrency", "2", "--num-prompts", str(N), "--max-tokens", "4",
            "--warmup", "0", "--run-dir", str(run_dir), *more, "--json", "--quiet"]


def _on_disk(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The level's reply files and its journal records (what a failed level left)."""
    level = run_dir / "outputs" / "openai" / "load-c2"
    files = [json.loads(p.read_text()) for p in level.glob("*/*.json")]
    journal = level / "journal.jsonl"
    return files, len(read_journal(journal)[0]) if journal.is_file() else 0


def _resume_finishes(run_dir: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "serve", "--resume", str(run_dir), "--base-url", url, "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 3), out
    level = out["levels"]["c2"]["requests"]
    assert level["total"] == level["completed"] == N
    files, left = _on_disk(run_dir)
    assert len(files) == N and left == 0 and all(r["status"] == 200 and "error" not in r for r in files)
    kept = list((run_dir / "superseded").glob("*/outputs/openai/load-c2/*/*.json"))
    assert kept, "the stopped attempt's replies are kept under superseded/"
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0


def _stopped(code: int, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == 3 and doc["exit_code"] == 3, doc
    assert "No space left on device" in out.err and "stopped sending in level c2" in out.err
    assert "journal.jsonl" in out.err  # the file that could not be written
    assert "--resume" in out.err and "Traceback" not in out.err
    assert out.err.count("\n") == 1, out.err  # one line
    return doc


def test_disk_full_on_a_real_small_disk(small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = small_disk / "run"
    filled: list[int] = []

    def hook(n: int) -> None:
        if n == FILL_AT and not filled:
            _fill(small_disk)
            filled.append(n)

    with fault_server(on_request=hook) as (url, seen):
        code = main(_bench(url, run_dir))
        doc = _stopped(code, capsys)
        sent = len(seen)
        assert filled and sent < N // 2, f"{sent} of {N} sent: sending did not stop when the disk filled"
        files, records = _on_disk(run_dir)
        # what finished before the disk filled is there, whole (the last page's slack may take one or two more)
        assert len(files) + records == doc["stopped"]["on_disk"] > 0
        assert doc["stopped"]["on_disk"] + doc["stopped"]["lost"] == doc["stopped"]["sent"] == sent
        (small_disk / "ballast").unlink()  # space is freed
        _resume_finishes(run_dir, url, capsys)


class _FullAfter:
    """A journal file whose writes fail with ENOSPC after ``ok`` of them (a disk filling mid-level)."""

    def __init__(self, f: Any, ok: int) -> None:
        self._f, self._ok = f, ok

    def write(self, data: bytes) -> int:
        if self._ok <= 0:
            self._f.write(data[: len(data) // 2])  # a partial record, as a full disk leaves
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self._f.name))
        self._ok -= 1
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def test_disk_full_injected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    real_open = open

    def full_open(path: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        f = real_open(path, mode, *a, **kw)
        return _FullAfter(f, 8) if str(path).endswith("journal.jsonl") and "a" in mode else f

    monkeypatch.setattr(journal_mod, "open", full_open, raising=False)
    run_dir = tmp_path / "run"
    with fault_server() as (url, seen):
        code = main(_bench(url, run_dir))
        doc = _stopped(code, capsys)
        assert len(seen) < N // 2, f"{len(seen)} of {N} sent after the journal failed"
        files, records = _on_disk(run_dir)
        # the journal was cut back to its last whole record and then materialised: the 8 written are reply files
        assert len(files) == doc["stopped"]["on_disk"] == 8 and records == 0
        assert all(r["status"] == 200 for r in files)
        monkeypatch.undo()  # the disk has room again
        _resume_finishes(run_dir, url, capsys)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that cannot be written: a tmpfs remounted read-only as root, else permission bits."""
    where = tmp_path / "ro"
    if os.geteuid() == 0:
        why = _mount_tmpfs(where, "4m")
        if why is not None:
            pytest.skip(f"root without mount cannot make a read-only folder ({why})")
        yield where
        subprocess.run(["umount", "-l", str(where)], check=False)
    else:
        where.mkdir()
        yield where
        where.chmod(0o755)


def _make_read_only(where: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    else:
        for p in [where, *where.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)


def test_read_only_run_dir_is_refused_before_anything_is_sent(read_only_dir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = read_only_dir / "run"
    with fault_server() as (url, seen):
        assert main(["bench", "serve", "--base-url", url, "--concurrency", "1", "--num-prompts", "4",
                     "--max-tokens", "4", "--warmup", "0", "--run-dir", str(run_dir), "--quiet"]) in (0, 3)
        capsys.readouterr()
        before = len(seen)
        _make_read_only(read_only_dir)
        for argv in (["bench", "serve", "--resume", str(run_dir), "--base-url", url],  # an existing run dir
                     _bench(url, read_only_dir / "new")[:-2],  # a new one under a read-only folder
                     _bench(url, run_dir / "outputs")[:-2]):  # an existing folder that holds no run
            code = main([*argv, "--quiet"])
            err = capsys.readouterr().err
            assert code == 2, (argv, err)
            assert "Traceback" not in err and err.count("\n") == 1, err
            assert "Read-only file system" in err or "Permission denied" in err, err
        assert len(seen) == before  # nothing was sent
