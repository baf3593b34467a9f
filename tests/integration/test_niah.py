"""``quality niah`` end to end: a small grid on the real embedded engine, its resume, and the faults.

The grid is small on purpose (2 lengths × 2 depths × 1 trial); the figures of the default 3 × 3 × 3
grid are in the task report. The fault tests need no engine: a length that cannot fit the embedded
engine is refused before it starts, a dead URL is a one-line error, and a server that answers every chat
request with HTTP 500 gives a recorded, UNPROVEN run (tests/fault_server.py, real HTTP on loopback).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from inferencekit.evidence import sha256_file
from inferencekit.quality import niah
from tests.cli_run import run_cli
from tests.fault_server import fault_server

pytestmark = pytest.mark.engine

GRID = ["--lengths", "256,512", "--depths", "0.1,0.9", "--trials", "1"]
CASE_IDS = ["L256-D0.10-T0", "L256-D0.90-T0", "L512-D0.10-T0", "L512-D0.90-T0"]


@pytest.fixture(scope="module")
def first_run(embedded_engine, tmp_path_factory) -> tuple[int, dict, Path]:
    run = tmp_path_factory.mktemp("niah") / "run"
    code, out = run_cli(["quality", "niah", "--base-url", embedded_engine.url, *GRID, "--run-dir", str(run)])
    return code, out, run


def test_small_grid_on_the_embedded_engine(first_run) -> None:
    code, out, run = first_run
    assert code == 0, out  # no request failed: a measurement, no verdict
    assert out["n"] == 4 and out["failed"] == 0 and out["label"] == "llama-cpp-python"
    results = json.loads(Path(out["results_file"]).read_text())
    assert results["format"] == "inferencekit.niah.v1"
    assert [(c["length_tokens"], c["depth"], c["trials"]) for c in results["cells"]] == [
        (256, 0.1, 1), (256, 0.9, 1), (512, 0.1, 1), (512, 0.9, 1)]
    for c in results["cells"]:
        # the server's usage.prompt_tokens: the haystack plus instruction, question and chat template
        assert c["prompt_tokens_known"] == 1
        assert c["length_tokens"] + 40 <= c["prompt_tokens_mean"] <= 1.2 * c["length_tokens"] + 120, c
        assert c["hits"] == c["accuracy"] * c["trials"] and c["ci95"][0] <= c["accuracy"] <= c["ci95"][1]
    for row in results["rows"]:  # the stored reply scores as recorded
        assert row["found"] == niah.found(row["reply"], row["code"]) and row["finish_reason"] in ("stop", "length")
    assert results["hits"] == sum(r["found"] for r in results["rows"]) == out["hits"]
    # chars per token measured on this engine's own tokenizer, not assumed
    cpt = results["chars_per_token"]
    assert cpt["method"] == "measured" and cpt["source"] == "engine:llama-cpp-python/extras/tokenize"
    assert cpt["tokens"] > 0 and cpt["value"] == round(cpt["chars"] / cpt["tokens"], 4) and 3.0 < cpt["value"] < 7.0
    assert not any("assumed" in line for line in out["limitations"])

    cases = Path(out["cases_dir"])
    assert sorted(p.stem for p in cases.glob("L*.json")) == CASE_IDS
    doc = json.loads((cases / "L512-D0.90-T0.json").read_text())
    assert doc["request"]["temperature"] == 0.0 and doc["request"]["repeat_penalty"] == 1.0
    assert doc["request"]["seed"] == 0 and doc["request"]["stream"] is False
    assert doc["case"]["code"] in doc["request"]["messages"][0]["content"]
    assert isinstance(doc["prompt_tokens"], int) and "error" not in doc

    page = Path(out["heatmap"])
    assert page == run / "quality" / "niah" / "heatmap.html"
    assert "<svg" in page.read_text() and "Needle in a haystack: llama-cpp-python" in page.read_text()

    code, chk = run_cli(["evidence", "verify", out["evidence_id"]])
    # the results, the case index, and the item store the record covers: every case file and its settings.json
    assert code == 0 and chk["intact"] and chk["artifacts_checked"] == 2 + len(CASE_IDS) + 1
    rec = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    assert rec["kind"] == "quality_task" and rec["data"]["task"] == "niah"
    acc = [m for m in rec["metrics"] if m["name"] == "niah_accuracy"]
    assert len(acc) == 5 and all(m["unit"] == "fraction" and len(m["ci95"]) == 2 for m in acc)
    assert acc[-1]["subject"] == "llama-cpp-python overall" and acc[-1]["n"] == 4


def test_resume_keeps_every_case_file_and_the_earlier_record(first_run, embedded_engine) -> None:
    _, out, run = first_run
    cases = Path(out["cases_dir"])
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cases.glob("*.json")}
    results_sha = sha256_file(Path(out["results_file"]))
    code, again = run_cli(["quality", "niah", "--base-url", embedded_engine.url, *GRID, "--run-dir", str(run)])
    assert code == 0, again
    assert again["reused_replies"] == 4 and again["evidence_id"] != out["evidence_id"]
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cases.glob("*.json")} == before
    assert sha256_file(Path(again["results_file"])) == results_sha  # same requests and replies, same bytes
    assert any(line.startswith("4 of 4 replies read back from an earlier run") for line in again["limitations"])
    for ev in (out["evidence_id"], again["evidence_id"]):  # heatmap.html was rewritten: not an artifact
        code, chk = run_cli(["evidence", "verify", ev])
        assert code == 0 and chk["intact"], chk


def test_a_length_beyond_the_embedded_context_is_refused_before_the_engine_starts(tmp_path) -> None:
    run = tmp_path / "run"
    code, out = run_cli(["quality", "niah", "--lengths", "512,8000", "--run-dir", str(run)])
    assert code == 2
    assert "--lengths 8000 cannot fit" in out["error"] and "context is 4096 tokens" in out["error"]
    assert "use lengths ≤ 3950" in out["error"]  # 4096 - (ceil(overhead / 4.0) + 64 + 32)
    assert not run.exists()


def test_a_dead_url_is_a_clear_error(tmp_path) -> None:
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    code, out = run_cli(["quality", "niah", "--base-url", f"http://127.0.0.1:{port}", "--run-dir", str(run)])
    assert code == 2
    assert out["error"].startswith(f"http://127.0.0.1:{port} does not answer as an OpenAI-compatible server")
    assert "Traceback" not in out["error"] and not run.exists()


def test_failed_requests_are_recorded_as_misses_and_asked_again(tmp_path) -> None:
    run = tmp_path / "run"
    argv = ["quality", "niah", "--lengths", "64", "--depths", "0.5", "--trials", "2", "--extra-body",
            '{"fault": "http500"}', "--run-dir", str(run)]
    with fault_server() as (url, seen):
        code, out = run_cli([*argv, "--base-url", url])
        assert len([r for r in seen if "messages" in r["body"]]) == 2
        assert code == 3, out  # UNPROVEN: failed requests are missing evidence
        assert out["n"] == 2 and out["failed"] == 2 and out["hits"] == 0 and out["accuracy"] == 0.0
        assert out["chars_per_token"]["method"] == "assumed" and out["chars_per_token"]["value"] == 4.0
        assert any(line.startswith("chars per token assumed to be 4.0 (openai has no known tokenize endpoint)")
                   for line in out["limitations"])
        assert any(line.startswith("2 of 2 requests failed and count as misses") for line in out["limitations"])
        doc = json.loads((Path(out["cases_dir"]) / "L64-D0.50-T1.json").read_text())
        assert "500" in doc["error"] and "text" not in doc
        assert "1 failed" not in Path(out["heatmap"]).read_text() and "2 failed" in Path(out["heatmap"]).read_text()
        assert "assumed 4.0 chars/token" in Path(out["heatmap"]).read_text()
        code, again = run_cli([*argv, "--base-url", url])  # a failure is asked again, not kept
        assert code == 3 and again["reused_replies"] == 0
        assert len([r for r in seen if "messages" in r["body"]]) == 4
    code, chk = run_cli(["evidence", "verify", out["evidence_id"]])
    assert code == 0 and chk["intact"]
