"""How to start each local engine: command line, environment, readiness check, where it is installed.

Recipes follow docs/engines.md as observed on a 2-core CPU machine:
- ``llama-cpp-python``: ``python -m llama_cpp.server`` (the embedded default; serialises requests);
- ``llama-server``: llama.cpp's native server built by ``make llama-server`` (parallel slots,
  prompt cache, per-request ``timings``);
- ``vllm``: vLLM on CPU in its own virtualenv, serving the GGUF converted to float32 safetensors
  (``make vllm``).
Install locations: ``$INFERENCEKIT_LLAMA_SERVER``, ``$INFERENCEKIT_VLLM_PYTHON``,
``$INFERENCEKIT_VLLM_MODEL``, else the build cache ``$INFERENCEKIT_CACHE`` (default
``~/.cache/inferencekit``) where the Makefile puts them.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from inferencekit.engines.model import EMBEDDED_MODEL_NAME, embedded_gguf
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["DEFAULT_CONTEXT", "Recipe", "ENGINES", "embedded_threads", "recipe", "cache_root", "llama_server_binary",
           "vllm_install"]

ENGINES = ("llama-cpp-python", "llama-server", "vllm")
LLAMA_CPP_VERSION = "0.3.36"
VLLM_VERSION = "0.32.0"


def cache_root() -> Path:
    """``$INFERENCEKIT_CACHE``, else ``$XDG_CACHE_HOME/inferencekit``, else ``~/.cache/inferencekit``."""
    if os.environ.get("INFERENCEKIT_CACHE"):
        return Path(os.environ["INFERENCEKIT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferencekit"


def llama_server_binary() -> Path:
    """The llama-server executable.

    Raises:
        OpError: not built (names the make target and the variable that overrides the path).
    """
    env = os.environ.get("INFERENCEKIT_LLAMA_SERVER")
    cands = [Path(env)] if env else [cache_root() / f"llama.cpp-{LLAMA_CPP_VERSION}" / "bin" / "llama-server"]
    if not env and shutil.which("llama-server"):
        cands.append(Path(shutil.which("llama-server")))  # type: ignore[arg-type]
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise OpError(f"llama-server is not built (looked at {', '.join(map(str, cands))}); run `make llama-server` "
                  "or set INFERENCEKIT_LLAMA_SERVER to its path")


def vllm_install() -> tuple[Path, Path]:
    """(python of the vLLM virtualenv, float32 model directory).

    Raises:
        OpError: not set up (names the make target and the override variables).
    """
    py = Path(os.environ.get("INFERENCEKIT_VLLM_PYTHON")
              or cache_root() / f"vllm-{VLLM_VERSION}" / "venv" / "bin" / "python")
    model = Path(os.environ.get("INFERENCEKIT_VLLM_MODEL")
                 or cache_root() / "models" / "smollm2-135m-instruct-f32")
    if not py.is_file():
        raise OpError(f"vLLM is not set up ({py} missing); run `make vllm` or set INFERENCEKIT_VLLM_PYTHON")
    if not (model / "config.json").is_file():
        raise OpError(f"the vLLM model directory {model} is missing; run `make vllm` or set INFERENCEKIT_VLLM_MODEL")
    return py, model


@dataclass(frozen=True, slots=True)
class Recipe:
    """A ready-to-run engine command. ``health_path`` answers 200 once the engine serves."""

    engine: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/v1/models"
    ready_timeout_s: float = 120.0
    model_name: str = EMBEDDED_MODEL_NAME


DEFAULT_CONTEXT = 4096  # context length in tokens an engine is started with (per slot for llama-server)


def busy_cores(sample_s: float = 0.3) -> float:
    """How many cores other work keeps busy right now: the non-idle share of ``/proc/stat``'s CPU time over
    ``sample_s`` seconds, times the machine's cores (0.0 where ``/proc/stat`` cannot be read)."""
    def snap() -> tuple[int, int]:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)  # total, idle + iowait

    try:
        t0, i0 = snap()
        time.sleep(sample_s)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    dt = t1 - t0
    return 0.0 if dt <= 0 else (1 - (i1 - i0) / dt) * (os.cpu_count() or 1)


def llama_threads(cores: int, busy: float | None = None) -> int:
    """llama-server's threads: the cores this process may use that other work leaves free (at least one).

    ggml's threads wait for each other at a barrier after every operation, spinning; a thread whose core another
    process holds is descheduled and the others spin out their time slices. Measured here (2 cores, a shell busy
    loop on each, 24 tokens of the embedded Q4_1): 2 threads decoded 1.5 tok/s, 2 threads with ``--poll 0`` 0.5 tok/s,
    1 thread 45 tok/s. So a core another process keeps busy is not given a thread. ``busy`` defaults to
    ``busy_cores()`` (sampled now, at the start: load that arrives later is not seen).
    """
    taken = busy_cores() if busy is None else busy
    return max(1, cores - int(round(taken)))


def embedded_threads(cores: int) -> int:
    """llama-cpp-python's decode threads on ``cores`` cores: all but one (at least one).

    Its server does per-token work in Python (sampling glue, detokenising, the SSE event) on a thread of
    its own beside ggml's; with ggml on every core, that thread preempts a decode thread and the others
    spin at the barrier. Measured here (2 cores, 40 sequential 32-token streams per run, two runs each):
    2 threads decoded at a median 82 and 51 tok/s with stretches at 25-45 tok/s (half speed for 10-20
    requests at a time, which timed probes compare across); 1 thread at 86 and 80 tok/s, never below 56.
    """
    return max(1, cores - 1)


def recipe(engine: str, port: int, *, threads: int | None = None, parallel: int = 4, ctx_size: int = DEFAULT_CONTEXT,
           extra: tuple[str, ...] = (), gguf: Path | None = None) -> Recipe:
    """The command that starts ``engine`` on ``127.0.0.1:port``.

    Args:
        threads: CPU threads for llama.cpp engines (default for llama-server: the cores this process may run on that
            other work leaves free, ``llama_threads``; two
            engines pinned to one core each must not each spin two threads: oversubscribed, llama.cpp's
            spinning threads slowed decode from ~10 ms to ~3 s per token here; llama-cpp-python: all but
            one, ``embedded_threads``).
        parallel: llama-server slots; its context is ``ctx_size`` per slot.
        ctx_size: context length in tokens (per slot for llama-server; vLLM uses ``min(ctx_size, 2048)``).
        extra: more engine flags, appended as given.
        gguf: another GGUF for the llama.cpp engines (the equivalence zoo, ``make zoo``), served under the same
            model name; default the embedded Q4_1.

    Raises:
        OpError: unknown engine, or the engine / model is not installed.
    """
    cores = len(os.sched_getaffinity(0)) or 1  # the cores this process may run on
    host = ("--host", "127.0.0.1", "--port", str(port))
    if engine == "llama-cpp-python":
        require_extra("engine", "the embedded engine")
        argv = (sys.executable, "-m", "llama_cpp.server", "--model", str(gguf or embedded_gguf()), *host,
                "--n_ctx", str(ctx_size), "--n_threads", str(threads or embedded_threads(cores)),
                "--model_alias", EMBEDDED_MODEL_NAME,
                # Its default interrupts a streaming request whenever another arrives (broken streams under
                # load); with this off it queues them, which is what a serialising server should do.
                "--interrupt_requests", "false", *extra)
        return Recipe(engine, argv, ready_timeout_s=120.0)
    if engine == "llama-server":
        argv = (str(llama_server_binary()), "-m", str(gguf or embedded_gguf()), *host, "--ctx-size",
                str(ctx_size * parallel),
                "--parallel", str(parallel), "--threads", str(threads or llama_threads(cores)), "--metrics",
                "--alias", EMBEDDED_MODEL_NAME, *extra)
        return Recipe(engine, argv, health_path="/health", ready_timeout_s=60.0)
    if engine == "vllm":
        py, model = vllm_install()
        argv = (str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
                "smollm2-135m-instruct-f32", *host, "--dtype", "float32", "--max-model-len", str(min(ctx_size, 2048)),
                "--enforce-eager", "--enable-prompt-tokens-details",
                # tool_choice named / required are guided only with a parser set (docs/engines.md); SmolLM2 writes
                # no <tool_call> tags, so "auto" stays text
                "--enable-auto-tool-choice", "--tool-call-parser", "hermes", *extra)
        # VLLM_SERVER_DEV_MODE serves POST /reset_prefix_cache, which bench sweep --reset-cache calls between points
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "VLLM_SERVER_DEV_MODE": "1"}
        return Recipe(engine, argv, env, ready_timeout_s=300.0, model_name="smollm2-135m-instruct-f32")
    raise OpError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
