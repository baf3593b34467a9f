"""``bench serve`` against llama.cpp's native llama-server (``--parallel 4``), and its own timings.

Two things are proved here:

1. ``bench serve`` writes the same run-directory layout on llama-server as on the embedded engine
   (``run.json``, ``inputs/`` and ``outputs/`` per level and bucket, one reply per request, the
   ``bench`` record under ``evidence/`` that ``evidence verify`` finds intact), with N_out taken from
   ``usage``.
2. Our client-side timings agree with llama-server's account of the same requests: every streamed
   reply ends with a usage event carrying ``timings`` (recorded as ``server_timings``).

Two library bugs found while writing this module have regression tests here: llama-server closes
the connection after every streamed reply while announcing keep-alive, which lost every second
sequential request (the client now re-sends while a *reused* connection fails before any reply —
several dead ones can be pooled under concurrency — and the reply says ``retried``); and the
llama-server dialect's count fields asked for ``top_logprobs: 0``, which streams no logprob entries
at all (now 1: one entry, with its id, per token).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from inferencekit.api.client import Client
from inferencekit.api.dialects import dialect
from inferencekit.api.endpoint import Endpoint
from inferencekit.cli import main
from inferencekit.data.prompts import load_prompt_set
from tests.cli_run import bench_ok, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.llama_server]

ENGINE = "llama-server"
CHAT = "/v1/chat/completions"

def level_files(run_dir: Path, kind: str, label: str) -> list[Path]:
    """``<kind>/llama-server/load-<label>/<bucket>/<key>.json`` relative to the level folder, sorted."""
    base = run_dir / kind / ENGINE / f"load-{label}"
    return sorted(p.relative_to(base) for p in base.glob("*/*.json"))


def level_replies(run_dir: Path, label: str) -> list[dict[str, Any]]:
    base = run_dir / "outputs" / ENGINE / f"load-{label}"
    return [{**json.loads((base / rel).read_text()), "_rel": str(rel)}
            for rel in level_files(run_dir, "outputs", label)]


def ok(reply: dict[str, Any]) -> bool:
    return reply.get("status") == 200 and not reply.get("error")


# --------------------------------------------------------------------------------------------------
# 1. bench serve: layout, N_out, evidence

LAYOUT_LEVELS = ("c1", "c4")
LAYOUT_N = 8


@pytest.fixture(scope="module")
def layout_run(llama_server_engine, tmp_path_factory) -> dict[str, Any]:
    run_dir = tmp_path_factory.mktemp("ls-layout") / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--concurrency", "1,4",
                             "--num-prompts", str(LAYOUT_N), "--max-tokens", "32", "--warmup", "1", "--seed", "7",
                             "--run-dir", str(run_dir)])
    assert payload is not None, f"bench serve printed nothing (exit {code})"
    replies = {lbl: level_replies(run_dir, lbl) for lbl in LAYOUT_LEVELS}
    for lbl, rs in replies.items():
        print(f"\n[llama-server layout] {lbl}: {sum(map(ok, rs))}/{len(rs)} ok; failures: "
              f"{sorted({r.get('error', '')[:70] for r in rs if not ok(r)})}")
    return {"code": code, "payload": payload, "run_dir": run_dir, "replies": replies}


def test_bench_serve_layout_and_evidence(layout_run, capsys) -> None:
    run_dir: Path = layout_run["run_dir"]
    payload = layout_run["payload"]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["operation"] == "bench.serve"
    assert run["engine"]["engine"] == ENGINE and run["engine"]["capacity"] == 4
    assert run["pins"]["engine_identity"]["engine"] == ENGINE
    assert run["bench_record"] == payload["evidence_id"]
    assert set(payload["levels"]) == set(LAYOUT_LEVELS)
    assert len(list((run_dir / "outputs" / ENGINE / "warmup").glob("*.json"))) == 1
    buckets = {"very_short", "short", "medium", "long"}
    for lbl in LAYOUT_LEVELS:
        ins, outs = level_files(run_dir, "inputs", lbl), level_files(run_dir, "outputs", lbl)
        assert ins == outs and len(outs) == LAYOUT_N  # one reply file per request sent, same names
        assert {rel.parts[0] for rel in outs} <= buckets
        for r in layout_run["replies"][lbl]:
            rel = Path(r["_rel"])
            assert (r["engine"], r["level"], r["bucket"]) == (ENGINE, lbl, rel.parts[0])
            assert r["id"] == rel.stem.split("~")[0]
            body = json.loads((run_dir / "inputs" / ENGINE / f"load-{lbl}" / rel).read_text())
            assert body["stream"] is True and body["max_tokens"] == 32
        m = payload["levels"][lbl]
        done = sum(map(ok, layout_run["replies"][lbl]))
        assert m["requests"]["total"] == LAYOUT_N and m["requests"]["completed"] == done
        assert m["n_out"]["sources"] == {"usage": done}  # N_out from usage.completion_tokens on every success
    for r in (r for rs in layout_run["replies"].values() for r in rs if ok(r)):
        assert isinstance(r["usage"]["completion_tokens"], int)
        assert r["server_timings"]["predicted_n"] == r["usage"]["completion_tokens"]
    failed = sum(not ok(r) for rs in layout_run["replies"].values() for r in rs)
    paced = [lbl for lbl in LAYOUT_LEVELS if payload["levels"][lbl]["client"]["valid"] is False]
    assert layout_run["code"] == (3 if failed or paced else 0)  # failed requests or a client-paced level → exit 3
    evs = sorted(p.stem for p in (run_dir / "evidence").glob("ev_*.json"))
    assert evs == [payload["evidence_id"]]
    capsys.readouterr()
    assert main(["evidence", "verify", payload["evidence_id"], "--json", "--quiet"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["intact"] is True
    # request + reply per request, and per level the retokenized table and client.json (the client's self-check)
    assert verdict["artifacts_checked"] == 2 * LAYOUT_N * len(LAYOUT_LEVELS) + 2 * len(LAYOUT_LEVELS)


def test_bench_serve_loses_no_request(layout_run) -> None:
    """Regression: requests re-sent when their reused keep-alive connection turns out dead are not
    lost, at concurrency 1 (one pooled connection) and 4 (several dead ones can be pooled)."""
    for lbl in LAYOUT_LEVELS:
        replies = layout_run["replies"][lbl]
        assert [r.get("error") for r in replies] == [None] * LAYOUT_N, lbl
    assert sum("retried" in r for r in layout_run["replies"]["c1"]) >= LAYOUT_N - 1  # closed after every stream
    assert layout_run["code"] == 0


def test_bench_serve_streamed_token_ids_match_usage(layout_run) -> None:
    """Streamed token ids (from the logprob entries' ``id``) against ``usage.completion_tokens``.

    Exact where llama-server streams every token: an ASCII reply that ended at max_tokens. Two
    engine-side departures, both observed here and hand-checked: (a) at a natural stop llama-server
    counts the EOS token in completion_tokens (and predicted_n) but streams nothing for it — one
    fewer; (b) a token that ends inside a multi-byte UTF-8 character is held back and sent merged
    with the next, with only one logprob entry ('请' = 2 tokens, 1 entry) — fewer again.
    """
    rows = []
    for r in (r for rs in layout_run["replies"].values() for r in rs if ok(r)):
        usage = r["usage"]["completion_tokens"]
        assert r["streamed_method"] == "token_ids" and r["token_ids"] is not None, r["_rel"]
        assert len(r["token_ids"]) == r["n_streamed"] == len(r["logprobs"])
        eos = 1 if r["finish_reason"] == "stop" else 0
        if r["text"].isascii():
            assert r["n_streamed"] + eos == usage, (r["_rel"], r["finish_reason"], r["n_streamed"], usage)
        else:
            assert r["n_streamed"] + eos <= usage, r["_rel"]
        rows.append((r["_rel"], r["finish_reason"], r["n_streamed"], usage))
    assert rows
    print("\n[llama-server streamed vs usage]", rows)


def test_client_survives_llama_server_closing_after_a_stream(llama_server_engine) -> None:
    """Minimal regression: two streamed requests one after the other on one Client both succeed."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}

    async def go() -> list[tuple[int, str | None]]:
        async with Client(Endpoint.parse(llama_server_engine.url), timeout_s=120) as c:
            return [((ex := await c.post(CHAT, body)).status, ex.error) for _ in range(2)]

    assert asyncio.run(go()) == [(200, None), (200, None)]


@contextlib.contextmanager
def _closes_reused_connections() -> Any:
    """Real HTTP over loopback, playing llama-server's connection handling deterministically.

    Each connection's first request gets a short SSE stream (chunked, ``Keep-Alive`` announced, as
    llama-server sends); a second request on the same connection is read and the connection closed
    before any reply — what a client sees when it reuses a connection llama-server has already
    closed but whose FIN its event loop has not handled yet (on the real server that window is
    a race; here it is always open). Yields the base URL.
    """
    events = [b'{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}',
              b'{"choices":[{"index":0,"delta":{"content":"Hi"}}]}',
              b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
              b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}', b"[DONE]"]
    state: dict[str, Any] = {}
    ready = threading.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                if served:
                    break  # a request on a reused connection: close before any reply
                served += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n")
                for e in events:
                    data = b"data: " + e + b"\n\n"
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def run() -> None:
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
        state.update(loop=loop, server=server, port=server.sockets[0].getsockname()[1])
        ready.set()
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}"
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        t.join(10)


def test_resend_after_a_dead_pooled_connection_survives_a_second_one() -> None:
    """Minimal: two pooled connections the server has given up on; the next request must still arrive."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}

    async def go() -> tuple[list[int], Any]:
        with _closes_reused_connections() as url:
            async with Client(Endpoint.parse(url), timeout_s=30) as c:
                first = await asyncio.gather(c.post(CHAT, body), c.post(CHAT, body))  # two connections, pooled
                return [ex.status for ex in first], (await c.post(CHAT, body)).to_reply()

    statuses, third = asyncio.run(go())
    assert statuses == [200, 200]
    assert third["status"] == 200 and "error" not in third and third["text"] == "Hi", third.get("error")


def test_dialect_count_fields_make_llama_server_stream_token_ids(llama_server_engine) -> None:
    """Minimal regression: one request with the dialect's count fields streams one id per generated token."""
    body = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
            **dialect(ENGINE).count_fields}

    async def go() -> dict[str, Any]:
        async with Client(Endpoint.parse(llama_server_engine.url), timeout_s=120) as c:
            return (await c.post(CHAT, body)).to_reply(id="count", engine=ENGINE)

    reply = asyncio.run(go())
    assert ok(reply) and reply["usage"]["completion_tokens"] == 8
    assert reply["token_ids"] is not None and len(reply["token_ids"]) == 8


# --------------------------------------------------------------------------------------------------
# 2. Client timings against llama-server's per-request timings, at low load


def _medium_prompts(path: Path) -> Path:
    """The dev set's ``medium`` bucket (≈ 150–600 prompt tokens) as a prompt file."""
    with path.open("w") as f:
        for p in load_prompt_set("dev").prompts:
            if p.bucket == "medium" and p.messages is not None:
                f.write(json.dumps({"id": p.id, "bucket": p.bucket, "messages": list(p.messages)}) + "\n")
    return path


AGREE_N = 16
AGREE_MAX_TOKENS = 64
FLOOR_BEFORE = 8  # floor samples taken before the run; as many again after it, one per completed request
CLIENT_EXCESS_MS = 5.0  # the 5 ms first specified for the whole difference, now on the client's share


def _dechunk(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body → its payload."""
    out, i = [], 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[j + 2:j + 2 + size])
        i = j + 2 + size + 2


def raw_ttft_minus_prompt_ms(url: str, body: dict[str, Any], path: str = CHAT) -> float:
    """The server's own floor: TTFT − prompt_ms seen by a blocking socket (no aiohttp, no event loop).

    The connection is opened before the clock starts and the request is written in one ``sendall``;
    the clock stops when the first chunk holding a content delta arrives. What remains is
    llama-server's work outside ``prompt_ms`` plus one loopback round trip.
    """
    u = urlsplit(url)
    data = json.dumps(body).encode()
    marker = b'"content":"' if path == CHAT else b'"text":"'
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((u.hostname, u.port), timeout=300) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter_ns()
        s.sendall(head + data)
        buf, first = b"", None
        while chunk := s.recv(65536):
            buf += chunk
            if first is None and marker in buf:
                first = time.perf_counter_ns()
    status, _, rest = buf.partition(b"\r\n")
    assert b" 200 " in status, status
    payload = _dechunk(rest.partition(b"\r\n\r\n")[2])
    timings = [json.loads(line[6:])["timings"] for line in payload.split(b"\n")
               if line.startswith(b"data: {") and b'"timings"' in line]
    assert first is not None and len(timings) == 1
    return (first - t0) / 1e6 - timings[0]["prompt_ms"]


def test_client_timings_agree_with_server_timings(llama_server_engine, tmp_path) -> None:
    """TTFT against ``timings.prompt_ms`` and the decode rate against ``timings.predicted_per_second``.

    What llama-server measures (tools/server/server-common.h ``server_slot_stats`` and
    server-context.cpp of the b1-0c1e570 build that ``make llama-server`` compiles):

    - ``prompt_ms`` = from the slot starting the prompt to the moment the *first generated token is
      sampled* (``update_prompt_last`` runs when ``n_gen == 1``). Client TTFT covers all of that plus
      what lies outside the slot: HTTP parsing, the chat template, tokenization, the task queue, and
      on the way back detokenizing the piece, the result queue, the SSE write and the loopback read.
      So TTFT − prompt_ms ≥ 0.
    - ``predicted_ms`` = from that first sampled token to the last sampled one: ``predicted_n − 1``
      decode steps. ``predicted_per_second`` = ``n_gen_steps() / predicted_ms`` with
      ``n_gen_steps = predicted_n − 1`` ("the first token is free, it comes from the logits of the
      last prompt batch"); older llama.cpp divided ``predicted_n`` by the same N−1 intervals, which
      overstates the rate by N/(N−1). The test checks which formula this build uses, per reply.
    - The client's E2EL − TTFT spans first to last token *event*: also N_out − 1 intervals, so
      (N_out − 1)/(E2EL − TTFT) is like-for-like with ``predicted_per_second`` — provided every
      generated token is streamed. At a natural stop llama-server counts the EOS in
      completion_tokens/predicted_n but streams no event for it, so E2EL misses the last step while
      predicted_ms includes it (the client figure would be ~N/(N−1) too high). Hence
      ``--ignore-eos``: every reply is exactly max_tokens tokens, finish ``length``.

    The prompt cache stays on (llama-server's default): it shortens prompt_ms and TTFT by the same
    cached prefix (the shared system prompt), so it does not bias the difference;
    ``cache_prompt: false`` was tried and gave the same difference.

    The TTFT bound. First specified as 0 ≤ p50(TTFT − prompt_ms) ≤ 5 ms; measured here it is 8–15 ms
    p50, and the cause is the server: llama-server's *own* work outside prompt_ms for a medium chat
    prompt — measured with a blocking-socket client that adds next to nothing
    (``raw_ttft_minus_prompt_ms``) — is ≈ 7–15 ms p50 on this 2-core machine (≈ 3 ms for short chat
    prompts, ≈ 4–5 ms for medium /v1/completions prompts: the chat template, tokenization, the slot's prompt-cache
    bookkeeping, and thread hand-offs while the decode threads hold both cores); ``cache_prompt:
    false`` does not change it. Interleaved request by request, inferencekit's client and the
    blocking socket read the same p50 (9.3 vs 9.9 ms). So 5 ms on the whole difference cannot hold
    through any client here. The test keeps 0 ≤ p50 and applies the 5 ms to the part inferencekit
    answers for: p50(client TTFT − prompt_ms) − p50(floor) ≤ 5 ms, the floor measured in this test on
    medium prompts before the run and on the run's own bodies after it, freshly tagged so they miss
    the prompt cache as in the run (a cached prompt skips part of that work and reads ~4 ms lower).
    Seen over 12 runs while developing: −5.9 to +5.1 ms (median ≈ +0.7); the two p50s are not taken
    at the same moment on a machine other jobs share, so most of that spread is load drift, not the
    client — on a busy day this check can flake, and its printout says by how much.
    Every figure is printed (run with ``-s``).
    """
    url = llama_server_engine.url

    def floor(body: dict[str, Any]) -> float:
        """One floor sample on ``body``, freshly tagged at the start of its first user message (as bench
        serve salts a reused prompt), so it misses the prompt cache beyond the shared system prompt
        exactly as in the run: a cached prompt skips part of the server's work outside prompt_ms and
        reads ~4 ms lower. 4 tokens keep the decode threads busy after the first one, as in the run."""
        body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
        body |= {"max_tokens": 4, "ignore_eos": True, "temperature": 0, "stream": True,
                 "stream_options": {"include_usage": True}}
        body["messages"] = [dict(m) for m in body["messages"]]
        first_user = next(m for m in body["messages"] if m["role"] == "user")
        first_user["content"] = f"[floor-{time.time_ns():x}] " + first_user["content"]
        return raw_ttft_minus_prompt_ms(url, body)

    dataset = _medium_prompts(tmp_path / "medium.jsonl")
    run_dir = tmp_path / "run"
    # Half the floor samples before the run (medium prompts from the same file), half after it (the
    # run's own bodies), so a change of background load while the run goes shifts both sides alike.
    before = [{"model": llama_server_engine.model_name, "messages": json.loads(line)["messages"]}
              for line in dataset.read_text().splitlines()[::5][:FLOOR_BEFORE + 1]]
    floor(before[0])  # a fresh server's first request carries one-time costs: not a sample
    floors = [floor(b) for b in before[1:]]
    code, payload = run_cli(["bench", "serve", "--base-url", url, "--dataset", str(dataset),
                             "--concurrency", "1", "--num-prompts", str(AGREE_N), "--max-tokens",
                             str(AGREE_MAX_TOKENS), "--ignore-eos", "--warmup", "1", "--seed", "3",
                             "--run-dir", str(run_dir)])
    assert payload is not None, f"bench serve exited {code} with no output"
    replies = level_replies(run_dir, "c1")
    assert len(replies) == AGREE_N
    good = [r for r in replies if ok(r)]
    assert len(good) == AGREE_N, [r.get("error") for r in replies]
    deltas, client_rate, server_rate = [], [], []
    for r in good:
        t = r["server_timings"]
        n = r["usage"]["completion_tokens"]
        assert r["finish_reason"] == "length" and n == t["predicted_n"] == AGREE_MAX_TOKENS, r["_rel"]
        assert t["predicted_per_second"] == pytest.approx((t["predicted_n"] - 1) / t["predicted_ms"] * 1e3, rel=1e-9)
        deltas.append(r["ttft_ms"] - t["prompt_ms"])
        client_rate.append((n - 1) / ((r["e2el_ms"] - r["ttft_ms"]) / 1e3))
        server_rate.append(t["predicted_per_second"])
    after = [floor(json.loads((run_dir / "inputs" / ENGINE / "load-c1" / r["_rel"]).read_text())) for r in good]
    floors += after
    d50 = statistics.median(deltas)
    f50 = statistics.median(floors)
    excess50 = d50 - f50
    c50, s50 = statistics.median(client_rate), statistics.median(server_rate)
    ratio50 = statistics.median(c / s for c, s in zip(client_rate, server_rate))
    prompt_ms = [r["server_timings"]["prompt_ms"] for r in good]
    print(f"\n[llama-server agreement] n={len(good)}/{len(replies)} ok, load avg {os.getloadavg()[0]:.2f} "
          f"(machine has {os.cpu_count()} cores)\n"
          f"  client TTFT - prompt_ms: p50 {d50:.2f} ms (min {min(deltas):.2f}, max {max(deltas):.2f}); "
          f"prompt_ms p50 {statistics.median(prompt_ms):.1f} ms, client TTFT p50 "
          f"{statistics.median(r['ttft_ms'] for r in good):.1f} ms\n"
          f"  server floor (blocking socket) TTFT - prompt_ms: p50 {f50:.2f} ms (min {min(floors):.2f}, "
          f"max {max(floors):.2f}, n {len(floors)}); client p50 - floor p50 = {excess50:.2f} ms\n"
          f"  decode rate p50: client (N_out-1)/(E2EL-TTFT) {c50:.2f} tok/s vs server predicted_per_second "
          f"{s50:.2f} tok/s -> {100 * (c50 / s50 - 1):+.2f}% (p50 of per-request ratios {100 * (ratio50 - 1):+.2f}%)\n"
          f"  per request (client TTFT-prompt_ms ms, its body's floor ms, client tok/s, server tok/s): "
          + ", ".join(f"({d:.1f}, {f:.1f}, {c:.1f}, {s:.1f})"
                      for d, f, c, s in zip(deltas, after, client_rate, server_rate)))
    assert d50 >= 0.0, f"p50 TTFT - prompt_ms = {d50:.2f} ms: the client saw the token before the server made it"
    assert excess50 <= CLIENT_EXCESS_MS, (f"client TTFT - prompt_ms p50 {d50:.2f} ms exceeds the server's own floor "
                                          f"p50 {f50:.2f} ms by {excess50:.2f} ms")
    assert abs(c50 / s50 - 1) <= 0.05, f"decode rate p50 client {c50:.2f} vs server {s50:.2f} tok/s"


def test_completions_ttft_against_prompt_ms(llama_server_engine, tmp_path) -> None:
    """The same agreement on /v1/completions (text prompts: no chat template outside prompt_ms).

    Here the whole difference sits at the first specified 5 ms: seen 4.98–5.27 ms p50 over three
    runs while developing, of which the server's own floor (blocking socket, same bodies, fresh
    tags) is ≈ 4–5 ms — tokenizing the text and the thread hand-offs. As in the chat test the bound
    the client answers for is applied to its share over that floor; both figures are printed.
    """
    url = llama_server_engine.url
    dataset = tmp_path / "text.jsonl"
    texts = [p.messages[-1]["content"] for p in load_prompt_set("dev").prompts
             if p.bucket == "medium" and p.messages is not None]
    with dataset.open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"t{i}", "bucket": "medium", "prompt": text}) + "\n")

    def floor(prompt: str) -> float:
        body = {"model": llama_server_engine.model_name, "prompt": f"[floor-{time.time_ns():x}] " + prompt,
                "max_tokens": 4, "ignore_eos": True, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        return raw_ttft_minus_prompt_ms(url, body, "/v1/completions")

    floor(texts[-1])  # one-time costs of the first request: not a sample
    floors = [floor(t) for t in texts[:FLOOR_BEFORE]]
    run_dir = tmp_path / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", url, "--dataset", str(dataset),
                             "--concurrency", "1", "--num-prompts", str(AGREE_N), "--max-tokens", "32",
                             "--ignore-eos", "--warmup", "1", "--seed", "3", "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    replies = level_replies(run_dir, "c1")
    assert len(replies) == AGREE_N and all(ok(r) and r["endpoint"] == "/v1/completions" for r in replies)
    floors += [floor(t) for t in texts[FLOOR_BEFORE:2 * FLOOR_BEFORE]]
    deltas = [r["ttft_ms"] - r["server_timings"]["prompt_ms"] for r in replies]
    d50, f50 = statistics.median(deltas), statistics.median(floors)
    print(f"\n[llama-server /v1/completions] client TTFT − prompt_ms p50 {d50:.2f} ms (min {min(deltas):.2f}, "
          f"max {max(deltas):.2f}, n {len(deltas)}); server floor p50 {f50:.2f} ms (n {len(floors)}); "
          f"client share {d50 - f50:+.2f} ms; within the 5 ms as first stated: {0 <= d50 <= 5}")
    assert d50 >= 0.0
    assert d50 - f50 <= CLIENT_EXCESS_MS
