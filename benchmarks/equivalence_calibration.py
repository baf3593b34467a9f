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
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.api.client import Client  # noqa: E402
from inferencekit.api.detect import detect_engine  # noqa: E402
from inferencekit.api.endpoint import Endpoint  # noqa: E402
from inferencekit.cheats.proxy import running_proxy  # noqa: E402
from inferencekit.engines.launcher import start_engine, stop_engine  # noqa: E402
from inferencekit.engines.model import embedded_gguf  # noqa: E402
from inferencekit.engines.recipes import cache_root  # noqa: E402
from inferencekit.quality.equivalence_calibrate import (  # noqa: E402
    FIRST_BUDGETS,
    FIRST_RUN,
    TEXT_BUDGETS,
    TEXT_RUN,
    TEXT_SAMPLES,
    TEXT_TOKENS,
    CachedReference,
    done_runs,
    read_records,
    record_runs,
    run_prompts,
    runs_pool,
    series_name,
)
from inferencekit.quality.equivalence_cells import (  # noqa: E402
    first_token_cells,
    logprob_cells,
    machines_of,
    text_cells,
)
from inferencekit.quality.equivalence_pool import (  # noqa: E402
    MAX_TOKENS,
    SHORT_POOL_NAME,
    TOP_LOGPROBS,
    pool_fields,
)
from inferencekit.quality.equivalence_text import ReferenceSamples  # noqa: E402
from inferencekit.quality.reference import LocalReference  # noqa: E402

RUNS_DIR = ROOT / "benchmarks" / "results" / "equivalence_runs"
SHIPPED = ROOT / "src" / "inferencekit" / "quality" / "equivalence_table.json"
BUDGETS = (100, 300, 1000, 3000)
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


def collect(claim: str, config: str, runs: range, run_budget: int, surface: str) -> None:
    """Record ``runs`` of ``config`` (those not yet recorded) in its series file, starting its engine(s)."""
    from inferencekit.quality.local_model import load_local_model

    series = series_name(surface, run_budget)
    out = RUNS_DIR / claim / series / f"{config}.jsonl"
    if not set(runs) - done_runs(out):
        print(f"{claim} {config}: {series} runs {runs.start}-{runs.stop - 1} recorded", file=sys.stderr)
        return
    pool = runs_pool(runs, surface, run_budget)
    work = Path(tempfile.mkdtemp(prefix="ik-eqcal-"))
    ref: Any = LocalReference(load_local_model(embedded_gguf()), k=TOP_LOGPROBS)
    if surface == "first_token":
        ref = CachedReference(ref, cache_root() / "eqcal" / "first-token-reference.jsonl")
    samples = ReferenceSamples(ref.m, cache_root() / "eqcal" / "text-reference.jsonl") if surface == "text" else None

    def show(rec: dict[str, Any]) -> None:
        if surface == "text":
            what = json.dumps(rec["budgets"].get(str(TEXT_BUDGETS[-1])))
        elif surface == "first_token":
            ds = list(rec["distances"].values())
            what = f"{sum(ds) / len(ds) if ds else None} over {len(ds)} prompts, top-1 {rec['top1_agreement']}"
        else:
            what = json.dumps(rec["budgets"].get("300") or rec["budgets"].get("100"))
        print(f"{claim} {config} {series} run {rec['run']}: {what} ({rec['wall_s']} s)", file=sys.stderr)

    async def go(url: str, kw: dict[str, Any], conc: int) -> None:
        async with Client(Endpoint.parse(url), timeout_s=600) as client:
            info = await detect_engine(client, None)
            meta = {"claim": claim, "config": config, "gguf": str(kw.get("gguf")), "extra": list(kw.get("extra", ())),
                    "mix": kw.get("mix"), "machine": MACHINE}
            await record_runs(client, info, ref, out, runs, pool=pool, surface=surface, run_budget=run_budget,
                              concurrency=conc, meta=meta, work=work, on_run=show, text_samples=samples)

    with serving(config, claim, work) as (url, kw, conc):
        asyncio.run(go(url, kw, conc))


def _records(series: Path) -> dict[str, list[dict[str, Any]]]:
    return {f.stem: read_records(f) for f in sorted(series.glob("*.jsonl"))}


def _series_for(claim: str, budget: int) -> tuple[int, dict[str, list[dict[str, Any]]]] | None:
    """The logprob series serving ``budget`` with the most honest runs: (its run budget, its records by config)."""
    best = None
    for d in sorted((RUNS_DIR / claim).glob("b*")):
        b = int(d.name[1:])
        if b < budget:
            continue
        recs = _records(d)
        n = sum(len(recs.get(c, [])) for c in HONEST[claim])
        if n and (best is None or n > best[0]):
            best = (n, b, recs)
    return (best[1], best[2]) if best else None


def table() -> dict[str, Any]:
    cells = []
    for claim in HONEST:
        for b in BUDGETS:
            found = _series_for(claim, b)
            if found is not None:
                series, recs = found
                cells += logprob_cells(claim, recs, HONEST[claim], SUBSTITUTES[claim], [b], alpha_for,
                                       {"series": f"b{series}", **pool_fields(), "machine": machines_of(recs)})
        recs = _records(RUNS_DIR / claim / f"first{FIRST_RUN}")
        cells += first_token_cells(claim, recs, HONEST_FIRST[claim], SUBSTITUTES[claim], FIRST_BUDGETS, FIRST_RUN,
                                   0.01, {"series": f"first{FIRST_RUN}", "pool": SHORT_POOL_NAME, "max_tokens": 1,
                                          "top_logprobs": TOP_LOGPROBS, "machine": machines_of(recs)})
        recs = _records(RUNS_DIR / claim / f"text{TEXT_RUN}")
        cells += text_cells(claim, recs, HONEST[claim], SUBSTITUTES[claim], TEXT_BUDGETS, 0.05,
                            {"series": f"text{TEXT_RUN}", "pool": SHORT_POOL_NAME, "max_tokens": TEXT_TOKENS,
                             "machine": machines_of(recs)})
    cells.sort(key=lambda c: (c["claim"], ("logprob", "first_token", "text").index(c["method"]), c["statistic"],
                              c["budget"]))
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
    per = run_prompts("logprob", run_budget)
    s_per_run = s_per_prompt * per
    lines = [f"a run = {per} prompts × {MAX_TOKENS} tokens (≈ {s_per_run:.0f} s here); budgets "
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
    ap.add_argument("--surface", choices=("logprob", "first-token", "text"), default="logprob",
                    help="the series to collect: 64-token trajectories, one-token first-token runs "
                         f"({FIRST_RUN} prompts each), or sampled text runs ({TEXT_RUN} prompts × {TEXT_SAMPLES})")
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
        collect(a.claim, config, range(a.first, a.first + a.runs), a.run_budget, a.surface.replace("-", "_"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
