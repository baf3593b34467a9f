"""Level metrics from reply files — pure functions, definitions in ``bench/manifest.py``.

Input: the reply dicts of one load level (successful and failed). Output: a JSON-able summary with
every metric's distribution, throughput, goodput, the N_out sources and their disagreements, and
failures grouped by error. A value that cannot be computed is None, never 0.

A reply completes only with HTTP 200, no recorded error and at least one token event: a reply that carried no
token (``no_tokens``, api/reply.py; or ``chunks`` 0, as a reply file written before that field says it) has no
TTFT and no output to count, so it is a failure (``NO_TOKENS``), counted apart from the errors
(``requests.no_tokens``), and its usage never enters throughput.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.api.reply import NO_TOKENS
from inferencekit.bench.steady import MIN_TREND_N, over_saturation, steady_window
from inferencekit.shapes import is_ok, n_out, reply_end_ns, reply_start_ns
from inferencekit.stats import quantile_ci, summarize

__all__ = ["CI_QUANTILES", "LATENCIES", "n_out", "level_metrics", "reply_start_ns", "reply_end_ns", "meets_slo",
           "summary_with_ci"]

#: the per-request latencies whose p50 and p99 get an order-statistic interval
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
CI_QUANTILES = {"p50": 0.5, "p99": 0.99}


def _tpot_ms(reply: Mapping[str, Any], n: int | None) -> float | None:
    ttft, e2el = reply.get("ttft_ms"), reply.get("e2el_ms")
    if n is None or n < 2 or ttft is None or e2el is None:
        return None
    tpot: float = (e2el - ttft) / (n - 1)
    return tpot


def _failure(r: Mapping[str, Any]) -> str | None:
    """Why a reply did not complete (its error, ``HTTP <status>``, or ``NO_TOKENS``), None when it completed."""
    if not is_ok(r):
        return str(r.get("error") or f"HTTP {r.get('status')}")
    if r.get("no_tokens") is True or r.get("chunks") == 0:
        claimed = (r.get("usage") or {}).get("completion_tokens") if isinstance(r.get("usage"), dict) else None
        return (f"{NO_TOKENS}: no token event (finish_reason {r.get('finish_reason')!r}, usage completion_tokens "
                f"{claimed!r}): no TTFT, not completed")
    return None


def summary_with_ci(values: Sequence[float]) -> dict[str, Any]:
    """``stats.summarize`` plus ``p50_ci95`` and ``p99_ci95``: the distribution-free 95% order-statistic interval
    ``[lo, hi]`` of each (``stats.quantile_ci``; null when n is too small: p50 needs 6 values, p99 368) and
    ``ci95_method`` naming it (the manifest's ``intervals.within_level``)."""
    out: dict[str, Any] = dict(summarize(values))
    for name, q in CI_QUANTILES.items():
        ci = quantile_ci(values, q)
        out[f"{name}_ci95"] = ci["ci"] if ci else None
    out["ci95_method"] = "order-statistic"
    return out


def meets_slo(values: Mapping[str, float | None], slo: Mapping[str, float]) -> bool:
    """True when every SLO key has a value at or below its limit (a missing value misses)."""
    return all(values.get(k) is not None and values[k] <= lim for k, lim in slo.items())  # type: ignore[operator]


def level_metrics(replies: Sequence[Mapping[str, Any]], *, slo: Mapping[str, float] | None = None,
                  retokenized: Mapping[str, int] | None = None, open_loop: bool = False,
                  warmup_s: float | None = None, ramp: bool = False) -> dict[str, Any]:
    """Metrics of one level: the whole level's figures, its steady-state window's, and the over-saturation flag.

    Args:
        replies: reply dicts (files of ``outputs/<engine>/load-<level>/``), each with its ``_key``
            (file stem) when ``retokenized`` is given.
        slo: ms limits keyed ``ttft_ms``, ``tpot_ms``, ``e2el_ms``, ``ttfo_ms``, ``itl_ms`` (per-request
            max ITL) for goodput.
        retokenized: re-tokenized output counts by file stem.
        open_loop: also report latencies from the scheduled send time.
        warmup_s: seconds from the level's first send until a warm-up phase ends (the window starts no earlier).
        ramp: a ``--ramp-up-strategy`` level (``LevelSpec.ramp``): its rate rises over the whole level, so it has no
            steady window; its over-saturation flag is judged over the level (the ramp passed the capacity).

    Returns:
        ``{"requests", "window_s", "throughput", "goodput", "n_out", "ttft_ms", ..., "steady_state",
        "over_saturation"}``. TTFT/TPOT/ITL/E2EL summaries carry ``p50_ci95`` and ``p99_ci95``
        (``summary_with_ci``). ``steady_state`` is ``{"window": SteadyWindow.describe(), "requests",
        "ttft_ms", "ttfo_ms", "tpot_ms", "itl_ms", "e2el_ms", "throughput", "goodput"?}`` (bench/steady.py:
        latency over requests sent and ended in the window, throughput over those ended in it ÷ its length;
        every figure null when the window is empty; throughput and goodput null, with ``throughput_note``, when fewer
        than ``steady.MIN_TREND_N`` requests ended in it); ``over_saturation`` is ``steady.over_saturation``'s dict.
    """
    out = _figures(replies, slo=slo, retokenized=retokenized, open_loop=open_loop)
    window = steady_window(replies, open_loop=open_loop, warmup_s=warmup_s, ramp=ramp)
    span = window.duration_s or None
    lat = _figures(window.measured, slo=slo, retokenized=retokenized, open_loop=open_loop, span_s=span)
    thr = _figures(window.finished, slo=slo, retokenized=retokenized, open_loop=open_loop, span_s=span)
    steady: dict[str, Any] = {"window": window.describe(), "requests": lat["requests"],
                              **{k: lat[k] for k in ("ttft_ms", "ttfo_ms", *LATENCIES)},
                              "throughput": thr["throughput"], "throughput_note": None}
    if "goodput" in thr:
        steady["goodput"] = thr["goodput"]
    if len(window.finished) < MIN_TREND_N:
        steady["throughput_note"] = (f"{len(window.finished)} requests ended inside the window, fewer than "
                                     f"{MIN_TREND_N}: no steady-state throughput or goodput")
        steady["throughput"] = {k: (None if k.endswith("_s") else v) for k, v in thr["throughput"].items()}
        if "goodput" in steady:
            steady["goodput"] = {**thr["goodput"], "goodput_req_s": None, "goodput_fraction": None}
    out["steady_state"] = steady
    out["over_saturation"] = over_saturation(replies, window, open_loop=open_loop)
    return out


def _figures(replies: Sequence[Mapping[str, Any]], *, slo: Mapping[str, float] | None,
             retokenized: Mapping[str, int] | None, open_loop: bool, span_s: float | None = None) -> dict[str, Any]:
    """The figures of a set of replies; throughput over ``span_s`` seconds when given, else over first send →
    last end."""
    slo = dict(slo or {})
    retok = retokenized or {}
    why = [(r, _failure(r)) for r in replies]
    ok = [r for r, w in why if w is None]
    failed = [(r, w) for r, w in why if w is not None]
    errors = Counter(w[:160] for _, w in failed)
    ttft: list[float] = []
    ttfo: list[float] = []
    e2el: list[float] = []
    tpot: list[float] = []
    itl: list[float] = []
    sched_ttft, sched_e2el, send_lag = [], [], []
    total_out = 0
    prompt_tokens = 0
    prompt_known = True
    sources: Counter[str] = Counter()
    disagree_streamed = disagree_retok = disagree_rs = 0
    compared_streamed = compared_retok = compared_rs = 0
    good = 0
    for r in ok:
        key = str(r.get("_key", ""))
        rt = retok.get(key)
        n, src = n_out(r, rt)
        sources[src or "unknown"] += 1
        if n is not None:
            total_out += n
        usage = r.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            if isinstance(r.get("n_streamed"), int):
                compared_streamed += 1
                disagree_streamed += r["n_streamed"] != usage["completion_tokens"]
            if rt is not None:
                compared_retok += 1
                disagree_retok += rt != usage["completion_tokens"]
        if rt is not None and isinstance(r.get("n_streamed"), int):
            compared_rs += 1
            disagree_rs += rt != r["n_streamed"]
        if isinstance(usage.get("prompt_tokens"), int):
            prompt_tokens += usage["prompt_tokens"]
        else:
            prompt_known = False
        t_tpot = _tpot_ms(r, n)
        for lst, v in ((ttft, r.get("ttft_ms")), (ttfo, r.get("ttfo_ms")), (e2el, r.get("e2el_ms")), (tpot, t_tpot)):
            if v is not None:
                lst.append(v)
        gaps = r.get("itl_ms") or []
        itl.extend(gaps)
        if open_loop and isinstance(r.get("scheduled_ns"), int):
            lag = (r["sent_ns"] - r["scheduled_ns"]) / 1e6
            send_lag.append(lag)
            if r.get("ttft_ms") is not None:
                sched_ttft.append(r["ttft_ms"] + lag)
            if r.get("e2el_ms") is not None:
                sched_e2el.append(r["e2el_ms"] + lag)
        values = {"ttft_ms": r.get("ttft_ms"), "ttfo_ms": r.get("ttfo_ms"), "e2el_ms": r.get("e2el_ms"),
                  "tpot_ms": t_tpot, "itl_ms": max(gaps) if gaps else None}
        good += bool(slo) and meets_slo(values, slo)
    starts = [s for s in (reply_start_ns(r) for r in replies) if s is not None]
    ends = [e for e in (reply_end_ns(r) for r in replies) if e is not None]
    window_s = (max(ends) - min(starts)) / 1e9 if starts and ends and max(ends) > min(starts) else None
    if span_s is not None:
        window_s = span_s if replies else None
    per_s = (lambda x: x / window_s) if window_s else (lambda x: None)
    out: dict[str, Any] = {
        "requests": {"total": len(replies), "completed": len(ok), "failed": len(failed),
                     "transport_failures": sum(1 for r, _ in failed if r.get("status") == 0),
                     "no_tokens": sum(1 for _, w in failed if w.startswith(NO_TOKENS)),
                     "errors": dict(errors.most_common(10))},
        "window_s": window_s,
        "throughput": {"request_throughput_req_s": per_s(len(ok)) if ok else None,
                       "output_throughput_tok_s": per_s(total_out) if ok else None,
                       "total_token_throughput_tok_s": per_s(total_out + prompt_tokens)
                                                       if ok and prompt_known else None,
                       "output_tokens": total_out, "prompt_tokens": prompt_tokens if prompt_known else None},
        "n_out": {"sources": dict(sources), "streamed_vs_usage": {"compared": compared_streamed,
                                                                 "disagree": disagree_streamed},
                  "retokenized_vs_usage": {"compared": compared_retok, "disagree": disagree_retok},
                  "retokenized_vs_streamed": {"compared": compared_rs, "disagree": disagree_rs}},
        "ttft_ms": summary_with_ci(ttft), "ttfo_ms": summarize(ttfo), "tpot_ms": summary_with_ci(tpot),
        "itl_ms": summary_with_ci(itl), "e2el_ms": summary_with_ci(e2el),
    }
    if slo:
        out["goodput"] = {"slo": slo, "good_requests": good, "goodput_req_s": per_s(good),
                          "goodput_fraction": good / len(replies) if replies else None}
    if open_loop:
        out["scheduled_ttft_ms"] = summarize(sched_ttft)
        out["scheduled_e2el_ms"] = summarize(sched_e2el)
        out["send_lag_ms"] = summarize(send_lag)
    return out
