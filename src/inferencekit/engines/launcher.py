"""Start a local engine on a free loopback port, wait until it answers, stop it, explain a crash.

The engine runs in its own process group with stdout and stderr in a log file. Readiness is an
HTTP 200 from the recipe's health path. If the process exits first (SIGILL from a native llama.cpp
build on a CPU whose AMX the VM disables, the OOM killer's SIGKILL, a bad flag), ``start_engine``
raises an ``OpError`` that names the signal, the log file and its last lines.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inferencekit.engines.recipes import Recipe, recipe
from inferencekit.errors import OpError
from inferencekit.rundir import data_home, read_json

__all__ = ["READY_CAP", "RunningEngine", "free_port", "start_engine", "stop_engine", "log_tail", "http_ok", "pid_alive",
           "port_free", "state_dir", "engine_states"]

READY_CAP = 6  # an engine whose log keeps growing is waited for, up to this many times its ready timeout in all

_SIGNAL_HINTS = {
    signal.SIGILL: "illegal instruction: the binary uses a CPU feature this machine does not enable (a llama.cpp "
                   "built with GGML_NATIVE=ON on a VM that hides AMX does this); rebuild with GGML_NATIVE=OFF",
    signal.SIGKILL: "killed: most often the kernel's OOM killer (not enough memory for the model and KV cache)",
    signal.SIGSEGV: "segmentation fault inside the engine",
    signal.SIGABRT: "the engine aborted (an assertion or fatal error; see the log)",
}


# Engines started by this process, so they can be reaped (and Popen does not warn about them).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(slots=True)
class RunningEngine:
    """A started engine. ``url`` is its root (no ``/v1``)."""

    engine: str
    pid: int
    port: int
    url: str
    log_path: str
    argv: list[str]
    started_at: float
    ready_s: float
    model_name: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port`` (a bind succeeds). With ``SO_REUSEADDR``, as the servers bind
    (llama-server, uvicorn): connections of an engine just stopped, left in TIME_WAIT for a minute, do not keep the
    port from a new one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def log_tail(path: Path | str, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 (loopback URLs we built)
            ok: bool = r.status == 200
            return ok
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exit_text(code: int) -> str:
    if code < 0:
        sig = signal.Signals(-code)
        hint = _SIGNAL_HINTS.get(sig, "")
        return f"was killed by signal {-code} ({sig.name}{': ' + hint if hint else ''})"
    return f"exited with code {code}"


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when its parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the engine outlives a killed parent


def start_engine(engine: str, log_dir: Path, *, port: int | None = None, threads: int | None = None,
                 parallel: int = 4, ctx_size: int = 4096, extra: tuple[str, ...] = (),
                 ready_timeout_s: float | None = None, rec: Recipe | None = None,
                 tie_to_parent: bool = False, gguf: Path | None = None) -> RunningEngine:
    """Start ``engine`` and return once it answers its health path.

    Args:
        log_dir: folder for ``<engine>-<port>.log`` (created).
        port: loopback port (default: a free one).
        ready_timeout_s: how long the engine's log may stay unchanged while it does not answer yet (default: the
            recipe's); a busy machine loads slowly, so the wait follows the log's progress, capped at ``READY_CAP``
            times this in all.
        rec: a prepared recipe (tests); default ``recipe(engine, port, ...)``.
        gguf: another model file for the llama.cpp engines (``recipe``'s ``gguf``).
        tie_to_parent: stop the engine when this process dies, even by SIGKILL (engines started for one
            command or a test session); ``engine up`` leaves it False so the engine outlives the command.

    Raises:
        OpError: the engine is not installed, exits before it is ready (signal, log path and log
            tail in the message), or does not answer before its log goes quiet for the timeout (it is then
            stopped).
    """
    port = port or free_port()
    rec = rec or recipe(engine, port, threads=threads, parallel=parallel, ctx_size=ctx_size, extra=extra, gguf=gguf)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{engine}-{port}.log"
    env = {**os.environ, **rec.env}
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"# inferencekit: {' '.join(rec.argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(rec.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent if tie_to_parent else None)
    _CHILDREN[proc.pid] = proc
    url = f"http://127.0.0.1:{port}"
    quiet_s = ready_timeout_s or rec.ready_timeout_s
    deadline, hard_deadline, last_size = t0 + quiet_s, t0 + READY_CAP * quiet_s, -1
    while True:
        code = proc.poll()
        if code is not None:
            _CHILDREN.pop(proc.pid, None)
            raise OpError(f"engine {engine} {_exit_text(code)} before it was ready. Log: {log_path}\n"
                          f"--- last lines ---\n{log_tail(log_path)}")
        if http_ok(url + rec.health_path, timeout_s=2.0):
            break
        size = log_path.stat().st_size if log_path.exists() else 0
        if size != last_size:  # still loading (engines log each stage): wait on progress, not on a fixed time
            last_size, deadline = size, time.monotonic() + quiet_s
        if time.monotonic() > min(deadline, hard_deadline):
            _terminate(proc.pid)
            raise OpError(f"engine {engine} did not answer {rec.health_path}: its log stayed unchanged for "
                          f"{quiet_s:g} s, or {READY_CAP * quiet_s:g} s passed in all; stopped it. Log: {log_path}\n"
                          f"--- last lines ---\n{log_tail(log_path)}")
        time.sleep(0.25)
    return RunningEngine(engine, proc.pid, port, url, str(log_path), list(rec.argv), time.time(),
                         round(time.monotonic() - t0, 2), rec.model_name)


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``, SIGKILL after ``grace_s``, and reap it."""
    proc = _CHILDREN.pop(pid, None)
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        if proc is not None:
            proc.wait()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if (proc.poll() is not None) if proc is not None else not pid_alive(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc is not None:
        proc.wait()


def stop_engine(eng: RunningEngine | dict[str, Any], grace_s: float = 10.0) -> None:
    """Stop a started engine (SIGTERM to its process group, SIGKILL after ``grace_s``)."""
    pid = eng.pid if isinstance(eng, RunningEngine) else int(eng["pid"])
    _terminate(pid, grace_s)



def state_dir() -> Path:
    """Where ``engine up`` keeps one state file per engine it left running (``$INFERENCEKIT_HOME/engines``)."""
    return data_home() / "engines"


def engine_states() -> list[dict[str, Any]]:
    """The state files of the engines ``engine up`` started, by name, each with its ``_file`` path added."""
    d = state_dir()
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        s = read_json(p)
        if isinstance(s, dict):
            out.append({**s, "_file": str(p)})
    return out
