"""The equivalence verdict from a run statistic and a calibration table (issue 20): PASS with its power, FAIL with
its threshold and false-alarm rate, UNPROVEN when the budget, the table or the power does not carry a claim."""

from __future__ import annotations

from inferencekit.quality.equivalence_judge import judge_equivalence, pick_cell

CELLS = [
    {"method": "logprob", "claim": "F16", "budget": 300, "alpha": 0.01, "statistic": "kl+gap",
     "threshold": 0.05, "honest": {"fit_runs": 300, "heldout_runs": 299, "heldout_alarms": 0},
     "substitutes": [{"name": "q4_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505},
                     {"name": "q8_0", "runs": 59, "detected": 37, "power": 0.627, "power_lower": 0.516}]},
    {"method": "logprob", "claim": "F16", "budget": 1000, "alpha": 0.01, "statistic": "kl+gap", "threshold": 0.04,
     "honest": {"fit_runs": 300, "heldout_runs": 299, "heldout_alarms": 1},
     "substitutes": [{"name": "q4_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505},
                     {"name": "q8_0", "runs": 59, "detected": 59, "power": 1.0, "power_lower": 0.9505}]},
    {"method": "text", "claim": "F16", "budget": 100, "alpha": 0.05, "threshold": 0.01,
     "honest": {"fit_runs": 59, "heldout_runs": 59, "heldout_alarms": 0},
     "substitutes": [{"name": "q4_0", "runs": 59, "detected": 30, "power": 0.51, "power_lower": 0.40}]},
]


def test_the_cell_is_the_largest_budget_the_run_reached():
    assert pick_cell(CELLS, "logprob", "f16", 999)["budget"] == 300
    assert pick_cell(CELLS, "logprob", "F16", 1000)["budget"] == 1000
    assert pick_cell(CELLS, "logprob", "F16", 299) is None
    assert pick_cell(CELLS, "logprob", "Q4_1", 5000) is None


def test_pass_names_what_it_would_have_detected_and_what_it_does_not_rule_out():
    r = judge_equivalence(0.02, CELLS, method="logprob", claim="F16", budget_used=320)
    assert r["verdict"] == "PASS" and r["threshold"] == 0.05
    assert "would detect q4_0 at ≥ 95% power" in r["reason"]
    assert "q8_0 at 63% (≥ 52%)" in r["reason"]
    assert "differences smaller than q4_0 are not ruled out" in r["reason"]
    big = judge_equivalence(0.02, CELLS, method="logprob", claim="F16", budget_used=1200)
    assert "would detect q4_0, q8_0" in big["reason"] and "smaller than q8_0" in big["reason"]


def test_fail_names_the_statistic_threshold_and_false_alarm_rate():
    r = judge_equivalence(0.31, CELLS, method="logprob", claim="F16", budget_used=300)
    assert r["verdict"] == "FAIL"
    assert "kl+gap = 0.31 is above the honest threshold 0.05" in r["reason"]
    assert "α = 1%" in r["reason"] and "0 false alarm(s) in 299 held-out honest runs: rate ≤ 1.0%" in r["reason"]


def test_unproven_when_nothing_carries_the_claim():
    short = judge_equivalence(0.0, CELLS, method="logprob", claim="F16", budget_used=120)
    assert short["verdict"] == "UNPROVEN" and "smallest calibrated budget is 300" in short["reason"]
    other = judge_equivalence(0.0, CELLS, method="logprob", claim="Q4_1", budget_used=5000)
    assert other["verdict"] == "UNPROVEN" and "no logprob cell for the claim Q4_1" in other["reason"]
    weak = judge_equivalence(0.0, CELLS, method="text", claim="F16", budget_used=100)
    assert weak["verdict"] == "UNPROVEN" and "against no substitute" in weak["reason"]
    none = judge_equivalence(None, CELLS, method="logprob", claim="F16", budget_used=300)
    assert none["verdict"] == "UNPROVEN" and "no logprob statistic" in none["reason"]
    # a FAIL needs no power: a weak cell still fails a statistic above its threshold
    assert judge_equivalence(0.5, CELLS, method="text", claim="F16", budget_used=100)["verdict"] == "FAIL"


def test_only_cells_of_the_same_statistic_apply():
    assert pick_cell(CELLS, "logprob", "F16", 5000, "kl+gap")["budget"] == 1000
    r = judge_equivalence(0.01, CELLS, method="logprob", claim="F16", budget_used=5000, name="gap")
    assert r["verdict"] == "UNPROVEN" and "no logprob cell of the statistic gap for the claim F16" in r["reason"]


def test_made_alike_ignores_fields_either_side_lacks():
    from inferencekit.quality.equivalence_judge import pick_cell

    cell = {"method": "logprob", "claim": "F16", "budget": 300, "statistic": "kl+gap", "max_tokens": 64}
    assert pick_cell([cell], "logprob", "F16", 320, "kl+gap", {"pool": "x", "max_tokens": 64}) == cell
    assert pick_cell([cell], "logprob", "F16", 320, "kl+gap", {"max_tokens": 32}) is None
    assert pick_cell([{**cell, "max_tokens": None}], "logprob", "F16", 320, "kl+gap", {"max_tokens": 32}) is not None


def test_a_cell_too_small_for_any_threshold_is_unproven_not_an_error():
    cell = {**CELLS[0], "threshold": None, "honest": {"fit_runs": 2, "heldout_runs": 2, "heldout_alarms": None}}
    r = judge_equivalence(0.02, [cell], method="logprob", claim="F16", budget_used=300)
    assert r["verdict"] == "UNPROVEN" and "has no threshold (too few honest runs)" in r["reason"]


def test_a_non_finite_statistic_is_unproven_never_within_a_threshold():
    for bad in (float("nan"), float("inf")):
        r = judge_equivalence(bad, CELLS, method="logprob", claim="F16", budget_used=300)
        assert r["verdict"] == "UNPROVEN" and "non-finite" in r["reason"]


def test_a_smaller_cell_with_a_threshold_is_picked_over_a_larger_one_without():
    empty = {**CELLS[1], "threshold": None}
    assert pick_cell([CELLS[0], empty], "logprob", "F16", 1200)["budget"] == 300
    assert pick_cell([empty], "logprob", "F16", 1200)["budget"] == 1000  # none has one: the reason will say so
