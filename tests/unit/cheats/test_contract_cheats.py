"""The cheats the contract and accounting checks must catch: dropped sampling fields, an ignored ``stop``, padded
prompt_tokens, a silently truncated prompt, and JSON replies broken under load.

Replies come from ``tests/fixtures/replies/llama-server/*.json`` (llama-server b1-0c1e570 serving
SmolLM2-135M-Instruct Q4_1; ``events`` hold the SSE payloads as received). Expected texts are read off
those payloads by hand: chat_stream_counted streams the pieces "1", ".", " Red", ":", " This", " is",
" the", " most", " obvious", " colour", ",", " but", " it", "'s", " also", " the" (one logprob entry each),
then a finish chunk ("length") and a usage chunk (completion_tokens 16, prompt_tokens 34, total 50);
completion_stream streams " Paris", ".", "\\n", "\\n", "The", " United", " States", " has" and a final
chunk with text "", finish_reason "length" and usage (8 completion, 5 prompt, 13 total).
"""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import orjson
import pytest
from aiohttp import web

from inferencekit.api.reply import derive
from inferencekit.cheats.proxy import CheatProxy
from inferencekit.cheats.state import CheatSet, payloads_to_body
from inferencekit.cheats.transforms import (
    ORDER,
    BreakJson,
    CutAtStop,
    PadPromptTokens,
    ReplyRewriter,
    UsageScale,
    breaks_json,
    drop_fields,
    inflate_tokens,
    parse_cheats,
    prompt_chars,
    stop_strings,
    truncate_middle,
    truncate_prompt,
    wants_json,
)
from tests.paths import FIXTURES

FIX = FIXTURES / "replies" / "llama-server"
NEW = ("top-p-dropped", "logit-bias-dropped", "penalty-dropped", "stop-ignored", "prompt-tokens-inflated",
       "silent-truncate", "json-broken-under-load")
FULL = "1. Red: This is the most obvious colour, but it's also the"  # chat_stream_counted's whole text


def load(name: str) -> dict:
    return json.loads((FIX / f"{name}.json").read_text())


def payloads(name: str) -> list[str]:
    return [p for _, p in load(name)["events"]]


def timed(ps: list[str]) -> list[list]:
    return [[i, p] for i, p in enumerate(ps)]


def contents(ps: list[str]) -> list[str]:
    """The content (chat) or text (completions) each payload carries, "" for none ([DONE] and usage included)."""
    out = []
    for p in ps:
        ch = (json.loads(p).get("choices") or [{}])[0] if p != "[DONE]" else {}
        out.append((ch.get("delta") or {}).get("content") or ch.get("text") or "")
    return out


def cut(stop, name: str = "chat_stream_counted") -> list[str]:
    """``name``'s stream through stop-ignored for a request whose ``stop`` is ``stop``."""
    cs = CheatSet(["stop-ignored"])
    req = {**load(name)["_provenance"]["request"], "stop": stop}
    fwd = cs.rewrite_request(req)
    assert "stop" not in fwd and req["stop"] == stop  # forwarded without it; the client's body untouched
    rw = cs.reply_rewriter(req, fwd)
    assert rw is not None and [type(t) for t in rw.transforms] == [CutAtStop]
    return rw.payloads(payloads(name))


# --- names --------------------------------------------------------------------------------------------------------

def test_parse_cheats_accepts_the_new_names_in_their_phase():
    assert parse_cheats([",".join(reversed(NEW))]) == (
        "top-p-dropped", "logit-bias-dropped", "penalty-dropped", "silent-truncate", "stop-ignored",
        "json-broken-under-load", "prompt-tokens-inflated")
    # request rewrites before the caches, reply rewrites after them
    assert ORDER.index("silent-truncate") < ORDER.index("output-cache") < ORDER.index("stop-ignored")
    assert ORDER.index("stop-ignored") < ORDER.index("spec-inexact")
    assert ORDER.index("usage-deflate") < ORDER.index("prompt-tokens-inflated")
    assert parse_cheats(["usage-inflate,prompt-tokens-inflated"]) == ("usage-inflate", "prompt-tokens-inflated")


# --- the dropping cheats ------------------------------------------------------------------------------------------

BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
        "logit_bias": {"15": -100}, "presence_penalty": 0.5, "frequency_penalty": 0.25, "repeat_penalty": 1.1,
        "repetition_penalty": 1.2, "stop": ["\n"], "seed": 3, "top_k": 40}


@pytest.mark.parametrize("cheat,gone", [
    ("top-p-dropped", {"top_p"}),
    ("logit-bias-dropped", {"logit_bias"}),
    ("penalty-dropped", {"presence_penalty", "frequency_penalty", "repeat_penalty", "repetition_penalty"}),
    ("stop-ignored", {"stop"}),
])
def test_each_request_rewrite_removes_exactly_its_fields(cheat, gone):
    cs = CheatSet([cheat])
    out = cs.rewrite_request(BODY)
    assert set(BODY) - set(out) == gone
    assert out == {k: v for k, v in BODY.items() if k not in gone}  # every other field as sent
    assert "top_p" in BODY and len(BODY) == 12  # the client's body untouched
    plain = {"prompt": "x", "max_tokens": 4}
    assert cs.rewrite_request(plain) is plain  # nothing to drop: the same body


def test_dropping_cheats_combine_and_leave_the_rest():
    cs = CheatSet(["top-p-dropped", "logit-bias-dropped", "penalty-dropped", "temperature-ignored"])
    assert cs.rewrite_request(BODY) == {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16,
                                        "temperature": 0, "stop": ["\n"], "seed": 3, "top_k": 40}
    assert drop_fields({"a": 1}, ("b",)) == {"a": 1}
    # only penalty fields present are removed; a body with just one of them loses just that one
    assert CheatSet(["penalty-dropped"]).rewrite_request({"prompt": "x", "frequency_penalty": 1.0}) == {"prompt": "x"}


# --- stop-ignored -------------------------------------------------------------------------------------------------

def test_stop_strings():
    assert stop_strings({"stop": "\n\n"}) == ("\n\n",)
    assert stop_strings({"stop": ["a", "", 3, "bc"]}) == ("a", "bc")
    assert stop_strings({}) == () and stop_strings({"stop": None}) == ()
    cs = CheatSet(["stop-ignored"])
    assert cs.reply_rewriter({"stop": []}, {}) is None  # nothing to cut at


def test_stop_ignored_cuts_a_non_streamed_reply():
    cs = CheatSet(["stop-ignored"])
    req = {**load("chat_nostream")["_provenance"]["request"], "stop": ["zzz", " obvious"]}
    raw = load("chat_nostream")["events"][0][1].encode()
    out = json.loads(cs.reply_rewriter(req, cs.rewrite_request(req)).body(raw))
    ch = out["choices"][0]
    assert ch["message"]["content"] == "1. Red: This is the most"  # before " obvious"; it and the rest dropped
    assert ch["finish_reason"] == "stop"  # was "length"
    assert out["usage"] == json.loads(raw)["usage"]  # 16 completion tokens: the engine ran on
    # with logprob entries: the tokens that start before the cut are kept ("1" "." " Red" ":" " This" " is" " the"
    # " most": 8 of 16)
    counted = payloads_to_body("chat", [p.encode() for p in payloads("chat_stream_counted")])
    ch = json.loads(ReplyRewriter([CutAtStop((" obvious",))]).body(counted))["choices"][0]
    assert ch["message"]["content"] == "1. Red: This is the most" and len(ch["logprobs"]["content"]) == 8
    assert "".join(e["token"] for e in ch["logprobs"]["content"]) == ch["message"]["content"]


def test_stop_ignored_stream_with_the_stop_string_across_two_chunks():
    out = cut(": Th")  # ":" in one event, " This" in the next
    got = derive(timed(out))
    assert got["text"] == "1. Red" and got["finish_reason"] == "stop"
    assert [e["token"] for e in got["logprobs"]] == ["1", ".", " Red"] and got["n_streamed"] == 3
    assert got["usage"] == {"completion_tokens": 16, "prompt_tokens": 34, "total_tokens": 50,
                            "prompt_tokens_details": {"cached_tokens": 33}}  # as upstream sent it
    texts = contents(out)
    assert texts[1:4] == ["1", ".", " Red"]
    assert texts[4] == ""  # ":" held back: it may start ": Th"
    assert all(t == "" for t in texts[5:])  # nothing after the cut
    for p in out[5:-3]:  # no logprob entries after the cut either (the finish chunk never had any)
        assert json.loads(p)["choices"][0]["logprobs"]["content"] == []
    assert json.loads(out[-3])["choices"][0] == {"finish_reason": "stop", "index": 0, "delta": {}}
    assert out[1:4] == payloads("chat_stream_counted")[1:4]  # events before any hold leave byte for byte
    assert out[-2] == payloads("chat_stream_counted")[-2] and out[-1] == "[DONE]"  # the usage chunk untouched


def test_stop_ignored_stream_keeps_the_start_of_a_piece_the_stop_begins_in():
    got = derive(timed(cut("d: T")))  # starts inside " Red": " Re" is kept, with the " Red" token
    assert got["text"] == "1. Re" and got["finish_reason"] == "stop" and got["n_streamed"] == 3


def test_stop_ignored_stream_releases_held_text_that_is_no_stop():
    # " the" ends in "e", a prefix of "e!": held, then released with the next piece (or the finish chunk at the end)
    out = cut(["e!", "zzz"])
    got = derive(timed(out))
    assert got["text"] == FULL and got["finish_reason"] == "length" and got["n_streamed"] == 16
    texts = contents(out)
    assert texts[7] == "" and texts[8] == " the most"  # " the" held one event, then sent with " most"
    assert texts[16] == "" and texts[17] == " the"  # the last " the" leaves with the finish chunk
    assert [e["token"] for e in json.loads(out[17])["choices"][0]["logprobs"]["content"]] == [" the"]


def test_stop_ignored_completions_stream_and_a_string_stop():
    out = cut("\n\n", "completion_stream")
    got = derive(timed(out))
    assert got["text"] == " Paris." and got["finish_reason"] == "stop"
    assert got["usage"]["completion_tokens"] == 8  # the engine ran on to max_tokens
    assert contents(out)[2:] == [""] * (len(out) - 2)


# --- prompt-tokens-inflated ---------------------------------------------------------------------------------------

def test_prompt_tokens_inflated_adds_three():
    out = ReplyRewriter([PadPromptTokens()]).payloads(payloads("chat_stream_counted"))
    assert out[:-2] == payloads("chat_stream_counted")[:-2]  # only the usage chunk changes
    usage = json.loads(out[-2])["usage"]
    assert usage["prompt_tokens"] == 37 and usage["total_tokens"] == 53 and usage["completion_tokens"] == 16
    cs = CheatSet(["prompt-tokens-inflated", "usage-inflate"])
    rw = cs.reply_rewriter({}, {})
    assert [type(t) for t in rw.transforms] == [UsageScale, PadPromptTokens]
    # usage-inflate 16 → 18 (total +2), then prompt_tokens 34 → 37 (total +3): 50 → 55
    body = json.loads(rw.body(load("chat_nostream")["events"][0][1].encode()))
    assert {k: body["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 37, "completion_tokens": 18, "total_tokens": 55}
    assert inflate_tokens(16) == 18
    no_total = {"usage": {"prompt_tokens": 5}}
    assert PadPromptTokens().on_body(no_total) and no_total == {"usage": {"prompt_tokens": 8}}
    assert not PadPromptTokens().on_event({"choices": []})


# --- silent-truncate ----------------------------------------------------------------------------------------------

def test_truncate_middle_keeps_the_ends():
    text = "".join(chr(ord("a") + i % 26) for i in range(30))
    assert truncate_middle(text, 10) == text[:5] + text[-5:] == "abcdezabcd"
    assert truncate_middle(text, 11) == text[:5] + text[-5:]  # N odd: N // 2 at each end
    assert truncate_middle("short", 10) == "short"
    with pytest.raises(ValueError, match="≥ 2"):
        truncate_middle(text, 1)


def test_silent_truncate_cuts_the_longest_message_only():
    long = "A" * 10 + "m" * 50 + "Z" * 10
    body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": long}],
            "max_tokens": 4}
    assert prompt_chars(body) == 9 + 70
    out = CheatSet(["silent-truncate"], truncate_chars=20).rewrite_request(body)
    assert out["messages"][1]["content"] == "A" * 10 + "Z" * 10  # the first and last 10 characters
    assert out["messages"][0] == body["messages"][0] and out["max_tokens"] == 4
    assert body["messages"][1]["content"] == long  # the client's body untouched
    # a completions prompt; a list content's text part
    assert truncate_prompt({"prompt": "0123456789"}, 4) == {"prompt": "0189"}
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 8 + "y" * 8}]}]}
    assert truncate_prompt(parts, 6)["messages"][0]["content"] == [{"type": "text", "text": "xxxyyy"}]


def test_silent_truncate_leaves_short_prompts_alone():
    cs = CheatSet(["silent-truncate"])  # N = 2000
    body = {"messages": [{"role": "user", "content": "x" * 2000}]}
    assert cs.rewrite_request(body) is body  # exactly N characters: not longer
    assert truncate_prompt({"prompt": [1, 2, 3]}, 2) == {"prompt": [1, 2, 3]}  # token ids: nothing to cut
    # longer in total (24 > 10) but no message longer than N/2 + N/2: nothing to cut
    many = {"messages": [{"role": "user", "content": c * 8} for c in "abc"]}
    assert truncate_prompt(many, 10) is many
    # at N = 6 the first of the equally long messages is cut, the others stay
    assert [m["content"] for m in truncate_prompt(many, 6)["messages"]] == ["aaaaaa", "b" * 8, "c" * 8]
    with pytest.raises(ValueError, match="≥ 2"):
        CheatSet(["silent-truncate"], truncate_chars=1)


# --- json-broken-under-load ---------------------------------------------------------------------------------------

JSON_BODY = {"messages": [{"role": "user", "content": "Colours as JSON"}], "response_format": {"type": "json_object"}}
JSON_REPLY = {"choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": '{"colours": ["red", "blue"]}'}}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 11, "total_tokens": 20}}


def test_breaks_json_decision():
    calls: list[int] = []

    def draw() -> float:
        calls.append(1)
        return 0.0

    assert not breaks_json(1, draw, 1.0) and calls == []  # alone: never, and no draw taken
    assert breaks_json(2, draw, 1.0) and breaks_json(5, draw, 1.0)
    assert not breaks_json(2, lambda: 0.05, 0.05) and breaks_json(2, lambda: 0.0499, 0.05)
    assert wants_json(JSON_BODY) and wants_json({"response_format": {"type": "json_schema", "json_schema": {}}})
    assert not wants_json({"response_format": {"type": "text"}}) and not wants_json({})


def test_json_broken_never_at_in_flight_one_always_at_share_one_under_load():
    cs = CheatSet(["json-broken-under-load"], corrupt_share=1.0)
    assert all(cs.reply_rewriter(JSON_BODY, JSON_BODY, in_flight=1) is None for _ in range(50))
    rw = cs.reply_rewriter(JSON_BODY, JSON_BODY, in_flight=2)
    assert rw is not None and [type(t) for t in rw.transforms] == [BreakJson]
    assert cs.reply_rewriter({"messages": []}, {"messages": []}, in_flight=3) is None  # not a JSON request
    assert dict(cs.stats) == {"json replies": 51, "json replies under load": 1, "json corrupted": 1}
    raw = orjson.dumps(JSON_REPLY)
    out = json.loads(rw.body(raw))
    content = out["choices"][0]["message"]["content"]
    assert json.loads(JSON_REPLY["choices"][0]["message"]["content"]) == {"colours": ["red", "blue"]}
    assert content == '}{"colours": ["red", "blue"]}'
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
    assert out["usage"] == JSON_REPLY["usage"] and out["choices"][0]["finish_reason"] == "stop"


def test_json_broken_draws_are_seeded_at_the_share():
    def verdicts(seed: int) -> list[bool]:
        cs = CheatSet(["json-broken-under-load"], corrupt_seed=seed)
        return [cs.reply_rewriter(JSON_BODY, JSON_BODY, in_flight=2) is not None for _ in range(2000)]

    got = verdicts(7)
    rng = random.Random(7)
    assert got == [rng.random() < 0.05 for _ in range(2000)] and got == verdicts(7)
    assert 0.035 < sum(got) / len(got) < 0.065  # 2000 draws at 0.05: sd 0.0049, so about ±3 sd
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        CheatSet(["json-broken-under-load"], corrupt_share=0.0)
    assert dict(CheatSet(["usage-inflate"]).stats) == {}


def test_json_broken_stream_breaks_the_first_content_piece_and_its_token():
    ps = payloads("chat_stream_counted")
    out = ReplyRewriter([BreakJson()]).payloads(ps)
    assert out[0] == ps[0] and out[2:] == ps[2:]  # the role chunk (content null) and every later event untouched
    got = derive(timed(out))
    assert got["text"] == "}" + FULL
    first = got["logprobs"][0]
    assert first["token"] == "}1" and first["bytes"] == [125, 49] and first["id"] == 33
    legacy = {"choices": [{"index": 0, "text": '{"a"', "logprobs": {"tokens": ["{", '"a"']}}]}
    assert BreakJson().on_event(legacy) and legacy["choices"][0]["logprobs"]["tokens"] == ["}{", '"a"']


# --- the proxy counts what is in flight, over real HTTP -----------------------------------------------------------

def test_the_proxy_breaks_the_json_reply_that_arrives_while_another_is_in_flight():
    """A fake upstream on loopback holds the first request until the second arrives; the proxy (in process, real
    HTTP both ways) sees the second arrive with 2 in flight and, at share 1.0, breaks only that reply."""

    async def go() -> tuple[list[str], dict[str, int], int]:
        arrived: list[asyncio.Event] = [asyncio.Event(), asyncio.Event()]
        seen: list[dict] = []

        async def upstream(request: web.Request) -> web.Response:
            seen.append(await request.json())
            arrived[len(seen) - 1].set()
            await asyncio.wait_for(arrived[1].wait(), 10)  # both in flight before either is answered
            return web.json_response(JSON_REPLY)

        up = web.Application()
        up.router.add_post("/v1/chat/completions", upstream)
        up_runner = web.AppRunner(up)
        await up_runner.setup()
        await web.TCPSite(up_runner, "127.0.0.1", 0).start()
        root = f"http://127.0.0.1:{up_runner.addresses[0][1]}"
        cheats = CheatSet(["json-broken-under-load"], corrupt_share=1.0)
        proxy = CheatProxy(root, cheats)
        await proxy.open()
        runner = web.AppRunner(proxy.application())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
        try:
            async with aiohttp.ClientSession() as s:
                async def post() -> str:
                    async with s.post(url, json=JSON_BODY) as r:
                        assert r.status == 200
                        return str((await r.json())["choices"][0]["message"]["content"])

                first = asyncio.create_task(post())
                await asyncio.wait_for(arrived[0].wait(), 10)
                second = asyncio.create_task(post())
                texts = [await first, await second]
        finally:
            await runner.cleanup()
            await proxy.close()
            await up_runner.cleanup()
        return texts, {**proxy.stats, **cheats.stats}, proxy.in_flight

    texts, stats, in_flight = asyncio.run(go())
    assert json.loads(texts[0]) == {"colours": ["red", "blue"]}  # alone when it arrived
    assert texts[1] == '}{"colours": ["red", "blue"]}'  # the second arrived with 2 in flight
    assert stats["json replies"] == 2 and stats["json replies under load"] == 1 and stats["json corrupted"] == 1
    assert stats["forwarded"] == 2 and in_flight == 0  # counted down when each reply was done


def test_the_pass_through_proxy_counts_generation_requests_apart_from_the_rest():
    """``--cheat none`` in front of a loopback upstream: two chat POSTs and one GET go through untouched;
    ``generation`` counts the POSTs (what benchmarks/verify_modes.py reads), ``requests`` all three."""

    async def go() -> dict[str, int]:
        async def chat(request: web.Request) -> web.Response:
            return web.json_response(JSON_REPLY)

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"data": [{"id": "m"}]})

        up = web.Application()
        up.router.add_post("/v1/chat/completions", chat)
        up.router.add_get("/v1/models", models)
        up_runner = web.AppRunner(up)
        await up_runner.setup()
        await web.TCPSite(up_runner, "127.0.0.1", 0).start()
        proxy = CheatProxy(f"http://127.0.0.1:{up_runner.addresses[0][1]}", CheatSet([]))
        await proxy.open()
        runner = web.AppRunner(proxy.application())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with aiohttp.ClientSession() as s:
                for _ in range(2):
                    async with s.post(f"{base}/v1/chat/completions", json=JSON_BODY) as r:
                        assert (await r.json()) == JSON_REPLY
                async with s.get(f"{base}/v1/models") as r:
                    assert r.status == 200
        finally:
            await runner.cleanup()
            await proxy.close()
            await up_runner.cleanup()
        return dict(proxy.stats)

    stats = asyncio.run(go())
    assert stats["generation"] == 2 and stats["requests"] == 3 and stats["forwarded"] == 3
