import json

import pytest

from inferencekit.bench.metrics import level_metrics, n_out


def reply(sent_ms, ttft, e2el, n, *, usage=True, status=200, error=None, streamed=None, itl=None, sched=None,
          key="k"):
    r = {"_key": key, "sent_ns": int(sent_ms * 1e6), "status": status, "ttft_ms": ttft, "ttfo_ms": ttft,
         "e2el_ms": e2el, "itl_ms": itl or [], "events": [[int(e2el * 1e6) if e2el else 0, "[DONE]"]],
         "usage": {"completion_tokens": n, "prompt_tokens": 10} if usage else None, "n_streamed": streamed}
    if error:
        r["error"] = error
    if sched is not None:
        r["scheduled_ns"] = int(sched * 1e6)
    return r


def test_hand_computed_level():
    rs = [reply(0, 100, 1000, 10, itl=[100.0] * 9, key="a"),        # TPOT (1000-100)/9 = 100
          reply(500, 300, 2500, 12, streamed=11, itl=[200.0] * 11, key="b"),  # TPOT 2200/11 = 200; ends 3000
          reply(600, None, None, 0, status=0, error="connection failed: refused", usage=False, key="c")]
    m = level_metrics(rs, slo={"ttft_ms": 200, "tpot_ms": 150}, retokenized={"a": 10, "b": 13})
    assert m["requests"] == {"total": 3, "completed": 2, "failed": 1, "transport_failures": 1,
                             "errors": {"connection failed: refused": 1}}
    assert m["window_s"] == pytest.approx(3.0)  # first send 0 ms → last end 500 + 2500 ms
    assert m["throughput"]["output_tokens"] == 22
    assert m["throughput"]["output_throughput_tok_s"] == pytest.approx(22 / 3)
    assert m["throughput"]["total_token_throughput_tok_s"] == pytest.approx(42 / 3)
    assert m["ttft_ms"]["mean"] == 200 and m["ttft_ms"]["p50"] == 200
    assert m["tpot_ms"]["mean"] == pytest.approx(150)
    assert m["itl_ms"]["n"] == 20
    assert m["goodput"]["good_requests"] == 1 and m["goodput"]["goodput_fraction"] == pytest.approx(1 / 3)
    assert m["n_out"]["streamed_vs_usage"] == {"compared": 1, "disagree": 1}
    assert m["n_out"]["retokenized_vs_usage"] == {"compared": 2, "disagree": 1}


def test_open_loop_latency_from_schedule_includes_lateness():
    rs = [reply(1005, 50, 400, 5, sched=1000), reply(2020, 60, 300, 5, sched=2000)]
    m = level_metrics(rs, open_loop=True)
    assert m["send_lag_ms"]["mean"] == pytest.approx(12.5)
    assert m["scheduled_ttft_ms"]["max"] == pytest.approx(80.0)


def test_n_out_fallbacks_and_empty_level():
    assert n_out({"usage": {"completion_tokens": 7}, "n_streamed": 6}) == (7, "usage")
    assert n_out({"usage": None, "n_streamed": 6, "streamed_method": "logprobs"}) == (6, "streamed:logprobs")
    assert n_out({"usage": None}, 9) == (9, "retokenized")
    assert n_out({}) == (None, None)
    m = level_metrics([])
    assert m["window_s"] is None and m["ttft_ms"]["p99"] is None
    assert m["throughput"]["output_throughput_tok_s"] is None
    json.dumps(m)  # JSON-able
