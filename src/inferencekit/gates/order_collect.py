"""Send one draw in several orders and keep every reply (collect; ``order_judge`` judges).

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
from dataclasses import asdict, dataclass, field
from typing import Any

from inferencekit.api.client import Client
from inferencekit.gates.order_judge import compare_sample, judge_order, order_label, order_permutation
from inferencekit.gates.probe_collect import ProbeLog
from inferencekit.gates.result import Gate, merge_gates

__all__ = ["ORDER_FIXED", "OrderSettings", "Regime", "judge_order_log", "order_body", "order_rows", "send_orders"]

CHAT = "/v1/chat/completions"
# Fields the gate sets itself: --extra-body may not override them.
ORDER_FIXED = {"model", "messages", "tools", "tool_choice", "temperature", "max_tokens", "max_completion_tokens",
               "stream", "stream_options", "n", "seed", "cache_prompt", "cache_salt"}


@dataclass(slots=True)
class OrderSettings:
    """One order-gate run: what was sent and how (stored in the probe log's header, ``settings.order``).

    Attributes:
        sample_ids: the draw's ids in canonical order (after any cap).
        orders: orders issued (2..6).
        max_tokens: generation cap per request (recorded: a different cap is a different regime).
        concurrency: requests in flight at once.
        regimes: ``["as-served"]`` or ``["cache-off", "cache-on"]`` (``--hermetic``).
        cache_bypass: the fields the cache-off regime sent (names; vLLM's salt differs per request).
        draw: the draw's description (source, files' SHA-256, selection rule, draw id).
        cap_warning: what a ``--sample-cap`` selected, or None.
    """

    sample_ids: list[str]
    orders: int = 2
    max_tokens: int = 512
    concurrency: int = 1
    regimes: list[str] = field(default_factory=lambda: ["as-served"])
    cache_bypass: list[str] = field(default_factory=list)
    draw: dict[str, Any] = field(default_factory=dict)
    cap_warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self, regime: str) -> str:
        return f"{len(self.sample_ids)}-sample draw in {self.orders} orders, T=0, max_tokens {self.max_tokens}, " \
               f"concurrency {self.concurrency} ({regime})"


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
                      on_done: Callable[[dict[str, Any]], None] | None = None) -> None:
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

            async def worker(label: str = label, k: int = k, regime: Regime = regime, queue: list = queue) -> None:
                while queue:
                    position, i = queue.pop()
                    sid, subset, base = bodies[i]
                    body = {**base, **(regime.fields() if regime.fields else {})}
                    ex = await client.post(CHAT, body, optional=("stream_options",))
                    rid = f"{regime.name}/{label}/{sid}"
                    rec = {"id": rid, "kind": "order", "key": sid, "endpoint": CHAT, "body": body,
                           "meta": {"regime": regime.name, "order": label, "order_index": k, "position": position,
                                    "subset": subset},
                           "reply": ex.to_reply(id=rid)}
                    log.append(rec)
                    if on_done is not None:
                        on_done(rec)

            await asyncio.gather(*(worker() for _ in range(max(1, min(s.concurrency, n)))))


def order_rows(records: Sequence[Mapping[str, Any]], sample_ids: Sequence[str], orders: int, regime: str
               ) -> list[dict[str, Any]]:
    """``compare_sample`` rows of one regime, in canonical draw order; a sample an order never answered
    (the run was cut short) is compared with None there, which makes it UNMEASURED."""
    got: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in records:
        meta = r.get("meta") or {}
        if r.get("kind") == "order" and meta.get("regime") == regime:
            got[(str(r.get("key")), str(meta.get("order")))] = r.get("reply") or {}
    labels = [order_label(k) for k in range(orders)]
    return [compare_sample(sid, [(lb, got.get((sid, lb))) for lb in labels]) for sid in sample_ids]


def judge_order_log(header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> Gate:
    """The order gate of one ``gates order`` run from its probe log: each regime judged on its own
    (the reason names the regime), then combined (any FAIL → FAIL, …)."""
    raw = (header.get("settings") or {}).get("order") or {}
    s = OrderSettings(**{k: v for k, v in raw.items() if k in OrderSettings.__dataclass_fields__})
    parts = [judge_order(order_rows(records, s.sample_ids, s.orders, regime), what=s.describe(regime))
             for regime in s.regimes]
    gate = merge_gates("order", parts) if parts else Gate("order", "NOT RUN", "the log names no regime")
    if s.cap_warning:
        gate.limitations.append(s.cap_warning)
    return gate
