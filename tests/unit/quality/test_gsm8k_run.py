"""``--paired-with``: finding the other run's rows through its evidence record, and refusing what cannot be checked."""

from __future__ import annotations

import json

import pytest

from inferencekit.errors import OpError
from inferencekit.evidence import artifact
from inferencekit.quality.gsm8k import pair_problem
from inferencekit.quality.gsm8k_run import load_paired_run
from inferencekit.quality.task_run import save_task_record
from inferencekit.rundir import RunDir

SETTINGS = {"dataset": "gsm8k-test", "dataset_sha256": "a" * 64, "prompt_sha256": "b" * 64, "max_tokens": 48,
            "temperature": 0.0, "chat_template_kwargs": None, "backend": "builtin", "seed": 0}
ROWS = [{"id": "gsm8k-test-0000", "target": "18", "extracted": "18", "method": "hash", "correct": True},
        {"id": "gsm8k-test-0001", "target": "3", "extracted": "4", "method": "last_number", "correct": False}]


@pytest.fixture
def earlier(tmp_path):
    run = RunDir.create(tmp_path / "run")
    run.update_run(command=["quality", "gsm8k"], operation="quality gsm8k")
    results = run.path / "quality" / "gsm8k" / "eng.jsonl"
    results.parent.mkdir(parents=True)
    results.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    rec = save_task_record(run, task="gsm8k", label="eng", summary="test", engine={"engine": "x"}, model="m",
                           workload={}, metrics=[], artifacts=[artifact(results, run.path, "gsm8k_results")],
                           missing=[], limitations=[],
                           data={"settings": SETTINGS, "results_file": "quality/gsm8k/eng.jsonl"})
    return rec, results


def test_a_run_is_found_by_evidence_id_and_by_results_file(earlier):
    rec, results = earlier
    by_id = load_paired_run(rec["evidence_id"])
    by_file = load_paired_run(str(results))
    for got in (by_id, by_file):
        assert got["evidence_id"] == rec["evidence_id"] and got["rows"] == ROWS and got["settings"] == SETTINGS
    assert pair_problem(SETTINGS, by_id["settings"]) is None


def test_an_edited_results_file_is_refused_both_ways(earlier):
    rec, results = earlier
    results.write_text(results.read_text().replace('"correct": false', '"correct": true'))
    with pytest.raises(OpError, match="changed after the record was written"):
        load_paired_run(rec["evidence_id"])
    with pytest.raises(OpError, match="no intact quality gsm8k evidence record lists this file"):
        load_paired_run(str(results))


def test_an_edited_record_is_refused(earlier, tmp_path):
    rec, _ = earlier
    path = tmp_path / "run" / "evidence" / f"{rec['evidence_id']}.json"
    doc = json.loads(path.read_text())
    doc["data"]["settings"]["max_tokens"] = 1024  # claim other settings than were run
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    with pytest.raises(OpError, match="edited after it was written"):
        load_paired_run(str(edited))


def test_another_kind_of_record_is_refused(tmp_path):
    run = RunDir.create(tmp_path / "r2")
    run.update_run(command=[], operation="quality niah")
    rec = save_task_record(run, task="niah", label="eng", summary="t", engine={}, model="m", workload={},
                           metrics=[], artifacts=[], missing=[], limitations=[], data={})
    with pytest.raises(OpError, match="not a quality gsm8k record"):
        load_paired_run(rec["evidence_id"])


def test_a_mismatch_names_each_differing_setting_with_both_values():
    why = pair_problem({**SETTINGS, "max_tokens": 64, "backend": "lm-eval"}, SETTINGS)
    assert "max_tokens (run A: 64, run B: 48)" in why and 'backend (run A: "lm-eval", run B: "builtin")' in why
