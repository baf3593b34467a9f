"""``inferencekit cheat-proxy`` as a real subprocess (``running_proxy``) in front of a real llama-server.

Each test sends the same request straight to the engine and through the proxy (inferencekit's own
Client, replies read with ``Exchange.to_reply()``) and checks the one difference the cheat must make.
Every request is short (max_tokens ≤ 32) and greedy unless the cheat is about sampling.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from inferencekit.api.client import Client, Exchange
from inferencekit.api.endpoint import Endpoint
from inferencekit.cheats import ORDER, running_proxy
from inferencekit.engines.launcher import free_port
from inferencekit.errors import OpError
from tests.fault_server import fault_server

pytestmark = [pytest.mark.engine, pytest.mark.llama_server]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
COLOURS = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16, "temperature": 0,
           "stream": True, "stream_options": {"include_usage": True}}
HANGUL = "안녕하세요 세계. 안녕하세요 세계. 안녕하세요 세계."


def post(url: str, body: dict[str, Any], path: str = CHAT) -> tuple[Exchange, dict[str, Any]]:
    """One POST through inferencekit's client: the exchange (raw chunks) and its reply dict."""

    async def go() -> Exchange:
        async with Client(Endpoint.parse(url), timeout_s=120) as c:
            return await c.post(path, body)

    ex = asyncio.run(go())
    return ex, ex.to_reply()


def get(url: str, path: str) -> Exchange:
    async def go() -> Exchange:
        async with Client(Endpoint.parse(url), timeout_s=30) as c:
            return await c.get(path)

    return asyncio.run(go())


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["status"] == 200 and "error" not in reply, reply.get("error")
    return reply


def payloads(reply: dict[str, Any]) -> list[str]:
    return [p for _, p in reply["events"]]


def has_hangul(text: str) -> bool:
    return any(0xAC00 <= ord(c) <= 0xD7AF for c in text)


def chat(content: str, **kw: Any) -> dict[str, Any]:
    return {**COLOURS, "messages": [{"role": "user", "content": content}], **kw}


def digest(content: str) -> bytes:
    """sha256 of a one-message chat prompt's text as the proxy hashes it ("role: content")."""
    return hashlib.sha256(f"user: {content}".encode()).digest()


def test_pass_through_leaves_replies_and_other_paths_alone(llama_server_engine) -> None:
    url = llama_server_engine.url
    direct = ok(post(url, COLOURS)[1])
    with running_proxy(url + "/v1", []) as proxy:
        via = ok(post(proxy, COLOURS)[1])
        models = get(proxy, "/v1/models")
        health = get(proxy, "/health")
        tok = post(proxy, {"content": "Hello world"}, "/tokenize")[0]
        missing = get(proxy, "/no/such/path")
    assert via["text"] == direct["text"] and via["text"].startswith("1. Red")
    assert via["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"] == 16
    assert via["finish_reason"] == "length" and via["done"]
    assert models.status == 200 and models.json()["data"][0]["id"] == get(url, "/v1/models").json()["data"][0]["id"]
    assert health.status == 200 and health.json() == {"status": "ok"}
    assert tok.status == 200 and tok.json() == post(url, {"content": "Hello world"}, "/tokenize")[0].json()
    assert missing.status == 404  # the upstream's own status comes back


@contextlib.contextmanager
def echo_upstream() -> Iterator[str]:
    """A loopback HTTP server that answers any method and path with what it received, as JSON."""

    class Echo(BaseHTTPRequestHandler):
        def _echo(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            out = json.dumps({"method": self.command, "path": self.path, "body": self.rfile.read(n).decode(),
                              "authorization": self.headers.get("Authorization")}).encode()
            self.send_response(201 if self.command == "PUT" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Upstream", "echo")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PUT = do_DELETE = _echo

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        t.join(10)


def test_every_method_path_query_and_authorization_pass_through(monkeypatch) -> None:
    monkeypatch.setenv("IK_CHEAT_TEST_KEY", "sk-test-cheat-123")
    with echo_upstream() as up, running_proxy(up + "/v1", ["usage-inflate"]) as proxy:

        async def go() -> tuple[Exchange, Exchange]:
            async with Client(Endpoint.parse(proxy, "IK_CHEAT_TEST_KEY"), timeout_s=30) as c:
                return await c.get("/extras/tokenize?x=1"), await c.post(CHAT, {"not": "a chat"})

        got, posted = asyncio.run(go())
        req = urllib.request.Request(proxy + "/props", data=b"raw body", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            put = (r.status, r.headers["X-Upstream"], json.loads(r.read()))
        with urllib.request.urlopen(proxy + "/a%2Fb/c?y=%2F&z=a+b", timeout=30) as r:
            raw_path = json.loads(r.read())["path"]
    # the upstream echoed the key it received; the client scrubs a registered key from every reply (redact.py),
    # so "<redacted>" here is the key having passed through the proxy
    assert got.status == 200 and got.json() == {"method": "GET", "path": "/extras/tokenize?x=1", "body": "",
                                                "authorization": "Bearer <redacted>"}
    assert raw_path == "/a%2Fb/c?y=%2F&z=a+b"  # path and query exactly as sent
    # a chat path whose reply is not a completion: forwarded and returned untouched
    assert posted.json() == {"method": "POST", "path": CHAT, "body": '{"not":"a chat"}',
                             "authorization": "Bearer <redacted>"}
    assert put == (201, "echo", {"method": "PUT", "path": "/props", "body": "raw body", "authorization": None})


@pytest.mark.parametrize("cheats", [[], ["usage-inflate", "vocab-mask"]])
def test_odd_framing_and_a_broken_upstream_stream(cheats: list[str]) -> None:
    """The fault server's stream has a comment, an event split across writes and CRLF line ends; its
    "cut" fault closes the connection inside an event. Relayed raw or rewritten event by event."""
    body = {"model": "fault-model", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with fault_server() as (up, _), running_proxy(up, cheats) as proxy:
        good = post(proxy, body)[1]
        cut = post(proxy, {**body, "fault": "cut"})[1]
        after = post(proxy, body)[1]
    assert ok(good)["text"] == "Hello" and good["done"] and good["finish_reason"] == "stop"
    assert good["usage"]["completion_tokens"] == (3 if cheats else 2)  # ⌈2.2⌉ = 3
    assert cut["status"] == 200 and cut["text"] == "Hel" and not cut["done"]
    assert cut["error"].startswith("broken stream")  # the client sees the upstream's break, not a clean end
    assert ok(after)["text"] == "Hello"  # the proxy carries on


def test_output_cache_replays_a_repeat_without_the_engine(llama_server_engine) -> None:
    body = chat("Name three fruits.")
    with running_proxy(llama_server_engine.url, ["output-cache"]) as proxy:
        first = ok(post(proxy, body)[1])
        ex, again = post(proxy, body)
        plain = ok(post(proxy, {k: v for k, v in body.items() if k not in ("stream", "stream_options")})[1])
    ok(again)
    assert payloads(again) == payloads(first)  # same id, same server timings: the engine did nothing
    assert again["server_timings"] == first["server_timings"]
    assert len(ex.chunks) == 1  # every event in one write
    assert plain["text"] == first["text"] and plain["server_timings"] == first["server_timings"]


def test_near_duplicate_cache_serves_a_salted_prompt(llama_server_engine) -> None:
    q = "Explain, in two short paragraphs, why the sky looks blue during the day and red at sunset."
    with running_proxy(llama_server_engine.url, ["near-duplicate-cache"]) as proxy:
        first = ok(post(proxy, chat(q))[1])
        salted = ok(post(proxy, chat("[ik-3f9a] " + q))[1])
        other = ok(post(proxy, chat("Name three colours."))[1])
    assert payloads(salted) == payloads(first)
    assert other["text"] != first["text"]


def test_prefix_cache_only_delays_first_sight_of_a_prompt(llama_server_engine) -> None:
    body = chat("Name three rivers.", max_tokens=8)
    with running_proxy(llama_server_engine.url, ["prefix-cache-only"]) as proxy:
        cold = ok(post(proxy, body)[1])
        warm = min((ok(post(proxy, body)[1]) for _ in range(2)), key=lambda r: r["ttft_ms"])
    # cold waits 150 ms + 2 ms per 100 characters of "user: Name three rivers." (24) ≈ 150.5 ms first
    assert cold["ttft_ms"] >= 150.0
    assert warm["ttft_ms"] < cold["ttft_ms"] - 100.0  # the better of two repeats, against load noise
    assert warm["text"] == cold["text"] and warm["server_timings"] != cold["server_timings"]  # really generated
    with running_proxy(llama_server_engine.url, ["prefix-cache-only"], prefill_ms=600) as proxy:  # --prefill-ms
        slow = ok(post(proxy, body)[1])
    assert slow["ttft_ms"] >= 600.0


def test_usage_inflate_reports_eleven_tenths(llama_server_engine) -> None:
    body = {**COLOURS, "ignore_eos": True}
    direct = ok(post(llama_server_engine.url, body)[1])
    with running_proxy(llama_server_engine.url, ["usage-inflate"]) as proxy:
        via = ok(post(proxy, body)[1])
    n = direct["usage"]["completion_tokens"]
    assert n == 16 and via["usage"]["completion_tokens"] == 18  # ⌈17.6⌉
    assert via["usage"]["total_tokens"] == direct["usage"]["total_tokens"] + 2
    assert via["text"] == direct["text"]


def test_usage_deflate_reports_nine_tenths(llama_server_engine) -> None:
    with running_proxy(llama_server_engine.url, ["usage-deflate"]) as proxy:
        via = ok(post(proxy, {**COLOURS, "ignore_eos": True})[1])
    assert via["usage"]["completion_tokens"] == 14  # ⌊14.4⌋


def test_ignore_eos_dropped_claims_max_tokens_it_did_not_produce(llama_server_engine) -> None:
    body = chat("Reply with just the word OK.", max_tokens=32, ignore_eos=True, logprobs=True, top_logprobs=1)
    direct = ok(post(llama_server_engine.url, body)[1])
    with running_proxy(llama_server_engine.url, ["ignore-eos-dropped"]) as proxy:
        via = ok(post(proxy, body)[1])
    assert direct["n_streamed"] == 32 and direct["finish_reason"] == "length"
    assert via["finish_reason"] == "length" and via["usage"]["completion_tokens"] == 32
    assert via["n_streamed"] < 32  # the engine stopped at its end-of-sequence token
    assert via["server_timings"]["predicted_n"] < 32


def test_temperature_ignored_makes_sampling_greedy(llama_server_engine) -> None:
    url = llama_server_engine.url
    greedy = ok(post(url, chat("Write a line about the sea.", max_tokens=32))[1])
    hot = chat("Write a line about the sea.", max_tokens=32, temperature=1.0, seed=123)
    sampled = ok(post(url, hot)[1])
    assert sampled["text"] != greedy["text"]  # the engine alone samples at T=1
    with running_proxy(url, ["temperature-ignored"]) as proxy:
        via = ok(post(proxy, hot)[1])
    assert via["text"] == greedy["text"]


def test_seed_ignored_breaks_same_seed_reproduction(llama_server_engine) -> None:
    url = llama_server_engine.url
    hot = chat("Write a line about the sea.", max_tokens=32, temperature=1.0, seed=99)
    assert ok(post(url, hot)[1])["text"] == ok(post(url, hot)[1])["text"]  # the engine honours seed
    with running_proxy(url, ["seed-ignored"]) as proxy:
        texts = {ok(post(proxy, hot)[1])["text"] for _ in range(3)}
    assert len(texts) > 1


def test_vocab_mask_strips_hangul_from_an_echo(llama_server_engine) -> None:
    body = {"prompt": HANGUL, "max_tokens": 8, "temperature": 0, "stream": True, "logprobs": 2}
    direct = ok(post(llama_server_engine.url, body, COMPLETIONS)[1])
    assert has_hangul(direct["text"])
    with running_proxy(llama_server_engine.url, ["vocab-mask"]) as proxy:
        via = ok(post(proxy, body, COMPLETIONS)[1])
    assert not has_hangul(via["text"])
    assert via["text"] == "".join(c for c in direct["text"] if not has_hangul(c))
    assert via["logprobs"] and not any(has_hangul(e["token"]) for e in via["logprobs"])
    assert via["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"] == 8


def test_logprobs_unnormalised_gives_positive_logprobs(llama_server_engine) -> None:
    body = {**COLOURS, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}
    direct = ok(post(llama_server_engine.url, body)[1])
    with running_proxy(llama_server_engine.url, ["logprobs-unnormalised"]) as proxy:
        via = ok(post(proxy, body)[1])
    assert via["text"] == direct["text"] and len(via["logprobs"]) == len(direct["logprobs"]) == 8
    for got, want in zip(via["logprobs"], direct["logprobs"]):
        assert got["logprob"] == pytest.approx(want["logprob"] + math.log(4), abs=0.05)
        assert [t["logprob"] for t in got["top_logprobs"]] == pytest.approx(
            [t["logprob"] + math.log(4) for t in want["top_logprobs"]], abs=0.05)
    assert any(e["logprob"] > 0 for e in via["logprobs"])
    assert any(sum(math.exp(t["logprob"]) for t in e["top_logprobs"]) > 1 for e in via["logprobs"])


def test_spec_inexact_changes_one_greedy_piece(llama_server_engine) -> None:
    q = next(f"Name {i} colours." for i in range(3, 200) if digest(f"Name {i} colours.")[0] % 2 == 0)
    k = 2 + digest(q)[1] % 20
    body = chat(q, max_tokens=32, logprobs=True, top_logprobs=1)
    direct = ok(post(llama_server_engine.url, body)[1])
    with running_proxy(llama_server_engine.url, ["spec-inexact"]) as proxy:
        via = ok(post(proxy, body)[1])
        plain = ok(post(proxy, {k2: v for k2, v in body.items() if k2 not in ("stream", "stream_options")})[1])
    tokens_direct = [e["token"] for e in direct["logprobs"]]
    tokens_via = [e["token"] for e in via["logprobs"]]
    changed = [i for i, (a, b) in enumerate(zip(tokens_direct, tokens_via)) if a != b]
    assert changed == [k - 1], (k, tokens_direct, tokens_via)
    assert via["text"] == "".join(tokens_via) != direct["text"]
    assert plain["text"] != direct["text"]  # not streamed: changed too


def test_order_dependent_answers_depend_on_the_previous_request(llama_server_engine) -> None:
    odd = next(f"Topic {i}." for i in range(200) if digest(f"Topic {i}.")[-1] & 1)
    even = next(f"Topic {i}." for i in range(200) if not digest(f"Topic {i}.")[-1] & 1)
    probe = chat("Name three colours.")
    with running_proxy(llama_server_engine.url, ["order-dependent"]) as proxy:
        ok(post(proxy, chat(even, max_tokens=2))[1])
        after_even = ok(post(proxy, probe)[1])
        ok(post(proxy, chat(odd, max_tokens=2))[1])
        after_odd = ok(post(proxy, probe)[1])
    assert after_even["text"].startswith("1. Red")
    assert after_odd["text"] == " the" + after_even["text"][1:]


def test_unknown_cheat_exits_2_naming_the_known_ones(llama_server_engine) -> None:
    r = subprocess.run([sys.executable, "-m", "inferencekit", "cheat-proxy", "--upstream", llama_server_engine.url,
                        "--cheat", "output-cache,bogus"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert "'bogus'" in r.stderr and all(name in r.stderr for name in ORDER)
    with pytest.raises(OpError, match=r"exited with code 2 before listening.*bogus"), \
            running_proxy(llama_server_engine.url, ["bogus"]):
        pass


def test_upstream_that_does_not_answer_exits_2() -> None:
    r = subprocess.run([sys.executable, "-m", "inferencekit", "cheat-proxy", "--upstream",
                        f"http://127.0.0.1:{free_port()}/v1", "--cheat", "none"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2 and "does not answer" in r.stderr and r.stderr.count("\n") == 1


def test_mix_routes_a_seeded_share_of_generation_requests_to_the_second_engine(llama_server_engine) -> None:
    # the second "engine" is the same llama-server behind a usage-inflate proxy, so each reply shows where it went
    import random

    body = chat("Name three colours.", max_tokens=8)
    plain = ok(post(llama_server_engine.url, body)[1])["usage"]["completion_tokens"]
    with running_proxy(llama_server_engine.url, ["usage-inflate"]) as other, \
            running_proxy(llama_server_engine.url, [], mix_upstream=other, mix_share=0.3, mix_seed=5) as proxy:
        got = [ok(post(proxy, body)[1])["usage"]["completion_tokens"] for _ in range(20)]
        assert ok(post(proxy, chat("Say hi.", max_tokens=2))[1])  # still serves
        models = get(proxy, "/v1/models")  # not a generation request: never mixed, never drawn for
        assert models.status == 200
    draws = random.Random(5)
    expected = [draws.random() < 0.3 for _ in range(20)]
    assert [n != plain for n in got] == expected and 0 < sum(expected) < 20


def test_mix_options_are_checked_before_listening(llama_server_engine) -> None:
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "inferencekit", "cheat-proxy", "--upstream",
                               llama_server_engine.url, "--cheat", "none", *extra], capture_output=True, text=True,
                              timeout=60, check=False)

    r = run("--mix-share", "0.1")
    assert r.returncode == 2 and "--mix-share needs --mix-upstream" in r.stderr
    r = run("--mix-upstream", llama_server_engine.url)
    assert r.returncode == 2 and "--mix-upstream needs --mix-share" in r.stderr
    r = run("--mix-upstream", llama_server_engine.url, "--mix-share", "1.5")
    assert r.returncode == 2 and "--mix-share: the mix share must be in (0, 1], got 1.5" in r.stderr
    r = run("--mix-upstream", f"http://127.0.0.1:{free_port()}", "--mix-share", "0.1")
    assert r.returncode == 2 and "--mix-upstream http://127.0.0.1:" in r.stderr and "does not answer" in r.stderr
