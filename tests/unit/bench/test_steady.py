"""The steady-state window and the over-saturation flag (bench/steady.py, through level_metrics) on replies built
in the client's shape: send time, events (the last one's offset is the reply's end), TTFT, schedule."""

import json

import numpy as np
import pytest

from inferencekit.bench.metrics import level_metrics
from inferencekit.bench.steady import MIN_TREND_N, over_saturation, steady_window


def reply(key, sent_s, ttft_s, e2el_s, *, sched_s=None, n=10):
    r = {"_key": key, "sent_ns": int(round(sent_s * 1e9)), "status": 200, "ttft_ms": ttft_s * 1e3,
         "ttfo_ms": ttft_s * 1e3, "e2el_ms": e2el_s * 1e3, "itl_ms": [(e2el_s - ttft_s) * 1e3 / (n - 1)] * (n - 1),
         "events": [[int(round(ttft_s * 1e9)), "tok"], [int(round(e2el_s * 1e9)), "[DONE]"]],
         "usage": {"completion_tokens": n, "prompt_tokens": 5}}
    if sched_s is not None:
        r["scheduled_ns"] = int(round(sched_s * 1e9))
    return r


def closed_loop(streams, per_stream, dur_s=1.0, gap_s=0.001, first_extra_s=0.0):
    """Each stream sends, waits for the end, sends the next ``gap_s`` later; every request takes ``dur_s`` (the
    first wave ``first_extra_s`` longer: a cold server)."""
    out = []
    for j in range(streams):
        t = 0.0
        for i in range(per_stream):
            d = dur_s + (first_extra_s if i == 0 else 0.0)
            out.append(reply(f"s{j}-{i}", t, 0.1 * d, d))
            t += d + gap_s
    return out


def test_closed_loop_window_by_hand():
    rs = closed_loop(2, 12, first_extra_s=1.0)  # the first wave takes 2 s, then 1 s each
    w = steady_window(rs)
    assert w.first_wave == 2
    assert w.start_s == pytest.approx(2.0)  # the first wave's last end
    assert w.end_s == pytest.approx(2.0 + 0.001 + 10 * 1.001)  # the 12th send of a stream
    # measured: sent at/after 2.0 and ended by the last send: sends 2..11 of each stream minus the last ones
    assert len(w.measured) == 2 * 10
    assert len(w.sent) == 2 * 11
    m = level_metrics(rs)
    st = m["steady_state"]
    assert st["window"]["requests"] == {"sent": 22, "finished": 20, "measured": 20}
    assert st["ttft_ms"]["n"] == 20 and st["ttft_ms"]["max"] == pytest.approx(100.0)  # the cold wave is cut off
    assert m["ttft_ms"]["max"] == pytest.approx(200.0)  # the whole level keeps it
    assert st["throughput"]["request_throughput_req_s"] == pytest.approx(20 / w.duration_s)
    assert st["throughput_note"] is None
    assert m["over_saturation"]["flag"] is None and m["over_saturation"]["applicable"] is False
    json.dumps(m)


def test_short_level_has_an_empty_or_thin_window():
    rs = closed_loop(2, 2)  # two waves: the last send comes right after the first wave
    m = level_metrics(rs)
    st = m["steady_state"]
    assert st["window"]["requests"]["measured"] == 0
    assert st["ttft_ms"]["n"] == 0 and st["ttft_ms"]["p50"] is None
    assert st["throughput"]["request_throughput_req_s"] is None
    assert "fewer than" in st["throughput_note"]
    one = level_metrics(closed_loop(1, 1))
    assert one["steady_state"]["window"]["empty"] is not None
    assert level_metrics([])["steady_state"]["window"]["empty"] == "no request with a send time"


def test_ramp_up_moves_the_start():
    rs = closed_loop(2, 12)
    assert steady_window(rs).start_s == pytest.approx(1.0)
    assert steady_window(rs, warmup_s=4.5).start_s == pytest.approx(4.5)
    assert steady_window(rs, warmup_s=0.5).start_s == pytest.approx(1.0)


def test_latency_summaries_carry_order_statistic_intervals():
    rs = closed_loop(4, 11)  # 44 requests: a p50 interval, no p99 interval (needs 368)
    m = level_metrics(rs)
    for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
        assert m[name]["p50_ci95"] is not None and m[name]["p99_ci95"] is None
        assert m[name]["ci95_method"] == "order-statistic"
    assert m["itl_ms"]["p99_ci95"] is not None  # 44 × 9 = 396 pooled gaps ≥ 368
    assert level_metrics(closed_loop(4, 10))["itl_ms"]["p99_ci95"] is None  # 360 gaps < 368
    assert "p50_ci95" not in m["ttfo_ms"]


def open_loop(n, gap_s, service_s, rng=None, jitter_s=0.0):
    """Arrivals every ``gap_s`` (sent on time) to a server that serves one at a time in ``service_s``: when
    service_s > gap_s the queue (and the TTFT) grows with each arrival."""
    out, free = [], 0.0
    for i in range(n):
        t = i * gap_s
        start = max(t, free)
        s = service_s + (float(rng.uniform(0, jitter_s)) if rng is not None else 0.0)
        free = start + s
        out.append(reply(f"r{i}", t, start - t + 0.2 * s, free - t, sched_s=t))
    return out


def test_open_loop_over_saturation_flagged():
    rs = open_loop(60, gap_s=0.1, service_s=0.15)  # arrivals 10/s, service 6.7/s
    m = level_metrics(rs, open_loop=True)
    o = m["over_saturation"]
    assert o["flag"] is True and o["applicable"] is True
    assert o["kendall_tau"] == pytest.approx(1.0)  # strictly increasing queue
    assert o["p_value"] < 0.01 and o["growth_fraction"] > 0.5
    assert o["slope_ms_per_s"] == pytest.approx(500.0, rel=1e-6)  # +50 ms per arrival, 10 arrivals/s


def test_open_loop_under_capacity_not_flagged():
    rng = np.random.default_rng(3)
    rs = open_loop(60, gap_s=0.5, service_s=0.2, rng=rng, jitter_s=0.05)  # the server idles between arrivals
    m = level_metrics(rs, open_loop=True)
    o = m["over_saturation"]
    assert o["flag"] is False and o["over"] == "window"
    # open loop: the window starts at the first end (the first request, served before the second arrives)
    assert m["steady_state"]["window"]["start_s"] == pytest.approx(rs[0]["e2el_ms"] / 1e3, abs=1e-6)
    assert m["steady_state"]["window"]["first_wave"] == 1


def test_a_significant_but_small_trend_is_not_flagged():
    # TTFT rises 100 → 110 ms over the level: p tiny, growth 10% of the median < 50%
    rs = [reply(f"r{i}", i * 0.5, 0.1 + 0.01 * i / 59, 0.5, sched_s=i * 0.5) for i in range(60)]
    o = level_metrics(rs, open_loop=True)["over_saturation"]
    assert o["p_value"] < 1e-6 and o["growth_fraction"] == pytest.approx(0.1 / 1.05, rel=0.02)
    assert o["flag"] is False


def test_too_few_requests_not_judged():
    rs = open_loop(MIN_TREND_N - 1, gap_s=0.1, service_s=0.15)
    o = over_saturation(rs, steady_window(rs, open_loop=True), open_loop=True)
    assert o["flag"] is None and o["over"] == "level" and "not judged" in o["reason"]


def test_load_generation_md_states_the_thresholds_the_code_uses():
    from inferencekit.bench.compare_serve import MIN_NO_DIFF_REPEATS
    from inferencekit.bench.steady import GROWTH_FRACTION, TREND_P
    from inferencekit.stats import quantile_ci_min_n
    from tests.paths import ROOT

    doc = " ".join((ROOT / "docs" / "load-generation.md").read_text().split())
    assert f"a p50 needs n ≥ {quantile_ci_min_n(0.5)}, a p99 n ≥ {quantile_ci_min_n(0.99)}" in doc
    assert (f"Kendall's τ > 0 with one-sided p < {TREND_P} AND the Theil–Sen slope × the span of sends exceeds "
            f"{GROWTH_FRACTION:.0%} of the median scheduled TTFT") in doc
    assert f"Fewer than {MIN_TREND_N} requests: `flag` is null" in doc
    assert f"only with ≥ {MIN_NO_DIFF_REPEATS} repeats in each run" in doc


def test_a_ramp_level_has_no_window_and_is_judged_over_the_level():
    rs = open_loop(60, gap_s=0.1, service_s=0.15)
    m = level_metrics(rs, open_loop=True, ramp=True)
    assert "no steady part" in m["steady_state"]["window"]["empty"]
    assert m["steady_state"]["ttft_ms"]["n"] == 0
    assert m["over_saturation"]["over"] == "level" and m["over_saturation"]["flag"] is True
