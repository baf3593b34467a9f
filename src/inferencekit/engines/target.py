"""The server an operation talks to: the given URL, or the embedded engine started for the run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferencekit.engines.launcher import RunningEngine, start_engine, stop_engine
from inferencekit.extras import require_extra

__all__ = ["EMBEDDED_ENGINE", "EMBEDDED_N_CTX_FLAG", "launched_context", "serve_target"]

EMBEDDED_ENGINE = "llama-cpp-python"
EMBEDDED_N_CTX_FLAG = "--n_ctx"  # how the embedded engine (llama-cpp-python) is given its context length


def launched_context(eng: RunningEngine | None) -> int | None:
    """The context length (tokens per request) an engine started here was launched with (llama-cpp-python's
    ``--n_ctx``), which it does not report itself; None for a server given by URL or a launch without the flag."""
    if eng is None or EMBEDDED_N_CTX_FLAG not in eng.argv:
        return None
    i = eng.argv.index(EMBEDDED_N_CTX_FLAG)
    return int(eng.argv[i + 1]) if i + 1 < len(eng.argv) and eng.argv[i + 1].isdigit() else None


@contextmanager
def serve_target(base_url: str | None, log_dir: Path, *, quiet: bool = False,
                 engine: str = EMBEDDED_ENGINE) -> Iterator[tuple[str, RunningEngine | None]]:
    """Yield ``(url, started engine or None)``; an engine started here is stopped on exit.

    Raises:
        OpError: the embedded engine is not installed (the ``engine`` extra's line) or crashed while starting (log
            named).
    """
    if base_url:
        yield base_url, None
        return
    if engine == EMBEDDED_ENGINE:  # before the line that says it starts
        require_extra("engine", "the embedded engine")
    if not quiet:
        print(f"inferencekit: starting the embedded engine ({engine}, SmolLM2-135M-Instruct Q4_1); log in {log_dir}",
              file=sys.stderr)
    eng = start_engine(engine, log_dir, tie_to_parent=True)
    try:
        yield eng.url, eng
    finally:
        stop_engine(eng)
