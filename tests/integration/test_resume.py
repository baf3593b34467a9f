"""A server that dies mid-run: finished requests stay, the rest are recorded as failed, --resume completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferencekit.bench.journal import read_journal
from inferencekit.cli import main
from inferencekit.engines.launcher import start_engine, stop_engine
from inferencekit.errors import OpError
from tests.cli_run import bench_ok

pytestmark = pytest.mark.engine


def replies(run: Path, level: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(run.glob(f"outputs/*/load-{level}/*/*.json"))]


def finished_in_c1(run: Path) -> int:
    journal = list(run.glob("outputs/*/load-c1/journal.jsonl"))
    if journal:
        return len(read_journal(journal[0])[0])  # whole records only (a record being written is not counted)
    return len(list(run.glob("outputs/*/load-c1/*/*.json")))


def test_kill_engine_mid_run_then_resume(tmp_path, capsys):
    try:
        eng = start_engine("llama-cpp-python", tmp_path / "log1", tie_to_parent=True)
    except OpError as e:
        pytest.fail(f"embedded engine unavailable: {e}") if os.environ.get("CI") else pytest.skip(str(e))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "inferencekit", "bench", "serve", "--base-url", eng.url, "--concurrency", "1,2",
           "--num-prompts", "6", "--max-tokens", "48", "--warmup", "0", "--run-dir", str(run), "--json", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        # during a level, finished exchanges are journal lines; the reply files follow after the level
        while finished_in_c1(run) < 3:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the run did not get 3 replies in 300 s"
            time.sleep(0.05)
        os.killpg(eng.pid, signal.SIGKILL)  # the engine dies mid-run
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_engine(eng)
    assert proc.returncode == 3, err.decode()
    first = json.loads(out)
    assert first["verdict"] == "UNPROVEN"

    c1, c2 = replies(run, "c1"), replies(run, "c2")
    assert len(c1) == 6 and len(c2) == 6  # every request is on disk, finished or failed
    ok = [r for r in c1 if r["status"] == 200 and "error" not in r]
    assert len(ok) >= 3 and all(r["n_streamed"] == 48 or r["finish_reason"] == "stop" for r in ok)
    failed = [r for r in c1 + c2 if "error" in r]
    assert len(failed) == 12 - len(ok)
    assert all(r["status"] == 0 for r in c2)
    assert all(r["error"].startswith(("connection failed", "connection error", "server disconnected", "broken stream"))
               for r in failed)

    # a new port: resume checks identity, not the URL
    eng2 = start_engine("llama-cpp-python", tmp_path / "log2", tie_to_parent=True)
    try:
        code = main(["bench", "serve", "--resume", str(run), "--base-url", eng2.url, "--json", "--quiet"])
    finally:
        stop_engine(eng2)
    res = json.loads(capsys.readouterr().out)
    assert bench_ok(code, res) and (code == 3 or res["verdict"] is None)
    for lvl in ("c1", "c2"):
        rs = replies(run, lvl)
        assert len(rs) == 6 and all(r["status"] == 200 and "error" not in r for r in rs)
        assert res["levels"][lvl]["requests"]["completed"] == 6
    superseded = sorted(p.relative_to(run).as_posix() for p in (run / "superseded").glob("*/outputs/*/*"))
    assert superseded == ["superseded/1/outputs/llama-cpp-python/load-c1",
                          "superseded/2/outputs/llama-cpp-python/load-c2"]
    kept = sorted((run / "superseded/1/outputs").glob("*/*/*/*.json"))
    assert len(kept) == 6  # the interrupted attempt is kept, not deleted
    run_json = json.loads((run / "run.json").read_text())
    assert [r["engine"]["engine"] for r in run_json["resumes"]] == ["llama-cpp-python"]
    assert main(["evidence", "verify", res["evidence_id"], "--quiet"]) == 0
