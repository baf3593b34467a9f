"""``audit equivalence`` through the embedded engine and the float32 reference (issue 20): the statistic is computed
from real trajectories, the trajectories carry their own record, and a run no calibrated cell applies to is UNPROVEN
with the reason. The calibrated PASS/FAIL runs are in test_audit_zoo.py."""

from __future__ import annotations

import json

import pytest

from inferencekit.cli import main

pytestmark = [pytest.mark.engine]


def test_audit_on_the_embedded_engine(embedded_engine, tmp_path, capsys) -> None:
    run_dir = tmp_path / "audit"
    code = main(["audit", "equivalence", "--base-url", embedded_engine.url, "--claim", "Q4_1", "--reference", "local",
                 "--budget-tokens", "64", "--max-tokens", "32", "--seed", "3", "--run-dir", str(run_dir), "--json",
                 "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["verdict"] == "UNPROVEN", out
    st = out["statistic"]
    # llama-cpp-python names no token ids: the gap alone, on its re-tokenized text, over the tokens it produced
    assert st["name"] == "gap" and st["statistic"] is not None and st["statistic"] >= 0
    assert 0 < st["positions"] <= 2 * 32 + 4
    assert any("DiFR gap alone" in x for x in out["limitations"])
    # 32 tokens per prompt: no calibrated cell (made at 64) applies, or no table at all: UNPROVEN, and why
    assert ("max_tokens 64" in out["reason"] and "this run with" in out["reason"]
            or any("no calibration table" in x for x in out["limitations"]))
    report = json.loads((run_dir / "quality" / "audit-equivalence.json").read_text())
    assert report["prompts"] == 2 and report["failed"] == [] and report["reference"]["k"] == 20
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0


def test_text_surface_samples_both_sides_and_says_so(embedded_engine, tmp_path, capsys) -> None:
    run_dir = tmp_path / "audit-text"
    code = main(["audit", "equivalence", "--base-url", embedded_engine.url, "--claim", "Q4_1", "--reference", "local",
                 "--surface", "text", "--budget-requests", "6", "--samples", "3", "--sample-tokens", "8",
                 "--run-dir", str(run_dir), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["verdict"] == "UNPROVEN" and out["surface"] == "text", out
    st = out["statistic"]
    assert st["name"] == "mmd" and st["prompts"] == 2 and st["positions"] == 6 and 0 < st["p_value"] <= 1
    assert any("--surface text" in x for x in out["limitations"])
    files = sorted((run_dir / "quality" / "audit-text").glob("*.json"))
    assert len(files) == 2
    doc = json.loads(files[0].read_text())
    assert len(doc["engine"]) == 3 and len(doc["reference"]) == 3 and all(isinstance(t, str) for t in doc["reference"])
    # the engine sampled its whole distribution, as the reference does (llama-cpp-python truncates by default)
    assert doc["sampling"] == {"repeat_penalty": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    assert not any("top_k and min_p" in x for x in out["limitations"])
    assert main(["evidence", "verify", out["evidence_id"], "--quiet"]) == 0


def test_verify_runs_the_audit_as_a_part_on_the_embedded_engine(embedded_engine, tmp_path) -> None:
    import asyncio

    from inferencekit.api.client import Client
    from inferencekit.api.detect import detect_engine
    from inferencekit.api.endpoint import Endpoint
    from inferencekit.rundir import RunDir
    from inferencekit.verify import EMBEDDED_CLAIM, EQUIV_PART, equivalence_part

    run = RunDir.create(str(tmp_path / "verify-part"))

    async def go():
        async with Client(Endpoint.parse(embedded_engine.url), timeout_s=600) as client:
            info = await detect_engine(client, None)
            return await equivalence_part(client, info, run, 64, EMBEDDED_CLAIM, "embedded")

    part, recs = asyncio.run(go())
    assert part is not None and part["part"] == EQUIV_PART and len(recs) == 1, part["reason"]
    report = recs[0]["data"]["report"]
    assert part["verdict"] == recs[0]["verdict"] == report["verdict"] and part["reason"] == report["reason"]
    assert report["claim"] == "Q4_1" and report["surface"] == "logprob" and report["statistic"]["name"] == "gap"
    assert recs[0]["identity"]["workload"]["pool"].startswith("sharegpt-first-turns")
    # no calibrated cell is as small as one prompt (64 tokens): UNPROVEN, and it says why
    assert part["verdict"] == "UNPROVEN" and ("smallest calibrated budget" in part["reason"]
                                              or "no calibration table" in " ".join(report["limitations"]))
