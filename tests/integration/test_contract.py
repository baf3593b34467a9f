"""``probe --contract`` against the real engines: the honest ones FAIL no item, the cheat proxy's contract cheats
FAIL theirs, and the recorded run re-judges to the same verdict offline (``gates check``).

The structured-output load is kept small (``--json-load 8``); the issue's 10 runs per engine and per cheat, with
the full load, are ``make bench-contract`` (benchmarks/contract_runs.py; counts in docs/contract.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.cheats import running_proxy
from inferencekit.engines.model import embedded_gguf
from tests.cli_run import run_cli

pytestmark = pytest.mark.engine


def contract(url: str, run_dir: Path, *extra: str) -> tuple[int, dict]:
    return run_cli(["probe", "--base-url", url, "--contract", "--run-dir", str(run_dir), *extra])


def by_item(out: dict) -> dict[str, dict]:
    return {i["item"]: i for i in out["items"]}


def test_the_embedded_engine_fails_no_item_and_the_run_dir_rejudges_the_same(embedded_engine, tmp_path):
    run = tmp_path / "c"
    code, out = contract(embedded_engine.url, run, "--json-load", "8", "--tokenizer", str(embedded_gguf()))
    items = by_item(out)
    assert not [k for k, i in items.items() if i["verdict"] == "FAIL"], out["contract"]
    # what llama-cpp-python cannot do is named, never passed: n is dropped, json_schema answers HTTP 500
    assert out["verdict"] == "UNPROVEN" and code == 3
    assert "known to accept n and drop it" in items["n"]["reason"]
    for k in ("temperature", "top_k", "top_p", "min_p", "seed", "frequency_penalty", "logit_bias_ban", "stop",
              "max_tokens", "prompt_tokens (system)", "prompt_tokens (multi-turn)",
              "response_format json_object (under load)", "tool_choice named"):
        assert items[k]["verdict"] == "PASS", (k, items[k])
    assert items["prompt_tokens (user)"]["count_source"].startswith("local:")
    assert items["response_format json_object (under load)"]["buckets"]["valid"] >= 1
    _, again = run_cli(["gates", "check", str(run)])
    assert again["gates"]["contract"]["verdict"] == out["contract"]["verdict"]


def test_honest_llama_server_passes_what_the_cheats_break(llama_server_engine, tmp_path):
    items_asked = "stop,accounting,context,top_p"
    code, out = contract(llama_server_engine.url, tmp_path / "h", "--items", items_asked)
    items = by_item(out)
    assert code == 0 and out["verdict"] == "PASS", out["contract"]
    assert set(items) == {"stop", "prompt_tokens (user)", "prompt_tokens (system)", "prompt_tokens (multi-turn)",
                          "prompt_tokens (tools)", "prompt_tokens (tools-off)", "context: at the limit",
                          "context: over the limit", "top_p"}
    assert items["context: over the limit"]["status"] == 400


def test_llama_server_serving_a_template_without_tools_shows_the_property_not_unproven(llama_server_engine,
                                                                                        tmp_path):
    # SmolLM2's template renders no tools: the same messages count alike with and without them, and llama-server
    # builds no tool-call grammar for it, so no forcing tool_choice calls (issue 42: a property, docs/properties.md)
    code, out = contract(llama_server_engine.url, tmp_path / "t", "--items", "accounting,tools")
    items = by_item(out)
    assert items["prompt_tokens (tools)"]["reported"] == items["prompt_tokens (tools-off)"]["reported"]
    for k in ("tool_choice named", "tool_choice required", "tool_choice none", "tool calls streamed vs not"):
        assert items[k]["verdict"] is None and items[k]["property"] == "template-without-tools", (k, items[k])
    assert code == 0 and out["verdict"] == "PASS", out["contract"]
    rec = json.loads((tmp_path / "t" / "evidence" / f"{out['evidence_id']}.json").read_text())
    gate = next(g for g in rec["data"]["gates"] if g["gate"] == "contract")
    assert [p["property"] for p in gate["properties"]] == ["template-without-tools"]  # one line for its 4 items
    assert len(gate["properties"][0]["items"]) == 4


@pytest.mark.parametrize("cheat, items_asked, failing", [
    ("stop-ignored", "stop", {"stop"}),
    ("prompt-tokens-inflated", "accounting", {"prompt_tokens (user)", "prompt_tokens (system)",
                                              "prompt_tokens (multi-turn)", "prompt_tokens (tools)",
                                              "prompt_tokens (tools-off)"}),
    ("silent-truncate", "context", {"context: at the limit", "context: over the limit"}),
    ("top-p-dropped", "top_p", {"top_p"}),
])
def test_each_contract_cheat_fails_its_item(llama_server_engine, tmp_path, cheat, items_asked, failing):
    with running_proxy(llama_server_engine.url, [cheat]) as url:
        code, out = contract(url, tmp_path / cheat, "--items", items_asked)
    items = by_item(out)
    assert code == 1 and {k for k, i in items.items() if i["verdict"] == "FAIL"} == failing, out["contract"]


def test_structured_requests_under_load_are_judged_per_level(llama_server_engine, tmp_path):
    """bench serve --structured: JSON and BFCL tool calls alone and inside every level, the contract gate's run-dir
    part compares each level's rates with alone (llama-server: JSON by json_schema, calls by a response_format
    schema of the call, since it builds no tool-call grammar for SmolLM2)."""
    run = tmp_path / "s"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--structured", "8",
                         "--concurrency", "1,2", "--num-prompts", "4", "--max-tokens", "16", "--run-dir", str(run)])
    assert code in (0, 1, 3), out
    _, checked = run_cli(["gates", "check", str(run)])
    gate = checked["gates"]["contract"]
    assert gate["verdict"] in ("PASS", "UNPROVEN", "FAIL")
    assert "schema-valid alone" in gate["reason"] and "c1" in gate["reason"] and "c2" in gate["reason"]
    folders = sorted(p.name for p in (run / "outputs").glob("*/structured/*"))
    assert folders == ["alone", "load-c1", "load-c2"]
    assert len(list((run / "outputs").glob("*/structured/alone/*.json"))) == 8
