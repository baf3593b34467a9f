"""Server telemetry, judged: Prometheus text parsed, per-level deltas, and the client-vs-server comparison (pure).

The collector (``bench/telemetry.py``) scrapes ``GET <root>/metrics`` during a level and writes the level's
``server_metrics.jsonl.gz`` (``rundir.TELEMETRY_FILE``; the line kinds are listed in ``telemetry.py``). This module
reads those lines and the level's reply files, and returns the ``server`` block of the level in the bench record:

* **deltas** between the first and the last good scrape of the level (the first is taken before the level's first
  request, the last after its last reply): counters (``<family>_total``, summed over label sets), histograms (count,
  sum, mean, and p50/p90/p99 **interpolated inside buckets** exactly as Prometheus' ``histogram_quantile`` does:
  linear within the bucket that holds the rank, the lower edge of the first bucket taken as 0, a rank in the ``+Inf``
  bucket answered with the highest finite bound), and gauges (min / mean / max over every good scrape of the level:
  a mean over scrapes at the scrape interval, not time-weighted). Only the engine's own families are reported (names
  with a ``:`` namespace: ``vllm:``, ``llamacpp:``, ``sglang:``); the raw first and last scrape in the file keep
  everything. A counter lower at the end than at the start (the server restarted) has delta None and
  ``reset: true``.
* **tokens, level scope**: the server's generated- and prompt-token counter deltas against the sum of what the client
  saw over the same window: every reply of the level plus every other request of this engine that started and
  ended inside the window (warm-up, hidden probes, known answers, structured requests: ``rundir.side_replies``),
  since a delta covers everything the server did. Counters used: generated ``vllm:generation_tokens_total`` /
  ``llamacpp:tokens_predicted_total`` / ``sglang:generation_tokens_total``; prompt ``vllm:prompt_tokens_total`` (cached
  tokens included: seen on vLLM 0.32, 2 × 520-token prompts with 512 cached counted 1040) /
  ``llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total`` (llama-server's own HELP: "excluding cached
  tokens") / ``sglang:prompt_tokens_total``.
* **TTFT, level scope** (vLLM, SGLang): the mean TTFT from the server's TTFT histogram (its sum is exact, not
  bucketed) against ours over the same requests, with the server's mean queue, prefill and decode times beside it
  (``ttft_breakdown``): what of our TTFT lies outside the server (HTTP, network, the client);
* **per request** (llama-server's ``timings``, recorded as ``server_timings``): our TTFT split into the server's
  prefill (``prompt_ms``) and the rest (network, queueing before a slot, the client), and the server's counts against
  the reply's ``usage`` and our streamed count.

Tolerances (why each is what it is):

* ``usage`` vs the server's counter, level scope: ``|client − server| ≤ max(2, 1 % of server)`` tokens, plus the
  tokens of requests that straddle the window's edge. On an honest engine both count the same tokens of the same
  requests (llama-server adds ``n_decoded`` to its counter and reports the same ``n_decoded`` as
  ``usage.completion_tokens``; vLLM counts the output token ids it returns): equal on every level measured
  (docs/load-generation.md, "Server telemetry"). The slack is for a counter update that lands after the last scrape;
  it is far below what a billing lie needs to matter (the cheat proxy's ``usage-inflate`` adds ⌈10 %⌉ and at least one
  token per request).
* streamed count vs the server's counter, one-sided: the client must not have received more tokens than the server
  generated (``streamed − server ≤`` the same slack; a cache in front of the engine that answers without it is caught
  here). The other way is no disagreement: the server counts the EOS token it sampled but did not send
  (llama-server ``predicted_n`` 18 for 17 streamed in ``tests/fixtures/replies/llama-server/chat_stream_natural_stop
  .json``), and llama-server holds back a token that ends inside a multi-byte character and sends it merged with the
  next one (a Chinese reply: 16 tokens in 9 events), so the shortfall is recorded (``short_by``), not judged.
* per request, counts: exact (``timings.predicted_n`` = ``usage.completion_tokens``, ``prompt_n + cache_n`` =
  ``usage.prompt_tokens``: one server's two accounts of one request); ``n_streamed ≤ predicted_n`` (as above).
* per request, times, one-sided (a server is always allowed to have spent less time than we waited): prefill
  ``prompt_ms ≤ TTFT + 1 ms`` (the first token cannot arrive before prefill ends; 1 ms for the server's rounding);
  the server's decode time ``predicted_ms ≤ E2EL + 2 × predicted_ms/predicted_n + 1 ms`` (llama-server's decode
  time ends with the last decode, the EOS one included, which can come after the last event we timed: seen up to
  0.65 of a token time over our E2EL on 26 recorded replies). Not the sum ``prompt_ms + predicted_ms``: on a busy
  llama-server (4 slots, a ramp-up level) an honest reply had prompt_ms 376.9 + predicted_ms 1,721.9 against our E2EL
  of 1,722.5 ms, its two spans overlapping by about the prefill, so only each span is bounded by what we waited.

A level is **flagged** when any of these is broken; "incomplete" (a reply with tokens but no usage, a counter
missing) is recorded as such, never as agreement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from inferencekit.shapes import reply_end_ns, reply_start_ns
from inferencekit.stats import summarize

__all__ = ["GENERATION_COUNTERS", "PHASE_HISTOGRAMS", "PROMPT_COUNTERS", "QUANTILE_METHOD", "TelemetryParseError",
           "client_tokens", "compare_tokens", "histogram_quantile", "judge_level", "level_deltas", "parse_exposition",
           "quantile_bucket", "request_join", "token_tolerance", "ttft_breakdown", "ttft_inconsistent"]

QUANTILE_METHOD = ("bucket-interpolated, as Prometheus histogram_quantile: linear inside the bucket holding the "
                   "rank; first bucket's lower edge 0; a rank in +Inf gives the highest finite bound")
# server counters (sample names) that count generated / prompt tokens: the first rule whose names are all present
GENERATION_COUNTERS: tuple[tuple[str, ...], ...] = (
    ("vllm:generation_tokens_total",), ("llamacpp:tokens_predicted_total",), ("sglang:generation_tokens_total",))
PROMPT_COUNTERS: tuple[tuple[str, ...], ...] = (
    ("vllm:prompt_tokens_total",), ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"),
    ("sglang:prompt_tokens_total",))
QUANTILES = (0.5, 0.9, 0.99)
PREFILL_SLACK_MS = 1.0
DECODE_SLACK_TOKENS = 2  # token times the server's own time may pass our E2EL by (its last decode: docstring)

Families = dict[str, dict[str, Any]]  # {family: {"type": str, "samples": [[sample name, {label: value}, value]]}}


class TelemetryParseError(ValueError):
    """The text is not Prometheus exposition text (an HTML page, JSON, an empty body)."""


def parse_exposition(text: str, *, engine_only: bool = True) -> Families:
    """Prometheus text → ``{family: {"type", "samples": [[name, labels, value], ...]}}`` (prometheus_client's parser).

    ``*_created`` samples and families (creation times, constant) are dropped. With ``engine_only``, only families
    with a ``:`` namespace are kept when there is any (``vllm:``, ``llamacpp:``); else every family.

    Raises:
        TelemetryParseError: the parser refuses the text, or it holds no metric family.
    """
    out: Families = {}
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name.endswith("_created"):
                continue
            samples = [[s.name, dict(s.labels), float(s.value)] for s in fam.samples if not s.name.endswith("_created")]
            out[fam.name] = {"type": fam.type, "samples": samples}
    except Exception as e:  # the parser raises ValueError, IndexError, … on text that is not exposition format
        raise TelemetryParseError(f"not Prometheus text: {str(e)[:160]}") from None
    if not out:
        raise TelemetryParseError("no metric family in the reply")
    if engine_only and any(":" in k for k in out):
        out = {k: v for k, v in out.items() if ":" in k}
    return out


def _sum_by_name(fam: Mapping[str, Any]) -> dict[str, float]:
    tot: dict[str, float] = {}
    for name, _labels, v in fam.get("samples") or []:
        tot[name] = tot.get(name, 0.0) + v
    return tot


def _series(fam: Mapping[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(n, tuple(sorted(lb.items()))): v for n, lb, v in fam.get("samples") or []}


def _buckets(fam: Mapping[str, Any]) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over the label sets other than ``le``."""
    out: dict[float, float] = {}
    for name, labels, v in fam.get("samples") or []:
        if name.endswith("_bucket") and "le" in labels:
            le = float(labels["le"])
            out[le] = out.get(le, 0.0) + v
    return out


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile(q, …)`` over cumulative ``{upper bound: count}`` (``+Inf`` included).

    None when the histogram is empty or has no ``+Inf`` bucket. Source: prometheus/promql/quantile.go
    ``bucketQuantile`` (rank ``q × count``; linear interpolation inside the bucket; the first bucket's lower edge is 0
    when its bound is positive; a rank in the ``+Inf`` bucket returns the highest finite bound).
    """
    got = quantile_bucket(q, buckets)
    return None if got is None else got[0]


def quantile_bucket(q: float, buckets: Mapping[float, float]) -> tuple[float, float, float | None] | None:
    """``(histogram_quantile, lower edge, upper edge)`` of the bucket holding rank ``q × count`` (upper None for
    ``+Inf``): the interval the true quantile lies in, whatever the interpolation says (vLLM's first queue-time
    bucket is [0, 0.3] s, so eight requests queued 0.02 ms each give an interpolated p50 of 0.15 s)."""
    bs = sorted(buckets.items())
    if not bs or not math.isinf(bs[-1][0]):
        return None
    total = bs[-1][1]
    if total <= 0:
        return None
    rank = q * total
    for i, (le, c) in enumerate(bs):
        if c >= rank:
            if math.isinf(le):
                return (bs[i - 1][0], bs[i - 1][0], None) if i > 0 else None
            lower, below = (bs[i - 1][0], bs[i - 1][1]) if i > 0 else (0.0 if le > 0 else le, 0.0)
            in_bucket = c - below
            return (le if in_bucket <= 0 else lower + (le - lower) * (rank - below) / in_bucket), lower, le
    return None


def _ok_scrapes(lines: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [x for x in lines if x.get("kind") == "scrape" and isinstance(x.get("families"), dict)]


def level_deltas(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counters, histograms and gauges of one level's telemetry lines (the module docstring gives each rule).

    Returns ``{"telemetry": "ok", "scrapes", "ok", "failed", "window_s", "counters": {sample name: {"delta",
    "reset"?}}, "histograms": {family: {"count", "sum", "mean", "p50", "p90", "p99", "p50_bucket", …, "unit"}},
    "gauges": {family: {"min", "mean", "max", "n"}}}`` (a gauge summed over its label sets at each scrape);
    ``{"telemetry": "none", "reason"}`` when the endpoint has no /metrics; ``"telemetry": "insufficient"`` with
    fewer than two good scrapes.
    """
    none = next((x for x in lines if x.get("kind") == "no_telemetry"), None)
    summary = next((x for x in lines if x.get("kind") == "summary"), {})
    counts = {"scrapes": summary.get("scrapes"), "ok": summary.get("ok"), "failed": summary.get("failed")}
    if none is not None:
        return {"telemetry": "none", "reason": str(none.get("reason")), **counts}
    ok = _ok_scrapes(lines)
    if len(ok) < 2:
        return {"telemetry": "insufficient", "reason": f"{len(ok)} good scrape(s); a delta needs two", **counts}
    first, last = ok[0]["families"], ok[-1]["families"]
    out: dict[str, Any] = {"telemetry": "ok", **counts,
                           "window_s": round((ok[-1]["t_ns"] - ok[0]["t_ns"]) / 1e9, 3),
                           "counters": {}, "histograms": {}, "gauges": {}, "quantile_method": QUANTILE_METHOD}
    for fam, spec in sorted(last.items()):
        kind = spec.get("type")
        before = first.get(fam) or {}
        if kind == "counter":
            s0, s1 = _series(before), _series(spec)
            reset = any(v < s0.get(k, 0.0) for k, v in s1.items())
            for name, v in _sum_by_name(spec).items():
                d = None if reset else v - _sum_by_name(before).get(name, 0.0)
                out["counters"][name] = {"delta": d, **({"reset": True} if reset else {})}
        elif kind == "histogram":
            b0, b1 = _buckets(before), _buckets(spec)
            t0, t1 = _sum_by_name(before), _sum_by_name(spec)
            cnt = t1.get(f"{fam}_count", 0.0) - t0.get(f"{fam}_count", 0.0)
            tot = t1.get(f"{fam}_sum", 0.0) - t0.get(f"{fam}_sum", 0.0)
            db = {le: c - b0.get(le, 0.0) for le, c in b1.items()}
            h: dict[str, Any] = {"count": cnt, "sum": tot, "mean": tot / cnt if cnt > 0 else None,
                                 "unit": "s" if fam.endswith("_seconds") else None}
            for q in QUANTILES:
                got = quantile_bucket(q, db)
                h[f"p{round(q * 100)}"] = None if got is None else got[0]
                h[f"p{round(q * 100)}_bucket"] = None if got is None else [got[1], got[2]]
            if cnt < 0:
                h = {"count": None, "reset": True}
            out["histograms"][fam] = h
        elif kind == "gauge":
            vals = [sum(v for _n, _l, v in (s["families"].get(fam) or {}).get("samples") or [])
                    for s in ok if fam in s["families"]]
            out["gauges"][fam] = {"min": min(vals), "mean": sum(vals) / len(vals), "max": max(vals), "n": len(vals)}
    return out


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _has_tokens(r: Mapping[str, Any]) -> bool:
    return bool(r.get("chunks")) or (r.get("status") == 200 and not r.get("error"))


def client_tokens(replies: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the client saw of a set of replies: ``{"requests", "usage_completion", "usage_prompt", "streamed",
    "no_usage", "no_streamed"}``. A reply that failed before any token (HTTP error, refused connection) adds 0; one
    with tokens but no ``usage`` (or no streamed count) is counted in ``no_usage`` (``no_streamed``), and the sums
    that need it are then incomplete."""
    out = {"requests": 0, "usage_completion": 0, "usage_prompt": 0, "streamed": 0, "no_usage": 0, "no_streamed": 0}
    for r in replies:
        out["requests"] += 1
        if not _has_tokens(r):
            continue
        u: Mapping[str, Any] = r["usage"] if isinstance(r.get("usage"), dict) else {}
        c, p = _int(u.get("completion_tokens")), _int(u.get("prompt_tokens"))
        if c is None or p is None:
            out["no_usage"] += 1
        else:
            out["usage_completion"] += c
            out["usage_prompt"] += p
        s = _int(r.get("n_streamed"))
        if s is None:
            out["no_streamed"] += 1
        else:
            out["streamed"] += s
    return out


def token_tolerance(server: float) -> float:
    """Level-scope slack in tokens: ``max(2, 1 % of the server's count)`` (the module docstring says why)."""
    return max(2.0, 0.01 * abs(server))


def _server_total(counters: Mapping[str, Any], rules: Sequence[Sequence[str]]) -> tuple[float | None, list[str]]:
    for names in rules:
        if all(n in counters for n in names):
            ds = [counters[n].get("delta") for n in names]
            return (None if any(d is None for d in ds) else float(sum(ds))), list(names)
    return None, []


def compare_tokens(counters: Mapping[str, Any], seen: Mapping[str, Any], straddle: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """Server counter deltas against the client's sums (``client_tokens`` of the replies inside the window, and of
    those straddling its edge, whose tokens widen the tolerance). Each of ``generated_vs_usage``,
    ``prompt_vs_usage``, ``generated_vs_streamed`` is ``{"status": "agree"|"disagree"|"incomplete"|"unavailable",
    "server", "client", "counters", "tolerance", "why"?}``; the streamed one is one-sided and says ``short_by``
    (server − client: EOS tokens and merged multi-byte characters, not judged)."""
    gen, gen_names = _server_total(counters, GENERATION_COUNTERS)
    prm, prm_names = _server_total(counters, PROMPT_COUNTERS)
    out: dict[str, Any] = {}
    cases = (("generated_vs_usage", gen, gen_names, "usage_completion", "no_usage", False),
             ("prompt_vs_usage", prm, prm_names, "usage_prompt", "no_usage", False),
             ("generated_vs_streamed", gen, gen_names, "streamed", "no_streamed", True))
    for key, server, names, field, missing, one_sided in cases:
        res: dict[str, Any] = {"server": server, "client": seen[field], "counters": names}
        if not names:
            res.update(status="unavailable", why="the server exposes no counter for these tokens")
        elif server is None:
            res.update(status="unavailable", why="the counter was reset during the level")
        elif seen[missing] or straddle[missing]:
            res.update(status="incomplete", why=f"{seen[missing] + straddle[missing]} replies carried tokens but "
                                                f"no {'usage' if missing == 'no_usage' else 'streamed count'}")
        else:
            tol = token_tolerance(server) + straddle[field]
            diff = server - seen[field]  # > 0: the server counted more than the client saw
            ok = -tol <= diff and (one_sided or diff <= tol)
            res.update(status="agree" if ok else "disagree", tolerance=round(tol, 2))
            if one_sided:
                res["short_by"] = diff
        out[key] = res
    return out


def request_join(replies: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-request join of our timings with the server's own (``server_timings``: llama-server's ``timings``).

    Returns ``{"joined", "malformed", "ttft_split": {"prefill_ms", "rest_ms"} (stats.summarize of each; TTFT = prefill
    + rest), "prefill_share_mean", "disagree": {check: count}, "examples": {check: [reply ids]}}``; ``joined`` 0 when no
    reply carries timings. Checks and tolerances: the module docstring. A timings object of the wrong shape is
    counted as ``malformed`` (a recorded fault), never an exception.
    """
    prefill: list[float] = []
    rest: list[float] = []
    share: list[float] = []
    disagree = {"completion_vs_usage": 0, "prompt_vs_usage": 0, "streamed_vs_completion": 0, "prefill_time": 0,
                "server_time": 0}
    examples: dict[str, list[str]] = {k: [] for k in disagree}
    joined = malformed = 0

    def bad(check: str, r: Mapping[str, Any]) -> None:
        disagree[check] += 1
        if len(examples[check]) < 5:
            examples[check].append(str(r.get("id") or r.get("_key")))

    for r in replies:
        t = r.get("server_timings")
        if t is None or r.get("status") != 200 or r.get("error"):
            continue
        if not isinstance(t, dict):
            malformed += 1
            continue
        p_ms, d_ms = _num(t.get("prompt_ms")), _num(t.get("predicted_ms"))
        p_n, d_n, c_n = _int(t.get("prompt_n")), _int(t.get("predicted_n")), _int(t.get("cache_n"))
        if p_ms is None or d_ms is None or d_n is None:
            malformed += 1
            continue
        joined += 1
        ttft, e2el = _num(r.get("ttft_ms")), _num(r.get("e2el_ms"))
        if ttft is not None:
            prefill.append(p_ms)
            rest.append(ttft - p_ms)
            if ttft > 0:
                share.append(p_ms / ttft)
            if p_ms > ttft + PREFILL_SLACK_MS:
                bad("prefill_time", r)
        if e2el is not None and d_n > 0 and d_ms > e2el + DECODE_SLACK_TOKENS * d_ms / d_n + 1.0:
            bad("server_time", r)
        u: Mapping[str, Any] = r["usage"] if isinstance(r.get("usage"), dict) else {}
        uc, up = _int(u.get("completion_tokens")), _int(u.get("prompt_tokens"))
        if uc is not None and uc != d_n:
            bad("completion_vs_usage", r)
        if up is not None and p_n is not None and c_n is not None and up != p_n + c_n:
            bad("prompt_vs_usage", r)
        s = _int(r.get("n_streamed"))
        if s is not None and s > d_n:
            bad("streamed_vs_completion", r)
    return {"joined": joined, "malformed": malformed,
            "ttft_split": {"prefill_ms": summarize(prefill), "rest_ms": summarize(rest)},
            "prefill_share_mean": sum(share) / len(share) if share else None,
            "disagree": disagree, "examples": {k: v for k, v in examples.items() if v}}


# server histograms (seconds) of a request's phases, by engine namespace: (TTFT, queue, prefill, decode, E2EL)
PHASE_HISTOGRAMS: tuple[tuple[str, ...], ...] = (
    ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
     "vllm:request_decode_time_seconds", "vllm:e2e_request_latency_seconds"),
    ("sglang:time_to_first_token_seconds", "sglang:queue_time_seconds", "", "", "sglang:e2e_request_latency_seconds"),
)
TTFT_MEAN_SLACK = (0.01, 1.0)  # server mean TTFT may pass ours by 1 % + 1 ms (rounding of the seconds it sums)


def ttft_breakdown(histograms: Mapping[str, Any], replies: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Level-scope split of the mean TTFT from the server's histograms (vLLM, SGLang; exact: a histogram's sum is
    not bucketed): ``{"requests", "client_ttft_mean_ms", "server_ttft_mean_ms", "server_queue_mean_ms",
    "server_prefill_mean_ms", "server_decode_mean_ms", "client_e2el_mean_ms", "server_e2el_mean_ms",
    "outside_server_mean_ms" (ours − the server's TTFT: HTTP, network, the client)}``. Only when the server's TTFT
    histogram counted exactly the requests the client timed in the window (else the means are of different requests:
    None). ``ttft_inconsistent`` says whether the server's mean may not be: it exceeds ours by more than 1 % + 1 ms
    (vLLM measures from the request's arrival to the first token's output, both inside our TTFT)."""
    for names in PHASE_HISTOGRAMS:
        ttft = histograms.get(names[0])
        if not ttft or ttft.get("count") in (None, 0):
            continue
        timed = [t for r in replies if (t := _num(r.get("ttft_ms"))) is not None and r.get("status") == 200]
        if round(ttft["count"]) != len(timed):
            return None
        e2el = [t for r in replies if (t := _num(r.get("e2el_ms"))) is not None and r.get("status") == 200]

        def mean_ms(name: str) -> float | None:
            h = histograms.get(name) if name else None
            return h["sum"] / h["count"] * 1000.0 if h and h.get("count") else None

        client = sum(timed) / len(timed)
        server = mean_ms(names[0])
        assert server is not None
        return {"requests": len(timed), "client_ttft_mean_ms": client, "server_ttft_mean_ms": server,
                "server_queue_mean_ms": mean_ms(names[1]), "server_prefill_mean_ms": mean_ms(names[2]),
                "server_decode_mean_ms": mean_ms(names[3]),
                "client_e2el_mean_ms": sum(e2el) / len(e2el) if e2el else None,
                "server_e2el_mean_ms": mean_ms(names[4]), "outside_server_mean_ms": client - server}
    return None


def ttft_inconsistent(split: Mapping[str, Any]) -> bool:
    """True when the server's mean TTFT passes ours by more than 1 % + 1 ms (``ttft_breakdown``)."""
    return bool(split["server_ttft_mean_ms"] > split["client_ttft_mean_ms"] * (1 + TTFT_MEAN_SLACK[0])
                + TTFT_MEAN_SLACK[1])


def _window(lines: Sequence[Mapping[str, Any]], wall: bool) -> tuple[int, int] | None:
    ok = _ok_scrapes(lines)
    key = "t_unix_ns" if wall else "t_ns"
    return (int(ok[0][key]), int(ok[-1][key])) if len(ok) >= 2 else None


def judge_level(label: str, lines: Sequence[Mapping[str, Any]], level_replies: Sequence[Mapping[str, Any]],
                side_replies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``server`` block of one level: ``level_deltas``, the level-scope token comparison (``tokens``), the
    per-request join (``per_request``), ``ttft_breakdown`` (absent when the server has no TTFT histogram), and
    ``flags`` (one sentence per disagreement beyond tolerance; empty when none). ``side_replies`` are the engine's
    other replies (warm-up, extra requests): those inside the scrape window count, those across its edge widen the
    tolerance. Clock: the scrapes' ``t_ns`` (the client's perf_counter, as ``sent_ns``), or ``t_unix_ns`` when the
    replies carry ``clock_offset_ns`` (several client processes)."""
    block = level_deltas(lines)
    req = request_join(level_replies)
    block["per_request"] = req
    flags: list[str] = []
    if block["telemetry"] == "ok":
        wall = any(isinstance(r.get("clock_offset_ns"), int) for r in level_replies)
        w = _window(lines, wall)
        inside: list[Mapping[str, Any]] = list(level_replies)
        across: list[Mapping[str, Any]] = []
        if w is not None:
            for r in side_replies:
                a, b = reply_start_ns(r), reply_end_ns(r)
                if a is None or b is None or b < w[0] or a > w[1]:
                    continue
                (inside if w[0] <= a and b <= w[1] else across).append(r)
        seen, straddle = client_tokens(inside), client_tokens(across)
        tokens = compare_tokens(block["counters"], seen, straddle)
        block["tokens"] = {**tokens, "client": seen, "straddling": straddle["requests"],
                           "side_requests": len(inside) - len(level_replies)}
        split = ttft_breakdown(block["histograms"], inside) if not across else None
        if split is not None:
            block["ttft_breakdown"] = split
        if split is not None and ttft_inconsistent(split):
            flags.append(f"level {label}: the server's mean TTFT {split['server_ttft_mean_ms']:.1f} ms exceeds the "
                         f"client's {split['client_ttft_mean_ms']:.1f} ms over the same {split['requests']} requests "
                         "(tolerance 1 % + 1 ms)")
        for key, res in tokens.items():
            if res["status"] == "disagree":
                what, src = key.split("_vs_")
                src = "usage" if src == "usage" else "streamed count"
                flags.append(f"level {label}: the server counted {res['server']:g} {what} tokens "
                             f"({' + '.join(res['counters'])} delta) but the client's {src} says {res['client']} over "
                             f"{seen['requests']} requests (tolerance {res['tolerance']:g}"
                             + ("; the client received more than the server generated" if "short_by" in res else "")
                             + ")")
    for check, n in req["disagree"].items():
        if n:
            flags.append(f"level {label}: {n} of {req['joined']} replies break the per-request check {check} "
                         f"(server timings vs the reply; e.g. {', '.join(req['examples'][check][:3])})")
    block["flags"] = flags
    return block
