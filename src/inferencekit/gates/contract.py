"""The API-contract job: every item of the contract sent once, then judged (``probe --contract``, ``verify``).

Collect (``gates/probes/contract.py`` ``send_contract`` into ``probes/<gate-run>.jsonl``), then judge with
``gates check``'s code (``judges/contract.py``), so the recorded run re-judges to the same verdict offline.
"""

from __future__ import annotations

from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import Tokenizer
from inferencekit.errors import OpError
from inferencekit.gates.probes.collect import ProbeLog
from inferencekit.gates.probes.contract import ITEM_GROUPS, ContractSettings, send_contract
from inferencekit.gates.probes.plan import ProbeSettings
from inferencekit.gates.run import GateRunSettings, gate_run_id
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir
from inferencekit.shapes import is_ok

__all__ = ["contract_settings", "run_contract_gate"]


def contract_settings(*, json_load: int, concurrency: int, tokenizer: str | None,
                      items: list[str] | None = None) -> ContractSettings:
    """Checked settings of one contract run; ``items`` (comma lists allowed) picks item groups (None: all).

    Raises:
        OpError: json_load < 0, concurrency < 2 (the load part needs two requests in flight), or an unknown item.
    """
    if json_load < 0 or concurrency < 2:
        raise OpError("--json-load must be ≥ 0 and --concurrency ≥ 2 (structured output is judged with requests "
                      "in flight together)")
    picked = [x.strip() for i in items or () for x in i.split(",") if x.strip()] or None
    unknown = [x for x in picked or () if x not in ITEM_GROUPS]
    if unknown:
        raise OpError(f"--items: unknown item {unknown[0]!r}; known: {', '.join(ITEM_GROUPS)}")
    return ContractSettings(json_load=json_load, concurrency=concurrency, tokenizer=tokenizer, items=picked)


async def run_contract_gate(client: Client, info: EngineInfo, run: RunDir, s: ContractSettings, *, engine: str,
                            tokenizer: Tokenizer | None, extra: dict[str, Any], ctk: dict[str, Any], quiet: bool,
                            request_policy: dict[str, Any] | None = None) -> tuple[str, GateRunSettings]:
    """Send the contract into ``probes/<gate-run>.jsonl``; return the gate-run name and the settings stored in its
    header. Nothing is judged here."""
    name = gate_run_id()
    gs = GateRunSettings(gates=["contract"], probes=ProbeSettings(gates=()), contract=s.to_json(),
                         request_policy=request_policy)
    header = {"gate_run": name, "engine": engine, "model": info.model, "engine_info": info.identity(),
              "known_ignored_options": list(info.dialect.ignores), "settings": gs.header()}
    with ProbeLog(run.gate_run_log(name), header) as log, ProgressBar(quiet) as bar:
        bar.on_level("API contract", s.planned_requests())
        await send_contract(client, info, log, s, tokenizer=tokenizer, extra=extra, ctk=ctk,
                            on_done=lambda r: bar.on_done("contract", is_ok(r.get("reply") or {})))
    return name, gs
