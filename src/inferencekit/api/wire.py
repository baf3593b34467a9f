"""The shape of one server event, checked before anything reads it (pure).

Every byte from a server is untrusted (docs/design.md). ``derive`` (api/reply.py) reads an event only
after ``event_problem`` found nothing wrong with the fields it will read; an event with a wrong type
(``"content": 5``, ``"usage": "lots"``, ``"choices": {}``, ``"index": null``, ...) makes the reply a
recorded protocol error that names the field, and the run goes on. The types are those of the OpenAI
chat and completions streaming APIs as vLLM, SGLang and llama.cpp send them (docs/engines.md). A
``null`` where the API allows one (a finish_reason before the end, a top logprob of a token with
probability 0) is not a wrong type; unknown fields are not read and not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["event_problem"]

_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
_DETAILS = ("completion_tokens_details", "prompt_tokens_details")


def _kind(v: Any) -> str:
    return "null" if v is None else "boolean" if isinstance(v, bool) else type(v).__name__


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _opt(v: Any, ok: Callable[[Any], bool]) -> bool:
    return v is None or ok(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _bad(path: str, v: Any, want: str) -> str:
    return f"{path} is {_kind(v)}, expected {want}"


def _ints(path: str, v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, list):
        return _bad(path, v, "a list of integers")
    for i, x in enumerate(v):
        if not _is_int(x):
            return _bad(f"{path}[{i}]", x, "an integer")
    return None


def _usage(u: Any) -> str | None:
    if not isinstance(u, Mapping):
        return _bad("usage", u, "an object")
    for k in _USAGE_COUNTS:
        v = u.get(k)
        if v is None:
            continue
        if not _is_int(v):
            return _bad(f"usage.{k}", v, "a non-negative integer")
        if v < 0:
            return f"usage.{k} is {v}, expected a non-negative integer"
    for k in _DETAILS:
        d = u.get(k)
        if d is None:
            continue
        if not isinstance(d, Mapping):
            return _bad(f"usage.{k}", d, "an object")
        for name, v in d.items():
            if not _opt(v, _is_int):
                return _bad(f"usage.{k}.{name}", v, "an integer")
    return None


def _top(path: str, tops: Any) -> str | None:
    if tops is None:
        return None
    if not isinstance(tops, list):
        return _bad(path, tops, "a list")
    for j, t in enumerate(tops):
        if not isinstance(t, Mapping):
            return _bad(f"{path}[{j}]", t, "an object")
        if not _opt(t.get("token"), _str):
            return _bad(f"{path}[{j}].token", t.get("token"), "a string")
        if not _opt(t.get("logprob"), _is_num):  # null: probability 0, a legitimate value
            return _bad(f"{path}[{j}].logprob", t.get("logprob"), "a number")
    return None


def _logprobs(path: str, lp: Any) -> str | None:
    if lp is None:
        return None
    if not isinstance(lp, Mapping):
        return _bad(path, lp, "an object")
    content = lp.get("content")
    if content is not None:
        if not isinstance(content, list):
            return _bad(f"{path}.content", content, "a list")
        for i, e in enumerate(content):
            p = f"{path}.content[{i}]"
            if not isinstance(e, Mapping):
                return _bad(p, e, "an object")
            if not _opt(e.get("token"), _str):
                return _bad(f"{p}.token", e.get("token"), "a string")
            if not _opt(e.get("logprob"), _is_num):
                return _bad(f"{p}.logprob", e.get("logprob"), "a number")
            if "id" in e and not _is_int(e["id"]):
                return _bad(f"{p}.id", e["id"], "an integer")
            problem = _top(f"{p}.top_logprobs", e.get("top_logprobs"))
            if problem:
                return problem
        return None
    tokens, values, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")  # /v1/completions
    if tokens is None:
        return None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return _bad(f"{path}.tokens", tokens, "a list of strings")
    if values is not None and (not isinstance(values, list) or not all(_opt(v, _is_num) for v in values)):
        return _bad(f"{path}.token_logprobs", values, "a list of numbers")
    if tops is not None:
        if not isinstance(tops, list):
            return _bad(f"{path}.top_logprobs", tops, "a list")
        for i, t in enumerate(tops):
            if t is not None and (not isinstance(t, Mapping) or not all(_opt(v, _is_num) for v in t.values())):
                return _bad(f"{path}.top_logprobs[{i}]", t, "an object of numbers")
    return None


def _tool_calls(path: str, calls: Any) -> str | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return _bad(path, calls, "a list")
    for i, c in enumerate(calls):
        p = f"{path}[{i}]"
        if not isinstance(c, Mapping):
            return _bad(p, c, "an object")
        if "index" in c and not _is_int(c["index"]):
            return _bad(f"{p}.index", c["index"], "an integer")
        for k in ("id", "type"):
            if not _opt(c.get(k), _str):
                return _bad(f"{p}.{k}", c.get(k), "a string")
        fn = c.get("function")
        if fn is None:
            continue
        if not isinstance(fn, Mapping):
            return _bad(f"{p}.function", fn, "an object")
        for k in ("name", "arguments"):
            if not _opt(fn.get(k), _str):
                return _bad(f"{p}.function.{k}", fn.get(k), "a string")
    return None


def _message(path: str, m: Any) -> str | None:
    if m is None:
        return None
    if not isinstance(m, Mapping):
        return _bad(path, m, "an object")
    for k in ("content", "reasoning_content", "reasoning", "role"):
        if not _opt(m.get(k), _str):
            return _bad(f"{path}.{k}", m.get(k), "a string")
    return _tool_calls(f"{path}.tool_calls", m.get("tool_calls"))


def _error(e: Any) -> str | None:
    if e is None or isinstance(e, str):
        return None
    if not isinstance(e, Mapping):
        return _bad("error", e, "an object or a string")
    if not _opt(e.get("message"), _str):
        return _bad("error.message", e.get("message"), "a string")
    return None


def _choice(i: int, ch: Any) -> str | None:
    p = f"choices[{i}]"
    if not isinstance(ch, Mapping):
        return _bad(p, ch, "an object")
    if "index" in ch and not _is_int(ch["index"]):
        return _bad(f"{p}.index", ch["index"], "an integer")
    if not _opt(ch.get("finish_reason"), _str):
        return _bad(f"{p}.finish_reason", ch.get("finish_reason"), "a string")
    if not _opt(ch.get("text"), _str):
        return _bad(f"{p}.text", ch.get("text"), "a string")
    return (_message(f"{p}.delta", ch.get("delta")) or _message(f"{p}.message", ch.get("message"))
            or _ints(f"{p}.token_ids", ch.get("token_ids"))
            or _ints(f"{p}.prompt_token_ids", ch.get("prompt_token_ids"))
            or _logprobs(f"{p}.logprobs", ch.get("logprobs")))


def event_problem(obj: Mapping[str, Any]) -> str | None:
    """The first field of one parsed event (or non-streamed body) whose type the API does not allow, as
    ``"<path> is <type>, expected <type>"``; None when every field ``derive`` reads has an allowed type.

    Checked: ``usage`` (its counts non-negative integers, its ``*_details`` objects of integers), ``timings``,
    ``prompt_token_ids``, ``choices`` (a list of objects) and in each choice ``index``, ``finish_reason``,
    ``text``, ``delta`` / ``message`` (``content``, ``reasoning_content``, ``reasoning``, ``role``,
    ``tool_calls`` with ``index``, ``id``, ``type``, ``function.name`` / ``.arguments``), ``token_ids``,
    ``prompt_token_ids`` and ``logprobs`` (chat ``content`` entries with their ``top_logprobs``, or the
    completions ``tokens`` / ``token_logprobs`` / ``top_logprobs``), and ``error`` (an object whose ``message``
    is a string or null, or a string)."""
    problem = _error(obj.get("error"))
    if problem:
        return problem
    if obj.get("usage") is not None:
        problem = _usage(obj["usage"])
        if problem:
            return problem
    if not _opt(obj.get("timings"), lambda v: isinstance(v, Mapping)):
        return _bad("timings", obj.get("timings"), "an object")
    problem = _ints("prompt_token_ids", obj.get("prompt_token_ids"))
    if problem:
        return problem
    choices = obj.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return _bad("choices", choices, "a list")
    for i, ch in enumerate(choices):
        problem = _choice(i, ch)
        if problem:
            return problem
    return None
