"""An honest replica of the claimed precision: the quality score's A/A floor inside ``verify`` (issue 42, item 3).

The quality score compares an engine's greedy trajectories with a float32 reference (``quality/score_run.py``). Its
A/A floor used to be the reference's own greedy run scored against itself: top-1 agreement 100%, KL 0. An honest
engine of another precision cannot reach that floor: honest Q4_1 engines sat 0.024-0.029 below it in top-1
agreement against a margin of 0.02 (``benchmarks/results/verify_modes-20261206.json``, verify standard on
llama-server), so more prompts would only have turned an honest UNPROVEN into FAIL.

The floor is now what an honest engine *of the claimed precision* scores: the claimed weights served by a llama.cpp
engine started here (llama-server when it is built, it names token ids so KL can be computed; else
llama-cpp-python), its greedy trajectories on the same prompts scored like the engine's (``score_sets``'s
``repeat``). The equivalence audit judges against replicas of the claim the same way (docs/equivalence.md). A
replica exists where the claimed weights are at hand: the reference is the embedded SmolLM2-135M-Instruct and the
claim is its Q4_1 GGUF, or a precision of the zoo that was built (``make zoo``). Elsewhere the floor stays the
reference against itself, and the part says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.prompts import Prompt
from inferencekit.engines.launcher import start_engine, stop_engine
from inferencekit.engines.model import EMBEDDED_CLAIM, embedded_gguf
from inferencekit.engines.recipes import cache_root, llama_server_binary
from inferencekit.errors import OpError
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, write_index
from inferencekit.quality.trajectory_run import trajectory_record
from inferencekit.rundir import RunDir

__all__ = ["NO_REPLICA", "replica_gguf", "replica_trajectories"]
NO_REPLICA = ("A/A floor: the float32 reference's own greedy run (no replica of the claimed precision at hand), "
              "which an honest engine of another precision cannot reach")


def replica_gguf(reference: str | None, claim: str | None) -> tuple[Path | None, str]:
    """``(GGUF of the claimed precision, why)``: the embedded GGUF for ``Q4_1``, the zoo's file for another claim
    when it was built (``cache_root()/zoo/smollm2-135m-<claim>.gguf``); ``(None, why not)`` when the reference is not
    the embedded model (a replica must be the reference's own weights) or no file holds the claim."""
    if reference != "embedded":
        return None, "the reference is not the embedded model, whose quantisations are the only replicas at hand"
    if not claim:
        return None, "no --claim: the precision the replica must have is unknown"
    if claim.upper() == EMBEDDED_CLAIM:
        return embedded_gguf(), f"the embedded GGUF ({EMBEDDED_CLAIM})"
    zoo = cache_root() / "zoo" / f"smollm2-135m-{claim.lower()}.gguf"
    if zoo.is_file():
        return zoo, f"the zoo's {claim.upper()} GGUF ({zoo.name})"
    return None, f"no {claim.upper()} GGUF in the zoo (make zoo ZOO={claim.lower()})"


def _replica_engine() -> str:
    try:
        llama_server_binary()
    except OpError:
        return "llama-cpp-python"
    return "llama-server"


async def replica_trajectories(run: RunDir, prompts: Sequence[Prompt], gguf: Path, claim: str, *, max_tokens: int,
                               ctk: dict[str, Any], prompts_info: dict[str, Any], prompts_sha256: str
                               ) -> tuple[dict[str, Any], Path]:
    """Greedy trajectories of ``prompts`` from a replica serving ``gguf`` (one slot, started and stopped here) into
    ``run.quality_dir("replica-<claim>")``: ``(quality_trajectory record, folder)``.

    Raises:
        OpError: the replica engine is not installed or does not start.
    """
    label = f"replica-{claim.lower()}"
    engine = _replica_engine()
    eng = await asyncio.to_thread(start_engine, engine, run.engine_dir / "replica", parallel=1, tie_to_parent=True,
                                  gguf=gguf)
    try:
        async with Client(Endpoint.parse(eng.url), timeout_s=600) as client:
            info = await detect_engine(client)
            note = f"an honest replica of the claim: {gguf.name} on {engine}, started by verify"
            s = TrajectorySettings(label=label, max_tokens=max_tokens, ctk=ctk, notes=[note])
            out_dir = run.quality_dir(label)
            rows, state = await collect_engine(client, info, prompts, out_dir, s)
            write_index(out_dir, label=label, model=str(info.model), engine=info.engine, prompts_sha256=prompts_sha256,
                        rows=rows)
            rec = trajectory_record(run, out_dir, rows, label=label, engine=info.identity(), model=str(info.model),
                                    s=s, prompts=prompts_info, state=state)
    finally:
        await asyncio.to_thread(stop_engine, eng)
    return rec, out_dir
