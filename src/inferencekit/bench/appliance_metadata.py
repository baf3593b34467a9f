"""The appliance metadata file: the declared facts a receipt is tied to (docs/appliance.md, "Metadata").

``bench appliance --metadata FILE`` reads it and ``bench configure`` writes it. The rules follow
RigMark's ``bench.py`` receipt rules: a non-empty JSON object holding the nine required fields,
no ``CHANGE ME`` placeholder anywhere, a whole positive ``context_limit``, and every prefill depth
plus the 8 generated tokens inside that limit. This module only checks; it writes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from inferencekit.errors import OpError
from inferencekit.rundir import write_json

__all__ = ["PLACEHOLDER", "PREFILL_GENERATED_TOKENS", "REQUIRED_FIELDS", "check_metadata", "check_prefill_depths",
           "field_problems", "load_metadata", "check_target", "write_metadata"]

PLACEHOLDER = "CHANGE ME"
PREFILL_GENERATED_TOKENS = 8  # max_tokens of every prefill request

REQUIRED_FIELDS: dict[str, str] = {
    "hardware": "The accelerators and host the engine ran on, with memory, e.g. '1x NVIDIA H200 141GB, "
                "2x Xeon 8480+, 2 TB RAM' or 'Apple M3 Max 128GB'.",
    "topology": "How many accelerators and hosts served the model and how they are connected, with the "
                "tensor/pipeline parallel sizes, e.g. '8x H100 SXM, one host, NVLink, TP=8 PP=1' or "
                "'single GPU, no parallelism'.",
    "model": "The model as published, e.g. 'meta-llama/Llama-3.1-8B-Instruct' or "
             "'HuggingFaceTB/SmolLM2-135M-Instruct'.",
    "model_revision": "The exact revision of the weights: a Hugging Face commit hash, a release tag or the GGUF "
                      "file's sha256, so others can fetch the same files.",
    "quantisation": "How the weights are stored, e.g. 'bf16 (none)', 'fp8 dynamic', 'AWQ int4 g128' or 'GGUF "
                    "Q4_K_M'.",
    "kv_cache_dtype": "The data type of the KV cache, e.g. 'fp16', 'bf16', 'fp8_e4m3' or 'q8_0'.",
    "serving_engine": "The serving engine with its version and the flags that matter, e.g. 'vLLM 0.6.3, "
                      "--max-num-seqs 256' or 'llama.cpp b4100 llama-server -np 4'.",
    "context_limit": "The context length the engine was started with, in tokens (a whole number ≥ 1), e.g. "
                     "8192. Every prefill depth plus the 8 generated tokens must fit in it.",
    "competing_traffic": "Whether anything else used the machine or its accelerators during the run, e.g. "
                         "'none: dedicated' or 'shared node, other jobs on GPUs 4-7'.",
}

MAX_CONTEXT = 2**31 - 1  # tokens; a larger figure is a typo (and would not fit the JSON writer's integers)
_TEXT_FIELDS = tuple(f for f in REQUIRED_FIELDS if f != "context_limit")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _KEY.match(str(key)) else f"{path}[{orjson.dumps(str(key)).decode()}]"


def _placeholder_paths(value: Any, path: str = "$") -> list[str]:
    """JSON paths of every string value (keys are not looked at) that contains the placeholder, any case."""
    if isinstance(value, str):
        return [path] if PLACEHOLDER.lower() in value.lower() else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _placeholder_paths(v, _child(path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _placeholder_paths(v, _child(path, i))]
    return []


def _shape_problem(name: str, value: Any) -> str | None:
    if name == "context_limit":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONTEXT:
            shown = value if isinstance(value, int) and not isinstance(value, bool) else orjson.dumps(value).decode()
            return f"context_limit must be a whole number of tokens from 1 to {MAX_CONTEXT:,}, got {shown}"
        return None
    if not isinstance(value, str):
        return f"{name} must be a string, got {orjson.dumps(value).decode()}"
    if not value.strip():
        return f"{name} is empty"
    return None


def field_problems(name: str, value: Any) -> list[str]:
    """What is wrong with one required field's value (``[]`` when it is acceptable).

    ``context_limit`` must be an int ≥ 1 (a bool is not); every other field a string that is not
    empty after strip and holds no placeholder. ``name`` must be a key of REQUIRED_FIELDS.
    """
    shape = _shape_problem(name, value)
    if shape:
        return [shape]
    if _placeholder_paths(value):
        return [f"{name} still holds the placeholder {PLACEHOLDER!r}"]
    return []


def check_metadata(value: Any, where: str) -> dict[str, Any]:
    """``value`` itself (a dict, extra fields kept) when it is valid appliance metadata.

    Every problem is reported at once: the missing required fields together, each field of the
    wrong shape, and the JSON path (``$.hardware``, ``$.extra[1].note``) of every string value that
    contains ``CHANGE ME`` in any case. Rules follow RigMark's ``bench.py`` receipt rules.

    Raises:
        OpError: not a non-empty JSON object, or any problem above; the message starts with ``where``
            (the file path, or "metadata").
    """
    if not isinstance(value, dict) or not value:
        got = "an empty object" if isinstance(value, dict) else type(value).__name__
        raise OpError(f"{where}: appliance metadata must be a non-empty JSON object, got {got}")
    problems: list[str] = []
    missing = [f for f in REQUIRED_FIELDS if f not in value]
    if missing:
        problems.append("missing required fields: " + ", ".join(missing))
    problems += [p for f in REQUIRED_FIELDS if f in value for p in [_shape_problem(f, value[f])] if p]
    placeholders = _placeholder_paths(value)
    if placeholders:
        problems.append(f"placeholder {PLACEHOLDER!r} still at " + ", ".join(placeholders))
    if problems:
        raise OpError(f"{where}: " + "; ".join(problems) + " (write the file with `inferencekit bench configure`)")
    return value


def load_metadata(path: str | Path) -> dict[str, Any]:
    """The checked metadata object of the JSON file at ``path`` (see ``check_metadata``).

    Raises:
        OpError: the file is missing or unreadable, is not valid JSON (line and column named), or
            fails ``check_metadata``.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise OpError(f"{p}: metadata file not found (write one with `inferencekit bench configure`)") from None
    except OSError as e:
        raise OpError(f"{p}: cannot read the metadata file: {e.strerror or e}") from None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise OpError(f"{p}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return check_metadata(value, str(p))


def check_prefill_depths(depths: list[int], context_limit: int, generated: int = PREFILL_GENERATED_TOKENS) -> None:
    """Refuse prefill depths that cannot run inside the declared context.

    Each depth must be a whole number ≥ 1 and ``depth + generated ≤ context_limit`` (RigMark's
    ``bench.py`` rule: the prompt plus the generated tokens fit the context).

    Raises:
        OpError: the first depth that breaks a rule, naming the depth, the limit and the sum.
    """
    for depth in depths:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise OpError(f"prefill depth {depth!r} must be a whole number of tokens ≥ 1")
        if depth + generated > context_limit:
            raise OpError(f"prefill depth {depth} + {generated} generated tokens = {depth + generated} exceeds the "
                          f"declared context_limit {context_limit}; use depths ≤ {context_limit - generated}")


def check_target(path: Path, force: bool) -> None:
    if path.is_dir():
        raise OpError(f"--output {str(path)!r} is a directory; name a file")
    if path.exists() and not force:
        raise OpError(f"{str(path)!r} already exists; pass --force to overwrite it")


def write_metadata(path: Path, metadata: dict[str, Any], force: bool) -> None:
    """Atomically write ``metadata`` (indented JSON) to ``path``.

    Raises:
        OpError: ``path`` exists and ``force`` is false, is a directory, or cannot be written.
    """
    check_target(path, force)
    try:
        write_json(path, metadata, indent=True)
    except OSError as e:
        raise OpError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
