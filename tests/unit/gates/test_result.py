"""The Gate record: a PASS is a bounded claim (n judged, what it rules out), fallbacks and ``--strict`` (issue 18)."""

from __future__ import annotations

from inferencekit.gates.result import Gate, merge_gates, overall, strict_gate
from inferencekit.stats import rules_out


def test_a_pass_that_judged_nothing_is_unproven():
    g = Gate("caching", "PASS", "repeats are not faster")
    assert g.verdict == "UNPROVEN" and g.reason == "judged no item, so no PASS: repeats are not faster"
    assert Gate("caching", "PASS", "ok", judged=1).verdict == "PASS"


def test_a_pass_states_its_n_and_bound_in_the_record_and_on_the_card():
    bound = rules_out(0, 40, "repeats served from a cache", "cache rate")
    assert bound == "0 of 40 repeats served from a cache: a cache rate above 8.8% is ruled out at 95% (Wilson)"
    g = Gate("caching", "PASS", "repeats are not faster", judged=40, rules_out=bound)
    assert g.to_json()["judged"] == 40 and g.to_json()["rules_out"] == bound
    assert g.bounded_reason == f"repeats are not faster [n=40; {bound}]"
    assert Gate("caching", "FAIL", "cached", judged=40, rules_out=bound).bounded_reason == "cached"


def test_fallbacks_are_limitations_and_strict_turns_their_pass_into_unproven():
    g = Gate("token_count", "PASS", "agree", limitations=["no tokenizer"], judged=5, fallbacks=["allowance used"])
    assert g.limitations == ("no tokenizer", "allowance used") and g.fallbacks == ("allowance used",)
    s = strict_gate(g)
    assert s.verdict == "UNPROVEN" and s.reason.startswith("--strict: a PASS resting on a fallback (allowance used)")
    clean = Gate("token_count", "PASS", "agree", judged=5)
    assert strict_gate(clean) is clean
    assert strict_gate(Gate("token_count", "FAIL", "bad", fallbacks=["x"])).verdict == "FAIL"


def test_strict_counts_a_gate_marked_not_applicable_as_unproven():
    na = Gate("output_length", "NOT RUN", "no exact-length requests", applicable=False)
    assert overall([Gate("caching", "PASS", "ok", judged=3), na]) == "PASS"
    assert overall([Gate("caching", "PASS", "ok", judged=3), strict_gate(na)]) == "UNPROVEN"


def test_merged_gates_sum_their_n_and_keep_bounds_and_fallbacks():
    a = Gate("hidden_probes", "PASS", "a", judged=4, rules_out="ra")
    b = Gate("hidden_probes", "PASS", "b", judged=6, rules_out="rb", fallbacks=["fb"])
    m = merge_gates("hidden_probes", [a, b])
    assert (m.verdict, m.judged, m.rules_out, m.fallbacks) == ("PASS", 10, "ra; rb", ("fb",))
    assert m.limitations.count("fb") == 1
