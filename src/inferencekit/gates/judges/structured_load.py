"""The API contract under load: structured output and tool calls, each level against the same requests alone.

The run-dir part of the contract gate (``GATES["contract"].judge_run``), on the requests ``bench serve --structured
N`` mixed into a load (``gates/probes/structured.py`` plans them; ``rundir.structured_folder`` names their folders:
``structured/alone/`` and ``structured/load-<level>/``). Every reply is one row (``structured_row``), in a bucket:

- kind ``structured_json``: ``valid``, ``invalid`` (not JSON, not an object, or outside the schema sent: the
  contract's ``json_bucket``), ``cut`` (finish_reason ``length`` before the object closed) or ``error`` (no usable
  reply). Schema-valid rate = valid / (valid + invalid).
- kind ``tool_call``: the reply's call (``meta.path`` ``tool_choice``: the reply's ``tool_calls``; ``response_format``:
  its text parsed as ``{"name", "arguments"}``) checked against BFCL's ground truth by BFCL's AST rules
  (``tool_call_ast.check_calls``: function name, required arguments, types, allowed values): ``correct`` or one of
  ``tool_call_ast.BUCKETS`` (``unparsable``, ``wrong_function``, ``missing_argument``, ``wrong_type``,
  ``wrong_value``, ``extra_call``, ``unexpected_argument``, ``missing_call``); ``cut`` and ``error`` as above.
  AST-correct rate = correct / (correct + every AST bucket).

Cut and errored replies are their own buckets, never counted invalid or incorrect (a budget ended them, or no reply
came). Each rate carries its Wilson 95% interval (``stats.wilson_interval``).

**The rule**, per level and per rate, against the same requests alone (greedy, so an honest engine's rates should
match up to batch effects):

- FAIL: the level's interval lies wholly below the alone interval (its upper bound < the alone lower bound): the
  rate dropped under load by more than both samples' spread;
- UNPROVEN: no judged reply alone or under load, or too few to tell: even 0 of the level's n would not lie below
  the alone interval (Wilson's upper bound for 0 of n ≥ the alone lower bound), so the level could not have failed;
- PASS otherwise, with its n and what it rules out: a level rate below its own Wilson lower bound.

Non-overlapping 95% intervals are a conservative two-sample test (a drop it calls is real at well under 5%), chosen
because it needs no threshold of its own and reads off the figures the card shows; a paired count (requests right
alone and wrong under load, ``regressed``) is reported beside it, not judged. The gate's verdict combines every
level's (``combine_claims``). Trigger F1 (tool calls under ``tool_choice: auto`` against a reference endpoint) is not
built: it needs a reference endpoint and a model that chooses to call under ``auto`` (SmolLM2-135M does not); it is
stated UNPROVEN in the metrics and the limitations, not combined into the verdict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.gates.inputs import RunRows, dropped_note
from inferencekit.gates.judges.contract_structured import json_bucket
from inferencekit.gates.judges.tool_call_ast import BUCKETS, check_calls, parse_tool_calls
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, is_ok
from inferencekit.stats import Verdict, combine_claims, wilson_interval

__all__ = ["F1_REASON", "JSON_KIND", "STRUCTURED_KINDS", "TOOL_KIND", "compare_rates", "judge_run", "rate",
           "structured_row"]

GATE = "contract"
JSON_KIND, TOOL_KIND = "structured_json", "tool_call"
STRUCTURED_KINDS = (JSON_KIND, TOOL_KIND)
ALONE = "alone"
F1_REASON = ("trigger F1 (tool calls under tool_choice auto, compared with a reference endpoint) is UNPROVEN: not "
             "measured; it needs a reference endpoint and a model that chooses to call a tool under auto "
             "(SmolLM2-135M does not). These requests force the call (a named tool_choice or a response_format "
             "schema), so they judge the engine's constrained decoding under load, not the model's choice")
_MEASURES = {JSON_KIND: ("json", "schema-valid", "valid"), TOOL_KIND: ("tool", "AST-correct", "correct")}

Row = Mapping[str, Any]


def _strs(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _tool_calls_message(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The reply's derived ``tool_calls`` (``api/reply.py``: ``{"id", "type", "name", "arguments"}``) in the OpenAI
    message shape ``parse_tool_calls`` reads; absent when the reply made no call."""
    calls = reply.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return {}
    return {"tool_calls": [{"type": c.get("type"), "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                           if isinstance(c, dict) else c for c in calls]}


def _call_from_text(text: str) -> tuple[list[dict[str, Any]] | None, str]:
    """A ``response_format`` reply's text as one call ``{"name", "arguments"}``; (None, why) when it is not JSON."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"not JSON ({type(e).__name__}): {text[:80]!r}"
    if not isinstance(obj, dict):
        return None, f"JSON but not an object: {text[:80]!r}"
    return [obj], ""


def _tool_bucket(reply: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[str, str, Any]:
    """``(bucket, why, the call as judged)`` of one tool-call reply."""
    cut = reply.get("finish_reason") == "length"
    if meta.get("path") == "tool_choice":
        calls, why = parse_tool_calls(_tool_calls_message(reply))
        if calls is None or (cut and not calls):
            return ("cut", "finish_reason length before the call closed", None) if cut else ("unparsable", why or "",
                                                                                             None)
    else:
        raw = reply.get("text")
        calls, why = _call_from_text(raw if isinstance(raw, str) else "")
        if calls is None:
            return ("cut", "finish_reason length before the object closed", None) if cut else ("unparsable", why, None)
    raw_renamed = meta.get("renamed")
    renamed: Mapping[str, Any] = raw_renamed if isinstance(raw_renamed, dict) else {}
    calls = [{**c, "name": renamed.get(name, name)} if isinstance(name := c.get("name"), str) else c for c in calls]
    functions, truth = meta.get("functions"), meta.get("ground_truth")
    if not isinstance(functions, list) or not isinstance(truth, list):
        return "error", "the record carries no BFCL functions or ground truth", calls
    try:
        result = check_calls(functions, calls, truth)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return "error", f"the record's BFCL ground truth cannot be checked: {type(e).__name__}: {str(e)[:120]}", calls
    return ("correct", "", calls) if result.valid else (result.bucket or "unparsable", result.detail, calls)


def structured_row(level: str | None, key: str, reply: Mapping[str, Any]) -> dict[str, Any] | None:
    """One structured request's reply as the judge reads it (None: not a structured request's reply).

    Args:
        level: the load level it ran in, None for the copy sent alone.
        key: its file key (the request id).
        reply: the reply file; its ``probe_kind`` and ``probe_meta`` (the planner's ``meta``: the schema sent, or
            the BFCL functions, ground truth and path) say how to judge it. The file is untrusted: a field of the
            wrong type is read as absent.

    Returns:
        ``{"level", "key", "kind", "path", "sample", "bucket", "why", "answer", "dropped"}``: ``answer`` is what the
        reply said (the text, or the calls), compared with the copy alone for ``same``/``regressed``.
    """
    kind = reply.get("probe_kind")
    if kind not in STRUCTURED_KINDS:
        return None
    raw_meta = reply.get("probe_meta")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    path = meta.get("format") if kind == JSON_KIND else meta.get("path")
    row: dict[str, Any] = {"level": level, "key": key, "kind": kind, "sample": meta.get("sample"),
                "path": path if path in ("json_schema", "json_object", "tool_choice", "response_format") else None,
                "dropped": _strs(reply.get("dropped_fields"))}
    if not is_ok(reply):
        bucket, why, answer = "error", f"status {reply.get('status')}: {str(reply.get('error') or '')[:120]}", None
    elif kind == JSON_KIND:
        schema = meta.get("schema") if row["path"] == "json_schema" and isinstance(meta.get("schema"), dict) else None
        bucket, why = json_bucket(reply, schema)
        answer = reply.get("text")
    else:
        bucket, why, answer = _tool_bucket(reply, meta)
    return {**row, "bucket": bucket, "why": why, "answer": answer}


def rate(rows: Sequence[Row], kind: str) -> dict[str, Any]:
    """One group's figures for ``kind``: ``n`` requests, ``judged`` (neither cut nor errored), ``ok`` (valid /
    AST-correct), ``rate`` and its Wilson 95% ``ci`` (None when none was judged), ``buckets`` (every bucket's count)
    and ``paths`` (requests by path: json_schema/json_object, tool_choice/response_format)."""
    mine = [r for r in rows if r["kind"] == kind]
    good = _MEASURES[kind][2]
    buckets: dict[str, int] = dict.fromkeys((good, *(("invalid",) if kind == JSON_KIND else BUCKETS), "cut", "error"),
                                            0)
    paths: dict[str, int] = {}
    for r in mine:
        buckets[r["bucket"]] = buckets.get(r["bucket"], 0) + 1
        paths[str(r["path"])] = paths.get(str(r["path"]), 0) + 1
    judged = sum(v for b, v in buckets.items() if b not in ("cut", "error"))
    ok = buckets.get(good, 0)
    ci = wilson_interval(ok, judged) if judged else None
    return {"n": len(mine), "judged": judged, "ok": ok, "rate": ok / judged if judged else None,
            "ci": [round(ci[0], 4), round(ci[1], 4)] if ci else None, "cut": buckets.get("cut", 0),
            "error": buckets.get("error", 0), "buckets": buckets, "paths": paths}


def _pct(r: Mapping[str, Any]) -> str:
    if not r["judged"]:
        return f"0 judged of {r['n']} (cut {r['cut']}, errors {r['error']})"
    lo, hi = r["ci"]
    return f"{r['ok']}/{r['judged']} [{lo:.0%}–{hi:.0%}]"


def compare_rates(alone: Mapping[str, Any], level: Mapping[str, Any], what: str) -> tuple[str, str, str]:
    """``(verdict, reason, rules_out)`` of one level's rate against the rate alone (module docstring's rule)."""
    said = f"{what} under load {_pct(level)} vs alone {_pct(alone)}"
    if not alone["judged"] or not level["judged"]:
        return Verdict.UNPROVEN, f"{said}: nothing to compare", ""
    a_lo = alone["ci"][0]
    lo, hi = level["ci"]
    if hi < a_lo:
        return Verdict.FAIL, f"{said}: below the alone interval (upper {hi:.1%} < {a_lo:.1%})", ""
    if wilson_interval(0, level["judged"])[1] >= a_lo:
        return Verdict.UNPROVEN, (f"{said}: too few to tell (even 0 of {level['judged']} would reach the alone lower "
                                  f"bound {a_lo:.1%})"), ""
    return Verdict.PASS, f"{said}: within the alone spread", (f"{level['ok']} of {level['judged']} {what}: a {what} "
                                                               f"rate below {lo:.1%} is ruled out at 95% (Wilson)")


def _level_order(label: str) -> tuple[Any, ...]:
    """Natural order of level labels (c2 before c16)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", label))


def _paired(alone: Sequence[Row], level: Sequence[Row], kind: str) -> dict[str, int]:
    """Requests of ``kind`` judged both alone and under load: ``pairs``, ``same`` (the same answer), ``regressed``
    (good alone, judged bad under load), ``improved`` (the reverse)."""
    good = _MEASURES[kind][2]
    by_key = {r["key"]: r for r in alone if r["kind"] == kind}
    out = {"pairs": 0, "same": 0, "regressed": 0, "improved": 0}
    for r in level:
        a = by_key.get(r["key"])
        if r["kind"] != kind or a is None or "cut" in (a["bucket"], r["bucket"]) \
                or "error" in (a["bucket"], r["bucket"]):
            continue
        out["pairs"] += 1
        out["same"] += a["answer"] == r["answer"]
        out["regressed"] += a["bucket"] == good and r["bucket"] != good
        out["improved"] += a["bucket"] != good and r["bucket"] == good
    return out


def judge_run(rows: RunRows) -> Gate | None:
    """The contract's run-dir part on the structured requests of a load (module docstring); None when the run dir
    holds none. Fields the client dropped from them on an HTTP 400 are a fallback (``dropped_note``)."""
    if not rows.structured_rows:
        return None
    groups: dict[str, list[Row]] = {}
    for r in rows.structured_rows:
        groups.setdefault(ALONE if r["level"] is None else str(r["level"]), []).append(r)
    alone = groups.get(ALONE, [])
    levels = sorted((g for g in groups if g != ALONE), key=_level_order)
    kinds = [k for k in STRUCTURED_KINDS if any(r["kind"] == k for r in rows.structured_rows)]
    table: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    verdicts: list[str] = []
    details: list[dict[str, Any]] = []
    bounds: list[str] = []
    reasons: list[str] = []
    for kind in kinds:
        short, what, _ = _MEASURES[kind]
        base = rate(alone, kind)
        parts = [f"{what} alone {_pct(base)}"]
        for name in (ALONE, *levels):
            fig = base if name == ALONE else rate(groups[name], kind)
            entry = table.setdefault(name, {})
            entry[short] = fig
            metrics.update({f"{name}.{short}_{k}": fig[k] for k in ("n", "judged", "ok", "cut", "error")})
            if fig["ci"]:
                metrics.update({f"{name}.{short}_rate": round(fig["rate"], 4), f"{name}.{short}_low": fig["ci"][0],
                                f"{name}.{short}_high": fig["ci"][1]})
            if name == ALONE:
                continue
            verdict, reason, bound = compare_rates(base, fig, what)
            entry[short] = {**fig, "verdict": str(verdict), "reason": reason,
                            **_paired(alone, groups[name], kind)}
            verdicts.append(verdict)
            parts.append(f"{name} {_pct(fig)} {verdict}")
            details.append({"level": name, "measure": what, "verdict": str(verdict), "reason": reason})
            if bound:
                bounds.append(f"{name}: {bound}")
        reasons.append(", ".join(parts))
    for r in rows.structured_rows:  # the first 16 replies that were not valid or correct, with why
        good = _MEASURES[r["kind"]][2]
        if r["bucket"] != good and len([d for d in details if d.get("key")]) < 16:
            details.append({"level": r["level"] or ALONE, "key": r["key"], "kind": r["kind"], "path": r["path"],
                            "bucket": r["bucket"], "why": str(r["why"])[:200]})
    verdict = combine_claims(verdicts) if verdicts else Verdict.UNPROVEN
    paths = sorted({f"{r['kind']} via {r['path']}" for r in rows.structured_rows if r["path"]})
    limitations = [F1_REASON, f"paths: {', '.join(paths)}" if paths else "no request's path was recorded"]
    if not levels:
        limitations.append("no structured request ran under load (only alone)")
        verdict = Verdict.UNPROVEN
    drop = dropped_note(_as_records(rows.structured_rows))
    judged = sum(table[g][_MEASURES[k][0]]["judged"] for g in table for k in kinds)
    gate = Gate(GATE, verdict, "structured requests alone vs under load: " + "; ".join(reasons),
                {"structured_load": table, "f1": Verdict.UNPROVEN.value, **metrics}, details, limitations,
                judged=judged, rules_out="; ".join(bounds))
    return gate.replace(fallbacks=(drop,)) if drop else gate


def _as_records(rows: Sequence[Row]) -> list[ProbeRecord]:
    """The rows as probe records carrying only their dropped fields, for ``dropped_note``."""
    return [{"id": f"{r['level'] or ALONE}/{r['key']}", "reply": {"dropped_fields": r["dropped"]}} for r in rows
            if r["dropped"]]
