"""The live output_length gate on hand-built ignore_eos probe records (max_tokens 32 unless said)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferencekit.gates.judges.output_length import gate_output_length_live, length_row
from inferencekit.gates.records import merged_entries
from inferencekit.gates.result import strict_gate


def reply(usage: int | None = 32, ids: int | None = None, lps: int | None = None, finish: str = "length",
          dropped: list[str] | None = None, status: int = 200, error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "text": "x", "finish_reason": finish,
                           "usage": None if usage is None else {"completion_tokens": usage},
                           "token_ids": None if ids is None else list(range(ids)),
                           "logprobs": None if lps is None else [{"token": "x", "logprob": -0.1}] * lps,
                           "dropped_fields": dropped or []}
    if error is not None:
        out["error"] = error
    return out


def rec(key: str, rep: dict[str, Any] | None, max_tokens: int = 32) -> dict[str, Any]:
    return {"id": f"{key}.ignore_eos", "kind": "ignore_eos", "key": key, "meta": {},
            "endpoint": "/v1/chat/completions", "body": {"max_tokens": max_tokens, "ignore_eos": True},
            "reply": rep}


def test_pass_when_every_reply_streams_exactly_max_tokens():
    g = gate_output_length_live([rec("l0", reply(ids=32)), rec("l1", reply(ids=32)), rec("l2", reply(lps=32))])
    assert g.verdict == "PASS"
    assert g.reason == "3 ignore_eos replies are exactly max_tokens long (3 by their stream)"
    assert g.metrics["exact"] == 3 and g.metrics["usage_only"] == 0 and list(g.limitations) == []


def test_pass_with_some_lengths_by_usage_only_says_so():
    g = gate_output_length_live([rec("l0", reply(ids=32)), rec("l1", reply())])
    assert g.verdict == "PASS" and "(1 by their stream)" in g.reason
    assert list(g.limitations) == ["1 length(s) known only from usage (the reply streamed no token ids or logprobs)"]


def test_unproven_when_every_length_is_by_usage_only():
    g = gate_output_length_live([rec("l0", reply()), rec("l1", reply())])
    assert g.verdict == "UNPROVEN" and "by usage only" in g.reason and g.metrics["usage_only"] == 2


def test_fail_finish_length_below_max_tokens():
    g = gate_output_length_live([rec("l0", reply(usage=20, ids=20)), rec("l1", reply(ids=32))])
    assert g.verdict == "FAIL" and g.reason.startswith("1/2 ignore_eos replies are not max_tokens long")
    assert g.details[0]["key"] == "l0"
    assert g.details[0]["problem"] == "finish_reason 'length' with usage 20 < max_tokens 32"


def test_fail_usage_above_max_tokens():
    g = gate_output_length_live([rec("l0", reply(usage=40, lps=32))])
    assert g.verdict == "FAIL" and "usage 40 > max_tokens 32" in g.details[0]["problem"]


def test_fail_token_id_stream_shorter_than_usage():
    # no allowance for a token-id stream: 30 ids streamed, 32 counted
    g = gate_output_length_live([rec("l0", reply(usage=32, ids=30))])
    assert g.verdict == "FAIL"
    assert g.details[0]["problem"] == "usage 32 > 30 streamed (token_ids)"


def test_fail_stream_longer_than_usage():
    g = gate_output_length_live([rec("l0", reply(usage=30, ids=32, finish="stop"))])
    assert g.verdict == "FAIL" and "streamed 32 > usage 30" in g.details[0]["problem"]


def test_fail_logprob_stream_disagreeing_with_usage_at_a_stop():
    # at 'stop' one token of slack (the EOS); 10 vs 20 is no slack
    g = gate_output_length_live([rec("l0", reply(usage=20, lps=10, finish="stop"))])
    assert g.verdict == "FAIL" and g.details[0]["problem"] == "usage 20 > 10 streamed (logprobs)"


def test_unproven_when_the_engine_stops_at_eos():
    # usage 10 counts the EOS, 9 ids streamed: consistent at 'stop'
    g = gate_output_length_live([rec("l0", reply(usage=10, ids=9, finish="stop")), rec("l1", reply(ids=32))])
    assert g.verdict == "UNPROVEN"
    assert "1/2 ignore_eos replies ended at EOS" in g.reason and "ignore_eos is not honoured" in g.reason
    assert "gates check RUN_DIR --reference-outputs" in g.reason
    assert g.metrics["stopped_at_eos"] == 1 and g.details[0]["outcome"] == "stopped"


def test_unproven_when_a_logprob_stream_is_short_at_the_cut():
    g = gate_output_length_live([rec("l0", reply(usage=32, lps=30)), rec("l1", reply(usage=32, lps=31))])
    assert g.verdict == "UNPROVEN"
    assert "2/2 ignore_eos replies were cut at max_tokens with usage equal to it" in g.reason
    assert "1 to 2 tokens counted but not streamed" in g.reason
    assert g.metrics["unstreamed_at_limit"] == 2


def test_unproven_when_ignore_eos_is_refused_with_an_error():
    g = gate_output_length_live([rec("l0", reply(status=400, error="unknown field: ignore_eos")),
                                 rec("l1", reply(status=400, error="unknown field: ignore_eos"))])
    assert g.verdict == "UNPROVEN"
    assert g.reason.startswith("2 ignore_eos request(s) failed (HTTP 400 ×2; first error: unknown field: ignore_eos)")
    assert "exact-length requests are not accepted" in g.reason and g.metrics["failed_probes"] == 2


def test_unproven_when_ignore_eos_was_dropped_by_the_client():
    g = gate_output_length_live([rec("l0", reply(usage=12, ids=11, finish="stop", dropped=["ignore_eos"]))])
    assert g.verdict == "UNPROVEN" and "1 repl(ies) came back with ignore_eos dropped" in g.reason
    assert g.metrics["refused_ignore_eos"] == 1


def test_a_dropped_ignore_eos_does_not_excuse_a_contradiction():
    g = gate_output_length_live([rec("l0", reply(usage=12, ids=11, finish="length", dropped=["ignore_eos"]))])
    assert g.verdict == "FAIL"


def test_a_reply_without_any_count_is_unproven():
    g = gate_output_length_live([rec("l0", reply(usage=None))])
    assert g.verdict == "UNPROVEN" and "carry no count" in g.reason


def test_not_run_without_ignore_eos_probes():
    g = gate_output_length_live([{"kind": "count", "key": "n0", "body": {}, "reply": reply()}])
    assert g.verdict == "NOT RUN" and g.reason == "no ignore_eos probe was sent"


def test_length_row_fields():
    row = length_row(rec("l0", reply(usage=32, lps=32), max_tokens=32))
    assert row is not None
    assert (row.length, row.method, row.usage, row.streamed, row.outcome) == (32, "logprobs", 32, 32, "exact")
    assert length_row(rec("l1", None)) is None


def test_an_engine_known_to_honour_ignore_eos_that_stops_at_eos_fails_live():
    # llama-server generates past EOS with ignore_eos (docs/engines.md); echoing it and stopping is a fake fixed
    # length (failed before 18: UNPROVEN live, only the offline check failed)
    from inferencekit.gates.inputs import ProbeRun
    from inferencekit.gates.judges.output_length import judge_probes

    records = [rec("l0", reply(usage=10, ids=9, finish="stop")), rec("l1", reply(ids=32))]
    header = {"engine": "llama-server", "known_honoured_options": ["ignore_eos"], "settings": {}}
    g = judge_probes(ProbeRun(header, records, "live"))
    assert g.verdict == "FAIL" and g.reason.startswith("1/2 ignore_eos replies stopped at EOS on llama-server, an "
                                                       "engine known to honour ignore_eos")
    # an engine not known to honour it shows the property ignores-ignore-eos; its length claims agree, so PASS
    g = judge_probes(ProbeRun({**header, "known_honoured_options": []}, records, "live"))
    assert g.verdict == "PASS" and [p["property"] for p in g.properties] == ["ignores-ignore-eos"]
    assert "1 of 2 ignore_eos replies ended at EOS" in g.properties[0]["shown_by"] and g.judged == 2
    assert strict_gate(g).verdict == "UNPROVEN"  # --strict: the property's strict verdict (the seed's rule)


def test_an_engine_known_to_drop_ignore_eos_that_happened_to_reach_max_tokens_passes_with_a_fallback():
    from inferencekit.gates.inputs import ProbeRun
    from inferencekit.gates.judges.output_length import judge_probes

    header = {"engine": "llama-cpp-python", "known_ignored_options": ["ignore_eos"], "settings": {}}
    g = judge_probes(ProbeRun(header, [rec("l0", reply(ids=32)), rec("l1", reply(ids=32))], "live"))
    assert g.verdict == "PASS" and not g.properties
    assert "known to accept ignore_eos and drop it silently" in g.fallbacks[0]
    assert strict_gate(g).verdict == "UNPROVEN"
    # a reply that claims a length its stream contradicts still FAILs on that engine
    g = judge_probes(ProbeRun(header, [rec("l0", reply(usage=20, lps=10, finish="stop"))], "live"))
    assert g.verdict == "FAIL"


MERGED_FIXTURE = Path(__file__).parents[3] / "fixtures" / "gates" / "llama-server-ignore-eos-merged-utf8.json"


def merged_record() -> dict[str, Any]:
    """A real llama-server ignore_eos probe (CI, 3 Dec 2026): usage 24 = max_tokens at finish 'length', 23 logprob
    entries; entry 12 is id 118 with bytes [32, 195, 168] while its top_logprobs give id 118 the bytes [168]."""
    return json.loads(MERGED_FIXTURE.read_text(encoding="utf-8"))


def test_recorded_llama_server_reply_with_a_merged_entry_passes_and_says_so():
    record = merged_record()
    assert merged_entries(record["reply"]) == (1, 2)
    row = length_row(record)
    assert row is not None and (row.outcome, row.length, row.streamed, row.usage) == ("merged", 24, 23, 24)
    g = gate_output_length_live([record])
    assert g.verdict == "PASS" and g.metrics["merged_at_character"] == 1 and g.judged == 1
    assert "1 of them streamed a token inside a later token's entry at a multi-byte character" in g.reason


def test_a_gap_beyond_what_the_merged_bytes_can_hold_still_fails():
    record = merged_record()
    # 5 missing: the merged entry's 2 extra bytes hide at most 2, the text's "è" and "\ufffd" at most 3 in all
    record["reply"]["usage"]["completion_tokens"] = 28
    record["body"]["max_tokens"] = 28
    g = gate_output_length_live([record])
    assert g.verdict == "FAIL" and g.details[0]["problem"] == "usage 28 > 23 streamed (token_ids)"
    record["reply"]["usage"]["completion_tokens"] = record["body"]["max_tokens"] = 26  # 3: the text could hide them
    assert gate_output_length_live([record]).verdict == "UNPROVEN"


def test_a_merge_no_entry_proves_is_unproven():
    record = merged_record()
    for entry in record["reply"]["logprobs"]:
        entry["top_logprobs"] = [{"id": 2, "token": "", "bytes": [], "logprob": -0.5}]  # EOS on top everywhere
    assert merged_entries(record["reply"]) == (0, 0)
    g = gate_output_length_live([record])
    assert g.verdict == "UNPROVEN" and g.metrics["maybe_merged"] == 1
    assert "no entry's top_logprobs proves a merge" in g.reason


def test_merged_entries_ignores_entries_of_the_wrong_shape():
    odd = {"logprobs": [None, 3, {"id": 1, "bytes": "ab", "top_logprobs": []},
                        {"id": 1, "bytes": [1, 2], "top_logprobs": [{"id": 1, "bytes": None}]},
                        {"bytes": [1, 2], "top_logprobs": [{"bytes": [2]}]},  # no id on either side
                        {"id": 5, "bytes": [1, 2], "top_logprobs": [{"id": 5, "bytes": [1]}]},  # not a suffix
                        {"id": 5, "bytes": [9, 1, 2], "top_logprobs": [{"id": 5, "bytes": [1, 2]}]}]}
    assert merged_entries(odd) == (1, 1)
    assert merged_entries({"logprobs": "x"}) == (0, 0)


def test_reply_length_of_a_recorded_reply_counts_the_proven_merge():
    from inferencekit.gates.judges.output_length import reply_length

    reply = merged_record()["reply"]
    assert reply_length(reply) == (24, "token_ids+merged", None)
    for entry in reply["logprobs"]:
        entry["top_logprobs"] = []
    length, method, problem = reply_length(reply)
    assert (length, method) == (None, None) and problem is not None
    assert problem.startswith("23 token ids streamed, usage 24: 1 tokens counted but not streamed")
    reply["text"] = "plain ascii"  # no character left to hide the gap: the stream's own count stands
    assert reply_length(reply) == (23, "token_ids", None)
