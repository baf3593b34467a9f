"""``inferencekit audit equivalence``: is this endpoint serving the model it claims, at the precision it claims?"""

from __future__ import annotations

import asyncio
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.prompts import load_prompt_set
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.quality.equivalence_first import FIRST_TOKEN_REQUESTS
from inferencekit.quality.equivalence_pool import SHORT_SURFACES, audit_prompt_set
from inferencekit.quality.equivalence_run import AuditSettings, load_table
from inferencekit.quality.equivalence_task import plan_audit, run_audit, statistic_line
from inferencekit.quality.local_model import require_reference
from inferencekit.quality.reference import LocalReference
from inferencekit.quality.task_run import open_task_run
from inferencekit.quality.trajectory_run import local_source
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations, verdict_style
from inferencekit.rundir import safe_name

__all__ = ["CALIBRATION_PROMPTS", "audit_equivalence"]

TEXT_REQUESTS = 160  # --budget-requests default on the text surface (FIRST_TOKEN_REQUESTS on the first-token one)
CALIBRATION_PROMPTS = "calibration"  # --prompts: the audits' region of the calibration pool (equivalence_pool)


def render_audit(console: Any, rec: dict[str, Any]) -> None:
    d = rec["data"]["report"]
    console.print(f"[{verdict_style(rec['verdict'])}]{rec['verdict']}[/] equivalence audit — claim {d['claim']}, "
                  f"surface {d['surface']}", highlight=False)
    console.print(d["reason"], markup=False, highlight=False)
    console.print(statistic_line(d), markup=False, highlight=False)
    for x in d.get("informational") or ():
        console.print(f"informational, {x['method']}: {x['verdict']} — {x['reason']}", markup=False, highlight=False)
    print_limitations(console, rec["limitations"])
    console.print(f"run dir: {rec['data']['run_dir']}   record: {rec['evidence_id']}", markup=False, highlight=False)


@operation(("audit", "equivalence"), "Is the endpoint serving the model it claims, at the precision it claims? A "
           "verdict with the power behind it.",
           description="Sends a seeded draw of chat prompts greedy with top-k logprobs (enough prompts for "
                       "--budget-tokens output tokens), teacher-forces each reply through the reference (--reference "
                       "local: the embedded GGUF dequantised to float32 in this process), and reduces the run to one "
                       "statistic: mean KL(reference ‖ engine) over the shared top-k plus the mean greedy DiFR gap "
                       "(how far below the reference's argmax the engine's token sits in the reference's own "
                       "logprobs), in nats per output token. The verdict reads the calibration table (--table, else "
                       "the one shipped for the embedded model): FAIL above the threshold that honest replicas of "
                       "the claimed precision set (naming α and the held-out false-alarm rate); PASS within it only "
                       "when the budget reaches 95% power against a substitute of the calibration, naming what it "
                       "would and would not have detected; UNPROVEN otherwise. Without a reference it refuses.",
           example="inferencekit audit equivalence --base-url http://127.0.0.1:8080 --claim F16 --reference local",
           args=[*(a for a in CLIENT_ARGS if a.name not in ("extra_body", "chat_template_kwargs")),
                 Arg("claim", "string", "The precision the endpoint claims (F16, Q4_1, Q8_0 …): it picks the honest "
                     "replicas the statistic is judged against."),
                 Arg("reference", "string", "The reference every run is scored against: 'local' (the model in "
                     "this process, float32). Required: an audit without one refuses."),
                 Arg("reference_model", "string", "With --reference local: 'embedded' (the embedded GGUF) or a "
                     ".gguf file or Hugging Face directory.", default="embedded"),
                 Arg("surface", "string", "Which test: 'logprob' (teacher-forced, needs top-k logprobs on generated "
                     "tokens), 'first-token' (one greedy token per prompt, its top-k logprobs against the "
                     "reference's: many cheap requests), 'text' (sampled completions against reference samples, for "
                     "endpoints without logprobs), or 'auto' (logprob, else text when the endpoint returns none).",
                     default="auto", choices=("auto", "logprob", "first-token", "text")),
                 Arg("budget_tokens", "integer", "Logprob surface: output tokens to spend.", default=300),
                 Arg("budget_requests", "integer", "Text and first-token surfaces: requests to spend (default: 160 "
                     "on the text surface, 50 on the first-token surface, as calibrated)."),
                 Arg("samples", "integer", "Text surface: completions per prompt (and as many from the reference).",
                     default=8),
                 Arg("sample_tokens", "integer", "Text surface: tokens per completion.", default=32),
                 Arg("max_tokens", "integer", "Output tokens per prompt.", default=64),
                 Arg("prompts", "string", "Prompt pool: 'calibration' (ShareGPT first turns from the part of the "
                     "calibration's pool no threshold was fitted on: the calibrated verdict applies), 'dev' or a "
                     ".jsonl file (no calibrated cell applies: UNPROVEN).", default=CALIBRATION_PROMPTS),
                 Arg("seed", "integer", "Seed of the prompt draw.", default=0),
                 Arg("table", "string", "A calibration table (benchmarks/equivalence_calibration.py writes one)."),
                 Arg("label", "string", "Name of the trajectory folder.", default="audit"),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def audit_equivalence(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                      timeout: float = 600.0, claim: str | None = None, reference: str | None = None,
                      reference_model: str = "embedded", surface: str = "auto", budget_tokens: int = 300,
                      budget_requests: int | None = None, samples: int = 8, sample_tokens: int = 32,
                      max_tokens: int = 64,
                      prompts: str = CALIBRATION_PROMPTS, seed: int = 0, table: str | None = None, label: str = "audit",
                      run_dir: str | None = None) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    if not claim:
        raise OpError("--claim is required: the precision the endpoint claims (e.g. F16, Q4_1)")
    if not reference:
        raise OpError("--reference is required: an equivalence audit without a reference cannot judge anything "
                      "(--reference local scores against the model in this process)")
    if reference != "local":
        raise OpError(f"--reference {reference!r}: only 'local' is supported so far")
    require_reference("--reference local")
    surface = surface.replace("-", "_")
    if budget_requests is None:
        budget_requests = FIRST_TOKEN_REQUESTS if surface == "first_token" else TEXT_REQUESTS
    if min(budget_tokens, max_tokens, budget_requests, sample_tokens) < 1 or samples < 2:
        raise OpError("--budget-tokens, --max-tokens, --budget-requests and --sample-tokens must be ≥ 1, --samples ≥ 2")
    safe_name(label, "--label")
    cells, table_source = load_table(table)
    s = AuditSettings(claim=claim.upper(), budget_tokens=budget_tokens, max_tokens=max_tokens, seed=seed, label=label,
                      budget_requests=budget_requests, samples=samples, sample_tokens=sample_tokens,
                      surface="first_token" if surface == "first_token" else "logprob")
    first_pset = text_pset = None
    if prompts == CALIBRATION_PROMPTS:
        pset = audit_prompt_set(s.prompts_needed(), seed, short=surface in SHORT_SURFACES)
        if surface == "auto":  # the informational first-token test (run when the engine names token ids) and the
            # text fallback (an endpoint without logprobs) draw from the short prompts, as their calibrations did
            first_pset = audit_prompt_set(FIRST_TOKEN_REQUESTS, seed, short=True)
            text_pset = audit_prompt_set(s.text_prompts(), seed, short=True)
    else:
        pset = load_prompt_set(prompts)
    plan = plan_audit(pset, s, surface, first_pset, text_pset)
    src = local_source(reference_model)
    run = open_task_run(run_dir, call.argv, call.operation)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            from inferencekit.quality.local_model import load_local_model

            ref = LocalReference(load_local_model(src), k=20)

            async def main() -> dict[str, Any]:
                async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
                    info = await detect_engine(client, model)
                    return await run_audit(client, info, ref, run, plan, cells, table_source)

            rec = asyncio.run(main())
    except OpError:
        run.discard_if_empty()
        raise
    report = rec["data"]["report"]
    payload = {"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "reason": report["reason"],
               "statistic": report["statistic"], "surface": report["surface"], "claim": report["claim"],
               "run_dir": str(run.path), "report_file": str(run.quality_file(f"{label}-equivalence.json")),
               "limitations": report["limitations"], "informational": report.get("informational") or []}
    return Outcome(payload, rec["verdict"], lambda console: render_audit(console, rec))
