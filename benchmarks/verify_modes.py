#!/usr/bin/env python3
"""How many requests and how much time does a sequential ``verify`` save, with the same verdicts? (issue 24, item 1)

    .venv/bin/python benchmarks/verify_modes.py [--engines embedded,llama-server] [--profiles quick,standard]
    make bench-verify-modes

For each engine and profile, ``verify --fixed`` (every trial of every plan sent) and ``verify`` (sequential: the
caching gate's pairs and the sampler check's draws stop once decided), one after the other with the same
``--seed``, each a fresh CLI process:

- ``embedded``: ``verify`` with no URL (it starts and stops the embedded engine, llama-cpp-python serving
  SmolLM2-135M-Instruct Q4_1). Requests are counted by the server: the generation POSTs in uvicorn's access log in
  the run dir's ``engine/`` folder (``http_requests``: every line).
- ``llama-server``: llama.cpp's llama-server ``--parallel 4`` (prompt cache on, its default), started here once,
  behind a pass-through ``cheat-proxy --cheat none`` per run whose generation-request counter is read when it stops
  (``http_requests``: every request, the telemetry's ``/metrics`` and ``/slots`` polls included, which grow with
  the wall time);
  ``--quality-reference embedded --claim Q4_1`` (llama-server serves the same GGUF), so the quality parts run as on
  the embedded engine.

The order within a pair alternates by profile (fixed first for quick, sequential first for standard), so neither
mode always runs on a machine warmed by the other. Writes ``benchmarks/results/verify_modes-<date>.json``
and prints one table: requests, wall time and every part's verdict for both modes. Run by hand, never by
``make test``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.engines.launcher import free_port, start_engine, stop_engine  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
ACCESS_LINE = re.compile(rb'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS) /\S* HTTP/1\.[01]" \d{3}')
GENERATION_LINE = re.compile(rb'"POST /v1/(?:chat/)?completions HTTP/1\.[01]" \d{3}')


def _wait_answers(url: str, limit_s: float = 60.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
                r.read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {limit_s:g} s")


class CountingProxy:
    """``inferencekit cheat-proxy --cheat none`` in front of ``upstream``; ``stop()`` returns its count of generation
    requests (POST to a chat-completions or completions path) and of every HTTP request (``/metrics`` and ``/slots``
    polls, model lists; this class's readiness check excluded)."""

    def __init__(self, upstream: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "inferencekit", "cheat-proxy", "--upstream", upstream, "--cheat", "none",
             "--port", str(self.port), "--json", "--quiet"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
        _wait_answers(self.url)

    def stop(self) -> tuple[int, int]:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=60)
        stats = json.loads(out)["stats"]
        return int(stats.get("generation", 0)), int(stats.get("requests", 0)) - 1  # less the readiness GET


def access_log_requests(run_dir: Path) -> tuple[int, int]:
    """Generation requests and all HTTP requests the embedded engine answered: uvicorn's access-log lines in
    ``run_dir/engine/*.log``."""
    logs = [p.read_bytes() for p in (run_dir / "engine").glob("*.log")]
    return sum(len(GENERATION_LINE.findall(b)) for b in logs), sum(len(ACCESS_LINE.findall(b)) for b in logs)


def run_verify(profile: str, fixed: bool, run_dir: Path, seed: int, url: str | None) -> dict[str, Any]:
    """One ``verify`` process: exit code, wall seconds, verdict and every part's verdict and reason."""
    cmd = [sys.executable, "-m", "inferencekit", "verify", "--profile", profile, "--seed", str(seed),
           "--run-dir", str(run_dir), "--json", "--quiet", *(["--fixed"] if fixed else [])]
    if url:
        cmd += ["--base-url", url, "--quality-reference", "embedded", "--claim", "Q4_1"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV, stdin=subprocess.DEVNULL)
    wall = round(time.monotonic() - t0, 1)
    row: dict[str, Any] = {"mode": "fixed" if fixed else "sequential", "exit_code": p.returncode, "wall_s": wall}
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:
        row["error"] = (p.stderr or p.stdout)[-800:]
        return row
    rec = json.loads((run_dir / "evidence" / f"{out['evidence_id']}.json").read_text())
    row["verdict"] = out.get("verdict")
    row["parts"] = [{"part": x["part"], "verdict": x["verdict"], "reason": str(x.get("reason") or "")[:300]}
                    for x in rec["data"]["parts"]]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per engine × profile × mode, then each part's verdicts side by side."""
    out = ["| engine | profile | mode | generation requests | all HTTP | wall s | verdict |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['engine']} | {r['profile']} | {r['mode']} | {r.get('requests', '?')} | "
                   f"{r.get('http_requests', '?')} | {r['wall_s']} | {r.get('verdict', 'error')} |")
    out += ["", "| engine | profile | part | fixed | sequential |", "|---|---|---|---|---|"]
    pairs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        pairs.setdefault((r["engine"], r["profile"]), {})[r["mode"]] = r
    for (engine, profile), modes in pairs.items():
        f, s = modes.get("fixed", {}), modes.get("sequential", {})
        names = [p["part"] for p in f.get("parts", s.get("parts", []))]
        fv = {p["part"]: p["verdict"] for p in f.get("parts", [])}
        sv = {p["part"]: p["verdict"] for p in s.get("parts", [])}
        for n in names:
            mark = "" if fv.get(n) == sv.get(n) else " ≠"
            out.append(f"| {engine} | {profile} | {n} | {fv.get(n)} | {sv.get(n)}{mark} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="embedded,llama-server")
    ap.add_argument("--profiles", default="quick,standard")
    ap.add_argument("--modes", default="fixed,sequential", help="which of the two modes to run")
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/verify_modes-<date>.json)")
    ap.add_argument("--work", default=None, help="folder for the run dirs, kept (default: a new temporary folder); "
                    "benchmarks/sampler_calibration.py replays the fixed runs' sampler draws from there")
    a = ap.parse_args()
    stamp = dt.datetime.now(dt.UTC)
    out = Path(a.out or ROOT / "benchmarks" / "results" / f"verify_modes-{stamp:%Y%m%d}.json")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="ik-verify-modes-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for engine in a.engines.split(","):
        eng = start_engine("llama-server", work / "engine", parallel=4) if engine == "llama-server" else None
        try:
            for profile in a.profiles.split(","):
                order = (True, False) if profile == "quick" else (False, True)
                for fixed in (f for f in order if ("fixed" if f else "sequential") in a.modes.split(",")):
                    run_dir = work / f"{engine}-{profile}-{'fixed' if fixed else 'seq'}"
                    proxy = CountingProxy(eng.url) if eng else None
                    try:
                        row = run_verify(profile, fixed, run_dir, a.seed, proxy.url if proxy else None)
                    finally:
                        requests, http = proxy.stop() if proxy else access_log_requests(run_dir)
                    row.update(engine=engine, profile=profile, requests=requests, http_requests=http,
                               run_dir=str(run_dir))
                    rows.append(row)
                    print(f"{engine} {profile} {row['mode']}: {row.get('verdict')} (exit {row['exit_code']}), "
                          f"{requests} requests, {row['wall_s']} s", file=sys.stderr, flush=True)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(json.dumps({"date": stamp.isoformat(timespec="seconds"), "seed": a.seed,
                                               "machine": f"{os.cpu_count()} CPUs", "rows": rows}, indent=1) + "\n")
        finally:
            if eng:
                stop_engine(eng)
    print(table(rows))
    print(f"\nwritten: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
