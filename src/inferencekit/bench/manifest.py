"""The bench metric manifest: one written definition per metric, stored beside every result.

Layout follows AIPerf's metrics reference: kind, unit, formula, prerequisites, how it differs from
its neighbours (and from other tools' names), and what it cannot measure. Percentiles are numpy's
linear interpolation (as vLLM ``bench serve``); ``std`` is the population standard deviation.
"""

from __future__ import annotations

from typing import Any

__all__ = ["METRICS_MANIFEST", "MANIFEST_VERSION"]

MANIFEST_VERSION = "inferencekit.bench.metrics.v1"

METRICS_MANIFEST: dict[str, Any] = {
    "version": MANIFEST_VERSION,
    "clock": "time.perf_counter_ns() on the client; send time taken just before the HTTP library is called",
    "statistics": "mean, std (population), p50/p90/p95/p99 (numpy linear interpolation) over successful requests "
                  "(HTTP 200, no error, at least one token event: a stream with none is a 'no tokens' failure, "
                  "counted in requests.no_tokens and left out of every latency and throughput)",
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
