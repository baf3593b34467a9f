"""``quality gsm8k`` and ``quality sampling`` against the embedded engine (llama-cpp-python, SmolLM2-135M).

Small on purpose (a few problems, short budgets, few draws): the figures of the full-size runs are in
docs/quality.md. A 135M model scores near zero on GSM8K; the tests check what was measured and
recorded, not a score.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.cheats import running_proxy
from tests.cli_run import run_cli
from tests.fault_server import fault_server

pytestmark = pytest.mark.engine

GSM = ["quality", "gsm8k", "--limit", "3", "--max-tokens", "48"]


@pytest.fixture(scope="module")
def first_gsm8k(embedded_engine, tmp_path_factory):
    run = tmp_path_factory.mktemp("gsm8k") / "a"
    code, out = run_cli([*GSM, "--base-url", embedded_engine.url, "--run-dir", str(run)])
    assert code == 0, out
    return out


def test_gsm8k_reports_accuracy_with_its_wilson_interval_and_keeps_every_reply(first_gsm8k):
    out = first_gsm8k
    rows = [json.loads(x) for x in Path(out["results_file"]).read_text().splitlines()]
    assert [r["id"] for r in rows] == ["gsm8k-test-0000", "gsm8k-test-0001", "gsm8k-test-0002"]
    assert [r["target"] for r in rows] == ["18", "3", "70000"]  # the packaged split's first answers
    assert out["n"] == 3 and out["correct"] == sum(r["correct"] for r in rows) and out["failed"] == 0
    assert out["accuracy"] == pytest.approx(out["correct"] / 3)
    lo, hi = out["ci95"]
    assert 0 <= lo <= out["accuracy"] <= hi <= 1 and hi - lo > 0.4  # 3 problems: a wide interval
    assert all(r["reply"] and r["completion_tokens"] <= 48 for r in rows)
    assert out["concurrency"]["source"] != "flag"  # --concurrency 0 by default: the server's own figure
    assert out["concurrency"]["used"] == 1  # llama-cpp-python serves one request at a time
    code, chk = run_cli(["evidence", "verify", out["evidence_id"]])
    assert code == 0 and chk["intact"]


def test_a_second_run_paired_with_the_first_gives_mcnemars_p(first_gsm8k, embedded_engine, tmp_path):
    code, out = run_cli([*GSM, "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "b"),
                         "--paired-with", first_gsm8k["evidence_id"]])
    assert code == 0, out
    p = out["paired"]
    assert p["n_common"] == 3 and p["other_evidence_id"] == first_gsm8k["evidence_id"]
    assert p["b"] + p["c"] + p["both_correct"] + p["both_wrong"] == 3
    assert 0 < p["p_value"] <= 1
    # the same file named by path pairs too
    code, out2 = run_cli([*GSM, "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "c"),
                          "--paired-with", first_gsm8k["results_file"]])
    assert code == 0 and out2["paired"]["n_common"] == 3


def test_a_mismatched_pair_is_refused_before_any_request(first_gsm8k, tmp_path):
    with fault_server() as (url, seen):
        code, out = run_cli(["quality", "gsm8k", "--limit", "3", "--max-tokens", "64", "--base-url", url,
                             "--run-dir", str(tmp_path / "x"), "--paired-with", first_gsm8k["evidence_id"]])
    assert code == 2 and out["error"]
    assert "max_tokens (run A: 64, run B: 48)" in out["error"]
    assert seen == [] and not (tmp_path / "x").exists()


def test_an_edited_results_file_cannot_be_paired(first_gsm8k, tmp_path):
    copy = tmp_path / "run" / "quality" / "gsm8k" / "edited.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_text(Path(first_gsm8k["results_file"]).read_text().replace('"correct":false', '"correct":true'))
    code, out = run_cli([*GSM, "--run-dir", str(tmp_path / "y"), "--paired-with", str(copy)])
    assert code == 2 and "no intact quality gsm8k evidence record lists this file" in out["error"]


def test_a_resumed_run_keeps_the_replies_it_has(first_gsm8k, embedded_engine):
    run = Path(first_gsm8k["run_dir"])
    code, out = run_cli([*GSM, "--base-url", embedded_engine.url, "--run-dir", str(run)])
    assert code == 0
    assert any(x.startswith("3 of 3 replies read back from an earlier run") for x in out["limitations"])
    assert out["correct"] == first_gsm8k["correct"]


def test_the_time_budget_stops_sending_and_records_the_subset(embedded_engine, tmp_path):
    code, out = run_cli(["quality", "gsm8k", "--limit", "40", "--max-tokens", "48", "--time-budget-s", "3",
                         "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "t")])
    assert code == 0, out
    tb = out["time_budget"]
    assert tb["stopped_early"] is True and 1 <= tb["sent"] < 40 and tb["budget_s"] == 3
    assert out["n"] == tb["sent"]
    assert any(x.startswith(f"subset: the first {out['n']} of 40 problems — --time-budget-s 3")
               for x in out["limitations"])


def test_http_errors_are_recorded_per_problem_and_the_run_finishes(tmp_path):
    with fault_server() as (url, seen):
        code, out = run_cli(["quality", "gsm8k", "--limit", "3", "--concurrency", "2", "--base-url", url,
                             "--extra-body", '{"fault": "http500"}', "--run-dir", str(tmp_path / "f")])
    assert code == 3  # UNPROVEN: a failed request is missing evidence
    assert out["failed"] == 3 and out["correct"] == 0 and len(seen) == 3
    items = sorted((tmp_path / "f" / "quality" / "gsm8k" / "openai").glob("gsm8k-test-*.json"))
    assert len(items) == 3 and all("HTTP 500" in json.loads(p.read_text())["error"] for p in items)


SAMPLING = ["quality", "sampling", "--n-prompts", "4", "--seeds", "16"]


def test_sampling_on_the_honest_engine_draws_from_its_own_distribution(embedded_engine, tmp_path):
    code, out = run_cli([*SAMPLING, "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "s")])
    c = out["checks"]
    assert out["sent"] == {"temperature": 1.0, "top_k": 20, "top_p": 1.0, "min_p": 0.0}
    assert c["settings"]["sampling"] == {"temperature": 1.0, "top_k": 20, "top_p": None, "min_p": None}  # 1 and 0: off
    assert c["settings"]["unsent"] == [] and out["not_sent"] == []
    # 0 draws outside the kept tokens, but 64 draws cannot bound that share below 0.5%: UNPROVEN, not PASS
    assert c["out_of_support"]["draws"] == 0 and c["out_of_support"]["of"] == 64
    assert c["out_of_support"]["verdict"] == "UNPROVEN"
    assert c["greedy_only"]["verdict"] == "PASS" and c["greedy_only"]["greedy_draws"] < c["greedy_only"]["draws"]
    # 4 prompts are below the 8 a TV verdict needs: UNPROVEN, said so, never PASS
    assert out["verdict"] == "UNPROVEN" and code == 3 and "need 8" in out["reason"]
    assert out["seed_check"]["status"] in ("honoured", "inconclusive")
    st = out["seed_stage"]  # one repeat per prompt first; the other 7 only when that does not settle the seed
    assert st["repeats"] == 4 and st["stopped"] == (st["same"] == 4 and st["chance_all_same"] <= 1e-3)
    assert out["seed_check"]["repeats"] == (4 if st["stopped"] else 32)
    # 4 prompts can never PASS, so the rounds run to the cap (16 draws), where the fixed rules decide
    assert out["sequential"]["why"] == "the cap" and out["sequential"]["looks"] == [4, 8, 12, 16]
    doc = json.loads(Path(out["results_file"]).read_text())
    rows = doc["result"]["rows"]
    assert len(rows) == 4 and all(sum(c for _, c in r["histogram"]) == 16 for r in rows if "histogram" in r)
    assert all(abs(sum(p for _, p in r["implied"]) - 1) < 1e-9 for r in rows if "implied" in r)


def test_sampling_fails_when_the_engine_ignores_temperature(embedded_engine, tmp_path):
    with running_proxy(embedded_engine.url, ["temperature-ignored"]) as proxy:
        code, out = run_cli([*SAMPLING, "--base-url", proxy, "--run-dir", str(tmp_path / "c"), "--label", "cheat"])
    assert out["verdict"] == "FAIL" and code == 1
    g = out["checks"]["greedy_only"]
    seq = out["sequential"]  # drawn in rounds of 4 per prompt, stopped at the first look that FAILs
    assert seq["decided"] and seq["draws_per_prompt"] in (4, 8, 12, 16)
    assert g["verdict"] == "FAIL" and g["greedy_draws"] == g["draws"] == 4 * seq["draws_per_prompt"]
    assert out["requests"] == 4 * 2 + g["draws"] + min(8, seq["draws_per_prompt"]) * 4  # lists, draws, seed repeats
    assert "temperature 1 ignored" in out["reason"]


def test_an_unsent_sampling_field_is_named(embedded_engine, tmp_path):
    code, out = run_cli([*SAMPLING, "--n-prompts", "2", "--seeds", "4", "--omit", "min_p,top_p",
                         "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "o")])
    assert out["not_sent"] == ["min_p", "top_p"] or sorted(out["not_sent"]) == ["min_p", "top_p"]
    assert any("not sent: read as off" in x and "min_p 0.05" in x for x in out["limitations"])


def test_the_lm_eval_backend_runs_offline_on_the_same_problems_and_is_recorded(embedded_engine, tmp_path):
    code, out = run_cli(["quality", "gsm8k", "--backend", "lm-eval", "--limit", "2", "--max-tokens", "32",
                         "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "l")])
    assert code == 0, out
    rows = [json.loads(x) for x in Path(out["results_file"]).read_text().splitlines()]
    assert [r["id"] for r in rows] == ["gsm8k-test-0000", "gsm8k-test-0001"] and out["n"] == 2
    assert out["correct"] == sum(r["correct"] for r in rows)
    code, chk = run_cli(["evidence", "verify", out["evidence_id"]])
    assert code == 0 and chk["intact"]
    # what lm-eval cannot do is refused before any request
    code, err = run_cli(["quality", "gsm8k", "--backend", "lm-eval", "--limit", "2", "--time-budget-s", "5",
                         "--base-url", embedded_engine.url, "--run-dir", str(tmp_path / "m")])
    assert code == 2 and "--time-budget-s needs the builtin backend" in err["error"]


def test_auto_concurrency_reads_llama_servers_slots(llama_server_engine, tmp_path):
    code, out = run_cli(["quality", "gsm8k", "--limit", "2", "--max-tokens", "16", "--base-url",
                         llama_server_engine.url, "--run-dir", str(tmp_path / "ls")])
    assert code == 0, out
    c = out["concurrency"]
    assert c["requested"] == 0 and c["used"] == 4 and c["detail"]["server_reported"] == 4  # --parallel 4
    assert "total_slots" in c["source"] or "props" in c["source"]


def test_auto_concurrency_falls_back_to_a_timing_probe_on_vllm(vllm_engine, tmp_path):
    # vLLM does not report how many requests it runs at once: one alone, then bursts of 8 (and 32)
    code, out = run_cli(["quality", "gsm8k", "--limit", "2", "--max-tokens", "16", "--base-url", vllm_engine.url,
                         "--run-dir", str(tmp_path / "v")])
    assert code == 0, out
    c = out["concurrency"]
    assert c["source"] == "timing_probe" and c["detail"]["alone_s"] > 0
    sizes = [b["size"] for b in c["detail"]["bursts"]]
    assert sizes[0] == 8 and sizes in ([8], [8, 32])
    last = c["detail"]["bursts"][-1]
    assert 1 <= c["used"] <= 32
    assert c["used"] == (last["size"] if last["parallelism"] >= 0.75 * last["size"]
                         else max(1, round(last["parallelism"])))
