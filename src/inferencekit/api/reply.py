"""The reply file: built from one exchange's timed events, every derived field re-derivable.

A reply file (docs/design.md, "Reply file") keeps every SSE ``data:`` payload exactly as received with
its receive time relative to the send (``events``). Everything else — text, reasoning, token ids,
logprobs, usage, finish_reason, TTFT, TTFO, E2EL, ITL — is computed here from those events, after
the stream, so a parser fix can re-derive an old run with ``rederive()``.

Definitions (the bench metric manifest, ``bench/manifest.py``):
- a *token event* carries generated output on any channel: visible content, reasoning, a tool-call
  delta, token ids or logprob entries; usage-only events, role-only events and ``[DONE]`` are not;
- TTFT = first token event; TTFO = first event with visible content; E2EL = last token event;
- ITL = gaps between consecutive token events; an event that says how many tokens it carried
  (token ids, else logprob entries) has its gap split evenly over them.

A stream that finished (``[DONE]``) without one token event is not a successful reply for load metrics: it has
no TTFT and nothing to count. When its usage claims more than one completion token it is a *protocol error*
(the tokens were generated and not streamed; one may be an EOS that is counted and not sent), recorded as the
reply's ``error``. Otherwise — usage absent, 0 or 1, whatever the finish_reason — it may be an honest reply (a
model that emits EOS first streams a role delta and ``finish_reason: "stop"``; a request cut at ``max_tokens: 0``
ends with ``"length"``): the reply records ``no_tokens: true`` and no error. ``bench/metrics.py`` counts it as a
``no tokens`` failure (``NO_TOKENS``), apart from errors, outside every latency and throughput; a judge of what
was answered (the order gate's VACUOUS rule) sees an empty answer, as it is. An event that is not a JSON object
(``data: 5``) is a protocol error naming what it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from inferencekit.api.wire import event_problem
from inferencekit.shapes import ReplyFile, is_ok

__all__ = ["NO_TOKENS", "ReplyFile", "derive", "loads_json", "rederive", "is_ok"]

NO_TOKENS = "no tokens"  # how a level's failure line for a reply with ``no_tokens`` begins (bench/metrics.py)


def loads_json(payload: str | bytes) -> Any:
    """One JSON document from a server. Strict JSON (orjson) first; on failure, Python's ``json``, which also
    reads the ``NaN`` / ``Infinity`` / ``-Infinity`` literals some servers write for a logprob of a masked token
    (strict JSON has no such literal; orjson writes them back as ``null``, which the judges read as
    probability 0). Integers beyond 64 bits become floats on both paths, as orjson reads them.

    Raises:
        ValueError: not JSON even with those literals (``orjson.JSONDecodeError`` is a ``ValueError``).
    """
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        import json

        try:
            return json.loads(payload, parse_int=_int64)
        except (ValueError, RecursionError):
            raise orjson.JSONDecodeError("not JSON", str(payload)[:200], 0) from None


def _int64(text: str) -> int | float:
    """An integer literal as orjson reads one: an int within [-2^63, 2^64 - 1], else a float (so a value that cannot be
    written back, like a server's ``-9223372036854775809``, never reaches a reply file as a Python big int; found by
    the fuzz tests, tests/unit/fuzz)."""
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 64) else float(v)


def _legacy_logprobs(lp: dict[str, Any]) -> list[dict[str, Any]]:
    """/v1/completions ``{tokens, token_logprobs, top_logprobs}`` → chat-shaped entries."""
    toks = lp.get("tokens") or []
    vals = lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or []
    out = []
    for i, tok in enumerate(toks):
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        out.append({"token": tok, "logprob": vals[i] if i < len(vals) else None,
                    "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()]})
    return out


def _entries(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    content = lp.get("content")
    if isinstance(content, list):
        return content
    if isinstance(lp.get("tokens"), list):
        return _legacy_logprobs(lp)
    return None


def _merge_tool_calls(acc: dict[int, dict[str, Any]], deltas: list[Any]) -> None:
    for d in deltas:
        if not isinstance(d, dict):
            continue
        slot = acc.setdefault(int(d.get("index", len(acc))), {"id": None, "type": "function",
                                                             "name": "", "arguments": ""})
        if d.get("id"):
            slot["id"] = d["id"]
        fn = d.get("function") or {}
        name = fn.get("name") or ""
        if name != slot["name"]:  # llama-cpp-python repeats the whole name in every delta of a call
            slot["name"] += name
        slot["arguments"] += fn.get("arguments") or ""


def derive(events: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Derived reply fields from timed payloads.

    Args:
        events: ``[t_ns, payload]`` pairs, ``t_ns`` relative to the send (ns), payload the raw SSE
            data string (or a whole JSON body for a non-streamed reply).

    Returns:
        A dict with ``text``, ``reasoning``, ``tool_calls``, ``token_ids`` (None when the stream
        carried none), ``logprobs`` (None likewise), ``prompt_token_ids``, ``finish_reason``,
        ``usage``, ``server_timings``, ``done``, ``no_tokens``, ``ttft_ms``, ``ttfo_ms``, ``e2el_ms``, ``itl_ms``,
        ``chunks`` (token events), ``n_streamed`` and ``streamed_method``, ``stream_error``
        (an error object sent inside the stream, an unparseable event, an event that is not a JSON object, or
        the first event with a field of a wrong type (``api/wire.py`` ``event_problem``), which is then not read;
        else None), ``empty_error`` (a stream that ended with ``[DONE]`` without a token event while usage claims
        more than one completion token: a protocol error; else None) and ``no_tokens`` (True for such a stream
        whose usage claims at most one token, or none: module docstring). ``stream_error`` and ``empty_error`` are
        not reply-file fields: ``to_reply`` and ``rederive`` turn the first that is set into the reply's ``error``.
    """
    text: list[str] = []
    reasoning: list[str] = []
    tools: dict[int, dict[str, Any]] = {}
    ids: list[int] = []
    saw_ids = False
    lps: list[dict[str, Any]] = []
    saw_lps = False
    usage = finish = timings = prompt_ids = stream_error = None
    done = False
    first_tok = first_vis = last_tok = None
    token_times: list[tuple[int, int | None]] = []
    usage_before: int | None = None  # the last cumulative usage.completion_tokens seen (continuous usage stats)
    indices: set[Any] = set()  # every choice index the stream named; one request asks for one completion (index 0)
    several = False
    for t_ns, payload in events:
        if payload == "[DONE]":
            done = True
            continue
        try:
            obj = loads_json(payload)
        except orjson.JSONDecodeError:
            stream_error = stream_error or f"unparseable event: {payload[:200]}"
            continue
        if not isinstance(obj, dict):
            kind = "null" if obj is None else "boolean" if isinstance(obj, bool) else type(obj).__name__
            stream_error = stream_error or f"protocol error: an event is {kind}, expected an object: {payload[:120]}"
            continue
        problem = event_problem(obj)
        if obj.get("error") is not None and not (problem or "").startswith("error"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else None
            stream_error = stream_error or (msg if isinstance(msg, str) and msg else str(err))[:500]
        if problem:  # a wrong type from the server: the reply is a protocol error naming the field; the event unread
            stream_error = stream_error or f"protocol error: {problem}"
            continue
        cum = None
        if obj.get("usage"):
            usage = obj["usage"]
            ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
            cum = ct if isinstance(ct, int) and not isinstance(ct, bool) else None
        if obj.get("timings"):
            timings = obj["timings"]
        if obj.get("prompt_token_ids") is not None:
            prompt_ids = obj["prompt_token_ids"]
        choices = obj.get("choices") or []
        if isinstance(choices, list):
            indices.update(c.get("index", 0) if isinstance(c, dict) else -1 for c in choices)
            several = several or len(choices) > 1
        ch = choices[0] if choices and isinstance(choices[0], dict) else {}
        if ch.get("finish_reason") is not None:
            finish = ch["finish_reason"]
        if ch.get("prompt_token_ids") is not None:
            prompt_ids = ch["prompt_token_ids"]
        delta = ch.get("delta") if isinstance(ch.get("delta"), dict) else ch.get("message")
        content = rsn = None
        tool_delta = None
        if isinstance(delta, dict):
            content = delta.get("content")
            rsn = delta.get("reasoning_content") or delta.get("reasoning")
            tool_delta = delta.get("tool_calls")
        elif isinstance(ch.get("text"), str):
            content = ch["text"]
        n_here: int | None = None
        ev_ids = ch.get("token_ids")
        entries = _entries(ch)
        if isinstance(entries, list):
            saw_lps = True
            lps.extend(entries)
            if entries:
                n_here = len(entries)
            if ev_ids is None and entries and all(isinstance(e, dict) and "id" in e for e in entries):
                ev_ids = [e["id"] for e in entries]
        if isinstance(ev_ids, list):
            saw_ids = True
            ids.extend(ev_ids)
            if ev_ids:
                n_here = len(ev_ids)
        if n_here is None and cum is not None and (content or rsn or tool_delta):
            # cumulative usage on every event (vLLM's continuous_usage_stats): its step is this event's tokens;
            # usage first seen on a later event (a final total) says nothing about that event alone
            step = cum if not token_times else (cum - usage_before if usage_before is not None else None)
            n_here = step if step is not None and step > 0 else None
        if cum is not None:
            usage_before = cum
        if content:
            text.append(content)
        if rsn:
            reasoning.append(rsn)
        if tool_delta:
            _merge_tool_calls(tools, tool_delta)
        if content or rsn or tool_delta or n_here:
            if first_tok is None:
                first_tok = t_ns
            if content and first_vis is None:
                first_vis = t_ns
            last_tok = t_ns
            token_times.append((t_ns, n_here))
    itl: list[float] = []
    for (t0, _), (t1, n) in zip(token_times, token_times[1:]):
        k = n if n and n > 1 else 1
        itl.extend([(t1 - t0) / 1e6 / k] * k)
    n_streamed, method = (len(ids), "token_ids") if saw_ids else ((len(lps), "logprobs") if saw_lps else (None, None))
    odd_choices = several or bool(indices - {0})
    empty_error = None
    no_tokens = False
    if done and not token_times:
        claimed = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(claimed, int) and claimed > 1:
            # one token may be an EOS that is counted and not streamed; more, with nothing streamed, is not a reply
            empty_error = (f"protocol error: the stream carried no token event but usage claims {claimed} completion "
                           "tokens")
        else:
            no_tokens = True
    return {"odd_choices": sorted(map(str, indices)) if odd_choices else None, **{
        "text": "".join(text), "reasoning": "".join(reasoning),
        "tool_calls": [tools[k] for k in sorted(tools)],
        "token_ids": ids if saw_ids else None, "logprobs": lps if saw_lps else None,
        "prompt_token_ids": prompt_ids, "finish_reason": finish, "usage": usage, "server_timings": timings,
        "done": done, "no_tokens": no_tokens, "stream_error": stream_error, "empty_error": empty_error,
        "ttft_ms": None if first_tok is None else first_tok / 1e6,
        "ttfo_ms": None if first_vis is None else first_vis / 1e6,
        "e2el_ms": None if last_tok is None else last_tok / 1e6,
        "itl_ms": itl, "chunks": len(token_times), "n_streamed": n_streamed, "streamed_method": method,
    }}


def rederive(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply with every derived field recomputed from its ``events`` (a parser fix re-applies)."""
    out = dict(reply)
    derived = derive(reply.get("events") or [])
    stream_error, empty_error = derived.pop("stream_error"), derived.pop("empty_error")
    error = stream_error or empty_error
    out.update(derived)
    if error and not out.get("error"):
        out["error"] = error
    return out
