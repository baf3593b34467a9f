"""verify's plan (checked before anything is sent) and its record: each part refuses from --extra-body the fields it
sets itself, and the verification record and card say which (``verify.py``, ``api/body.py``)."""

import io

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
        "gates: order": ["--extra-body fields temperature, tools were not sent: gates order sets them itself"]}
    assert plan.gate_s.request_policy is not None
    assert plan.gate_s.request_policy["refused_fields"] == ["temperature", "top_k"]
    assert _plan({"min_p": 0.0}).notes() == {}


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
                     "gates: hidden_probes", "gates: rare_tokens", "gates: order"]  # spec_exact needs a second engine
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
