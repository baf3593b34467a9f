"""``bench serve`` against llama.cpp's native llama-server (``--parallel 4``), and its own timings.

Two things are proved here:

1. ``bench serve`` writes the same run-directory layout on llama-server as on the embedded engine
   (``run.json``, ``inputs/`` and ``outputs/`` per level and bucket, one reply per request, the
   ``bench`` record under ``evidence/`` that ``evidence verify`` finds intact), with N_out taken from
   ``usage``.
2. Our client-side timings are consistent with llama-server's account of the same requests: every
   streamed reply ends with a usage event carrying ``timings`` (recorded as ``server_timings``), whose
   counts match and whose ``prompt_ms`` the client's TTFT contains. How close the two come is a
   timing figure, measured by ``benchmarks/timing_agreement.py`` (``make bench-timing``).

Two library bugs found while writing this module have regression tests here: llama-server closes
the connection after every streamed reply while announcing keep-alive (its FIN comes ~100 ms after the
stream's end), which lost every second sequential request (the client first re-sent such requests;
since issue 19 it never re-sends a request whose bytes were written, and opens a connection per
request to an engine whose dialect says it closes kept-alive connections); and the
llama-server dialect's count fields asked for ``top_logprobs: 0``, which streams no logprob entries
at all (now 1: one entry, with its id, per token).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
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
    # request + reply per request, and per level the retokenized table, client.json (the client's self-check) and
    # the server telemetry (server_metrics.jsonl.gz, scraped from llama-server's /metrics)
    for lbl in LAYOUT_LEVELS:
        assert (run_dir / "outputs" / "llama-server" / f"load-{lbl}" / "server_metrics.jsonl.gz").is_file()
    assert verdict["artifacts_checked"] == 2 * LAYOUT_N * len(LAYOUT_LEVELS) + 3 * len(LAYOUT_LEVELS)


def test_bench_serve_loses_no_request(layout_run) -> None:
    """Regression: llama-server closes each connection after a stream; no request is lost to that, at
    concurrency 1 and 4, and none is sent twice: each goes out once, on its own connection."""
    for lbl in LAYOUT_LEVELS:
        replies = layout_run["replies"][lbl]
        assert [r.get("error") for r in replies] == [None] * LAYOUT_N, lbl
        assert not [r["retried"] for r in replies if "retried" in r], lbl
    # exit 0, or 3 only for a level the client paced on a busy machine (its self-check), never for a lost request
    assert bench_ok(layout_run["code"], layout_run["payload"])


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
    """Minimal regression: two streamed requests one after the other on one Client both succeed, once the
    engine is detected as every command detects it (``detect_engine``: llama-server's dialect says it closes
    after every stream, so the client opens a connection per request). Without detection the second request
    can race the server's FIN on the kept-alive connection; it is then not re-sent, by design (issue 19), which
    an unloaded machine showed on 3 Dec 2026 (the second request failed with that reason)."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}

    async def go() -> tuple[bool, list[tuple[int, str | None]]]:
        async with Client(Endpoint.parse(llama_server_engine.url), timeout_s=120) as c:
            await detect_engine(c, None)
            return c.fresh_connections, [((ex := await c.post(CHAT, body)).status, ex.error) for _ in range(2)]

    fresh, got = asyncio.run(go())
    assert fresh is True and got == [(200, None), (200, None)]


@contextlib.contextmanager
def _closes_reused_connections() -> Any:
    """Real HTTP over loopback, playing llama-server's connection handling deterministically.

    Each connection's first request gets a short SSE stream (chunked, ``Keep-Alive`` announced, as
    llama-server sends); a second request on the same connection is read and the connection closed
    before any reply — what a client sees when it reuses a connection llama-server is about to close
    (on the real server that window is a race of ~100 ms; here it is always open). Yields the base URL
    and a list that gets one entry per request read (the count of requests its connection had served).
    """
    events = [b'{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}',
              b'{"choices":[{"index":0,"delta":{"content":"Hi"}}]}',
              b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
              b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}', b"[DONE]"]
    state: dict[str, Any] = {}
    ready = threading.Event()
    read: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                read.append(served)
                if served:
                    break  # a request on a reused connection: read, then the connection closed before any reply
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

        async def shut() -> None:
            # a handler still waiting on a kept-alive connection is cancelled, so its transport is closed here and
            # not left for the garbage collector (a ResourceWarning that pytest raised inside a later test)
            server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()
            await asyncio.sleep(0)  # the closed transports finish closing

        loop.run_until_complete(shut())
        loop.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}", read
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        t.join(10)


def test_a_request_read_on_a_connection_the_server_then_closes_is_sent_once() -> None:
    """Issue 19: the server read the request, so it is not re-sent (the old rule re-sent it, up to 16 times); the
    failure says why, and the client opens a connection per request from then on, so the next one arrives."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}

    async def go(url: str) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
        async with Client(Endpoint.parse(url), timeout_s=30) as c:
            first = await asyncio.gather(c.post(CHAT, body), c.post(CHAT, body))  # two connections, pooled
            lost = (await c.post(CHAT, body)).to_reply()  # on a pooled one: read, then closed
            return [ex.status for ex in first], lost, (await c.post(CHAT, body)).to_reply()

    with _closes_reused_connections() as (url, read):
        statuses, lost, after = asyncio.run(go(url))
    assert statuses == [200, 200]
    assert lost["status"] == 0 and "retried" not in lost and "not re-sent" in lost["error"], lost
    assert after["status"] == 200 and "error" not in after and after["text"] == "Hi", after.get("error")
    assert sorted(read) == [0, 0, 0, 1]  # each request read once, none sent twice; the last on a new connection


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
# 2. Client timings against llama-server's per-request timings: the structure, not the speed
#
# How close the client's TTFT and decode rate come to the server's own account is a timing figure on
# a shared machine, so it is measured by benchmarks/timing_agreement.py (make bench-timing), not
# asserted here. What holds on any load is checked: the counts, the server's rate formula, and that
# the client's TTFT contains the server's prompt_ms.


def _medium_prompts(path: Path) -> Path:
    """The dev set's ``medium`` bucket (≈ 150–600 prompt tokens) as a prompt file."""
    with path.open("w") as f:
        for p in load_prompt_set("dev").prompts:
            if p.bucket == "medium" and p.messages is not None:
                f.write(json.dumps({"id": p.id, "bucket": p.bucket, "messages": list(p.messages)}) + "\n")
    return path


AGREE_N = 8
AGREE_MAX_TOKENS = 32


def test_client_timings_contain_server_timings(llama_server_engine, tmp_path) -> None:
    """Every reply's ``server_timings`` match its counts, and client TTFT ≥ ``prompt_ms``.

    llama-server (tools/server/server-common.h ``server_slot_stats``): ``prompt_ms`` runs from the slot
    starting the prompt to the first token being sampled, so a client's TTFT, which also covers HTTP,
    templating, queues and the way back, can never be shorter. ``predicted_per_second`` =
    ``(predicted_n − 1) / predicted_ms`` in this build (older ones divided ``predicted_n``); with
    ``--ignore-eos`` every reply is exactly max_tokens long, finish ``length``, and usage, the server's
    count and the client's streamed count agree.
    """
    dataset = _medium_prompts(tmp_path / "medium.jsonl")
    run_dir = tmp_path / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--dataset", str(dataset),
                             "--concurrency", "1", "--num-prompts", str(AGREE_N), "--max-tokens",
                             str(AGREE_MAX_TOKENS), "--ignore-eos", "--warmup", "1", "--seed", "3",
                             "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    replies = level_replies(run_dir, "c1")
    assert len(replies) == AGREE_N and all(ok(r) for r in replies), [r.get("error") for r in replies]
    for r in replies:
        t = r["server_timings"]
        n = r["usage"]["completion_tokens"]
        assert r["finish_reason"] == "length" and n == t["predicted_n"] == AGREE_MAX_TOKENS, r["_rel"]
        assert t["predicted_per_second"] == pytest.approx((t["predicted_n"] - 1) / t["predicted_ms"] * 1e3, rel=1e-9)
        assert r["ttft_ms"] >= t["prompt_ms"] > 0, (r["_rel"], r["ttft_ms"], t["prompt_ms"])
        assert r["e2el_ms"] > r["ttft_ms"]


def test_completions_ttft_contains_prompt_ms(llama_server_engine, tmp_path) -> None:
    """The same containment on /v1/completions (text prompts: no chat template outside prompt_ms)."""
    dataset = tmp_path / "text.jsonl"
    texts = [p.messages[-1]["content"] for p in load_prompt_set("dev").prompts
             if p.bucket == "medium" and p.messages is not None]
    with dataset.open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"t{i}", "bucket": "medium", "prompt": text}) + "\n")
    run_dir = tmp_path / "run"
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--dataset", str(dataset),
                             "--concurrency", "1", "--num-prompts", str(AGREE_N), "--max-tokens", "16",
                             "--ignore-eos", "--warmup", "1", "--seed", "3", "--run-dir", str(run_dir)])
    assert bench_ok(code, payload), payload
    replies = level_replies(run_dir, "c1")
    assert len(replies) == AGREE_N and all(ok(r) and r["endpoint"] == "/v1/completions" for r in replies)
    for r in replies:
        assert r["ttft_ms"] >= r["server_timings"]["prompt_ms"] > 0, r["_rel"]
        assert r["usage"]["completion_tokens"] == r["server_timings"]["predicted_n"] == 16


def test_bench_serve_export_parquet_loads_in_pandas(llama_server_engine, tmp_path):
    """``bench serve --export parquet``: the finished run as two tables, one line to load each in pandas."""
    pd = pytest.importorskip("pandas", reason="the parquet extra (pandas, pyarrow) is not installed")
    run = tmp_path / "r"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--concurrency", "1,2",
                         "--num-prompts", "3", "--max-tokens", "4", "--warmup", "0", "--export", "parquet",
                         "--run-dir", str(run)])
    assert bench_ok(code, out), out
    assert out["exports"] == [str(run / "export" / "requests.parquet"), str(run / "export" / "levels.parquet")]
    requests = pd.read_parquet(run / "export" / "requests.parquet")
    levels = pd.read_parquet(run / "export" / "levels.parquet")
    assert len(requests) == 6 and sorted(set(requests["level"])) == ["c1", "c2"]
    assert {"ttft_ms", "e2el_ms", "output_tokens", "start_s"} <= set(requests.columns)
    for lbl, v in out["levels"].items():
        row = levels[levels["level"] == lbl].iloc[0]
        assert row["ttft_p50_ms"] == v["ttft_ms"]["p50"] and row["completed_requests"] == 3


def test_a_second_run_with_the_same_seed_is_not_served_from_the_prompt_cache(llama_server_engine, tmp_path):
    """Two runs, same seed, same server: llama-server keeps each slot's last prompt, so a second run that sent the same
    texts would have its prefill served from that cache (seen: TTFT p50 2,290 ms, then 55 ms). Every request is
    salted at its start (dev set), or the set is drawn afresh per run (``--dataset random``), so what the second run
    finds cached (``cache_n``) is at most the chat template's opening before the user's text."""
    for dataset in (["--dataset", "dev"], ["--dataset", "random", "--input-len", "96"]):
        runs = []
        for i in (1, 2):
            run = tmp_path / f"{dataset[1]}{i}"
            code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--concurrency", "1",
                                 "--num-prompts", "4", "--max-tokens", "2", "--warmup", "0", "--seed", "7", *dataset,
                                 "--run-dir", str(run)])
            assert bench_ok(code, out), out
            runs.append(level_replies(run, "c1"))
        first, second = runs
        assert sorted(r["_rel"].split("/")[-1] for r in first) == sorted(r["_rel"].split("/")[-1] for r in second)
        template = 0
        for r in second:
            t = r["server_timings"]
            if dataset[1] == "random":  # token-exact: 96 tokens of user text inside the chat template
                assert r["usage"]["prompt_tokens"] > 96, r
            template = max(template, t["cache_n"])
            # the SmolLM2 template's system turn and "<|im_start|>user\n" are 24 tokens (seen: cache_n 24), and the
            # salt's "[ik-" may add a few: a served prompt would show the whole prompt cached
            assert t["cache_n"] <= min(32, r["usage"]["prompt_tokens"] - 8), (dataset, r["_rel"], t)
        print(f"\n[same-seed rerun] {dataset[1]}: largest cache_n in the second run {template}")


def test_shared_prefix_run_reuses_the_prefix_only_with_the_prompt_cache_on(llama_server_engine, tmp_path):
    """``--shared-prefix-tokens 256 --prefix-groups 2`` with llama-server's prompt cache on, then off
    (``cache_prompt: false``): with it on, every later request of a group is served its 256-token prefix from the
    cache (cached_tokens ≥ 256); with it off, none is; the intended reuse never trips unique_prompts. The TTFT
    effect is a timing (docs/load-generation.md, "Shared prefixes", measured by hand), not asserted here."""
    blocks = {}
    for name, extra in (("on", []), ("off", ["--extra-body", '{"cache_prompt": false}'])):
        run = tmp_path / name
        code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--concurrency", "1",
                             "--num-prompts", "6", "--max-tokens", "2", "--warmup", "0", "--dataset", "random",
                             "--input-len", "32", "--shared-prefix-tokens", "256", "--prefix-groups", "2", *extra,
                             "--run-dir", str(run)])
        assert bench_ok(code, out), out
        record = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
        blocks[name] = sp = record["data"]["shared_prefix"]
        assert (sp["tokens"], sp["groups"], sp["groups_seen"], sp["first"]["n"], sp["later"]["n"]) == (256, 2, 2, 2, 4)
        for r in level_replies(run, "c1"):
            assert r["shared_prefix_id"] in ("g0", "g1") and r["usage"]["prompt_tokens"] > 256 + 32
        code, gates = run_cli(["gates", "check", str(run)])
        assert gates["gates"]["unique_prompts"]["verdict"] == "PASS", gates["gates"]["unique_prompts"]
        assert "FAIL" not in {g["verdict"] for g in gates["gates"].values()}, gates
    assert blocks["on"]["later"]["cached_tokens"]["min"] >= 256
    assert blocks["on"]["first"]["cached_tokens"]["max"] < 256
    assert blocks["off"]["later"]["cached_tokens"]["max"] == 0
    print(f"\n[shared prefix] TTFT p50 first/later: cache on {blocks['on']['first']['ttft_ms']['p50']:.0f}/"
          f"{blocks['on']['later']['ttft_ms']['p50']:.0f} ms, off {blocks['off']['first']['ttft_ms']['p50']:.0f}/"
          f"{blocks['off']['later']['ttft_ms']['p50']:.0f} ms")


def test_trace_replay_is_token_exact_and_keeps_the_traces_times(llama_server_engine, tmp_path):
    """``--trace`` (Mooncake, 16-token blocks) at ``--time-scale 0.5``: every request is sent at its row's time × 0.5
    after the level's start, its prompt counts exactly the row's input length (the server's prompt_tokens minus one
    constant, the chat template's), its output the row's length (``--ignore-eos``), and unique_prompts has nothing
    to object to (the trace's intended sharing is whole blocks, its exact repeat was made unique)."""
    rows = [(0, 40, 4, [0, 1, 2]), (300, 49, 3, [0, 1, 3, 4]), (600, 40, 4, [0, 1, 2]), (900, 20, 2, [5, 6]),
            (1200, 33, 4, [0, 1, 7]), (1500, 16, 3, [8])]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
                             + "\n" for t, i, o, h in rows))
    run = tmp_path / "run"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--trace", str(trace),
                         "--trace-block-size", "16", "--time-scale", "0.5", "--ignore-eos", "--run-dir", str(run)])
    assert bench_ok(code, out), out
    replies = sorted(level_replies(run, "trace"), key=lambda r: r["scheduled_ns"])
    assert [r["id"] for r in replies] == [f"trace-{i:05d}" for i in range(len(rows))]
    start = replies[0]["scheduled_ns"]
    assert [r["scheduled_ns"] - start for r in replies] == pytest.approx([t * 0.5 * 1e6 for t, *_ in rows], abs=1e3)
    overhead = {r["usage"]["prompt_tokens"] - n for r, (_, n, _, _) in zip(replies, rows)}
    assert len(overhead) == 1 and overhead.pop() > 0
    assert [r["usage"]["completion_tokens"] for r in replies] == [o for _, _, o, _ in rows]
    desc = json.loads((run / "run.json").read_text())["prompt_set"]
    assert (desc["name"], desc["requests"], desc["repeats_made_unique"], desc["time_scale"]) == \
        ("trace:mooncake", 6, 1, 0.5)
    code, gates = run_cli(["gates", "check", str(run)])
    assert gates["gates"]["unique_prompts"]["verdict"] == "PASS", gates["gates"]["unique_prompts"]


def test_conversations_send_each_turn_with_the_models_own_replies(llama_server_engine, tmp_path):
    """``--dataset conversations --turns 3``: 4 sessions at ``--concurrency 2``; turn k's messages are the session's
    k user messages with the replies the server actually gave in between (not a dataset's), every reply names its
    session and turn, the record holds the by-turn block, and unique_prompts has nothing to object to."""
    run = tmp_path / "run"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--dataset", "conversations",
                         "--turns", "3", "--input-len", "16", "--num-prompts", "4", "--concurrency", "2",
                         "--max-tokens", "8", "--warmup", "0", "--run-dir", str(run)])
    assert bench_ok(code, out), out
    replies = {r["_rel"].split("/")[-1].removesuffix(".json"): r for r in level_replies(run, "c2")}
    assert len(replies) == 12
    for key, r in replies.items():
        session, turn = key.rsplit(".t", 1)
        assert (r["session_id"], r["turn"]) == (session, int(turn)) and r["status"] == 200
        body = json.loads((run / "inputs" / ENGINE / "load-c2" / "conv" / f"{key}.json").read_text())
        msgs = body["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant"] * (int(turn) - 1) + ["user"]
        for k in range(1, int(turn)):  # each assistant message is the reply that turn k received, as received
            assert msgs[2 * k - 1]["content"] == replies[f"{session}.t{k}"]["text"]
    record = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    cv = record["data"]["conversations"]
    assert cv["sessions"] == {"started": 4, "completed": 4, "turns_sent": 12, "turns_planned": 12}
    assert sorted(cv["by_turn"]) == ["1", "2", "3"]
    assert cv["by_turn"]["3"]["prompt_tokens"]["min"] > cv["by_turn"]["1"]["prompt_tokens"]["max"]
    code, gates = run_cli(["gates", "check", str(run)])
    up = gates["gates"]["unique_prompts"]
    assert up["verdict"] == "PASS", up
    assert "8 later turn(s) of 4 session(s) resend their own history" in up["reason"], up


def test_an_output_cache_in_front_of_a_conversation_run_is_still_caught(llama_server_engine, tmp_path):
    """The cheat proxy's output-cache in front of a conversation run: the load's own reuse (each turn resends its
    session's history) is named as intended by unique_prompts, and the caching gate's probes, sent into the same
    run dir through the same proxy with llama-server's prompt cache on, still FAIL it as an output cache."""
    from inferencekit.cheats.proxy import running_proxy

    run = tmp_path / "run"
    with running_proxy(llama_server_engine.url, ["output-cache"]) as url:
        code, out = run_cli(["bench", "serve", "--base-url", url, "--dataset", "conversations", "--turns", "2",
                             "--input-len", "16", "--num-prompts", "2", "--concurrency", "2", "--max-tokens", "8",
                             "--warmup", "0", "--run-dir", str(run)])
        assert bench_ok(code, out), out
        code, live = run_cli(["gates", "run", "--base-url", url, "--gates", "caching", "--max-tokens", "16",
                              "--cache-prompts", "4", "--run-dir", str(run)])
    assert code == 1 and live["gates"]["caching"]["verdict"] == "FAIL", live["gates"]["caching"]
    code, checked = run_cli(["gates", "check", str(run)])
    caching, up = checked["gates"]["caching"], checked["gates"]["unique_prompts"]
    assert caching["verdict"] == "FAIL" and "output cach" in caching["reason"], caching
    rec = json.loads((run / "evidence" / f"{checked['evidence_id']}.json").read_text())
    metrics = next(g["metrics"] for g in rec["data"]["gates"] if g["gate"] == "caching")
    assert metrics["cause"] == "output_cache" and metrics["cache_bypass"] == ["cache_prompt"], metrics
    assert up["verdict"] == "PASS" and "2 later turn(s) of 2 session(s)" in up["reason"], up


def test_verify_runs_the_main_job_on_the_conversations_workload(llama_server_engine, tmp_path):
    """``verify --workload conversations``: the load part is multi-turn sessions at the quick profile's levels, the
    gates judge it (the sessions' own history is intended reuse, named), the caching probes carry llama-server's
    bypass with its prompt cache on, and the verification record says which workload it ran."""
    run = tmp_path / "v"
    code, out = run_cli(["verify", "--base-url", llama_server_engine.url, "--workload", "conversations",
                         "--run-dir", str(run)])
    parts = {p["part"]: p for p in out["parts"]}
    assert set(out["levels"]) == {"c1", "c2", "c4"}
    bench = json.loads((run / "evidence" / f"{parts['bench serve']['evidence_id']}.json").read_text())
    cv = bench["data"]["conversations"]
    assert cv["sessions"]["started"] == 12 and cv["sessions"]["turns_sent"] == 48, cv["sessions"]  # 4 per level
    # llama-server (0.3.36, 4 slots) now and then answers a streamed request with HTTP 200 and an empty body (seen on
    # 2 of 7 runs, each time one turn): an engine fault, recorded on that request, the run going on; nothing else
    # may make a session incomplete
    lost = 12 - cv["sessions"]["completed"]
    errors = Counter()
    for level in bench["data"]["levels"].values():
        errors.update(level["requests"]["errors"])
    assert lost <= 1 and sum(errors.values()) == lost, (cv["sessions"], errors)
    assert set(errors) <= {"stream ended without [DONE]"}, errors
    assert sorted(cv["by_turn"]) == ["1", "2", "3", "4"]
    up = parts["gates: unique_prompts"]
    assert up["verdict"] == "PASS" and "later turn(s) of 12 session(s) resend their own history" in up["reason"], up
    caching = parts["gates: caching"]
    assert caching["verdict"] != "FAIL", caching  # prompt cache on, bypassed per probe
    if caching["verdict"] == "PASS":
        assert "per-request cache bypass cache_prompt" in caching["reason"]
    # llama-server with 4 slots is not batch-invariant, so the known answers under load may differ (the order gate);
    # no other gate may FAIL the honest engine
    assert not [n for n, p in parts.items() if p["verdict"] == "FAIL" and n != "gates: order"], parts
    rec = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    assert rec["data"]["workload"] == "conversations" and rec["identity"]["workload"]["load"] == "conversations"
    assert code == {"PASS": 0, "FAIL": 1, "UNPROVEN": 3}[out["verdict"]]


def test_trace_rows_over_the_servers_context_are_skipped_and_a_trace_of_only_such_rows_is_refused(
        llama_server_engine, tmp_path):
    """The server reports its context per request (llama-server's per-slot n_ctx): a row of 100,000 input tokens
    cannot be replayed, so it is skipped before anything is sent and counted on the record's trace description and
    as a limitation; the other rows are sent at their times from the first row kept. A trace of only such rows is
    refused, exit 2, with nothing sent and no run dir left."""
    trace = tmp_path / "t.jsonl"
    rows = [(0, 100_000, 4), (200, 16, 3), (400, 20, 2)]
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o}) + "\n"
                             for t, i, o in rows))
    run = tmp_path / "run"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--trace", str(trace),
                         "--ignore-eos", "--run-dir", str(run)])
    assert bench_ok(code, out), out
    replies = sorted(level_replies(run, "trace"), key=lambda r: r["scheduled_ns"])
    assert [r["usage"]["completion_tokens"] for r in replies] == [3, 2] and all(map(ok, replies))
    assert replies[1]["scheduled_ns"] - replies[0]["scheduled_ns"] == pytest.approx(0.2e9, abs=1e6)
    record = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    desc = record["data"]["trace"]
    ctx = desc["max_context"]
    assert isinstance(ctx, int) and 48 < ctx < 100_004 and desc["context_checked"] is True
    assert (desc["requests"], desc["read"], desc["skipped"]["over_context"]) == (2, 3, 1)
    assert (f"trace replay: 1 of 3 rows were skipped, not sent: their input + output is over the server's context of "
            f"{ctx} tokens per request") in record["limitations"]
    assert record["data"]["levels"]["trace"]["spec"]["rate_req_s"] == pytest.approx(2 / 0.2)
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps({"timestamp": 0, "input_length": 100_000, "output_length": 4}) + "\n")
    code, _ = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--trace", str(only),
                       "--run-dir", str(tmp_path / "refused")])
    assert code == 2 and not (tmp_path / "refused").exists()


def test_sharegpt_sessions_start_open_loop_and_only_their_starts_are_scheduled(llama_server_engine, tmp_path):
    """``--dataset conversations --conversation-source sharegpt --turns 2 --request-rate 4 --rate-of turns``: 3
    sessions from ShareGPT's multi-turn records (seed 0: DqcWUPa_0, rwLhAlb_0, cgiGsMx_0, 2 turns each), started at
    4 / 2 = 2 sessions/s; turn 2 carries the record's second human message after the model's own reply (salted in
    the first user message), only turn 1 is scheduled, and the record states the derived start rate."""
    run = tmp_path / "run"
    code, out = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--dataset", "conversations",
                         "--conversation-source", "sharegpt", "--turns", "2", "--request-rate", "4", "--rate-of",
                         "turns", "--num-prompts", "3", "--max-concurrency", "2", "--max-tokens", "8", "--warmup",
                         "0", "--seed", "0", "--run-dir", str(run)])
    assert bench_ok(code, out), out
    replies = {r["_rel"].split("/")[-1].removesuffix(".json"): r for r in level_replies(run, "r4c2")}
    assert sorted(replies) == sorted(f"sharegpt-{s}.t{k}" for s in ("DqcWUPa_0", "rwLhAlb_0", "cgiGsMx_0")
                                     for k in (1, 2))
    for key, r in replies.items():
        assert r["status"] == 200 and r["session_turns"] == 2
        assert isinstance(r.get("scheduled_ns"), int) is key.endswith(".t1")
    body = json.loads((run / "inputs" / ENGINE / "load-r4c2" / "conv" / "sharegpt-cgiGsMx_0.t2.json").read_text())
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0]["content"].startswith(f"[{replies['sharegpt-cgiGsMx_0.t1']['salt']}] explain WEB3, Blockchain")
    assert msgs[1]["content"] == replies["sharegpt-cgiGsMx_0.t1"]["text"]  # the model's own reply, as received
    assert msgs[2]["content"] == "break down web3 for me"
    record = json.loads((run / "evidence" / f"{out['evidence_id']}.json").read_text())
    spec = record["data"]["levels"]["r4c2"]["spec"]
    assert (spec["rate_of"], spec["rate_req_s"], spec["turns_per_session_mean"], spec["session_start_rate_req_s"]) == \
        ("turns", 4.0, 2.0, 2.0)
    assert record["data"]["levels"]["r4c2"]["client"]["send_late_ms"]["n"] == 3  # the three starts only
    cv = record["data"]["conversations"]
    assert cv["source"] == "sharegpt" and cv["sessions"] == {"started": 3, "completed": 3, "turns_sent": 6,
                                                             "turns_planned": 6}
    desc = json.loads((run / "run.json").read_text())["prompt_set"]
    assert desc["name"] == "conversations:sharegpt" and desc["turns_per_session"] == [2, 2, 2]
