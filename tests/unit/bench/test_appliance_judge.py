"""Appliance receipt judgement on recorded replies (tests/fixtures/appliance, from real runs of bench appliance).

llama-server/: prefill cold (``cache_prompt: false``, 0 cached) and its warm replay (255 cached) at depth
256; a structured-workload reply that stopped naturally with Python instead of JSON; a 64-token stream
cut at ``length``. llama-cpp-python/: a 64-token stream without usage (that engine streams none) and
a text-prompt prefill pair.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from inferencekit.bench import appliance_judge as judge
from tests.paths import FIXTURES

FIX = FIXTURES / "appliance"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIX / name).read_text())


def structured(n: int = 50) -> list[dict[str, int]]:
    return [{"index": i, "square": i * i} for i in range(1, n + 1)]


def test_percentile_and_summary_use_the_nearest_rank_rule() -> None:
    vals = list(range(1, 11))
    assert judge.percentile_nearest(vals, 0.9) == 9  # sorted[round(9 * 0.9)] = sorted[8]
    assert judge.percentile_nearest([5.0], 0.9) == 5.0
    s = judge.summary([3.0, 1.0, 2.0, 10.0])
    assert s == {"median": 2.5, "minimum": 1.0, "maximum": 10.0, "p90": 10.0, "n": 4}
    assert judge.summary([]) is None
    with pytest.raises(ValueError):
        judge.percentile_nearest([], 0.5)


def test_decode_row_from_a_llama_server_stream() -> None:
    reply = load("llama-server/stream-64-length.json")
    row = judge.decode_row(reply, "outputs/x.json", retokenized=63)
    assert row["usable"] is True
    assert row["completion_tokens"] == 64 and row["completion_tokens_source"] == "usage"
    assert row["prompt_tokens"] == 161 and row["cached_prompt_tokens"] == 0
    window = (reply["e2el_ms"] - reply["ttft_ms"]) / 1e3
    assert row["decode_seconds"] == pytest.approx(window, abs=1e-6)
    assert row["decode_tokens_per_second"] == pytest.approx(63 / window, abs=1e-3)
    assert row["ttft_seconds"] == pytest.approx(reply["ttft_ms"] / 1e3, abs=1e-6)
    assert row["measured_sse_events"] == 64
    assert row["wall_seconds"] >= row["time_to_last_output_seconds"]
    assert row["stream_done_marker"] is True and row["finish_reason"] == "length"
    assert row["retokenized_completion_tokens"] == 63
    assert row["output_characters"] == len(reply["text"])
    gate = judge.completion_validation(row, "code")
    assert gate == {"valid": False, "error": "finish_reason 'length', not 'stop'"}


def test_decode_row_without_usage_counts_token_events_and_says_so() -> None:
    reply = load("llama-cpp-python/stream-64-no-usage.json")
    assert reply["usage"] is None
    row = judge.decode_row(reply, "r.json")
    assert row["completion_tokens"] == reply["chunks"] == 64
    assert row["completion_tokens_source"] == "token events"
    assert row["prompt_tokens"] is None and row["cached_prompt_tokens"] is None
    assert row["usable"] is True and row["decode_tokens_per_second"] > 0


def test_structured_reply_that_wrote_python_fails_its_gate() -> None:
    reply = load("llama-server/decode-structured-stop.json")
    row = judge.decode_row(reply, "r.json")
    assert row["finish_reason"] == "stop" and row["stream_done_marker"] is True
    # llama-server counts the EOS in usage but streams no event for it
    assert row["completion_tokens"] == 287 and row["measured_sse_events"] == 286
    gate = judge.completion_validation(row, "structured")
    assert gate["valid"] is False and gate["error"].startswith("not JSON")
    assert judge.completion_validation(row, "prose") == {"valid": True}


@pytest.mark.parametrize(("value", "error"), [
    (structured(), None),
    (structured(49), "expected an array of 50 objects, got an array of 49"),
    ([*structured(49), {"index": 50, "square": 2501}], "object 50 is not"),
    ([{"index": 1, "square": 1, "note": "x"}, *structured()[1:]], "object 1 is not"),
    ([{"index": True, "square": 1}, *structured()[1:]], "object 1 is not"),
    ([{"index": 1.0, "square": 1}, *structured()[1:]], "object 1 is not"),
    ({"items": structured()}, "expected an array of 50 objects, got dict"),
])
def test_structured_output_is_checked_exactly(value: Any, error: str | None) -> None:
    out = judge.validate_structured_output(json.dumps(value))
    assert out["valid"] is (error is None)
    if error:
        assert error in out["error"]


def test_fenced_json_is_not_accepted() -> None:
    out = judge.validate_structured_output("```json\n" + json.dumps(structured()) + "\n```")
    assert out["valid"] is False and out["error"].startswith("not JSON")


def test_gate_requires_done_marker_and_visible_output() -> None:
    row = judge.decode_row(load("llama-server/decode-structured-stop.json"), "r.json")
    no_done = {**row, "stream_done_marker": False}
    assert judge.completion_validation(no_done, "prose") == {"valid": False,
                                                              "error": "the stream ended without [DONE]"}
    blank = {**row, "output": "  \n"}
    assert judge.completion_validation(blank, "prose") == {"valid": False, "error": "no visible answer"}


def test_failed_request_is_an_unusable_row_not_an_exception() -> None:
    reply = copy.deepcopy(load("llama-server/stream-64-length.json"))
    reply["events"] = reply["events"][:10]
    reply["error"] = "broken stream: the connection closed before the reply ended"
    row = judge.decode_row(reply, "r.json")
    assert row["usable"] is False and row["unusable_reason"].startswith("broken stream")
    assert row["decode_tokens_per_second"] is None
    assert judge.completion_validation(row, "code")["error"].startswith("request failed")


def test_one_event_holding_the_whole_completion_has_no_decode_window() -> None:
    reply = copy.deepcopy(load("llama-server/stream-64-length.json"))
    reply["chunks"] = 1
    reply["e2el_ms"] = reply["ttft_ms"]
    row = judge.decode_row(reply, "r.json")
    assert row["usable"] is False and "one event" in row["unusable_reason"]


def test_llama_server_prefill_pair_is_server_verified_cold() -> None:
    cold = judge.prefill_row(load("llama-server/prefill-d256-cold.json"), "c.json", depth=256, cold=True,
                             prompt_form="token ids")
    warm = judge.prefill_row(load("llama-server/prefill-d256-warm.json"), "w.json", depth=256, cold=False,
                             prompt_form="token ids")
    assert cold["usable"] and warm["usable"]
    assert cold["prompt_tokens"] == warm["prompt_tokens"] == 256 and cold["prompt_tokens_source"] == "usage"
    assert cold["cached_prompt_tokens"] == 0 and warm["cached_prompt_tokens"] == 255
    assert cold["cached_prompt_tokens_source"] == "usage.prompt_tokens_details.cached_tokens"
    assert cold["effective_prefill_tokens_per_second"] == pytest.approx(256 / cold["ttft_seconds"], rel=1e-4)
    assert warm["ttft_seconds"] < cold["ttft_seconds"]
    sec = judge.prefill_section([cold], [warm])
    assert sec["cold_verification"] == "server-verified"
    assert sec["cold"]["effective_prefill_tokens_per_second"]["n"] == 1


def test_cold_sample_reporting_cached_tokens_is_refused() -> None:
    reply = copy.deepcopy(load("llama-server/prefill-d256-cold.json"))
    reply["usage"]["prompt_tokens_details"]["cached_tokens"] = 128
    row = judge.prefill_row(reply, "c.json", depth=256, cold=True, prompt_form="token ids")
    assert row["usable"] is False and "128 cached prompt tokens" in row["unusable_reason"]
    assert row["effective_prefill_tokens_per_second"] is None
    # the same figure on a warm replay is what a warm replay should show
    assert judge.prefill_row(reply, "w.json", depth=256, cold=False, prompt_form="token ids")["usable"] is True


def test_prompt_count_other_than_the_depth_is_refused() -> None:
    row = judge.prefill_row(load("llama-server/prefill-d256-cold.json"), "c.json", depth=255, cold=True,
                            prompt_form="token ids")
    assert row["usable"] is False
    assert row["unusable_reason"].startswith("prompt-token mismatch: requested 255, usage says 256")


def test_text_prefill_without_usage_is_checked_by_the_tokenizer_count() -> None:
    cold_reply = load("llama-cpp-python/prefill-d256-text-cold.json")
    assert cold_reply["usage"] is None
    cold = judge.prefill_row(cold_reply, "c.json", depth=256, cold=True, prompt_form="text", counted_tokens=256)
    warm = judge.prefill_row(load("llama-cpp-python/prefill-d256-text-warm.json"), "w.json", depth=256, cold=False,
                             prompt_form="text", counted_tokens=256)
    assert cold["usable"] and cold["prompt_tokens_source"] == "tokenize endpoint"
    assert cold["cached_prompt_tokens"] is None
    assert warm["ttft_seconds"] < cold["ttft_seconds"]  # llama-cpp-python reuses the previous prompt's prefix
    assert judge.prefill_section([cold], [warm])["cold_verification"] == "cold not server-verified"
    miscounted = judge.prefill_row(cold_reply, "c.json", depth=256, cold=True, prompt_form="text", counted_tokens=257)
    assert miscounted["usable"] is False and "tokenize endpoint says 257" in miscounted["unusable_reason"]
    uncounted = judge.prefill_row(cold_reply, "c.json", depth=256, cold=True, prompt_form="text")
    assert uncounted["usable"] is False and "no prompt token count" in uncounted["unusable_reason"]


def _decode_rows(n: int, workload: str) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        row = judge.decode_row(load("llama-server/stream-64-length.json"), f"r{i}.json")
        row["completion_validation"] = judge.completion_validation(row, workload)
        rows.append({"run": i + 1, **row})
    return rows


def test_decode_section_pools_and_counts_the_gate() -> None:
    rows = _decode_rows(2, "code")
    rows[1] = {**rows[1], "decode_seconds": rows[1]["decode_seconds"] * 2,
               "decode_tokens_per_second": rows[1]["decode_tokens_per_second"] / 2}
    sec = judge.decode_section(rows)
    assert sec["completion_gate"] == {"passed": 0, "total": 2}
    r0, r1 = rows
    assert sec["pooled_decode_tokens_per_second"] == pytest.approx(126 / (r0["decode_seconds"] + r1["decode_seconds"]),
                                                                    abs=1e-3)
    assert sec["decode_tokens_per_second"]["n"] == 2
    assert sec["decode_tokens_per_second"]["maximum"] == pytest.approx(r0["decode_tokens_per_second"], abs=1e-3)


def test_concurrency_round_with_a_failed_stream_is_unusable() -> None:
    good = judge.decode_row(load("llama-server/stream-64-length.json"), "a.json")
    bad = judge.decode_row({"status": 0, "error": "connection failed: refused", "events": []}, "b.json")
    ok_round = judge.concurrency_round(1, [good, good], 2.0)
    assert ok_round["usable"] and ok_round["aggregate_end_to_end_tokens_per_second"] == 64.0
    bad_round = judge.concurrency_round(2, [good, bad], 2.0)
    assert not bad_round["usable"] and bad_round["unusable_reason"] == "1 of 2 streams unusable"
    sec = judge.concurrency_section([ok_round, bad_round])
    assert sec["aggregate_end_to_end_tokens_per_second"]["n"] == 1
    assert sec["per_stream_decode_tokens_per_second"]["n"] == 3  # usable streams of every round


def test_verdict_is_pass_only_when_everything_held() -> None:
    rows = _decode_rows(1, "code")
    rows[0]["completion_validation"] = {"valid": True}
    receipt = {"decode": {"code": judge.decode_section(rows)}, "prefill": {}, "concurrency": {}}
    assert judge.receipt_verdict(receipt) == ("PASS", [])
    failing = {"decode": {"code": judge.decode_section(_decode_rows(2, "code"))}}
    verdict, reasons = judge.receipt_verdict(failing)
    assert verdict == "UNPROVEN"
    assert reasons == ["decode/code: completion gate passed 0/2 (finish_reason 'length', not 'stop')"]


def test_a_stream_with_another_choice_index_or_usage_contradicting_itself_is_refused() -> None:
    # before 18 both were timed as ordinary samples (the seed refused them)
    import json

    from inferencekit.api.reply import rederive

    reply = copy.deepcopy(load("llama-server/stream-64-length.json"))
    events = reply["events"]
    i = next(k for k, (_, p) in enumerate(events) if p != "[DONE]" and json.loads(p).get("choices"))
    obj = json.loads(events[i][1])
    obj["choices"] = [*obj["choices"], {**obj["choices"][0], "index": 1}]
    events[i] = [events[i][0], json.dumps(obj)]
    odd = rederive(reply)
    assert odd["odd_choices"] == ["0", "1"]
    row = judge.decode_row(odd, "outputs/x.json", retokenized=None)
    assert row["usable"] is False and "the stream carried choices ['0', '1']" in row["unusable_reason"]
    assert rederive(copy.deepcopy(load("llama-server/stream-64-length.json")))["odd_choices"] is None
    cold = copy.deepcopy(load("llama-server/prefill-d256-warm.json"))
    cold["usage"]["prompt_tokens_details"]["cached_tokens"] = 300
    row = judge.prefill_row(cold, "w.json", depth=256, cold=False, prompt_form="token ids")
    assert row["usable"] is False and "300 cached prompt tokens" in row["unusable_reason"]
    assert "contradicts itself" in row["unusable_reason"]
