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
    with pytest.raises(OpError, match="did not answer /v1/models: its log stayed unchanged for 1 s"):
        start_engine("fake", tmp_path, port=free_port(), ready_timeout_s=1,
                     rec=_recipe("import time; time.sleep(60)"))


def test_an_engine_still_logging_progress_is_waited_for_past_its_ready_timeout(tmp_path):
    # a busy machine loads weights slowly: an engine that keeps logging is not stopped after ready_timeout_s (here
    # 1 s) but only once its log stops growing (or READY_CAP × 1 s in all); this one logs every 0.3 s for 3 s
    code = "import time\nfor i in range(10):\n    print('loading', i, flush=True); time.sleep(0.3)\ntime.sleep(60)"
    with pytest.raises(OpError) as e:
        start_engine("fake", tmp_path, port=free_port(), ready_timeout_s=1, rec=_recipe(code))
    assert "its log stayed unchanged for 1 s" in str(e.value)
    assert "loading 9" in str(e.value)  # it was still waited for when the last stage was logged
