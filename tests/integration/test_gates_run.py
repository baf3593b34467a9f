"""``gates run`` against real engines: honest engines do not FAIL, two cheats do, and ``gates check`` on the
recorded run dir gives the live verdicts back.

llama-server honours ignore_eos and streams token ids (through logprobs), so output_length can PASS
there. Its prompt cache stays on (its default) in every run here, honest and cheating alike: the caching
probes carry llama-server's per-request bypass (``cache_prompt: false``, from its dialect), so the cache
cannot serve their repeats, and a cache that does is one in front of the engine. The cheats run through
the real cheat proxy in front of the same llama-server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_run import bench_ok, run_cli

pytestmark = pytest.mark.engine

SMALL = ["--max-tokens", "24", "--echo-tokens", "48", "--cache-prompts", "4", "--sampling-prompts", "4"]


def verdicts(payload: dict[str, Any]) -> dict[str, str]:
    return {k: v["verdict"] for k, v in payload["gates"].items()}


def gate_metrics(run_dir: Path, payload: dict[str, Any], gate: str) -> dict[str, Any]:
    """One gate's metrics from the gates record the command wrote (its ``data.gates``)."""
    rec = json.loads((run_dir / "evidence" / f"{payload['evidence_id']}.json").read_text())
    return next(g["metrics"] for g in rec["data"]["gates"] if g["gate"] == gate)


@pytest.fixture(scope="module")
def honest_server_run(llama_server_engine, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    run_dir = tmp_path_factory.mktemp("gates-run") / "run"
    code, payload = run_cli(["gates", "run", "--base-url", llama_server_engine.url, "--reference-url",
                             llama_server_engine.url, *SMALL, "--run-dir", str(run_dir)])
    return code, payload, run_dir


def test_honest_llama_server_fails_no_gate(honest_server_run) -> None:
    code, payload, run_dir = honest_server_run
    v = verdicts(payload)
    assert "FAIL" not in v.values(), payload["gates"]
    assert v["output_length"] == "PASS", payload["gates"]["output_length"]
    assert v["token_count"] == "PASS", payload["gates"]["token_count"]
    assert v["caching"] in ("PASS", "UNPROVEN"), payload["gates"]["caching"]
    assert v["unique_prompts"] == v["spec_exact"] == "NOT RUN"  # no load, no second engine: not asked
    assert code == {"PASS": 0, "UNPROVEN": 3}[payload["verdict"]]
    logs = list((run_dir / "probes").glob("*.jsonl"))
    assert [p.stem for p in logs] == [payload["gate_run"]]
    lines = logs[0].read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["settings"]["probes"]["seed"] and header["engine"] == "llama-server"
    kinds = {json.loads(x).get("kind") for x in lines[1:]}
    assert {"cache_first", "cache_repeat", "echo_perturbed", "count", "ignore_eos", "sample_a2", "logprobs", "rare",
            "rare_reference"} <= kinds


def test_gates_check_rejudges_the_recorded_run_to_the_same_verdicts(honest_server_run) -> None:
    _, live, run_dir = honest_server_run
    code, again = run_cli(["gates", "check", str(run_dir)])
    assert verdicts(again) == verdicts(live)
    assert again["verdict"] == live["verdict"]
    assert {k: v["reason"] for k, v in again["gates"].items() if v["verdict"] != "NOT RUN"} == \
        {k: v["reason"] for k, v in live["gates"].items() if v["verdict"] != "NOT RUN"}


def test_the_prompt_cache_left_on_is_bypassed_and_a_cache_that_ignores_the_bypass_fails(llama_server_engine,
                                                                                          tmp_path):
    # llama-server's prompt cache is on; the probes say cache_prompt: false, so an honest server serves no repeat
    # from it. prefix-cache-only in front imitates a prefix cache that ignores that field: repeats reach the first
    # token sooner at the same decode rate, and the gate says the bypass was ignored.
    from inferencekit.cheats.proxy import running_proxy

    # 10 pairs, not 6: a FAIL needs the speedup significant by a t-test (gates/judges/caching.py), and the simulated
    # prefix cache's 1.1-1.8x on a busy host needs the pairs (a CI run's 6: 0.96 1.66 1.19 1.00 1.39 1.82, p = 0.09)
    args = ["--gates", "caching", "--max-tokens", "16", "--cache-prompts", "10"]
    # and a simulated prefill of 1 s, not the default 150 ms: on a CI host whose TTFTs swung 0.3-1.6 s between
    # requests, 150 ms was inside the noise (7 Dec 2026: 4 of 9 pairs past the limit, median 1.08x, and the
    # sequential rule PASSed it). This test is that the gate FAILs a cache that ignores the bypass, with the
    # prefix-cache reason; how often it catches the default's marginal one is measured in benchmarks/README.md
    # (sequential_calibration: PASSed in 1.0% of resampled sequences on an idle llama-server).
    code, payload = run_cli(["gates", "run", "--base-url", llama_server_engine.url, *args,
                             "--run-dir", str(tmp_path / "honest")])
    caching = payload["gates"]["caching"]
    assert caching["verdict"] in ("PASS", "UNPROVEN"), caching
    assert gate_metrics(tmp_path / "honest", payload, "caching")["cache_bypass"] == ["cache_prompt"]
    with running_proxy(llama_server_engine.url, ["prefix-cache-only"], prefill_ms=1000) as url:
        code, payload = run_cli(["gates", "run", "--base-url", url, *args, "--run-dir", str(tmp_path / "cheat")])
    caching = payload["gates"]["caching"]
    assert code == 1 and caching["verdict"] == "FAIL", caching
    assert gate_metrics(tmp_path / "cheat", payload, "caching")["cause"] == "prefix_cache"
    assert "ignores the bypass" in caching["reason"], caching
    assert "output cach" not in caching["reason"]


def test_output_cache_cheat_fails_caching(llama_server_engine, tmp_path) -> None:
    from inferencekit.cheats.proxy import running_proxy

    with running_proxy(llama_server_engine.url, ["output-cache"]) as url:
        code, payload = run_cli(["gates", "run", "--base-url", url, "--gates", "caching",
                                 "--max-tokens", "24", "--cache-prompts", "4", "--run-dir", str(tmp_path / "r")])
    caching = payload["gates"]["caching"]
    assert code == 1 and caching["verdict"] == "FAIL", caching
    assert "output cach" in caching["reason"]
    # sequential by default, but the timing pairs stop early only at PASS: all 4 go out and the fixed rule FAILs them
    assert "timing pairs of at most" not in caching["reason"], caching
    lines = [json.loads(x) for x in next((tmp_path / "r" / "probes").glob("*.jsonl")).read_text().splitlines()]
    final = next(x["sequential"] for x in lines if "sequential" in x)["caching"]["final"]["timing"]
    assert final["decision"] == "cap" and final["trials"] == 4, final


def test_fixed_sends_every_caching_pair_and_the_sequential_run_fewer_with_the_same_verdict(llama_server_engine,
                                                                                          tmp_path):
    args = ["gates", "run", "--base-url", llama_server_engine.url, "--gates", "caching", "--max-tokens", "16",
            "--cache-prompts", "6"]
    sent = {}
    for mode, extra in (("fixed", ["--fixed"]), ("sequential", [])):
        code, payload = run_cli([*args, *extra, "--run-dir", str(tmp_path / mode)])
        lines = [json.loads(x) for x in next((tmp_path / mode / "probes").glob("*.jsonl")).read_text().splitlines()]
        kinds = [x.get("kind") for x in lines[1:] if x.get("kind", "").startswith(("cache_", "echo_"))]
        sent[mode] = (payload["gates"]["caching"]["verdict"], len(kinds),
                      [x["sequential"] for x in lines if "sequential" in x])
    # every pair, its control pair and every echo pair; no sequential line
    assert sent["fixed"][1] == 2 * (6 + 6 + 4) and sent["fixed"][2] == []
    assert sent["sequential"][1] < sent["fixed"][1], sent
    assert sent["sequential"][0] == sent["fixed"][0] != "FAIL", sent  # the honest engine, prompt cache on
    rule = sent["sequential"][2][0]["caching"]
    assert rule["rules"]["timing"]["method"].startswith("SPRT") and rule["caps"] == {"timing": 6, "echo": 4}


def test_usage_inflate_cheat_fails_token_count(llama_server_engine, tmp_path) -> None:
    from inferencekit.cheats.proxy import running_proxy

    with running_proxy(llama_server_engine.url, ["usage-inflate"]) as url:
        code, payload = run_cli(["gates", "run", "--base-url", url, "--gates", "token_count",
                                 "--max-tokens", "24", "--run-dir", str(tmp_path / "r")])
    tc = payload["gates"]["token_count"]
    assert code == 1 and tc["verdict"] == "FAIL", tc
    assert "usage" in tc["reason"]


def test_bench_serve_probes_are_mixed_into_the_load_and_judged_by_gates_check(llama_server_engine, tmp_path):
    run_dir = tmp_path / "load"
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--concurrency", "1,2",
                             "--num-prompts", "6", "--max-tokens", "16", "--warmup", "0", "--probes",
                             "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    probes = sorted((run_dir / "outputs" / "llama-server" / "probes").glob("*.json"))
    assert len(probes) == 19  # 4 sampling groups (greedy, a, a again, b) + 3 logprob probes
    replies = [json.loads(p.read_text()) for p in probes]
    assert {r["level"] for r in replies} == {"c1", "c2"}  # dealt to both levels, sent inside them
    assert all(r["status"] == 200 for r in replies)
    assert all((run_dir / "inputs" / "llama-server" / "probes" / p.name).is_file() for p in probes)
    # the load metrics count load requests only
    assert all(v["requests"]["completed"] == 6 for v in payload["levels"].values())
    code, checked = run_cli(["gates", "check", str(run_dir)])
    hidden = checked["gates"]["hidden_probes"]
    assert hidden["verdict"] in ("PASS", "UNPROVEN") and "T=1 samples" in hidden["reason"], hidden
    assert checked["gates"]["caching"]["verdict"] == "NOT RUN"  # no gate run in this run dir
