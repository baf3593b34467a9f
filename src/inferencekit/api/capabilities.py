"""Judge what an endpoint honours from recorded probe replies — by effect, never by the absence of an error.

Input: ``{probe name: {variant: reply dict}}`` as collected by ``api/probe.py``. Each judgement is
``{"status", "detail", "requests"}`` where status is one of:

- ``honoured``: the option had its effect (e.g. ``ignore_eos`` ran to max_tokens while the control
  stopped early);
- ``ignored``: accepted without its effect (llama-cpp-python drops ``ignore_eos``: docs/engines.md);
- ``refused``: the server answered with an HTTP error;
- ``unreliable``: it had its effect only sometimes (a seed that repeats back to back but not after
  other traffic: engine state leaks into sampling);
- ``inconclusive``: the replies cannot tell (e.g. the control ran to max_tokens too);
- ``not probed``: no reply was collected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["judge_capabilities", "output_count", "CAP_RE", "STATUSES"]

STATUSES = ("honoured", "ignored", "unreliable", "refused", "inconclusive", "not probed")
CAP_RE = re.compile(r"(?:max(?:imum)?(?: allowed)?|at most|less than or equal to|<=)\D{0,20}(\d+)", re.I)

Replies = Mapping[str, Mapping[str, Any]]


def output_count(r: Mapping[str, Any]) -> int | None:
    """Generated tokens of a reply: usage, else streamed token ids / logprob entries."""
    u = (r.get("usage") or {}).get("completion_tokens")
    if isinstance(u, int):
        return u
    n = r.get("n_streamed")
    return n if isinstance(n, int) else None


def _j(status: str, detail: str, *replies: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"status": status, "detail": detail, "requests": [r.get("request_id") for r in replies if r]}


def _err(r: Mapping[str, Any] | None) -> str | None:
    if r is None:
        return "no reply"
    if r.get("status") != 200 or r.get("error"):
        return f"status {r.get('status')}: {str(r.get('error'))[:200]}"
    return None


def _streaming(p: Replies) -> dict[str, Any]:
    r = p.get("streaming", {}).get("plain")
    if r is None:
        return _j("not probed", "no reply")
    if _err(r):
        return _j("refused", _err(r) or "", r)
    if r.get("chunks", 0) >= 2 and r.get("text"):
        return _j("honoured", f"{r['chunks']} token events, [DONE] {'seen' if r.get('done') else 'missing'}", r)
    return _j("inconclusive", f"{r.get('chunks', 0)} token event(s): the reply may not be streamed token by token", r)


def _usage(p: Replies) -> dict[str, Any]:
    r = p.get("streaming", {}).get("plain")
    if r is None or _err(r):
        return _j("not probed", "the streamed probe failed", r)
    u = r.get("usage")
    if isinstance(u, dict) and isinstance(u.get("completion_tokens"), int):
        return _j("honoured", f"final usage event: completion_tokens {u['completion_tokens']}, prompt_tokens "
                              f"{u.get('prompt_tokens')}", r)
    return _j("ignored", "stream_options.include_usage was sent and accepted, but no usage arrived in the stream", r)


def _exact_length(p: Replies, name: str, field: str, asked: int) -> dict[str, Any]:
    on, off = p.get(name, {}).get("on"), p.get(name, {}).get("off")
    if on is None:
        return _j("not probed", "no reply")
    if _err(on):
        return _j("refused", _err(on) or "", on)
    n_on, n_off = output_count(on), output_count(off) if off and not _err(off) else None
    if n_on is None:
        return _j("inconclusive", f"the reply with {field} carries no token count "
                                  "(no usage, no token ids/logprobs)", on)
    if n_off is not None and n_off >= asked:
        return _j("inconclusive", f"the control without {field} also reached {n_off} tokens, so the effect cannot "
                                  "be seen", on, off)
    if n_on >= asked:
        return _j("honoured", f"{field}: {n_on} tokens (finish {on.get('finish_reason')}) where the control stopped "
                              f"at {n_off}", on, off)
    return _j("ignored", f"{field} was accepted but the reply stopped at {n_on} tokens (finish "
                         f"{on.get('finish_reason')}), short of {asked}", on, off)


def _seed(p: Replies) -> dict[str, Any]:
    """a1 follows other traffic; a2 and a3 repeat it back to back with the same seed; b uses another seed."""
    g = p.get("seed", {})
    a1, a2, a3, b = g.get("a1"), g.get("a2"), g.get("a3"), g.get("b")
    if a1 is None or a2 is None or a3 is None:
        return _j("not probed", "no reply")
    for r in (a1, a2, a3, b):
        if _err(r):
            return _j("refused", _err(r) or "", r)
    t1, t2, t3 = a1.get("text"), a2.get("text"), a3.get("text")
    differs = b is not None and b.get("text") != t2
    if t1 == t2 == t3:
        if differs:
            return _j("honoured", "the same seed gave the same text at T=1 three times; another seed gave a "
                                  "different one", a1, a2, a3, b)
        return _j("inconclusive", "every seed gave the same text at T=1 (temperature may be ignored, or the prompt "
                                  "has one likely answer)", a1, a2, a3, b)
    if t2 == t3:
        return _j("unreliable", "back-to-back repeats with one seed matched, but the first request (after other "
                                "traffic) gave a different text: earlier requests change seeded samples", a1, a2, a3, b)
    return _j("ignored", "the same seed gave different texts at T=1", a1, a2, a3, b)


def _logprobs(p: Replies, asked: int) -> dict[str, Any]:
    g = p.get("logprobs", {})
    r = g.get("top")
    if r is None:
        return _j("not probed", "no reply")
    if _err(r):
        m = CAP_RE.search(str(r.get("error")))
        retry = g.get("retry")
        if retry is not None and not _err(retry):
            entries = retry.get("logprobs") or []
            k = len((entries[0] or {}).get("top_logprobs") or []) if entries else 0
            return {**_j("honoured", f"top_logprobs {asked} refused ({str(r.get('error'))[:120]}); "
                                     f"{k} accepted", r, retry), "cap": k}
        return {**_j("refused", _err(r) or "", r), "cap": int(m.group(1)) if m else None}
    entries = r.get("logprobs") or []
    if not entries:
        return {**_j("ignored", "logprobs were asked for but none came back", r), "cap": None}
    k = len((entries[0] or {}).get("top_logprobs") or [])
    status = "honoured" if k >= asked else "ignored"
    return {**_j(status, f"{len(entries)} logprob entries, {k} alternatives each (asked {asked})", r),
            "cap": f">={asked}" if k >= asked else k}


def _token_ids(p: Replies) -> dict[str, Any]:
    r = p.get("token_ids", {}).get("on")
    if r is None:
        return _j("not probed", "this engine's dialect knows no token-id option")
    if _err(r):
        return _j("refused", _err(r) or "", r)
    ids = r.get("token_ids")
    if isinstance(ids, list) and ids:
        n = output_count(r)
        match = "equals" if (r.get("usage") or {}).get("completion_tokens") in (None, len(ids)) else "differs from"
        return _j("honoured", f"{len(ids)} generated token ids streamed ({match} usage {n})", r)
    if isinstance(r.get("n_streamed"), int):
        return _j("ignored", f"no ids, but {r['n_streamed']} logprob entries count the tokens", r)
    return _j("ignored", "no token ids in the stream", r)


def _tokenize(p: Replies) -> dict[str, Any]:
    r = p.get("tokenize", {}).get("hello")
    if r is None:
        return _j("not probed", "this engine's dialect knows no tokenize endpoint")
    ids = r.get("ids")
    if r.get("error") or not isinstance(ids, list):
        return _j("refused", str(r.get("error"))[:200])
    return {"status": "honoured", "detail": f"{r.get('path')}: 'Hello world' → {ids}", "requests": []}


def judge_capabilities(p: Replies, *, ignore_eos_tokens: int, min_tokens: int, top_logprobs: int) -> dict[str, Any]:
    """One judgement per capability (see the module docstring for the statuses)."""
    return {
        "streaming": _streaming(p),
        "usage_in_stream": _usage(p),
        "ignore_eos": _exact_length(p, "ignore_eos", "ignore_eos", ignore_eos_tokens),
        "min_tokens": _exact_length(p, "min_tokens", "min_tokens", min_tokens),
        "seed": _seed(p),
        "logprobs": _logprobs(p, top_logprobs),
        "token_ids": _token_ids(p),
        "tokenize": _tokenize(p),
    }
