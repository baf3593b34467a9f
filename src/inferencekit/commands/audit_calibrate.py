"""``inferencekit audit calibrate``: a calibration table for a user's own model, reference and endpoints."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.errors import OpError
from inferencekit.options import check_client_args, check_urls
from inferencekit.quality.equivalence_calibrate import (
    FIRST_BUDGETS,
    FIRST_RUN,
    LOGPROB_BUDGETS,
    SHORT_SURFACES,
    TEXT_BUDGETS,
    TEXT_TOKENS,
    CachedReference,
    read_records,
    record_runs,
    run_prompts,
    runs_pool,
    series_name,
)
from inferencekit.quality.equivalence_cells import first_token_cells, logprob_cells, text_cells
from inferencekit.quality.equivalence_pool import (
    MAX_TOKENS,
    POOL_NAME,
    SHORT_POOL_NAME,
    TOP_LOGPROBS,
    calibration_capacity,
)
from inferencekit.quality.equivalence_text import ReferenceSamples
from inferencekit.quality.local_model import require_reference
from inferencekit.quality.reference import LocalReference
from inferencekit.quality.task_run import open_task_run
from inferencekit.quality.trajectory_run import local_source
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import safe_name, write_json

__all__ = ["parse_named_urls", "plan_runs", "audit_calibrate"]



def parse_named_urls(text: str | None, kind: str) -> list[tuple[str, str]]:
    """``name=URL,name=URL`` (a bare URL is named ``<kind>-<i>``) as ``[(name, url)]``.

    Raises:
        OpError: an empty or repeated name, a name unfit for a file name, or a URL that is not http(s).
    """
    out: list[tuple[str, str]] = []
    for i, part in enumerate(p.strip() for p in (text or "").split(",") if p.strip()):
        name, sep, url = part.partition("=")
        if not sep:
            name, url = f"{kind}-{i + 1}", part
        name, url = name.strip(), url.strip()
        safe_name(name, f"--{kind}")
        if not url.startswith(("http://", "https://")):
            raise OpError(f"--{kind} {part!r}: expected name=http(s)://host:port")
        if name in {n for n, _ in out}:
            raise OpError(f"--{kind}: the name {name!r} is given twice")
        out.append((name, url))
    return out


def plan_runs(honest: list[tuple[str, str]], substitutes: list[tuple[str, str]], runs: int,
              surface: str, run_budget: int, capacity: int) -> dict[str, range]:
    """The run indices of each configuration: honest replica ``j`` takes runs ``[j·runs, (j+1)·runs)`` (no two
    honest runs share a prompt, so the held-out false-alarm bound counts independent runs), each substitute
    ``[0, runs)``.

    Raises:
        OpError: the runs need more prompts than the pool's calibration region holds (``capacity``).
    """
    plan = {name: range(j * runs, (j + 1) * runs) for j, (name, _) in enumerate(honest)}
    plan.update({name: range(0, runs) for name, _ in substitutes})
    last = max(r.stop for r in plan.values())
    need = last * run_prompts(surface, run_budget)
    if need > capacity:
        raise OpError(f"{len(honest)} honest replica(s) × {runs} runs need {need} calibration prompts; the pool's "
                      f"calibration region holds {capacity}{' short ones' if surface in SHORT_SURFACES else ''} (give "
                      "fewer --runs or replicas)")
    return plan


@operation(("audit", "calibrate"), "Build a calibration table for `audit equivalence` from your own honest "
           "replicas and substitutes.",
           description="Sends calibration runs (disjoint slices of the calibration pool: ShareGPT first turns, "
                       "positions below 8,000) to each endpoint and scores them against the reference, as the shipped "
                       "table was made: logprob runs of ceil(--run-budget / 64) prompts × 64 greedy tokens with top-20 "
                       "logprobs, first-token runs of 50 short prompts × one token, or text runs of 20 short prompts × "
                       "8 completions sampled from the endpoint and from the reference. Honest replicas of the claim "
                       "take disjoint runs; honest runs of even index fit the threshold (split-conformal quantile at α "
                       "= 1% up to 1,000 tokens and for first-token cells, 5% above, relaxed to 5% and said when the "
                       "fit set is too small), odd ones are held out and their false alarms bounded (Clopper–Pearson, "
                       "95%); each substitute's power is its runs above the threshold. Runs are recorded as they finish"
                       " (resumable with the same --run-dir); the table goes to --out for `audit equivalence --table`.",
           example="inferencekit audit calibrate --claim F16 --honest a=http://h1:8080,b=http://h2:8080 "
                   "--substitute q4_0=http://h3:8080 --runs 40 --reference local --reference-model model.gguf",
           args=[Arg("claim", "string", "The precision the honest replicas serve (it names the cells)."),
                 Arg("honest", "string", "Honest replicas of the claim: name=URL[,name=URL…] (a bare URL is "
                     "named honest-1 …). Different engines or settings make the threshold hold across them."),
                 Arg("substitute", "string", "Substitutes the power is measured against: name=URL[,…], ordered "
                     "as you like; the table lists them from the most to the least detected."),
                 Arg("surface", "string", "Which series: 'logprob', 'first-token' or 'text' (runs of 20 prompts × 8 "
                     "sampled completions each side; cells at 80 and 160 requests, α = 5%).", default="logprob",
                     choices=("logprob", "first-token", "text")),
                 Arg("runs", "integer", "Runs per configuration. A cell at α = 5% needs ≥ 19 honest fit runs (38 "
                     "runs in all) and a 5% held-out bound ≥ 59 held-out ones; α = 1% needs 300 + 299. First-token "
                     "cells are blocks of 50-prompt runs: 100 requests need twice the runs, 300 six times.",
                     default=40),
                 Arg("run_budget", "integer", "Logprob surface: output tokens per run (cells at every budget of "
                     "100, 300, 1000, 3000 up to it).", default=300),
                 Arg("reference", "string", "'local': the reference model in this process, float32. Required."),
                 Arg("reference_model", "string", "With --reference local: 'embedded', a .gguf file or a Hugging "
                     "Face directory.", default="embedded"),
                 Arg("concurrency", "integer", "Requests in flight per endpoint.", default=4),
                 Arg("api_key_env", "string", "Environment variable holding the API key (its name is recorded, "
                     "never its value)."),
                 Arg("timeout", "number", "Seconds one request may take in all.", default=600.0),
                 Arg("out", "string", "Where to write the table (default: <run dir>/equivalence-table.json)."),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one resumes).")])
def audit_calibrate(call: Call, claim: str | None = None, honest: str | None = None, substitute: str | None = None,
                    surface: str = "logprob", runs: int = 40, run_budget: int = 300, reference: str | None = None,
                    reference_model: str = "embedded", concurrency: int = 4, api_key_env: str | None = None,
                    timeout: float = 600.0, out: str | None = None, run_dir: str | None = None) -> Outcome:
    if not claim:
        raise OpError("--claim is required: the precision the honest replicas serve")
    if reference != "local":
        raise OpError("--reference local is required: calibration runs are scored against a reference "
                      f"(got {reference!r})")
    require_reference("--reference local")
    surface = surface.replace("-", "_")
    hon, subs = parse_named_urls(honest, "honest"), parse_named_urls(substitute, "substitute")
    check_client_args(None, api_key_env, timeout)
    check_urls(u for _, u in [*hon, *subs])
    if not hon:
        raise OpError("--honest is required: at least one honest replica of the claim sets the threshold")
    if {n for n, _ in hon} & {n for n, _ in subs}:
        raise OpError("a name is both --honest and --substitute")
    if runs < 2 or concurrency < 1 or run_budget < MAX_TOKENS:
        raise OpError(f"--runs must be ≥ 2, --concurrency ≥ 1, --run-budget ≥ {MAX_TOKENS}")
    plan = plan_runs(hon, subs, runs, surface, run_budget, calibration_capacity(short=surface in SHORT_SURFACES))
    src = local_source(reference_model)
    run = open_task_run(run_dir, call.argv, call.operation)
    series = series_name(surface, run_budget)
    rec_dir = run.path / "calibration" / safe_name(claim.upper(), "--claim") / series
    from inferencekit.quality.local_model import load_local_model

    ref: Any = LocalReference(load_local_model(src), k=TOP_LOGPROBS)
    if surface == "first_token":
        ref = CachedReference(ref, rec_dir / "reference-rows.jsonl")
    # substitutes' run i has honest run i's prompts and seed: the reference's samples are drawn once
    samples = ReferenceSamples(ref.m, rec_dir / "reference-samples.jsonl") if surface == "text" else None
    made: dict[str, int] = {}
    pool = runs_pool([i for r in plan.values() for i in r], surface, run_budget)

    async def one(name: str, url: str) -> None:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, None)
            made[name] = await record_runs(client, info, ref, rec_dir / f"{name}.jsonl", plan[name], pool=pool,
                                           surface=surface, run_budget=run_budget, concurrency=concurrency,
                                           meta={"claim": claim.upper(), "config": name, "url": url},
                                           work=run.path / "calibration" / "work" / name, text_samples=samples)

    for name, url in [*hon, *subs]:  # one endpoint at a time: calibrations share the machine with nothing else
        asyncio.run(one(name, url))
    # the planned runs only: a resume with another --runs must not let honest replicas share prompts
    recs = {name: [r for r in read_records(rec_dir / f"{name}.jsonl") if r["run"] in plan[name]]
            for name, _ in [*hon, *subs]}
    machine = "the endpoints given to audit calibrate: " + ", ".join(f"{n}={u}" for n, u in [*hon, *subs])
    h, s = [n for n, _ in hon], [n for n, _ in subs]
    if surface == "text":
        cells = text_cells(claim.upper(), recs, h, s, TEXT_BUDGETS, 0.05,
                           {"series": series, "pool": SHORT_POOL_NAME, "max_tokens": TEXT_TOKENS,
                            "machine": machine})
    elif surface == "first_token":
        cells = first_token_cells(claim.upper(), recs, h, s, FIRST_BUDGETS, FIRST_RUN, 0.01,
                                  {"series": series, "pool": SHORT_POOL_NAME, "max_tokens": 1,
                                   "top_logprobs": TOP_LOGPROBS, "machine": machine})
    else:
        cells = logprob_cells(claim.upper(), recs, h, s, [b for b in LOGPROB_BUDGETS if b <= run_budget],
                              lambda b: 0.01 if b <= 1000 else 0.05,
                              {"series": series, "pool": POOL_NAME, "max_tokens": MAX_TOKENS,
                               "top_logprobs": TOP_LOGPROBS, "machine": machine})
    table = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "made_by": "inferencekit audit calibrate",
             "reference": ref.describe(), "cells": cells}
    path = Path(out) if out else run.path / "equivalence-table.json"
    write_json(path, table, indent=True)
    payload = {"table": str(path), "run_dir": str(run.path), "runs_made": made, "cells": [
        {"claim": c["claim"], "statistic": c["statistic"], "budget": c["budget"], "alpha": c["alpha"],
         "threshold": c["threshold"], "honest": c["honest"]["fit_runs"], "heldout": c["honest"]["heldout_runs"],
         "heldout_alarms": c["honest"]["heldout_alarms"],
         "substitutes": {x["name"]: [x["detected"], x["runs"]] for x in c["substitutes"]}} for c in cells]}

    def render(console: Any) -> None:
        console.print(f"calibration table: {path} ({len(cells)} cell(s); runs made now: {made})", markup=False,
                      highlight=False)
        for c in payload["cells"]:
            console.print(json.dumps(c), markup=False, highlight=False)

    return Outcome(payload, None, render)
