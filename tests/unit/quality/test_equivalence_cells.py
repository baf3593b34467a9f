"""Calibration cells from run records (issue 20): recorded F16 calibration runs (llama-server --parallel 4, 40 honest
runs; Q4_0, 20 runs; series b300 of 2026-12-03) and hand-made first-token records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.quality.equivalence_cells import (
    first_blocks,
    first_token_cells,
    logprob_cells,
    machines_of,
    make_cell,
    text_cells,
)
from inferencekit.quality.equivalence_stats import rate_lower, rate_upper, threshold_at

RUNS = Path(__file__).parents[2] / "fixtures" / "equivalence" / "runs"


def _recs() -> dict[str, list[dict]]:
    return {f.stem.replace("_f16", ":f16"): [json.loads(x) for x in f.read_text().splitlines()]
            for f in RUNS.glob("*.jsonl")}


def test_recorded_f16_runs_set_a_threshold_that_q4_0_runs_all_exceed():
    recs = _recs()
    cells = logprob_cells("F16", recs, ["llama-server-p4:f16"], ["q4_0"], [100, 300], lambda b: 0.01, {"series": "x"})
    assert [(c["statistic"], c["budget"]) for c in cells] == [("kl+gap", 100), ("kl+gap", 300), ("gap", 100),
                                                                ("gap", 300)]
    c = cells[1]
    fit = [r["budgets"]["300"]["kl+gap"] for r in recs["llama-server-p4:f16"] if r["run"] % 2 == 0]
    assert c["honest"]["fit_runs"] == 20 == len(fit) and c["honest"]["heldout_runs"] == 20
    # 20 fit runs cannot set a 1% threshold: the cell is at 5% and says why
    assert c["alpha"] == 0.05 and "20 fit runs are too few for α = 1%" in c["alpha_cut"]
    assert c["threshold"] == threshold_at(fit, 0.05) == sorted(fit)[19]  # ⌈0.95 · 21⌉ = 20th smallest
    assert c["substitutes"] == [{"name": "q4_0", "runs": 20, "detected": 20, "power": 1.0,
                                 "power_lower": pytest.approx(rate_lower(20, 20))}]
    assert c["series"] == "x" and c["honest"]["runs_by_replica"] == {"llama-server-p4:f16": 40}


def test_make_cell_counts_held_out_alarms_per_replica_and_names_thin_replicas():
    fit = [0.1 * i for i in range(1, 40)]  # 39 values: the 5% threshold is the 38th smallest, 3.8
    cell = make_cell(fit, {"a": [1.0, 3.9, 2.0], "b": [5.0], "empty": []}, {"a": 60, "b": 10, "empty": 0},
                     {"sub": [4.0, 3.0, 10.0], "none": []}, 0.05)
    assert cell["threshold"] == pytest.approx(3.8) and cell["alpha_cut"] is None
    h = cell["honest"]
    assert h["heldout_alarms"] == 2 and h["heldout_runs"] == 4
    assert h["heldout_rate_upper"] == pytest.approx(rate_upper(2, 4))
    assert h["heldout_alarms_by_replica"] == {"a": 1, "b": 1}
    assert h["thin_replicas"] == ["b: 10 run(s)"]  # 5 fit runs cannot set a 5% threshold on their own
    assert h["replicas"] == ["a", "b"]
    assert cell["substitutes"] == [{"name": "sub", "runs": 3, "detected": 2, "power": pytest.approx(2 / 3),
                                    "power_lower": pytest.approx(rate_lower(2, 3))}]


def test_too_few_runs_for_any_alpha_leave_the_threshold_empty():
    cell = make_cell([0.1, 0.2, 0.3], {"a": [0.5]}, {"a": 4}, {"s": [1.0]}, 0.01)
    assert cell["threshold"] is None and cell["alpha"] == 0.05
    assert cell["honest"]["heldout_alarms"] is None and cell["substitutes"][0]["detected"] is None


def _first(config: str, runs: range, d: float) -> list[dict]:
    return [{"run": i, "config": config, "distances": {f"{config}-{i}-{j}": d + 0.001 * (i % 7) for j in range(50)}}
            for i in runs]


def test_first_token_blocks_are_consecutive_runs_and_skip_incomplete_ones():
    rs = _first("h", range(0, 5), 0.01)
    assert [b for b, _ in first_blocks(rs, 100, 50)] == [0, 1]  # runs (0, 1), (2, 3); run 4 has no partner
    assert first_blocks(rs, 100, 50)[1][1] == pytest.approx(0.01 + 0.001 * 2.5)
    assert len(first_blocks(rs, 50, 50)) == 5
    assert first_blocks([r for r in rs if r["run"] != 1], 100, 50)[0][0] == 1  # block 0 lost its run 1


def test_first_token_cells_fit_on_even_blocks_and_count_power_on_substitute_blocks():
    recs = {"h1": _first("h1", range(0, 60), 0.004), "h2": _first("h2", range(60, 120), 0.004),
            "sub": _first("sub", range(0, 60), 0.1)}
    cells = first_token_cells("F16", recs, ["h1", "h2", "missing"], ["sub"], [50, 100, 300], 50, 0.01,
                              {"pool": "p", "max_tokens": 1})
    c50, c100, c300 = cells
    assert c50["unit"] == "requests" and c50["method"] == "first_token" and c50["pool"] == "p"
    assert c50["honest"]["fit_runs"] == 60 and c50["honest"]["heldout_runs"] == 60 and c50["alpha"] == 0.05
    assert c50["substitutes"][0]["detected"] == 60
    assert c100["honest"]["fit_runs"] == 30 and c100["substitutes"][0]["runs"] == 30
    # 300 requests: 10 blocks per replica (h2's runs 60–119 are blocks 10–19), 5 + 5 fit: too few even for 5%
    assert c300["honest"]["fit_runs"] == 10 and c300["threshold"] is None
    assert c50["honest"]["replicas"] == ["h1", "h2"]


def test_text_cells_judge_the_mmd_in_requests_at_the_alpha_given():
    honest = [{"run": i, "budgets": {"80": {"mmd": 0.001 * (i % 10)}, "160": {"mmd": 0.0005 * (i % 10)}}}
              for i in range(60)]
    sub = [{"run": i, "budgets": {"80": {"mmd": 0.02}, "160": {"mmd": 0.004 + 0.0001 * i}}} for i in range(20)]
    cells = text_cells("F16", {"h": honest, "q4_0": sub}, ["h"], ["q4_0"], [80, 160], 0.05,
                       {"pool": "p", "max_tokens": 32})
    assert [(c["method"], c["statistic"], c["budget"], c["unit"]) for c in cells] == [
        ("text", "mmd", 80, "requests"), ("text", "mmd", 160, "requests")]
    c80, c160 = cells
    # the fit set is the 30 even runs (i % 10 in 0, 2, 4, 6, 8); the 5% rank is ⌈0.95 · 31⌉ = 30: their largest
    assert c80["alpha"] == 0.05 and c80["alpha_cut"] is None and c80["threshold"] == pytest.approx(0.008)
    assert c80["honest"]["heldout_alarms"] == 6  # odd runs with i % 10 == 9: 0.009 > 0.008
    assert c80["substitutes"][0]["detected"] == 20
    # at 160 requests the threshold is 0.004: every substitute run but the first (0.004, not above) exceeds it
    assert c160["threshold"] == pytest.approx(0.004) and c160["substitutes"][0]["detected"] == 19


def test_non_finite_values_are_left_out_and_bad_blocks_refused():
    recs = {"h": [{"run": i, "budgets": {"100": {"gap": float("nan") if i == 0 else 0.01 * i}}} for i in range(40)]}
    [cell] = [c for c in logprob_cells("F16", recs, ["h"], [], [100], lambda b: 0.05, {}) if c["statistic"] == "gap"]
    assert cell["honest"]["fit_runs"] == 19  # run 0's NaN is not a statistic
    rs = [{"run": 0, "distances": {"a": float("inf"), "b": 0.2}}, {"run": 1, "distances": {"c": 0.4}}]
    assert first_blocks(rs, 100, 50) == [(0, pytest.approx(0.3))]
    with pytest.raises(ValueError, match="not a multiple"):
        first_blocks(rs, 75, 50)
    with pytest.raises(ValueError, match="repeats"):
        first_blocks([*rs, rs[0]], 50, 50)


def test_machines_of_names_each_machine_of_a_series_and_never_guesses_a_missing_one():
    one = {"p4": [{"run": 0, "machine": "Xeon"}, {"run": 1, "machine": "Xeon"}]}
    assert machines_of(one) == "Xeon"
    mixed = {"p4": [{"run": 0, "machine": "Xeon"}, {"run": 1, "machine": "EPYC"}], "q4_0": [{"run": 0}]}
    assert machines_of(mixed) == "EPYC (1 runs); Xeon (1 runs); machine not recorded (1 runs)"
    assert machines_of({"p4": [{"run": 0}]}) == "machine not recorded"
    assert machines_of({}) == "machine not recorded"
