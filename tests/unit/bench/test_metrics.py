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
    assert m["requests"] == {"total": 3, "completed": 2, "failed": 1, "transport_failures": 1, "no_tokens": 0,
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


# ---- replies derived from raw SSE events, as the client records them (api/reply.py ``derive``)

def _chunk(**delta_and_extra) -> str:
    """One chat-completions SSE payload: ``content``/``reasoning_content`` in the delta, ``token_ids`` and
    ``finish_reason`` on the choice, ``usage`` on the event."""
    usage = delta_and_extra.pop("usage", None)
    choice = {"index": 0, "delta": {k: v for k, v in delta_and_extra.items() if k in ("content", "reasoning_content")}}
    for k in ("token_ids", "finish_reason"):
        if k in delta_and_extra:
            choice[k] = delta_and_extra[k]
    obj = {"choices": [choice] if usage is None else [], **({"usage": usage} if usage else {})}
    return json.dumps(obj)


def derived(events_ms: list[tuple[float, str]], *, sent_ms: float = 0.0, key: str = "r", status: int = 200,
            error: str | None = None) -> dict:
    """A reply file as the client writes it: raw events at ``t`` ms after the send, the rest derived from them."""
    from inferencekit.api.reply import derive

    events = [[int(t * 1e6), payload] for t, payload in events_ms]
    out = {"_key": key, "sent_ns": int(sent_ms * 1e6), "status": status, "events": events, **derive(events)}
    why = error or out.pop("stream_error") or out.pop("empty_error")
    out.pop("stream_error", None)
    out.pop("empty_error", None)
    if why:
        out["error"] = why
    return out


def test_itl_splits_an_event_that_carries_several_tokens_evenly():
    # token events at 10, 20, 50 and 56 ms; the 50 ms event carries 3 token ids (the stream says so), so its 30 ms
    # gap is 3 gaps of 10 ms; the others carry one each: ITL = 10, 10, 10, 10, 6 ms (5 gaps for 6 tokens)
    r = derived([(10, _chunk(content="a", token_ids=[1])), (20, _chunk(content="b", token_ids=[2])),
                 (50, _chunk(content="cde", token_ids=[3, 4, 5])), (56, _chunk(content="f", token_ids=[6])),
                 (57, _chunk(finish_reason="length")), (58, _chunk(usage={"completion_tokens": 6})), (58, "[DONE]")])
    assert r["itl_ms"] == pytest.approx([10, 10, 10, 10, 6])
    m = level_metrics([r])
    assert m["itl_ms"]["n"] == 5 and m["itl_ms"]["mean"] == pytest.approx(46 / 5) and m["itl_ms"]["p50"] == 10
    # TPOT = (E2EL − TTFT)/(N − 1) = (56 − 10)/(6 − 1): the finish-only and usage-only events are not token events
    assert m["e2el_ms"]["p50"] == pytest.approx(56) and m["tpot_ms"]["p50"] == pytest.approx(46 / 5)


def test_itl_without_per_event_counts_is_one_gap_per_event():
    # no token ids or logprobs: nothing says how many tokens an event held, so each event is one gap
    r = derived([(5, _chunk(content="ab")), (25, _chunk(content="cdef")), (30, "[DONE]")])
    assert r["itl_ms"] == pytest.approx([20])
    assert level_metrics([r])["itl_ms"]["n"] == 1


def test_ttft_counts_reasoning_and_ttfo_waits_for_visible_content():
    # reasoning streams first at 40 ms, visible content at 100 ms: TTFT 40 ms (first generated token), TTFO 100 ms
    r = derived([(40, _chunk(reasoning_content="think")), (70, _chunk(reasoning_content="more")),
                 (100, _chunk(content="answer")), (101, "[DONE]")])
    m = level_metrics([r])
    assert (m["ttft_ms"]["p50"], m["ttfo_ms"]["p50"]) == (pytest.approx(40), pytest.approx(100))
    assert m["e2el_ms"]["p50"] == pytest.approx(100)


def test_goodput_counts_failed_requests_in_the_fraction_and_the_window():
    # three requests over one window from the first send (0 ms) to the last end (failed one at 600 + 150 ms):
    ok_fast = derived([(100, _chunk(content="x", token_ids=[1])), (200, _chunk(content="y", token_ids=[2]))],
                      key="a")  # TTFT 100, TPOT 100: meets ttft ≤ 150 and tpot ≤ 120
    ok_slow = derived([(300, _chunk(content="x", token_ids=[1])), (400, _chunk(content="y", token_ids=[2]))],
                      sent_ms=50, key="b")  # TTFT 300: misses
    failed = derived([(150, _chunk(content="x"))], sent_ms=600, key="c", status=500, error="HTTP 500: boom")
    m = level_metrics([ok_fast, ok_slow, failed], slo={"ttft_ms": 150, "tpot_ms": 120})
    assert m["requests"]["completed"] == 2 and m["requests"]["failed"] == 1
    assert m["window_s"] == pytest.approx(0.75)
    g = m["goodput"]
    assert g["good_requests"] == 1
    assert g["goodput_fraction"] == pytest.approx(1 / 3)  # the failed request stays in the denominator
    assert g["goodput_req_s"] == pytest.approx(1 / 0.75)


def test_a_level_of_one_request():
    r = derived([(80, _chunk(content="a", token_ids=[1])), (100, _chunk(content="b", token_ids=[2])),
                 (130, _chunk(content="c", token_ids=[3])), (131, _chunk(usage={"completion_tokens": 3}))],
                sent_ms=1000)
    m = level_metrics([r])
    # every percentile of a single value is that value; the window is its own send to its last event (131 ms)
    assert {k: m["ttft_ms"][k] for k in ("n", "mean", "p50", "p99", "min", "max")} == {
        "n": 1, "mean": pytest.approx(80), "p50": pytest.approx(80), "p99": pytest.approx(80),
        "min": pytest.approx(80), "max": pytest.approx(80)}
    assert m["ttft_ms"]["std"] == 0
    assert m["window_s"] == pytest.approx(0.131)
    assert m["tpot_ms"]["p50"] == pytest.approx((130 - 80) / 2)
    assert m["itl_ms"]["n"] == 2 and m["itl_ms"]["p50"] == pytest.approx(25)
    assert m["throughput"]["output_tokens"] == 3
    assert m["throughput"]["output_throughput_tok_s"] == pytest.approx(3 / 0.131)
    assert m["n_out"]["sources"] == {"usage": 1} and m["n_out"]["streamed_vs_usage"] == {"compared": 1, "disagree": 0}


def test_a_stream_without_a_token_event_is_a_no_tokens_failure_outside_throughput():
    # issue 19: an EOS-first reply (role delta, finish "stop", usage 0 or 1 or none) used to count as completed, its
    # usage in throughput; now it fails apart from errors, and the level's figures are those of the others
    ok = derived([(100, _chunk(content="x", token_ids=[1])), (200, _chunk(content="y", token_ids=[2])),
                  (201, _chunk(usage={"completion_tokens": 2, "prompt_tokens": 5})), (201, "[DONE]")], key="a")
    empties = [derived([(50, json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})),
                        (60, _chunk(finish_reason="stop")), *usage, (61, "[DONE]")], sent_ms=10, key=f"e{i}")
               for i, usage in enumerate(([], [(61, _chunk(usage={"completion_tokens": 0, "prompt_tokens": 5}))],
                                          [(61, _chunk(usage={"completion_tokens": 1, "prompt_tokens": 5}))]))]
    lost = derived([(60, _chunk(finish_reason="length")), (61, _chunk(usage={"completion_tokens": 7})),
                    (61, "[DONE]")], key="p")
    assert all(e["no_tokens"] is True and "error" not in e for e in empties)
    assert lost["error"].startswith("protocol error: the stream carried no token event but usage claims 7")
    m = level_metrics([ok, *empties, lost])
    assert m["requests"]["completed"] == 1 and m["requests"]["failed"] == 4 and m["requests"]["no_tokens"] == 3
    assert m["throughput"]["output_tokens"] == 2 and m["throughput"]["prompt_tokens"] == 5  # the success alone
    assert m["ttft_ms"]["n"] == 1
    assert m["requests"]["errors"]["no tokens: no token event (finish_reason 'stop', usage completion_tokens 0): no "
                                   "TTFT, not completed"] == 1


def test_a_reply_file_from_before_the_rule_with_no_token_event_is_not_completed():
    old = derived([(60, _chunk(finish_reason="stop")), (61, "[DONE]")])
    del old["no_tokens"]  # as an earlier version wrote it: status 200, no error, no token event
    m = level_metrics([old])
    assert m["requests"]["completed"] == 0 and m["requests"]["no_tokens"] == 1
    assert m["throughput"]["output_throughput_tok_s"] is None
