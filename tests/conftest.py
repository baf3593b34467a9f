"""Test session set-up: a private evidence store, and the real engines started once per session.

Engine fixtures never skip silently in CI: when ``CI`` is set, a missing engine fails the test
(the Makefile builds every engine before running the suite). Outside CI a missing engine skips
with the make target that provides it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferencekit.engines.launcher import RunningEngine, start_engine, stop_engine
from inferencekit.errors import OpError

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _missing(what: str, why: str) -> None:
    msg = f"{what} unavailable: {why}"
    if IN_CI:
        pytest.fail(f"{msg} (CI must run every engine test; see the Makefile)")
    pytest.skip(msg)


@pytest.fixture(scope="session", autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("ikhome")
    old = os.environ.get("INFERENCEKIT_HOME")
    os.environ["INFERENCEKIT_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("INFERENCEKIT_HOME", None)
    else:
        os.environ["INFERENCEKIT_HOME"] = old


def _start(engine: str, tmp_path_factory: pytest.TempPathFactory, make_target: str, **kw) -> RunningEngine:
    try:
        return start_engine(engine, tmp_path_factory.mktemp(f"{engine}-log"), tie_to_parent=True, **kw)
    except OpError as e:
        _missing(engine, f"{e} (make {make_target})")
        raise  # unreachable: _missing fails or skips


@pytest.fixture(scope="session")
def embedded_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """llama-cpp-python serving SmolLM2-135M-Instruct Q4_1 (the embedded default), once per session."""
    eng = _start("llama-cpp-python", tmp_path_factory, "demo")
    yield eng
    stop_engine(eng)


@pytest.fixture(scope="session")
def llama_server_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """llama.cpp's llama-server with 4 parallel slots, once per session."""
    eng = _start("llama-server", tmp_path_factory, "llama-server", parallel=4)
    yield eng
    stop_engine(eng)


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """vLLM on CPU serving the float32 conversion of the same GGUF, once per session."""
    eng = _start("vllm", tmp_path_factory, "vllm")
    yield eng
    stop_engine(eng)
