"""Send one draw in several orders and keep every reply (collect; ``gates/judges/order.py`` judges).

Each order is an index permutation of the same draw (``order_permutation``): no order can measure
another sample set. Requests go in the order's sequence, at most ``concurrency`` in flight (1: one
after the other, which changes what ran before each sample; more: the batch mates change too).
Each finished reply is one line of the gate run's probe log ``probes/<gate-run>.jsonl`` at once,
tagged with its regime, order and position, so ``gates check`` re-judges the run from disk.

Regimes (``--hermetic``): ``cache-off`` sends the dialect's cache-bypass fields with every request
(llama.cpp ``cache_prompt: false``; vLLM a fresh ``cache_salt``), ``cache-on`` sends none; without
``--hermetic`` the one regime is ``as-served``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferencekit.api.client import Client
from inferencekit.gates.inputs import reply_file
from inferencekit.gates.judges.order import OrderSettings, order_label, order_permutation
from inferencekit.gates.probes.collect import ProbeLog
from inferencekit.shapes import ProbeRecord

__all__ = ["ORDER_FIXED", "Regime", "order_body", "send_orders"]

CHAT = "/v1/chat/completions"
# Fields the gate sets itself: --extra-body may not override them.
ORDER_FIXED = frozenset({"model", "messages", "tools", "tool_choice", "temperature", "max_tokens",
               "max_completion_tokens", "stream", "stream_options", "n", "seed", "cache_prompt", "cache_salt"})


@dataclass(frozen=True, slots=True)
class Regime:
    """A cache regime: its name and the request fields that make it (called once per request)."""

    name: str
    fields: Callable[[], dict[str, Any]] | None = None


def order_body(fields: Mapping[str, Any], *, model: str, max_tokens: int, extra: Mapping[str, Any],
               ctk: Mapping[str, Any]) -> dict[str, Any]:
    """A greedy streamed chat body for one sample: ``fields`` (messages, tools, tool_choice), usage asked for."""
    body = {**extra, "model": model, **fields, "temperature": 0.0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    if ctk:
        body["chat_template_kwargs"] = dict(ctk)
    return body


async def send_orders(client: Client, bodies: Sequence[tuple[str, str, dict[str, Any]]], s: OrderSettings,
                      regimes: Sequence[Regime], log: ProbeLog,
                      on_done: Callable[[ProbeRecord], None] | None = None) -> None:
    """Issue every order of ``bodies`` under each regime, each reply appended to ``log`` as it ends.

    Args:
        bodies: ``(sample id, subset, body)`` in canonical order.
        s: orders and concurrency.
        regimes: the cache regimes, in the order run.
    """
    n = len(bodies)
    for regime in regimes:
        for k in range(s.orders):
            label = order_label(k)
            queue = list(enumerate(order_permutation(k, n, s.orders)))
            queue.reverse()

            async def worker(label: str = label, k: int = k, regime: Regime = regime,
                             queue: list[tuple[int, int]] = queue) -> None:
                while queue:
                    position, i = queue.pop()
                    sid, subset, base = bodies[i]
                    body = {**base, **(regime.fields() if regime.fields else {})}
                    ex = await client.post(CHAT, body, optional=("stream_options",))
                    rid = f"{regime.name}/{label}/{sid}"
                    rec: ProbeRecord = {"id": rid, "kind": "order", "key": sid, "endpoint": CHAT, "body": body,
                                        "meta": {"regime": regime.name, "order": label, "order_index": k,
                                                 "position": position, "subset": subset},
                                        "reply": reply_file(ex.to_reply(id=rid))}
                    log.append(rec)
                    if on_done is not None:
                        on_done(rec)

            await asyncio.gather(*(worker() for _ in range(max(1, min(s.concurrency, n)))))
