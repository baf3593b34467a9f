"""``inferencekit audit equivalence``: is this endpoint serving the model it claims, at the precision it claims?"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.prompts import load_prompt_set
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import artifact
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.quality.equivalence_run import (
    AuditSettings,
    audit_prompts,
    audit_report,
    collect_audit,
    collect_text,
    load_table,
    text_report,
)
from inferencekit.quality.reference import LocalReference
from inferencekit.quality.task_run import open_task_run, save_task_record
from inferencekit.quality.trajectory_run import local_source
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations, verdict_style
from inferencekit.rundir import safe_name, write_json

__all__ = ["audit_equivalence"]


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def statistic_line(report: dict[str, Any]) -> str:
    """How the run's statistic was measured, in one line."""
    st = report["statistic"]
    if st.get("statistic") is None:
        return f"no statistic; calibration: {report['table']}"
    if st.get("name") == "mmd":
        return (f"statistic MMD² = {_num(st['statistic'])} (mean over {st['prompts']} prompts of the unbiased MMD² "
                f"between engine and reference samples, {st['kernel']} kernel; permutation p = {_num(st['p_value'])}) "
                f"from {report['budget_used']} requests; calibration: {report['table']}")
    return (f"statistic {st['name']} = {_num(st['statistic'])} nats/token (KL {_num(st['kl_mean'])}, DiFR gap "
            f"{_num(st['gap_mean'])}) over {st['positions']} scored output tokens of {report['prompts']} prompts; "
            f"calibration: {report['table']}")


def render_audit(console: Any, rec: dict[str, Any]) -> None:
    d = rec["data"]["report"]
    console.print(f"[{verdict_style(rec['verdict'])}]{rec['verdict']}[/] equivalence audit — claim {d['claim']}, "
                  f"surface {d['surface']}", highlight=False)
    console.print(d["reason"], markup=False, highlight=False)
    console.print(statistic_line(d), markup=False, highlight=False)
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
                     "tokens), 'text' (sampled completions against reference samples, for endpoints without "
                     "logprobs), or 'auto' (logprob, else text when the endpoint returns none).", default="auto",
                     choices=("auto", "logprob", "text")),
                 Arg("budget_tokens", "integer", "Logprob surface: output tokens to spend.", default=300),
                 Arg("budget_requests", "integer", "Text surface: requests to spend.", default=160),
                 Arg("samples", "integer", "Text surface: completions per prompt (and as many from the reference).",
                     default=8),
                 Arg("sample_tokens", "integer", "Text surface: tokens per completion.", default=32),
                 Arg("max_tokens", "integer", "Output tokens per prompt.", default=64),
                 Arg("prompts", "string", "Prompt pool: 'dev' or a .jsonl file.", default="dev"),
                 Arg("seed", "integer", "Seed of the prompt draw.", default=0),
                 Arg("table", "string", "A calibration table (benchmarks/equivalence_calibration.py writes one)."),
                 Arg("label", "string", "Name of the trajectory folder.", default="audit"),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def audit_equivalence(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                      timeout: float = 600.0, claim: str | None = None, reference: str | None = None,
                      reference_model: str = "embedded", surface: str = "auto", budget_tokens: int = 300,
                      budget_requests: int = 160, samples: int = 8, sample_tokens: int = 32, max_tokens: int = 64,
                      prompts: str = "dev", seed: int = 0, table: str | None = None, label: str = "audit",
                      run_dir: str | None = None) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    if not claim:
        raise OpError("--claim is required: the precision the endpoint claims (e.g. F16, Q4_1)")
    if not reference:
        raise OpError("--reference is required: an equivalence audit without a reference cannot judge anything "
                      "(--reference local scores against the model in this process)")
    if reference != "local":
        raise OpError(f"--reference {reference!r}: only 'local' is supported so far")
    if min(budget_tokens, max_tokens, budget_requests, sample_tokens) < 1 or samples < 2:
        raise OpError("--budget-tokens, --max-tokens, --budget-requests and --sample-tokens must be ≥ 1, --samples ≥ 2")
    safe_name(label, "--label")
    cells, table_source = load_table(table)
    pset = load_prompt_set(prompts)
    s = AuditSettings(claim=claim.upper(), budget_tokens=budget_tokens, max_tokens=max_tokens, seed=seed, label=label,
                      surface="text" if surface == "text" else "logprob", budget_requests=budget_requests,
                      samples=samples, sample_tokens=sample_tokens)
    chosen = audit_prompts(pset.prompts, s)
    text_s = dataclasses.replace(s, surface="text")
    text_chosen = audit_prompts(pset.prompts, text_s) if surface == "auto" else chosen
    src = local_source(reference_model)
    run = open_task_run(run_dir, call.argv, call.operation)
    out_dir = run.quality_dir(label)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            from inferencekit.quality.local_model import load_local_model

            ref = LocalReference(load_local_model(src), k=20)

            async def main() -> tuple[dict[str, Any], Any, list[Any]]:
                async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
                    info = await detect_engine(client, model)
                    if s.surface == "logprob":
                        got = await collect_audit(client, info, ref, chosen, run, s,
                                                  prompts_info={**pset.describe(), "selected": [p.id for p in chosen]})
                        if got["surface"] == "logprob" or surface == "logprob":
                            return got, info, chosen
                    got = await collect_text(client, info, ref.m, text_chosen, run.quality_dir(f"{label}-text"),
                                             text_s)
                    return got, info, text_chosen

            collected, info, chosen = asyncio.run(main())
    except OpError:
        run.discard_if_empty()
        raise
    if collected["surface"] == "text":
        s = text_s
        report = text_report(collected, cells, s, table_source)
        if surface == "auto":
            report["limitations"][0] = "text surface: the endpoint returned no logprobs on generated tokens"
    else:
        report = audit_report(collected, cells, s, table_source)
    report_path = run.quality_file(f"{label}-equivalence.json")
    write_json(report_path, {**report, "reference": ref.describe(), "prompt_ids": [p.id for p in chosen]}, indent=True)
    st = report["statistic"]
    rec = save_task_record(
        run, task="equivalence", label=label,
        summary=f"equivalence audit, claim {s.claim}: {report['verdict']} — {report['reason']}",
        engine=info.identity(), model=str(info.model),
        workload={"prompts": [p.id for p in chosen], "surface": report["surface"], "budget_tokens": budget_tokens,
                  "max_tokens": max_tokens, "budget_requests": budget_requests, "samples": samples,
                  "sample_tokens": sample_tokens, "seed": seed, "reference": ref.describe()},
        metrics=[{"name": "equivalence_statistic", "value": st.get("statistic"),
                  "unit": "MMD² (kernel units)" if st.get("name") == "mmd" else "nats/token",
                  "method": statistic_line(report)},
                 {"name": "budget_used", "value": report["budget_used"],
                  "unit": "requests" if report["surface"] == "text" else "scored output tokens"}],
        artifacts=[artifact(report_path, run.path, "equivalence_report"),
                   *([artifact(out_dir / "index.json", run.path, "trajectory_index")]
                     if (out_dir / "index.json").is_file() else [])],
        missing=[] if st.get("statistic") is not None else ["equivalence_statistic"],
        limitations=report["limitations"], data={"report": report}, verdict=report["verdict"])
    payload = {"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "reason": report["reason"],
               "statistic": st, "surface": report["surface"], "claim": s.claim, "run_dir": str(run.path),
               "report_file": str(report_path), "limitations": report["limitations"]}
    return Outcome(payload, rec["verdict"], lambda console: render_audit(console, rec))
