"""spec_exact's probes: greedy bodies per prompt, sent to B, then A, then B again (collect only).

A is the engine under test (speculative decoding on), B the same model without it; B's repeat is the
A/A floor (``gates/judges/spec_exact.py`` judges the three replies per prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferencekit.api.client import Client
from inferencekit.data.prompts import Prompt
from inferencekit.gates.judges.spec_exact import SPEC_KINDS
from inferencekit.gates.probes.collect import ProbeLog, send_probes
from inferencekit.gates.probes.plan import OPTIONAL_FIELDS, probe_pool
from inferencekit.shapes import ProbeRecord

__all__ = ["send_spec_exact", "spec_probes"]


def spec_probes(prompts: list[Prompt], limit: int, max_tokens: int, model: str, extra: dict[str, Any],
                 ctk: dict[str, Any], count_fields: dict[str, Any]) -> list[ProbeRecord]:
    """Greedy bodies for spec_exact, one per short/medium chat prompt of the set in its order (the first
    ``limit``; 0 = all), asking for the engine's per-token stream (``count_fields``) so outputs are compared
    token by token. Long prompts are left out: their prefill, three times per prompt, would dominate the
    gate's time and a divergence shows in the output, not the prompt."""
    chosen = probe_pool(prompts)[: limit or None]
    out: list[ProbeRecord] = []
    for p in chosen:
        body = {**extra, "model": model, "messages": [dict(m) for m in p.messages or ()], "max_tokens": max_tokens,
                "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0, **count_fields}
        if ctk:
            body["chat_template_kwargs"] = dict(ctk)
        out.append({"id": p.id, "kind": "spec", "key": p.id, "meta": {"bucket": p.bucket},
                    "endpoint": "/v1/chat/completions", "body": body})
    return out


async def send_spec_exact(a: Client, b: Client, b_model: str, probes: list[ProbeRecord], log: ProbeLog,
                          tick: Callable[[ProbeRecord], None] | None) -> None:
    """B, then A, then B again per prompt (B's repeat is the A/A floor); each reply logged as it ends."""
    for p in probes:
        for kind in SPEC_KINDS:
            client, model = (a, None) if kind == "spec_a" else (b, b_model)
            await send_probes(client, [{**p, "id": f"{p['key']}.{kind}", "kind": kind}], log,
                              optional=OPTIONAL_FIELDS, model=model, on_done=tick)
