"""``gates check`` on real bench serve runs: honest runs pass what they can show; doctored copies fail.

One small run on llama-server (which honours ignore_eos and streams token ids through logprobs) and
one on the embedded llama-cpp-python engine (which drops ignore_eos silently and streams no usage).
The cheats here are edits to a copy of a recorded run — inflated usage, a repeated prompt, a short
exact-length reply — the run-dir symptoms the live cheat proxy (later) must produce.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_run import bench_ok, run_cli

pytestmark = pytest.mark.engine

FLAGS = ["--concurrency", "1,2", "--num-prompts", "6", "--max-tokens", "24", "--ignore-eos", "--warmup", "0",
         "--seed", "5"]


def verdicts(payload: dict[str, Any]) -> dict[str, str]:
    return {k: v["verdict"] for k, v in payload["gates"].items()}


@pytest.fixture(scope="module")
def server_run(llama_server_engine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("gates-server") / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, *FLAGS,
                             "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    return run_dir


def doctored(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("evidence"))
    return copy


def test_honest_llama_server_run_passes_the_run_dir_gates(server_run) -> None:
    code, payload = run_cli(["gates", "check", str(server_run)])
    v = verdicts(payload)
    assert v["token_count"] == "PASS", payload["gates"]["token_count"]
    assert v["output_length"] == "PASS", payload["gates"]["output_length"]  # llama-server honours ignore_eos
    assert v["unique_prompts"] == "PASS"
    assert all(v[g] == "NOT RUN" for g in ("caching", "hidden_probes", "rare_tokens", "spec_exact"))
    assert code == 0 and payload["verdict"] == "PASS"
    assert "12 replies" in payload["gates"]["token_count"]["reason"]
    rec = json.loads((server_run / "evidence" / f"{payload['evidence_id']}.json").read_text())
    assert rec["kind"] == "gates" and sum(a["role"] == "reply" for a in rec["artifacts"]) == 12
    # and the other files of the levels it judged, which it covers (evidence/record.py, part_folder)
    assert rec["covers"] == sorted(f"outputs/llama-server/load-{lvl}" for lvl in {a["path"].split("/")[2][5:]
                                                                               for a in rec["artifacts"]})
    assert {a["role"] for a in rec["artifacts"]} <= {"reply", "part file"}


def test_inflated_usage_fails_token_count(server_run, tmp_path) -> None:
    copy = doctored(server_run, tmp_path)
    victim = sorted((copy / "outputs" / "llama-server" / "load-c2").glob("*/*.json"))[0]
    reply = json.loads(victim.read_text())
    reply["usage"]["completion_tokens"] = round(reply["usage"]["completion_tokens"] * 1.1) + 1
    victim.write_text(json.dumps(reply))
    code, payload = run_cli(["gates", "check", str(copy)])
    assert code == 1 and verdicts(payload)["token_count"] == "FAIL"
    assert payload["gates"]["token_count"]["reason"].startswith("1/12 replies")
    assert verdicts(payload)["output_length"] == "PASS"  # token ids still say 24: the length check reads them


def test_short_exact_length_reply_fails_output_length(server_run, tmp_path) -> None:
    copy = doctored(server_run, tmp_path)
    victim = sorted((copy / "outputs" / "llama-server" / "load-c1").glob("*/*.json"))[0]
    reply = json.loads(victim.read_text())
    reply["token_ids"] = reply["token_ids"][:20]
    reply["usage"]["completion_tokens"] = 20
    victim.write_text(json.dumps(reply))
    code, payload = run_cli(["gates", "check", str(copy)])
    assert code == 1 and verdicts(payload)["output_length"] == "FAIL"


def test_repeated_prompt_fails_unique_prompts(server_run, tmp_path) -> None:
    copy = doctored(server_run, tmp_path)
    level = copy / "inputs" / "llama-server" / "load-c2"
    first, second = sorted(level.glob("*/*.json"))[:2]
    second.write_text(first.read_text())
    code, payload = run_cli(["gates", "check", str(copy)])
    assert code == 1 and verdicts(payload)["unique_prompts"] == "FAIL"


def test_embedded_engine_output_length_is_unproven_not_failed(embedded_engine, tmp_path) -> None:
    run_dir = tmp_path / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", embedded_engine.url, *FLAGS, "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    code, payload = run_cli(["gates", "check", str(run_dir)])
    v = verdicts(payload)
    assert v["output_length"] == "UNPROVEN" and "ignore_eos" in payload["gates"]["output_length"]["reason"]
    assert v["unique_prompts"] == "PASS" and v["token_count"] != "FAIL"
    assert code == 3 and payload["verdict"] == "UNPROVEN"
