"""``bench sweep`` against llama.cpp's llama-server (``--parallel 4``): every point is a normal level of one bench run
dir, judged against the SLO with its interval, with the known answers' order-gate verdict at that load, and the
run dir reads back through ``gates check``.

The SLOs here are chosen so the outcome does not depend on this machine's speed (one that every point meets, one
that none can): where the boundary falls between points is judged on recorded replies in
tests/unit/bench/test_sweep.py and test_sweep_point.py. llama-server with 4 slots is not batch-invariant: a known
answer sent beside load requests may differ from its copy sent alone (docs/gates.md measured 3 of 4 at c4), so a
point's order verdict is PASS or FAIL here, and the sweep's verdict must follow it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import run_cli

pytestmark = [pytest.mark.engine, pytest.mark.llama_server]

SMALL = ["--num-prompts", "6", "--max-tokens", "8", "--warmup", "1", "--kat-max-tokens", "16"]


def test_a_grid_sweep_judges_every_point_and_carries_the_known_answers(llama_server_engine, tmp_path):
    run = tmp_path / "grid"
    code, out = run_cli(["bench", "sweep", "--base-url", llama_server_engine.url, "--concurrency", "1,2",
                         "--slo-target", "ttft_p50=600000", "--kat", "2", "--reset-cache", *SMALL,
                         "--run-dir", str(run)])
    assert out is not None, code
    doc = json.loads((run / "sweep.json").read_text())
    assert doc["format"] == "inferencekit.sweep.v1" and doc["axis"] == "concurrency"
    # llama-server has no prefix-cache reset endpoint: each point says it was not reset, and why
    assert [(x["level"], x["reset"]) for x in doc["cache_reset"]["points"]] == [("c1", False), ("c2", False)]
    assert "no known prefix-cache reset endpoint" in doc["cache_reset"]["points"][0]["why"]
    assert [p["label"] for p in doc["points"]] == ["c1", "c2"] and all(p["meets"] for p in doc["points"])
    for p in doc["points"]:
        f = p["figures"]["ttft_p50"]
        assert f["n"] == 6 and f["ci95"] is not None and f["ci95"][0] <= f["value"] <= f["ci95"][1]
        c = p["correctness"]
        assert c["verdict"] in ("PASS", "FAIL") and f"2 known-answer requests alone vs inside load level " \
            f"{p['label']}:" in c["reason"], c
        assert len(list((run / "outputs" / "llama-server" / f"kat/load-{p['label']}").glob("*.json"))) == 2
    # every point met the SLO: the boundary lies above the grid, and the sweep does not call that a PASS; known
    # answers that differ under load make it a FAIL
    assert not doc["boundary"]["found"] and doc["boundary"]["value"] == 2.0
    verdicts = {p["correctness"]["verdict"] for p in doc["points"]}
    want = "FAIL" if "FAIL" in verdicts else "UNPROVEN"
    assert out["verdict"] == want and code == {"FAIL": 1, "UNPROVEN": 3}[want]
    assert out["correctness_at_boundary"]["verdict"] == doc["points"][1]["correctness"]["verdict"]
    record = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    assert record["data"]["sweep"]["boundary"] == doc["boundary"] and set(record["data"]["levels"]) == {"c1", "c2"}
    assert any(a["path"] == "sweep.json" for a in record["artifacts"])
    code, checked = run_cli(["gates", "check", str(run)])
    order = checked["gates"]["order"]  # both points' copies against the copies sent alone
    assert order["verdict"] == ("FAIL" if "FAIL" in verdicts else "PASS")
    assert "2 known-answer requests alone vs inside load level c1, c2" in order["reason"], order


def test_a_search_that_no_point_can_meet_walks_down_to_its_minimum(llama_server_engine, tmp_path):
    run = tmp_path / "search"
    code, out = run_cli(["bench", "sweep", "--base-url", llama_server_engine.url, "--slo-target", "ttft_p50=0.001",
                         "--start", "2", "--min", "1", "--kat", "0", *SMALL, "--run-dir", str(run)])
    assert code == 3 and out["verdict"] == "UNPROVEN"
    doc = json.loads((Path(run) / "sweep.json").read_text())
    assert [p["value"] for p in doc["points"]] == [2.0, 1.0]  # halved once, then the floor
    assert all(p["certain"] == "fail" and not p["meets"] for p in doc["points"])
    assert doc["boundary"]["value"] is None and "no point met the SLO" in doc["boundary"]["reason"]
    assert all(p["correctness"]["verdict"] == "NOT RUN" for p in doc["points"])

    # finishing a sweep that is already finished sends nothing: the walk retraces its points from their files
    before = sorted(p.relative_to(run) for p in run.glob("outputs/**/*.json"))
    code2, again = run_cli(["bench", "sweep", "--resume", str(run), "--base-url", llama_server_engine.url])
    assert code2 == 3 and again["boundary"] == out["boundary"]
    assert [p["value"] for p in again["points"]] == [2.0, 1.0]
    assert sorted(p.relative_to(run) for p in run.glob("outputs/**/*.json")) == before
