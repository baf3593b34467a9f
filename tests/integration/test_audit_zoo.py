"""The calibrated equivalence audit through real engines (issue 20): a substitute FAILs, the honest embedded engine
PASSes with a power statement. One zoo member (q4_0, ``make zoo ZOO=q4_0``) served by llama-server claims to be the
embedded model's Q4_1; the verdicts read the calibration table shipped in the package
(benchmarks/equivalence_calibration.py --table --ship).

Greedy decoding and the seeded prompt draw make each audit deterministic on one machine; the false-alarm rate of the
honest verdict is the calibration's held-out figure, named in its reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferencekit.cli import main
from inferencekit.engines.launcher import RunningEngine, start_engine, stop_engine
from inferencekit.engines.recipes import cache_root
from inferencekit.errors import OpError
from inferencekit.quality.equivalence_run import load_table
from tests.conftest import _missing

pytestmark = [pytest.mark.engine]

AUDIT = ["--claim", "Q4_1", "--reference", "local", "--budget-tokens", "300", "--json", "--quiet"]


@pytest.fixture(scope="module")
def q4_0_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    gguf = cache_root() / "zoo" / "smollm2-135m-q4_0.gguf"
    if not gguf.is_file():
        _missing("the q4_0 zoo member", f"{gguf} is missing (make zoo ZOO=q4_0)")
    try:
        eng = start_engine("llama-server", tmp_path_factory.mktemp("q4_0-log"), tie_to_parent=True, gguf=gguf,
                           parallel=4)
    except OpError as e:
        _missing("llama-server", f"{e} (make llama-server)")
        raise
    yield eng
    stop_engine(eng)


def _audit(url: str, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["audit", "equivalence", "--base-url", url, *AUDIT, "--run-dir", str(run_dir)])
    return code, json.loads(capsys.readouterr().out)


def test_the_shipped_table_covers_the_embedded_claim() -> None:
    cells, source = load_table(None)
    assert source.startswith("shipped")
    q41 = [c for c in cells if c["claim"] == "Q4_1" and c["budget"] == 300]
    assert {c["statistic"] for c in q41} == {"kl+gap", "gap"}
    assert all(c["threshold"] is not None and c["honest"]["fit_runs"] >= 19 for c in q41)


def test_q4_0_claiming_q4_1_fails(q4_0_server, tmp_path, capsys) -> None:
    code, out = _audit(q4_0_server.url, tmp_path / "sub", capsys)
    assert code == 1 and out["verdict"] == "FAIL", out
    st = out["statistic"]
    assert st["name"] == "kl+gap" and st["statistic"] > 0
    assert "is above the honest threshold" in out["reason"] and "held-out honest runs" in out["reason"]
    # llama-server names token ids, so the first-token test ran beside the verdict, for information only
    [info] = out["informational"]
    assert info["method"] == "first_token" and info["budget_used"] >= 45
    assert info["statistic"]["statistic"] > 0 and info["statistic"]["prompts"] >= 45


def test_the_honest_embedded_engine_passes_with_its_power(embedded_engine, tmp_path, capsys) -> None:
    code, out = _audit(embedded_engine.url, tmp_path / "honest", capsys)
    assert code == 0 and out["verdict"] == "PASS", out
    assert out["statistic"]["name"] == "gap"  # llama-cpp-python names no token ids
    assert out["informational"] == []  # so the first-token test, which pairs lists by id, did not run
    assert "within the honest threshold" in out["reason"] and "would detect" in out["reason"]
    assert "not ruled out" in out["reason"]


def test_calibrate_builds_a_table_the_audit_reads(embedded_engine, q4_0_server, tmp_path, capsys) -> None:
    """``audit calibrate`` through the real engines, smallest size: 4 runs of 2 prompts each. Four honest runs
    cannot set a threshold at any α, so the table says so and the audit judged by it is UNPROVEN, naming why."""
    table = tmp_path / "table.json"
    code = main(["audit", "calibrate", "--claim", "Q4_1", "--honest", f"embedded={embedded_engine.url}",
                 "--substitute", f"q4_0={q4_0_server.url}", "--runs", "4", "--run-budget", "100", "--reference",
                 "local", "--out", str(table), "--run-dir", str(tmp_path / "cal"), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["runs_made"] == {"embedded": 4, "q4_0": 4}
    recs = (tmp_path / "cal" / "calibration" / "Q4_1" / "b100" / "embedded.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["run"] for r in recs) == [0, 1, 2, 3]
    doc = json.loads(table.read_text())
    assert doc["made_by"] == "inferencekit audit calibrate" and doc["reference"]["dtype"] == "float32"
    gap = [c for c in doc["cells"] if c["statistic"] == "gap"]  # llama-cpp-python names no ids: gap alone
    assert [c["budget"] for c in gap] == [100]
    cell = gap[0]
    assert cell["threshold"] is None and cell["honest"]["fit_runs"] == 2 and cell["honest"]["heldout_runs"] == 2
    assert cell["substitutes"][0]["name"] == "q4_0" and cell["substitutes"][0]["runs"] == 4
    # resuming makes nothing new
    code = main(["audit", "calibrate", "--claim", "Q4_1", "--honest", f"embedded={embedded_engine.url}",
                 "--substitute", f"q4_0={q4_0_server.url}", "--runs", "4", "--run-budget", "100", "--reference",
                 "local", "--out", str(table), "--run-dir", str(tmp_path / "cal"), "--json", "--quiet"])
    assert code == 0 and json.loads(capsys.readouterr().out)["runs_made"] == {"embedded": 0, "q4_0": 0}
    code = main(["audit", "equivalence", "--base-url", embedded_engine.url, "--claim", "Q4_1", "--reference",
                 "local", "--budget-tokens", "100", "--table", str(table), "--run-dir", str(tmp_path / "a"), "--json",
                 "--quiet"])
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["verdict"] == "UNPROVEN" and "has no threshold (too few honest runs)" in verdict["reason"]


def test_first_token_surface_fails_q4_0_claiming_f16(q4_0_server, tmp_path, capsys) -> None:
    code = main(["audit", "equivalence", "--base-url", q4_0_server.url, "--claim", "F16", "--reference", "local",
                 "--surface", "first-token", "--run-dir", str(tmp_path / "ft"), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["verdict"] == "FAIL", out
    assert out["surface"] == "first_token" and out["statistic"]["name"] == "first_token"
    assert out["statistic"]["prompts"] >= 45  # of 50 requests: a few prompts may be tokenized otherwise
    assert "first_token = " in out["reason"] and "requests" in out["reason"]
    assert any("first-token surface" in x for x in out["limitations"])


def test_first_token_surface_on_an_engine_without_token_ids_is_unproven(embedded_engine, tmp_path, capsys) -> None:
    code = main(["audit", "equivalence", "--base-url", embedded_engine.url, "--claim", "Q4_1", "--reference",
                 "local", "--surface", "first-token", "--budget-requests", "10", "--run-dir", str(tmp_path / "ft"),
                 "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "UNPROVEN" and code != 0, out
    assert out["statistic"]["statistic"] is None
    assert any("10 prompt(s) without token ids" in x for x in out["limitations"])
    assert "name no token ids" in out["reason"]
