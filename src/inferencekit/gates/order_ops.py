"""``inferencekit gates order``: one BFCL draw in several orders at T=0; every reply must be the same.

Collect (``order_collect.send_orders`` into ``probes/<gate-run>.jsonl``), then judge with ``gates
check``'s code (``check_run_dir`` → ``judge_order_log``), so the recorded run re-judges to the same
verdict offline.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.data.bfcl import Sample, bfcl_data_dir, cap_draw, draw
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.gates.order_collect import ORDER_FIXED, OrderSettings, Regime, order_body, send_orders
from inferencekit.gates.probe_collect import ProbeLog
from inferencekit.gates.probe_plan import ProbeSettings
from inferencekit.gates.run_ops import GateRunSettings, gate_run_dir, gate_run_id, judged_outcome, pin_engine
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, split_extra_body, template_kwargs
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir

__all__ = ["gates_order", "order_settings", "regimes_for", "run_order_gate"]

MAX_ORDERS = 6


def order_settings(samples: list[Sample], *, orders: int, max_tokens: int, concurrency: int, hermetic: bool,
                   draw_info: dict[str, Any], cap_warning: str | None) -> OrderSettings:
    """Checked settings of one order-gate run.

    Raises:
        OpError: orders outside 2..6, max_tokens < 1, concurrency < 1, or an empty draw.
    """
    if not 2 <= orders <= MAX_ORDERS:
        raise OpError(f"--orders must be 2..{MAX_ORDERS} (2 = canonical and reversed), got {orders}")
    if max_tokens < 1 or concurrency < 1:
        raise OpError("--max-tokens and --concurrency must be at least 1")
    if not samples:
        raise OpError("the draw is empty: nothing to compare")
    return OrderSettings(sample_ids=[x.sample_id for x in samples], orders=orders, max_tokens=max_tokens,
                         concurrency=concurrency, regimes=["cache-off", "cache-on"] if hermetic else ["as-served"],
                         draw=draw_info, cap_warning=cap_warning)


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
    return [Regime("cache-off", bypass), Regime("cache-on")]


async def run_order_gate(client: Client, info: EngineInfo, run: RunDir, samples: list[Sample], s: OrderSettings, *,
                         engine: str, extra: dict[str, Any], ctk: dict[str, Any], quiet: bool) -> tuple[str, GateRunSettings]:
    """Send the draw in every order and regime into ``probes/<gate-run>.jsonl``; return the gate-run name and
    the settings stored in its header. Nothing is judged here."""
    regimes = regimes_for(s, info)
    bodies = [(x.sample_id, x.subset, order_body(x.body_fields(), model=str(info.model), max_tokens=s.max_tokens,
                                                 extra=extra, ctk=ctk)) for x in samples]
    gs = GateRunSettings(gates=["order"], probes=ProbeSettings(gates=()), order=s.to_json())
    name = gate_run_id()
    header = {"gate_run": name, "engine": engine, "model": info.model, "engine_info": info.identity(),
              "known_ignored_options": list(info.dialect.ignores), "settings": gs.header()}
    with ProbeLog(run.path / "probes" / f"{name}.jsonl", header) as log, ProgressBar(quiet) as bar:
        bar.on_level(f"order gate: {len(bodies)} samples × {s.orders} orders × {len(regimes)} regime(s)",
                     len(bodies) * s.orders * len(regimes))
        await send_orders(client, bodies, s, regimes, log,
                          on_done=lambda r: bar.on_done("order", r["reply"].get("status") == 200
                                                        and not r["reply"].get("error")))
    return name, gs


@operation(("gates", "order"), "Order independence: one BFCL draw in several orders at T=0, every reply byte-identical.",
           description="Draws single-turn function-calling samples (messages, tools, tool_choice auto) from the "
                       "bfcl-eval package's data (simple, multiple, parallel, parallel_multiple, irrelevance and "
                       "their live_ variants; --per-subset from each, interleaved), and sends the draw in --orders "
                       "orders (canonical, reversed, then rotations) at temperature 0 with a fixed --max-tokens, "
                       "streamed with usage. Compares every sample across the orders byte for byte: text, "
                       "reasoning, tool calls with raw arguments, finish_reason, completion_tokens. Any difference "
                       "FAILs (first differing field and position shown); a failed request is UNMEASURED and makes "
                       "the gate at least UNPROVEN; all-empty replies FAIL as VACUOUS. --hermetic runs it with the "
                       "prompt cache bypassed and again with it on. Replies go to probes/<gate-run>.jsonl; writes a "
                       "'gates' record (`gates check` re-judges it). Exit 0 PASS, 1 FAIL, 2 bad input or a server "
                       "that does not answer, 3 UNPROVEN.",
           example="inferencekit gates order --base-url http://127.0.0.1:8080 --sample-cap 40",
           args=[*CLIENT_ARGS,
                 Arg("run_dir", "string", "Run directory (an existing one gets a new gate run; default: a new "
                     "runs/<run-id>)."),
                 Arg("orders", "integer", "Orders to issue the draw in: 2 = canonical and reversed, more adds "
                     "rotations (2..6).", default=2),
                 Arg("sample_cap", "integer", "Keep only the first N samples of the draw (0 = all); the draw "
                     "interleaves the subsets, so a cap keeps them round-robin.", default=0),
                 Arg("per_subset", "integer", "Samples drawn from each of the 13 single-turn subsets (evenly "
                     "spaced over the subset's file).", default=8),
                 Arg("max_tokens", "integer", "Generation cap per request (recorded).", default=512),
                 Arg("concurrency", "integer", "Requests in flight at once (1: one after the other).", default=1),
                 Arg("hermetic", "boolean", "Run twice: prompt cache bypassed (llama.cpp cache_prompt: false, vLLM "
                     "cache_salt), then as served; the verdict says which regime failed. Refused (exit 2) on engines with no "
                     "known bypass, such as llama-cpp-python.", default=False),
                 Arg("bfcl_data", "string", "A folder holding BFCL_v4_*.json (default: the installed bfcl-eval "
                     "package's data; pip install --no-deps bfcl-eval==2026.3.23)."),
                 Arg("engine_label", "string", "Label of this engine in the run dir (default: the detected engine).")])
def gates_order(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
                extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None = None, orders: int = 2,
                sample_cap: int = 0, per_subset: int = 8, max_tokens: int = 512, concurrency: int = 1,
                hermetic: bool = False, bfcl_data: str | None = None, engine_label: str | None = None) -> Outcome:
    if base_url:
        normalize_base_url(base_url)
    read_api_key(api_key_env)
    check_client_args(timeout)
    extra_all = parse_json_object(extra_body, "--extra-body")
    extra, refused = split_extra_body(extra_all, ORDER_FIXED)
    if refused:
        raise OpError(f"--extra-body: the order gate sets {', '.join(sorted(refused))} itself")
    ctk = template_kwargs(extra_all, chat_template_kwargs)
    if sample_cap < 0 or per_subset < 1:
        raise OpError("--sample-cap must be ≥ 0 (0 = the whole draw) and --per-subset ≥ 1")
    d = draw(bfcl_data_dir(bfcl_data), per_subset=per_subset)
    samples, warning = cap_draw(d, sample_cap)
    s = order_settings(samples, orders=orders, max_tokens=max_tokens, concurrency=concurrency, hermetic=hermetic,
                       draw_info=d.describe(), cap_warning=warning)
    if warning and not call.quiet and not call.json_output:
        print(f"warning: {warning}", file=sys.stderr)
    run, existing = gate_run_dir(run_dir)

    async def main(url: str) -> tuple[str, str, GateRunSettings]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            label = engine_label or info.engine
            pin_engine(run, info, ctk)
            name, gs = await run_order_gate(client, info, run, samples, s, engine=label, extra=extra, ctk=ctk,
                                            quiet=call.quiet)
        return name, label, gs

    if not existing:
        run.update_run(command=list(call.argv), operation=call.operation)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            name, label, gs = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    return judged_outcome(run, label, name, gs, mode="order", only_asked=True)
