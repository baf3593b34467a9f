"""The audit report from collected, scored trajectories (pure), the table loader, and the refusals before anything
is sent (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.cli import main
from inferencekit.data.prompts import load_prompt_set
from inferencekit.errors import OpError
from inferencekit.quality.equivalence_run import AuditSettings, audit_prompts, audit_report, load_table
from inferencekit.quality.equivalence_text import text_report

CELLS = [{"method": "logprob", "claim": "F16", "budget": 8, "alpha": 0.05, "statistic": "kl+gap", "threshold": 0.1,
          "honest": {"fit_runs": 59, "heldout_runs": 59, "heldout_alarms": 0},
          "substitutes": [{"name": "q4_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505}]},
         {"method": "logprob", "claim": "Q4_1", "budget": 8, "alpha": 0.05, "statistic": "gap", "threshold": 0.1,
          "honest": {"fit_runs": 59, "heldout_runs": 59, "heldout_alarms": 0},
          "substitutes": [{"name": "q2_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505}]}]


def _collected(kl: float | None, gap: float, n: int = 5, prompts: int = 2) -> dict:
    rows = [{"t": t, "kl": kl, "gap": gap, "clamped": False} for t in range(n)]
    scored = [{"id": f"p{i}", "rows": rows} for i in range(prompts)]
    return {"rows": [{"id": f"p{i}", "method": "top_logprobs"} for i in range(prompts)], "state": {},
            "scored": scored, "problems": [], "surface": "logprob"}


def test_report_pass_fail_and_unproven():
    s = AuditSettings(claim="F16", budget_tokens=10, max_tokens=5)
    ok = audit_report(_collected(0.02, 0.01), CELLS, s, "test")
    assert ok["verdict"] == "PASS" and ok["budget_used"] == 10 and ok["statistic"]["name"] == "kl+gap"
    assert ok["statistic"]["statistic"] == pytest.approx(0.03) and "would detect q4_0" in ok["reason"]
    bad = audit_report(_collected(0.3, 0.2), CELLS, s, "test")
    assert bad["verdict"] == "FAIL" and "kl+gap = 0.5 is above the honest threshold 0.1" in bad["reason"]
    short = audit_report(_collected(0.02, 0.01, n=1, prompts=1), CELLS, s, "test")
    assert short["verdict"] == "UNPROVEN" and "smallest calibrated budget is 8" in short["reason"]
    none = audit_report(_collected(0.02, 0.01), [], s, "none shipped")
    assert none["verdict"] == "UNPROVEN" and any("no calibration table" in x for x in none["limitations"])


def test_an_engine_without_token_ids_is_judged_on_the_gap_alone_and_says_so():
    r = audit_report(_collected(None, 0.02), CELLS, AuditSettings(claim="Q4_1"), "test")
    assert r["statistic"]["name"] == "gap" and r["verdict"] == "PASS"
    assert any("DiFR gap alone" in x for x in r["limitations"])
    # the F16 cell is of the other statistic: it does not apply
    f16 = audit_report(_collected(None, 0.02), CELLS, AuditSettings(claim="F16"), "test")
    assert f16["verdict"] == "UNPROVEN" and "of the statistic gap" in f16["reason"]


def test_failed_prompts_and_text_only_endpoints_are_named():
    col = _collected(0.02, 0.01)
    col["rows"].append({"id": "p9", "error": "HTTP 500"})
    r = audit_report(col, CELLS, AuditSettings(claim="F16"), "test")
    assert r["failed"] == [{"id": "p9", "error": "HTTP 500"}] and any("1 prompt(s) failed" in x
                                                                       for x in r["limitations"])
    col = {**_collected(0.02, 0.01), "surface": "text"}
    t = audit_report(col, CELLS, AuditSettings(claim="F16"), "test")
    assert t["verdict"] == "UNPROVEN" and "no logprobs" in t["reason"]


def test_prompt_draw_is_seeded_and_sized_by_the_budget():
    pool = load_prompt_set("dev").prompts
    a = audit_prompts(pool, AuditSettings(claim="F16", budget_tokens=300, max_tokens=64, seed=1))
    b = audit_prompts(pool, AuditSettings(claim="F16", budget_tokens=300, max_tokens=64, seed=1))
    c = audit_prompts(pool, AuditSettings(claim="F16", budget_tokens=300, max_tokens=64, seed=2))
    assert [p.id for p in a] == [p.id for p in b] != [p.id for p in c] and len(a) == 5
    with pytest.raises(OpError, match="needs 10000"):
        audit_prompts(pool, AuditSettings(claim="F16", budget_tokens=10000, max_tokens=1))


def test_table_loader(tmp_path: Path):
    shipped, source = load_table(None)  # the package's table (benchmarks/equivalence_calibration.py --ship)
    assert source == "shipped (equivalence_table.json)" and {c["claim"] for c in shipped} == {"F16", "Q4_1"}
    made = {(c["method"], c["pool"], c["max_tokens"]) for c in shipped}
    assert made == {("logprob", "sharegpt-first-turns-seed20", 64),
                    ("first_token", "sharegpt-first-turns-seed20-max500chars", 1),
                    ("text", "sharegpt-first-turns-seed20-max500chars", 32)}
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"cells": CELLS}))
    assert load_table(str(good))[0] == CELLS
    bad = tmp_path / "b.json"
    bad.write_text("[1, 2]")
    with pytest.raises(OpError, match="not a calibration table"):
        load_table(str(bad))
    with pytest.raises(OpError, match="cannot read"):
        load_table(str(tmp_path / "missing.json"))


def test_refusals_come_before_anything_is_sent(tmp_path: Path, capsys):
    base = ["audit", "equivalence", "--base-url", "http://127.0.0.1:9", "--run-dir", str(tmp_path / "r")]
    assert main([*base, "--claim", "F16"]) == 2
    assert "--reference is required" in capsys.readouterr().err
    assert main([*base, "--reference", "local"]) == 2
    assert "--claim is required" in capsys.readouterr().err
    assert main([*base, "--claim", "F16", "--reference", "http://x"]) == 2
    assert not (tmp_path / "r").exists()  # nothing was made


TEXT_CELLS = [{"method": "text", "claim": "F16", "budget": 16, "alpha": 0.05, "statistic": "mmd", "threshold": 0.05,
               "honest": {"fit_runs": 59, "heldout_runs": 59, "heldout_alarms": 0},
               "substitutes": [{"name": "q4_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505}]}]


def test_text_report_judges_the_blocked_mmd_in_requests():
    same = {"p1": ["the cat sat", "a cat sat", "the cat ran", "cats sat"],
            "p2": ["rain today", "sun today", "rain tomorrow", "snow today"]}
    other = {"p1": ["stock prices", "bond yields", "market news", "index fell"],
             "p2": ["the cat sat", "a dog ran", "birds sing", "the fish swam"]}
    s = AuditSettings(claim="F16", surface="text", budget_requests=8, samples=4)
    col = {"engine": same, "reference": same, "failed": [], "requests": 16, "surface": "text"}
    ok = text_report(col, TEXT_CELLS, s, "test", permutations=200)
    assert ok["surface"] == "text" and ok["statistic"]["name"] == "mmd" and ok["budget_used"] == 16
    assert ok["statistic"]["statistic"] <= 0.0 and ok["verdict"] == "PASS"
    bad = text_report({**col, "reference": other}, TEXT_CELLS, s, "test", permutations=200)
    assert bad["verdict"] == "FAIL" and bad["statistic"]["p_value"] < 0.05
    assert "mmd = " in bad["reason"] and "requests" in bad["reason"]
    few = text_report({**col, "requests": 8}, TEXT_CELLS, s, "test", permutations=50)
    assert few["verdict"] == "UNPROVEN" and "smallest calibrated budget is 16 requests" in few["reason"]
    assert any("logprobs" in x for x in ok["limitations"])
    # no top_k/min_p sent (a plain OpenAI endpoint): the samples may come from a truncated distribution, and say so
    assert any("top_k and min_p were not sent" in x for x in ok["limitations"])
    full = text_report({**col, "sampling": {"top_p": 1.0, "top_k": 0, "min_p": 0.0}}, TEXT_CELLS, s, "test",
                       permutations=50)
    assert not any("top_k and min_p" in x for x in full["limitations"])
    assert full["statistic"]["sampling"] == {"top_p": 1.0, "top_k": 0, "min_p": 0.0}


class _CountingModel:
    """Stands in for LocalModel in the cache test: the cache, not the sampler, is under test."""

    source = "/models/x.gguf"

    def __init__(self) -> None:
        self.calls = 0

    def chat_prompt_ids(self, messages, ctk):
        return [len(str(m["content"])) for m in messages]

    def sample(self, ids, tokens, *, n, temperature, seed):
        self.calls += 1
        return [[seed, j] for j in range(n)]

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_reference_samples_are_drawn_once_per_prompt_seed_and_shape(tmp_path):
    import asyncio

    from inferencekit.data.prompts import Prompt
    from inferencekit.quality.equivalence_text import ReferenceSamples

    cache = tmp_path / "eqcal" / "text-reference.jsonl"
    m = _CountingModel()
    p = Prompt(id="a", messages=({"role": "user", "content": "hello"},))
    first = asyncio.run(ReferenceSamples(m, cache).draw(p, 8, 3, seed=7))
    assert first == ["7 0", "7 1", "7 2"] and m.calls == 1
    again = ReferenceSamples(m, cache)  # a later process reads the file
    assert asyncio.run(again.draw(p, 8, 3, seed=7)) == first and m.calls == 1
    assert asyncio.run(again.draw(p, 8, 3, seed=8)) == ["8 0", "8 1", "8 2"] and m.calls == 2
    assert asyncio.run(again.draw(p, 16, 3, seed=7)) == first and m.calls == 3  # another length: drawn again
    cache.write_text(cache.read_text() + '{"key": "cut')  # a line cut by a killed run is skipped
    assert len(ReferenceSamples(m, cache).rows) == 3
    assert asyncio.run(ReferenceSamples(m, None).draw(p, 8, 3, seed=7)) == first and m.calls == 4


def test_text_prompt_draw_is_sized_in_requests():
    pool = load_prompt_set("dev").prompts
    got = audit_prompts(pool, AuditSettings(claim="F16", surface="text", budget_requests=40, samples=8))
    assert len(got) == 5


def test_a_prompt_the_engine_tokenized_otherwise_is_left_out_of_the_statistic():
    # an honest llama-server tokenized a Unicode-heavy ShareGPT prompt differently from the reference (435 vs 448
    # ids): that prompt alone gave KL 16 nats/token, which measures the tokenization, not the weights
    got = _collected(0.02, 0.01, prompts=3)
    got["scored"][2] = {"id": "p2", "template_mismatch": "the engine's 435 prompt ids differ from the reference's 448",
                        "rows": [{"t": t, "kl": 16.0, "gap": 5.8, "clamped": False} for t in range(5)]}
    r = audit_report(got, CELLS, AuditSettings(claim="F16", budget_tokens=15, max_tokens=5), "test")
    assert r["statistic"]["statistic"] == pytest.approx(0.03) and r["positions"] == 10
    assert r["budget_used"] == 15 and r["verdict"] == "PASS"  # the budget counts prompts scored × max_tokens
    assert any("1 prompt(s) left out of the statistic" in x and "p2" in x for x in r["limitations"])


def test_cells_made_on_another_pool_or_length_do_not_apply():
    made = {"pool": "sharegpt-first-turns-seed20", "max_tokens": 5, "top_logprobs": 20}
    cells = [{**c, **made} for c in CELLS]
    alike = AuditSettings(claim="F16", budget_tokens=10, max_tokens=5, pool="sharegpt-first-turns-seed20")
    assert audit_report(_collected(0.02, 0.01), cells, alike, "test")["verdict"] == "PASS"
    dev = AuditSettings(claim="F16", budget_tokens=10, max_tokens=5, pool="dev")
    r = audit_report(_collected(0.3, 0.2), cells, dev, "test")
    assert r["verdict"] == "UNPROVEN"
    assert "were made with pool sharegpt-first-turns-seed20, max_tokens 5, top_logprobs 20" in r["reason"]
    assert "this run with pool dev, max_tokens 5, top_logprobs 20" in r["reason"]


def test_a_cell_that_relaxed_its_alpha_says_so_on_the_report():
    cut = "60 fit runs are too few for α = 1% (the split-conformal quantile needs ≥ 99): this cell is at α = 5%"
    cells = [{**CELLS[0], "alpha_cut": cut, "machine": "Some CPU, 2 cores"}]
    r = audit_report(_collected(0.02, 0.01), cells, AuditSettings(claim="F16", budget_tokens=10, max_tokens=5), "t")
    assert r["verdict"] == "PASS" and f"calibration: {cut}" in r["limitations"]
    assert any(x.startswith("calibration made on Some CPU, 2 cores: an honest engine on other hardware")
               for x in r["limitations"])
    assert "α = 5%" in r["reason"]


def test_a_trajectory_whose_stream_lost_token_ids_is_left_out():
    # a real llama-server trajectory (3 Dec 2026): 21 emoji, each a merged entry of its byte tokens, usage 64
    from inferencekit.quality.equivalence_run import comparable, mark_lost_ids

    doc = json.loads((Path(__file__).parents[2] / "fixtures" / "quality" / "llama-server-emoji-trajectory.json")
                     .read_text(encoding="utf-8"))
    assert len(doc["token_ids"]) == 21 and doc["usage"]["completion_tokens"] == 64
    scored = [{"id": doc["id"], "rows": []}, {"id": "whole", "rows": []}]
    docs = {doc["id"]: doc, "whole": {"usage": {"completion_tokens": 3}, "token_ids": [1, 2], "finish_reason": "stop"}}
    marked = mark_lost_ids(scored, docs)
    assert marked[0]["lost_ids"] == "21 token ids streamed for usage 64" and "lost_ids" not in marked[1]
    assert [r["id"] for r in comparable(marked)] == ["whole"]  # one EOS of slack at a natural stop
    got = _collected(0.02, 0.01, prompts=2)
    got["scored"][1]["lost_ids"] = "21 token ids streamed for usage 64"
    r = audit_report(got, CELLS, AuditSettings(claim="F16", budget_tokens=10, max_tokens=5), "t")
    assert r["positions"] == 5 and any("fewer token ids than usage counts" in x for x in r["limitations"])


def test_a_cell_with_a_thin_honest_replica_says_its_false_alarms_are_not_bounded_for_it():
    honest = {**CELLS[0]["honest"], "thin_replicas": ["llama-cpp-python:f16: 5 run(s)"]}
    r = audit_report(_collected(0.02, 0.01), [{**CELLS[0], "honest": honest}],
                     AuditSettings(claim="F16", budget_tokens=10, max_tokens=5), "t")
    assert any("too few runs to bound their own false alarms (llama-cpp-python:f16: 5 run(s))" in x
               for x in r["limitations"])


def test_without_a_shipped_table_the_loader_says_so(monkeypatch):
    import inferencekit.quality.equivalence_run as er

    monkeypatch.setattr(er, "SHIPPED_TABLE", "no-such-table.json")
    assert load_table(None) == ([], "none shipped for this model yet")


def test_auto_draws_its_text_fallback_from_the_text_pool():
    # the text cells were calibrated on the short prompts: an endpoint without logprobs falls back to a draw from
    # them, and the run says which pool it drew from (a cell applies only to runs made alike)
    from inferencekit.data.prompts import PromptSet
    from inferencekit.quality.equivalence_task import plan_audit

    dev = load_prompt_set("dev")
    long = PromptSet("long-pool", "test", "0" * 64, dev.prompts)
    short = PromptSet("short-pool", "test", "1" * 64, dev.prompts[:40])
    plan = plan_audit(long, AuditSettings(claim="F16", budget_tokens=128, budget_requests=80), "auto", None, short)
    assert plan.s.pool == "long-pool" and len(plan.chosen) == 2
    assert plan.text_s.pool == "short-pool" and len(plan.text_chosen) == 10
    assert {p.id for p in plan.text_chosen} <= {p.id for p in short.prompts}
    alone = plan_audit(short, AuditSettings(claim="F16", budget_requests=80), "text")
    assert alone.s.pool == alone.text_s.pool == "short-pool" and alone.text_chosen == alone.chosen
