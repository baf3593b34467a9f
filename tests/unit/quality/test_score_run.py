"""quality score's judging code on recorded trajectories and recorded reference distributions.

``tests/fixtures/quality/run/`` holds real trajectory sets (captured by ``tests/capture_quality.py``):
``reference`` — the float32 in-process reference's own greedy run (the baseline), ``ref2`` — the same
run again (an engine identical to the reference), ``llama-server`` — llama.cpp's server on the Q4_1
GGUF. ``reference-local.json.gz`` holds the reference's answers to every question scoring asks, so
the tests replay real distributions without torch.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from pathlib import Path

import pytest

from inferencekit.quality.score_run import score_sets
from inferencekit.quality.trajectory_store import load_set
from inferencekit.rundir import read_json, write_json
from tests.paths import FIXTURES

FIX = FIXTURES / "quality"
MARGINS = {"agreement": 0.02, "kl": 0.02, "tv": None, "nll": 0.05}


class RecordedReference:
    """Replays ``reference-local.json.gz``; a question it was never asked is an error, not a guess."""

    def __init__(self) -> None:
        with gzip.open(FIX / "reference-local.json.gz", "rt", encoding="utf-8") as f:
            self.doc = json.load(f)
        self.k = self.doc["_provenance"]["k"]

    def describe(self) -> dict:
        return {**self.doc["_provenance"]["reference"], "k": self.k, "recorded": True}

    async def chat_prompt_ids(self, messages, ctk):
        return self.doc["chat_prompt_ids"][json.dumps([messages, ctk or {}], sort_keys=True)]

    async def encode(self, text):
        return self.doc["encode"][text]

    async def score(self, ids, start):
        rec = self.doc["score"][json.dumps(ids)]
        assert rec["start"] == start
        return [{int(t): v for t, v in row} for row in rec["rows"]]


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(FIX / "run", dst)
    return dst


def score(run: Path, *labels: str, context: str = "reference", baseline: str = "reference") -> dict:
    engines = [load_set(run / "quality" / label) for label in labels]
    base = load_set(run / "quality" / baseline)
    return asyncio.run(score_sets(RecordedReference(), engines, base, None, context=context, margins=MARGINS,
                                  resamples=500, seed=0))


def test_an_engine_identical_to_the_reference_passes_with_zero_divergence(run):
    rep = score(run, "ref2")
    e = rep["engines"]["ref2"]
    assert e["verdict"]["verdict"] == "PASS", e["verdict"]["reason"]
    assert e["all"]["top1_agreement"]["value"] == 1.0
    # decode (KV cache) vs teacher-forced prefill differ by ~1e-6 in a logprob: KL ~1e-11, not exactly 0
    assert 0 <= e["all"]["kl_mean"]["value"] < 1e-9 and 0 <= e["all"]["tv_mean"]["value"] < 1e-5
    assert e["first_divergence"]["identical"] == 4
    # the floor is the same run scored the same way: the same NLL to the last digit
    assert e["all"]["ref_nll_mean"]["value"] == rep["floor"]["all"]["ref_nll_mean"]["value"]
    assert e["coverage"] == {**e["coverage"], "required": 4, "scored": 4, "missing": 0}


def test_llama_server_is_scored_with_kl_and_tv_from_its_token_ids(run):
    e = score(run, "llama-server")["engines"]["llama-server"]
    kl, tv, agree = e["all"]["kl_mean"], e["all"]["tv_mean"], e["all"]["top1_agreement"]
    # Q4_1 arithmetic against its own weights dequantised to float32: small but not zero divergence
    assert 0 < kl["value"] < 0.02 and kl["n_tokens"] == 96
    assert 0 < tv["value"] < 0.1
    assert 0.9 < agree["value"] <= 1.0
    assert e["kl_top_k"] == [20]
    assert e["verdict"]["checks"]["kl_mean"]["top_k"] == 20
    # the prompt ids llama-server rendered (apply-template + tokenize) are the reference template's
    assert e["template_mismatch"] == {}
    assert e["retokenized_prompts"] == 0
    assert set(e) >= {"0-31", "32-127", "128+", "by_input_bucket", "per_prompt"}


def test_a_trajectory_edited_after_capture_is_caught_and_downgrades_the_verdict(run):
    path = run / "quality" / "ref2" / "sh-chat-001.json"
    doc = read_json(path)
    doc["text"] += " (edited)"
    write_json(path, doc)
    rep = score(run, "ref2")
    e = rep["engines"]["ref2"]
    assert e["verdict"]["verdict"] == "UNPROVEN"
    assert "integrity check" in e["verdict"]["reason"]
    assert any("sh-chat-001.json does not match index.json" in p for p in rep["integrity_problems"])
    assert e["coverage"]["rejected_by_integrity_check"] == ["sh-chat-001"]


def test_an_index_rewritten_to_match_an_edited_file_is_caught(run):
    folder = run / "quality" / "ref2"
    doc = read_json(folder / "sh-chat-001.json")
    doc["text"] += " (edited)"
    write_json(folder / "sh-chat-001.json", doc)
    from inferencekit.evidence.canonical import sha256_file

    index = read_json(folder / "index.json")
    index["files"]["sh-chat-001"]["sha256"] = sha256_file(folder / "sh-chat-001.json")
    write_json(folder / "index.json", index, indent=True)
    rep = score(run, "ref2")
    e = rep["engines"]["ref2"]
    assert e["verdict"]["verdict"] == "UNPROVEN"
    assert any("index.json is listed by no quality_trajectory evidence record" in p for p in rep["integrity_problems"])
    # every file matches the rewritten index, so all four are scored: only the record check catches it
    assert e["coverage"]["scored"] == 4


def test_a_record_edited_to_list_a_rewritten_index_is_caught(run):
    folder = run / "quality" / "ref2"
    from inferencekit.evidence.canonical import sha256_file

    index = read_json(folder / "index.json")
    old_sha = sha256_file(folder / "index.json")
    index["failed"] = {"made-up": "x"}
    write_json(folder / "index.json", index, indent=True)
    new_sha = sha256_file(folder / "index.json")
    for p in (run / "evidence").glob("ev_*.json"):
        rec = read_json(p)
        if any(a.get("sha256") == old_sha for a in rec["artifacts"]):
            for a in rec["artifacts"]:
                if a["sha256"] == old_sha:
                    a["sha256"] = new_sha
            write_json(p, rec)
    rep = score(run, "ref2")
    assert rep["engines"]["ref2"]["verdict"]["verdict"] == "UNPROVEN"
    assert any("record listing its index.json was edited" in p for p in rep["integrity_problems"])


def test_a_text_only_engine_gets_agreement_and_nll_but_kl_is_not_run_and_the_verdict_unproven(run):
    folder = run / "quality" / "ref2"
    for f in folder.glob("*-chat-*.json"):
        doc = read_json(f)
        doc.update(token_ids=None, top_logprobs=[], top_logprobs_returned=0, token_id_method="strings")
        write_json(f, doc)
    _reindex(run, folder)
    rep = score(run, "ref2")
    e = rep["engines"]["ref2"]
    assert e["retokenized_prompts"] == 4
    checks = e["verdict"]["checks"]
    assert checks["kl_mean"]["verdict"] == "NOT RUN" and "token-id top-k lists" in checks["kl_mean"]["reason"]
    assert checks["top1_agreement"]["verdict"] == "PASS"
    assert e["verdict"]["verdict"] == "UNPROVEN"  # a margin whose check could not run is missing evidence
    assert rep["not_run"]["ref2"] == ["kl_mean", "tv_mean"]
    assert "floor_retokenized" in rep
    # reading text instead of the engine's ids changed what was measured: a fallback, which verify --strict sees
    assert len(rep["fallbacks"]) == 1 and "ref2: 4/4 prompts carry no token ids" in rep["fallbacks"][0]
    assert rep["fallbacks"][0] in rep["limitations"]


def test_without_a_baseline_every_verdict_is_unproven(run):
    engines = [load_set(run / "quality" / "ref2")]
    rep = asyncio.run(score_sets(RecordedReference(), engines, None, None, context="reference", margins=MARGINS,
                                 resamples=200, seed=0))
    e = rep["engines"]["ref2"]
    assert e["verdict"]["verdict"] == "UNPROVEN" and "no A/A noise floor" in e["verdict"]["reason"]
    assert e["all"]["top1_agreement"]["value"] == 1.0  # the figures are still reported


def test_a_different_chat_template_is_a_template_mismatch(run):
    folder = run / "quality" / "ref2"
    f = folder / "vs-chat-001.json"
    doc = read_json(f)
    doc["prompt_token_ids"] = doc["prompt_token_ids"][:-3]  # the engine saw another context
    write_json(f, doc)
    _reindex(run, folder)
    rep = score(run, "ref2")
    e = rep["engines"]["ref2"]
    assert list(e["template_mismatch"]) == ["vs-chat-001"]
    assert e["verdict"]["verdict"] == "UNPROVEN" and "template mismatch" in e["verdict"]["reason"]


def _reindex(run: Path, folder: Path) -> None:
    """Rewrite the index and its record the way quality trajectory would have (a legitimate capture)."""
    from inferencekit.evidence import artifact, build_record, save_record
    from inferencekit.evidence.canonical import sha256_file
    from inferencekit.rundir import RunDir

    index = read_json(folder / "index.json")
    for _, meta in index["files"].items():
        meta["sha256"] = sha256_file(folder / meta["file"])
    write_json(folder / "index.json", index, indent=True)
    rec = build_record(kind="quality_trajectory", claim_class="observed", summary="re-captured for a test",
                       identity={}, artifacts=[artifact(folder / "index.json", run, "trajectory_index")])
    save_record(rec, RunDir.open(run))


def test_bad_input_is_a_clear_error_before_anything_is_scored(run, tmp_path):
    from tests.cli_run import run_cli

    q = run / "quality"
    cases = [
        (["quality", "score", str(q / "ref2"), "--baseline-repeat", str(q / "reference")], "--baseline-repeat needs"),
        (["quality", "score", str(tmp_path / "nope")], "not a directory"),
        (["quality", "score", str(q / "ref2"), "--baseline", str(tmp_path)], "no index.json"),
        (["quality", "score", str(q / "ref2"), "--baseline", str(q / "reference"), "--baseline-repeat",
          str(q / "reference")], "not --baseline again"),
        (["quality", "score", str(q / "ref2"), "--reference", "vllm"], "needs --reference-url"),
        (["quality", "score", str(q / "reference"), "--baseline", str(q / "reference")], "besides the baseline"),
        (["quality", "score", str(q / "ref2"), "--margin-kl", "-1"], "margins must be"),
    ]
    for argv, words in cases:
        code, out = run_cli(argv)
        assert code == 2, argv
        assert words in out["error"], (argv, out)
    assert not (q / "score.json").exists()


def test_trajectory_refuses_bad_flags_before_any_request(tmp_path):
    from tests.cli_run import run_cli

    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n{not json\n')
    for argv, words in [
        (["--local", "embedded", "--base-url", "http://127.0.0.1:9"], "not both"),
        (["--base-url", "http://127.0.0.1:9", "--top-logprobs", "0"], "--top-logprobs"),
        (["--base-url", "http://127.0.0.1:9", "--prompts", str(bad)], f"{bad}:2"),
        (["--base-url", "http://127.0.0.1:9", "--extra-body", '[1]'], "must be a JSON object"),
        (["--base-url", "http://127.0.0.1:9", "--label", "../x"], "not a safe file name"),
    ]:
        code, out = run_cli(["quality", "trajectory", *argv, "--run-dir", str(tmp_path / "r")])
        assert code == 2, argv
        assert words in out["error"], (argv, out)
    assert not (tmp_path / "r").exists()


def test_a_baseline_repeat_is_the_floor_and_gets_its_own_first_divergence(run):
    engines = [load_set(run / "quality" / "llama-server")]
    base, rep = load_set(run / "quality" / "reference"), load_set(run / "quality" / "ref2")
    report = asyncio.run(score_sets(RecordedReference(), engines, base, rep, context="reference", margins=MARGINS,
                                    resamples=300, seed=0))
    assert report["noise_floor"] == "ref2" and report["floor"]["source"] == "baseline_repeat"
    # a second run of a deterministic reference never leaves its first run's path
    assert report["floor"]["first_divergence"]["identical"] == 4
    assert not any("A/A floor from one reference run" in x for x in report["limitations"])
    e = report["engines"]["llama-server"]
    assert e["first_divergence"]["n_prompts"] == 4
    assert e["verdict"]["checks"]["kl_mean"]["n_prompts"] == 4


def test_clamp_sentinels_are_left_out_of_nll_not_averaged():
    # vLLM writes -9999.0 for an underflowed prompt position; averaged in it made a mean NLL of thousands (issue 18)
    from inferencekit.quality.score_rows import score_positions

    rows = score_positions([5, 6], [{5: -0.5, 7: -0.2}, {6: -9999.0, 8: -0.1}], None, ks=(), own_k=0)
    assert rows[0]["nll"] == 0.5 and rows[0]["clamped"] is False
    assert rows[1]["nll"] is None and rows[1]["gap"] is None and rows[1]["clamped"] is True and rows[1]["agree"] == 0


def _retemplate(run: Path, label: str, pid: str, cut: int) -> None:
    folder = run / "quality" / label
    f = folder / f"{pid}.json"
    doc = read_json(f)
    doc["prompt_token_ids"] = doc["prompt_token_ids"][:-cut]  # another tokenizer's ids for the same messages
    write_json(f, doc)
    _reindex(run, folder)


def test_a_replica_floor_given_the_same_prompt_ids_compares_like_for_like(run):
    """An honest llama-server and its replica (the floor) tokenize a prompt alike and otherwise than the reference
    (verify standard, 7 Dec 2026): both answered one context, so their pairing is no data problem; a floor given
    other ids still is one."""
    shutil.copytree(run / "quality" / "ref2", run / "quality" / "replica")
    for label in ("ref2", "replica"):
        _retemplate(run, label, "vs-chat-001", 3)
    engines, base = [load_set(run / "quality" / "ref2")], load_set(run / "quality" / "reference")
    rep = asyncio.run(score_sets(RecordedReference(), engines, base, load_set(run / "quality" / "replica"),
                                 context="reference", margins=MARGINS, resamples=500, seed=0))
    e = rep["engines"]["ref2"]
    assert list(e["template_mismatch"]) == ["vs-chat-001"] and e["data_problems"] == []
    assert e["verdict"]["verdict"] == "PASS", e["verdict"]["reason"]
    assert any("was given the very same prompt ids" in x for x in rep["limitations"])
    _retemplate(run, "replica", "vs-chat-001", 1)  # the floor now saw 2 more ids than the engine: another context
    rep = asyncio.run(score_sets(RecordedReference(), [load_set(run / "quality" / "ref2")], base,
                                 load_set(run / "quality" / "replica"), context="reference", margins=MARGINS,
                                 resamples=500, seed=0))
    e = rep["engines"]["ref2"]
    assert e["verdict"]["verdict"] == "UNPROVEN" and "template mismatch" in e["verdict"]["reason"]
