"""The contract gate's run-dir part: structured requests alone vs under load (``gates/judges/structured_load.py``).

The run dirs are built in the real layout (``RunDir.special_path`` with ``rundir.structured_folder``) from a recorded
run: ``tests/fixtures/structured_load/llama-server-c1-c4.jsonl.gz``, the 24 structured replies and bodies of
``bench serve --structured 8 --concurrency 1,4 --num-prompts 8`` against llama-server b1-0c1e570 with SmolLM2-135M
(4 JSON-schema requests, 4 BFCL tool calls through the response_format path; JSON 4/4 valid and AST 3/4 correct alone
and in both levels). Replies are edited where a test needs another answer.
"""

from __future__ import annotations

import copy
import gzip
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from inferencekit.cli import main
from inferencekit.commands.gates import render_gates
from inferencekit.gates.check import check_run_dir, read_run_rows
from inferencekit.gates.inputs import RunRows
from inferencekit.gates.judges.structured_load import (
    F1_REASON,
    compare_rates,
    judge_run,
    rate,
    structured_row,
)
from inferencekit.gates.record import gates_record
from inferencekit.rundir import RunDir, write_json
from tests.paths import FIXTURES

ENGINE = "llama-server"
_LINES = [json.loads(line) for line in gzip.open(FIXTURES / "structured_load" / "llama-server-c1-c4.jsonl.gz", "rt")]
RECORDED: list[dict[str, Any]] = [x for x in _LINES if "_provenance" not in x]
LIGHT = "tool-simple_python_100"  # light_travel_time(distance_in_light_years=4): correct in the recording


def _level(folder: str) -> str | None:
    return None if folder.endswith("/alone") else folder.rsplit("load-", 1)[1]


def build(tmp_path: Path, edit: Any = None, only: Any = None) -> RunDir:
    """A run dir holding the recorded structured requests; ``edit(level, id, reply)`` may change a reply (in
    place), ``only(id)`` keep a subset."""
    run = RunDir.create(tmp_path / "run")
    run.update_run(operation="bench.serve")
    for x in RECORDED:
        if only is not None and not only(x["id"]):
            continue
        reply = copy.deepcopy(x["reply"])
        if edit is not None:
            edit(_level(x["folder"]), x["id"], reply)
        write_json(run.special_path(ENGINE, x["folder"], x["id"], kind="inputs"), x["body"])
        write_json(run.special_path(ENGINE, x["folder"], x["id"]), reply)
    # one load reply, so the run dir reads as a load (has_load)
    write_json(run.output_path(ENGINE, "c1", "short", "p0"), {"id": "p0", "status": 200, "text": "hi"})
    return run


def judge(run: RunDir) -> Any:
    rows, files = read_run_rows(run.path, ENGINE)
    gate = judge_run(rows)
    assert gate is not None
    return gate, rows, files


def test_the_recorded_run_is_read_in_its_layout_with_the_path_of_every_request(tmp_path):
    run = build(tmp_path)
    assert run.structured_folders(ENGINE) == [(None, "structured/alone"), ("c1", "structured/load-c1"),
                                              ("c4", "structured/load-c4")]
    gate, rows, files = judge(run)
    assert len(rows.structured_rows) == 24 and sum(f.startswith(f"outputs/{ENGINE}/structured/") for f in files) == 24
    paths = {(r["kind"], r["path"]) for r in rows.structured_rows}
    assert paths == {("structured_json", "json_schema"), ("tool_call", "response_format")}
    assert "paths: structured_json via json_schema, tool_call via response_format" in gate.limitations
    assert F1_REASON in gate.limitations and gate.metrics["f1"] == "UNPROVEN"
    table = gate.metrics["structured_load"]
    assert list(table) == ["alone", "c1", "c4"]
    for name in table:
        assert (table[name]["json"]["ok"], table[name]["json"]["judged"]) == (4, 4)
        assert (table[name]["tool"]["ok"], table[name]["tool"]["judged"]) == (3, 4)
        assert table[name]["tool"]["buckets"]["wrong_value"] == 1
    # JSON 4/4 in each level against 4/4 alone: PASS (0 of 4 would have been below the alone interval)
    assert table["c4"]["json"]["verdict"] == "PASS" and table["c4"]["json"]["same"] == 4
    # AST 3/4 alone: its lower bound (30%) is under even 0 of 4's upper bound (49%): too few to tell
    assert table["c4"]["tool"]["verdict"] == "UNPROVEN" and "too few to tell" in table["c4"]["tool"]["reason"]
    assert gate.verdict == "UNPROVEN" and gate.judged == 24
    assert gate.metrics["alone.json_rate"] == 1.0 and gate.metrics["c4.tool_ok"] == 3
    assert gate.metrics["alone.json_low"] == pytest.approx(0.5101, abs=1e-4)


def test_levels_within_the_alone_spread_pass_with_their_n_and_bound(tmp_path):
    gate, _, _ = judge(build(tmp_path, only=lambda rid: rid.startswith("json-")))
    assert gate.verdict == "PASS" and gate.judged == 12
    assert "c1: 4 of 4 schema-valid: a schema-valid rate below 51.0% is ruled out at 95% (Wilson)" in gate.rules_out
    assert "[n=12; " in gate.bounded_reason


def test_a_level_whose_json_breaks_under_load_fails(tmp_path):
    def broken(level: str | None, rid: str, reply: dict[str, Any]) -> None:
        if level == "c4" and rid.startswith("json-"):
            reply["text"] = reply["text"][:-3] + "}}"  # the json-broken-under-load cheat: one brace too many
    gate, _, _ = judge(build(tmp_path, broken))
    table = gate.metrics["structured_load"]
    assert gate.verdict == "FAIL"
    assert table["c4"]["json"]["verdict"] == "FAIL" and table["c4"]["json"]["buckets"]["invalid"] == 4
    assert "below the alone interval (upper 49.0% < 51.0%)" in table["c4"]["json"]["reason"]
    assert table["c4"]["json"]["regressed"] == 4 and table["c1"]["json"]["verdict"] == "PASS"
    assert any(d.get("bucket") == "invalid" and d.get("level") == "c4" for d in gate.details)


def test_cut_and_errored_replies_are_their_own_buckets_never_invalid(tmp_path):
    def spoil(level: str | None, rid: str, reply: dict[str, Any]) -> None:
        if level == "c4" and rid == "json-000":
            reply.update(text='{"name": "Jo', finish_reason="length")
        if level == "c4" and rid == "json-001":
            reply.update(status=500, error="HTTP 500: boom")
    gate, _, _ = judge(build(tmp_path, spoil))
    fig = gate.metrics["structured_load"]["c4"]["json"]
    assert (fig["ok"], fig["judged"], fig["cut"], fig["error"], fig["buckets"]["invalid"]) == (2, 2, 1, 1, 0)


def _tool_reply(reply: dict[str, Any], *, text: str | None = None, calls: list[dict[str, Any]] | None = None,
                finish: str = "stop") -> dict[str, Any]:
    out = {**reply, "finish_reason": finish}
    if text is not None:
        out["text"] = text
    if calls is not None:  # the named tool_choice path: the reply's derived calls (api/reply.py's shape)
        out.update(text="", tool_calls=[{"id": f"c{i}", "type": "function", **c} for i, c in enumerate(calls)],
                   probe_meta={**reply["probe_meta"], "path": "tool_choice"})
    return out


def _light(args: Any, name: str = "light_travel_time") -> str:
    return json.dumps({"name": name, "arguments": args})


CALL = {"name": "light_travel_time", "arguments": json.dumps({"distance_in_light_years": 4})}
BUCKET_CASES = [
    ("correct", {"text": _light({"distance_in_light_years": 4})}),
    ("unparsable", {"text": '{"name": "light_travel_time", "arguments": {"distance'}),
    ("cut", {"text": '{"name": "light_travel_time", "arguments": {"distance', "finish": "length"}),
    ("unparsable", {"text": "[1, 2]"}),
    ("wrong_function", {"text": _light({"distance_in_light_years": 4}, name="get_weather")}),
    ("missing_argument", {"text": _light({})}),
    ("wrong_type", {"text": _light({"distance_in_light_years": "4"})}),
    ("wrong_value", {"text": _light({"distance_in_light_years": 5})}),
    ("unexpected_argument", {"text": _light({"distance_in_light_years": 4, "unit": "s"})}),
    ("correct", {"calls": [CALL]}),
    ("extra_call", {"calls": [CALL, CALL]}),
    ("missing_call", {"calls": []}),
    ("unparsable", {"calls": [{"name": "light_travel_time", "arguments": '{"distance_in_light_years": '}]}),
]


@pytest.mark.parametrize("bucket,edit", BUCKET_CASES, ids=[f"{b}-{i}" for i, (b, _) in enumerate(BUCKET_CASES)])
def test_each_ast_bucket_of_an_edited_tool_call_reply(bucket, edit):
    [recorded] = [x["reply"] for x in RECORDED if x["folder"] == "structured/alone" and x["id"] == LIGHT]
    row = structured_row(None, LIGHT, _tool_reply(recorded, **edit))
    assert row is not None and row["bucket"] == bucket, row
    assert row["path"] == ("tool_choice" if "calls" in edit else "response_format")


def test_the_ast_buckets_reach_the_level_figures(tmp_path):
    def wrong(level: str | None, rid: str, reply: dict[str, Any]) -> None:
        if level == "c1" and rid == LIGHT:
            reply["text"] = _light({"distance_in_light_years": "4"})
        if level == "c1" and rid == "tool-simple_python_300":
            reply["text"] = _light({}, name="music_calculate_note_duration")
    gate, _, _ = judge(build(tmp_path, wrong))
    fig = gate.metrics["structured_load"]["c1"]["tool"]
    assert fig["buckets"]["wrong_type"] == 1 and fig["buckets"]["missing_argument"] == 1 and fig["ok"] == 1
    assert fig["regressed"] == 2 and fig["pairs"] == 4


def test_a_request_its_record_cannot_judge_is_an_error_not_a_crash():
    [recorded] = [x["reply"] for x in RECORDED if x["folder"] == "structured/alone" and x["id"] == LIGHT]
    spoiled = {**recorded, "probe_meta": {"path": "response_format", "functions": "?", "ground_truth": []}}
    row = structured_row(None, LIGHT, spoiled)
    assert row is not None and row["bucket"] == "error"
    bad_truth = {**recorded, "probe_meta": {**recorded["probe_meta"], "ground_truth": [{"nobody": {}}]}}
    assert structured_row(None, LIGHT, bad_truth)["bucket"] == "error"  # type: ignore[index]
    assert structured_row(None, "k", {"probe_kind": "kat", "status": 200, "text": "x"}) is None
    assert structured_row(None, "k", {**recorded, "probe_meta": ["x"]})["path"] is None  # type: ignore[index]


def test_the_rule_on_rates():
    def fig(ok: int, judged: int) -> dict[str, Any]:
        rows = [{"kind": "structured_json", "path": "json_schema", "bucket": "valid" if i < ok else "invalid"}
                for i in range(judged)]
        return rate(rows, "structured_json")
    assert compare_rates(fig(20, 20), fig(12, 20), "schema-valid")[0] == "FAIL"  # [58–92%] vs alone [84–100%]
    assert compare_rates(fig(20, 20), fig(17, 20), "schema-valid")[0] == "PASS"
    assert compare_rates(fig(2, 20), fig(0, 20), "schema-valid")[0] == "UNPROVEN"  # alone too low to drop from
    assert compare_rates(fig(0, 0), fig(3, 3), "schema-valid")[0] == "UNPROVEN"


def test_nothing_structured_is_none_and_not_run(tmp_path):
    assert judge_run(RunRows(engine=ENGINE)) is None
    run = build(tmp_path, only=lambda rid: False)
    [contract] = check_run_dir(run.path, ENGINE, only=("contract",)).gates
    assert contract.verdict == "NOT RUN" and not contract.applicable
    [found] = check_run_dir(build(tmp_path / "x").path, ENGINE, only=("contract",)).gates
    assert found.verdict == "UNPROVEN" and "structured requests alone vs under load" in found.reason


def test_a_level_without_its_alone_copies_is_unproven(tmp_path):
    def drop_alone(level: str | None, rid: str, reply: dict[str, Any]) -> None:
        if level is None:
            reply.update(status=0, error="connection refused")
    gate, _, _ = judge(build(tmp_path, drop_alone, only=lambda rid: rid.startswith("json-")))
    assert gate.verdict == "UNPROVEN"
    assert "nothing to compare" in gate.metrics["structured_load"]["c1"]["json"]["reason"]


def test_the_gates_check_card_shows_the_per_level_figures(tmp_path, capsys):
    run = build(tmp_path)
    assert main(["gates", "check", str(run.path)]) == 3  # UNPROVEN: the AST comparison cannot tell at n=4
    text = capsys.readouterr().out
    assert "structured requests alone vs under load (Wilson 95%)" in text
    assert "4/4 100% [51%–100%]" in text and "3/4 75% [30%–95%]" in text and "json PASS, tool UNPROVEN" in text
    checked = check_run_dir(run.path, ENGINE, only=("contract",))
    rec = gates_record(run, checked.gates, engine=ENGINE, files=checked.files, mode="check", settings={})
    assert any(m["name"] == "contract.c4.json_rate" and m["value"] == 1.0 for m in rec["metrics"])
    buf = StringIO()
    render_gates(Console(file=buf, width=200), rec)
    assert "wrong_value 1" in buf.getvalue()
