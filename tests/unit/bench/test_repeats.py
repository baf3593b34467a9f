"""Load points across repeats (bench/repeats.py) on data.levels dicts in the bench record's shape."""

import math

import numpy as np
import pytest

from inferencekit.bench.repeats import FIGURES, figure_value, point_levels, point_summaries

T_975_2 = 4.302652729749464  # Student t quantile 0.975, 2 df (tables: 4.303)


def level(label, point, repeat, ttft_p50, *, tok_s=100.0, ci=None, goodput=None, steady_ttft=None):
    summ = {"n": 40, "p50": ttft_p50, "p99": ttft_p50 * 2, "p50_ci95": ci, "p99_ci95": None}
    lv = {"spec": {"label": label, "mode": "closed", "concurrency": 4, "point": point,
                   **({"repeat": repeat} if repeat else {})},
          "ttft_ms": summ, "tpot_ms": dict(summ), "itl_ms": dict(summ), "e2el_ms": dict(summ),
          "throughput": {"output_throughput_tok_s": tok_s, "request_throughput_req_s": tok_s / 10}}
    if goodput is not None:
        lv["goodput"] = {"goodput_req_s": goodput}
    lv["steady_state"] = {"ttft_ms": {**summ, "p50": steady_ttft if steady_ttft is not None else ttft_p50},
                          "throughput": dict(lv["throughput"])}
    return lv


def test_three_repeats_mean_and_t_interval_by_hand():
    # interleaved as --repeats runs them: c1_rep1, c4_rep1, c1_rep2, ...
    levels = {}
    for i, (a, b) in enumerate([(100.0, 300.0), (110.0, 330.0), (120.0, 360.0)], start=1):
        levels[f"c1_rep{i}"] = level(f"c1_rep{i}", "c1", i, a, tok_s=50.0 + i)
        levels[f"c4_rep{i}"] = level(f"c4_rep{i}", "c4", i, b, steady_ttft=b - 20)
    out = point_summaries(levels)
    assert list(out) == ["c1", "c4"]
    assert out["c1"]["labels"] == ["c1_rep1", "c1_rep2", "c1_rep3"] and out["c1"]["repeats"] == 3
    f = out["c1"]["figures"]["ttft_ms.p50"]
    # mean 110, s = 10, se = 10/√3; half-width = 4.3027 · 5.7735 = 24.841
    half = T_975_2 * 10 / math.sqrt(3)
    assert f["values"] == [100.0, 110.0, 120.0] and f["mean"] == pytest.approx(110.0)
    assert f["ci95"] == pytest.approx([110 - half, 110 + half])
    assert f["method"].startswith("Student t") and f["unit"] == "ms" and f["better"] == "lower"
    thr = out["c1"]["figures"]["output_throughput_tok_s"]
    assert thr["mean"] == pytest.approx(52.0) and thr["better"] == "higher"
    assert "goodput_req_s" not in out["c1"]["figures"]  # no --slo
    assert out["c4"]["steady_state"]["ttft_ms.p50"]["mean"] == pytest.approx(310.0)


def test_one_run_gives_the_within_run_interval_and_says_so():
    levels = {"c2": level("c2", "c2", 0, 50.0, ci=[40.0, 61.0], goodput=1.5)}
    out = point_summaries(levels)["c2"]
    f = out["figures"]["ttft_ms.p50"]
    assert out["repeats"] == 1 and f["mean"] == 50.0 and f["ci95"] == [40.0, 61.0]
    assert f["method"].startswith("one run: within-run order-statistic")
    p99 = out["figures"]["ttft_ms.p99"]
    assert p99["ci95"] is None and "p99 368" in p99["method"]
    g = out["figures"]["goodput_req_s"]
    assert g["mean"] == 1.5 and g["ci95"] is None and "no interval" in g["method"]


def test_missing_values_and_damaged_levels():
    levels = {"c1_rep1": level("c1_rep1", "c1", 1, 10.0), "c1_rep2": level("c1_rep2", "c1", 2, 12.0)}
    levels["c1_rep2"]["ttft_ms"]["p50"] = None
    levels["odd"] = {"spec": "not a dict", "ttft_ms": [1, 2]}
    out = point_summaries(levels)
    f = out["c1"]["figures"]["ttft_ms.p50"]
    assert f["values"] == [10.0, None] and f["ci95"] is None and "1 of 2 repeats" in f["note"]
    assert out["odd"]["figures"]["ttft_ms.p50"]["mean"] is None
    assert figure_value({}, "ttft_ms.p50") == (None, None)
    assert point_levels({"b_rep2": {"spec": {"point": "b", "repeat": 2}}, "b_rep1": {"spec": {"point": "b",
                                                                                              "repeat": 1}}}) \
        == {"b": ["b_rep1", "b_rep2"]}
    assert {f for f, _, _ in FIGURES} >= {"ttft_ms.p50", "e2el_ms.p99", "output_throughput_tok_s", "goodput_req_s"}


def test_interval_notes_name_single_runs_missing_intervals_and_saturation():
    from inferencekit.bench.repeats import interval_notes

    levels = {"c2": level("c2", "c2", 0, 50.0, ci=[40.0, 61.0]),
              "r8": level("r8", "r8", 0, 80.0, ci=[70.0, 90.0])}
    levels["r8"]["over_saturation"] = {"flag": True, "reason": "queueing grew 240% of its median across the sends"}
    notes = interval_notes(point_summaries(levels), levels)
    assert notes[0].startswith("load point(s) c2, r8 ran once")
    assert "ttft_ms.p99 at c2, r8" in notes[1] and "≥ 368" in notes[1]
    assert notes[2].startswith("level r8 is over-saturated: queueing grew 240%")
    three = {f"c1_rep{i}": level(f"c1_rep{i}", "c1", i, 10.0 + i) for i in (1, 2, 3)}
    assert interval_notes(point_summaries(three), three) == []


def test_a_t_interval_below_zero_is_clipped_and_said():
    levels = {f"c1_rep{i}": level(f"c1_rep{i}", "c1", i, 10.0, tok_s=t) for i, t in ((1, 0.38), (2, 1.01), (3, 0.98))}
    f = point_summaries(levels)["c1"]["figures"]["output_throughput_tok_s"]
    # mean 0.79, s = 0.3555, half-width 4.3027 · 0.3555 / √3 = 0.883 → [−0.092, 1.674]: clipped
    assert f["ci95"][0] == 0.0 and f["ci95"][1] == pytest.approx(0.79 + T_975_2 * np.std([0.38, 1.01, 0.98],
                                                                                        ddof=1) / math.sqrt(3))
    assert "clipped at 0" in f["note"]
