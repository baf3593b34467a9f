"""verify's plan (checked before anything is sent) and its record: each part refuses from --extra-body the fields it
sets itself, and the verification record and card say which (``verify.py``, ``api/body.py``)."""

import io
from pathlib import Path

from rich.console import Console

from inferencekit.rundir import RunDir
from inferencekit.verify import PROFILES, VerifyRequest, plan_verify, verification_record


def _plan(extra: dict):
    return plan_verify(VerifyRequest(profile=PROFILES["quick"], base_url=None, model=None, api_key_env=None,
                                     timeout=60.0, extra_body=extra, chat_template_kwargs={"enable_thinking": False},
                                     run_dir=None, seed=1, gate_seed=2))


def test_each_part_refuses_the_fields_it_sets_and_sends_the_rest():
    plan = _plan({"temperature": 0.5, "tools": [], "top_k": 1})
    assert plan.cfg.extra_body == {"tools": [], "top_k": 1} and plan.cfg.refused_fields == ["temperature"]
    assert plan.cfg.chat_template_kwargs == {"enable_thinking": False}
    notes = plan.notes()
    assert notes == {
        "capability probe": ["--extra-body fields temperature were not sent: probe sets it itself"],
        "bench serve": ["--extra-body fields temperature were not sent: bench serve sets it itself"],
        "gates": ["--extra-body fields temperature, top_k were not sent: gates run sets them itself"],
        "gates: order": ["--extra-body fields temperature, tools were not sent: gates order sets them itself"],
        "gates: contract": ["--extra-body fields temperature, tools, top_k were not sent: probe --contract sets them "
                            "itself"]}
    assert plan.gate_s.request_policy is not None
    assert plan.gate_s.request_policy["refused_fields"] == ["temperature", "top_k"]
    assert _plan({"mirostat": 0}).notes() == {}


def test_the_record_and_the_card_say_what_was_refused(tmp_path):
    plan = _plan({"temperature": 0.5, "tools": []})
    run = RunDir.create(tmp_path / "r")
    parts = [{"part": "bench serve", "kind": "bench", "evidence_id": None, "verdict": "PASS", "reason": "ok"}]
    rec = verification_record(run, PROFILES["quick"], {"engine": "e", "model": "m"}, parts, [], [], plan.notes())
    assert "gates: order: --extra-body fields temperature, tools were not sent: gates order sets them itself" in \
        rec["limitations"]
    assert rec["data"]["request_notes"] == plan.notes()
    from inferencekit.report.verify_card import render_verification

    bench = {"identity": {"engine": {"engine": "e"}, "model": {"id": "m"}}, "limitations": [], "missing": [],
             "data": {"levels": {}}}
    out = io.StringIO()
    render_verification(Console(file=out, width=200), rec, {"bench": bench, "probe": {"data": {"capabilities": {}}}})
    text = out.getvalue()
    assert "note: gates: order: --extra-body fields temperature, tools were not sent" in text
    assert "note: bench serve:" not in text  # the bench part's own note is among the bench notes


def test_the_profiles_expect_every_gate_one_engine_can_be_judged_by():
    gates = [p for p, _ in PROFILES["quick"].expected if p.startswith("gates: ")]
    assert gates == ["gates: caching", "gates: token_count", "gates: output_length", "gates: unique_prompts",
                     "gates: hidden_probes", "gates: rare_tokens", "gates: order",
                     "gates: contract"]  # spec_exact needs a second engine
    assert all(g in [p for p, _ in PROFILES[name].expected] for name in ("standard", "full") for g in gates)


def test_strict_makes_a_pass_part_whose_requests_dropped_a_field_unproven():
    from inferencekit.verify import strict_parts

    parts = [{"part": "bench serve", "kind": "bench", "evidence_id": "ev_1", "verdict": "PASS", "reason": "ok"},
             {"part": "gates: caching", "kind": "gates", "evidence_id": "ev_2", "verdict": "PASS", "reason": "ok"},
             {"part": "gates: order", "kind": "gates", "evidence_id": "ev_2", "verdict": "PASS", "reason": "ok"},
             {"part": "capability probe", "kind": "probe", "evidence_id": "ev_3", "verdict": None, "reason": "info"}]
    notes = {"gates": ["--extra-body temperature not sent (gates run sets it)"]}
    got = {p["part"]: p["verdict"] for p in strict_parts(parts, notes)}  # type: ignore[arg-type]
    assert got == {"bench serve": "PASS", "gates: caching": "UNPROVEN", "gates: order": "PASS",
                   "capability probe": None}
    assert strict_parts(parts, {}) == parts  # type: ignore[arg-type]


# ---- --strict sees the fallbacks of every part, not only the request policy's and the gates' (issue 18 audit)

def _bench_run(tmp_path, *, dropped: list[str], retok_errors: dict[str, str] | None = None):
    """A finished one-level bench serve run dir of two recorded vLLM replies (the second with ``dropped`` as the
    client's dropped fields), judged into its record by bench serve's own ``bench_record``."""
    import copy
    import json

    from inferencekit.api.detect import EngineInfo
    from inferencekit.bench.config import ServeConfig
    from inferencekit.bench.plan import parse_levels
    from inferencekit.bench.serve import bench_record
    from inferencekit.rundir import write_json
    from tests.paths import FIXTURES

    reply = json.loads((FIXTURES / "replies" / "vllm" / "chat_stream_counted.json").read_text())
    reply.pop("_provenance", None)
    run = RunDir.create(tmp_path / "run")
    cfg = ServeConfig(levels=parse_levels([1], None), retokenize=retok_errors is not None)
    run.update_run(operation="bench serve", bench_config=cfg.to_json())
    for i in range(2):
        r = {**copy.deepcopy(reply), "level": "c1", "id": f"p{i}", "bucket": "short",
             "dropped_fields": dropped if i == 1 else []}
        write_json(run.output_path("vllm", "c1", "short", f"p{i}"), r)
    if retok_errors is not None:
        write_json(run.level_dir("outputs", "vllm", "c1") / "retokenized.json",
                   {"tokenizer": "engine:vllm/tokenize", "counts": {"p0": 16}, "errors": retok_errors})
    info = EngineInfo("vllm", "0.32.0", ["smollm2"], "smollm2")
    return bench_record(run, cfg, info, "vllm", retok_source=None, fixed={})


def _probe_rec():
    return {"evidence_id": "ev_probe", "data": {}}


def test_strict_makes_the_bench_part_unproven_when_its_load_dropped_fields_on_a_400(tmp_path):
    from inferencekit.verify import assemble_parts

    rec = _bench_run(tmp_path, dropped=["seed", "chat_template_kwargs"])
    assert rec["data"]["fallbacks"] == [
        "the server rejected optional fields ['chat_template_kwargs', 'seed'] (HTTP 400); they were dropped"]
    prof = PROFILES["quick"]
    lax = {p["part"]: p for p in assemble_parts(prof, _probe_rec(), rec, None, {}, {}, strict=False)}
    assert lax["bench serve"]["verdict"] == "PASS" and lax["bench serve"]["fallbacks"] == rec["data"]["fallbacks"]
    strict = {p["part"]: p for p in assemble_parts(prof, _probe_rec(), rec, None, {}, {}, strict=True)}
    assert strict["bench serve"]["verdict"] == "UNPROVEN"
    assert strict["bench serve"]["reason"].startswith("--strict: a PASS resting on a fallback (the server rejected")
    # a clean load stays PASS under --strict
    clean = _bench_run(tmp_path / "clean", dropped=[])
    assert {p["part"]: p["verdict"] for p in assemble_parts(prof, _probe_rec(), clean, None, {}, {},
                                                            strict=True)}["bench serve"] == "PASS"


def test_a_tokenizer_refusal_in_a_load_is_a_limitation_naming_the_requests(tmp_path):
    rec = _bench_run(tmp_path, dropped=[], retok_errors={"p1": "HTTP 422: Unprocessable Entity"})
    lines = [x for x in rec["limitations"] if "refused" in x and "tokenizer" in x]
    assert lines == ["the tokenizer (engine:vllm/tokenize) refused 1 reply text(s), so their re-tokenized counts are "
                     "missing (requests: load-c1/p1; first error: HTTP 422: Unprocessable Entity)"]
    assert rec["data"]["retokenize_refused"] == ["load-c1/p1"]


def test_strict_makes_a_quality_task_part_that_rests_on_a_fallback_unproven(tmp_path, monkeypatch):
    import inferencekit.verify as verify
    from inferencekit.verify import SAMPLER_PART, _task_parts, assemble_parts

    note = "the server lists at most 5 alternatives (asked 20): fewer prompts can be judged"
    sampler_rec = {"evidence_id": "ev_s", "data": {"fallbacks": [note]}}
    monkeypatch.setattr(verify, "sampler_task", lambda *a, **k: ("PASS", "sampler ok", [sampler_rec]))
    monkeypatch.setattr(verify, "gsm8k_task", lambda *a, **k: (None, "informational", []))
    prof = PROFILES["standard"]
    built: dict = {}
    _task_parts(built, "http://x", RunDir.create(tmp_path / "r"), prof, label="e", model=None, api_key_env=None,
                timeout=1.0, extra_body={}, ctk={}, quiet=True)
    assert built[SAMPLER_PART]["fallbacks"] == [note]
    rec = _bench_run(tmp_path, dropped=[])
    parts = {p["part"]: p for p in assemble_parts(prof, _probe_rec(), rec, None, built, {}, strict=True)}
    assert parts[SAMPLER_PART]["verdict"] == "UNPROVEN" and note in parts[SAMPLER_PART]["reason"]
    parts = {p["part"]: p for p in assemble_parts(prof, _probe_rec(), rec, None, built, {}, strict=False)}
    assert parts[SAMPLER_PART]["verdict"] == "PASS"


def test_strict_makes_an_appliance_part_that_rests_on_a_fallback_unproven(tmp_path, monkeypatch):
    import asyncio

    import inferencekit.verify as verify
    from inferencekit.verify import _appliance_part, assemble_parts

    cached = "2 of 6 decode/concurrency samples were served partly from the prompt cache"
    receipt = {"verdict": "PASS", "limitations": [cached], "fallbacks": [cached]}
    rec = {"evidence_id": "ev_a", "data": {"fallbacks": [cached]}}

    async def fake_receipt(*a, **k):
        return receipt, rec

    monkeypatch.setattr(verify, "appliance_receipt", fake_receipt)
    plan = {"settings": None, "metadata": {}, "source": "test"}
    part, got = asyncio.run(_appliance_part(plan, None, None, RunDir.create(tmp_path / "r"), None, None, True))  # type: ignore[arg-type]
    assert got is rec and part is not None and part["fallbacks"] == [cached]
    bench = _bench_run(tmp_path, dropped=[])
    parts = {p["part"]: p for p in assemble_parts(PROFILES["full"], _probe_rec(), bench, part, {}, {}, strict=True)}
    assert parts["bench: appliance receipt"]["verdict"] == "UNPROVEN"


def test_record_fallbacks_reads_every_record_behind_a_part_once():
    from inferencekit.verify import record_fallbacks

    a = {"data": {"fallbacks": ["x", "y"]}}
    b = {"data": {"fallbacks": ["y", "z", 3]}}
    assert record_fallbacks(a, None, {"data": {}}, b) == ["x", "y", "z"]


def test_the_equivalence_part_without_a_claim_or_a_reference_is_unproven_with_the_reason(tmp_path):
    import asyncio

    from inferencekit.verify import EQUIV_PART, equivalence_part

    run = RunDir.create(str(tmp_path / "run"))
    part, recs = asyncio.run(equivalence_part(None, None, run, 300, None, "embedded"))  # type: ignore[arg-type]
    assert part is not None and part["part"] == EQUIV_PART and part["verdict"] == "UNPROVEN" and recs == []
    assert part["reason"].startswith("no --claim")
    part, _ = asyncio.run(equivalence_part(None, None, run, 300, "F16", None))  # type: ignore[arg-type]
    assert part is not None and part["verdict"] == "UNPROVEN" and "no reference model" in part["reason"]
    assert asyncio.run(equivalence_part(None, None, run, 0, "F16", "embedded")) == (None, [])  # type: ignore[arg-type]
    assert PROFILES["quick"].equivalence_tokens == 0 and PROFILES["standard"].equivalence_tokens == 300
    assert (EQUIV_PART, "equivalence audit") in PROFILES["standard"].expected


# ---- --workload (issue 23 item 5): the load part's prompts, planned before anything is sent

def _workload_plan(workload: str, **kw):
    return plan_verify(VerifyRequest(profile=PROFILES["quick"], base_url=None, model=None, api_key_env=None,
                                     timeout=60.0, extra_body={}, chat_template_kwargs={}, run_dir=None, seed=1,
                                     gate_seed=2, workload=workload, **kw))


def test_the_conversations_workload_runs_sessions_at_the_profiles_levels():
    from inferencekit.verify import VERIFY_TURN_TOKENS, VERIFY_TURNS

    plan = _workload_plan("conversations")
    prof = PROFILES["quick"]
    assert plan.cfg.dataset == "conversations" and plan.static is None  # drawn per run with the server's tokenizer
    assert (plan.cfg.turns, plan.cfg.input_len) == (VERIFY_TURNS, VERIFY_TURN_TOKENS)
    assert [lv.concurrency for lv in plan.cfg.levels] == list(prof.concurrency)
    assert plan.cfg.num_prompts == max(max(prof.concurrency), prof.num_prompts // VERIFY_TURNS)
    assert plan.cfg.probes and plan.cfg.kat == prof.kat  # the gates' load parts are the same as for dev


def test_the_trace_workload_replays_one_open_loop_level_of_the_files_rows():
    from inferencekit.data.traces import load_trace

    sample = Path(__file__).parents[2] / "src/inferencekit/data/traces/mooncake_sample.jsonl"
    plan = _workload_plan(f"trace:{sample}", time_scale=2.0, trace_block_size=64)
    rows = load_trace(str(sample), "mooncake", block_size=64).rows
    assert [(lv.label, lv.arrival) for lv in plan.cfg.levels] == [("trace", "trace")]
    assert (plan.cfg.trace, plan.cfg.time_scale, plan.cfg.num_prompts) == (str(sample), 2.0, len(rows))
    assert plan.cfg.warmup == 0 and plan.cfg.max_tokens is None and plan.static is None


def test_a_bad_workload_is_refused_before_anything_is_sent(tmp_path):
    import pytest

    from inferencekit.errors import OpError

    with pytest.raises(OpError, match="--workload takes dev, conversations or trace:FILE, got 'sharegpt'"):
        _workload_plan("sharegpt")
    with pytest.raises(OpError, match="--workload takes"):
        _workload_plan("trace:")
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n{"timestamp": "x"}\n')
    with pytest.raises(OpError, match=f"{bad}:2"):
        _workload_plan(f"trace:{bad}")
    with pytest.raises(OpError, match="apply only to --workload trace:FILE"):
        _workload_plan("conversations", time_scale=0.5)
    assert not list(tmp_path.glob("runs"))  # nothing written: planning creates no run dir


def test_a_property_is_reported_beside_the_verdict_and_strict_gives_its_strict_verdict(tmp_path):
    """An order part whose known answers first differed under load at a near-tie: PASS with the property
    not-batch-invariant on the part, the record's ``data.properties`` and the card; ``--strict`` FAILs it (seed 004)."""
    from inferencekit.gates.probes.plan import ProbeSettings
    from inferencekit.gates.run import GateRunSettings
    from inferencekit.report.verify_card import render_verification
    from inferencekit.rundir import KAT_ALONE, KAT_LOAD, write_json
    from inferencekit.verify import _gate_parts
    from tests.unit.gates.judges.test_order_noise import chain, diverge, honest_run, reply

    run = RunDir.create(tmp_path / "r")
    base = run.path / "outputs" / "e"
    near = [(t, lp, r, lp - 0.05) if i == 12 else (t, lp, r, rlp) for i, (t, lp, r, rlp) in enumerate(chain(7))]

    pairs = [*honest_run(eps=0.2), (reply(near), reply(diverge(near, 12, margin=0.05)))]
    for i, (a, b) in enumerate(pairs):
        write_json(base / KAT_ALONE / f"kat-{i}.json", a)
        write_json(base / KAT_LOAD / f"kat-{i}.json", {**b, "level": "c4"})
    settings = GateRunSettings(gates=[], probes=ProbeSettings(gates=()))
    parts, _, budget = _gate_parts(run, "e", [], settings, None)
    order = parts["gates: order"]
    assert order["verdict"] == "PASS" and [p["property"] for p in order["properties"]] == ["not-batch-invariant"]
    # the order part ran a null test (the margin's rank), so it is in the error budget's family, and PASSed
    assert [f["gate"] for f in budget.family] == ["order"] and not budget.kept and not budget.withheld
    rec = verification_record(run, PROFILES["quick"], {"engine": "e", "model": "m"}, [order], [], [], {},
                              budget=budget.to_json())
    assert rec["verdict"] == "PASS" and rec["data"]["properties"][0]["part"] == "gates: order"
    bench = {"identity": {"engine": {"engine": "e"}, "model": {"id": "m"}}, "limitations": [], "missing": [],
             "data": {"levels": {}}}
    out = io.StringIO()
    render_verification(Console(file=out, width=200), rec, {"bench": bench, "probe": {"data": {"capabilities": {}}}})
    assert "property (gates: order), not a verdict: not-batch-invariant: 1 of 5 known-answer requests" in out.getvalue()
    assert "error budget: statistical FAILs share a family-wise false-FAIL rate of 1% for an honest engine, split by " \
           "Holm (1979) over 1 gate(s) (order)" in out.getvalue()
    strict, _, _ = _gate_parts(run, "e", [], settings, None, strict=True)
    assert strict["gates: order"]["verdict"] == "FAIL"
