"""The engines' command lines: thread counts chosen by the recipe, flags passed through."""

import importlib.util
import os

import pytest

from inferencekit.engines.recipes import busy_cores, embedded_threads, llama_threads, recipe


def test_embedded_engine_leaves_one_core_to_its_python_thread():
    assert [embedded_threads(n) for n in (1, 2, 4, 16)] == [1, 1, 3, 15]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="llama-cpp-python is not installed (make demo builds it)")
def test_llama_cpp_python_threads_default_and_override():
    cores = len(os.sched_getaffinity(0))
    argv = recipe("llama-cpp-python", 8000).argv
    assert argv[argv.index("--n_threads") + 1] == str(max(1, cores - 1))
    argv = recipe("llama-cpp-python", 8000, threads=7, extra=("--verbose", "true")).argv
    assert argv[argv.index("--n_threads") + 1] == "7"
    assert argv[-2:] == ("--verbose", "true")


def test_llama_server_gives_no_thread_to_a_core_other_work_keeps_busy():
    # ggml's spinning barrier: a thread on a busy core stalls the others (1.5 vs 45 tok/s measured here)
    assert [llama_threads(2, b) for b in (0.0, 0.4, 0.6, 1.6, 2.0)] == [2, 2, 1, 1, 1]
    assert llama_threads(8, 3.2) == 5 and llama_threads(1, 0.0) == 1


def test_busy_cores_sees_a_busy_loop():
    import subprocess
    import sys

    idle = busy_cores(0.3)
    assert 0.0 <= idle <= (os.cpu_count() or 1)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        time.sleep(0.3)  # let it start
        assert busy_cores(0.5) >= 0.6  # one process spinning holds (most of) one core
    finally:
        spin.kill()
        spin.wait()
