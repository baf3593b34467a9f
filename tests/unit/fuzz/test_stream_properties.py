"""Any server bytes give a reply dict, never another exception (issue 19): the SSE splitter, the derivation of
a reply from events, and the metrics of a level made of such replies. Seeded (conftest.py); ``make fuzz`` runs
100,000 cases of each."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import event, given
from hypothesis import strategies as st

from inferencekit.api.client import Exchange
from inferencekit.api.reply import rederive
from inferencekit.api.sse import split_events
from inferencekit.bench.metrics import level_metrics
from tests.unit.fuzz.strategies import EVENT, JSON, chunked, streams

RAW_CHUNKS = st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=64)), max_size=8)


@given(RAW_CHUNKS)
def test_split_events_takes_any_bytes(chunks: list[tuple[int, bytes]]) -> None:
    foreign: list[bytes] = []
    events, unterminated = split_events(chunks, foreign)
    assert isinstance(unterminated, bool)
    times = {t for t, _ in chunks}
    assert all(isinstance(p, str) and t in times for t, p in events)
    assert all(isinstance(line, bytes) and line for line in foreign)


@given(st.data())
def test_split_events_does_not_depend_on_where_the_network_cut_the_stream(data: st.DataObject) -> None:
    raw, chunks = data.draw(streams())
    whole_foreign: list[bytes] = []
    cut_foreign: list[bytes] = []
    whole, whole_open = split_events([(1, raw)], whole_foreign)
    cut, cut_open = split_events(chunks, cut_foreign)
    assert [p for _, p in cut] == [p for _, p in whole]
    assert cut_foreign == whole_foreign and cut_open == whole_open


def _exchange(chunks: list[tuple[int, bytes]], status: int = 200, content_type: str = "text/event-stream"
              ) -> Exchange:
    return Exchange(request_id="r", path="/v1/chat/completions", body={"stream": True}, sent_ns=0, status=status,
                    content_type=content_type, chunks=list(chunks))


def _check_reply(reply: dict[str, Any]) -> None:
    """What every reply file must hold, whatever came in."""
    assert isinstance(reply.get("error"), (str, type(None)))
    assert isinstance(reply["text"], str)
    assert reply["n_streamed"] is None or (isinstance(reply["n_streamed"], int) and reply["n_streamed"] >= 0)
    assert isinstance(reply["done"], bool)
    assert reply["usage"] is None or isinstance(reply["usage"], dict)
    assert reply["token_ids"] is None or all(isinstance(i, int) for i in reply["token_ids"])
    assert reply["tool_calls"] is None or isinstance(reply["tool_calls"], list)
    for k in ("ttft_ms", "e2el_ms"):
        assert reply[k] is None or isinstance(reply[k], float), (k, reply[k])
    orjson.dumps(reply, option=orjson.OPT_NON_STR_KEYS)  # what rundir.write_json does: it must not raise
    again = rederive(reply)  # a re-derivation from the recorded events reads the same
    assert again["text"] == reply["text"] and again["n_streamed"] == reply["n_streamed"]


@given(st.data())
def test_any_stream_gives_a_reply(data: st.DataObject) -> None:
    _, chunks = data.draw(streams())
    status = data.draw(st.sampled_from([200] * 8 + [400, 500, 0]))
    ctype = data.draw(st.sampled_from(["text/event-stream"] * 6 + ["application/json", "text/html", ""]))
    reply = _exchange(chunks, status, ctype).to_reply(id="x")
    event("reply with error" if reply.get("error") else "reply ok")
    _check_reply(reply)


@given(st.data())
def test_any_whole_json_body_gives_a_reply(data: st.DataObject) -> None:
    body = data.draw(st.one_of(EVENT, JSON))
    raw = json.dumps(body, allow_nan=True).encode()
    chunks = data.draw(chunked(raw))
    _check_reply(_exchange(chunks, 200, "application/json").to_reply(id="x"))


@given(st.data())
def test_level_metrics_take_any_replies(data: st.DataObject) -> None:
    replies = []
    for i in range(data.draw(st.integers(0, 4))):
        _, chunks = data.draw(streams())
        reply = _exchange(chunks).to_reply(id=f"p{i}", scheduled_ns=data.draw(st.none() | st.integers(0, 10**9)))
        reply["_key"] = f"p{i}"
        replies.append(reply)
    retok = data.draw(st.none() | st.dictionaries(st.sampled_from([f"p{i}" for i in range(4)]),
                                                  st.integers(0, 4000)))
    slo = data.draw(st.none() | st.fixed_dictionaries({}, optional={"ttft_ms": st.floats(0, 1e4),
                                                                    "tpot_ms": st.floats(0, 1e3)}))
    m = level_metrics(replies, slo=slo, retokenized=retok, open_loop=data.draw(st.booleans()))
    assert m["requests"]["total"] == len(replies)
    assert 0 <= m["requests"]["completed"] <= len(replies)
    orjson.dumps(m, option=orjson.OPT_NON_STR_KEYS)


def test_found_by_fuzzing_a_64_bit_overflow_beside_a_nan_literal_is_written():
    # make fuzz, 2026-12-02: a NaN/Infinity literal sends the event to Python's json, which kept
    # -9223372036854775809 as a big int; orjson then refused to write the reply file ("Integer exceeds 64-bit range")
    raw = (b'data: {"object": "chat.completion.chunk", "id": "", "timings": {}, '
           b'"usage": {"": Infinity, "0": -9223372036854775809}}\n\ndata: [DONE]\n\n')
    reply = _exchange([(1_000_000, raw)]).to_reply(id="x")
    _check_reply(reply)
    body = _exchange([(1, b'{"timings": {"": Infinity, "0": -9223372036854775809, "1": 18446744073709551615}}')],
                     200, "application/json").to_reply(id="y")
    _check_reply(body)
    assert body["server_timings"]["0"] == float(-9223372036854775809) and body["server_timings"]["1"] == 2**64 - 1
