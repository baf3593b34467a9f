"""``inferencekit engine up|down|status``: local engines that outlive one command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.engines.launcher import (
    engine_states,
    http_ok,
    pid_alive,
    port_free,
    start_engine,
    state_dir,
    stop_engine,
)
from inferencekit.engines.recipes import ENGINES
from inferencekit.errors import OpError
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import RunDir, read_json, safe_name, write_json

__all__ = ["engine_down", "engine_status", "engine_up"]


@operation(("engine", "up"), "Start a local engine and leave it running.",
           description="Starts llama-cpp-python (the embedded default), llama.cpp's llama-server, or vLLM on CPU on a "
                       "free loopback port, waits until it answers, and prints its URL. The log goes to the run dir's "
                       "engine/ folder when --run-dir is given, else next to the engine's state file. A crash while "
                       "starting (SIGILL, OOM, early exit) is reported with the log's last lines. Stop it with "
                       "`inferencekit engine down`.",
           example="inferencekit engine up --engine llama-server --parallel 4",
           args=[Arg("engine", "string", "Which engine to start.", default="llama-cpp-python", choices=ENGINES),
                 Arg("name", "string", "Name to refer to it by in `engine down/status` (default: the engine name)."),
                 Arg("port", "integer", "Loopback port (default: a free one)."),
                 Arg("parallel", "integer", "llama-server: parallel slots.", default=4),
                 Arg("ctx_size", "integer", "Context length in tokens (per slot for llama-server).", default=4096),
                 Arg("threads", "integer",
                     "CPU threads for llama.cpp engines (default: all cores; llama-cpp-python: all but one)."),
                 Arg("run_dir", "string", "Keep the engine log in this run directory's engine/ folder.")])
def engine_up(call: Call, engine: str, name: str | None, port: int | None, parallel: int, ctx_size: int,
              threads: int | None, run_dir: str | None) -> Outcome:
    label = safe_name(name or engine, "--name")
    state_file = state_dir() / f"{label}.json"
    old = read_json(state_file)
    if isinstance(old, dict) and pid_alive(int(old.get("pid", 0))):
        raise OpError(f"an engine named {label} is already running at {old.get('url')} (pid {old.get('pid')}); "
                      f"stop it with `inferencekit engine down --name {label}` or pick another --name")
    log_dir = RunDir(Path(run_dir)).engine_dir if run_dir else state_dir()
    if port is not None and not 0 < port < 65536:
        raise OpError(f"--port {port} is not a TCP port (1-65535)")
    if port is not None and not port_free(port):
        raise OpError(f"port {port} on 127.0.0.1 is already in use; pick another --port or leave it out")
    eng = start_engine(engine, log_dir, port=port, threads=threads, parallel=parallel, ctx_size=ctx_size)
    state = {"name": label, **eng.to_dict()}
    write_json(state_file, state, indent=True)

    def render(console: Any) -> None:
        console.print(f"[bold green]up[/] {label}: {eng.url}  (pid {eng.pid}, ready in {eng.ready_s} s, "
                      f"model {eng.model_name})")
        console.print(f"log: {eng.log_path}", markup=False)

    return Outcome(state, None, render)


@operation(("engine", "down"), "Stop engines started with `engine up`.",
           description="Sends SIGTERM to the engine's process group (SIGKILL after 10 s) and forgets it. Without "
                       "--name, stops every engine this tool started.",
           example="inferencekit engine down --name llama-server",
           args=[Arg("name", "string", "The engine's name (default: all).")])
def engine_down(call: Call, name: str | None) -> Outcome:
    states = [s for s in engine_states() if name is None or s.get("name") == name]
    if name and not states:
        raise OpError(f"no engine named {name!r} was started with `inferencekit engine up`")
    stopped = []
    for s in states:
        if pid_alive(int(s["pid"])):
            stop_engine(s)
        Path(s["_file"]).unlink(missing_ok=True)
        stopped.append(s["name"])
    return Outcome({"stopped": stopped}, None, lambda c: c.print(f"stopped: {', '.join(stopped) or 'nothing'}"))


@operation(("engine", "status"), "List engines started with `engine up` and whether they answer.",
           description="For each engine: name, URL, pid, whether the process is alive and whether it answers "
                       "/v1/models, and its log file.",
           example="inferencekit engine status --json")
def engine_status(call: Call) -> Outcome:
    rows = []
    for s in engine_states():
        alive = pid_alive(int(s["pid"]))
        rows.append({"name": s.get("name"), "engine": s.get("engine"), "url": s.get("url"), "pid": s.get("pid"),
                     "alive": alive, "answers": alive and http_ok(str(s.get("url")) + "/v1/models"),
                     "log": s.get("log_path")})

    def render(console: Any) -> None:
        from rich.table import Table

        t = Table("name", "engine", "url", "pid", "alive", "answers", "log")
        for r in rows:
            t.add_row(*(str(r[k]) for k in ("name", "engine", "url", "pid", "alive", "answers", "log")))
        console.print(t if rows else "no engines started with `inferencekit engine up`")

    return Outcome({"engines": rows}, None, render)
