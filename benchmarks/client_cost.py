#!/usr/bin/env python3
"""What inferencekit's own HTTP client costs, measured against the synthetic SSE server.

    .venv/bin/python benchmarks/client_cost.py [--only cpu,scale,accuracy] [--json FILE]
    make bench-client

The server is ``shared/perf/sse_server.py`` (never the bottleneck: 3-5 µs CPU per event). The method
is ``shared/perf/METHOD.md``'s, so the figures sit beside the peers' (vLLM bench serve, GuideLLM,
AIPerf): the server runs pinned to core 1 (with this script's sampler), every client process to core
0; each scenario is a fresh client process; its CPU is sampled with psutil every 50 ms and
interpolated at the server-observed window [first request arrival, last event]; chunks are the token
events the server sent (usage chunk and [DONE] not counted); ground truth comes from the server's
``/stats``, joined to the client's reply files by ``X-Request-ID``.

Scenarios (chat, streaming, ~128-token prompts, 256 tokens out, closed loop):

- cpu        itl 0, c=64: CPU µs per chunk on the production path (``LoadRunner.run_level``: a journal
             line per finished request during the level, then an input and a reply file per request,
             every event kept, into a temporary run dir), then
             the same load through ``Client.post`` + ``Exchange.to_reply`` (no files) and through
             ``Client.post`` alone (nothing derived, nothing written): where the cost goes;
- scale      itl 20 ms, c=256 and c=1024, n=2c, LoadRunner: server chunks/s against the ideal
             c·256/(255·itl), streams in flight (server side), RSS growth per open stream, and how late
             each chunk's timestamp is against the server's write; c=1024 again through Client.post
             alone, to show what the post-stream work (derive + files) costs in throughput;
- accuracy   itl 5 ms, ttft 50 ms, c=64, n=6c, LoadRunner: per-request TTFT error = reply file's
             ttft_ms − server TTFT (first token event − request complete), and start→arrival; again
             with the files written after the level.

When the vLLM venv that `make vllm` builds exists, vLLM `bench serve` runs in the cpu group too, as a
reference measured the same way at the same moment (README's target: ≤ half its CPU per chunk).

Installs nothing: without uvloop/psutil (the server and the sampler need them) it prints the pip
command and exits 2. Internal: ``--child SPEC`` is one client process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SERVER = (REPO.parent / "shared" / "perf" / "sse_server.py")
ISL_WORDS = 128  # prompt words; the words are single tokens in common BPE vocabularies (~128 tokens)
OSL = 256
MODEL = "synthetic-model"
SERVER_CPU, CLIENT_CPU = 1, 0

# one-token common words (leading space in the text), for ~1 token per word
_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
          "had they you were their one all we can her has there been if more when will would who so no time year "
          "people way day man thing woman life child world school state family student group country problem hand "
          "part place case week company system program question work government number night point home water "
          "room mother area money story fact month lot right study book eye job word business issue side kind head "
          "house service friend father power hour game line end member law car city community name president team "
          "minute idea kid body information back parent face others level office door health person art war "
          "history party result change morning reason research girl guy moment air teacher force education").split()


# ----------------------------------------------------------------------------------------------------- child

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _prompts(n: int, words: int, seed: int = 0) -> list[Any]:
    from inferencekit.data.prompts import Prompt

    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join([_WORDS[i % len(_WORDS)], f"p{i}"] + rng.choices(_WORDS, k=words - 2))
        out.append(Prompt(id=f"random-{words}-{i}", bucket="random",
                          messages=({"role": "user", "content": text},), max_tokens=OSL))
    return out


async def _child_main(spec: dict[str, Any]) -> dict[str, Any]:
    from inferencekit.api.client import Client
    from inferencekit.api.endpoint import Endpoint
    from inferencekit.bench.plan import LevelSpec, Planner, request_body
    from inferencekit.bench.runner import LoadRunner, endpoint_path
    from inferencekit.rundir import RunDir, write_json

    mode, c, n = spec["mode"], spec["c"], spec["n"]
    planner = Planner(_prompts(spec.get("pool", 512), ISL_WORDS), seed=0)
    fixed = {"temperature": 0.0, "ignore_eos": True}
    optional = ("stream_options",)  # what bench serve marks optional for an OpenAI-dialect server

    def body_for(req: Any) -> dict[str, Any]:
        return request_body(req, model=MODEL, max_tokens=OSL, fixed=fixed)

    tmp = tempfile.mkdtemp(prefix="ik-client-cost-", dir=spec.get("tmp_parent") or None)
    res: dict[str, Any] = {"mode": mode, "c": c, "n": n, "pid": os.getpid(),
                           "loop": type(asyncio.get_running_loop()).__module__}
    try:
        run = RunDir.create(Path(tmp) / "run")
        async with Client(Endpoint.parse(f"http://127.0.0.1:{spec['port']}"), timeout_s=300) as client:
            runner = LoadRunner(client, run, "synthetic", body_for, optional=optional)
            # warm-up as bench serve does (2 requests, one at a time), then clear the server's ground truth
            await runner.warmup(planner, spec.get("warmup", 2))
            ex = await client.get("/stats?reset=1&summary=1")
            if ex.status != 200:
                raise RuntimeError(f"/stats?reset=1 failed: {ex.error}")
            counts: Counter[str] = Counter()
            errors: Counter[str] = Counter()
            res["rss_start_b"] = _rss_bytes()
            res["level_start_ns"] = time.monotonic_ns()
            cpu0 = _cpu_s()
            if mode == "runner":
                spec_l = LevelSpec(f"c{c}", "closed", concurrency=c)
                out = await runner.run_level(spec_l, planner, num_requests=n, duration_s=None, seed=0)
                counts.update(sent=out.sent, ok=out.ok, failed=out.failed)
            else:
                left = [n]
                kept: list[tuple[Any, Any]] = []

                async def worker() -> None:
                    while left[0] > 0:
                        left[0] -= 1
                        req = planner.take()
                        ex = await client.post(endpoint_path(req), body_for(req), optional=optional)
                        counts["sent"] += 1
                        if mode == "reply":
                            reply = ex.to_reply(id=req.prompt.id, engine="synthetic", level=f"c{c}",
                                                bucket=req.prompt.bucket)
                            bad = reply.get("error")
                        else:
                            if mode == "deferred":
                                kept.append((req, ex))
                            bad = ex.error or (None if ex.status == 200 else f"HTTP {ex.status}")
                        if bad:
                            counts["failed"] += 1
                            errors[str(bad)[:120]] += 1
                        else:
                            counts["ok"] += 1

                await asyncio.gather(*(worker() for _ in range(c)))
            res["cpu_level_s"] = _cpu_s() - cpu0
            res["level_end_ns"] = time.monotonic_ns()
            res["rss_end_b"] = _rss_bytes()
            if mode == "deferred":  # what "collect, then judge" would do: the same files, after the level
                for req, ex in kept:
                    body = body_for(req)
                    write_json(run.input_path("synthetic", f"c{c}", req.prompt.bucket, req.key), body)
                    reply = ex.to_reply(id=req.prompt.id, engine="synthetic", level=f"c{c}", bucket=req.prompt.bucket)
                    write_json(run.output_path("synthetic", f"c{c}", req.prompt.bucket, req.key), reply)
                kept.clear()
        res.update(counts)
        if mode in ("runner", "deferred"):
            files = list((run.path / "outputs").glob("synthetic/load-*/*/*.json"))
            res["reply_files"] = len(files)
            res["run_dir_bytes"] = sum(p.stat().st_size for kind in ("inputs", "outputs")
                                       for p in (run.path / kind).glob("synthetic/load-*/*/*.json"))
            if spec.get("collect"):
                import orjson
                per = []
                for p in files:
                    r = orjson.loads(p.read_bytes())
                    if r.get("error"):
                        errors[str(r["error"])[:120]] += 1
                    k = r.get("chunks") or 0  # token events come first on this server (then usage, [DONE])
                    per.append([r.get("request_id"), r.get("sent_ns"), r.get("ttft_ms"),
                                [int(t) for t, _ in (r.get("events") or [])[:k]]])
                res["per_request"] = per
        res["errors"] = errors.most_common(3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def child(spec_json: str) -> int:
    spec = json.loads(spec_json)
    if spec.get("loop") == "uvloop":
        import uvloop
        res = uvloop.run(_child_main(spec))
    else:
        res = asyncio.run(_child_main(spec))  # what `inferencekit bench serve` uses
    with open(spec["out"], "w") as f:
        json.dump(res, f)
    return 0


# ---------------------------------------------------------------------------------------------------- parent

def _get_json(url: str, timeout: float = 120) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_stat() -> dict[str, tuple[int, int]]:
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                parts = line.split()
                vals = list(map(int, parts[1:]))
                idle = vals[3] + vals[4]
                out[parts[0]] = (sum(vals) - idle, sum(vals))
    return out


def _interp(samples: list[tuple[int, float, int]], t: int, k: int = 1) -> float:
    if t <= samples[0][0]:
        return samples[0][k]
    for a, b in zip(samples, samples[1:]):
        if a[0] <= t <= b[0]:
            return a[k] + (b[k] - a[k]) * ((t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 0)
    return samples[-1][k]


def _pct(vals: list[float], p: float) -> float | None:
    if not vals:
        return None
    v = sorted(vals)
    k = (len(v) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


class Pinning:
    def __init__(self) -> None:
        self.cpus = sorted(os.sched_getaffinity(0))
        self.taskset = shutil.which("taskset")
        self.ok = SERVER_CPU in self.cpus and CLIENT_CPU in self.cpus
        if not self.ok:
            self.note = f"NOT pinned: this process may use CPUs {self.cpus}, need {CLIENT_CPU} and {SERVER_CPU}"
        elif self.taskset:
            self.note = (f"server + sampler on CPU {SERVER_CPU} (taskset -c {SERVER_CPU}), "
                         f"client on CPU {CLIENT_CPU} (taskset -c {CLIENT_CPU})")
        else:
            self.note = (f"taskset not found: pinned with sched_setaffinity instead (server + sampler CPU "
                         f"{SERVER_CPU}, client CPU {CLIENT_CPU})")

    def cmd(self, cpu: int, argv: list[str]) -> tuple[list[str], Any]:
        if not self.ok:
            return argv, None
        if self.taskset:
            return [self.taskset, "-c", str(cpu), *argv], None
        return argv, (lambda: os.sched_setaffinity(0, {cpu}))


class Server:
    def __init__(self, script: Path, pin: Pinning, itl_ms: float, ttft_ms: float, log_dir: Path) -> None:
        self.port = _free_port()
        argv, pre = pin.cmd(SERVER_CPU, [sys.executable, str(script), "--port", str(self.port),
                                         "--itl-ms", str(itl_ms), "--ttft-ms", str(ttft_ms)])
        self.log = open(log_dir / f"server-{self.port}.log", "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=pre)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                _get_json(self.url + "/health", timeout=1)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(f"the synthetic server did not start (see {self.log.name})") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def run_scenario(name: str, server: Server, pin: Pinning, spec: dict[str, Any], work: Path,
                 ideal_itl_ms: float | None, timeout_s: float, loop: str) -> dict[str, Any]:
    import psutil

    out_file = work / f"{name}.json"
    spec = {**spec, "port": server.port, "out": str(out_file), "loop": loop, "tmp_parent": str(work)}
    if spec["mode"] == "vllm":  # the reference peer, run as METHOD.md runs it
        _get_json(server.url + "/stats?reset=1&summary=1")
        cmd = [spec["python"], str(Path(spec["server_dir"]) / "vllm_bench_serve.py"), "--backend", "openai-chat",
               "--base-url", server.url, "--endpoint", "/v1/chat/completions", "--model", MODEL,
               "--tokenizer", spec["tokenizer"], "--dataset-name", "random", "--random-input-len", "128",
               "--random-output-len", str(OSL), "--num-prompts", str(spec["n"]), "--max-concurrency", str(spec["c"]),
               "--ignore-eos", "--disable-tqdm"]
        os.environ["HF_HUB_OFFLINE"] = "1"
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    argv, pre = pin.cmd(CLIENT_CPU, cmd)
    load0 = os.getloadavg()
    stats: list[tuple[int, dict[str, tuple[int, int]]]] = [(time.monotonic_ns(), _proc_stat())]
    log = open(work / f"{name}.log", "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pre, cwd=work)
    pr = psutil.Process(p.pid)
    samples: list[tuple[int, float, int]] = []
    deadline = time.monotonic() + timeout_s
    while p.poll() is None:
        try:
            with pr.oneshot():
                ct = pr.cpu_times()
                rss = pr.memory_info().rss
            now = time.monotonic_ns()
            samples.append((now, ct.user + ct.system, rss))
            stats.append((now, _proc_stat()))
        except psutil.Error:
            pass
        if time.monotonic() > deadline:
            p.kill()
        time.sleep(0.05)
    log.close()
    rc = p.wait()
    if rc != 0 or (spec["mode"] != "vllm" and not out_file.exists()):
        tail = (work / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"scenario {name}: client exited {rc}\n{tail}")
    gt = _get_json(server.url + "/stats")
    if spec["mode"] == "vllm":
        done = sum(1 for q in gt["requests"] if q["stream"] and q["complete"])
        child_res = {"sent": len(gt["requests"]), "ok": done, "cpu_level_s": None, "rss_start_b": None}
    else:
        child_res = json.loads(out_file.read_text())
    summ = gt["summary"]
    w0, w1 = summ["window_first_arrival_ns"], summ["window_last_event_ns"]
    tok = summ["token_events"]
    r: dict[str, Any] = {"name": name, "mode": spec["mode"], "c": spec["c"], "n": spec["n"], "loop": loop,
                         "client": {k: v for k, v in child_res.items() if k != "per_request"},
                         "loadavg_before": load0, "loadavg_after": os.getloadavg(),
                         "server_cpu_s": gt["server_cpu_s"], "connections_max_open": gt["connections_max_open"],
                         "server_http_errors": gt["http_errors"], "token_events": tok}
    if not (w0 and w1 and w1 > w0 and samples):
        r["error"] = "no streaming window (nothing was streamed?)"
        return r
    win = (w1 - w0) / 1e9
    cpu_win = _interp(samples, w1) - _interp(samples, w0)
    r.update(window_s=win, cpu_s_in_window=cpu_win, us_per_chunk=1e6 * cpu_win / tok if tok else None,
             us_per_chunk_level=1e6 * child_res["cpu_level_s"] / tok if tok and child_res["cpu_level_s"] else None,
             us_per_chunk_whole_process=1e6 * samples[-1][1] / tok if tok else None,
             client_util=cpu_win / win, server_util=gt["server_cpu_s"] / win, chunks_per_s=tok / win)

    def stat_at(t: int) -> dict[str, tuple[int, int]]:
        return min(stats, key=lambda s: abs(s[0] - t))[1]

    s0, s1 = stat_at(w0), stat_at(w1)
    r["core_busy"] = {k: ((s1[k][0] - s0[k][0]) / (s1[k][1] - s0[k][1]) if s1[k][1] > s0[k][1] else None)
                      for k in s1}
    # streams in flight, server side: [request complete, last byte written]
    reqs = [q for q in gt["requests"] if q["stream"]]
    r["complete_streams"] = sum(1 for q in reqs if q["complete"])
    r["incomplete_streams"] = len(reqs) - r["complete_streams"]
    edges = []
    busy = 0
    for q in reqs:
        end = q["done_ns"] or (q["events_ns"][-1] if q["events_ns"] else q["arrival_ns"])
        busy += max(0, min(end, w1) - max(q["arrival_ns"], w0))
        edges += [(q["arrival_ns"], 1), (end, -1)]
    cur = peak = 0
    for _, d in sorted(edges):
        cur += d
        peak = max(peak, cur)
    r["mean_inflight"] = busy / (w1 - w0)
    r["max_inflight"] = peak
    if ideal_itl_ms:
        ideal = spec["c"] * OSL / ((OSL - 1) * ideal_itl_ms / 1e3)
        r["ideal_chunks_per_s"] = ideal
        r["pct_of_ideal"] = 100 * r["chunks_per_s"] / ideal
    in_win = [s[2] for s in samples if w0 <= s[0] <= w1] or [samples[-1][2]]
    r["rss_peak_mb"] = max(in_win) / 2**20
    if child_res["rss_start_b"]:
        r["rss_start_mb"] = child_res["rss_start_b"] / 2**20
        r["kb_per_stream"] = (max(in_win) - child_res["rss_start_b"]) / 1024 / max(1, peak)
    per = child_res.get("per_request")
    if per:
        by_rid = {q["x_request_id"]: q for q in reqs if q["complete"] and q.get("x_request_id")}
        err, lag, recv, stamp_lag, gaps_c, gaps_s = [], [], [], [], [], []
        for rid, sent_ns, ttft_ms, times in per:
            q = by_rid.get(rid)
            if q is None or ttft_ms is None or not q["events_ns"]:
                continue
            ev = q["events_ns"]
            srv_ttft = (ev[0] - q["arrival_ns"]) / 1e6
            err.append(ttft_ms - srv_ttft)
            lag.append((q["arrival_ns"] - sent_ns) / 1e6)
            recv.append((sent_ns + ttft_ms * 1e6 - ev[0]) / 1e6)
            m = min(len(times), q["n_tokens"], len(ev))
            stamp_lag += [(sent_ns + times[i] - ev[i]) / 1e6 for i in range(m)]
            gaps_c += [(times[i] - times[i - 1]) / 1e6 for i in range(1, m)]
            gaps_s += [(ev[i] - ev[i - 1]) / 1e6 for i in range(1, m)]
        r["stamps"] = {"events": len(stamp_lag), "lag_p50": _pct(stamp_lag, 50), "lag_p99": _pct(stamp_lag, 99),
                       "lag_max": max(stamp_lag) if stamp_lag else None,
                       "gap_p50_client": _pct(gaps_c, 50), "gap_p50_server": _pct(gaps_s, 50),
                       "gap_p99_client": _pct(gaps_c, 99), "gap_p99_server": _pct(gaps_s, 99)}
        r["ttft"] = {"paired": len(err), "of": len(per),
                     "err_p50": _pct(err, 50), "err_p99": _pct(err, 99), "err_max": max(err) if err else None,
                     "start_to_arrival_p50": _pct(lag, 50), "start_to_arrival_p99": _pct(lag, 99),
                     "write_to_stamp_p50": _pct(recv, 50), "write_to_stamp_p99": _pct(recv, 99),
                     "server_ttft_p50": _pct([(q["events_ns"][0] - q["arrival_ns"]) / 1e6 for q in by_rid.values()
                                              if q["events_ns"]], 50)}
    return r


def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, int) or abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def _busy(r: dict[str, Any]) -> str:
    """core 0 busy (client's share) / core 1 busy (server's share): the rest of each is other tenants."""
    cb = r.get("core_busy") or {}
    c0, c1 = cb.get(f"cpu{CLIENT_CPU}") or 0, cb.get(f"cpu{SERVER_CPU}") or 0
    return (f"{100 * c0:.0f}% ({100 * r.get('client_util', 0):.0f}) / "
            f"{100 * c1:.0f}% ({100 * r.get('server_util', 0):.0f})")


def report(results: list[dict[str, Any]], pin: Pinning, started: float, load_start: tuple[float, ...]) -> str:
    by = {r["name"]: r for r in results}
    L = []
    model = ""
    try:
        model = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import aiohttp

    L.append(f"machine: {os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, aiohttp "
             f"{aiohttp.__version__}, kernel {platform.release()}; {pin.note}")
    L.append(f"load average at start {' '.join(f'{x:.2f}' for x in load_start)}, at end "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; total {time.monotonic() - started:.0f} s")
    L.append("")
    if any(k in by for k in ("cpu-runner", "cpu-reply", "cpu-post", "cpu-vllm")):
        L.append("## CPU per streamed chunk: itl 0, c=64, chat, stream, ~128-token prompts, 256 tokens out")
        L.append("")
        L.append("| path | µs CPU/chunk (window) | µs/chunk (level) | chunks/s | core0 busy (client %) / core1 busy "
                 "(server %) | requests ok/sent | peak RSS MB | load avg (1 min) |")
        L.append("|---|---|---|---|---|---|---|---|")
    names = {"cpu-vllm": "reference: vLLM `bench serve` (same server, same moment)",
             "cpu-runner": "LoadRunner.run_level (journal line per request; input + reply files after the level)",
             "cpu-reply": "Client.post + Exchange.to_reply (no files)",
             "cpu-post": "Client.post only (nothing derived or written)"}
    for key, label in names.items():
        r = by.get(key)
        if not r:
            continue
        c = r["client"]
        L.append(f"| {label} | **{_f(r.get('us_per_chunk'), 2)}** | {_f(r.get('us_per_chunk_level'), 2)} | "
                 f"{_f(r.get('chunks_per_s'))} | {_busy(r)} | "
                 f"{c.get('ok', 0)}/{c.get('sent', 0)} | {_f(r.get('rss_peak_mb'), 0)} | "
                 f"{r['loadavg_before'][0]:.2f} |")
    if by.get("cpu-vllm") and by.get("cpu-runner"):
        v, a = by["cpu-vllm"].get("us_per_chunk"), by["cpu-runner"].get("us_per_chunk")
        if v and a:
            L.append("")
            L.append(f"LoadRunner / vLLM bench serve = {a / v:.2f} (target in shared/perf/README.md: ≤ 0.5)")
    if by.get("cpu-runner") and by.get("cpu-post") and by.get("cpu-reply"):
        a, b, c = (by[k].get("us_per_chunk") or 0 for k in ("cpu-runner", "cpu-reply", "cpu-post"))
        L.append("")
        L.append(f"split (window figures): stream loop + aiohttp {c:.2f} µs, "
                 "to_reply (SSE split + JSON parse + derive) "
                 f"{b - c:+.2f} µs, files (input + reply JSON encode + atomic write) {a - b:+.2f} µs per chunk")
        cr = by["cpu-runner"]["client"]
        if cr.get("run_dir_bytes") and cr.get("reply_files"):
            L.append(f"reply files: {cr['reply_files']} files, "
                     f"{cr['run_dir_bytes'] / cr['reply_files'] / 1024:.0f} KiB "
                     "per request on disk (input + reply)")
    scale = [(k, by[k]) for k in ("scale-c256", "scale-c1024", "scale-c1024-deferred") if k in by]
    if scale:
        L.append("")
        L.append("## Streams from one process: itl 20 ms, n = 2c")
        L.append("")
        L.append("| c, path | chunks/s (server) | ideal | % of ideal | mean in flight | max in flight | "
                 "max open conns | "
                 "core0 (client) / core1 (server) busy % | µs CPU/chunk | RSS start → peak MB | KiB per open stream | "
                 "ok/sent | load avg |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for _, r in scale:
            c = r["client"]
            L.append(f"| {r['c']}, {_PATHS[r['mode']]} | {_f(r.get('chunks_per_s'))} | "
                     f"{_f(r.get('ideal_chunks_per_s'))} | "
                     f"**{_f(r.get('pct_of_ideal'), 1)}%** | {_f(r.get('mean_inflight'), 0)} | "
                     f"{r.get('max_inflight')} | "
                     f"{r.get('connections_max_open')} | {_busy(r)} | "
                     f"{_f(r.get('us_per_chunk'), 1)} | {_f(r.get('rss_start_mb'), 0)} → "
                     f"{_f(r.get('rss_peak_mb'), 0)} | "
                     f"{_f(r.get('kb_per_stream'), 0) if r['mode'] != 'deferred' else '(keeps all)'} | "
                     f"{c.get('ok', 0)}/{c.get('sent', 0)} | {r['loadavg_before'][0]:.2f} |")
    st = [(k, by[k]) for k in ("scale-c256", "scale-c1024", "scale-c1024-deferred", "accuracy-c64",
                               "accuracy-c64-deferred") if by.get(k, {}).get("stamps")]
    if st:
        L.append("")
        L.append("Chunk timestamps vs server writes (reply file event time − server write() time, every token event):")
        L.append("")
        L.append("| scenario | events | stamp lag p50 | p99 | max | gap-ITL p50 client / server | "
                 "gap-ITL p99 client / server |")
        L.append("|---|---|---|---|---|---|---|")
        for k, r in st:
            x = r["stamps"]
            L.append(f"| {k} | {x['events']:,} | {_f(x['lag_p50'], 2)} ms | {_f(x['lag_p99'], 2)} ms | "
                     f"{_f(x['lag_max'], 1)} ms | {_f(x['gap_p50_client'], 2)} / {_f(x['gap_p50_server'], 2)} ms | "
                     f"{_f(x['gap_p99_client'], 2)} / {_f(x['gap_p99_server'], 2)} ms |")
    accs = [(k, by[k]) for k in ("accuracy-c64", "accuracy-c64-deferred") if by.get(k, {}).get("ttft")]
    if accs:
        L.append("")
        L.append("## TTFT error vs server ground truth: itl 5 ms, ttft 50 ms, c=64, n=384")
        L.append("")
        L.append("| path | TTFT error p50 | p99 | max | start→arrival p50 / p99 | "
                 "server write→client stamp p50 / p99 | "
                 "server TTFT p50 | paired | chunks/s / ideal | core0 (client) / core1 (server) busy % |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        ideal = 64 * OSL / (0.050 + (OSL - 1) * 0.005)
        for _, acc in accs:
            t = acc["ttft"]
            L.append(f"| {_PATHS[acc['mode']]} | **{t['err_p50']:+.2f} ms** | **{t['err_p99']:+.2f} ms** | "
                     f"{t['err_max']:+.2f} ms | "
                     f"{_f(t['start_to_arrival_p50'], 2)} / {_f(t['start_to_arrival_p99'], 2)} ms | "
                     f"{_f(t['write_to_stamp_p50'], 2)} / {_f(t['write_to_stamp_p99'], 2)} ms | "
                     f"{_f(t['server_ttft_p50'], 2)} ms | {t['paired']}/{t['of']} | "
                     f"{_f(acc.get('chunks_per_s'))} / {_f(ideal)} | {_busy(acc)} |")
    shared = [r["name"] for r in results
              if (r.get("core_busy") or {}).get(f"cpu{CLIENT_CPU}", 0) - r.get("client_util", 0) > 0.15]
    if shared:
        L.append("")
        L.append(f"NOTE: other processes took > 15% of the client's core during {', '.join(shared)}: read the "
                 "throughput and timing figures there as that contention, not as the client's own limit.")
    errs = [(r["name"], r["client"].get("errors")) for r in results if r["client"].get("errors")]
    for name, e in errs:
        L.append(f"errors in {name}: {e}")
    L.append("")
    L.append("Method (shared/perf/METHOD.md):")
    L.append("- µs CPU/chunk (window): client process CPU (user+sys, psutil every 50 ms from core 1, interpolated) "
             "inside [first request arrival, last event] as the server saw it ÷ token events the server sent "
             "(usage, [DONE] excluded).")
    L.append("- µs/chunk (level): the client's getrusage over LoadRunner.run_level / the post loop ÷ the same events "
             "(adds the final replies' processing after the last event).")
    L.append("- chunks/s: server token events ÷ window; ideal at itl 20 ms = c·256/(255·20 ms) (METHOD.md); "
             "in flight = "
             "server-side streams between request complete and last byte written (time-weighted mean; max).")
    L.append("- KiB per open stream: (client RSS peak in the window − RSS at level start) ÷ max streams in flight "
             "(an upper bound: includes buffers of replies being derived/written).")
    L.append("- TTFT error: reply file ttft_ms − server (first token event write − request complete), joined by "
             "X-Request-ID; start→arrival = server request-complete − Exchange.sent_ns (both CLOCK_MONOTONIC).")
    L.append("- LoadRunner = the production path (each finished exchange appended raw to the level journal; "
             "the input and reply files derived and written after the level); "
             "'Client.post, files after the level' keeps each Exchange and writes the same files once the level ends "
             "(what deferring the per-request work would give).")
    L.append("- each scenario: a fresh client process (asyncio loop, as `inferencekit bench serve`), "
             "2 warm-up requests, "
             "then /stats?reset=1; core0/core1 busy = /proc/stat over the window (other tenants show up there).")
    return "\n".join(L)


_PATHS = {"runner": "LoadRunner", "reply": "Client.post + to_reply", "post": "Client.post",
          "deferred": "Client.post, files after the level"}

SCENARIOS = {
    # name: (server phase, client spec)
    "cpu-runner": ("itl0", {"mode": "runner", "c": 64}),
    "cpu-vllm": ("itl0", {"mode": "vllm", "c": 64}),
    "cpu-reply": ("itl0", {"mode": "reply", "c": 64}),
    "cpu-post": ("itl0", {"mode": "post", "c": 64}),
    "scale-c256": ("itl20", {"mode": "runner", "c": 256, "n": 512, "collect": True}),
    "scale-c1024": ("itl20", {"mode": "runner", "c": 1024, "n": 2048, "pool": 1024, "collect": True}),
    "scale-c1024-deferred": ("itl20", {"mode": "deferred", "c": 1024, "n": 2048, "pool": 1024, "collect": True}),
    "accuracy-c64": ("acc", {"mode": "runner", "c": 64, "n": 384, "collect": True}),
    "accuracy-c64-deferred": ("acc", {"mode": "deferred", "c": 64, "n": 384, "collect": True}),
}
PHASES = {"itl0": (0.0, 0.0, None), "itl20": (20.0, 0.0, 20.0), "acc": (5.0, 50.0, None)}
GROUPS = {"cpu": ["cpu-runner", "cpu-vllm", "cpu-reply", "cpu-post"],
          "scale": ["scale-c256", "scale-c1024", "scale-c1024-deferred"],
          "accuracy": ["accuracy-c64", "accuracy-c64-deferred"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--only", default="cpu,scale,accuracy", help="groups to run: cpu, scale, accuracy (comma list)")
    ap.add_argument("--server", default=str(DEFAULT_SERVER), help="path of sse_server.py")
    ap.add_argument("--cpu-requests", type=int, default=1500, help="requests per cpu scenario (256 chunks each)")
    ap.add_argument("--client-loop", choices=["asyncio", "uvloop"], default="asyncio",
                    help="event loop of the client process (production uses asyncio)")
    ap.add_argument("--vllm-python", default="auto",
                    help="a Python with vllm(-cpu): adds vLLM `bench serve` as a reference row in the CPU table, "
                    "measured the same way in the same run. 'auto' (default): the venv `make vllm` made "
                    "(<cache>/vllm-0.32.0/venv) when it exists; 'none' skips it")
    ap.add_argument("--tokenizer", default="auto", help="HF tokenizer dir for vLLM's random prompts ('auto': "
                    "<cache>/models/smollm2-135m-instruct-f32 from `make vllm`)")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    a = ap.parse_args()
    if a.child:
        return child(a.child)

    missing = []
    for mod in ("uvloop", "psutil", "orjson", "numpy", "aiohttp", "inferencekit"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        pkgs = " ".join(m for m in missing if m != "inferencekit")
        print(f"client_cost.py needs {', '.join(missing)} (the synthetic server needs uvloop, orjson, psutil, numpy; "
              f"the sampler psutil). Install them into this interpreter and re-run:\n"
              f"  {sys.executable} -m pip install {pkgs}" + ("\n  (and `pip install -e .` for inferencekit)"
                                                             if "inferencekit" in missing else ""), file=sys.stderr)
        return 2
    server_script = Path(a.server)
    if not server_script.is_file():
        print(f"synthetic server not found at {server_script}; pass --server PATH/sse_server.py", file=sys.stderr)
        return 2
    wanted = [s for g in a.only.split(",") for s in GROUPS.get(g.strip(), [])]
    cache = Path(os.environ.get("INFERENCEKIT_CACHE") or os.environ.get("XDG_CACHE_HOME")
                 or Path.home() / ".cache") / ("" if os.environ.get("INFERENCEKIT_CACHE") else "inferencekit")
    vpy = a.vllm_python
    if vpy == "auto":
        vpy = str(cache / "vllm-0.32.0" / "venv" / "bin" / "python")
        vpy = vpy if os.access(vpy, os.X_OK) else None
    elif vpy == "none":
        vpy = None
    tok = a.tokenizer if a.tokenizer != "auto" else str(cache / "models" / "smollm2-135m-instruct-f32")
    if vpy and not (Path(tok) / "tokenizer.json").is_file():
        if a.vllm_python != "auto":
            print(f"--vllm-python needs --tokenizer DIR (an HF tokenizer); {tok} has no tokenizer.json",
                  file=sys.stderr)
            return 2
        vpy = None
    a.vllm_python, a.tokenizer = vpy, tok
    if not vpy:
        wanted = [s for s in wanted if s != "cpu-vllm"]
        if "cpu-runner" in wanted:
            print("no vLLM reference row (no vLLM venv from `make vllm`; or pass --vllm-python PY --tokenizer DIR)",
                  file=sys.stderr)
    if not wanted:
        print(f"--only: choose from {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    pin = Pinning()
    if pin.ok:
        os.sched_setaffinity(0, {SERVER_CPU})  # the sampler shares the server's core, never the client's
    started, load_start = time.monotonic(), os.getloadavg()
    print(f"{pin.note}; load average {' '.join(f'{x:.2f}' for x in load_start)}", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="ik-client-cost-") as td:
        work = Path(td)
        for phase, (itl, ttft, ideal_itl) in PHASES.items():
            names = [s for s in wanted if SCENARIOS[s][0] == phase]
            if not names:
                continue
            srv = Server(server_script, pin, itl, ttft, work)
            try:
                for name in names:
                    spec = dict(SCENARIOS[name][1])
                    if name.startswith("cpu-"):
                        spec["n"] = a.cpu_requests
                    if spec["mode"] == "vllm":
                        spec.update(python=a.vllm_python, tokenizer=a.tokenizer, server_dir=str(server_script.parent))
                    print(f"== {name} (itl {itl:g} ms, ttft {ttft:g} ms, c={spec['c']}, n={spec['n']}) "
                          f"load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
                    r = run_scenario(name, srv, pin, spec, work, ideal_itl, 300, a.client_loop)
                    results.append(r)
                    print(f"   {r.get('us_per_chunk') or 0:.2f} µs/chunk, {r.get('chunks_per_s') or 0:,.0f} chunks/s, "
                          f"window {r.get('window_s') or 0:.1f} s, "
                          f"ok {r['client'].get('ok')}/{r['client'].get('sent')}",
                          file=sys.stderr, flush=True)
                    time.sleep(1)
            finally:
                srv.stop()
    text = report(results, pin, started, load_start)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"results": results, "pinning": pin.note, "report": text}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
