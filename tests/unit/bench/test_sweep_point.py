"""One sweep point judged against its SLO (bench/sweep_point.py) on recorded replies (tests/fixtures/sweep/c1: eight
real replies; their TTFTs, sorted, in ms: 1112.26332, 4749.830588, 8454.732747, 10210.216553, 12202.418801,
21488.387601, 30617.20431, 47271.938828)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.bench.sweep import Target
from inferencekit.bench.sweep_point import judge_point, request_values

FIX = Path(__file__).parents[2] / "fixtures" / "sweep" / "c1"


def replies() -> list[dict]:
    out = []
    for p in sorted(FIX.glob("*.json")):
        r = json.loads(p.read_text())
        r["_key"] = p.stem
        out.append(r)
    return out


def test_run_once_the_percentile_and_its_order_statistic_interval():
    v = request_values(replies())
    assert len(v["ttft_ms"]) == 8 and len(v["tpot_ms"]) == 8  # n_streamed 8 each: TPOT = (E2EL - TTFT) / 7
    r = next(x for x in replies() if x["_key"] == "vs-translate-001")
    assert pytest.approx((2657.581164 - 1112.26332) / 7) in v["tpot_ms"] and r["ttft_ms"] == 1112.26332
    judged = judge_point([replies()], [Target("ttft_ms", "p50", 15000.0)])
    f = judged["figures"]["ttft_p50"]
    # numpy's linear p50 of 8 values: the mean of the 4th and 5th
    assert f["value"] == pytest.approx((10210.216553 + 12202.418801) / 2)
    # n = 8, q = 0.5: P(B < 1) = 1/256 ≤ 0.025 < P(B < 2) = 9/256, so l = 1 and, by symmetry, u = 8
    assert f["ci95"] == [1112.26332, 47271.938828]
    assert f["meets"] and f["status"] == "uncertain" and f["n"] == 8
    assert judged["meets"] and judged["certain"] == "uncertain" and judged["failed"] == 0
    tight = judge_point([replies()], [Target("ttft_ms", "p50", 1000.0)])
    assert not tight["meets"] and tight["certain"] == "fail" and tight["reason"] == "misses ttft_p50"
    few = judge_point([replies()], [Target("ttft_ms", "p99", 60000.0)])["figures"]["ttft_p99"]
    assert few["ci95"] is None and few["status"] == "uncertain" and "too few" in few["why_no_interval"]


def test_repeats_take_the_mean_of_their_percentiles_with_a_t_interval():
    rs = replies()
    a, b = rs[:4], rs[4:]  # long+medium prompts, then short+very short
    f = judge_point([a, b], [Target("ttft_ms", "p50", 20000.0)])["figures"]["ttft_p50"]
    pa = (21488.387601 + 30617.20431) / 2
    pb = (4749.830588 + 8454.732747) / 2
    assert f["per_repeat"] == pytest.approx([pa, pb]) and f["repeats"] == 2
    mean = (pa + pb) / 2
    half = 12.706204736174705 * abs(pa - pb) / 2  # t(0.975, 1) · s/√2 with s = |pa − pb|/√2
    assert mean - half < 0  # the bare t interval reaches below 0 ms: clipped there (a latency cannot be negative)
    assert f["value"] == pytest.approx(mean) and f["ci95"] == pytest.approx([0.0, mean + half])
    assert f["meets"] and f["status"] == "uncertain"


def test_a_failed_request_misses_the_slo_for_certain():
    rs = replies()
    rs[0] = {**rs[0], "status": 500, "error": "HTTP 500"}
    judged = judge_point([rs], [Target("ttft_ms", "p50", 1e9)])
    assert not judged["meets"] and judged["certain"] == "fail" and judged["failed"] == 1
    assert judged["reason"] == "1 of 8 requests failed: a point with failed requests misses its SLO"


def test_goodput_fraction_with_its_wilson_interval():
    judged = judge_point([replies()], [], slo={"ttft_ms": 10000.0}, min_goodput=0.9)
    g = judged["goodput"]
    assert g["good_requests"] == 3 and g["requests"] == 8 and g["fraction"] == 3 / 8  # 1112, 4750, 8455 ms
    assert g["ci95"][0] == pytest.approx(0.1368, abs=1e-4) and g["ci95"][1] == pytest.approx(0.6943, abs=1e-4)
    assert g["status"] == "fail" and not judged["meets"] and judged["certain"] == "fail"
    assert judged["reason"] == "misses goodput 0.375 < 0.9"
    easy = judge_point([replies()], [], slo={"ttft_ms": 60000.0}, min_goodput=0.5)
    assert easy["meets"] and easy["goodput"]["fraction"] == 1.0 and easy["goodput"]["status"] == "pass"


def _run_with_point(tmp_path: Path, lag_p99_ms: float):
    """A run dir holding the recorded point (tests/fixtures/sweep/c1) as level c1 and the client's self-check figures
    (client.json) with the given event-loop lag."""
    from inferencekit.rundir import CLIENT_FILE, RunDir, write_json

    run = RunDir(tmp_path / "run")
    for p in sorted(FIX.glob("*.json")):
        r = json.loads(p.read_text())
        write_json(run.output_path("e", "c1", r.get("bucket") or "b", p.stem), r)
    lag = {"n": 400, "p50": 0.2, "p99": lag_p99_ms, "max": lag_p99_ms + 1}
    write_json(run.level_dir("outputs", "e", "c1") / CLIENT_FILE, {"processes": [{"loop": {"loop_lag_ms": lag}}]})
    return run


def test_a_point_the_client_could_not_pace_is_invalid_and_counts_as_a_miss(tmp_path: Path) -> None:
    from inferencekit.bench.config import ServeConfig
    from inferencekit.bench.plan import LevelSpec
    from inferencekit.bench.sweep import SearchSpace
    from inferencekit.bench.sweep_run import SweepSettings, _judge

    sw = SweepSettings(SearchSpace("concurrency", 1, 1, 8, 1), (Target("ttft_ms", "p50", 60000.0),), {}, None)
    cfg = ServeConfig(levels=[LevelSpec("c1", "closed", concurrency=1)])
    # the limit is max(5 ms, 25% of the smaller of the median TTFT and median ITL): 0.5 ms is below any, 5 s above
    for lag, valid in ((0.5, True), (5000.0, False)):
        run = _run_with_point(tmp_path / str(lag), lag)
        point = {"label": "c1", "value": 1.0, "levels": ["c1"]}
        _judge(point, sw, run, "e", cfg)
        assert point["client_valid"] is valid
        if valid:  # TTFT p50 11,206 ms: within 60 s for certain
            assert point["meets"] is True and point["certain"] == "pass"
        else:
            assert point["meets"] is False and point["certain"] == "invalid"
            assert point["reason"].startswith("invalid, the client set its pace (c1: ")
            assert "5000.0 ms" in point["reason"]
