"""The contract's structured-output and tool-call items, judged by effect (``contract.py`` holds the rest).

- ``response_format`` ``json_object`` / ``json_schema``: every reply must parse (and validate against the sent
  schema, with ``jsonschema``), alone and with other requests in flight; a reply cut by ``max_tokens``
  (finish_reason ``length``) is its own bucket, never counted invalid. The streamed and non-streamed T=0 replies
  are compared and a difference is a finding (engines need not be batch-invariant).
- ``tool_choice``: ``none`` must return no call, ``required`` some call, a named function that function; the
  streamed fragments must reassemble to the non-streamed call. An engine that returns no call at all when one
  is required cannot do the feature with this model (llama-server builds no tool-call grammar for SmolLM2's
  template: docs/engines.md): UNPROVEN, named, never PASS; when the accounting item shows that the served
  template puts no tools into the prompt at all (``renders_tools``: the same messages counted alike with and without
  ``tools``), those items are the property ``template-without-tools`` instead (docs/properties.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from inferencekit.shapes import ProbeRecord, is_ok
from inferencekit.stats import Verdict, rules_out

__all__ = ["REQUIRED_DROPPED", "json_bucket", "renders_tools", "structured_items", "tool_calls_of", "tool_items"]

Item = dict[str, Any]


def _row(name: str, group: str, verdict: str | None, reason: str, recs: Sequence[ProbeRecord | None],
         **evidence: Any) -> Item:
    return {"item": name, "group": group, "verdict": verdict, "reason": reason,
            "requests": [str(r.get("id")) for r in recs if r], **evidence}


def _reply(r: Mapping[str, Any] | None) -> Mapping[str, Any]:
    rep = (r or {}).get("reply")
    return rep if isinstance(rep, dict) else {}


def _is_4xx(status: Any) -> bool:
    return isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 500


def json_bucket(reply: Mapping[str, Any], schema: Mapping[str, Any] | None) -> tuple[str, str]:
    """``(bucket, why)`` of one JSON-mode reply: ``valid``, ``invalid`` (unparsable, or outside ``schema``),
    ``cut`` (finish_reason ``length``: the budget ended the object) or ``error`` (no usable reply)."""
    if not is_ok(reply):
        return "error", f"status {reply.get('status')}: {str(reply.get('error') or '')[:120]}"
    raw = reply.get("text")
    text = raw if isinstance(raw, str) else ""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if reply.get("finish_reason") == "length":
            return "cut", "finish_reason length before the object closed"
        return "invalid", f"not JSON ({e.msg} at {e.pos}): {text[:80]!r}"
    if schema is not None:
        err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(obj))
        if err is not None:
            return "invalid", f"outside the schema: {err.message[:120]}"
    elif not isinstance(obj, dict):
        return "invalid", f"JSON but not an object: {text[:80]!r}"
    return "valid", ""


REQUIRED_DROPPED = "tool_choice=required"  # the name api/dialects.py lists for an engine that forces no call on it


def _names_format(r: ProbeRecord) -> bool:
    """A failed reply whose error text names the field refused (``response_format`` or ``json_schema``)."""
    err = str(_reply(r).get("error") or "")
    return "response_format" in err or "json_schema" in err


def _json_items(fmt: str, v: Mapping[str, ProbeRecord], schema: Mapping[str, Any] | None, load: Any) -> list[Item]:
    out = []
    for regime, label in (("alone", "alone"), ("load", "under load")):
        recs = [r for k, r in sorted(v.items()) if k.startswith(f"{regime}-")]
        name = f"response_format {fmt} ({label})"
        if not recs:
            out.append(_row(name, "structured", Verdict.NOT_RUN, "--json-load 0: not asked", []) if regime == "load"
                       and load == 0 else _row(name, "structured", Verdict.UNPROVEN, "not sent (missing evidence)", []))
            continue
        buckets: dict[str, list[ProbeRecord]] = {}
        whys: dict[str, str] = {}
        for r in recs:
            b, why = json_bucket(_reply(r), schema)
            buckets.setdefault(b, []).append(r)
            if b in ("invalid", "error"):
                whys[str(r.get("id"))] = why
        counts = {b: len(rs) for b, rs in buckets.items()}
        valid, invalid = counts.get("valid", 0), counts.get("invalid", 0)
        refused = [r for r in buckets.get("error", []) if _is_4xx(_reply(r).get("status"))]
        ev = {"buckets": counts, "invalid": dict(list(whys.items())[:5])}
        if invalid:
            out.append(_row(name, "structured", Verdict.FAIL, f"{invalid} of {valid + invalid} replies invalid "
                            f"(first: {next(iter(whys.values()))})", buckets["invalid"][:8], **ev))
        elif refused and len(refused) == len(recs):
            out.append(_row(name, "structured", Verdict.NOT_RUN, f"refused with HTTP "
                            f"{(refused[0].get('reply') or {}).get('status')} (compliant)", refused[:1], **ev,
                            **({"property": "no-json-schema"} if fmt == "json_schema" else {})))
        elif fmt == "json_schema" and counts.get("error") == len(recs) and all(_names_format(r) for r in recs):
            # every request refused by a validation error that names the field, sent as a 5xx (llama-cpp-python's
            # pydantic errors): the engine lacks the feature and claimed nothing (a property, not a verdict)
            first = _reply(recs[0])
            out.append(_row(name, "structured", None, f"every request refused: HTTP {first.get('status')} naming "
                            f"response_format ({str(first.get('error') or '')[:100]})", recs[:1], **ev,
                            property="no-json-schema"))
        elif valid:
            out.append(_row(name, "structured", Verdict.PASS, rules_out(0, valid, "replies invalid",
                                                                        "invalid-reply rate"), recs[:8], **ev))
        else:
            out.append(_row(name, "structured", Verdict.UNPROVEN, f"no reply could be judged ({counts})", recs[:8],
                            **ev))
    alone, plain = v.get("alone-0"), v.get("plain-0")
    if alone and plain and is_ok(_reply(alone)) and is_ok(_reply(plain)):
        same = _reply(alone).get("text") == _reply(plain).get("text")
        out.append(_row(f"response_format {fmt}: streamed vs not", "structured", None,
                        "the same text streamed and not" if same else "streamed and non-streamed T=0 replies differ "
                        "(a finding: engines need not be batch-invariant)", [alone, plain], same=same))
    return out


def tool_calls_of(reply: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``[(function name, parsed arguments)]`` of a reply's tool calls as ``api/reply.py`` derives them (streamed
    fragments merged: ``{"id", "type", "name", "arguments"}``); arguments that are not JSON stay a string."""
    out = []
    calls = reply.get("tool_calls")
    for c in calls if isinstance(calls, list) else []:
        if not isinstance(c, dict):
            continue
        args = c.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append((str(c.get("name")), args))
    return out


def _args_outside(calls: Sequence[tuple[str, Any]], body: Mapping[str, Any]) -> str:
    """Why the first call's arguments do not fit its tool's ``parameters`` schema in ``body`` ("" when they fit or
    the tool is not in the body). A finding, not a verdict: the name is the contract; the arguments are the model's
    (vLLM's guided named tool_choice was seen to give ``"Paris"`` for an object, docs/engines.md)."""
    raw = body.get("tools")
    tools: list[Any] = raw if isinstance(raw, list) else []
    params = {str((t.get("function") or {}).get("name")): (t.get("function") or {}).get("parameters")
              for t in tools if isinstance(t, dict)}
    for name, args in calls:
        schema = params.get(name)
        if isinstance(schema, dict):
            err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(args))
            if err is not None:
                return f"{name}: {err.message[:100]}"
    return ""


def renders_tools(accounting: Mapping[str, ProbeRecord]) -> tuple[bool | None, str]:
    """Whether the served chat template puts the tools into the prompt: the accounting item's ``tools`` and
    ``tools-off`` requests (the same messages with and without ``tools``) answered with different
    ``usage.prompt_tokens`` (True) or equal ones (False: the template renders no tools); None when either is
    missing or reported no count. Also the sentence that says so."""
    counts = []
    for variant in ("tools", "tools-off"):
        rep = _reply(accounting.get(variant))
        usage = rep.get("usage") if is_ok(rep) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        counts.append(n if isinstance(n, int) and not isinstance(n, bool) else None)
    if None in counts:
        return None, ""
    return counts[0] != counts[1], f"prompt_tokens {counts[0]} with the tools, {counts[1]} without"


def _tool_items(v: Mapping[str, ProbeRecord], named: str, rendered: tuple[bool | None, str] = (None, ""),
                ignored: Sequence[str] = ()) -> list[Item]:
    out: list[Item] = []
    recs = {k: v.get(k) for k in ("none", "required", "named", "named-stream")}
    calls = {k: tool_calls_of(_reply(r)) for k, r in recs.items()}

    def bad(k: str) -> Item | None:
        r = recs[k]
        rep = _reply(r)
        if r is None:
            return _row(f"tool_choice {k}", "tools", Verdict.UNPROVEN, "not sent (missing evidence)", [])
        if is_ok(rep):
            return None
        st = rep.get("status")
        verdict = Verdict.NOT_RUN if _is_4xx(st) else Verdict.UNPROVEN
        return _row(f"tool_choice {k}", "tools", verdict, f"status {st}: {str(rep.get('error') or '')[:120]}", [r])

    can_call = bool(calls["named"] or calls["required"])
    for k in ("named", "required", "none"):
        fail = bad(k)
        if fail:
            out.append(fail)
            continue
        got = calls[k]
        names = [n for n, _ in got]
        r = recs[k]
        if k == "none":
            if got:
                out.append(_row("tool_choice none", "tools", Verdict.FAIL, f"tool_choice none returned a call to "
                                f"{names}", [r], calls=names))
            elif can_call:
                out.append(_row("tool_choice none", "tools", Verdict.PASS, "no call, where a forcing tool_choice on "
                                "the same prompt returned one", [r, recs["named"], recs["required"]]))
            else:
                out.append(_row("tool_choice none", "tools", Verdict.UNPROVEN, "no call, but no tool_choice made the "
                                "engine call at all, so 'none' had nothing to prevent", [r]))
        elif not got and k == "required" and REQUIRED_DROPPED in ignored and calls["named"]:
            # text where a named tool_choice on the same prompt called: the engine forces only a named function
            # (llama-cpp-python builds a grammar for a dict tool_choice alone: llama_chat_format.py), a property
            out.append(_row("tool_choice required", "tools", None, "tool_choice required returned text and no call, "
                            f"where tool_choice named returned {[n for n, _ in calls['named']]} (the engine is known "
                            "to accept 'required' and force nothing: api/dialects.py ignores)", [r, recs["named"]],
                            property="ignores-tool-choice-required"))
        elif not got:
            out.append(_row(f"tool_choice {k}", "tools", Verdict.UNPROVEN, f"tool_choice {k} returned text and no call "
                            "(the engine may build no tool-call grammar for this model's template: it cannot do the "
                            "feature here)", [r]))
        elif k == "named" and any(n != named for n in names):
            out.append(_row("tool_choice named", "tools", Verdict.FAIL, f"asked for {named}, got a call to {names}",
                            [r], calls=names))
        else:
            bad_args = _args_outside(got, (r or {}).get("body") or {})
            said = f"; arguments outside the tool's schema (a finding): {bad_args}" if bad_args else ""
            out.append(_row(f"tool_choice {k}", "tools", Verdict.PASS, f"called {names}{said}", [r], calls=names,
                            arguments_valid=not bad_args))
    fail = bad("named-stream")
    if not can_call and rendered[0] is False:
        # no forcing tool_choice made a call, and the template never showed the model the tools: the engine cannot
        # do the feature with this model's template (a property, not a verdict)
        why = f"the chat template renders no tools ({rendered[1]}), and no forcing tool_choice returned a call"
        answered = {f"tool_choice {k}" for k in ("named", "required", "none") if is_ok(_reply(recs[k]))}
        out = [{**row, "verdict": None, "reason": f"{row['reason']} ({why})", "property": "template-without-tools"}
               if row["verdict"] == Verdict.UNPROVEN and row["item"] in answered else row for row in out]
        if fail is None and not calls["named-stream"]:
            out.append(_row("tool calls streamed vs not", "tools", None, f"no call to compare ({why})",
                            [recs["named"], recs["named-stream"]], property="template-without-tools"))
            return out
    if fail:
        out.append({**fail, "item": "tool calls streamed vs not"})
    elif not calls["named"] or not calls["named-stream"]:
        out.append(_row("tool calls streamed vs not", "tools", Verdict.UNPROVEN, "no call to compare (streamed "
                        f"{len(calls['named-stream'])}, non-streamed {len(calls['named'])})",
                        [recs["named"], recs["named-stream"]]))
    elif calls["named"] == calls["named-stream"]:
        out.append(_row("tool calls streamed vs not", "tools", Verdict.PASS, "the streamed fragments reassemble to "
                        "the non-streamed call", [recs["named"], recs["named-stream"]]))
    else:
        out.append(_row("tool calls streamed vs not", "tools", Verdict.FAIL, f"streamed {calls['named-stream']} vs "
                        f"non-streamed {calls['named']}", [recs["named"], recs["named-stream"]]))
    return out


def structured_items(v: Mapping[str, Mapping[str, ProbeRecord]], settings: Mapping[str, Any]) -> list[Item]:
    """The structured-output items from ``{item key: {variant: record}}`` and the run's settings (``contract.schema``:
    the JSON schema sent)."""
    c = settings.get("contract") or {}
    return [*_json_items("json_object", v.get("json_object", {}), None, c.get("json_load")),
            *_json_items("json_schema", v.get("json_schema", {}), c.get("schema"), c.get("json_load"))]


def tool_items(v: Mapping[str, Mapping[str, ProbeRecord]], settings: Mapping[str, Any],
               ignored: Sequence[str] = ()) -> list[Item]:
    """The tool_choice items; ``contract.named_tool`` of the settings is the function a named tool_choice asks for;
    ``ignored``: the options the engine is known to accept and drop (the header's ``known_ignored_options``)."""
    return _tool_items(v.get("tool_choice", {}), str((settings.get("contract") or {}).get("named_tool")),
                       renders_tools(v.get("accounting", {})), ignored)
