"""The bench metric manifest: one written definition per metric, stored beside every result.

Layout follows AIPerf's metrics reference: kind, unit, formula, prerequisites, how it differs from
its neighbours (and from other tools' names), and what it cannot measure. Percentiles are numpy's
linear interpolation (as vLLM ``bench serve``); ``std`` is the population standard deviation.
"""

from __future__ import annotations

from typing import Any

from inferencekit.bench.steady import OVERSATURATION_RULE, WINDOW_RULE
from inferencekit.stats import QUANTILE_CI_METHOD, RATIO_CI_METHOD, REPEATS_CI_METHOD

__all__ = ["METRICS_MANIFEST", "MANIFEST_VERSION"]

MANIFEST_VERSION = "inferencekit.bench.metrics.v2"  # v2: intervals, steady state, over-saturation (keys only added)

METRICS_MANIFEST: dict[str, Any] = {
    "version": MANIFEST_VERSION,
    "clock": "time.perf_counter_ns() on the client; send time taken just before the HTTP library is called",
    "statistics": "mean, std (population), p50/p90/p95/p99 (numpy linear interpolation) over successful requests "
                  "(HTTP 200, no error, at least one token event: a stream with none is a 'no tokens' failure, "
                  "counted in requests.no_tokens and left out of every latency and throughput)",
    "intervals": {
        "within_level": {
            "keys": "p50_ci95, p99_ci95 in the ttft_ms, tpot_ms, itl_ms and e2el_ms summaries ([lo, hi] or null); "
                    "ci95_method: 'order-statistic'",
            "method": QUANTILE_CI_METHOD,
            "needs": "n ≥ 6 for p50, n ≥ 368 for p99 (null below: no interval is made up)",
            "cannot": "see run-to-run variance (one run); pooled ITL gaps are correlated within a request, so the "
                      "ITL interval is too narrow"},
        "across_repeats": {
            "keys": "data.points.<point>.figures.<figure>.ci95 (--repeats K)",
            "method": REPEATS_CI_METHOD,
            "needs": "K ≥ 2 repeats of the point; with K = 1 the within-level interval only, said so"},
        "compare": {
            "keys": "bench compare RUN_A RUN_B rows: ratio_ci95",
            "method": RATIO_CI_METHOD,
            "needs": "≥ 2 repeats per run for an interval, ≥ 3 per run for a 'no difference' claim"},
    },
    "steady_state": {
        "keys": "levels.<label>.steady_state: window {start_s, end_s, duration_s, first_wave, requests {sent, "
                "finished, measured}, rule, empty}, requests, ttft_ms, ttfo_ms, tpot_ms, itl_ms, e2el_ms, "
                "throughput, goodput, throughput_note; the whole level's figures stay beside it",
        "rule": WINDOW_RULE,
        "source": "bench/steady.py",
    },
    "over_saturation": {
        "keys": "levels.<label>.over_saturation: flag (true/false, null when not judged), applicable, over "
                "('window' or 'level'), n, kendall_tau, p_value, slope_ms_per_s, growth_fraction, reason",
        "rule": OVERSATURATION_RULE,
        "source": "GuideLLM over-saturation detection (rising TTFT and concurrency slopes); Kendall 1938, Sen 1968",
    },
    "metrics": {
        "ttft_ms": {
            "kind": "per-request", "unit": "ms",
            "formula": "first SSE event carrying any generated token (content, reasoning, tool-call delta, token ids "
                       "or logprob entries) − send",
            "needs": "a successful streamed reply with at least one token event",
            "differs": "counts reasoning tokens; TTFO counts only visible content",
            "cannot": "separate queueing from prefill (see server timings where the engine reports them)"},
        "ttfo_ms": {
            "kind": "per-request", "unit": "ms", "formula": "first event carrying visible content − send",
            "needs": "visible content", "differs": "equals TTFT for models that do not reason",
            "cannot": "tell a long reasoning phase from a slow engine"},
        "e2el_ms": {
            "kind": "per-request", "unit": "ms",
            "formula": "last event carrying a token − send (usage-only events and [DONE] excluded)",
            "needs": "a token event", "differs": "vLLM's e2el ends at the last chunk of any kind",
            "cannot": "include time the server spends after the last token"},
        "tpot_ms": {
            "kind": "per-request", "unit": "ms", "formula": "(E2EL − TTFT) / (N_out − 1)",
            "needs": "N_out > 1",
            "differs": "GuideLLM and AIPerf call this 'inter-token latency'; ours averages per request first",
            "cannot": "show stalls inside a request (see ITL)"},
        "itl_ms": {
            "kind": "per-gap, pooled over requests", "unit": "ms",
            "formula": "gaps between consecutive token events; an event that says it carried k tokens (token ids "
                       "or logprob entries) contributes k gaps of gap/k",
            "needs": "≥ 2 token events", "differs": "vLLM does not split multi-token events",
            "cannot": "see batching inside one network chunk when the stream does not say how many tokens it holds"},
        "n_out": {
            "kind": "per-request", "unit": "tokens",
            "formula": "usage.completion_tokens; when the server streams no usage, the streamed count (token ids, "
                       "else logprob entries), else the re-tokenized text — the source is recorded",
            "differs": "streamed and re-tokenized counts are kept beside it; disagreements are counted, not hidden",
            "cannot": "prove the engine generated the tokens it bills (see the token_count gate)"},
        "output_throughput_tok_s": {
            "kind": "aggregate per level", "unit": "tokens/s",
            "formula": "Σ N_out of successful requests / (last reply end − first send) in the level",
            "needs": "≥ 1 successful request"},
        "request_throughput_req_s": {
            "kind": "aggregate per level", "unit": "requests/s",
            "formula": "successful requests / (last reply end − first send)"},
        "total_token_throughput_tok_s": {
            "kind": "aggregate per level", "unit": "tokens/s",
            "formula": "(Σ prompt tokens + Σ N_out) / window; prompt tokens from usage",
            "needs": "usage.prompt_tokens"},
        "goodput_req_s": {
            "kind": "aggregate per level", "unit": "requests/s",
            "formula": "successful requests meeting every SLO (--slo ttft=…,tpot=…,e2el=…, ms) / window",
            "differs": "failed requests count as missing the SLO (they stay in the denominator of goodput_fraction)"},
        "scheduled_ttft_ms": {
            "kind": "per-request, open loop only", "unit": "ms",
            "formula": "first token event − the time the arrival schedule meant to send the request",
            "differs": "includes the client's own lateness and any concurrency-cap queueing: no coordinated omission"},
        "scheduled_e2el_ms": {
            "kind": "per-request, open loop only", "unit": "ms", "formula": "last token event − scheduled send"},
        "send_lag_ms": {
            "kind": "per-request, open loop only", "unit": "ms",
            "formula": "actual send − scheduled send (client lateness plus cap queueing)"},
    },
}
