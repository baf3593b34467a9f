"""bench compare for two bench serve runs (bench/compare_serve.py), on records in the real shape: a recorded
bench serve record (tests/fixtures/bench_compare/serve_c1_c2.json) made into repeated runs by scaling its figures."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from inferencekit.bench.compare_serve import compare_points, figure_name, serve_differences, serve_notes

FIXTURE = Path(__file__).parents[2] / "fixtures" / "bench_compare" / "serve_c1_c2.json"
NOISE = (0.98, 1.0, 1.02)  # run-to-run factors of the repeats
T_975_4 = 2.7764451051977987


def base():
    return json.loads(FIXTURE.read_text())


def _scale_level(lv, f):
    lv = copy.deepcopy(lv)
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        for k in ("p50", "p99"):
            if lv[m][k] is not None:
                lv[m][k] *= f
    for k in ("output_throughput_tok_s", "request_throughput_req_s"):
        lv["throughput"][k] /= f
    return lv


def side(scale=1.0, repeats=3, noise=NOISE):
    """The recorded run as a run of ``repeats`` repeats per point (labels <point>_rep<i>, interleaved), every
    latency ×scale×noise[i], throughput ÷ the same."""
    s = base()
    levels = s["record"]["data"]["levels"]
    if repeats == 1:
        s["record"]["data"]["levels"] = {k: _scale_level(v, scale * noise[0]) for k, v in levels.items()}
        return s
    out = {}
    for i in range(1, repeats + 1):
        for point, lv in levels.items():
            new = _scale_level(lv, scale * noise[i - 1])
            new["spec"] = {**lv["spec"], "label": f"{point}_rep{i}", "repeat": i}
            out[f"{point}_rep{i}"] = new
    s["record"]["data"]["levels"] = out
    return s


def row(rows, point, figure):
    return next(r for r in rows if r["point"] == point and r["figure"] == figure)


def test_same_server_three_repeats_no_difference_and_its_bound():
    rows = compare_points(side(), side())
    r = row(rows, "c2", "ttft_ms.p50")
    assert r["finding"] == "no difference" and r["ratio_b_over_a"] == pytest.approx(1.0)
    logs = np.log(NOISE)
    x = math.exp(T_975_4 * math.sqrt(2 * logs.var(ddof=1) / 3)) - 1  # the interval's upper end − 1
    assert r["ratio_ci95"][1] == pytest.approx(1 + x)
    assert r["statement"] == f"TTFT p50: no difference beyond noise (rules out more than ±{100 * x:.1f}%)"
    assert r["rules_out"] == pytest.approx(x)
    assert {r["finding"] for r in rows} == {"no difference"}
    assert len(rows) == 2 * 10  # 2 points × (8 latency figures + 2 throughputs); no goodput without --slo


def test_a_slower_server_is_detected_in_latency_and_throughput():
    rows = compare_points(side(), side(scale=1.2))
    r = row(rows, "c1", "ttft_ms.p50")
    assert r["finding"] == "differs" and r["ratio_b_over_a"] == pytest.approx(1.2)
    lo, hi = r["ratio_ci95"]
    assert lo > 1
    assert r["statement"] == f"B is 20% slower in TTFT p50 [{100 * (lo - 1):.0f}%, {100 * (hi - 1):.0f}%]"
    t = row(rows, "c1", "output_throughput_tok_s")
    assert t["statement"].startswith("B is 17% lower in output throughput [")  # 1 − 1/1.2 = 16.7%


def test_a_faster_server_reads_as_the_issue_says():
    r = row(compare_points(side(), side(scale=0.88)), "c2", "ttft_ms.p50")
    lo, hi = r["ratio_ci95"]
    # 12% faster; the interval in "faster" terms is [1 − hi, 1 − lo]
    # one shared precision: a bound under 10% gives every percent one decimal
    assert r["statement"] == f"B is 12.0% faster in TTFT p50 [{100 * (1 - hi):.1f}%, {100 * (1 - lo):.1f}%]"
    half = T_975_4 * math.sqrt(2 * np.log(NOISE).var(ddof=1) / 3)  # equal spreads, K 3 and 3: Welch df = 4
    assert [lo, hi] == pytest.approx([0.88 * math.exp(-half), 0.88 * math.exp(half)])


def test_two_repeats_cannot_claim_no_difference():
    r = row(compare_points(side(repeats=2), side(repeats=2)), "c1", "e2el_ms.p50")
    assert r["finding"] == "UNPROVEN" and "needs ≥ 3 repeats per run (2 and 2)" in r["statement"]
    # a difference can still be shown with two repeats per run
    far = row(compare_points(side(repeats=2), side(scale=2.0, repeats=2)), "c1", "e2el_ms.p50")
    assert far["finding"] == "differs" and far["statement"].startswith("B is 2× slower in E2EL p50 [")


def test_one_run_per_side_is_unproven_with_what_the_within_run_intervals_show():
    rows = compare_points(side(repeats=1), side(repeats=1))
    r = row(rows, "c1", "ttft_ms.p50")  # n = 4 requests: no order-statistic interval for a p50 (needs 6)
    assert r["finding"] == "UNPROVEN" and "no within-run interval on A" in r["statement"]
    a, b = side(repeats=1), side(scale=3.0, repeats=1)
    for s, ci in ((a, [90.0, 110.0]), (b, [280.0, 320.0])):
        s["record"]["data"]["levels"]["c1"]["ttft_ms"]["p50_ci95"] = ci
    apart = row(compare_points(a, b), "c1", "ttft_ms.p50")
    assert apart["finding"] == "differs (within-run)"
    assert "A [90, 110] and B [280, 320] are apart" in apart["statement"] and "--repeats 3" in apart["statement"]
    b["record"]["data"]["levels"]["c1"]["ttft_ms"]["p50_ci95"] = [100.0, 300.0]
    assert row(compare_points(a, b), "c1", "ttft_ms.p50")["finding"] == "UNPROVEN"


def test_runs_measured_unalike_are_listed():
    a, b = side(), side()
    assert serve_differences(a, b) == []
    b["record"]["identity"]["workload"]["max_tokens"] = 64
    b["prompt_set"]["sha256"] = "0" * 64
    b["record"]["data"]["config"]["slo"] = {"ttft_ms": 500.0}
    del b["record"]["data"]["levels"]["c2_rep1"]  # c2 still there (reps 2, 3)
    for i in (1, 2, 3):
        b["record"]["data"]["levels"][f"c1_rep{i}"]["spec"]["concurrency"] = 3
    fields = [d.field for d in serve_differences(a, b)]
    assert fields == ["prompt_set.sha256", "workload.max_tokens", "config.slo", "points.c1"]
    c = side()
    c["record"]["data"]["levels"] = {k: v for k, v in c["record"]["data"]["levels"].items() if k.startswith("c1")}
    d = serve_differences(a, c)
    assert [x.to_dict() for x in d] == [{"field": "points", "a": ["c1", "c2"], "b": ["c1"]}]
    assert serve_differences(a, {"record": {"kind": "appliance"}})[0].field == "kind"


def test_open_loop_sessions_at_one_rate_of_sessions_and_of_turns_are_not_compared():
    a, b = side(), side()
    for s, of, start in ((a, "sessions", 2.0), (b, "turns", 0.5)):
        for i in (1, 2, 3):
            spec = s["record"]["data"]["levels"][f"c1_rep{i}"]["spec"]
            spec.update(mode="open", rate_req_s=2.0, rate_of=of, session_start_rate_req_s=start)
    d = {x.field: x.to_dict() for x in serve_differences(a, b)}
    assert sorted(d) == ["points.c1"]  # (the sessions' source differs in prompt_set.name)
    assert (d["points.c1"]["a"]["rate_of"], d["points.c1"]["b"]["session_start_rate_req_s"]) == ("sessions", 0.5)


def test_notes_are_shown_not_refused():
    a, b = side(), side(repeats=2)
    b["record"]["data"]["config"]["seed"] = 99
    b["record"]["identity"]["engine"]["version"] = "0.4.0"
    notes = {d.field: (d.a, d.b) for d in serve_notes(a, b)}
    assert notes == {"engine.version": ("0.3.36", "0.4.0"), "config.seed": (1639785753, 99),
                     "repeats.c1": (3, 2), "repeats.c2": (3, 2)}
    assert serve_differences(a, b) == []


def test_figure_names():
    assert figure_name("ttft_ms.p50") == "TTFT p50"
    assert figure_name("request_throughput_req_s") == "request throughput"
