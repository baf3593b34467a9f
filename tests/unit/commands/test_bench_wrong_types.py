"""``bench serve`` against a server whose events carry wrong-typed fields (issue 19, item 2): each of the issue's
list of wrong types, sent over real HTTP/SSE by the fault server (tests/fault_server.py ``WRONG_TYPES``), makes its
reply a recorded protocol error that names the field; the run ends with a record, and a run killed mid-level
finishes with ``--resume`` against the same server (the interrupted level runs again whole, docs/design.md). The
same holds for a stream stalled past ``--timeout`` and for a server killed mid-level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inferencekit.cli import main
from tests.cli_run import run_cli
from tests.fault_server import WRONG_TYPES, fault_server

N = 3


def _bench(url: str, run_dir: Path, fault: str, n: int = N) -> list[str]:
    return ["bench", "serve", "--base-url", url, "--concurrency", "1", "--num-prompts", str(n), "--max-tokens", "4",
            "--warmup", "0", "--extra-body", json.dumps({"fault": fault}), "--run-dir", str(run_dir)]


def _replies(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "outputs").glob("*/load-c1/*/*.json"))]


@pytest.mark.parametrize("field", list(WRONG_TYPES))
def test_a_wrong_typed_field_is_a_recorded_protocol_error_and_the_run_ends_with_a_record(field, tmp_path, capsys):
    # failed before 19: TypeError/KeyError/AttributeError after the level was sent: exit 1, no record
    with fault_server() as (url, seen):
        code, out = run_cli(_bench(url, tmp_path / "run", f"wrong:{field}"))
    assert code == 3 and out["verdict"] == "UNPROVEN", out  # every request failed: a result, not a crash
    assert len(seen) == N
    replies = _replies(tmp_path / "run")
    named = WRONG_TYPES[field][1]
    assert len(replies) == N and all(r["status"] == 200 and r["error"].startswith("protocol error: ")
                                     and named in r["error"] for r in replies), [r.get("error") for r in replies]
    level = out["levels"]["c1"]["requests"]
    assert level["total"] == N and level["completed"] == 0 and level["failed"] == N
    assert any(named in e for e in level["errors"])
    capsys.readouterr()
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0  # the record lists every reply


def test_a_run_killed_mid_level_against_wrong_types_finishes_with_resume(tmp_path, capsys):
    # failed before 19: --resume derived the journalled replies with the same code and died the same way
    run_dir = tmp_path / "run"
    n = 12
    proc: dict[str, subprocess.Popen[bytes]] = {}

    def kill_at(k: int) -> None:
        if k == 6 and "p" in proc:
            os.kill(proc["p"].pid, signal.SIGKILL)  # the client dies as the 6th request arrives

    with fault_server(on_request=kill_at) as (url, seen):
        proc["p"] = subprocess.Popen([sys.executable, "-m", "inferencekit", *_bench(url, run_dir, "wrong:usage", n),
                                      "--json", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = proc["p"].communicate(timeout=120)
        assert proc["p"].returncode == -signal.SIGKILL, err.decode()
        assert not list((run_dir / "evidence").glob("ev_*.json"))  # killed before its record
        before = len(seen)
        code, out = run_cli(["bench", "serve", "--resume", str(run_dir), "--base-url", url])
    assert code == 3 and out["verdict"] == "UNPROVEN", out
    replies = _replies(run_dir)
    assert len(replies) == n and len({r["id"] for r in replies}) == n
    assert all(r["error"] == "protocol error: usage is str, expected an object" for r in replies)
    assert len(seen) - before == n  # the interrupted level runs again whole (bench/serve.py), each request once
    assert list((run_dir / "superseded").glob("*/outputs/*/load-c1"))  # the killed attempt is kept
    capsys.readouterr()
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0


def test_streams_without_a_token_event_complete_no_request_and_add_no_throughput(tmp_path):
    # issue 19 (4): a well-formed stream that carries no output (role, finish "stop", usage 0, [DONE]) counted as
    # completed, its usage in throughput; now each is a "no tokens" failure of the level, and the run still ends
    with fault_server(empty_replies=True) as (url, _):
        code, out = run_cli(["bench", "serve", "--base-url", url, "--concurrency", "1", "--num-prompts", str(N),
                             "--max-tokens", "4", "--warmup", "0", "--run-dir", str(tmp_path / "run")])
    level = out["levels"]["c1"]
    assert code == 3 and level["requests"]["completed"] == 0 and level["requests"]["no_tokens"] == N, out
    assert level["throughput"]["output_throughput_tok_s"] is None and level["ttft_ms"]["n"] == 0
    assert all(r["no_tokens"] is True and "error" not in r for r in _replies(tmp_path / "run"))


def test_a_stream_stalled_past_timeout_is_recorded_as_a_timeout_and_the_run_ends(tmp_path, capsys):
    # issue 19, item 1 and its "Done when": a server silent mid-stream for an hour under --timeout 2; before 19 the
    # tapped read waited for the body's end outside the limit and the run never returned. Each reply is a timeout
    # with the token before the stall kept, each request went out once, and the run ends with its record
    with fault_server() as (url, seen):
        code, out = run_cli([*_bench(url, tmp_path / "run", "stall:3600"), "--timeout", "2"])
    assert code == 3 and out["verdict"] == "UNPROVEN", out
    assert len(seen) == N  # sent once each: a timeout is not a stale connection
    replies = _replies(tmp_path / "run")
    assert len(replies) == N and all(r["status"] == 200 and r["error"].startswith(
        "timeout: no complete reply within 2 s") and r["text"] == "Hel" and r["done"] is False for r in replies), \
        [r.get("error") for r in replies]
    level = out["levels"]["c1"]["requests"]
    assert level["total"] == N and level["completed"] == 0 and level["failed"] == N
    capsys.readouterr()
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0


_KILLED_SERVER = """
import os, signal, sys, threading
from tests.fault_server import fault_server

kill_at = int(sys.argv[1])
with fault_server(on_request=lambda n: os.kill(os.getpid(), signal.SIGKILL) if n == kill_at else None) as (url, _):
    print(url, flush=True)
    threading.Event().wait()
"""


def test_a_server_killed_mid_level_leaves_finished_replies_and_failures_recorded_and_resume_finishes(tmp_path, capsys):
    # issue 19's campaign: a killed server recorded per request. The server process SIGKILLs itself as the 5th
    # chat request arrives: the 4 before it are kept as completed, the 5th and every later one is a recorded
    # failure (no request missing, none sent twice), the run ends with its record; --resume against a server
    # that answers again finishes it
    n, kill_at = 8, 5
    run_dir = tmp_path / "run"
    root = Path(__file__).resolve().parents[3]
    server = subprocess.Popen([sys.executable, "-c", _KILLED_SERVER, str(kill_at)], cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    with server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            code, out = run_cli(_bench(url, run_dir, "", n))
            assert server.wait(timeout=30) == -signal.SIGKILL
        finally:
            if server.poll() is None:
                server.kill()
    assert code == 3 and out["verdict"] == "UNPROVEN", out
    replies = _replies(run_dir)
    assert len(replies) == n and len({r["id"] for r in replies}) == n
    ok = [r for r in replies if "error" not in r]
    failed = [r for r in replies if "error" in r]
    assert len(ok) == kill_at - 1 and all(r["status"] == 200 and r["text"] == "Hello" for r in ok)
    assert len(failed) == n - kill_at + 1 and all(r["status"] == 0 for r in failed), [r["error"] for r in failed]
    level = out["levels"]["c1"]["requests"]
    assert level["total"] == n and level["completed"] == kill_at - 1 and level["failed"] == n - kill_at + 1
    capsys.readouterr()
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0
    with fault_server() as (url, seen):
        code, out = run_cli(["bench", "serve", "--resume", str(run_dir), "--base-url", url])
    assert code in (0, 3) and out["levels"]["c1"]["requests"]["completed"] == n, out
    assert len(seen) == n  # the level runs again whole (bench/serve.py), each request once
