"""``bench serve`` against llama.cpp's native llama-server (``--parallel 4``), and its own timings.

Two things are proved here:

1. ``bench serve`` writes the same run-directory layout on llama-server as on the embedded engine
   (``run.json``, ``inputs/`` and ``outputs/`` per level and bucket, one reply per request, the
   ``bench`` record under ``evidence/`` that ``evidence verify`` finds intact), with N_out taken from
   ``usage``.
2. Our client-side timings agree with llama-server's account of the same requests: every streamed
   reply ends with a usage event carrying ``timings`` (recorded as ``server_timings``).

Three library bugs found while writing this module are pinned by ``xfail(strict=True)`` tests
(``KEEPALIVE_BUG``, ``COUNT_FIELDS_BUG``): each fails now and will XPASS — failing the strict
marker — once the library is fixed, so the marker must then be removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from inferencekit.api.client import Client
from inferencekit.api.dialects import dialect
from inferencekit.api.endpoint import Endpoint
from inferencekit.cli import main
from inferencekit.data.prompts import load_prompt_set

pytestmark = [pytest.mark.engine, pytest.mark.llama_server]

ENGINE = "llama-server"
CHAT = "/v1/chat/completions"

KEEPALIVE_BUG = (
    "api/client.py Client._exchange: llama-server closes the connection after every streamed reply while "
    "announcing 'Keep-Alive: timeout=5, max=100'; aiohttp hands the dead pooled connection to the next "
    "request, which fails before any byte comes back ('Can not write request body' / 'server "
    "disconnected'), so every second sequential request on one Client is lost. Fix: retry once on a fresh "
    "connection when a request fails with status 0 and no chunk received (ServerDisconnectedError / "
    "ClientOSError before the response).")
COUNT_FIELDS_BUG = (
    "api/dialects.py llama-server count_fields uses top_logprobs: 0, which llama-server (b1-0c1e570) treats "
    "as n_probs = 0: the stream carries no logprob entries at all, so no token ids are streamed and N_out "
    "cannot be checked against usage. Fix: count_fields={'logprobs': True, 'top_logprobs': 1}.")


def run_cli(argv: list[str]) -> tuple[int, Any]:
    """``inferencekit <argv> --json --quiet`` in-process: (exit code, parsed stdout or None).

    For module-scoped fixtures, where ``capsys`` (function-scoped) is not available: ``main`` writes
    its JSON to ``sys.stdout.buffer``, so stdout is swapped for a text wrapper over a byte buffer.
    """
    buf = io.BytesIO()
    out = io.TextIOWrapper(buf, encoding="utf-8")
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "--quiet"])
        out.flush()
    text = buf.getvalue().decode()
    return code, (json.loads(text) if text.strip() else None)


def level_files(run_dir: Path, kind: str, label: str) -> list[Path]:
    """``<kind>/llama-server/load-<label>/<bucket>/<key>.json`` relative to the level folder, sorted."""
    base = run_dir / kind / ENGINE / f"load-{label}"
    return sorted(p.relative_to(base) for p in base.glob("*/*.json"))


def level_replies(run_dir: Path, label: str) -> list[dict[str, Any]]:
    base = run_dir / "outputs" / ENGINE / f"load-{label}"
    return [{**json.loads((base / rel).read_text()), "_rel": str(rel)} for rel in level_files(run_dir, "outputs", label)]


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
    assert layout_run["code"] == (3 if failed else 0)  # some failed → UNPROVEN → exit 3
    evs = sorted(p.stem for p in (run_dir / "evidence").glob("ev_*.json"))
    assert evs == [payload["evidence_id"]]
    capsys.readouterr()
    assert main(["evidence", "verify", payload["evidence_id"], "--json", "--quiet"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["intact"] is True
    assert verdict["artifacts_checked"] == 2 * LAYOUT_N * len(LAYOUT_LEVELS) + len(LAYOUT_LEVELS)  # + retokenized


@pytest.mark.xfail(strict=True, reason=KEEPALIVE_BUG)
def test_bench_serve_every_request_succeeds(layout_run) -> None:
    assert [sum(map(ok, layout_run["replies"][lbl])) for lbl in LAYOUT_LEVELS] == [LAYOUT_N] * len(LAYOUT_LEVELS)
    assert layout_run["code"] == 0


@pytest.mark.xfail(strict=True, reason=COUNT_FIELDS_BUG)
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


@pytest.mark.xfail(strict=True, reason=KEEPALIVE_BUG)
def test_client_survives_llama_server_closing_after_a_stream(llama_server_engine) -> None:
    """Minimal: two streamed requests one after the other on one Client."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}

    async def go() -> list[tuple[int, str | None]]:
        async with Client(Endpoint.parse(llama_server_engine.url), timeout_s=120) as c:
            return [((ex := await c.post(CHAT, body)).status, ex.error) for _ in range(2)]

    assert asyncio.run(go()) == [(200, None), (200, None)]


@pytest.mark.xfail(strict=True, reason=COUNT_FIELDS_BUG)
def test_dialect_count_fields_make_llama_server_stream_token_ids(llama_server_engine) -> None:
    """Minimal: one request with the dialect's count fields must stream one id per generated token."""
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


def test_client_timings_agree_with_server_timings(llama_server_engine, tmp_path) -> None:
    """TTFT against ``timings.prompt_ms`` and the decode rate against ``timings.predicted_per_second``.

    What llama-server measures (tools/server/server-common.h ``server_slot_stats`` and
    server-context.cpp of the b1-0c1e570 build that ``make llama-server`` compiles):

    - ``prompt_ms`` = from the slot starting the prompt to the moment the *first generated token is
      sampled* (``update_prompt_last`` runs when ``n_gen == 1``). Client TTFT covers all of that plus
      what lies outside the slot: HTTP parsing, chat template, tokenization, the task queue, and on
      the way back detokenizing the piece, the result queue, the SSE write and the loopback read.
      So TTFT − prompt_ms ≥ 0 and, at concurrency 1, should be a few ms.
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
    cached prefix (the shared system prompt), so it does not bias the difference.
    """
    dataset = _medium_prompts(tmp_path / "medium.jsonl")
    code, payload = run_cli(["bench", "serve", "--base-url", llama_server_engine.url, "--dataset", str(dataset),
                             "--concurrency", "1", "--num-prompts", str(AGREE_N), "--max-tokens",
                             str(AGREE_MAX_TOKENS), "--ignore-eos", "--warmup", "1", "--seed", "3",
                             "--run-dir", str(tmp_path / "run")])
    assert payload is not None, f"bench serve exited {code} with no output"
    replies = level_replies(tmp_path / "run", "c1")
    assert len(replies) == AGREE_N
    good = [r for r in replies if ok(r)]
    # With KEEPALIVE_BUG every second request fails before it reaches the server; judge those that ran.
    assert len(good) >= AGREE_N // 2, [r.get("error") for r in replies]
    deltas, client_rate, server_rate = [], [], []
    for r in good:
        t = r["server_timings"]
        n = r["usage"]["completion_tokens"]
        assert r["finish_reason"] == "length" and n == t["predicted_n"] == AGREE_MAX_TOKENS, r["_rel"]
        assert t["predicted_per_second"] == pytest.approx((t["predicted_n"] - 1) / t["predicted_ms"] * 1e3, rel=1e-9)
        deltas.append(r["ttft_ms"] - t["prompt_ms"])
        client_rate.append((n - 1) / ((r["e2el_ms"] - r["ttft_ms"]) / 1e3))
        server_rate.append(t["predicted_per_second"])
    d50 = statistics.median(deltas)
    c50, s50 = statistics.median(client_rate), statistics.median(server_rate)
    ratio50 = statistics.median(c / s for c, s in zip(client_rate, server_rate))
    prompt_ms = [r["server_timings"]["prompt_ms"] for r in good]
    print(f"\n[llama-server agreement] n={len(good)}/{len(replies)} ok, load avg {os.getloadavg()[0]:.2f} "
          f"(machine has {os.cpu_count()} cores)\n"
          f"  TTFT - prompt_ms: p50 {d50:.2f} ms (min {min(deltas):.2f}, max {max(deltas):.2f}); "
          f"prompt_ms p50 {statistics.median(prompt_ms):.1f} ms, client TTFT p50 "
          f"{statistics.median(r['ttft_ms'] for r in good):.1f} ms\n"
          f"  decode rate p50: client (N_out-1)/(E2EL-TTFT) {c50:.2f} tok/s vs server predicted_per_second "
          f"{s50:.2f} tok/s -> {100 * (c50 / s50 - 1):+.2f}% (p50 of per-request ratios {100 * (ratio50 - 1):+.2f}%)\n"
          f"  per request (TTFT-prompt_ms ms, client tok/s, server tok/s): "
          + ", ".join(f"({d:.1f}, {c:.1f}, {s:.1f})" for d, c, s in zip(deltas, client_rate, server_rate)))
    assert 0.0 <= d50 <= 5.0, f"p50 TTFT - prompt_ms = {d50:.2f} ms"
    assert abs(c50 / s50 - 1) <= 0.05, f"decode rate p50 client {c50:.2f} vs server {s50:.2f} tok/s"
