"""The lm-eval backend's pure parts: the task file, the command line, refused fields, reading lm-eval's output.

The output files in tests/fixtures/lmeval/ are real lm-eval 0.4.13 output (see its README.md):
``engine/`` from the integration run on the embedded engine (SmolLM2-135M got all 5 wrong),
``scripted/`` from a loopback server with fixed replies on which strict-match and flexible-extract
disagree (capture_scripted.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from inferencekit.data.gsm8k import load_gsm8k
from inferencekit.errors import OpError
from inferencekit.quality.gsm8k import PROMPT_TEMPLATE
from inferencekit.quality.gsm8k_lmeval import (
    TASK_NAME,
    lm_eval_argv,
    parse_results,
    parse_samples,
    refused_settings,
    write_task,
)
from tests.hide import hide_modules
from tests.paths import FIXTURES

FIX = FIXTURES / "lmeval"


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# --------------------------------------------------------------------------- results

def test_results_of_the_engine_run():
    r = parse_results(_json(FIX / "engine" / "results.json"), TASK_NAME)
    assert (r["strict_accuracy"], r["flexible_accuracy"]) == (0.0, 0.0)
    assert (r["strict_stderr"], r["flexible_stderr"]) == (0.0, 0.0)
    assert (r["n"], r["n_original"]) == (5, 1319)
    assert (r["lm_eval_version"], r["task_version"], r["git_hash"]) == ("0.4.13", 1.0, None)
    assert r["task_hash"] == "bf3bc436bba73fe8fbcbe78d5c99bfff213a3d8a73ce1b25dc149912ab92ff39"
    assert r["gen_kwargs"] == {"until": [], "do_sample": False, "temperature": 0, "max_gen_toks": 256}


def test_results_of_the_scripted_run_match_its_samples():
    r = parse_results(_json(FIX / "scripted" / "results.json"), TASK_NAME)
    rows = parse_samples(_lines(FIX / "scripted" / "samples.jsonl"))
    for label, acc in (("strict", 0.4), ("flexible", 0.6)):
        hits = [float(row[label]["correct"]) for row in rows]
        assert r[f"{label}_accuracy"] == pytest.approx(acc) == pytest.approx(sum(hits) / len(hits))
        # lm-eval's stderr of a mean: sample standard deviation / sqrt(n)
        assert r[f"{label}_stderr"] == pytest.approx(statistics.stdev(hits) / len(hits) ** 0.5)
    assert r["n"] == 5
    assert r["gen_kwargs"]["chat_template_kwargs"] == {"enable_thinking": False}


def test_results_without_the_task_or_its_figures_are_refused():
    doc = _json(FIX / "engine" / "results.json")
    with pytest.raises(OpError, match="no task 'gsm8k'"):
        parse_results(doc, "gsm8k")
    del doc["results"][TASK_NAME]["exact_match,flexible-extract"]
    with pytest.raises(OpError, match="lack exact_match,flexible-extract"):
        parse_results(doc, TASK_NAME)


# --------------------------------------------------------------------------- samples

def test_samples_merge_both_filters_per_problem():
    rows = parse_samples(_lines(FIX / "scripted" / "samples.jsonl"))
    assert [row["doc_id"] for row in rows] == [0, 1, 2, 3, 4]
    assert [row["target"] for row in rows] == [it.target for it in load_gsm8k().items[:5]]
    assert [row["strict"]["answer"] for row in rows] == ["18", "[invalid]", "70000", "9", "[invalid]"]
    assert [row["strict"]["correct"] for row in rows] == [True, False, True, False, False]
    assert [row["flexible"]["answer"] for row in rows] == ["18", "3", "7", "9", "$20."]
    assert [row["flexible"]["correct"] for row in rows] == [True, True, False, False, True]
    assert rows[1]["reply"] == "Half of 2 is 1, so 2 + 1 = 3 bolts."


def test_samples_of_the_engine_run_keep_the_model_reply():
    rows = parse_samples(["", *_lines(FIX / "engine" / "samples.jsonl"), "  "])
    assert [(row["doc_id"], row["target"]) for row in rows] == [(0, "18"), (1, "3")]
    assert rows[0]["reply"].endswith("#### 2425\nThe final answer is: 2425")
    assert rows[0]["strict"] == {"answer": "2425", "correct": False}
    assert rows[1]["strict"] == {"answer": "5", "correct": False}


def test_a_line_that_is_not_a_sample_is_refused():
    with pytest.raises(OpError, match="samples line 2"):
        parse_samples([_lines(FIX / "engine" / "samples.jsonl")[0], '{"doc_id": 1}'])
    with pytest.raises(OpError, match="samples line 1"):
        parse_samples(["not json"])


# --------------------------------------------------------------------------- task file

def test_task_file_points_lm_eval_at_the_local_data_file(tmp_path):
    data = tmp_path / "data" / "gsm.jsonl"
    path = write_task(tmp_path / "task", data, name="my_gsm")
    assert path == tmp_path / "task" / "my_gsm.yaml"
    task = yaml.safe_load(path.read_text())
    assert task["task"] == "my_gsm"
    assert (task["dataset_path"], task["dataset_kwargs"]) == ("json", {"data_files": {"test": str(data.resolve())}})
    assert (task["test_split"], task["output_type"], task["num_fewshot"]) == ("test", "generate_until", 0)
    assert task["generation_kwargs"]["until"] == []  # generate until the model stops
    assert [f["name"] for f in task["filter_list"]] == ["strict-match", "flexible-extract"]
    assert task["metric_list"][0]["metric"] == "exact_match"


def test_task_templates_render_the_native_prompt_and_the_number_after_hashes(tmp_path):
    from lm_eval.utils import apply_template
    task = yaml.safe_load(write_task(tmp_path, tmp_path / "x.jsonl").read_text())
    item = load_gsm8k().items[0]
    doc = {"question": item.question, "answer": item.answer_text}
    assert apply_template(task["doc_to_text"], doc) == PROMPT_TEMPLATE.format(question=item.question)
    assert apply_template(task["doc_to_target"], doc) == "18"


# --------------------------------------------------------------------------- command line

def _argv(**kw) -> list[str]:
    args = {"base_url": "http://127.0.0.1:8000/v1/", "model": "org/m,odel=1", "task_dir": Path("/t"),
            "task": TASK_NAME, "limit": 5, "concurrency": 3, "max_tokens": 256, "out_dir": Path("/o"), "seed": 7}
    return lm_eval_argv(**{**args, **kw})


def test_command_line_is_this_pythons_lm_eval_and_lm_eval_parses_it(monkeypatch):
    from lm_eval._cli import HarnessCLI
    argv = _argv(chat_template_kwargs={"enable_thinking": False}, extra_body={"top_k": 1, "stream": True})
    assert argv[:4] == [sys.executable, "-m", "lm_eval", "run"]
    monkeypatch.setattr(sys, "argv", ["lm-eval", *argv[3:]])
    a = HarnessCLI().parse_args()
    assert (a.model, a.tasks, a.include_path, a.num_fewshot, a.limit) == (
        "local-chat-completions", [TASK_NAME], "/t", 0, 5.0)
    assert (a.output_path, a.log_samples, a.apply_chat_template, a.seed) == ("/o", True, True, [7, 7, 7, 7])
    assert a.model_args == {"model": "org/m,odel=1", "base_url": "http://127.0.0.1:8000/v1/chat/completions",
                            "num_concurrent": 3, "max_retries": 3, "tokenized_requests": False,
                            "tokenizer_backend": None, "max_gen_toks": 256, "seed": 7}
    assert a.gen_kwargs == {"top_k": 1, "chat_template_kwargs": {"enable_thinking": False}, "temperature": 0,
                            "do_sample": False, "max_gen_toks": 256}


def test_command_line_without_limit_and_with_a_bad_url():
    assert "--limit" not in _argv(limit=None)
    with pytest.raises(OpError, match="credentials"):
        _argv(base_url="http://user:pw@127.0.0.1:8000")


# --------------------------------------------------------------------------- refused settings

def test_refused_settings_name_each_field_lm_eval_cannot_pass():
    assert refused_settings(chat_template_kwargs={"enable_thinking": False}, extra_body={"top_k": 1}) == []
    assert refused_settings(chat_template_kwargs=None, extra_body=None) == []
    out = refused_settings(chat_template_kwargs=None,
                           extra_body={"stream": True, "n": 2, "stop": ["x"], "min_p": 0.1, "max_tokens": 9})
    assert len(out) == 4
    assert [s.split("'")[1] for s in out] == ["max_tokens", "n", "stop", "stream"]
    assert all(s.startswith("extra_body field '") and "not sent" in s for s in out)


def test_what_the_scripted_server_received_shows_the_pass_through():
    body = _json(FIX / "scripted" / "requests.json")
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 1
    assert "stream" not in body
    assert set(body) == {"messages", "model", "max_tokens", "temperature", "stop", "seed", "top_k",
                         "chat_template_kwargs"}


def test_missing_lm_eval_names_the_extra_to_install(monkeypatch, tmp_path):
    import inferencekit.quality.gsm8k_lmeval as mod
    hide_modules(monkeypatch, "lm_eval")
    with pytest.raises(OpError, match=r"^--backend lm-eval needs lm-evaluation-harness \(missing: lm_eval\): "
                                      r"pip install 'inferencekit\[lmeval\]' \(or make venv\)$"):
        mod.run_lm_eval(base_url="http://127.0.0.1:9", model="m", data_file=tmp_path / "d.jsonl", limit=1,
                        concurrency=1, max_tokens=8, out_dir=tmp_path, timeout_s=5, api_key_env=None)
    assert not (tmp_path / "task").exists()  # refused before anything is written
