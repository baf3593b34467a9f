"""The event loop the load generator runs on: uvloop when it is installed, else asyncio's own.

uvloop (libuv under asyncio's API) costs less CPU per network event than asyncio's selector loop:
measured side by side on the synthetic server, ~14 vs ~19 µs of client CPU per paced chunk at 1,024
streams and ~17 vs ~37 µs at 256 (``benchmarks/client_cost.py --client-loop``). Nothing else changes:
aiohttp runs on either. ``INFERENCEKIT_LOOP=asyncio`` forces asyncio's loop (to compare, or to rule
uvloop out).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run", "loop_name"]

T = TypeVar("T")


def _uvloop() -> Any:
    if os.environ.get("INFERENCEKIT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what ``run`` will use (recorded with each level's client figures)."""
    return "uvloop" if _uvloop() is not None else "asyncio"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on uvloop's loop when available."""
    uv = _uvloop()
    if uv is None:
        return asyncio.run(coro)
    result: T = uv.run(coro)
    return result
