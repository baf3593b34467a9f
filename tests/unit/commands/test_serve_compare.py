"""`bench compare RUN_A RUN_B` on two bench serve run dirs: the JSON payload and the card."""

import json
from pathlib import Path

from inferencekit.cli import main
from inferencekit.rundir import RunDir, write_json
from tests.unit.bench.test_compare_serve import side


def write_run(path: Path, s: dict, rec_id: str) -> Path:
    rec = {**s["record"], "evidence_id": rec_id}
    path.mkdir(parents=True)
    write_json(RunDir(path).evidence_dir / f"{rec_id}.json", rec)
    write_json(path / "run.json", {"operation": "bench.serve", "bench_record": rec_id, "prompt_set": s["prompt_set"]})
    return path


def test_compare_two_serve_runs_json_and_card(tmp_path, capsys):
    a = write_run(tmp_path / "a", side(), "ev_a")
    b = write_run(tmp_path / "b", side(scale=1.2), "ev_b")
    assert main(["bench", "compare", str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "bench serve runs" and out["a"]["record"] == "ev_a"
    assert out["findings"] == {"differs": 20}
    r = next(r for r in out["rows"] if r["point"] == "c1" and r["figure"] == "ttft_ms.p50")
    assert r["statement"].startswith("B is 20% slower in TTFT p50 [")
    assert main(["bench", "compare", str(a), str(b)]) == 0
    card = capsys.readouterr().out
    assert "bench serve runs" in card and "20% slower [" in card and "findings: differs 20" in card


def test_same_runs_say_no_difference_on_the_card(tmp_path, capsys):
    a = write_run(tmp_path / "a", side(), "ev_a")
    b = write_run(tmp_path / "b", side(), "ev_b")
    assert main(["bench", "compare", str(a), str(b)]) == 0
    card = capsys.readouterr().out
    assert ("no difference beyond noise in 20 figure(s); the widest, c1 TTFT p50: no difference beyond noise "
            "(rules out more than ±4.6%)") in card
    assert "findings: no difference 20" in card


def test_one_run_each_prints_why_unproven(tmp_path, capsys):
    a = write_run(tmp_path / "a", side(repeats=1), "ev_a")
    b = write_run(tmp_path / "b", side(repeats=1), "ev_b")
    assert main(["bench", "compare", str(a), str(b)]) == 0
    card = capsys.readouterr().out
    assert ("c1: TTFT p50: UNPROVEN — no within-run interval on A; one run on both sides: run-to-run variance not "
            "measured, so 'no difference' needs ≥ 3 repeats per run") in card
    assert "findings: UNPROVEN 20" in card
