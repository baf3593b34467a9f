"""The order gate's judgement: the same request must get the same reply whatever ran before it (pure).

At temperature 0 a reply is meant to be a function of its own request. The gate sends one draw of
requests in several orders (``gates order``), or the same known-answer requests alone and inside
the heaviest load level (``bench serve --kat``), and compares every sample's replies across those
runs, byte for byte, on five fields (``COMPARED``): the visible text, the reasoning text, the tool
calls (name and the *raw* argument string, in order; call ids are per-request names and are not
compared), ``finish_reason`` and the server's ``usage.completion_tokens``.

A sample is

- ``AGREE``: every run answered and all five fields are identical;
- ``DIFFER``: two answered runs differ in a field (shown: the first differing field, the position
  in it and a window of both values);
- ``UNMEASURED``: a run's request failed or never ran, and the runs that did answer agree. A
  failure is never counted as agreement (two failures would "agree" trivially).

The verdict of ``gates order`` (``judge_order``; docs/design.md, the order gate; the seed's order rule with
its departure): VACUOUS FAIL when every answered reply is empty (nothing was compared); else FAIL on any
DIFFER; else UNPROVEN on any UNMEASURED (the seed failed these; docs/design.md makes them UNPROVEN); else PASS.
No sample at all is NOT RUN.

The known answers of a load (``judge_kat``: ``bench serve --kat``, ``bench sweep``, ``verify``) are judged
against the run's own logprob noise instead (``judge_noise``, ``order_noise``): a reply that first differs at
a near-tie is the property ``not-batch-invariant``, disclosed; a confident divergence FAILs. ``--strict``
restores the byte rule there (``gates.result.strict_gate``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from inferencekit.api.reply import rederive
from inferencekit.gates.budget import null_test
from inferencekit.gates.inputs import ProbeRun, RunRows, dropped_note
from inferencekit.gates.judges.order_noise import (
    CONFIDENT,
    NEAR_TIE,
    UNDECIDED,
    Divergence,
    judge_divergences,
    pair_noise,
    steps_of,
)
from inferencekit.gates.properties import shown
from inferencekit.gates.result import Gate, merge_gates
from inferencekit.shapes import is_ok
from inferencekit.stats import rules_out

__all__ = [
    "BFCL_BUDGET",
    "COMPARED",
    "OrderSettings",
    "compare_sample",
    "fingerprint",
    "first_difference",
    "judge_kat",
    "judge_noise",
    "judge_order",
    "judge_order_log",
    "judge_probes",
    "judge_run",
    "order_label",
    "order_permutation",
    "order_rows",
]

COMPARED = ("text", "reasoning", "tool_calls", "finish_reason", "completion_tokens")
WINDOW = 24  # characters of context shown on each side of a difference
# the known-answer part's false-FAIL share (docs/gates.md, the order gate: the error budget; seed 004 had no α: any
# byte difference FAILed)
NOISE_ALPHA = 0.01
CACHE_OFF_ONLY = ("the order draw ran with the prompt cache bypassed on every request (cache-off): a greedy reply "
                  "that a partial prompt-cache hit changes is not judged here (honest llama-server at concurrency 1: "
                  "cache-off 40/40 identical, cache-on 10/40 differ, docs/gates.md; `gates order --hermetic` runs "
                  "both)")
KAT_RULE = "order: a known answer's first different token ranked among the run's own margin changes"
KAT_CALIBRATION = ("llama-server --parallel 4 (CPU, F32 logits): 10 bench serve runs with verify quick's load and "
                   "known answers, 0 FAIL at α 0.01, 7 Dec 2026 (benchmarks/results/order_noise-20261207.json)")


# BFCL's own generation cap: bfcl-eval 2026.3.23 (model_handler/local_inference/base_oss_handler.py) asks for
# min(4096, context - prompt - 2) tokens; its OpenAI function-calling handler sends no cap at all.
BFCL_BUDGET = 4096


@dataclass(slots=True)
class OrderSettings:
    """One order-gate run: what was sent and how (stored in the probe log's header, ``settings.order``).

    Attributes:
        sample_ids: the draw's ids in canonical order (after any cap).
        orders: orders issued (2..6).
        max_tokens: generation cap per request (recorded: a different cap is a different regime).
        budget: how ``max_tokens`` was chosen: ``"bfcl"`` (BFCL's own, ``BFCL_BUDGET`` clipped to the
            context the server reports), ``"set"`` (a flag or a verify profile).
        context_tokens: the context one request may use, as the server reported it (None: not reported).
        concurrency: requests in flight at once.
        regimes: ``["as-served"]``, ``["cache-off", "cache-on"]`` (``--hermetic``) or ``["cache-off"]`` (verify's
            order draw on an engine with a known cache bypass).
        cache_bypass: the fields the cache-off regime sent (names; vLLM's salt differs per request).
        draw: the draw's description (source, files' SHA-256, selection rule, draw id).
        cap_warning: what a ``--sample-cap`` selected, or None.
    """

    sample_ids: list[str]
    orders: int = 2
    max_tokens: int = BFCL_BUDGET
    concurrency: int = 1
    regimes: list[str] = dataclasses.field(default_factory=lambda: ["as-served"])
    cache_bypass: list[str] = dataclasses.field(default_factory=list)
    draw: dict[str, Any] = dataclasses.field(default_factory=dict)
    cap_warning: str | None = None
    budget: str = "set"
    context_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OrderSettings:
        """The settings stored in a probe log's header (unknown keys ignored)."""
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

    def budget_fallback(self) -> str | None:
        """Why this run's budget is not BFCL's own, or None when it is (``Gate.fallbacks``)."""
        if self.max_tokens >= BFCL_BUDGET:
            return None
        if self.budget == "bfcl":
            return (f"max_tokens {self.max_tokens}: BFCL's own budget ({BFCL_BUDGET}) clipped to the server's "
                    f"context ({self.context_tokens} tokens), so a reply BFCL would let run longer stops at the "
                    "context's end here too")
        return (f"max_tokens {self.max_tokens} is below BFCL's own budget ({BFCL_BUDGET}, bfcl-eval's cap): a reply "
                f"BFCL would let run longer was cut at {self.max_tokens} tokens, so a difference past that token is "
                "not seen")

    def describe(self, regime: str) -> str:
        return f"{len(self.sample_ids)}-sample draw in {self.orders} orders, T=0, max_tokens {self.max_tokens}, " \
               f"concurrency {self.concurrency} ({regime})"


def order_label(k: int) -> str:
    """Name of the ``k``-th order: ``canonical``, ``reversed``, then ``rotation-<k>``."""
    return ("canonical", "reversed")[k] if k < 2 else f"rotation-{k}"


def order_permutation(k: int, n: int, orders: int) -> list[int]:
    """Sample indices of the ``k``-th of ``orders`` orders of an ``n``-sample draw.

    0 is the draw as is; 1 reverses it, which changes what ran before every sample; k ≥ 2 rotates
    the canonical order to start at sample ``k·n // orders`` (a different history before each
    sample, the same neighbours but one)."""
    if k == 0 or n == 0:
        return list(range(n))
    if k == 1:
        return list(range(n - 1, -1, -1))
    start = (k * n // orders) % n
    return [(start + i) % n for i in range(n)]


def fingerprint(reply: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The compared fields of a finished reply, re-derived from its raw events; None when the request
    failed (not HTTP 200, an error recorded, a stream cut short) or there is no reply.

    ``tool_calls`` is a list of ``{"name", "arguments"}`` with the argument string exactly as streamed;
    ``completion_tokens`` is the server's ``usage.completion_tokens``, else the tokens the stream carried (token
    ids or logprob entries, ``n_streamed``: the seed counts them from the stream), else None;
    ``tokens_from`` says which (``"usage"``, ``"stream"`` or None) and is not compared."""
    if not reply or not is_ok(dict(reply)):
        return None
    r = rederive(dict(reply)) if reply.get("events") else dict(reply)
    if not is_ok(r):
        return None
    raw_usage = r.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    counted, streamed = usage.get("completion_tokens"), r.get("n_streamed")
    tokens, source = ((counted, "usage") if counted is not None
                      else (streamed, "stream") if isinstance(streamed, int) and streamed > 0 else (None, None))
    return {"text": r.get("text") or "", "reasoning": r.get("reasoning") or "",
            "tool_calls": [{"name": c.get("name") or "", "arguments": c.get("arguments") or ""}
                           for c in r.get("tool_calls") or ()],
            "finish_reason": r.get("finish_reason"), "completion_tokens": tokens, "tokens_from": source}


def is_empty(fp: Mapping[str, Any]) -> bool:
    """No generated output on any channel (no text, no reasoning, no tool call)."""
    return not fp["text"] and not fp["reasoning"] and not fp["tool_calls"]


def _string_diff(field: str, a: str, b: str) -> dict[str, Any]:
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, i - WINDOW)
    return {"field": field, "position": i, "a": a[lo:i + WINDOW], "b": b[lo:i + WINDOW],
            "a_length": len(a), "b_length": len(b)}


def first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first field (in ``COMPARED`` order) where two fingerprints differ, or None when equal.

    Returns ``{"field", "position", "a", "b"}``: for a string field the character index of the first
    difference (the length of the shorter one when one is a prefix of the other) with a window of
    ``WINDOW`` characters either side from each value; for tool calls the field names the call
    (``tool_calls[1].arguments``) or is ``tool_calls.count``; for finish_reason and completion_tokens
    the two values, position None."""
    for field in COMPARED:
        x, y = a[field], b[field]
        if x == y:
            continue
        if field in ("text", "reasoning"):
            return _string_diff(field, x, y)
        if field == "tool_calls":
            for i, (cx, cy) in enumerate(zip(x, y)):
                for part in ("name", "arguments"):
                    if cx[part] != cy[part]:
                        return _string_diff(f"tool_calls[{i}].{part}", cx[part], cy[part])
            return {"field": "tool_calls.count", "position": min(len(x), len(y)), "a": len(x), "b": len(y)}
        return {"field": field, "position": None, "a": x, "b": y}
    return None


def compare_sample(sample_id: str, replies: Sequence[tuple[str, Mapping[str, Any] | None]], *,
                   tokens: bool = False) -> dict[str, Any]:
    """One sample across runs.

    Args:
        replies: ``(run label, reply file or None)`` per run, the reference run first (canonical, or
            "alone"); None means the request never ran.
        tokens: also compare every answered run with the first token by token on their logprob entries
            (``order_noise.pair_noise``): the row then has ``noise`` (the samples before each pair's first
            different choice, from the pairs not computed identically: a pair whose every margin change is exactly
            0 shows no noise scale), ``divergences`` (one per run that differs: ``{"run", **Divergence.to_json()}``
            or ``{"run", "unexplained": True}`` where the token streams agree though a field differs) and
            ``logprobs`` (every answered reply carried logprob entries).

    Returns:
        ``{"sample_id", "status", "runs", "empty", "difference", "failed"}``: status AGREE, DIFFER or
        UNMEASURED (module docstring); ``difference`` (DIFFER only) is ``first_difference`` of the first
        answered run against the first run that differs from it, with ``a_run`` and ``b_run`` named;
        ``failed`` lists ``{"run", "error"}`` of the runs without an answer; ``empty`` is True when every
        answered run's reply is empty.
    """
    answered: list[tuple[str, dict[str, Any]]] = []
    derived: list[dict[str, Any]] = []
    failed = []
    for label, reply in replies:
        fp = fingerprint(reply)
        if fp is None:
            failed.append({"run": label, "error": ((reply or {}).get("error") or
                                                   ("no reply recorded" if not reply else
                                                    f"HTTP {(reply or {}).get('status')}"))[:300]})
        else:
            answered.append((label, fp))
            if tokens:  # the logprob entries, re-derived from the events as the fingerprint's fields were
                derived.append(rederive(dict(reply or {})) if (reply or {}).get("events") else dict(reply or {}))
    difference = None
    if answered:
        ref_label, ref = answered[0]
        for label, fp in answered[1:]:
            d = first_difference(ref, fp)
            if d is not None:
                difference = {"a_run": ref_label, "b_run": label, **d}
                break
    status = "DIFFER" if difference else ("UNMEASURED" if failed else "AGREE")
    row = {"sample_id": sample_id, "status": status, "runs": [label for label, _ in replies],
           "empty": bool(answered) and all(is_empty(fp) for _, fp in answered), "difference": difference,
           "failed": failed, "answered": len(answered),
           "usage_seen": any(fp["completion_tokens"] is not None for _, fp in answered),
           "tokens_from": sorted({fp["tokens_from"] for _, fp in answered if fp.get("tokens_from")})}
    if tokens and answered:
        row.update(_token_comparison(answered, derived))
    return row


def _token_comparison(answered: Sequence[tuple[str, Mapping[str, Any]]], derived: Sequence[Mapping[str, Any]]
                      ) -> dict[str, Any]:
    """``compare_sample``'s ``noise``, ``divergences`` and ``logprobs`` (its ``tokens`` argument)."""
    noise: list[float] = []
    divergences: list[dict[str, Any]] = []
    has = steps_of(derived[0]) is not None
    ref = answered[0][1]
    for (label, fp), reply in zip(answered[1:], derived[1:]):
        more, div, both = pair_noise(derived[0], reply)
        has = has and both
        if any(x > 0 for x in more):  # a pair computed identically (every change exactly 0) shows no noise scale
            noise += more
        if div is not None:
            divergences.append({"run": label, **div.to_json()})
        elif both and first_difference(ref, fp) is not None:
            divergences.append({"run": label, "unexplained": True})
    return {"noise": noise, "divergences": divergences, "logprobs": has}


def _show(d: Mapping[str, Any]) -> str:
    where = f" at {d['position']}" if d.get("position") is not None else ""
    return f"{d['field']}{where} ({d['a_run']} {d['a']!r} vs {d['b_run']} {d['b']!r})"


def judge_order(rows: Sequence[Mapping[str, Any]], *, what: str) -> Gate:
    """The order gate on ``compare_sample`` rows (module docstring: VACUOUS, FAIL, UNPROVEN, PASS).

    Args:
        what: what was compared, for the reason, e.g. ``"40-sample BFCL draw in 2 orders (cache on)"``.

    Returns:
        an ``order`` Gate; metrics ``samples, agree, differ, unmeasured, replies_answered, empty_replies``
        and ``vacuous`` (bool); details: DIFFER rows, then UNMEASURED rows, then the AGREE sample ids.
    """
    n = len(rows)
    by = {s: [r for r in rows if r["status"] == s] for s in ("AGREE", "DIFFER", "UNMEASURED")}
    answered = sum(r["answered"] for r in rows)
    vacuous = answered > 0 and all(r["empty"] for r in rows if r["answered"])
    metrics = {"samples": n, "agree": len(by["AGREE"]), "differ": len(by["DIFFER"]),
               "unmeasured": len(by["UNMEASURED"]), "replies_answered": answered,
               "empty_replies": sum(1 for r in rows if r["empty"]), "vacuous": vacuous}
    details = [dict(r) for r in by["DIFFER"] + by["UNMEASURED"]]
    if by["AGREE"]:
        details.append({"status": "AGREE", "sample_ids": [r["sample_id"] for r in by["AGREE"]]})
    limitations = []
    sources = {s for r in rows for s in r.get("tokens_from") or ()}
    if answered and not any(r["usage_seen"] for r in rows):
        limitations.append("the server sent no usage and the stream no token ids or logprob entries, so "
                           "completion_tokens was not compared")
    elif answered and "usage" not in sources:
        limitations.append("the server sent no usage in these replies: completion_tokens counted from the stream "
                           "(token ids or logprob entries)")
    if n == 0:
        return Gate("order", "NOT RUN", f"{what}: no sample to compare", metrics, details, limitations)
    if vacuous:
        return Gate("order", "FAIL", f"VACUOUS: {what}: all {answered} answered replies were empty (no text, "
                    "reasoning or tool call), so nothing was compared; an endpoint that returns nothing is not "
                    "order-independent by default", metrics, details, limitations)
    if by["DIFFER"]:
        first = by["DIFFER"][0]
        return Gate("order", "FAIL", f"{what}: {len(by['DIFFER'])} of {n} samples answered differently depending "
                    f"on what ran before them; first: {first['sample_id']}: {_show(first['difference'])}",
                    metrics, details, limitations)
    if by["UNMEASURED"]:
        first = by["UNMEASURED"][0]
        return Gate("order", "UNPROVEN", f"{what}: {len(by['UNMEASURED'])} of {n} samples UNMEASURED (a request "
                    f"failed or never ran; first: {first['sample_id']} in {first['failed'][0]['run']}: "
                    f"{first['failed'][0]['error']}); "
                    f"the {len(by['AGREE'])} measured samples agree, a failure is not agreement",
                    metrics, details, limitations)
    fields = "text, reasoning, tool calls with raw arguments, finish_reason, " + (
        "completion_tokens" if "usage" in sources else "completion_tokens counted from the stream" if sources
        else "not completion_tokens: the server sent no usage")
    return Gate("order", "PASS", f"{what}: all {n} samples byte-identical in every run ({fields})", metrics, details,
                limitations, judged=n, rules_out=rules_out(0, n, "samples answered differently by order",
                                                           "order-dependent share"))


def order_rows(records: Sequence[Mapping[str, Any]], sample_ids: Sequence[str], orders: int, regime: str
               ) -> list[dict[str, Any]]:
    """``compare_sample`` rows of one regime, in canonical draw order; a sample an order never answered
    (the run was cut short) is compared with None there, which makes it UNMEASURED."""
    got: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in records:
        meta = r.get("meta") or {}
        if r.get("kind") == "order" and meta.get("regime") == regime:
            got[(str(r.get("key")), str(meta.get("order")))] = r.get("reply") or {}
    labels = [order_label(k) for k in range(orders)]
    return [compare_sample(sid, [(lb, got.get((sid, lb))) for lb in labels]) for sid in sample_ids]


def judge_order_log(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> Gate:
    """The order gate of one ``gates order`` run from its probe log: each regime judged on its own
    (the reason names the regime), then combined (any FAIL → FAIL, …)."""
    raw = (header.get("settings") or {}).get("order") or {}
    s = OrderSettings.from_json(raw)
    parts = [judge_order(order_rows(records, s.sample_ids, s.orders, regime), what=s.describe(regime))
             for regime in s.regimes]
    gate = merge_gates("order", parts) if parts else Gate("order", "NOT RUN", "the log names no regime")
    gate = gate.with_limitations([s.cap_warning] if s.cap_warning else [])
    if s.regimes == ["cache-off"]:
        gate = gate.with_limitations([CACHE_OFF_ONLY])
    cut = s.budget_fallback()
    return gate.replace(limitations=(*gate.limitations, cut), fallbacks=(*gate.fallbacks, cut)) if cut else gate


def judge_kat(rows: Sequence[Mapping[str, Any]], level: str | None, *, alpha: float = NOISE_ALPHA) -> Gate:
    """The order gate on known-answer requests alone vs under load (``bench serve --kat``, ``bench sweep``,
    ``verify``): ``judge_noise`` at ``alpha`` on rows compared with ``tokens=True``; rows without the token
    comparison (made before it existed) fall back to the byte rule (``judge_order``)."""
    where = f"inside load level {level}" if level else "under load (no copy ran under load)"
    what = f"{len(rows)} known-answer requests alone vs {where}"
    if rows and all("divergences" in r for r in rows):
        return judge_noise(rows, what=what, alpha=alpha)
    return judge_order(rows, what=what)


def _noise_figures(noise: Sequence[float]) -> dict[str, Any]:
    xs = sorted(noise)
    if not xs:
        return {"noise_samples": 0, "noise_median": None, "noise_p99": None, "noise_max": None}
    return {"noise_samples": len(xs), "noise_median": float(f"{xs[len(xs) // 2]:.4g}"),
            "noise_p99": float(f"{xs[min(len(xs) - 1, int(0.99 * len(xs)))]:.4g}"), "noise_max": float(f"{xs[-1]:.4g}")}


def judge_noise(rows: Sequence[Mapping[str, Any]], *, what: str, alpha: float = NOISE_ALPHA) -> Gate:
    """The order gate with differences judged against the run's own logprob noise (``order_noise``).

    A sample that differs is explained by its first different token choice when that choice was a near-tie
    (the reference copy's margin between the two tokens is one the run's own margin changes reach at ``alpha``,
    Bonferroni over the part's divergences); everything after that token may differ. The verdict: VACUOUS FAIL as in
    ``judge_order``; FAIL on a confident divergence, or on a field that differs while the token streams agree
    (unexplained); else UNPROVEN on an undecided divergence (no logprobs, a reply that ended there, too few
    noise samples) or an UNMEASURED sample; else PASS, with the property ``not-batch-invariant`` when any sample
    differed at a near-tie (``gates.properties``; ``--strict`` makes it FAIL, seed 004's rule).

    Args:
        rows: ``compare_sample(..., tokens=True)`` rows, the reference run first in each.
        what: what was compared, for the reason.
        alpha: the part's false-FAIL share of the error budget.

    Returns:
        an ``order`` Gate; metrics as ``judge_order``'s plus ``near_ties``, ``confident``, ``undecided``,
        ``unexplained``, ``alpha``, ``largest_near_tie_margin`` and the pooled noise's ``noise_samples``,
        ``noise_median``, ``noise_p99``, ``noise_max`` (nats); details: each differing sample with its judged
        divergences, UNMEASURED rows, the AGREE sample ids.
    """
    strict = judge_order(rows, what=what)
    if strict.verdict == "NOT RUN" or strict.metrics.get("vacuous"):
        return strict
    noise = [x for r in rows for x in r.get("noise") or ()]
    differ = [r for r in rows if r["status"] == "DIFFER"]
    found: list[tuple[str, dict[str, Any]]] = []
    for r in differ:
        divs = r.get("divergences") or []
        if (r.get("difference") or {}).get("field") in ("finish_reason", "completion_tokens"):
            # the generated output is identical: no token choice explains another finish_reason or count
            found.append((r["sample_id"], {"unexplained": True}))
            continue
        if not r.get("logprobs"):
            found.append((r["sample_id"], {"class": UNDECIDED, "why": "a reply carried no logprob entries, so the "
                                           "first different token's margin is unknown"}))
        elif not divs:
            found.append((r["sample_id"], {"unexplained": True}))
        found += [(r["sample_id"], d) for d in divs]
    plain = [(sid, d) for sid, d in found if "position" in d and "class" not in d]
    judged = judge_divergences([Divergence(d["position"], d["a_token"], d["b_token"], d["swing"], d["exact"],
                                           d["margin_a"], d.get("not_greedy")) for _, d in plain], noise, alpha)
    classed = {id(d): {**d, **j} for (_, d), j in zip(plain, judged)}
    rowsout = [(sid, classed.get(id(d), d)) for sid, d in found]
    by = {c: [(sid, d) for sid, d in rowsout if d.get("class") == c] for c in (NEAR_TIE, CONFIDENT, UNDECIDED)}
    unexplained = [(sid, d) for sid, d in rowsout if d.get("unexplained")]
    near_margins = [d["margin_a"] for _, d in by[NEAR_TIE] if d.get("margin_a") is not None]
    metrics = {**strict.metrics, "near_ties": len(by[NEAR_TIE]), "confident": len(by[CONFIDENT]),
               "undecided": len(by[UNDECIDED]), "unexplained": len(unexplained), "alpha": alpha,
               "largest_near_tie_margin": max(near_margins) if near_margins else None, **_noise_figures(noise)}
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for sid, d in rowsout:
        verdicts.setdefault(sid, []).append(d)
    details = [{**{k: v for k, v in r.items() if k not in ("noise", "divergences")}, "divergences": verdicts.get(
        r["sample_id"], [])} for r in differ]
    details += [{k: v for k, v in r.items() if k not in ("noise", "divergences")}
                for r in rows if r["status"] == "UNMEASURED"]
    agree = [r["sample_id"] for r in rows if r["status"] == "AGREE"]
    if agree:
        details.append({"status": "AGREE", "sample_ids": agree})
    n, m = len(rows), sum(1 for _, d in plain if d.get("margin_a") is not None and not d.get("not_greedy"))
    ranked = {c: [float(d["p"]) for _, d in by[c] if d.get("p") is not None and not d.get("not_greedy")]
              for c in (CONFIDENT, NEAR_TIE)}
    ps = ranked[CONFIDENT] + ranked[NEAR_TIE]
    metrics["null_tests"] = [null_test(KAT_RULE, min(1.0, len(ps) * min(ps)) if ps else None, alpha, KAT_CALIBRATION,
                                       fired=bool(ranked[CONFIDENT]))]
    scale = (f"the run's noise: {metrics['noise_samples']} matched positions, margin change median "
             f"{metrics['noise_median']}, max {metrics['noise_max']} nats")
    lim = list(strict.limitations)
    if by[CONFIDENT] or unexplained:
        if by[CONFIDENT]:
            sid, d = by[CONFIDENT][0]
            where = f"first: {sid} at token {d['position']} ({d['a_token']!r} alone vs {d['b_token']!r})"
            first = (f"{where}: {d['why']}" if d.get("p") is None else
                     f"{where}: its margin alone was {d['margin_a']:.4g} nats{'' if d['exact'] else ' at least'}, "
                     f"beyond the run's margin changes: p = {d['p']:.3g} < α/m = {alpha:.3g}/{m}")
        else:
            first = (f"first: {unexplained[0][0]}: the generated tokens agree but "
                     f"{_show(_first_diff(rows, unexplained[0][0]))}")
        why = (f"{what}: {len(by[CONFIDENT])} divergence(s) at a confident position and {len(unexplained)} "
               f"difference(s) no token divergence explains, beyond the run's own noise ({scale}); {first}. "
               f"α = {alpha:g} for this part (an honest engine's false-FAIL share: the p-value is the margin's rank "
               "among the run's own margin changes, Phipson & Smyth 2010)")
        # a non-greedy choice or a difference no token explains is deterministic evidence; a margin rank is not
        metrics["fail_kind"] = "deterministic" if unexplained or any(
            d.get("p") is None or d.get("not_greedy") for _, d in by[CONFIDENT]) else "statistical"
        return Gate("order", "FAIL", why, metrics, details, lim)
    undecided = by[UNDECIDED]
    if undecided or strict.verdict == "UNPROVEN":
        parts = []
        if undecided:
            sid, d = undecided[0]
            parts.append(f"{len(undecided)} divergence(s) undecided (first: {sid}: {d['why']})")
        if strict.metrics.get("unmeasured"):
            parts.append(f"{strict.metrics['unmeasured']} sample(s) UNMEASURED (a request failed or never ran)")
        return Gate("order", "UNPROVEN", f"{what}: {'; '.join(parts)}; {len(by[NEAR_TIE])} near-tie divergence(s) "
                    f"within the run's noise ({scale})", metrics, details, lim)
    props = []
    if by[NEAR_TIE]:
        sid, d = max(by[NEAR_TIE], key=lambda x: x[1].get("margin_a") or 0.0)
        props.append(shown("not-batch-invariant", f"{len(by[NEAR_TIE])} of {n} known-answer requests first differed "
                           f"under load at a near-tie (widest: {sid} at token {d['position']}, {d['a_token']!r} vs "
                           f"{d['b_token']!r}, margin alone {d['margin_a']:.3g} nats, swing {d['swing']:.3g}, p = "
                           f"{d['p']:.3g}; {scale})", samples=n, near_ties=len(by[NEAR_TIE]),
                           largest_margin=d["margin_a"]))
    same = n - len(differ)
    why = (f"{what}: {same} of {n} byte-identical" + (f", {len(by[NEAR_TIE])} first differed at a near-tie within "
                                                        f"the run's own noise (not-batch-invariant)" if props else "")
           + f"; no divergence beyond the noise at α = {alpha:g}")
    return Gate("order", "PASS", why, metrics, details, lim, judged=n,
                rules_out=rules_out(0, n, "samples answered differently beyond batching noise",
                                    "order-dependent share"), properties=props)


def _first_diff(rows: Sequence[Mapping[str, Any]], sid: str) -> Mapping[str, Any]:
    return next(r["difference"] for r in rows if r["sample_id"] == sid)


def judge_probes(run: ProbeRun) -> Gate:
    """The order gate on one ``gates order`` run's probe log (each regime, then combined)."""
    return judge_order_log(run.header, run.records)


def judge_run(rows: RunRows) -> Gate | None:
    """The order gate on the known answers a load mixed in (``rows.kat_rows``), None when it mixed in none; fields
    the client dropped from them on an HTTP 400 are a fallback (``dropped_note`` over ``rows.kat_records``)."""
    if not rows.kat_rows:
        return None
    gate = judge_kat(rows.kat_rows, rows.kat_level)
    drop = dropped_note(rows.kat_records)
    return gate.replace(fallbacks=(*gate.fallbacks, drop)) if drop and gate.verdict != "NOT RUN" else gate
