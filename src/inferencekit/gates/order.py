"""The order-gate job: one BFCL draw in several orders at T=0; every reply must be the same (``gates order``,
``verify``).

Collect (``gates/probes/order.py`` ``send_orders`` into ``probes/<gate-run>.jsonl``), then judge with
``gates check``'s code (``check_run_dir`` → ``judges/order.py``), so the recorded run re-judges to the
same verdict offline.
"""

from __future__ import annotations

from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.bfcl import Sample
from inferencekit.errors import OpError
from inferencekit.gates.judges.order import BFCL_BUDGET, OrderSettings
from inferencekit.gates.probes.collect import ProbeLog
from inferencekit.gates.probes.order import Regime, order_body, send_orders
from inferencekit.gates.probes.plan import ProbeSettings
from inferencekit.gates.run import GateRunSettings, gate_run_id
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir
from inferencekit.shapes import is_ok

__all__ = ["MAX_ORDERS", "bfcl_budget", "order_settings", "regimes_for", "run_order_gate"]

MAX_ORDERS = 6


def order_settings(samples: list[Sample], *, orders: int, max_tokens: int, concurrency: int, hermetic: bool,
                   draw_info: dict[str, Any], cap_warning: str | None, cache_off_only: bool = False) -> OrderSettings:
    """Checked settings of one order-gate run. ``max_tokens`` 0 means BFCL's own budget, fixed once the server's
    context is known (``bfcl_budget``). ``cache_off_only``: the one regime ``cache-off`` (verify's order draw on an
    engine with a known cache bypass; ``regimes_for``).

    Raises:
        OpError: orders outside 2..6, max_tokens < 0, concurrency < 1, or an empty draw.
    """
    if not 2 <= orders <= MAX_ORDERS:
        raise OpError(f"--orders must be 2..{MAX_ORDERS} (2 = canonical and reversed), got {orders}")
    if max_tokens < 0 or concurrency < 1:
        raise OpError("--max-tokens must be at least 1 (or 0: BFCL's own budget) and --concurrency at least 1")
    if not samples:
        raise OpError("the draw is empty: nothing to compare")
    return OrderSettings(sample_ids=[x.sample_id for x in samples], orders=orders,
                         max_tokens=max_tokens or BFCL_BUDGET, budget="set" if max_tokens else "bfcl",
                         concurrency=concurrency, regimes=["cache-off"] if cache_off_only else
                         ["cache-off", "cache-on"] if hermetic else ["as-served"],
                         draw=draw_info, cap_warning=cap_warning)


def bfcl_budget(s: OrderSettings, info: EngineInfo) -> None:
    """Fix a ``"bfcl"`` budget to the server: ``BFCL_BUDGET`` clipped to the context it reports minus 2 (bfcl-eval's
    ``min(4096, context - prompt - 2)`` without the prompt, which is not known before sending; an engine that stops
    at its context's end, as llama.cpp does, ends there anyway). A ``"set"`` budget is left as it is."""
    ctx = info.context_tokens
    s.context_tokens = ctx
    if s.budget == "bfcl" and ctx is not None and 2 < ctx - 2 < BFCL_BUDGET:
        s.max_tokens = ctx - 2


def regimes_for(s: OrderSettings, info: EngineInfo) -> list[Regime]:
    """The cache regimes to run on this engine.

    Raises:
        OpError: ``--hermetic`` on an engine whose dialect knows no way to bypass its prompt cache.
    """
    if s.regimes == ["as-served"]:
        return [Regime("as-served")]
    bypass = info.dialect.cache_bypass
    if bypass is None:
        raise OpError(f"--hermetic: no known way to bypass the prompt cache of {info.engine} (known: llama.cpp's "
                      "cache_prompt: false, vLLM's cache_salt); run without --hermetic, or start the server with its "
                      "cache disabled")
    s.cache_bypass = sorted(bypass())
    return [Regime("cache-off", bypass)] + ([] if s.regimes == ["cache-off"] else [Regime("cache-on")])


async def run_order_gate(client: Client, info: EngineInfo, run: RunDir, samples: list[Sample], s: OrderSettings, *,
                         engine: str, extra: dict[str, Any], ctk: dict[str, Any], quiet: bool,
                         request_policy: dict[str, Any] | None = None) -> tuple[str, GateRunSettings]:
    """Send the draw in every order and regime into ``probes/<gate-run>.jsonl``; return the gate-run name and
    the settings stored in its header. Nothing is judged here."""
    regimes = regimes_for(s, info)
    bfcl_budget(s, info)
    bodies = [(x.sample_id, x.subset, order_body(x.body_fields(), model=str(info.model), max_tokens=s.max_tokens,
                                                 extra=extra, ctk=ctk)) for x in samples]
    gs = GateRunSettings(gates=["order"], probes=ProbeSettings(gates=()), order=s.to_json(),
                         request_policy=request_policy)
    name = gate_run_id()
    header = {"gate_run": name, "engine": engine, "model": info.model, "engine_info": info.identity(),
              "known_ignored_options": list(info.dialect.ignores), "settings": gs.header()}
    with ProbeLog(run.gate_run_log(name), header) as log, ProgressBar(quiet) as bar:
        bar.on_level(f"order gate: {len(bodies)} samples × {s.orders} orders × {len(regimes)} regime(s)",
                     len(bodies) * s.orders * len(regimes))
        await send_orders(client, bodies, s, regimes, log,
                          on_done=lambda r: bar.on_done("order", is_ok(r.get("reply") or {})))
    return name, gs
