"""Hypothesis strategies for what a hostile or broken server sends: SSE streams of OpenAI-shaped events whose
every field may hold the right type or any JSON value, mixed with lines that are not SSE, cut at any byte."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Any JSON value, big integers and non-finite numbers included (Python's json writes NaN/Infinity literals,
# which some servers send).
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=6)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right type, sometimes any JSON value."""
    return st.one_of(good, good, good, JSON)


def maybe_dict(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict holding any subset of ``fields``."""
    return st.fixed_dictionaries({}, optional=fields)


COUNT = st.integers(min_value=0, max_value=5000)
TOP = st.lists(maybe_dict({"token": field(st.text(max_size=4)), "logprob": field(st.floats(max_value=0) | st.none()),
                           "bytes": field(st.lists(st.integers(0, 255), max_size=4))}), max_size=3)
LOGPROB_ENTRY = maybe_dict({"token": field(st.text(max_size=4)), "logprob": field(st.floats(max_value=0)),
                            "id": field(st.integers(0, 50000)), "top_logprobs": field(TOP)})
TOOL_CALL = maybe_dict({"index": field(st.integers(0, 3)), "id": field(st.text(max_size=6)),
                        "type": field(st.just("function")),
                        "function": field(maybe_dict({"name": field(st.text(max_size=6)),
                                                      "arguments": field(st.text(max_size=12))}))})
DELTA = maybe_dict({"role": field(st.just("assistant")), "content": field(st.text(max_size=8) | st.none()),
                    "reasoning_content": field(st.text(max_size=8)),
                    "tool_calls": field(st.lists(TOOL_CALL, max_size=2))})
CHOICE = maybe_dict({"index": field(st.integers(0, 2)), "delta": field(DELTA), "text": field(st.text(max_size=8)),
                     "finish_reason": field(st.sampled_from(["stop", "length", "tool_calls"]) | st.none()),
                     "logprobs": field(maybe_dict({"content": field(st.lists(LOGPROB_ENTRY, max_size=2)),
                                                   "tokens": field(st.lists(st.text(max_size=3), max_size=2)),
                                                   "token_logprobs": field(st.lists(st.floats(max_value=0),
                                                                                    max_size=2))})),
                     "token_ids": field(st.lists(st.integers(0, 50000), max_size=3))})
USAGE = maybe_dict({"prompt_tokens": field(COUNT), "completion_tokens": field(COUNT), "total_tokens": field(COUNT),
                    "completion_tokens_details": field(maybe_dict({"reasoning_tokens": field(COUNT)}))})
EVENT = maybe_dict({"id": field(st.text(max_size=6)), "object": field(st.just("chat.completion.chunk")),
                    "choices": field(st.lists(CHOICE, max_size=2)), "usage": field(USAGE | st.none()),
                    "timings": field(maybe_dict({"prompt_ms": field(st.floats(0, 1e4)),
                                                 "predicted_n": field(COUNT)})),
                    "error": field(maybe_dict({"message": field(st.text(max_size=10))}))})


@st.composite
def sse_lines(draw: st.DrawFn) -> bytes:
    """One SSE event, a [DONE], a comment, or a line that is not SSE, with its line end."""
    kind = draw(st.sampled_from(["event"] * 6 + ["done", "comment", "foreign", "raw", "field"]))
    end = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r", b"\n"]))
    if kind == "event":
        payload = json.dumps(draw(EVENT), allow_nan=True).encode()
        if draw(st.booleans()) and len(payload) > 2:  # cut inside the JSON sometimes
            payload = payload[:draw(st.integers(1, len(payload) - 1))] if draw(st.integers(0, 9)) == 0 else payload
        return b"data: " + payload + end
    if kind == "done":
        return b"data: [DONE]" + end
    if kind == "comment":
        return b": keep-alive" + end
    if kind == "field":
        return draw(st.sampled_from([b"event: x", b"id: 3", b"retry: 10", b"data:"])) + end
    if kind == "foreign":
        return json.dumps(draw(EVENT)).encode() + end
    return draw(st.binary(max_size=30)) + end


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> list[tuple[int, bytes]]:
    """``data`` cut at arbitrary points into timed chunks (increasing ns times)."""
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=6))))
    pieces, prev = [], 0
    for c in [*cuts, len(data)]:
        if c > prev:
            pieces.append(data[prev:c])
            prev = c
    return [(1_000_000 * (i + 1), p) for i, p in enumerate(pieces)]


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A whole stream's bytes and one way it arrived in chunks."""
    data = b"".join(draw(st.lists(sse_lines(), max_size=6)))
    if draw(st.integers(0, 4)) == 0:
        data += b"data: [DONE]\n\n"
    return data, draw(chunked(data))
