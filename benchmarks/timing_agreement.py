#!/usr/bin/env python3
"""Do our client's TTFT and decode rate agree with llama-server's own account of the same requests?

    .venv/bin/python benchmarks/timing_agreement.py [--runs 3] [--upstream URL] [--json PATH]
    make bench-timing

Every streamed llama-server reply ends with ``timings`` (recorded as ``server_timings``). What the
server measures (tools/server/server-common.h ``server_slot_stats`` and server-context.cpp of the
build ``make llama-server`` compiles):

- ``prompt_ms``: from the slot starting the prompt to the first generated token being sampled. A
  client's TTFT covers that plus everything outside the slot (HTTP parsing, the chat template,
  tokenization, the task queue, detokenizing, the SSE write, the loopback read).
- ``predicted_per_second`` = ``(predicted_n − 1) / predicted_ms``: the same N_out − 1 intervals as the
  client's (N_out − 1)/(E2EL − TTFT), provided every token is streamed, hence ``--ignore-eos``.

The figures, per run and per endpoint:

1. p50(client TTFT − prompt_ms) against the *server's floor*: the same difference seen by a
   blocking socket that adds next to nothing (``raw_ttft_minus_prompt_ms``), taken half before and
   half after the run on freshly tagged bodies (so they miss the prompt cache as the run does). The
   client's share, p50(client) − p50(floor), is held to 5 ms (the bound first specified for the whole
   difference; on this 2-core machine the server's own floor alone is 4–15 ms).
2. p50 of the client decode rate over the server's: held to ±5 %.

These are timing figures on a machine other jobs share, so they live here, not in the test suite
(tests/integration/test_llama_server.py keeps the structural checks: counts, the rate formula and
TTFT ≥ prompt_ms). The two p50s are not taken at the same moment, so load drift moves the client
share; each run prints the load average and the spread, and ``--runs`` repeats the whole measurement.

``--engine vllm`` measures the other engine whose own account the client can be held to: the mean client
TTFT of a ``bench serve`` run (c=1 and c=2, 16 requests each) against the mean of vLLM's
``vllm:time_to_first_token_seconds`` histogram over the same requests (``/metrics`` read before and after;
vLLM 0.32 observes from rendering the chat request to the output processor's first token), held to 10%
(tests/integration/test_vllm.py keeps client ≥ server).

Writes ``benchmarks/results/timing_agreement-<date>.json`` and exits 1 when a bound failed in the
median run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.cli import main as ik_main  # noqa: E402
from inferencekit.data.prompts import load_prompt_set  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402

ENGINE = "llama-server"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
N_REQUESTS = 16
FLOOR_EACH_SIDE = 8
CLIENT_SHARE_MS = 5.0
RATE_TOLERANCE = 0.05


def _dechunk(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body → its payload."""
    out: list[bytes] = []
    i = 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[j + 2:j + 2 + size])
        i = j + 2 + size + 2


def raw_ttft_minus_prompt_ms(url: str, body: dict[str, Any], path: str) -> float:
    """The server's floor in ms: TTFT − prompt_ms seen by a blocking socket (no aiohttp, no event loop).

    The connection opens before the clock starts; the request goes in one ``sendall``; the clock stops
    when the first chunk holding a content delta arrives.

    Raises:
        RuntimeError: a non-200 reply, or no single ``timings`` event.
    """
    u = urlsplit(url)
    data = json.dumps(body).encode()
    marker = b'"content":"' if path == CHAT else b'"text":"'
    head = (f"POST {path} HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    assert u.hostname and u.port
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
    if b" 200 " not in status:
        raise RuntimeError(f"floor request answered {status!r}")
    payload = _dechunk(rest.partition(b"\r\n\r\n")[2])
    timings = [json.loads(line[6:])["timings"] for line in payload.split(b"\n")
               if line.startswith(b"data: {") and b'"timings"' in line]
    if first is None or len(timings) != 1:
        raise RuntimeError("floor request: no content delta, or not exactly one timings event")
    return float((first - t0) / 1e6 - timings[0]["prompt_ms"])


def _tag() -> str:
    return f"[floor-{time.time_ns():x}] "


def _bench(argv: list[str]) -> dict[str, Any]:
    """``inferencekit bench serve <argv> --json --quiet`` in this process → its JSON summary."""
    buf = io.BytesIO()
    out = io.TextIOWrapper(buf, encoding="utf-8")
    with contextlib.redirect_stdout(out):
        code = ik_main(["bench", "serve", *argv, "--json", "--quiet"])
        out.flush()
    text = buf.getvalue().decode()
    if not text.strip():
        raise RuntimeError(f"bench serve exited {code} with no output")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _replies(run_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    base = run_dir / "outputs" / ENGINE / "load-c1"
    return [(p.relative_to(base), json.loads(p.read_text())) for p in sorted(base.glob("*/*.json"))]


def _summary(deltas: list[float], floors: list[float], client_rate: list[float],
             server_rate: list[float]) -> dict[str, Any]:
    d50, f50 = statistics.median(deltas), statistics.median(floors)
    ratio = statistics.median(c / s for c, s in zip(client_rate, server_rate)) if client_rate else None
    return {"n": len(deltas), "client_ttft_minus_prompt_ms": {"p50": d50, "min": min(deltas), "max": max(deltas)},
            "server_floor_ms": {"p50": f50, "min": min(floors), "max": max(floors), "n": len(floors)},
            "client_share_ms": d50 - f50, "client_share_held": d50 - f50 <= CLIENT_SHARE_MS and d50 >= 0,
            "decode_rate_ratio_p50": ratio,
            "decode_rate_held": None if ratio is None else abs(ratio - 1) <= RATE_TOLERANCE,
            "load_avg_1m": os.getloadavg()[0]}


def chat_run(url: str, model: str, work: Path, seed: int) -> dict[str, Any]:
    """The chat endpoint: medium dev prompts, 16 requests at c=1, 64 tokens each with ignore_eos."""
    dataset = work / "medium.jsonl"
    prompts = [p for p in load_prompt_set("dev").prompts if p.bucket == "medium" and p.messages is not None]
    dataset.write_text("".join(json.dumps({"id": p.id, "bucket": p.bucket, "messages": list(p.messages or ())}) + "\n"
                               for p in prompts))

    def floor(body: dict[str, Any]) -> float:
        body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
        body |= {"max_tokens": 4, "ignore_eos": True, "temperature": 0, "stream": True,
                 "stream_options": {"include_usage": True}}
        body["messages"] = [dict(m) for m in body["messages"]]
        first_user = next(m for m in body["messages"] if m["role"] == "user")
        first_user["content"] = _tag() + first_user["content"]
        return raw_ttft_minus_prompt_ms(url, body, CHAT)

    before = [{"model": model, "messages": list(p.messages or ())} for p in prompts[::5][:FLOOR_EACH_SIDE + 1]]
    floor(before[0])  # a fresh server's first request carries one-time costs: not a sample
    floors = [floor(b) for b in before[1:]]
    run_dir = work / "run-chat"
    _bench(["--base-url", url, "--dataset", str(dataset), "--concurrency", "1", "--num-prompts", str(N_REQUESTS),
            "--max-tokens", "64", "--ignore-eos", "--warmup", "1", "--seed", str(seed), "--run-dir", str(run_dir)])
    deltas, client_rate, server_rate = [], [], []
    for rel, r in _replies(run_dir):
        if r.get("status") != 200 or r.get("error"):
            continue
        t, n = r["server_timings"], r["usage"]["completion_tokens"]
        deltas.append(r["ttft_ms"] - t["prompt_ms"])
        client_rate.append((n - 1) / ((r["e2el_ms"] - r["ttft_ms"]) / 1e3))
        server_rate.append(t["predicted_per_second"])
        floors.append(floor(json.loads((run_dir / "inputs" / ENGINE / "load-c1" / rel).read_text())))
    return _summary(deltas, floors, client_rate, server_rate)


def completions_run(url: str, model: str, work: Path, seed: int) -> dict[str, Any]:
    """The text endpoint: the same medium prompts as plain text, 32 tokens each with ignore_eos."""
    texts = [p.messages[-1]["content"] for p in load_prompt_set("dev").prompts
             if p.bucket == "medium" and p.messages is not None]
    dataset = work / "text.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"t{i}", "bucket": "medium", "prompt": t}) + "\n"
                               for i, t in enumerate(texts)))

    def floor(prompt: str) -> float:
        body = {"model": model, "prompt": _tag() + prompt, "max_tokens": 4, "ignore_eos": True, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        return raw_ttft_minus_prompt_ms(url, body, COMPLETIONS)

    floor(texts[-1])
    floors = [floor(t) for t in texts[:FLOOR_EACH_SIDE]]
    run_dir = work / "run-text"
    _bench(["--base-url", url, "--dataset", str(dataset), "--concurrency", "1", "--num-prompts", str(N_REQUESTS),
            "--max-tokens", "32", "--ignore-eos", "--warmup", "1", "--seed", str(seed), "--run-dir", str(run_dir)])
    deltas = [r["ttft_ms"] - r["server_timings"]["prompt_ms"] for _, r in _replies(run_dir)
              if r.get("status") == 200 and not r.get("error")]
    floors += [floor(t) for t in texts[FLOOR_EACH_SIDE:2 * FLOOR_EACH_SIDE]]
    return _summary(deltas, floors, [], [])


VLLM_TOLERANCE = 0.10


def _vllm_histogram(url: str) -> tuple[float, float]:
    """(``_sum`` seconds, ``_count``) of ``vllm:time_to_first_token_seconds`` over all label sets."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:  # noqa: S310 (loopback)
        text = r.read().decode()
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        for kind in total:
            if name == f"vllm:time_to_first_token_seconds_{kind}":
                total[kind] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def vllm_run(url: str, work: Path, seed: int) -> dict[str, Any]:
    """Mean client TTFT against vLLM's own TTFT histogram over the same requests."""
    s0, c0 = _vllm_histogram(url)
    run_dir = work / "run-vllm"
    _bench(["--base-url", url, "--concurrency", "1,2", "--num-prompts", str(N_REQUESTS), "--max-tokens", "32",
            "--warmup", "0", "--seed", str(seed), "--run-dir", str(run_dir)])
    s1, c1 = _vllm_histogram(url)
    client = [json.loads(p.read_text())["ttft_ms"] for p in (run_dir / "outputs").rglob("load-*/*/*.json")]
    client = [t for t in client if t is not None]
    server_ms = (s1 - s0) / (c1 - c0) * 1e3 if c1 > c0 else None
    client_ms = statistics.fmean(client) if client else None
    ratio = client_ms / server_ms if client_ms and server_ms else None
    return {"n_client": len(client), "n_server": c1 - c0, "client_mean_ms": client_ms, "server_mean_ms": server_ms,
            "ratio": ratio, "held": ratio is not None and 1.0 <= ratio <= 1 + VLLM_TOLERANCE and c1 - c0 == len(client),
            "load_avg_1m": os.getloadavg()[0]}


def _vllm_main(a: argparse.Namespace, work: Path) -> int:
    started = None if a.upstream else start_engine("vllm", work / "engine", tie_to_parent=True)
    url = a.upstream or (started.url if started else "")
    runs = []
    try:
        for i in range(a.runs):
            (work / f"run{i}").mkdir()
            r = vllm_run(url, work / f"run{i}", seed=5 + i)
            print(f"[{i + 1}/{a.runs}] vllm: client mean {r['client_mean_ms']} ms vs server {r['server_mean_ms']} ms "
                  f"(n {r['n_client']}/{r['n_server']}), ratio {r['ratio']}, load {r['load_avg_1m']:.2f}",
                  file=sys.stderr)
            runs.append(r)
    finally:
        if started is not None:
            stop_engine(started)
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    med = statistics.median(ratios) if ratios else None
    held = med is not None and 1.0 <= med <= 1 + VLLM_TOLERANCE
    date = dt.datetime.now(dt.UTC)
    name = f"timing_agreement-vllm-{date:%Y%m%d-%H%M}.json"
    path = Path(a.json) if a.json else ROOT / "benchmarks" / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": date.isoformat(timespec="seconds"), "engine": "vllm", "url": url,
                                "bound": {"ratio": [1.0, 1 + VLLM_TOLERANCE]}, "median_ratio": med, "held": held,
                                "runs": runs}, indent=1))
    print(f"vllm: client/server mean TTFT, median run {med}: {'held' if held else 'NOT HELD'} (bound 1.0–1.1)")
    print(f"written: {path}")
    return 0 if held else 1


def _line(name: str, s: dict[str, Any]) -> str:
    d, f = s["client_ttft_minus_prompt_ms"], s["server_floor_ms"]
    rate = ("" if s["decode_rate_ratio_p50"] is None
            else f"; decode rate client/server p50 {100 * (s['decode_rate_ratio_p50'] - 1):+.2f}%")
    return (f"{name}: n {s['n']}, client TTFT − prompt_ms p50 {d['p50']:.2f} ms (min {d['min']:.2f}, max "
            f"{d['max']:.2f}); server floor p50 {f['p50']:.2f} ms (n {f['n']}); client share "
            f"{s['client_share_ms']:+.2f} ms{rate}; load avg {s['load_avg_1m']:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="whole measurements (default 3; the median run is judged)")
    ap.add_argument("--upstream", help="a running llama-server (default: start one with 4 slots)")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name for the floor requests")
    ap.add_argument("--json", help="results file (default benchmarks/results/timing_agreement-<date>.json)")
    ap.add_argument("--engine", default=ENGINE, choices=(ENGINE, "vllm"),
                    help="llama-server (prompt_ms and predicted_per_second) or vllm (its TTFT histogram)")
    a = ap.parse_args()
    if a.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ik-timing-"))
    if a.engine == "vllm":
        return _vllm_main(a, work)
    started = None
    if a.upstream:
        url = a.upstream
    else:
        started = start_engine(ENGINE, work / "engine", tie_to_parent=True, parallel=4)
        url = started.url
    model = started.model_name if started is not None else a.model
    runs: list[dict[str, Any]] = []
    try:
        for i in range(a.runs):
            run_work = work / f"run{i}"
            run_work.mkdir()
            chat = chat_run(url, model, run_work, seed=3 + i)
            text = completions_run(url, model, run_work, seed=3 + i)
            print(_line(f"[{i + 1}/{a.runs}] chat", chat), file=sys.stderr)
            print(_line(f"[{i + 1}/{a.runs}] text", text), file=sys.stderr)
            runs.append({"chat": chat, "completions": text})
    finally:
        if started is not None:
            stop_engine(started)
    verdicts: dict[str, Any] = {}
    for ep in ("chat", "completions"):
        shares = sorted(r[ep]["client_share_ms"] for r in runs)
        med = statistics.median(shares)
        verdicts[ep] = {"client_share_ms_median_run": med, "client_share_held": med <= CLIENT_SHARE_MS,
                        "client_share_ms_runs": shares}
        ratios = [r[ep]["decode_rate_ratio_p50"] for r in runs if r[ep]["decode_rate_ratio_p50"] is not None]
        if ratios:
            verdicts[ep] |= {"decode_rate_ratio_median_run": statistics.median(ratios),
                             "decode_rate_held": abs(statistics.median(ratios) - 1) <= RATE_TOLERANCE}
    date = dt.datetime.now(dt.UTC)
    path = Path(a.json) if a.json else ROOT / "benchmarks" / "results" / f"timing_agreement-{date:%Y%m%d-%H%M}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": date.isoformat(timespec="seconds"), "engine": ENGINE, "url": url,
                                "cores": os.cpu_count(), "bounds": {"client_share_ms": CLIENT_SHARE_MS,
                                                                    "decode_rate_tolerance": RATE_TOLERANCE},
                                "verdicts": verdicts, "runs": runs}, indent=1))
    held = all(v["client_share_held"] and v.get("decode_rate_held", True) for v in verdicts.values())
    for ep, v in verdicts.items():
        print(f"{ep}: client share over the server floor, median run {v['client_share_ms_median_run']:+.2f} ms "
              f"(bound {CLIENT_SHARE_MS} ms): {'held' if v['client_share_held'] else 'NOT HELD'}"
              + ("" if "decode_rate_held" not in v else
                 f"; decode rate {100 * (v['decode_rate_ratio_median_run'] - 1):+.2f}% (±{100 * RATE_TOLERANCE:.0f}%): "
                 f"{'held' if v['decode_rate_held'] else 'NOT HELD'}"))
    print(f"written: {path}")
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
