"""Compare two ``bench serve`` runs point by point: "B is 12% faster in TTFT p50 [8%, 15%]", or no difference.

Pure functions of two *sides*: ``{"record": <the run's bench evidence record>, "prompt_set": <run.json's
prompt_set>}`` (``commands/serve_compare.py`` reads them from the run dirs).

Comparable only when measured alike (``serve_differences``; refused otherwise, as receipts are): the dataset and
its prompt file (``prompt_set`` name and sha256), ``input_len``, ``max_tokens``, ``ignore_eos``, ``temperature``,
``num_prompts``, ``duration_s``, the request fields that change what the server computes (``extra_body``,
``chat_template_kwargs``, ``count_tokens``), the SLO goodput is judged against, and the set of load points with
each point's load (mode, concurrency, rate, arrival, burstiness, cap; for open-loop sessions what the rate counts
and the session start rate). What a comparison is for, or what may
legitimately differ, is a note (``serve_notes``): engine, version, model, the prompt-draw seed (a different
seeded draw from the same prompt file), the warm-up, and the repeats per point.

Per point and figure (``repeats.FIGURES``: p50/p99 of TTFT, TPOT, ITL, E2EL; output and request throughput;
goodput when both runs have an SLO), judged across repeats (``compare_points``):

* ≥ 2 repeats with a value on each side: the ratio B/A of the geometric means and its 95% Welch interval on
  the logs (``stats.ratio_ci``). An interval wholly below or above 1 is a difference ("B is 12% faster in TTFT
  p50 [8%, 15%]"; for throughput "higher"/"lower"). An interval that holds 1 is "no difference beyond noise
  (rules out more than ±X%)", X the interval's furthest end from 1, only with ≥ ``MIN_NO_DIFF_REPEATS``
  repeats on each side; with fewer, the "no difference" is UNPROVEN (two repeats estimate a spread badly).
* fewer than 2 repeats on a side: no run-to-run variance, so no "no difference" claim (UNPROVEN); what the
  within-run intervals show is given: the two sides' 95% intervals (order-statistic for one run, t for
  repeats) apart is "differs (within-run intervals apart)", never a judged difference across runs.

A request-level bootstrap of one run per side would ignore run-to-run variance (a server restart, a
different batch mix), which is why "no difference" is judged across repeats only (issue 22). Each row's
interval is 95% on its own: over many rows, about 1 in 20 excludes 1 by chance (no multiplicity correction).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferencekit.bench.compare import ABSENT, Difference
from inferencekit.bench.repeats import FIGURES, point_levels, point_summaries
from inferencekit.stats import RATIO_CI_METHOD, ratio_ci

__all__ = ["COMPARE_RULE", "MIN_NO_DIFF_REPEATS", "compare_points", "figure_name", "serve_differences",
           "serve_notes"]

MIN_NO_DIFF_REPEATS = 3

COMPARE_RULE = (f"B/A = ratio of the geometric means of the per-repeat figures; 95% interval: {RATIO_CI_METHOD}. "
                "Outside 1: a difference. Holding 1: 'no difference beyond noise' with ≥ "
                f"{MIN_NO_DIFF_REPEATS} repeats per run (it rules out the interval's furthest end), else UNPROVEN. "
                "One run on a side: no run-to-run variance; only the within-run intervals are compared. Each row "
                "is 95% on its own (no multiplicity correction).")

_WORKLOAD = ("dataset", "input_len", "max_tokens", "ignore_eos", "temperature", "num_prompts", "duration_s")
_CONFIG = ("extra_body", "chat_template_kwargs", "count_tokens", "slo", "shared_prefix_tokens", "prefix_groups",
           "turns", "think_time_s", "trace", "time_scale", "trace_block_size", "keep_trace_repeats")
_PROMPT_SET = ("name", "sha256")
_LOAD_KEYS = ("mode", "concurrency", "rate_req_s", "arrival", "burstiness", "max_concurrency", "rate_of",
              "session_start_rate_req_s")
_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2el_ms": "E2EL",
          "output_throughput_tok_s": "output throughput", "request_throughput_req_s": "request throughput",
          "goodput_req_s": "goodput"}


def _obj(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _record(side: Mapping[str, Any]) -> dict[str, Any]:
    return _obj(side.get("record"))


def _levels(side: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in _obj(_obj(_record(side).get("data")).get("levels")).items() if isinstance(v, dict)}


def _point_loads(side: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each point's load as its first repeat's spec says (label and repeat left out)."""
    levels = _levels(side)
    out = {}
    for point, labels in point_levels(levels).items():
        spec = _obj(levels[labels[0]].get("spec"))
        out[point] = {k: spec[k] for k in _LOAD_KEYS if k in spec}
    return out


def _field(side: Mapping[str, Any], where: str, key: str) -> Any:
    if where == "prompt_set":
        src = _obj(side.get("prompt_set"))
    elif where == "workload":
        src = _obj(_obj(_record(side).get("identity")).get("workload"))
    else:
        src = _obj(_obj(_record(side).get("data")).get("config"))
    return src.get(key, ABSENT)


def serve_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    """The fields that make two serve runs incomparable (module docstring), in this order: ``prompt_set.name``,
    ``prompt_set.sha256``, ``workload.<dataset, input_len, max_tokens, ignore_eos, temperature, num_prompts,
    duration_s>``, ``config.<extra_body, chat_template_kwargs, count_tokens, slo>``, ``points`` (the two sorted
    point lists, when the sets differ), ``points.<point>`` (a point in both with another load). A record
    that is not a bench record gives ``kind``. Empty when comparable."""
    out = []
    ka, kb = _record(a).get("kind", ABSENT), _record(b).get("kind", ABSENT)
    if ka != "bench" or kb != "bench":
        out.append(Difference("kind", ka, kb))
    for where, keys in (("prompt_set", _PROMPT_SET), ("workload", _WORKLOAD), ("config", _CONFIG)):
        for k in keys:
            va, vb = _field(a, where, k), _field(b, where, k)
            if va != vb:
                out.append(Difference(f"{where}.{k}", va, vb))
    la, lb = _point_loads(a), _point_loads(b)
    if set(la) != set(lb):
        out.append(Difference("points", sorted(la), sorted(lb)))
    for p in la:
        if p in lb and la[p] != lb[p]:
            out.append(Difference(f"points.{p}", la[p], lb[p]))
    return out


def serve_notes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    """What differs and is shown, never refused: ``engine.engine``, ``engine.version``, ``model``, ``config.seed``,
    ``config.warmup``, and ``repeats.<point>`` (the repeats of a point in both runs)."""
    def ident(side: Mapping[str, Any], *path: str) -> Any:
        cur: Any = _record(side).get("identity")
        for p in path:
            cur = _obj(cur).get(p, ABSENT)
        return cur

    out = [Difference(f"engine.{k}", ident(a, "engine", k), ident(b, "engine", k)) for k in ("engine", "version")]
    out.append(Difference("model", ident(a, "model", "id"), ident(b, "model", "id")))
    out += [Difference(f"config.{k}", _field(a, "config", k), _field(b, "config", k)) for k in ("seed", "warmup")]
    pa, pb = point_levels(_levels(a)), point_levels(_levels(b))
    out += [Difference(f"repeats.{p}", len(pa[p]), len(pb[p])) for p in pa if p in pb]
    return [d for d in out if d.a != d.b]


def figure_name(figure: str) -> str:
    """``ttft_ms.p50`` → ``TTFT p50``; ``output_throughput_tok_s`` → ``output throughput``."""
    metric, _, stat = figure.partition(".")
    return f"{_NAMES.get(metric, metric)} {stat}".strip()


def _pct(*xs: float) -> list[str]:
    """Fractions as percents with one shared precision: whole percents, one decimal when any is under 10%."""
    digits = 1 if any(abs(x) < 0.1 for x in xs) else 0
    return [f"{100 * x:.{digits}f}%" for x in xs]


def _difference(name: str, better: str, r: float, lo: float, hi: float) -> tuple[str, str]:
    """("B is 12% faster in TTFT p50 [8%, 15%]", "12% faster [8%, 15%]") for a ratio r with interval [lo, hi] not
    holding 1; a ratio ≥ 2 as a factor: "B is 28.5× slower in TTFT p50 [12.7×, 63.8×]"."""
    if better == "lower":
        word = "faster" if r < 1 else "slower"
    else:
        word = "higher" if r > 1 else "lower"
    if r >= 2:  # "B is 28× slower [13×, 64×]": a percent over 100 reads badly
        x, a, b = (f"{v:.3g}×" for v in (r, lo, hi))
    else:
        x, a, b = _pct(1 - r, 1 - hi, 1 - lo) if r < 1 else _pct(r - 1, lo - 1, hi - 1)
    return f"B is {x} {word} in {name} [{a}, {b}]", f"{x} {word} [{a}, {b}]"


def _overlap(x: list[float] | None, y: list[float] | None) -> bool | None:
    if x is None or y is None:
        return None
    return not (x[1] < y[0] or y[1] < x[0])


def _row(point: str, figure: str, unit: str, better: str, fa: Mapping[str, Any], fb: Mapping[str, Any]
         ) -> dict[str, Any]:
    name = figure_name(figure)
    va = [v for v in fa.get("values") or [] if v is not None]
    vb = [v for v in fb.get("values") or [] if v is not None]
    ma, mb = fa.get("mean"), fb.get("mean")
    row: dict[str, Any] = {
        "point": point, "figure": figure, "name": name, "unit": unit, "better": better,
        "a": {"repeats": len(va), "mean": ma, "ci95": fa.get("ci95"), "method": fa.get("method")},
        "b": {"repeats": len(vb), "mean": mb, "ci95": fb.get("ci95"), "method": fb.get("method")},
        "ratio_b_over_a": (mb / ma) if isinstance(ma, (int, float)) and isinstance(mb, (int, float)) and ma > 0
        else None,
        "ratio_ci95": None, "method": None, "finding": "not judged", "statement": "", "short": "not judged",
        "rules_out": None}
    if not va or not vb:
        row["statement"] = f"{name}: no value on {'A' if not va else 'B'}: not compared"
        return row
    if len(va) >= 2 and len(vb) >= 2:
        rc = ratio_ci(va, vb)
        if rc is None:
            row["statement"] = f"{name}: a per-repeat figure ≤ 0: no ratio interval"
            return row
        lo, hi = rc["ci"]
        row.update(ratio_b_over_a=rc["ratio"], ratio_ci95=[lo, hi], method=RATIO_CI_METHOD)
        if hi < 1 or lo > 1:
            long, short = _difference(name, better, rc["ratio"], lo, hi)
            row.update(finding="differs", statement=long, short=short)
        elif len(va) >= MIN_NO_DIFF_REPEATS and len(vb) >= MIN_NO_DIFF_REPEATS:
            x = _pct(max(1 - lo, hi - 1))[0]
            row.update(finding="no difference", short=f"no difference (±{x})", rules_out=max(1 - lo, hi - 1),
                       statement=f"{name}: no difference beyond noise (rules out more than ±{x})")
        else:
            row.update(finding="UNPROVEN", short=f"UNPROVEN (< {MIN_NO_DIFF_REPEATS} repeats)",
                       statement=(f"{name}: UNPROVEN — B/A [{lo:.3f}, {hi:.3f}] holds 1, but a 'no difference' "
                                  f"claim needs ≥ {MIN_NO_DIFF_REPEATS} repeats per run ({len(va)} and {len(vb)})"))
        return row
    # fewer than 2 repeats on a side: no run-to-run variance, only what each side's own interval shows
    row["method"] = "within-run intervals of each side (no run-to-run variance)"
    ov = _overlap(fa.get("ci95"), fb.get("ci95"))
    why = (f"one run on {'both sides' if len(va) < 2 and len(vb) < 2 else ('A' if len(va) < 2 else 'B')}: "
           "run-to-run variance not measured")
    if ov is False:
        r = row["ratio_b_over_a"]
        direction = ("lower" if r is not None and r < 1 else "higher")
        row.update(finding="differs (within-run)", short="apart within-run (1 run)",
                   statement=(f"{name}: B {direction} (B/A {r:.3f}); the 95% intervals A {_iv(fa)} and B {_iv(fb)} "
                              f"are apart, but {why}: repeat the runs (--repeats 3) to judge it")
                   if r is not None else f"{name}: intervals apart; {why}")
    else:
        shown = (f"the 95% intervals A {_iv(fa)} and B {_iv(fb)} overlap" if ov else "no within-run interval on "
                 f"{'A' if fa.get('ci95') is None else 'B'}")
        row.update(finding="UNPROVEN", short="UNPROVEN (1 run)",
                   statement=f"{name}: UNPROVEN — {shown}; {why}, so 'no difference' needs ≥ "
                                                 f"{MIN_NO_DIFF_REPEATS} repeats per run")
    return row


def _iv(f: Mapping[str, Any]) -> str:
    ci = f.get("ci95")
    return "—" if not ci else f"[{ci[0]:.4g}, {ci[1]:.4g}]"


def compare_points(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per load point in both runs (A's order) and figure in both (``repeats.FIGURES`` order).

    Each row: ``{"point", "figure", "name", "unit", "better": "lower" | "higher", "a": {"repeats", "mean",
    "ci95", "method"}, "b": {...}, "ratio_b_over_a", "ratio_ci95": [lo, hi] | None, "method", "finding",
    "statement", "short", "rules_out"}``; ``rules_out`` (a "no difference" row only) is the relative change the
    interval rules out, max(1 − lo, hi − 1): a gate can hold it to a margin;
    ``finding`` one of ``differs``, ``no difference``, ``UNPROVEN``, ``differs (within-run)``, ``not judged``
    (rules in the module docstring); ``statement`` the sentence the card prints; ``short`` the table cell.
    """
    sa, sb = point_summaries(_levels(a)), point_summaries(_levels(b))
    rows = []
    for point, pa in sa.items():
        pb = sb.get(point)
        if pb is None:
            continue
        for figure, unit, better in FIGURES:
            fa, fb = pa["figures"].get(figure), pb["figures"].get(figure)
            if fa is None or fb is None:
                continue
            rows.append(_row(point, figure, unit, better, fa, fb))
    return rows
