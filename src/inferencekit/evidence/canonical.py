"""Canonical JSON: the one byte form records are hashed in.

UTF-8, keys sorted at every level, no insignificant whitespace (orjson with ``OPT_SORT_KEYS``).
NaN and infinities are not JSON; they are refused rather than silently written as null.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson

from inferencekit.redact import scrub

__all__ = ["canonical_json", "sha256_hex", "sha256_file"]


def _check_finite(obj: Any, where: str = "$") -> None:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"non-finite number at {where}: canonical JSON has no NaN/Infinity")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")


def canonical_json(obj: Any) -> bytes:
    """Canonical UTF-8 bytes of ``obj``, with any registered API key scrubbed (redact.py: the id is computed
    over the bytes that are written).

    Raises:
        ValueError: a NaN or infinite float anywhere in ``obj``.
    """
    _check_finite(obj)
    return scrub(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))  # a record's id covers what is written


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Any) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
