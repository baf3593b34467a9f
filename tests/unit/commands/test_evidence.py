"""``evidence verify`` and ``bench export`` on a real ``bench serve`` run (fault server, tests/fault_server.py) that is
then tampered with (issue 19, item 5): verify names what each record covers and every change, by id and by path; a
record file that no longer reads as one is changed, not a user error; export refuses a level that changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from inferencekit.cli import main
from tests.cli_run import run_cli
from tests.fault_server import fault_server

N = 3


@pytest.fixture
def bench_run(tmp_path: Path) -> tuple[Path, str]:
    run_dir = tmp_path / "run"
    with fault_server() as (url, _):
        code, out = run_cli(["bench", "serve", "--base-url", url, "--concurrency", "1", "--num-prompts", str(N),
                             "--max-tokens", "4", "--warmup", "0", "--run-dir", str(run_dir)])
    assert code in (0, 3) and out["levels"]["c1"]["requests"]["completed"] == N, out
    return run_dir, out["evidence_id"]


def _verify(arg: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main(["evidence", "verify", arg, "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    code_card = main(["evidence", "verify", arg])
    return code, doc, capsys.readouterr().out if code_card == code else "card and --json disagree"


def test_verify_says_which_record_covers_what(bench_run, capsys) -> None:
    run_dir, rid = bench_run
    code, doc, card = _verify(rid, capsys)
    assert code == 0 and doc["intact"] is True
    (row,) = doc["records"]
    # replies, request bodies, the level's client.json and its server telemetry (the fault server has no /metrics:
    # the file says so)
    assert row["kind"] == "bench" and row["files"] == 2 * N + 2
    assert row["part"] == "inputs/openai/load-c1, outputs/openai/load-c1"
    assert f"{rid}  bench: inputs/openai/load-c1, outputs/openai/load-c1 — {2 * N + 2} file(s)" in card
    assert "intact" in card


def test_an_added_reply_is_changed_by_id_and_by_path_and_export_refuses_the_level(bench_run, capsys) -> None:
    run_dir, rid = bench_run
    reply = next((run_dir / "outputs" / "openai" / "load-c1").glob("*/*.json"))
    extra = reply.with_name("extra.json")
    shutil.copy(reply, extra)  # one more reply in a level: a 4-request level exported as if it were the run's
    rel = extra.relative_to(run_dir).as_posix()
    for arg in (rid, str(run_dir / "evidence" / f"{rid}.json")):
        code, doc, card = _verify(arg, capsys)
        assert code == 1 and doc["intact"] is False, arg
        assert any(f"artifact added: {rel}" in p for p in doc["problems"]), doc["problems"]
        assert "CHANGED" in card and "artifact added" in card
    assert main(["bench", "export", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"level c1: its files do not match the bench record {rid}" in err
    assert f"artifact added: {rel}" in err and not (run_dir / "export").exists()
    extra.unlink()
    assert main(["bench", "export", str(run_dir), "--quiet"]) == 0  # as the run left it: exported


def test_a_record_file_that_is_not_json_is_changed_not_a_user_error(bench_run, capsys) -> None:
    run_dir, rid = bench_run
    copy = run_dir / "evidence" / f"{rid}.json"
    copy.write_bytes(copy.read_bytes()[:40])  # truncated: not JSON any more
    code, doc, card = _verify(str(copy), capsys)
    assert code == 1 and doc["intact"] is False
    assert doc["problems"] == [f"{copy}: not a readable evidence record (not JSON)"]
    assert "CHANGED" in card
    code, doc, _ = _verify(rid, capsys)  # by id: the store's copy, against the run dir's copy that changed
    assert code == 1 and any("copy of the record differs" in p for p in doc["problems"])
    assert main(["evidence", "verify", str(run_dir / "nope.json")]) == 2  # no such file or record: a user error
