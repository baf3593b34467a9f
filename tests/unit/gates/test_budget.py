"""The error budget (gates/budget.py): Holm's split of a 1% family-wise false-FAIL rate over verify's statistical
FAILs, on hand-made gates and on recorded cheat runs (tests/fixtures/gates/probe-logs, llama-server behind the cheat
proxy, 30 Nov 2026), so the split is shown to keep each recorded cheat's FAIL."""

from __future__ import annotations

import pytest

from inferencekit.gates.budget import (
    FAMILY_ALPHA,
    apply_budget,
    binomial_tail,
    gate_p,
    holm,
    null_test,
)
from inferencekit.gates.result import Gate, merge_gates
from tests.unit.gates.test_check import judged


def _stat(name: str, p: float, *, fired: bool, alpha: float = 0.05, kind: str | None = "statistical") -> Gate:
    metrics = {"null_tests": [null_test(f"{name} rule", p, alpha, f"{name} calibration", fired=fired)]}
    if kind:
        metrics["fail_kind"] = kind
    return Gate(name, "FAIL" if fired else "PASS", f"{name} reason", metrics, judged=1)


def test_holm_rejects_in_order_and_stops_at_the_first_miss():
    # Holm 1979 at α 0.05 over four p-values: 0.005 ≤ 0.0125 and 0.01 ≤ 0.0167 are rejected; 0.03 > 0.025 stops it,
    # so 0.04 is kept even though it is below its own threshold 0.05
    out = holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert [r for r, _ in out] == [True, False, False, True]
    assert [round(t, 4) for _, t in out] == [0.0167, 0.05, 0.025, 0.0125]
    assert holm([], 0.01) == []
    with pytest.raises(ValueError):
        holm([0.1], 1.5)


def test_a_binomial_rule_run_twice_is_pooled_into_one_tail():
    live = null_test("sampling", 1 / 81, 1 / 81, "c", fired=True, binomial=(4, 4, 1 / 3))
    load = null_test("sampling", 1 / 81, 1 / 81, "c", fired=True, binomial=(4, 4, 1 / 3))
    p, n = gate_p([live, load])
    assert n == 1 and p == pytest.approx((1 / 3) ** 8)  # 8 of 8 prompts, not 2 × 1/81
    # 4 of 4 live but 1 of 4 inside the load: 5 of 8 is no evidence
    p, _ = gate_p([live, null_test("sampling", None, 1 / 81, "c", fired=False, binomial=(1, 4, 1 / 3))])
    assert p == pytest.approx(binomial_tail(5, 8, 1 / 3)) and p > 0.05
    # other rules of the gate: Bonferroni over the tests
    p, n = gate_p([live, load, null_test("timing", 0.02, 0.05, "c", fired=True)])
    assert n == 2 and p == pytest.approx(2 * (1 / 3) ** 8)
    assert gate_p([]) == (1.0, 0)


def test_the_budget_keeps_a_strong_fail_withholds_a_weak_one_and_leaves_deterministic_ones_alone():
    strong = _stat("caching", 1e-4, fired=True)
    weak = _stat("order", 0.02, fired=True, alpha=0.05)  # significant at its own 5%, not within 1% over 3 gates
    honest = _stat("hidden_probes", 1.0, fired=False)
    determ = Gate("token_count", "FAIL", "usage 64 for 30 streamed tokens", judged=1)
    outside = Gate("contract", "FAIL", "top_p accepted and not applied", judged=1)
    gates, budget = apply_budget([strong, weak, honest, determ, outside])
    v = {g.gate: g for g in gates}
    assert v["caching"].verdict == "FAIL" and "Holm threshold 0.0033 of the 1% family budget over 3 gate(s)" in \
        v["caching"].reason and "caching calibration" in v["caching"].reason
    assert v["order"].verdict == "UNPROVEN" and v["order"].reason.startswith("withheld by the error budget")
    assert "significant at its own α = 0.05" in v["order"].reason
    assert v["hidden_probes"].verdict == "PASS" and v["hidden_probes"] is honest
    assert v["token_count"].verdict == "FAIL" and v["token_count"].reason.endswith("[deterministic evidence: no α]")
    assert v["contract"] is outside
    assert budget.kept == ("caching",) and budget.withheld == ("order",) and budget.deterministic == ("token_count",)
    assert budget.outside == ("contract",) and len(budget.family) == 3 and budget.alpha == FAMILY_ALPHA
    line = budget.to_json()["line"]
    assert line.startswith("error budget: statistical FAILs share a family-wise false-FAIL rate of 1%")
    assert "withheld (significant alone, not within the budget): order" in line
    assert "outside the budget at their own α: contract" in line


def test_deterministic_evidence_wins_over_a_statistical_rule_in_a_merged_gate():
    a = _stat("order", 0.5, fired=True, kind="statistical")
    b = Gate("order", "FAIL", "a non-greedy token at T=0", {"fail_kind": "deterministic"}, judged=1)
    gates, budget = apply_budget([merge_gates("order", [a, b])])
    assert gates[0].verdict == "FAIL" and budget.deterministic == ("order",)


def test_the_hidden_probes_four_prompt_rule_alone_is_beyond_any_share_of_one_percent():
    # 4 of 4 prompts equal to greedy: p = 1/81 = 1.2%, more than the whole budget, so verify withholds it
    four = Gate("hidden_probes", "FAIL", "4/4", {"fail_kind": "statistical", "null_tests": [
        null_test("sampling", 1 / 81, 1 / 81, "c", fired=True, binomial=(4, 4, 1 / 3))]}, judged=4)
    gates, budget = apply_budget([four])
    assert gates[0].verdict == "UNPROVEN" and budget.withheld == ("hidden_probes",)


@pytest.mark.parametrize("cheat, gate", [("llama-server-temperature-ignored", "hidden_probes"),
                                         ("llama-server-output-cache", "caching")])
def test_each_recorded_cheat_keeps_its_fail_inside_verify_quicks_family(cheat, gate, tmp_path):
    # verify quick's family: caching, hidden_probes (live and inside the load, merged) and order (known answers);
    # the cheat's gate beside the honest run's other gates, as in one verification
    caught = judged(cheat, tmp_path / "cheat")[gate]
    assert caught.verdict == "FAIL" and caught.metrics["fail_kind"] == "statistical"
    honest = judged("llama-server-honest-full", tmp_path / "honest")
    others = [g for name, g in honest.items() if name != gate and name in ("caching", "hidden_probes")]
    order = _stat("order", 1.0, fired=False, alpha=0.01)
    gates, budget = apply_budget([caught, *others, order])
    assert {g.gate: g.verdict for g in gates}[gate] == "FAIL", budget
    assert budget.kept == (gate,) and len(budget.family) == 3
    p = next(f["p"] for f in budget.family if f["gate"] == gate)
    assert p <= FAMILY_ALPHA / 3  # the first Holm threshold: the cheat's evidence is far below it


def test_the_honest_recorded_run_passes_with_its_null_tests_in_the_family(tmp_path):
    honest = judged("llama-server-honest-full", tmp_path)
    gates, budget = apply_budget(list(honest.values()))
    assert [g.verdict for g in gates] == [g.verdict for g in honest.values()]
    assert {f["gate"] for f in budget.family} == {"caching", "hidden_probes"}
    assert not budget.kept and not budget.withheld
