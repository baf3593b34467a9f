"""Server telemetry live: ``bench serve`` scrapes a real llama-server's /metrics during every level.

The suite's llama-server (``--parallel 4 --metrics``) is measured twice with the same short workload: straight, and
through the cheat proxy's ``usage-inflate`` (``usage.completion_tokens`` → ⌈1.1 n⌉, timings and /metrics passed
through untouched). The honest run must find its telemetry file and deltas in the run dir and agree with the server
token for token; the proxied run must be flagged by both the level-scope check (the server's
``llamacpp:tokens_predicted_total`` delta against the replies' usage) and the per-request one (``timings.predicted_n``
against ``usage.completion_tokens``).

Needs the bench serve hunks of issue 22 item 4 in ``bench/serve.py`` (``level_telemetry`` around each level and the
``server`` block in the record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferencekit.bench.telemetry import read_telemetry
from inferencekit.cheats import running_proxy
from inferencekit.rundir import RunDir
from tests.cli_run import bench_ok, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.llama_server]

ENGINE = "llama-server"
N = 4


def bench(url: str, run_dir: Path) -> dict[str, Any]:
    """A short ``bench serve`` (one level, c2, 4 requests of ≤ 16 tokens) with a scrape every 0.5 s; its record."""
    code, out = run_cli(["bench", "serve", "--base-url", url, "--concurrency", "2", "--num-prompts", str(N),
                         "--max-tokens", "16", "--warmup", "1", "--seed", "11", "--metrics-interval", "0.5",
                         "--engine-label", ENGINE, "--run-dir", str(run_dir)])
    assert out is not None, f"bench serve printed nothing (exit {code})"
    assert bench_ok(code, out), out.get("limitations")
    (ev,) = RunDir(run_dir).evidence_files()
    rec: dict[str, Any] = json.loads(ev.read_text())
    assert rec["data"]["levels"]["c2"]["requests"]["completed"] == N
    return rec


def test_honest_llama_server_has_telemetry_and_no_flag(llama_server_engine, tmp_path: Path) -> None:
    rec = bench(llama_server_engine.url, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    lines = read_telemetry(run, ENGINE, "c2")
    assert lines is not None, "no server_metrics.jsonl.gz in the level's folder"
    kinds = [x["kind"] for x in lines]
    assert kinds.count("raw") == 2 and kinds.count("scrape") >= 2 and "no_telemetry" not in kinds
    server = rec["data"]["levels"]["c2"]["server"]
    print(f"\n[telemetry honest] scrapes {server['scrapes']} (failed {server['failed']}), "
          f"window {server['window_s']} s; "
          f"tokens {json.dumps({k: server['tokens'][k] for k in ('generated_vs_usage', 'prompt_vs_usage')})}; "
          f"prefill p50 {server['per_request']['ttft_split']['prefill_ms']['p50']} ms, rest p50 "
          f"{server['per_request']['ttft_split']['rest_ms']['p50']} ms")
    assert server["telemetry"] == "ok" and server["file"].endswith("load-c2/server_metrics.jsonl.gz")
    assert server["counters"]["llamacpp:tokens_predicted_total"]["delta"] > 0
    assert "llamacpp:requests_processing" in server["gauges"]
    gen = server["tokens"]["generated_vs_usage"]
    assert gen["status"] == "agree" and gen["server"] == gen["client"]
    assert server["tokens"]["prompt_vs_usage"]["status"] == "agree"
    assert server["per_request"]["joined"] == N and not any(server["per_request"]["disagree"].values())
    assert server["flags"] == []
    assert not any("server telemetry" in x for x in rec["limitations"])
    assert any(a["role"] == "server telemetry" for a in rec["artifacts"])


def test_usage_inflate_proxy_is_flagged(llama_server_engine, tmp_path: Path) -> None:
    with running_proxy(llama_server_engine.url, ["usage-inflate"]) as url:
        rec = bench(url, tmp_path / "run")
    server = rec["data"]["levels"]["c2"]["server"]
    gen = server["tokens"]["generated_vs_usage"]
    print(f"\n[telemetry usage-inflate] server {gen['server']} generated tokens, client usage {gen['client']}; "
          f"flags: {server['flags']}")
    assert gen["status"] == "disagree" and gen["client"] > gen["server"]
    assert server["per_request"]["disagree"]["completion_vs_usage"] == N
    flagged = [x for x in rec["limitations"] if x.startswith("server telemetry disagrees with the client")]
    assert len(flagged) == 2, rec["limitations"]
