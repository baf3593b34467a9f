"""The cheat-proxy's cheats on recorded replies, and its incremental SSE framing.

Payloads come from ``tests/fixtures/replies/llama-server/*.json`` (llama-server b1-0c1e570 serving
SmolLM2-135M-Instruct Q4_1; their ``events`` hold the SSE payloads as received). Three shapes the
fixtures lack were captured the same way on 2026-11-30 and are inlined below: a llama-server
/v1/completions stream echoing Hangul with logprobs (top_logprobs 2), and llama-cpp-python 0.3.36's
legacy completions logprobs, streamed and not. Expected values are read from those payloads and
worked by hand (noted beside each).
"""

import hashlib
import json
import math
import random

import orjson
import pytest

from inferencekit.api.reply import derive
from inferencekit.cheats.proxy import SseFramer, _frame, _split_recorded
from inferencekit.cheats.state import (
    CheatSet,
    NearDuplicateCache,
    OutputCache,
    PrefixCacheSim,
    RecordedReply,
    body_to_payloads,
    payloads_to_body,
    successful_stream,
)
from inferencekit.cheats.transforms import (
    LN4,
    ORDER,
    AlterPiece,
    ClaimFixedLength,
    ReplyRewriter,
    ShiftLogprobs,
    UsageScale,
    VocabMask,
    alter_piece,
    cache_key,
    deflate_tokens,
    generation_kind,
    inflate_tokens,
    is_greedy,
    length_limit,
    parse_cheats,
    prompt_text,
    spec_position,
)
from tests.paths import FIXTURES

FIX = FIXTURES / "replies" / "llama-server"


def load(name: str) -> dict:
    return json.loads((FIX / f"{name}.json").read_text())


def payloads(name: str) -> list[str]:
    return [p for _, p in load(name)["events"]]


def body(name: str) -> bytes:
    return load(name)["events"][0][1].encode()


def timed(ps: list[str]) -> list[list]:
    return [[i, p] for i, p in enumerate(ps)]


def request(name: str) -> dict:
    return dict(load(name)["_provenance"]["request"])


# llama-server b1-0c1e570, /v1/completions, prompt "안녕하세요 세계. 안녕하세요 세계. 안녕하세요 세계.", max_tokens 8,
# temperature 0, stream, logprobs 2: its first two events (the Hangul comes as merged byte-level tokens).
HANGUL_EVENTS = [
    ('{"choices":[{"text":" 안","index":0,"logprobs":{"content":[{"id":226,"token":" 안","bytes":[32,236,149,136],'
    '"logprob":-0.032653868198394775,"top_logprobs":[{"id":226,"token":"�","bytes":[136],'
    '"logprob":-0.032653868198394775},{"id":227,"token":"�","bytes":[137],"logprob":-4.678005218505859}]}]},'
    '"finish_reason":null}],"created":1796038687,"model":"SmolLM2-135M-Instruct-Q4_1",'
    '"system_fingerprint":"b1-0c1e570","object":"text_completion","id":"chatcmpl-IZooSnnEPgKfj6I2rbBerLnviSsxXbPX"}'),
    ('{"choices":[{"text":"녕","index":0,"logprobs":{"content":[{"id":239,"token":"녕","bytes":[235,133,149],'
    '"logprob":-0.0005081990966573358,"top_logprobs":[{"id":239,"token":"�","bytes":[149],'
    '"logprob":-0.0005081990966573358},{"id":233,"token":"�","bytes":[143],"logprob":-9.005036354064941}]}]},'
    '"finish_reason":null}],"created":1796038687,"model":"SmolLM2-135M-Instruct-Q4_1",'
    '"system_fingerprint":"b1-0c1e570","object":"text_completion","id":"chatcmpl-IZooSnnEPgKfj6I2rbBerLnviSsxXbPX"}'),
]

# llama-cpp-python 0.3.36, /v1/completions, prompt "The capital of France is", max_tokens 3, temperature 0,
# logprobs 2: the first streamed event, and the non-streamed body (model path shortened).
LEGACY_EVENT = ('{"id": "cmpl-0464167d", "object": "text_completion", "created": 1796039041, "model": "smollm2", '
                '"choices": [{"text": " Paris", "index": 0, "logprobs": {"tokens": [" Paris"], "text_offset": [24], '
                '"token_logprobs": [-0.264419287443161], "top_logprobs": [{" Paris": -0.264419287443161, '
                '" the": -2.8043324947357178}]}, "finish_reason": null}]}')
LEGACY_BODY = ('{"id":"cmpl-7080f188","object":"text_completion","created":1796039044,"model":"smollm2",'
               '"choices":[{"text":" Paris.\\n","index":0,"logprobs":{"text_offset":[24,30,31],"token_logprobs":'
               '[-0.264419287443161,-0.3762276768684387,-1.025111198425293],"tokens":[" Paris",".","\\n"],'
               '"top_logprobs":[{" Paris":-0.264419287443161," the":-2.8043324947357178},{".":-0.3762276768684387,'
               '",":-1.6338226795196533},{"\\n":-1.025111198425293," The":-2.407881736755371}]},'
               '"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}')


# --- names and requests -------------------------------------------------------------------------------------------

def test_parse_cheats_orders_and_refuses():
    assert parse_cheats(["usage-inflate,output-cache", "temperature-ignored"]) == (
        "temperature-ignored", "output-cache", "usage-inflate")
    assert parse_cheats(["none"]) == () and parse_cheats([]) == ()
    with pytest.raises(ValueError) as e:
        parse_cheats(["output-cahce"])
    assert "'output-cahce'" in str(e.value) and all(n in str(e.value) for n in ORDER)
    with pytest.raises(ValueError, match="cannot be combined"):
        parse_cheats(["none,vocab-mask"])
    with pytest.raises(ValueError, match="contradict"):
        parse_cheats(["usage-inflate", "usage-deflate"])


def test_generation_kind():
    assert generation_kind("/v1/chat/completions") == "chat"
    assert generation_kind("/chat/completions/") == "chat"
    assert generation_kind("/v1/completions") == "completions"
    assert [generation_kind(p) for p in ("/v1/models", "/tokenize", "/health")] == [None, None, None]


def test_prompt_text_key_and_limits():
    req = request("chat_stream")
    assert prompt_text(req) == "user: Name three colours."
    assert prompt_text({"messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}) == \
        "system: Be brief.\nuser: Hi"
    assert prompt_text(request("completion_stream")) == "The capital of France is"
    # stream and stream_options do not change the key; anything else does
    assert cache_key(req) == cache_key(request("chat_nostream"))
    assert cache_key(req) != cache_key({**req, "max_tokens": 17})
    assert is_greedy(req) and is_greedy({}) and not is_greedy({"temperature": 0.7})
    assert length_limit({"max_tokens": 16}) == 16
    assert length_limit({"max_completion_tokens": 8}) == 8 and length_limit({"n_predict": 5}) == 5
    assert length_limit({"n_predict": -1}) is None and length_limit({}) is None


def test_request_rewrites_leave_the_original_alone():
    cs = CheatSet(["temperature-ignored", "seed-ignored", "ignore-eos-dropped"], rng=random.Random(7))
    orig = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 1.0, "seed": 42, "ignore_eos": True,
            "min_tokens": 8, "max_tokens": 16, "top_p": 0.9}
    out = cs.rewrite_request(orig)
    assert out["temperature"] == 0 and out["top_p"] == 0.9 and out["max_tokens"] == 16
    assert "ignore_eos" not in out and "min_tokens" not in out
    assert out["seed"] != 42 and 0 <= out["seed"] < 2 ** 31
    assert orig["temperature"] == 1.0 and orig["seed"] == 42 and orig["ignore_eos"] is True
    assert cs.rewrite_request(orig)["seed"] != out["seed"]  # fresh per request
    assert "seed" not in cs.rewrite_request({"prompt": "x", "temperature": 0})  # no seed: none added
    plain = {"prompt": "x", "temperature": 0}
    assert cs.rewrite_request(plain) is plain  # nothing to change


# --- usage --------------------------------------------------------------------------------------------------------

def test_inflate_and_deflate_by_hand():
    # ⌈1.1n⌉ with at least +1: 16 → 17.6 → 18; 10 → 11 (exact, no float round-up to 12); 1 → 2; 0 → 1
    assert [inflate_tokens(n) for n in (16, 10, 1, 0, 100)] == [18, 11, 2, 1, 110]
    # ⌊0.9n⌋ with at least −1, not below 0: 16 → 14.4 → 14; 10 → 9; 5 → 4; 1 → 0; 0 → 0
    assert [deflate_tokens(n) for n in (16, 10, 5, 1, 0, 3)] == [14, 9, 4, 0, 0, 2]


def test_usage_inflate_on_a_stream_touches_only_the_usage_event():
    ps = payloads("chat_stream")
    out = ReplyRewriter([UsageScale(inflate_tokens)]).payloads(ps)
    assert out[:-2] == ps[:-2] and out[-1] == "[DONE]"
    usage = json.loads(out[-2])["usage"]
    assert usage["completion_tokens"] == 18 and usage["total_tokens"] == 52 and usage["prompt_tokens"] == 34
    assert json.loads(out[-2])["timings"]["predicted_n"] == 16  # the server's own account is left alone


def test_usage_deflate_on_a_json_body():
    out = json.loads(ReplyRewriter([UsageScale(deflate_tokens)]).body(body("chat_nostream")))
    assert out["usage"]["completion_tokens"] == 14 and out["usage"]["total_tokens"] == 48
    assert out["choices"][0]["message"]["content"] == "1. Red: This is the most obvious colour, but it's also the"


# --- ignore-eos-dropped -------------------------------------------------------------------------------------------

def test_ignore_eos_dropped_claims_the_fixed_length():
    req = {**request("chat_stream_natural_stop"), "ignore_eos": True}  # max_tokens 64
    cs = CheatSet(["ignore-eos-dropped"])
    rw = cs.reply_rewriter(req, cs.rewrite_request(req))
    got = derive(timed(rw.payloads(payloads("chat_stream_natural_stop"))))
    assert got["finish_reason"] == "length"
    assert got["usage"]["completion_tokens"] == 64 and got["usage"]["total_tokens"] == 38 + 64
    assert got["n_streamed"] == 17  # what was really streamed
    assert cs.reply_rewriter(request("chat_stream_natural_stop"), request("chat_stream_natural_stop")) is None
    b = json.loads(body("chat_nostream"))
    assert ClaimFixedLength(None).on_body(b) is False  # already "length", no limit to claim: nothing changed


# --- vocab-mask ---------------------------------------------------------------------------------------------------

def test_vocab_mask_strips_hangul_from_text_tokens_and_bytes():
    out = [json.loads(p) for p in ReplyRewriter([VocabMask(0xAC00, 0xD7AF)]).payloads(HANGUL_EVENTS)]
    first, second = out[0]["choices"][0], out[1]["choices"][0]
    assert first["text"] == " " and second["text"] == ""
    e = first["logprobs"]["content"][0]
    assert e["token"] == " " and e["bytes"] == [32] and e["logprob"] == -0.032653868198394775
    # byte-level alternatives holding part of a character keep their bytes
    assert [t["bytes"] for t in e["top_logprobs"]] == [[136], [137]]
    assert second["logprobs"]["content"][0]["bytes"] == []


def test_vocab_mask_other_blocks_and_shapes():
    cs = CheatSet(["vocab-mask"], mask_block="emoji")
    rw = cs.reply_rewriter({}, {})
    b = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok 🙂 done 안녕"}}]}
    assert json.loads(rw.body(orjson.dumps(b)))["choices"][0]["message"]["content"] == "ok  done 안녕"
    legacy = {"choices": [{"text": "日本 ok", "index": 0, "logprobs": {"tokens": ["日本", " ok"],
                                                                       "top_logprobs": [{"日本": -0.1, "x": -2.0}]}}]}
    m = VocabMask(0x4E00, 0x9FFF)
    assert m.on_event(legacy)
    assert legacy["choices"][0]["text"] == " ok" and legacy["choices"][0]["logprobs"]["tokens"] == ["", " ok"]
    assert legacy["choices"][0]["logprobs"]["top_logprobs"] == [{"": -0.1, "x": -2.0}]
    with pytest.raises(ValueError, match="unknown mask block"):
        CheatSet(["vocab-mask"], mask_block="klingon")


# --- logprobs-unnormalised ----------------------------------------------------------------------------------------

def test_logprobs_shifted_by_ln4_chat_shape():
    ps = payloads("chat_stream_counted")
    got = derive(timed(ReplyRewriter([ShiftLogprobs()]).payloads(ps)))["logprobs"]
    want = load("chat_stream_counted")["logprobs"]
    assert LN4 == pytest.approx(1.3862943611198906)
    assert [e["logprob"] for e in got] == pytest.approx([e["logprob"] + LN4 for e in want])
    assert got[0]["logprob"] == pytest.approx(-1.9033092260360718 + 1.3862943611198906)  # "1": still < 0
    assert got[1]["logprob"] == pytest.approx(1.342903751)  # ".": −0.0434 + 1.3863 > 0
    assert got[1]["top_logprobs"][0]["logprob"] == got[1]["logprob"]
    # 13 of the 16 chosen tokens had p > 1/4 (logprob > −1.386; all but "1", " This", " obvious"): now positive
    assert sum(e["logprob"] > 0 for e in got) == 13


def test_logprobs_shifted_legacy_shape():
    out = json.loads(ReplyRewriter([ShiftLogprobs()]).payload(LEGACY_EVENT.encode()))
    lp = out["choices"][0]["logprobs"]
    assert lp["token_logprobs"] == pytest.approx([-0.264419287443161 + LN4])
    assert lp["top_logprobs"][0] == pytest.approx({" Paris": -0.264419287443161 + LN4,
                                                   " the": -2.8043324947357178 + LN4})
    # top-2 probability mass: (e^-0.2644 + e^-2.8043) × 4 = (0.7677 + 0.0606) × 4 ≈ 3.31 > 1
    assert sum(math.exp(v) for v in lp["top_logprobs"][0].values()) == pytest.approx(3.313, abs=1e-3)


# --- spec-inexact and order-dependent -----------------------------------------------------------------------------

def test_alter_piece():
    assert alter_piece(" Red") == " rED" and alter_piece("1") == " the" and alter_piece(".") == " the"
    assert alter_piece(" the") == " THE"


def test_spec_position_rule():
    assert spec_position(bytes([2, 45]) + bytes(30)) == 7   # even first byte: 2 + 45 mod 20
    assert spec_position(bytes([0, 19]) + bytes(30)) == 21  # the latest position
    assert spec_position(bytes([3, 45]) + bytes(30)) is None


def test_alter_piece_streamed_changes_text_and_logprob_entry_together():
    got = derive(timed(ReplyRewriter([AlterPiece(3)]).payloads(payloads("chat_stream_counted"))))
    assert got["text"] == "1. rED: This is the most obvious colour, but it's also the"
    e = got["logprobs"][2]
    # the changed token gets another id (the next one: the proxy has no tokenizer), as a different token would
    assert e["token"] == " rED" and e["bytes"] == [32, 114, 69, 68] and e["id"] == 3951
    assert got["token_ids"][2] == 3951 and got["token_ids"][3] == got["logprobs"][3]["id"]
    assert got["logprobs"][3]["token"] == ":"  # only that position
    # a piece with no letters becomes " the"; a reply shorter than k is unchanged
    first = derive(timed(ReplyRewriter([AlterPiece(1)]).payloads(payloads("chat_stream_counted"))))
    assert first["text"].startswith(" the. Red:") and first["logprobs"][0]["bytes"] == [32, 116, 104, 101]
    ps = payloads("chat_stream")
    assert ReplyRewriter([AlterPiece(40)]).payloads(ps) == ps


def test_alter_piece_non_streamed():
    # no logprob entries: the k-th word piece ("1." " Red:" " This" ...)
    out = json.loads(ReplyRewriter([AlterPiece(2)]).body(body("chat_nostream")))
    assert out["choices"][0]["message"]["content"] == "1. rED: This is the most obvious colour, but it's also the"
    # with entries: the k-th token, text and entry together
    counted = payloads_to_body("chat", [p.encode() for p in payloads("chat_stream_counted")])
    out = json.loads(ReplyRewriter([AlterPiece(5)]).body(counted))
    ch = out["choices"][0]
    assert ch["message"]["content"] == "1. Red: tHIS is the most obvious colour, but it's also the"
    assert ch["logprobs"]["content"][4]["token"] == " tHIS"
    legacy = json.loads(ReplyRewriter([AlterPiece(2)]).body(LEGACY_BODY.encode()))
    assert legacy["choices"][0]["text"] == " Paris the\n"
    assert legacy["choices"][0]["logprobs"]["tokens"] == [" Paris", " the", "\n"]


def _prompt_with(pred) -> dict:
    """A chat body whose prompt's sha256 satisfies ``pred`` (hashes computed here with hashlib)."""
    for i in range(1000):
        b = {"messages": [{"role": "user", "content": f"Question {i}?"}], "temperature": 0, "max_tokens": 16}
        if pred(hashlib.sha256(f"user: Question {i}?".encode()).digest()):
            return b
    raise AssertionError("no prompt found")


def test_spec_inexact_fires_only_on_greedy_even_hash_prompts():
    cs = CheatSet(["spec-inexact"])
    even = _prompt_with(lambda d: d[0] % 2 == 0)
    digest = hashlib.sha256(prompt_text(even).encode()).digest()
    rw = cs.reply_rewriter(even, even)
    assert rw is not None and [type(t) for t in rw.transforms] == [AlterPiece]
    assert rw.transforms[0].k == 2 + digest[1] % 20
    assert cs.reply_rewriter({**even, "temperature": 0.8}, {**even, "temperature": 0.8}) is None
    odd = _prompt_with(lambda d: d[0] % 2 == 1)
    assert cs.reply_rewriter(odd, odd) is None
    # with temperature-ignored in front, a sampled request is greedy by the time spec-inexact looks
    both = CheatSet(["spec-inexact", "temperature-ignored"])
    hot = {**even, "temperature": 1.0}
    assert both.reply_rewriter(hot, both.rewrite_request(hot)) is not None


def test_order_dependent_follows_the_previous_prompt():
    cs = CheatSet(["order-dependent"])
    odd_last = _prompt_with(lambda d: d[-1] & 1)
    even_last = _prompt_with(lambda d: not d[-1] & 1)
    ps = payloads("chat_stream")
    assert cs.reply_rewriter(even_last, even_last) is None  # nothing came before
    rw = cs.reply_rewriter(even_last, even_last)  # after an even-hash prompt: honest
    assert rw is None
    cs.reply_rewriter(odd_last, odd_last)
    rw = cs.reply_rewriter(even_last, even_last)  # after an odd-hash prompt: the first piece changes
    assert derive(timed(rw.payloads(ps)))["text"] == " the. Red: This is the most obvious colour, but it's also the"


def test_cheats_apply_in_the_documented_order():
    cs = CheatSet(["usage-inflate", "ignore-eos-dropped", "vocab-mask", "logprobs-unnormalised"])
    req = {"prompt": "x", "max_tokens": 10, "ignore_eos": True}
    rw = cs.reply_rewriter(req, cs.rewrite_request(req))
    assert [type(t).__name__ for t in rw.transforms] == ["VocabMask", "ShiftLogprobs", "ClaimFixedLength",
                                                         "UsageScale"]
    # ignore-eos-dropped claims 10, then usage-inflate reports ⌈11⌉ = 11
    out = json.loads(rw.payload(b'{"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":1,"total_tokens":5}}'))
    assert out["usage"] == {"completion_tokens": 11, "prompt_tokens": 1, "total_tokens": 12}


def test_rewriter_passes_through_what_it_cannot_read():
    rw = ReplyRewriter([UsageScale(inflate_tokens)])
    assert rw.payload(b"[DONE]") == b"[DONE]"
    assert rw.payload(b"not json {") == b"not json {"
    err = b'{"error":{"code":500,"message":"x","usage":{"completion_tokens":3}}}'
    assert rw.payload(err) is err
    unchanged = payloads("chat_stream")[1].encode()
    assert rw.payload(unchanged) is unchanged  # byte for byte


# --- stored replies and caches ------------------------------------------------------------------------------------

def test_stream_and_body_convert_both_ways():
    streamed = [p.encode() for p in payloads("chat_stream_counted")]
    b = json.loads(payloads_to_body("chat", streamed))
    nostream = json.loads(body("chat_nostream"))  # the same greedy request, not streamed
    assert b["choices"][0]["message"]["content"] == nostream["choices"][0]["message"]["content"]
    assert b["choices"][0]["finish_reason"] == "length" and b["object"] == "chat.completion"
    assert len(b["choices"][0]["logprobs"]["content"]) == 16 and b["usage"]["completion_tokens"] == 16
    assert b["id"] == "chatcmpl-rpi29Cte3yawStIdhUWQ9xJHC0BkTmpa"
    back = derive(timed([p.decode() for p in body_to_payloads("chat", body("chat_nostream"))]))
    assert back["text"] == nostream["choices"][0]["message"]["content"]
    assert back["finish_reason"] == "length" and back["usage"] == nostream["usage"] and back["done"]
    comp = derive(timed([p.decode() for p in body_to_payloads("completions", LEGACY_BODY.encode())]))
    assert comp["text"] == " Paris.\n" and comp["finish_reason"] == "length"
    c = json.loads(payloads_to_body("completions", [p.encode() for p in payloads("completion_stream")]))
    assert c["choices"][0]["text"] == load("completion_stream")["text"] and c["usage"]["completion_tokens"] == 8


def test_successful_stream():
    ps = [p.encode() for p in payloads("chat_stream")]
    assert successful_stream(ps)
    assert not successful_stream(ps[:-1])
    assert not successful_stream([b'{"error":{"message":"boom"}}', b"[DONE]"])


def test_output_cache_ignores_stream_fields():
    c = OutputCache(max_entries=2)
    rec = RecordedReply("chat", body=body("chat_nostream"))
    c.put(request("chat_nostream"), rec)
    assert c.get(request("chat_stream")) is rec  # same request, streamed
    assert c.get({**request("chat_nostream"), "max_tokens": 8}) is None
    c.put({"prompt": "a"}, rec)
    c.put({"prompt": "b"}, rec)
    assert c.get(request("chat_nostream")) is None  # oldest dropped past max_entries


def test_near_duplicate_cache_matches_salted_prompts_only():
    c = NearDuplicateCache()
    rec = RecordedReply("chat", body=body("chat_nostream"))
    long_q = "Explain, in two short paragraphs, why the sky looks blue during the day and red at sunset."
    base = {"messages": [{"role": "user", "content": long_q}], "max_tokens": 16, "temperature": 0}
    c.put(base, rec)
    salted = {**base, "messages": [{"role": "user", "content": "[ik-3f9a] " + long_q}], "stream": True}
    hit = c.get(salted)
    # ratio = 2·M/T: the 96 characters of "user: " + the question all match, T = 96 + 106 → 192/202 ≈ 0.9505
    assert hit is not None and hit[0] is rec and hit[1] == pytest.approx(192 / 202)
    assert c.get({**salted, "max_tokens": 17}) is None  # another field differs
    assert c.get({**base, "messages": [{"role": "user", "content": "Name three colours."}]}) is None


def test_prefix_cache_sim_delays_new_prompts_only():
    p = PrefixCacheSim()
    req = request("chat_stream")  # prompt text "user: Name three colours." = 25 characters
    assert p.delay_s(req) == pytest.approx(0.150 + 0.002 * 25 / 100)
    assert p.delay_s(request("chat_nostream")) == 0.0  # same messages
    assert p.delay_s({**req, "max_tokens": 3}) == 0.0  # other fields do not matter
    assert p.delay_s({"prompt": "x" * 1000}) == pytest.approx(0.170)  # 150 ms + 2 ms × 10


def test_prefix_cache_sim_takes_its_fixed_part_from_prefill_ms():
    cs = CheatSet(["prefix-cache-only"], prefill_ms=900)
    assert cs.prefill_delay_s({"prompt": "x" * 1000}) == pytest.approx(0.920)  # 900 ms + 2 ms × 10
    assert cs.prefill_delay_s({"prompt": "x" * 1000}) == 0.0  # a repeat saves it all
    assert CheatSet(["output-cache"], prefill_ms=900).prefill_delay_s({"prompt": "y"}) == 0.0  # the cheat is off
    for bad in (-1.0, 60_001.0):
        with pytest.raises(ValueError, match="simulated prefill"):
            CheatSet(["prefix-cache-only"], prefill_ms=bad)


def test_cheat_set_lookup_and_record():
    cs = CheatSet(["output-cache", "near-duplicate-cache"])
    assert cs.records and cs.lookup(request("chat_stream")) is None
    rec = RecordedReply("chat", payloads=tuple(p.encode() for p in payloads("chat_stream")))
    cs.record(request("chat_stream"), rec)
    assert cs.lookup(request("chat_nostream")) == ("output-cache", rec)
    salted = {**request("chat_stream"), "messages": [{"role": "user", "content": "Name three colours!"}]}
    assert cs.lookup(salted) == ("near-duplicate-cache", rec)


# --- SSE framing --------------------------------------------------------------------------------------------------

def test_sse_framer_incremental():
    ps = payloads("chat_stream")
    wire = b"".join(_frame(b"", p.encode()) for p in ps)
    f = SseFramer()
    got = []
    for i in range(0, len(wire), 7):  # 7-byte chunks split lines and events anywhere
        got += f.feed(wire[i:i + 7])
    got += f.close()
    assert [p.decode() for _, p in got] == ps and all(o == b"" for o, _ in got)
    assert _split_recorded([wire[:100], wire[100:]]) == [p.encode() for p in ps]


def test_sse_framer_line_ends_comments_multiline_and_leftover():
    f = SseFramer()
    out = f.feed(b": keep-alive\r\n\r\ndata: {\"a\":1}\r")
    out += f.feed(b"\n\r\nevent: x\ndata: one\ndata: two\n\ndata: tail")
    assert out == [(b": keep-alive\n", None), (b"", b'{"a":1}'), (b"event: x\n", b"one\ntwo")]
    assert f.close() == [(b"", b"tail")]
    assert _frame(b"event: x\n", b"one\ntwo") == b"event: x\ndata: one\ndata: two\n\n"
    assert _frame(b": keep-alive\n", None) == b": keep-alive\n\n"
