"""Hidden probes a load mixes in: what the runner writes for each (``bench/runner.py``) reaches the gates.

The replies are small constructed streams; the probes are the planner's own (``gates/probes/load.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.client import Exchange
from inferencekit.bench.journal import JOURNAL_NAME, Journal, materialise
from inferencekit.bench.runner import LoadRunner
from inferencekit.data.prompts import Prompt
from inferencekit.gates.check import read_run_rows
from inferencekit.gates.judges import order
from inferencekit.gates.judges.hidden_probes import judge_run
from inferencekit.gates.probes.load import load_extras
from inferencekit.rundir import RunDir


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class StubClient:
    """Answers every POST with one streamed "Hi" (2 chunks, usage, [DONE]); sends nothing. ``dropped``: the fields
    the client reports it dropped on an HTTP 400 (``Exchange.dropped_fields``) for bodies that carry them."""

    def __init__(self, dropped: tuple[str, ...] = ()) -> None:
        self.n = 0
        self.dropped = dropped

    async def post(self, path: str, body: dict[str, Any], optional: Any = (), sink: Any = None) -> Exchange:
        self.n += 1
        t0 = 1_000_000_000 * self.n
        chunks = [(t0 + 1_000_000, _sse({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})),
                  (t0 + 2_000_000, _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 5, "completion_tokens": 1}})),
                  (t0 + 2_500_000, b"data: [DONE]\n\n")]
        return Exchange(request_id=f"r{self.n}", path=path, body=body, sent_ns=t0, call_ns=t0, status=200,
                        chunks=chunks, content_type="text/event-stream",
                        dropped_fields=[f for f in self.dropped if f in body])


KW: dict[str, Any] = dict(levels=["c1"], heaviest="c1", probes=True, kat=0, kat_max_tokens=16, seed=3, model="m",
                          max_tokens=16, extra={}, ctk={}, neutral={}, top_k_off=0)


def _mix(tmp_path: Path, dropped: tuple[str, ...] = (), **kw: Any) -> RunDir:
    """A run dir holding one load's extra requests (hidden probes, known answers), half of them sent alone and
    half through a level's journal."""
    run = RunDir.create(tmp_path / "run")
    run.update_run(operation="bench serve")
    extras = load_extras(**{**KW, **kw})
    runner = LoadRunner(StubClient(dropped), run, "eng", lambda req: {}, extras=extras)  # type: ignore[arg-type]
    probes = [*extras["alone"], *extras["by_level"]["c1"]]
    half = len(probes) // 2

    async def go() -> None:
        for p in probes[:half]:
            await runner.send_alone(p)
        journal_path = run.path / "outputs" / "eng" / "load-c1" / JOURNAL_NAME
        with Journal(journal_path) as journal:
            for p in probes[half:]:
                await runner._send_extra(p, "c1", journal)
        assert list(materialise(run, "eng", "c1", journal_path)) == []  # probes are not load replies

    asyncio.run(go())
    return run


def test_probes_from_the_public_dev_set_say_so_after_a_round_trip_through_the_run_dir(tmp_path):
    run = _mix(tmp_path)
    rows, _ = read_run_rows(run.path, "eng")
    assert rows.mixed_probes and {r["meta"].get("prompt_source") for r in rows.mixed_probes} == {"dev"}
    gate = judge_run(rows)
    assert gate is not None
    assert any("packaged public dev prompts" in x and "the load ran on them too" in x for x in gate.limitations)
    assert gate.fallbacks == ()  # the load itself was the public set: a limitation, not a fallback


def test_a_sealed_set_too_small_for_the_probes_is_a_fallback_on_the_gate(tmp_path):
    sealed = [Prompt(f"s{i}", "short", ({"role": "user", "content": f"sealed question {i}"},)) for i in range(3)]
    run = _mix(tmp_path, prompts=sealed, dataset="sealed.jsonl")
    rows, _ = read_run_rows(run.path, "eng")
    assert {r["meta"].get("prompt_source") for r in rows.mixed_probes} == {"dev-fallback"}
    gate = judge_run(rows)
    assert gate is not None
    assert any("packaged public dev prompts" in x and "held too few" in x for x in gate.fallbacks)
    assert set(gate.fallbacks) <= set(gate.limitations)


def test_an_ill_typed_probe_meta_in_a_reply_file_is_ignored(tmp_path):
    run = _mix(tmp_path)
    for path in run.extra_files("eng", "probes", gz=True):
        doc = orjson.loads(path.read_bytes())
        doc["probe_meta"] = ["dev"]
        path.write_bytes(orjson.dumps(doc))
    rows, _ = read_run_rows(run.path, "eng")
    assert {tuple(r["meta"]) for r in rows.mixed_probes} == {()}


def test_fields_dropped_on_a_400_from_load_mixed_requests_are_a_fallback_of_their_gates(tmp_path):
    # before: dropped_note was applied to gate-run probe logs only, so a load's probes that lost their seed or
    # chat_template_kwargs judged PASS with nothing said
    run = _mix(tmp_path, dropped=("seed", "chat_template_kwargs", "stream_options"), kat=2)
    rows, _ = read_run_rows(run.path, "eng")
    hidden = judge_run(rows)
    assert hidden is not None
    [drop] = [x for x in hidden.fallbacks if "rejected optional fields" in x]
    assert "seed on" in drop and "(requests: " in drop and drop in hidden.limitations
    known = order.judge_run(rows)
    assert known is not None and rows.kat_records
    assert any("rejected optional fields" in x and "kat/" in x for x in known.fallbacks)
    clean = read_run_rows(_mix(tmp_path / "clean", kat=2).path, "eng")[0]
    assert not any("rejected" in x for x in (judge_run(clean) or hidden).fallbacks)
    assert not any("rejected" in x for x in (order.judge_run(clean) or known).fallbacks)


def test_structured_requests_reach_their_folders_and_the_contract_judge_after_a_round_trip(tmp_path):
    from inferencekit.evidence.record import part_folder
    from inferencekit.gates.judges.structured_load import judge_run as structured_judge
    from inferencekit.rundir import walk_engine_folder

    run = _mix(tmp_path, probes=False, structured=2)  # one JSON request, one tool call: alone, then through c1
    assert run.structured_folders("eng") == [(None, "structured/alone"), ("c1", "structured/load-c1")]
    rows, files = read_run_rows(run.path, "eng")
    got = sorted((r["level"] or "", r["kind"], r["bucket"]) for r in rows.structured_rows)
    # the stub answers "Hi": no JSON, so an invalid JSON reply and an unparsable call, alone and under load
    assert got == [("", "structured_json", "invalid"), ("", "tool_call", "unparsable"),
                   ("c1", "structured_json", "invalid"), ("c1", "tool_call", "unparsable")]
    assert {r["path"] for r in rows.structured_rows} == {"json_schema", "response_format"}
    inputs = [p for _, folder in run.structured_folders("eng")
              for p in (run.path / "inputs" / "eng" / folder).glob("*.json")]
    assert len(inputs) == 4  # every body beside its reply
    assert [f for f, _ in run.side_replies("eng")] == ["structured/alone"] * 2 + ["structured/load-c1"] * 2
    assert [f for f, _ in run.extra_replies("eng")] == ["structured/alone"] * 2 + ["structured/load-c1"] * 2
    assert list(walk_engine_folder(run.path / "outputs" / "eng")) == []  # not load requests
    rel = [p.relative_to(run.path).as_posix() for _, p in run.side_replies("eng")]
    assert {part_folder(r, run.path) for r in rel} == {"outputs/eng/structured/alone", "outputs/eng/structured/load-c1"}
    assert set(rel) <= set(files)
    gate = structured_judge(rows)
    assert gate is not None and gate.verdict == "UNPROVEN"  # 0 of 1 alone: nothing under load could drop below it


def test_superseding_a_level_moves_its_extra_requests_so_they_are_sent_again(tmp_path) -> None:
    """A level that lost requests to a dead server runs again whole (``--resume``): its known answers and probes sent
    inside it move to ``superseded/<n>/`` with the level, so the next attempt sends them again rather than keeping a
    dead-server failure as the point's known-answer verdict."""
    from inferencekit.rundir import RunDir, kat_folder, write_json

    run = RunDir(tmp_path / "run")
    write_json(run.output_path("e", "r1", "short", "p0"), {"status": 0, "error": "connection failed"})
    kat = run.special_path("e", kat_folder("r1"), "kat-1")
    kat_in = run.special_path("e", kat_folder("r1"), "kat-1", "inputs")
    other = run.special_path("e", kat_folder("r2"), "kat-1")  # another point's copy stays
    for f in (kat, kat_in, other):
        write_json(f, {"status": 0, "error": "connection failed"})
    moved = run.supersede_level("e", "r1", [(kat_folder("r1"), "kat-1"), (kat_folder("r1"), "never-sent")])
    assert moved == str(run.path / "superseded" / "1")
    assert not kat.exists() and not kat_in.exists() and other.is_file()
    assert (run.path / "superseded" / "1" / kat.relative_to(run.path)).is_file()
    assert (run.path / "superseded" / "1" / kat_in.relative_to(run.path)).is_file()
    assert (run.path / "superseded" / "1" / "outputs" / "e" / "load-r1" / "short" / "p0.json").is_file()
