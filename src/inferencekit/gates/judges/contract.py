"""The API contract, judged by effect: each option must change the reply the way its definition says.

Pure functions over the probe records of one ``probe --contract`` run (kind ``contract``; ``key`` the item,
``meta.variant`` the request's role in it). An item is one of:

- **PASS**: the option's effect was seen (``top_k`` 1 made three differently seeded T=1 samples identical);
- **FAIL**: the server accepted the option (HTTP 200) and the effect was absent (the cheat proxy's
  ``top-p-dropped``: T=1 samples with ``top_p`` 0.001 still differ);
- **NOT RUN**: refused with an HTTP 4xx (compliant: the endpoint says it does not take the option);
- **UNPROVEN**: the replies cannot tell (the control showed no spread), a request failed or could not be built
  (no tokenizer, no context length), or the option is one the engine's dialect is known to drop
  (``api/dialects.py`` ``ignores``; docs/engines.md);
- a **property** (``gates.properties``; no verdict): ``n`` 2 answered with one choice on an engine documented to
  drop ``n`` (``drops-n``), reported beside the gate's verdict.

The validation items (out-of-range values) are findings, never verdicts: what the endpoint did with the value
(4xx refusal, a server error, or accepted). Structured output and tool calls are judged in
``contract_structured.py``; ``judge_probes`` combines both into the gate. The issue's rule (issue 21, after
Kimi's vendor verifier and Artificial Analysis's parameter checks): an item FAILs only when an option is
accepted and not applied.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.judges.contract_structured import structured_items, tool_items
from inferencekit.gates.properties import shown
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, is_ok
from inferencekit.stats import Verdict, combine_claims

__all__ = ["CONTRACT_KIND", "Item", "by_variant", "contract_items", "item", "judge_probes", "max_repeat", "meta_of",
           "refusal", "reply_of"]

CONTRACT_KIND = "contract"
#: a stop item's allowance: tokens generated beyond the streamed ones (the stop string's own tokens, held back)
STOP_SLACK = 4

Item = dict[str, Any]
Variants = Mapping[str, ProbeRecord]


def item(name: str, group: str, verdict: str | None, reason: str, *recs: ProbeRecord | None,
         **evidence: Any) -> Item:
    """One item's row: ``{"item", "group", "verdict" (None for a finding), "reason", "requests", **evidence}``;
    ``requests`` are the probe ids that decided it."""
    return {"item": name, "group": group, "verdict": verdict, "reason": reason,
            "requests": [str(r.get("id")) for r in recs if r], **evidence}


def reply_of(r: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A record's reply, ``{}`` when it has none or a probe log was edited into another type."""
    rep = (r or {}).get("reply")
    return rep if isinstance(rep, dict) else {}


def meta_of(r: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A record's ``meta``, ``{}`` when absent or not an object."""
    meta = (r or {}).get("meta")
    return meta if isinstance(meta, dict) else {}


def by_variant(records: Sequence[ProbeRecord]) -> dict[str, dict[str, ProbeRecord]]:
    """``{item key: {variant: record}}`` of the contract records (the last record of a key and variant wins)."""
    out: dict[str, dict[str, ProbeRecord]] = {}
    for r in records:
        if r.get("kind") == CONTRACT_KIND:
            out.setdefault(str(r.get("key")), {})[str(meta_of(r).get("variant"))] = r
    return out


def _text(r: ProbeRecord | None) -> str | None:
    rep = reply_of(r)
    return rep.get("text") if is_ok(rep) and isinstance(rep.get("text"), str) else None


def refusal(r: ProbeRecord | None) -> tuple[str, str] | None:
    """``(verdict, reason)`` when the request did not yield a usable reply: NOT RUN for an HTTP 4xx (compliant),
    UNPROVEN for anything else (a request of an asked item missing from the log, a server error, a broken stream);
    None for a good reply."""
    if r is None:
        return Verdict.UNPROVEN, "not sent (missing evidence)"
    rep = reply_of(r)
    if is_ok(rep):
        return None
    status, err = rep.get("status"), str(rep.get("error") or "")[:160]
    if isinstance(status, int) and 400 <= status < 500:
        return Verdict.NOT_RUN, f"refused with HTTP {status} (compliant: the endpoint says it does not take it): {err}"
    return Verdict.UNPROVEN, f"no usable reply (status {status}): {err}"


def _known_dropped(option: str, run: ProbeRun) -> str | None:
    ignored = run.header.get("known_ignored_options") or ()
    if option in ignored:
        return (f"{run.header.get('engine') or 'this engine'} is known to accept {option} and drop it "
                "(api/dialects.py ignores; docs/engines.md)")
    return None


def _first_bad(recs: Sequence[ProbeRecord | None]) -> tuple[str, str] | None:
    for r in recs:
        bad = refusal(r)
        if bad is not None:
            return bad
    return None


def _temperature(v: Variants) -> Item:
    greedy, hot = v.get("t0"), [v.get(f"t1-s{s}") for s in (1, 2, 3)]
    bad = _first_bad([greedy, *hot])
    if bad:
        return item("temperature", "sampling", bad[0], bad[1], greedy, *hot)
    g, texts = _text(greedy), [_text(r) for r in hot]
    differ = sum(t != g for t in texts)
    if differ:
        return item("temperature", "sampling", Verdict.PASS, f"{differ} of 3 seeded T=1 replies differ from the T=0 "
                    "reply", greedy, *hot)
    return item("temperature", "sampling", Verdict.FAIL, "three T=1 replies with seeds 1, 2, 3 all equal the T=0 "
                "reply: temperature accepted and not applied", greedy, *hot)


def _collapse(option: str, v: Variants, ctrl: Sequence[ProbeRecord | None], run: ProbeRun) -> Item:
    """top_k 1, top_p 0.001, min_p 1: at T=1 every seed must give the same reply, where the control (the
    temperature item's T=1 replies: the same seeds, the option off) gives different ones."""
    hot = [v.get(f"on-s{s}") for s in (1, 2, 3)]
    bad = _first_bad(hot)
    if bad:
        return item(option, "sampling", bad[0], bad[1], *hot)
    bad = _first_bad(ctrl)
    if bad:
        return item(option, "sampling", Verdict.UNPROVEN, f"the control failed: {bad[1]}", *hot, *ctrl)
    texts, controls = {_text(r) for r in hot}, {_text(r) for r in ctrl}
    if len(controls) == 1:
        return item(option, "sampling", Verdict.UNPROVEN, "the control (T=1, seeds 1, 2, 3, no restriction) gave one "
                    "reply for all three seeds, so a restriction to the top token cannot be told apart", *hot, *ctrl)
    if len(texts) == 1:
        return item(option, "sampling", Verdict.PASS, f"{option} made three seeds give one reply (the control gave "
                    f"{len(controls)} different ones)", *hot, *ctrl)
    known = _known_dropped(option, run)
    return item(option, "sampling", Verdict.UNPROVEN if known else Verdict.FAIL,
                known or f"with {option} three seeds still gave {len(texts)} different replies: accepted and not "
                "applied", *hot, *ctrl)


def _seed(v: Variants, hot: Variants, run: ProbeRun) -> Item:
    """Seed 1 again must repeat the temperature item's seed-1 reply; its seed-2 reply must differ."""
    a, again, b = hot.get("t1-s1"), v.get("s1-again"), hot.get("t1-s2")
    bad = _first_bad([a, again, b])
    if bad:
        return item("seed", "sampling", bad[0], bad[1], a, again, b)
    if _text(a) != _text(again):
        known = _known_dropped("seed", run)
        return item("seed", "sampling", Verdict.UNPROVEN if known else Verdict.FAIL,
                    known or "the same seed at T=1 gave two different replies", a, again, b)
    if _text(a) == _text(b):
        return item("seed", "sampling", Verdict.UNPROVEN, "seeds 1 and 2 gave the same reply too: the seed's effect "
                    "cannot be told from a sampler that ignores temperature", a, again, b)
    return item("seed", "sampling", Verdict.PASS, "the same seed repeated its reply; another seed changed it", a,
                again, b)


_WORD = re.compile(r"[a-z']+")


def max_repeat(text: str) -> int:
    """The count of the most repeated word of ``text`` (lower-cased letters and apostrophes): the repetition a
    frequency or presence penalty must lower."""
    words = Counter(_WORD.findall(text.lower()))
    return max(words.values(), default=0)


def _penalty(name: str, v: Variants, off: ProbeRecord | None, run: ProbeRun) -> Item:
    """A penalty of 2.0 at T=0 on a prompt that asks for repetition must lower the most repeated word's count below
    the control's (no penalty, the frequency_penalty item's ``off``)."""
    on = v.get("on")
    bad = _first_bad([off, on])
    if bad:
        return item(name, "sampling", bad[0], bad[1], off, on)
    t_off, t_on = _text(off) or "", _text(on) or ""
    r_off, r_on = max_repeat(t_off), max_repeat(t_on)
    ev = {"max_repeat_off": r_off, "max_repeat_on": r_on}
    if r_off < 3:
        return item(name, "sampling", Verdict.UNPROVEN, f"the control repeated no word 3 times ({r_off}): nothing for "
                    "a penalty to lower", off, on, **ev)
    if r_on < r_off:
        return item(name, "sampling", Verdict.PASS, f"the most repeated word fell from {r_off} to {r_on}", off, on,
                    **ev)
    if t_on == t_off:
        known = _known_dropped(name, run)
        return item(name, "sampling", Verdict.UNPROVEN if known else Verdict.FAIL,
                    known or f"{name} 2.0 left the T=0 reply unchanged ({r_off} repeats): accepted and not applied",
                    off, on, **ev)
    return item(name, "sampling", Verdict.UNPROVEN, f"the reply changed but its most repeated word did not fall "
                f"({r_off} → {r_on})", off, on, **ev)


def _skipped(v: Variants) -> str:
    """Why an item was not sent (its ``skipped`` record), else "not sent"."""
    return str(meta_of(v.get("skipped")).get("why") or "not sent")


def _logit_bias(v: Variants, base: ProbeRecord | None, run: ProbeRun) -> list[Item]:
    """Ban (-100) the T=0 reply's (``base``) first token, and force (+100) a token the reply does not start with."""
    out = []
    for variant, name in (("ban", "logit_bias_ban"), ("force", "logit_bias_force")):
        r = v.get(variant)
        if r is None:
            out.append(item(name, "sampling", Verdict.UNPROVEN, f"not sent: {_skipped(v)}", base))
            continue
        bad = _first_bad([base, r])
        if bad:
            out.append(item(name, "sampling", bad[0], bad[1], base, r))
            continue
        meta = meta_of(r)
        tid, piece, text = meta.get("token_id"), str(meta.get("piece")), _text(r) or ""
        ev = {"token_id": tid, "piece": piece}
        if variant == "ban":
            if not text.startswith(piece):
                out.append(item(name, "sampling", Verdict.PASS, f"token {tid} ({piece!r}, the T=0 reply's first "
                                f"token) at -100: the reply now starts {text[:24]!r}", base, r, **ev))
                continue
            reason = f"token {tid} ({piece!r}) at -100 still starts the reply: accepted and not applied"
        else:
            if text and not text.replace(piece, "").strip():
                out.append(item(name, "sampling", Verdict.PASS, f"token {tid} ({piece!r}) at +100: the reply is that "
                                f"piece alone ({text[:24]!r})", base, r, **ev))
                continue
            if not (_text(base) or "").startswith(text):
                out.append(item(name, "sampling", Verdict.UNPROVEN, f"token {tid} ({piece!r}) at +100 changed the "
                                f"reply ({text[:40]!r}) but did not force it", base, r, **ev))
                continue
            reason = (f"token {tid} ({piece!r}) at +100 left the T=0 reply unchanged ({text[:40]!r} begins it): "
                      "accepted and not applied")
        known = _known_dropped("logit_bias", run)
        out.append(item(name, "sampling", Verdict.UNPROVEN if known else Verdict.FAIL, known or reason, base, r, **ev))
    return out


def _choices(r: ProbeRecord | None) -> int:
    idx = reply_of(r).get("odd_choices")
    return len(idx) if isinstance(idx, list) and idx else 1


def _n(v: Variants, run: ProbeRun) -> Item:
    r = v.get("n2")
    bad = refusal(r)
    if bad:
        return item("n", "sampling", bad[0], bad[1], r)
    got = _choices(r)
    if got == 2:
        return item("n", "sampling", Verdict.PASS, "n 2 returned two choices", r)
    known = _known_dropped("n", run)
    if known and got == 1:  # shown by effect on an engine documented to drop it: a property, not a verdict
        return item("n", "sampling", None, f"n 2 returned one choice ({known})", r, choices=got, property="drops-n")
    return item("n", "sampling", Verdict.UNPROVEN if known else Verdict.FAIL,
                known or f"n 2 returned {got} choice(s): accepted and not applied", r, choices=got)


def _count(rep: Mapping[str, Any], field: str) -> int | None:
    usage = rep.get("usage")
    u = usage.get(field) if isinstance(usage, dict) else None
    return u if isinstance(u, int) and not isinstance(u, bool) else None


def _streamed(rep: Mapping[str, Any]) -> int | None:
    n = rep.get("n_streamed")
    if isinstance(n, int):
        return n
    c = rep.get("chunks")
    return c if isinstance(c, int) else None


def _stop(v: Variants) -> Item:
    ctrl, r = v.get("control"), v.get("stop")
    stop = str(((r or {}).get("body") or {}).get("stop", [""])[0]) if r else ""
    bad = _first_bad([ctrl, r])
    if bad:
        return item("stop", "sampling", bad[0], bad[1], ctrl, r)
    t_ctrl, text = _text(ctrl) or "", _text(r) or ""
    if stop not in t_ctrl:
        return item("stop", "sampling", Verdict.UNPROVEN, f"the control reply never wrote {stop!r}", ctrl, r)
    rep = reply_of(r)
    mt = int(((r or {}).get("body") or {}).get("max_tokens") or 0)
    used, shown = _count(rep, "completion_tokens"), _streamed(rep)
    ev = {"stop": stop, "finish_reason": rep.get("finish_reason"), "completion_tokens": used, "streamed": shown}
    problems = []
    if stop in text:
        problems.append(f"the reply holds the stop string {stop!r}")
    if rep.get("finish_reason") != "stop":
        problems.append(f"finish_reason {rep.get('finish_reason')!r}, not 'stop'")
    if used is not None and (used >= mt or shown is not None and used > shown + STOP_SLACK):
        problems.append(f"usage counts {used} generated tokens for {shown} streamed (max_tokens {mt}): the engine "
                        "generated past the stop string and the text was cut afterwards")
    if problems:
        return item("stop", "sampling", Verdict.FAIL, "; ".join(problems), ctrl, r, **ev)
    counted = (f"{used} token(s) counted for {shown} streamed" if used is not None else "no usage in the stream, so "
               "whether the engine generated past the stop string is not checked")
    return item("stop", "sampling", Verdict.PASS, f"the reply ends before {stop!r} with finish_reason 'stop'; "
                f"{counted}", ctrl, r, **ev)


def _max_tokens(v: Variants) -> Item:
    r = v.get("cut")
    bad = refusal(r)
    if bad:
        return item("max_tokens", "sampling", bad[0], bad[1], r)
    rep = reply_of(r)
    mt = int(((r or {}).get("body") or {}).get("max_tokens") or 0)
    used, shown, fin = _count(rep, "completion_tokens"), _streamed(rep), rep.get("finish_reason")
    ev = {"max_tokens": mt, "completion_tokens": used, "streamed": shown, "finish_reason": fin}
    if used is None:
        return item("max_tokens", "sampling", Verdict.UNPROVEN, "no usage.completion_tokens to compare", r, **ev)
    if used == mt and fin == "length" and (shown is None or shown <= mt):
        return item("max_tokens", "sampling", Verdict.PASS, f"cut at exactly {mt} tokens, finish_reason 'length'",
                    r, **ev)
    if used < mt and fin == "stop":
        return item("max_tokens", "sampling", Verdict.UNPROVEN, f"the model stopped by itself at {used} < {mt}", r,
                    **ev)
    return item("max_tokens", "sampling", Verdict.FAIL, f"max_tokens {mt}: {used} counted, {shown} streamed, "
                f"finish_reason {fin!r}", r, **ev)


def _validation(v: Variants) -> list[Item]:
    out = []
    for variant, r in sorted(v.items()):
        rep = reply_of(r)
        status = rep.get("status")
        field = str(meta_of(r).get("what") or variant)
        if isinstance(status, int) and 400 <= status < 500:
            how, ok = f"refused with HTTP {status}", True
        elif is_ok(rep):
            how, ok = "accepted (HTTP 200): clamped or ignored", False
        else:
            how, ok = f"server error (status {status}): a bad value answered as the server's fault", False
        out.append(item(f"invalid {field}", "validation", None, f"{how}: {str(rep.get('error') or '')[:120]}".rstrip(
            ": "), r, compliant=ok, status=status))
    return out


def _accounting(v: Variants) -> list[Item]:
    out = []
    for variant, r in sorted(v.items()):
        meta = meta_of(r)
        expected, src = meta.get("expected_prompt_tokens"), meta.get("count_source")
        name = f"prompt_tokens ({variant})"
        bad = refusal(r)
        if bad:
            out.append(item(name, "accounting", bad[0], bad[1], r))
            continue
        got = _count(reply_of(r), "prompt_tokens")
        ev = {"expected": expected, "reported": got, "count_source": src}
        if not isinstance(expected, int):
            out.append(item(name, "accounting", Verdict.UNPROVEN, f"no count of the rendered prompt: "
                            f"{meta.get('count_error') or 'no tokenizer route'}", r, **ev))
        elif got is None:
            out.append(item(name, "accounting", Verdict.UNPROVEN, "the reply reported no usage.prompt_tokens", r, **ev))
        elif got == expected:
            out.append(item(name, "accounting", Verdict.PASS, f"usage.prompt_tokens {got} = the template rendered and "
                            f"counted by {src}", r, **ev))
        else:
            out.append(item(name, "accounting", Verdict.FAIL, f"usage.prompt_tokens {got}, but the template rendered "
                            f"and counted by {src} is {expected} tokens", r, **ev))
    return out


def _context(v: Variants, skipped: str) -> list[Item]:
    out = []
    near, over = v.get("near"), v.get("over")
    for name, r in (("context: at the limit", near), ("context: over the limit", over)):
        meta = meta_of(r)
        if r is None:
            out.append(item(name, "context", Verdict.UNPROVEN, f"not sent: {skipped}"))
            continue
        sent, ctx = meta.get("expected_prompt_tokens"), meta.get("context_tokens")
        rep = reply_of(r)
        got = _count(rep, "prompt_tokens") if is_ok(rep) else None
        ev = {"sent_tokens": sent, "context_tokens": ctx, "reported": got, "status": rep.get("status")}
        if r is near:
            bad = refusal(r)
            if bad:
                out.append(item(name, "context", Verdict.FAIL if bad[0] == Verdict.NOT_RUN else bad[0],
                                f"a prompt of {sent} tokens, under the context of {ctx}, was not served: {bad[1]}", r,
                                **ev))
            elif got == sent:
                out.append(item(name, "context", Verdict.PASS, f"a {sent}-token prompt (context {ctx}) was counted "
                                "whole", r, **ev))
            elif isinstance(got, int) and isinstance(sent, int) and got < sent:
                out.append(item(name, "context", Verdict.FAIL, f"a {sent}-token prompt was reported as {got}: "
                                "silently truncated", r, **ev))
            else:
                out.append(item(name, "context", Verdict.UNPROVEN, f"sent {sent} tokens, reported {got}", r, **ev))
        else:
            status = rep.get("status")
            if isinstance(status, int) and 400 <= status < 500:
                out.append(item(name, "context", Verdict.PASS, f"a {sent}-token prompt over the context of {ctx} was "
                                f"refused with HTTP {status}", r, **ev))
            elif is_ok(rep) or rep.get("error") and status == 200:
                out.append(item(name, "context", Verdict.FAIL, f"a {sent}-token prompt over the context of {ctx} was "
                                f"accepted (reported {got} prompt tokens): silently truncated or shifted", r, **ev))
            else:
                out.append(item(name, "context", Verdict.UNPROVEN, f"status {status}: neither served nor refused with "
                                f"a 4xx: {str(rep.get('error') or '')[:120]}", r, **ev))
    return out


def contract_items(run: ProbeRun) -> list[Item]:
    """Every item of the contract the run asked for (its settings' ``contract.items``; all when absent), from its
    records, in the order of docs/contract.md."""
    v = by_variant(run.records)
    asked = (run.settings.get("contract") or {}).get("items")
    temp = v.get("temperature", {})
    ctrl = [temp.get(f"t1-s{s}") for s in (1, 2, 3)]
    off = v.get("frequency_penalty", {}).get("off")
    groups: list[tuple[str, Callable[[], list[Item]]]] = [
        ("temperature", lambda: [_temperature(temp)]),
        *((name, lambda name=name: [_collapse(name, v.get(name, {}), ctrl, run)])
          for name in ("top_k", "top_p", "min_p")),
        ("seed", lambda: [_seed(v.get("seed", {}), temp, run)]),
        ("penalties", lambda: [_penalty(n, v.get(n, {}), off, run) for n in ("frequency_penalty", "presence_penalty")]),
        ("logit_bias", lambda: _logit_bias(v.get("logit_bias", {}), temp.get("t0"), run)),
        ("n", lambda: [_n(v.get("n", {}), run)]),
        ("stop", lambda: [_stop(v.get("stop", {}))]),
        ("max_tokens", lambda: [_max_tokens(v.get("max_tokens", {}))]),
        ("validation", lambda: _validation(v.get("validation", {}))),
        ("accounting", lambda: _accounting(v.get("accounting", {}))),
        ("context", lambda: _context(v.get("context", {}), _skipped(v.get("context", {})))),
        ("json", lambda: structured_items(v, run.settings)),
        ("tools", lambda: tool_items(v, run.settings, tuple(run.header.get("known_ignored_options") or ()))),
    ]
    return [row for key, make in groups if asked is None or key in asked for row in make()]


def judge_probes(run: ProbeRun) -> Gate:
    """The contract gate: FAIL when an item FAILs (an option accepted and not applied, a count that disagrees, a
    reply outside its schema); PASS when every judged item PASSes; UNPROVEN when one could not be told. Items
    refused with a 4xx are compliant and left out; validation findings never decide."""
    items = contract_items(run)
    judged = [i for i in items if i["verdict"] in (Verdict.PASS, Verdict.FAIL, Verdict.UNPROVEN)]
    if not judged:
        return Gate("contract", Verdict.NOT_RUN, "no contract item could be judged", {"items": items},
                    applicable=bool(run.records))
    verdict = combine_claims(Verdict(i["verdict"]) for i in judged)
    counts = Counter(str(i["verdict"]) for i in items if i["verdict"])
    fails = [i["item"] for i in judged if i["verdict"] == Verdict.FAIL]
    unproven = [i["item"] for i in judged if i["verdict"] == Verdict.UNPROVEN]
    said = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    if fails:
        reason = f"{len(fails)} item(s) FAIL: {', '.join(fails)} ({said})"
    elif unproven:
        reason = f"{len(unproven)} item(s) could not be told: {', '.join(unproven)} ({said})"
    else:
        reason = f"every judged item had its effect ({said})"
    details = [i for i in judged if i["verdict"] != Verdict.PASS]
    by_prop: dict[str, list[Item]] = {}
    for i in items:
        if i.get("property"):
            by_prop.setdefault(str(i["property"]), []).append(i)
    props = [shown(name, f"contract item(s) {', '.join(i['item'] for i in its)}: {its[0]['reason']}",
                   items=[i["item"] for i in its]) for name, its in by_prop.items()]
    return Gate("contract", verdict, reason, {"items": items, "counts": dict(counts)}, details,
                judged=len(judged), rules_out=f"{counts.get('PASS', 0)} option(s) seen to take effect; each judged on "
                "one to three requests, so an option applied only sometimes may pass", properties=props)
