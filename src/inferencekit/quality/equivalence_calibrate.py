"""Calibration runs of the equivalence audit (I/O): one run against one configuration, recorded as a JSON line.

``benchmarks/equivalence_calibration.py`` (the shipped table: it starts the zoo's engines) and ``audit calibrate``
(a table for a user's own endpoints and reference) both record runs here and build cells with
``equivalence_cells``. A run takes a disjoint slice of the pool's calibration region
(``equivalence_pool.calibration_prompts``): logprob runs ``P`` prompts × 64 tokens, first-token runs
``FIRST_RUN`` short prompts × one token. Records are appended as each run finishes; a run already in the file is
not sent again (resume).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.quality.equivalence_first import collect_first_token, first_token_summary
from inferencekit.quality.equivalence_pool import (
    MAX_TOKENS,
    POOL_NAME,
    SHORT_POOL_NAME,
    SHORT_SURFACES,
    TOP_LOGPROBS,
    calibration_prompts,
)
from inferencekit.quality.equivalence_run import AuditSettings, comparable, mark_lost_ids
from inferencekit.quality.equivalence_stats import blocked_mmd_test, logprob_statistic
from inferencekit.quality.equivalence_text import ReferenceSamples, collect_text
from inferencekit.quality.metrics import top_k_cut
from inferencekit.quality.reference import Reference
from inferencekit.quality.score_run import TrajectoryScorer
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, write_index
from inferencekit.quality.trajectory_store import load_set

__all__ = ["FIRST_BUDGETS", "FIRST_RUN", "LOGPROB_BUDGETS", "TEXT_BUDGETS", "TEXT_RUN", "TEXT_SAMPLES", "TEXT_TOKENS",
           "SHORT_SURFACES", "CachedReference", "done_runs", "read_records", "run_prompts", "series_name",
           "logprob_run", "first_token_run", "text_run", "runs_pool", "record_runs"]

FIRST_RUN = 50  # first-token series: prompts (one-token requests) per run
FIRST_BUDGETS = (50, 100, 300)  # requests: first-token cells from 1, 2 and 6 consecutive runs
TEXT_RUN = 20  # text series: prompts per run (× TEXT_SAMPLES sampled completions each side: 160 requests)
TEXT_SAMPLES, TEXT_TOKENS = 8, 32  # the audit's text-surface defaults (AuditSettings)
TEXT_BUDGETS = (80, 160)  # requests: a text run's first 10 prompts, and all 20
LOGPROB_BUDGETS = (100, 300, 1000, 3000)  # output tokens; a run serves every budget up to its own


def run_prompts(surface: str, run_budget: int) -> int:
    """Prompts per run: ``ceil(run_budget / 64)`` on the logprob surface, ``FIRST_RUN`` on the first-token one,
    ``TEXT_RUN`` on the text one."""
    return {"first_token": FIRST_RUN, "text": TEXT_RUN}.get(surface) or math.ceil(run_budget / MAX_TOKENS)


def series_name(surface: str, run_budget: int) -> str:
    """The folder of a series' records: ``b<tokens>``, ``first<prompts>`` or ``text<prompts>``."""
    return {"first_token": f"first{FIRST_RUN}", "text": f"text{TEXT_RUN}"}.get(surface) or f"b{run_budget}"


class CachedReference:
    """A reference behind a file cache of next-token rows (first-token runs): such a row is a function of the prompt
    ids alone (its top-k does not depend on the token forced after them), so each calibration prompt is forced
    through the reference once across configurations and sessions. Other calls pass through."""

    def __init__(self, ref: Reference, path: Path) -> None:
        self.ref, self.k, self.path = ref, ref.k, path
        self.rows: dict[str, dict[int, float]] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    d = json.loads(line)
                    self.rows[d["key"]] = {int(t): float(v) for t, v in d["row"]}

    def describe(self) -> dict[str, Any]:
        return self.ref.describe()

    async def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any]) -> list[int]:
        return await self.ref.chat_prompt_ids(messages, ctk)

    async def encode(self, text: str) -> list[int]:
        return await self.ref.encode(text)

    async def score(self, ids: list[int], start: int) -> list[dict[int, float]]:
        if start != len(ids) - 1:
            return await self.ref.score(ids, start)
        key = hashlib.sha256(json.dumps([self.describe().get("source"), ids[:start], self.k]).encode()).hexdigest()
        if key not in self.rows:
            row = (await self.ref.score(ids, start))[0]
            self.rows[key] = top_k_cut(row, self.k, None)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps({"key": key, "row": list(self.rows[key].items())}) + "\n")
        return [self.rows[key]]


def read_records(path: Path) -> list[dict[str, Any]]:
    """The run records of one configuration's file (none when it does not exist); a line that is not a whole
    record (a run killed while it was appended) is skipped, so that run is made again on resume."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("run"), int):
            out.append(rec)
    return out


def done_runs(path: Path) -> set[int]:
    return {int(r["run"]) for r in read_records(path)}


async def logprob_run(client: Client, info: EngineInfo, ref: Reference, prompts: Sequence[Prompt], work: Path,
                      concurrency: int) -> dict[str, Any]:
    """One logprob run: greedy 64-token trajectories with top-20 logprobs, teacher-forced through ``ref``; per
    budget of ``LOGPROB_BUDGETS`` the run reaches (its first ``ceil(b / 64)`` prompts), both statistics."""
    ts = TrajectorySettings(label="cal", max_tokens=MAX_TOKENS, top_logprobs=TOP_LOGPROBS, seed=0,
                            concurrency=concurrency)
    rows, _ = await collect_engine(client, info, prompts, work, ts)
    write_index(work, label="cal", model=str(info.model), engine=info.engine, prompts_sha256="calibration", rows=rows)
    tset = load_set(work)
    scored = {r["id"]: r for r in mark_lost_ids(await TrajectoryScorer(ref, {TOP_LOGPROBS}, "reference")
                                                .score_set(tset), tset.docs)}
    per_budget: dict[str, Any] = {}
    for b in (b for b in LOGPROB_BUDGETS if math.ceil(b / MAX_TOKENS) <= len(prompts)):
        ids = [p.id for p in prompts[:math.ceil(b / MAX_TOKENS)]]
        usable = comparable([scored[i] for i in ids if i in scored])  # as the audit: no mismatched prompt
        st = logprob_statistic([row for r in usable for row in r["rows"]])
        per_budget[str(b)] = {"kl+gap": st["statistic"] if st["name"] == "kl+gap" else None,
                              "gap": st["gap_mean"], "positions": st["positions"],
                              "failed": sum(1 for i in ids if "error" in scored.get(i, {"error": 1})),
                              "mismatched": sum(1 for i in ids if scored.get(i, {}).get("template_mismatch")),
                              "lost_ids": sum(1 for i in ids if scored.get(i, {}).get("lost_ids"))}
    return {"budgets": per_budget, "errors": [r["error"] for r in rows if "error" in r][:3]}


async def first_token_run(client: Client, info: EngineInfo, ref: Reference, prompts: Sequence[Prompt], work: Path,
                          concurrency: int) -> dict[str, Any]:
    """One first-token run: each usable prompt's distance (``first_token_summary``), and what was left out."""
    got = await collect_first_token(client, info, ref, prompts, work, top_logprobs=TOP_LOGPROBS, label="cal",
                                    concurrency=concurrency)
    sm = first_token_summary(got["pairs"])
    return {"distances": sm["distances"], "made": sum(1 for p in got["pairs"] if "error" not in p),
            "mismatched": sum(1 for p in got["pairs"] if p.get("template_mismatch")),
            "errors": [p["error"] for p in got["pairs"] if "error" in p][:3],
            "top1_agreement": sm["top1_agreement"], "shift_mean": sm["shift_mean"]}


def runs_pool(runs: Sequence[int], surface: str, run_budget: int) -> list[Prompt]:
    """The calibration prompts ``runs`` need, loaded before any event loop runs (the pool loader runs its own).

    Raises:
        OpError: the runs reach past the calibration region (``calibration_prompts``).
    """
    per = run_prompts(surface, run_budget)
    return calibration_prompts((max(runs, default=-1) + 1) * per, short=surface in SHORT_SURFACES)


async def text_run(client: Client, info: EngineInfo, ref: Reference, prompts: Sequence[Prompt], work: Path,
                   concurrency: int, *, seed: int, samples: ReferenceSamples | None = None) -> dict[str, Any]:
    """One text run: ``TEXT_SAMPLES`` completions per prompt from the engine and from the reference (the audit's
    ``collect_text``, reference samples seeded by ``seed``, drawn through ``samples`` when given: a cache shared by
    the configurations); per budget of ``TEXT_BUDGETS`` (its first ``budget / TEXT_SAMPLES`` prompts) the
    prompt-blocked MMD² and its permutation p-value.

    Raises:
        OpError: ``ref`` is not a local reference (the text series samples from it in this process).
    """
    model = getattr(ref, "m", None)
    if model is None:
        raise OpError("the text series samples from the reference in this process: --reference local")
    s = AuditSettings(claim="", surface="text", budget_requests=len(prompts) * TEXT_SAMPLES, samples=TEXT_SAMPLES,
                      sample_tokens=TEXT_TOKENS, seed=seed)
    got = await collect_text(client, info, samples or ReferenceSamples(model), prompts, work, s,
                             concurrency=concurrency)
    per_budget: dict[str, Any] = {}
    for b in (b for b in TEXT_BUDGETS if b // TEXT_SAMPLES <= len(prompts)):
        ids = [p.id for p in prompts[:b // TEXT_SAMPLES]]
        res = blocked_mmd_test({i: got["engine"][i] for i in ids if i in got["engine"]},
                               {i: got["reference"][i] for i in ids if i in got["reference"]},
                               permutations=200, seed=seed)
        per_budget[str(b)] = {"mmd": res["statistic"], "p_value": res["p_value"], "prompts": res["prompts"],
                              "skipped": res["skipped"]}
    return {"budgets": per_budget, "failed": len(got["failed"]), "sampling": got["sampling"],
            "errors": [f["error"] for f in got["failed"]][:3]}


async def record_runs(client: Client, info: EngineInfo, ref: Reference, out: Path, runs: Sequence[int], *,
                      pool: Sequence[Prompt], surface: str, run_budget: int, concurrency: int, meta: dict[str, Any],
                      work: Path, on_run: Callable[[dict[str, Any]], None] | None = None,
                      text_samples: ReferenceSamples | None = None) -> int:
    """Make and append the runs of ``runs`` not yet in ``out``; returns how many were made.

    Run ``i`` takes ``pool[i·P, (i+1)·P)`` (``run_prompts``; ``pool`` from ``runs_pool``).
    """
    todo = sorted(set(runs) - done_runs(out))
    if not todo:
        return 0
    per = run_prompts(surface, run_budget)
    first = surface == "first_token"
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in todo:
        t0 = time.monotonic()
        prompts = pool[i * per:(i + 1) * per]
        d = work / f"run{i}"
        if surface == "text":
            res = await text_run(client, info, ref, prompts, d, concurrency, seed=i, samples=text_samples)
        else:
            res = await (first_token_run if first else logprob_run)(client, info, ref, prompts, d, concurrency)
        rec = {"run": i, **meta, "engine": info.identity(),
               "pool": SHORT_POOL_NAME if surface in SHORT_SURFACES else POOL_NAME,
               ("run_budget" if surface == "logprob" else "run_prompts"): run_budget if surface == "logprob" else per,
               "prompts": [p.id for p in prompts], "wall_s": round(time.monotonic() - t0, 1), **res}
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        shutil.rmtree(d, ignore_errors=True)
        if on_run:
            on_run(rec)
    return len(todo)
