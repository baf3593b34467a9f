"""The engines' command lines: thread counts chosen by the recipe, flags passed through."""

import importlib.util
import os

import pytest

from inferencekit.engines.recipes import embedded_threads, recipe


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
