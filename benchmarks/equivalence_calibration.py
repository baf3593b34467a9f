#!/usr/bin/env python3
"""Calibrate the equivalence audit: honest replicas set the thresholds, substitutes measure the power.

    .venv/bin/python benchmarks/equivalence_calibration.py --plan                 # cells, runs, estimated hours
    .venv/bin/python benchmarks/equivalence_calibration.py --claim F16 --configs llama-server-p4:f16,q4_0 --runs 20
    .venv/bin/python benchmarks/equivalence_calibration.py --table               # the table from what is recorded
    make bench-equivalence BENCH_EQ_ARGS="--claim Q4_1 --runs 60"

A *run* is one audit: ``P`` prompts of a disjoint slice of the calibration pool (ShareGPT first turns,
``inferencekit.quality.equivalence_pool``: run ``i`` takes pool positions ``i·P`` … ``(i+1)·P − 1``, all below the
audits' region, so no two runs of a series share a prompt and no audit reuses one), each sent greedy with top-20
logprobs and 64 output tokens, teacher-forced through the float32 reference. A *series* (``--run-budget B``) has
``P = ceil(B / 64)`` prompts per run; a run's statistic at budget ``b ≤ B`` is computed over its first
``ceil(b / 64)`` prompts, so one run serves every budget up to ``B``.

Configurations (``--configs``): an honest replica of the claim (``<engine>[-p<parallel>]:<claim-file>``, e.g.
``llama-server-p1:f16``, ``llama-cpp-python:q4_1``) or a substitute: a zoo member (``make zoo``) served by
llama-server with 4 slots; ``kv-q8_0``/``kv-q4_0``, the claim's file with a quantised KV cache (flash attention
on); ``mix-0.1``/``mix-0.3``, the claim's file behind ``cheat-proxy --mix-upstream`` routing that share of the
requests to the Q2_0 file. Every run's record goes to
``benchmarks/results/equivalence_runs/<claim>/b<B>/<config>.jsonl`` as it finishes (resumable: a run already
there is not sent again; commit the folder to keep a calibration across sessions).

``--table`` reads every recorded run and writes ``benchmarks/results/equivalence_calibration-<date>.json``: per
claim × statistic × budget, from the series with the most honest runs that serves the budget, the threshold at α
(α = 1% at budgets ≤ 1,000 tokens, 5% above; issue 20) from the honest runs of even index (the fit set, pooled
across replicas), the false alarms of the honest runs of odd index (held out), and per substitute the runs above
the threshold with a Clopper-Pearson lower bound (``inferencekit.quality.equivalence_stats``). A cell whose fit
set is too small for its α is written with ``threshold: null``; the audit then says UNPROVEN. ``--ship`` also
copies the table into the package (``inferencekit/quality/equivalence_table.json``), where the audit reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.api.client import Client  # noqa: E402
from inferencekit.api.detect import detect_engine  # noqa: E402
from inferencekit.api.endpoint import Endpoint  # noqa: E402
from inferencekit.cheats.proxy import running_proxy  # noqa: E402
from inferencekit.data.prompts import Prompt  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.engines.model import embedded_gguf  # noqa: E402
from inferencekit.engines.recipes import cache_root  # noqa: E402
from inferencekit.quality.equivalence_first import (  # noqa: E402
    FIRST_TOKEN_STAT,
    collect_first_token,
    first_token_summary,
)
from inferencekit.quality.equivalence_pool import (  # noqa: E402
    FIRST_POOL_NAME,
    MAX_TOKENS,
    POOL_NAME,
    TOP_LOGPROBS,
    calibration_prompts,
    pool_fields,
)
from inferencekit.quality.equivalence_run import comparable, mark_lost_ids  # noqa: E402
from inferencekit.quality.equivalence_stats import (  # noqa: E402
    logprob_statistic,
    power_cell,
    rate_upper,
    threshold_at,
)
from inferencekit.quality.reference import LocalReference  # noqa: E402
from inferencekit.quality.score_run import TrajectoryScorer  # noqa: E402
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, write_index  # noqa: E402
from inferencekit.quality.trajectory_store import load_set  # noqa: E402

RUNS_DIR = ROOT / "benchmarks" / "results" / "equivalence_runs"
SHIPPED = ROOT / "src" / "inferencekit" / "quality" / "equivalence_table.json"
BUDGETS = (100, 300, 1000, 3000)
FIRST_RUN = 50  # first-token series: prompts (one-token requests) per run
FIRST_BUDGETS = (50, 100, 300)  # first-token cells, in requests: consecutive runs of FIRST_RUN
CLAIM_FILE = {"F16": "f16", "Q4_1": "q4_1"}
# honest replicas per claim (issue 20); vLLM serves the float32 weights: an F16 claim's honest model at higher
# precision, kept out until a run shows it inside the F16 family
HONEST = {"F16": ("llama-server-p1:f16", "llama-server-p4:f16", "llama-cpp-python:f16"),
          "Q4_1": ("llama-server-p1:q4_1", "llama-server-p4:q4_1", "llama-cpp-python:q4_1")}
SUBSTITUTES = {"F16": ("q4_0", "q2_0", "iq4_nl", "q5_0", "q5_1", "q8_0", "noise-0.2", "noise-0.05", "noise-0.02",
                       "kv-q4_0", "kv-q8_0", "mix-0.3", "mix-0.1"),
               "Q4_1": ("q2_0", "q4_0", "mix-0.3", "mix-0.1")}
# the first-token test pairs lists by token id: llama-cpp-python names none, so its replicas cannot serve here
HONEST_FIRST = {claim: tuple(c for c in cs if not c.startswith("llama-cpp-python")) for claim, cs in HONEST.items()}
MIX_WITH = "q2_0"  # the randomised mix routes its share of requests to this file (issue 20)


def run_prompts(run_budget: int) -> int:
    return math.ceil(run_budget / MAX_TOKENS)


def alpha_for(budget: int) -> float:
    return 0.01 if budget <= 1000 else 0.05


def _gguf(member: str) -> Path:
    if member == "q4_1":
        return embedded_gguf()
    path = cache_root() / "zoo" / f"smollm2-135m-{member}.gguf"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: make zoo ZOO={member}")
    return path


def engine_for(config: str, claim: str) -> tuple[str, dict[str, Any], int]:
    """(engine kind, start_engine keyword arguments, client concurrency) of a configuration (a mix: its main
    engine, the claim's file)."""
    if ":" in config:  # an honest replica: <engine>[-p<n>]:<file>
        name, member = config.split(":", 1)
        kind, _, par = name.rpartition("-p")
        if not (kind and par.isdigit()):  # no -p<n> suffix (llama-cpp-python: one slot)
            kind, par = name, "1"
        parallel = int(par)
        return kind, {"gguf": _gguf(member), "parallel": parallel}, parallel
    if config.startswith("kv-"):
        kv = config.removeprefix("kv-")
        return "llama-server", {"gguf": _gguf(CLAIM_FILE[claim]), "parallel": 4,
                                "extra": ("--cache-type-k", kv, "--cache-type-v", kv, "--flash-attn", "on")}, 4
    if config.startswith("mix-"):
        return "llama-server", {"gguf": _gguf(CLAIM_FILE[claim]), "parallel": 4}, 4
    return "llama-server", {"gguf": _gguf(config), "parallel": 4}, 4


@contextlib.contextmanager
def serving(config: str, claim: str, work: Path) -> Iterator[tuple[str, dict[str, Any], int]]:
    """The configuration's URL (an engine, or a mix proxy in front of two), its engine arguments and concurrency."""
    kind, kw, conc = engine_for(config, claim)
    eng = start_engine(kind, work / "engine", tie_to_parent=True, **kw)
    try:
        if not config.startswith("mix-"):
            yield eng.url, kw, conc
            return
        share = float(config.removeprefix("mix-"))
        other = start_engine("llama-server", work / "mix-engine", tie_to_parent=True, gguf=_gguf(MIX_WITH), parallel=4)
        try:
            with running_proxy(eng.url, [], mix_upstream=other.url, mix_share=share, mix_seed=0) as url:
                yield url, {**kw, "mix": {"share": share, "with": str(_gguf(MIX_WITH))}}, conc
        finally:
            stop_engine(other)
    finally:
        stop_engine(eng)


def _done(path: Path) -> set[int]:
    if not path.is_file():
        return set()
    return {json.loads(line)["run"] for line in path.read_text().splitlines() if line.strip()}


async def _one_run(client: Client, info: Any, ref: LocalReference, prompts: list[Prompt], work: Path,
                   concurrency: int) -> dict[str, Any]:
    ts = TrajectorySettings(label="cal", max_tokens=MAX_TOKENS, top_logprobs=TOP_LOGPROBS, seed=0,
                            concurrency=concurrency)
    rows, _ = await collect_engine(client, info, prompts, work, ts)
    write_index(work, label="cal", model=str(info.model), engine=info.engine, prompts_sha256="calibration", rows=rows)
    tset = load_set(work)
    scored = {r["id"]: r for r in mark_lost_ids(await TrajectoryScorer(ref, {TOP_LOGPROBS}, "reference")
                                                .score_set(tset), tset.docs)}
    per_budget: dict[str, Any] = {}
    for b in (b for b in BUDGETS if math.ceil(b / MAX_TOKENS) <= len(prompts)):
        ids = [p.id for p in prompts[:math.ceil(b / MAX_TOKENS)]]
        usable = comparable([scored[i] for i in ids if i in scored])  # as the audit: no mismatched prompt
        st = logprob_statistic([row for r in usable for row in r["rows"]])  # both statistics: its gap is gap_mean
        per_budget[str(b)] = {"kl+gap": st["statistic"] if st["name"] == "kl+gap" else None,
                              "gap": st["gap_mean"], "positions": st["positions"],
                              "failed": sum(1 for i in ids if "error" in scored.get(i, {"error": 1})),
                              "mismatched": sum(1 for i in ids if scored.get(i, {}).get("template_mismatch")),
                              "lost_ids": sum(1 for i in ids if scored.get(i, {}).get("lost_ids"))}
    return {"budgets": per_budget, "errors": [r["error"] for r in rows if "error" in r][:3]}


def collect(claim: str, config: str, runs: range, run_budget: int) -> None:
    from inferencekit.quality.local_model import load_local_model

    out = RUNS_DIR / claim / f"b{run_budget}" / f"{config}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    todo = [i for i in runs if i not in _done(out)]
    if not todo:
        print(f"{claim} {config}: runs {runs.start}-{runs.stop - 1} recorded", file=sys.stderr)
        return
    per_run = run_prompts(run_budget)
    all_prompts = calibration_prompts(max(todo) * per_run + per_run)
    work = Path(tempfile.mkdtemp(prefix="ik-eqcal-"))
    ref = LocalReference(load_local_model(embedded_gguf()), k=TOP_LOGPROBS)

    async def go(url: str, kw: dict[str, Any], conc: int) -> None:
        async with Client(Endpoint.parse(url), timeout_s=600) as client:
            info = await detect_engine(client, None)
            for i in todo:
                t0 = time.monotonic()
                prompts = all_prompts[i * per_run:(i + 1) * per_run]
                res = await _one_run(client, info, ref, prompts, work / f"run{i}", conc)
                rec = {"run": i, "claim": claim, "config": config, "engine": info.identity(),
                       "gguf": str(kw.get("gguf")), "extra": list(kw.get("extra", ())), "mix": kw.get("mix"),
                       "run_budget": run_budget, "pool": POOL_NAME, "prompts": [p.id for p in prompts],
                       "wall_s": round(time.monotonic() - t0, 1), **res}
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                shown = res["budgets"].get("300") or res["budgets"].get("100")
                print(f"{claim} {config} run {i}: {json.dumps(shown)} ({rec['wall_s']} s)", file=sys.stderr)
                shutil.rmtree(work / f"run{i}", ignore_errors=True)

    with serving(config, claim, work) as (url, kw, conc):
        asyncio.run(go(url, kw, conc))


class CachedReference:
    """The reference behind a cache of next-token rows, kept in ``cache_root()/eqcal`` across configurations and
    sessions: a first-token row is a function of the prompt ids alone (its top-k does not depend on the token that
    followed), so each calibration prompt is forced through the float32 reference once."""

    def __init__(self, ref: LocalReference, path: Path) -> None:
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
        key = hashlib.sha256(json.dumps([ids[:start], self.k]).encode()).hexdigest()
        if key not in self.rows:
            row = (await self.ref.score(ids, start))[0]
            self.rows[key] = dict(sorted(row.items(), key=lambda kv: -kv[1])[:self.k])
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps({"key": key, "row": list(self.rows[key].items())}) + "\n")
        return [self.rows[key]]


def collect_first(claim: str, config: str, runs: range) -> None:
    """First-token series: run ``i`` is pool positions ``i·FIRST_RUN`` … ``(i+1)·FIRST_RUN − 1``, one greedy token each
    with top-20 logprobs; its record keeps each usable prompt's distance, so the table forms larger budgets from
    consecutive runs."""
    from inferencekit.quality.local_model import load_local_model

    out = RUNS_DIR / claim / f"first{FIRST_RUN}" / f"{config}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    todo = [i for i in runs if i not in _done(out)]
    if not todo:
        print(f"{claim} {config}: first-token runs {runs.start}-{runs.stop - 1} recorded", file=sys.stderr)
        return
    all_prompts = calibration_prompts(max(todo) * FIRST_RUN + FIRST_RUN, short=True)
    work = Path(tempfile.mkdtemp(prefix="ik-eqcal-first-"))
    ref = CachedReference(LocalReference(load_local_model(embedded_gguf()), k=TOP_LOGPROBS),
                          cache_root() / "eqcal" / "first-token-reference.jsonl")

    async def go(url: str, kw: dict[str, Any], conc: int) -> None:
        async with Client(Endpoint.parse(url), timeout_s=600) as client:
            info = await detect_engine(client, None)
            for i in todo:
                t0 = time.monotonic()
                prompts = all_prompts[i * FIRST_RUN:(i + 1) * FIRST_RUN]
                got = await collect_first_token(client, info, ref, prompts, work / f"run{i}",
                                                top_logprobs=TOP_LOGPROBS, label="cal", concurrency=conc)
                sm = first_token_summary(got["pairs"])
                rec = {"run": i, "claim": claim, "config": config, "engine": info.identity(),
                       "gguf": str(kw.get("gguf")), "extra": list(kw.get("extra", ())), "mix": kw.get("mix"),
                       "run_prompts": FIRST_RUN, "pool": FIRST_POOL_NAME, "prompts": [p.id for p in prompts],
                       "wall_s": round(time.monotonic() - t0, 1), "distances": sm["distances"],
                       "made": sum(1 for p in got["pairs"] if "error" not in p),
                       "mismatched": sum(1 for p in got["pairs"] if p.get("template_mismatch")),
                       "errors": [p["error"] for p in got["pairs"] if "error" in p][:3],
                       "top1_agreement": sm["top1_agreement"], "shift_mean": sm["shift_mean"]}
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"{claim} {config} first-token run {i}: {sm['statistic']} over {sm['prompts']} prompts, "
                      f"top-1 {sm['top1_agreement']} ({rec['wall_s']} s)", file=sys.stderr)
                shutil.rmtree(work / f"run{i}", ignore_errors=True)

    with serving(config, claim, work) as (url, kw, conc):
        asyncio.run(go(url, kw, conc))


def first_blocks(rs: list[dict[str, Any]], budget: int) -> list[tuple[int, float]]:
    """(block index, statistic) of each complete block of ``budget / FIRST_RUN`` consecutive runs: the mean distance
    over the block's usable prompts, as an audit of ``budget`` requests computes it (blocks without a usable prompt
    left out)."""
    per = budget // FIRST_RUN
    by_run = {r["run"]: r for r in rs}
    out = []
    for b in sorted({i // per for i in by_run}):
        members = [by_run.get(b * per + j) for j in range(per)]
        if any(m is None for m in members):
            continue
        ds = [d for m in members for d in (m or {}).get("distances", {}).values()]
        if ds:
            out.append((b, sum(ds) / len(ds)))
    return out


def first_table(claim: str) -> list[dict[str, Any]]:
    """The first-token cells of ``claim``: per budget, the threshold at α from the honest blocks of even index, the
    false alarms of the odd ones, and each substitute's detections (as ``table``)."""
    recs = _records(claim, RUNS_DIR / claim / f"first{FIRST_RUN}")
    honest_cfgs = [c for c in HONEST_FIRST[claim] if recs.get(c)]
    cells = []
    for b in FIRST_BUDGETS:
        blocks = {c: first_blocks(recs[c], b) for c in honest_cfgs}
        fit = [v for c in honest_cfgs for i, v in blocks[c] if i % 2 == 0]
        held = {c: [v for i, v in blocks[c] if i % 2 == 1] for c in honest_cfgs}
        if not fit:
            continue
        alpha, cut = 0.01, None
        thr = threshold_at(fit, alpha)
        if thr is None:
            cut = (f"{len(fit)} fit runs are too few for α = 1% (the split-conformal quantile needs ≥ 99): this cell "
                   "is at α = 5%")
            alpha, thr = 0.05, threshold_at(fit, 0.05)
        n_held = sum(len(v) for v in held.values())
        alarms = sum(x > thr for v in held.values() for x in v) if thr is not None else None
        per = {c: len(blocks[c]) for c in honest_cfgs}
        thin = [f"{c}: {n} run(s)" for c, n in per.items() if 0 < n // 2 < math.ceil(1 / alpha) - 1]
        subs = [{"name": s, **power_cell([v for _, v in first_blocks(recs[s], b)], thr)}
                for s in SUBSTITUTES[claim] if recs.get(s) and first_blocks(recs[s], b)]
        cells.append({"method": FIRST_TOKEN_STAT, "claim": claim, "statistic": FIRST_TOKEN_STAT, "budget": b,
                      "unit": "requests", "alpha": alpha, "threshold": thr, "series": f"first{FIRST_RUN}",
                      "alpha_cut": cut, "pool": FIRST_POOL_NAME, "max_tokens": 1, "top_logprobs": TOP_LOGPROBS,
                      "machine": MACHINE,
                      "honest": {"fit_runs": len(fit), "heldout_runs": n_held, "heldout_alarms": alarms,
                                 "heldout_rate_upper": rate_upper(alarms, n_held) if alarms is not None else None,
                                 "replicas": honest_cfgs, "runs_by_replica": per,
                                 "heldout_alarms_by_replica": ({c: sum(x > thr for x in v) for c, v in held.items()}
                                                               if thr is not None else {}),
                                 "thin_replicas": thin},
                      "substitutes": sorted(subs, key=lambda c: -(c["power"] or 0))})
    return cells


def _records(claim: str, series: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in sorted(series.glob("*.jsonl")):
        out[f.stem] = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def _vals(rs: list[dict[str, Any]], budget: int, name: str) -> list[float]:
    """The runs' statistic ``name`` at ``budget`` (runs without one left out)."""
    got = (r["budgets"].get(str(budget)) or {} for r in rs)
    return [v[name] for v in got if v.get(name) is not None]


def _series_for(claim: str, budget: int) -> tuple[int, dict[str, list[dict[str, Any]]]] | None:
    """The series serving ``budget`` with the most honest runs: (its run budget, its records by config)."""
    best = None
    for d in sorted((RUNS_DIR / claim).glob("b*")):
        b = int(d.name[1:])
        if b < budget:
            continue
        recs = _records(claim, d)
        n = sum(len(recs.get(c, [])) for c in HONEST[claim])
        if n and (best is None or n > best[0]):
            best = (n, b, recs)
    return (best[1], best[2]) if best else None


def table() -> dict[str, Any]:
    cells = []
    for claim in HONEST:
        for name in ("kl+gap", "gap"):
            for b in BUDGETS:
                found = _series_for(claim, b)
                if found is None:
                    continue
                series, recs = found
                honest = [r for c in HONEST[claim] for r in recs.get(c, [])]
                alpha = alpha_for(b)

                fit = _vals([r for r in honest if r["run"] % 2 == 0], b, name)
                held = _vals([r for r in honest if r["run"] % 2 == 1], b, name)
                if not fit:
                    continue
                thr = threshold_at(fit, alpha)
                cut = None
                if thr is None and alpha < 0.05:  # too few honest runs for α = 1%: say so and state α = 5%
                    cut = (f"{len(fit)} fit runs are too few for α = 1% (the split-conformal quantile needs ≥ 99): "
                           "this cell is at α = 5%")
                    alpha, thr = 0.05, threshold_at(fit, 0.05)
                alarms = sum(v > thr for v in held) if thr is not None else None
                per = {c: len(_vals(recs.get(c, []), b, name)) for c in HONEST[claim]}
                # a replica whose own fit half could not set a threshold at this α is pooled in, but its own false
                # alarms are not bounded by the cell's figure (its statistic may sit apart from the others')
                thin = [f"{c}: {n} run(s)" for c, n in per.items() if 0 < n // 2 < math.ceil(1 / alpha) - 1]
                subs = []
                for s in SUBSTITUTES[claim]:
                    sv = _vals(recs.get(s, []), b, name)
                    if sv:
                        subs.append({"name": s, **power_cell(sv, thr)})
                cells.append({"method": "logprob", "claim": claim, "statistic": name, "budget": b, "alpha": alpha,
                              "threshold": thr, "series": f"b{series}", "alpha_cut": cut, **pool_fields(),
                              "machine": MACHINE,
                              "honest": {"fit_runs": len(fit), "heldout_runs": len(held), "heldout_alarms": alarms,
                                         "heldout_rate_upper": (rate_upper(alarms, len(held))
                                                                if alarms is not None else None),
                                         "replicas": sorted({r["config"] for r in honest}),
                                         "runs_by_replica": {c: n for c, n in per.items() if n},
                                         "heldout_alarms_by_replica": {
                                             c: sum(v > thr for v in _vals([r for r in recs.get(c, [])
                                                                            if r["run"] % 2 == 1], b, name))
                                             for c, n in per.items() if n and thr is not None},
                                         "thin_replicas": thin},
                              "substitutes": sorted(subs, key=lambda c: -(c["power"] or 0))})
    for claim in HONEST:
        cells += first_table(claim)
    return {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **pool_fields(),
            "zoo": _zoo_types(), "cells": cells}


def _machine() -> str:
    """Where the runs were made: honest numerics depend on the CPU's kernels and the llama.cpp build."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    return f"{cpu}, {os.cpu_count()} cores, llama.cpp of llama-cpp-python 0.3.36 built with GGML_NATIVE=OFF"


MACHINE = _machine()


def _zoo_types() -> dict[str, Any]:
    """Each zoo file's per-tensor types, from the zoo's manifest (``make zoo``)."""
    path = cache_root() / "zoo" / "manifest.json"
    if not path.is_file():
        return {}
    return {k: v.get("types") for k, v in json.loads(path.read_text()).items() if isinstance(v, dict)}


def markdown(doc: dict[str, Any]) -> str:
    """The table as docs/equivalence.md shows it: one row per cell, power per substitute with its lower bound."""
    lines = ["| claim | statistic | budget | α | threshold | honest fit / held-out (alarms, rate ≤) | substitutes: "
             "detected/runs (power ≥, 95%) |", "|---|---|---|---|---|---|---|"]
    for c in doc["cells"]:
        h = c["honest"]
        thr = "none" if c["threshold"] is None else f"{c['threshold']:.3g}"
        rate = "" if h["heldout_rate_upper"] is None else f", ≤ {100 * h['heldout_rate_upper']:.1f}%"
        subs = "; ".join(f"{s['name']} {s['detected']}/{s['runs']} (≥ {100 * (s.get('power_lower') or 0):.0f}%)"
                         for s in c["substitutes"]) or "none run"
        alpha = f"{100 * c['alpha']:.0f}%" + (" (cut)" if c.get("alpha_cut") else "")
        lines.append(f"| {c['claim']} | {c['statistic']} | {c['budget']} | {alpha} | {thr} | {h['fit_runs']} / "
                     f"{h['heldout_runs']} ({h['heldout_alarms']}{rate}) | {subs} |")
    return "\n".join(lines)


def plan(runs_honest: int, runs_sub: int, run_budget: int) -> str:
    s_per_prompt = 1.0  # measured on this 2-core machine: 16 prompts × 64 tokens, llama-server c=4, + scoring: 16 s
    s_per_run = s_per_prompt * run_prompts(run_budget)
    lines = [f"a run = {run_prompts(run_budget)} prompts × {MAX_TOKENS} tokens (≈ {s_per_run:.0f} s here); budgets "
             f"{tuple(b for b in BUDGETS if b <= run_budget)} from prefixes of the same runs"]
    total = 0.0
    for claim in HONEST:
        h = runs_honest * s_per_run
        s = len(SUBSTITUTES[claim]) * runs_sub * s_per_run
        total += h + s
        lines.append(f"{claim}: {runs_honest} honest runs over {len(HONEST[claim])} replicas ({h / 3600:.1f} h), "
                     f"{len(SUBSTITUTES[claim])} substitutes × {runs_sub} runs ({s / 3600:.1f} h)")
    lines.append(f"total ≈ {total / 3600:.1f} h")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claim", choices=tuple(HONEST), default="F16")
    ap.add_argument("--configs", default="", help="comma list (default: the claim's honest replicas)")
    ap.add_argument("--runs", type=int, default=20, help="runs per configuration (run indices from --first)")
    ap.add_argument("--first", type=int, default=0, help="first run index")
    ap.add_argument("--run-budget", type=int, default=300, choices=BUDGETS,
                    help="the series: output tokens per run (its prompts: ceil(budget / 64))")
    ap.add_argument("--surface", choices=("logprob", "first-token"), default="logprob",
                    help="the series to collect: 64-token trajectories, or one-token first-token runs "
                         f"({FIRST_RUN} prompts each)")
    ap.add_argument("--plan", action="store_true", help="print the cells and their estimated cost")
    ap.add_argument("--table", action="store_true", help="write the calibration table from the recorded runs")
    ap.add_argument("--ship", action="store_true", help="with --table: also copy it into the package")
    a = ap.parse_args()
    if a.plan:
        print(plan(600, 59, a.run_budget))
        return 0
    if a.table:
        doc = table()
        path = ROOT / "benchmarks" / "results" / f"equivalence_calibration-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M}.json"
        path.write_text(json.dumps(doc, indent=1))
        if a.ship:
            SHIPPED.write_text(json.dumps(doc, indent=1))
            print(f"shipped: {SHIPPED}")
        for c in doc["cells"]:
            print(f"{c['claim']} {c['statistic']} {c['budget']}: threshold {c['threshold']} "
                  f"(fit {c['honest']['fit_runs']}, held-out alarms {c['honest']['heldout_alarms']}/"
                  f"{c['honest']['heldout_runs']}); " + ", ".join(f"{s['name']} {s['detected']}/{s['runs']}"
                                                                    for s in c["substitutes"]))
        print(markdown(doc))
        print(f"written: {path}")
        return 0
    configs = [c for c in a.configs.split(",") if c] or list(HONEST[a.claim])
    for config in configs:
        if a.surface == "first-token":
            collect_first(a.claim, config, range(a.first, a.first + a.runs))
        else:
            collect(a.claim, config, range(a.first, a.first + a.runs), a.run_budget)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
