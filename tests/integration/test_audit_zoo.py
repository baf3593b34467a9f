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


def test_the_honest_embedded_engine_passes_with_its_power(embedded_engine, tmp_path, capsys) -> None:
    code, out = _audit(embedded_engine.url, tmp_path / "honest", capsys)
    assert code == 0 and out["verdict"] == "PASS", out
    assert out["statistic"]["name"] == "gap"  # llama-cpp-python names no token ids
    assert "within the honest threshold" in out["reason"] and "would detect" in out["reason"]
    assert "not ruled out" in out["reason"]
