"""Engine crashes become clear errors (real child processes, no mocks)."""

import sys

import pytest

from inferencekit.engines.launcher import free_port, start_engine
from inferencekit.engines.recipes import Recipe
from inferencekit.errors import OpError


def _recipe(code: str) -> Recipe:
    return Recipe("fake", (sys.executable, "-c", code), ready_timeout_s=5)


def test_sigill_names_the_signal_the_cause_and_the_log(tmp_path):
    code = "import os, signal; print('loading model', flush=True); os.kill(os.getpid(), signal.SIGILL)"
    with pytest.raises(OpError) as e:
        start_engine("fake", tmp_path, port=free_port(), rec=_recipe(code))
    msg = str(e.value)
    assert "signal 4 (SIGILL" in msg and "GGML_NATIVE=OFF" in msg
    assert str(tmp_path) in msg and "loading model" in msg  # the log path and its tail


def test_early_exit_code_and_timeout(tmp_path):
    with pytest.raises(OpError, match="exited with code 3 before it was ready"):
        start_engine("fake", tmp_path, port=free_port(), rec=_recipe("import sys; sys.exit(3)"))
    with pytest.raises(OpError, match="did not answer /v1/models within 1 s; stopped it"):
        start_engine("fake", tmp_path, port=free_port(), ready_timeout_s=1,
                     rec=_recipe("import time; time.sleep(60)"))
