"""One equivalence audit as a job: collect on the chosen surface, judge, write the report and its record.

``audit equivalence`` (commands/audit.py) and ``verify`` (standard and full profiles) both run it; the collecting
and the judging are in ``equivalence_run`` (collect) and ``equivalence_judge`` (pure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt, PromptSet
from inferencekit.evidence import artifact
from inferencekit.quality.equivalence_first import (
    FIRST_TOKEN_REQUESTS,
    FIRST_TOKEN_STAT,
    collect_first_token,
    first_token_report,
)
from inferencekit.quality.equivalence_run import (
    AUDIT_FORMAT,
    AuditSettings,
    audit_prompts,
    audit_report,
    collect_audit,
)
from inferencekit.quality.equivalence_text import ReferenceSamples, collect_text, text_report
from inferencekit.quality.reference import LocalReference
from inferencekit.quality.task_run import save_task_record
from inferencekit.rundir import RunDir, write_json

__all__ = ["AuditPlan", "plan_audit", "run_audit", "statistic_line"]


@dataclasses.dataclass(frozen=True, slots=True)
class AuditPlan:
    """The prompts and settings of both surfaces, drawn before anything is sent (a pool too small refuses here)."""

    s: AuditSettings
    surface: str  # as asked: auto, logprob, first_token or text
    pset: PromptSet
    chosen: tuple[Prompt, ...]
    text_s: AuditSettings
    text_chosen: tuple[Prompt, ...]
    first_s: AuditSettings | None = None  # under auto: the informational first-token test, when its pool was given
    first_chosen: tuple[Prompt, ...] = ()


def plan_audit(pset: PromptSet, s: AuditSettings, surface: str, first_pset: PromptSet | None = None,
               text_pset: PromptSet | None = None) -> AuditPlan:
    """Draw the prompts of the asked surface (and, under ``auto``, of the text fallback, from ``text_pset`` when
    given, and, given ``first_pset``, of the informational first-token test: ``FIRST_TOKEN_REQUESTS`` of its
    prompts).

    Raises:
        OpError: the prompt set has too few chat prompts for the budget (``audit_prompts``).
    """
    s = dataclasses.replace(s, surface=surface if surface in ("text", "first_token") else "logprob", pool=pset.name)
    chosen = audit_prompts(pset.prompts, s)
    tp = text_pset or pset
    text_s = dataclasses.replace(s, surface="text", pool=tp.name)
    text_chosen = audit_prompts(tp.prompts, text_s) if surface == "auto" else chosen
    first_s: AuditSettings | None = None
    first_chosen: tuple[Prompt, ...] = ()
    if surface == "auto" and first_pset is not None:
        first_s = dataclasses.replace(s, surface="first_token", pool=first_pset.name,
                                      budget_requests=FIRST_TOKEN_REQUESTS, label=f"{s.label}-first")
        first_chosen = tuple(audit_prompts(first_pset.prompts, first_s))
    return AuditPlan(s, surface, pset, tuple(chosen), text_s, tuple(text_chosen), first_s, first_chosen)


async def _informational_first_token(client: Client, info: EngineInfo, ref: LocalReference, run: RunDir,
                                     plan: AuditPlan, cells: Sequence[dict[str, Any]],
                                     table_source: str) -> dict[str, Any] | None:
    """The first-token test beside a logprob verdict (issue 20: the tests the surface allows besides the primary
    one are informational): its verdict and reason, never the audit's."""
    fs = plan.first_s
    if fs is None or not plan.first_chosen:
        return None
    got = await collect_first_token(client, info, ref, list(plan.first_chosen), run.quality_dir(fs.label),
                                    top_logprobs=fs.top_logprobs, label=fs.label, concurrency=4)
    rep = first_token_report(got, cells, claim=fs.claim, made=fs.made(), table_source=table_source)
    return {"method": FIRST_TOKEN_STAT, "verdict": rep["verdict"], "reason": rep["reason"],
            "statistic": rep["statistic"], "budget_used": rep["budget_used"], "limitations": rep["limitations"]}


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def statistic_line(report: dict[str, Any]) -> str:
    """How the run's statistic was measured, in one line."""
    st = report["statistic"]
    if st.get("statistic") is None:
        return f"no statistic; calibration: {report['table']}"
    if st.get("name") == FIRST_TOKEN_STAT:
        agree = st.get("top1_agreement")
        return (f"statistic first_token = {_num(st['statistic'])} nats (mean over {st['prompts']} prompts of the mean "
                f"|logprob difference| over the reference's top-k for the first output token; top-1 agreement "
                f"{'n/a' if agree is None else f'{100 * agree:.1f}%'}; paired permutation p = "
                f"{_num(st.get('shift_p_value'))} for a shift of the reference's top token, mean "
                f"{_num(st.get('shift_mean'))} nats) from {report['budget_used']} requests; calibration: "
                f"{report['table']}")
    if st.get("name") == "mmd":
        return (f"statistic MMD² = {_num(st['statistic'])} (mean over {st['prompts']} prompts of the unbiased MMD² "
                f"between engine and reference samples, {st['kernel']} kernel; permutation p = {_num(st['p_value'])}) "
                f"from {report['budget_used']} requests; calibration: {report['table']}")
    return (f"statistic {st['name']} = {_num(st['statistic'])} nats/token (KL {_num(st['kl_mean'])}, DiFR gap "
            f"{_num(st['gap_mean'])}) over {st['positions']} scored output tokens of {report['prompts']} prompts; "
            f"calibration: {report['table']}")


async def run_audit(client: Client, info: EngineInfo, ref: LocalReference, run: RunDir, plan: AuditPlan,
                    cells: Sequence[dict[str, Any]], table_source: str) -> dict[str, Any]:
    """Collect, judge and record one audit in ``run``; returns its ``quality_task`` record (``data.report`` holds the
    report, ``quality/<label>-equivalence.json`` the same with the reference and the prompt ids)."""
    s, chosen = plan.s, list(plan.chosen)
    report: dict[str, Any] | None = None
    if s.surface == "first_token":
        got = await collect_first_token(client, info, ref, chosen, run.quality_dir(s.label),
                                        top_logprobs=s.top_logprobs, label=s.label, concurrency=4,
                                        prompts_sha256=plan.pset.sha256)
        report = {"format": AUDIT_FORMAT, **first_token_report(got, cells, claim=s.claim, made=s.made(),
                                                                table_source=table_source)}
    if s.surface == "logprob":
        got = await collect_audit(client, info, ref, chosen, run, s,
                                  prompts_info={**plan.pset.describe(), "selected": [p.id for p in chosen]})
        if got["surface"] == "logprob" or plan.surface == "logprob":  # asked for logprobs: no fallback
            report = audit_report(got, cells, s, table_source)
            if report["statistic"].get("name") == "kl+gap":  # the engine names token ids: first-token can run
                extra = await _informational_first_token(client, info, ref, run, plan, cells, table_source)
                if extra is not None:
                    report["informational"] = [extra]
    if report is None:  # the text surface, asked for or (auto) because the endpoint returned no logprobs
        s, chosen = plan.text_s, list(plan.text_chosen)
        got = await collect_text(client, info, ReferenceSamples(ref.m), chosen, run.quality_dir(f"{s.label}-text"), s)
        report = text_report(got, cells, s, table_source)
        if plan.surface == "auto":
            report["limitations"][0] = "text surface: the endpoint returned no logprobs on generated tokens"
    report_path = run.quality_file(f"{s.label}-equivalence.json")
    write_json(report_path, {**report, "reference": ref.describe(), "prompt_ids": [p.id for p in chosen]}, indent=True)
    st = report["statistic"]
    out_dir = run.quality_dir(s.label)
    return save_task_record(
        run, task="equivalence", label=s.label,
        summary=f"equivalence audit, claim {s.claim}: {report['verdict']} — {report['reason']}",
        engine=info.identity(), model=str(info.model),
        workload={"prompts": [p.id for p in chosen], "pool": plan.pset.name, "surface": report["surface"],
                  "budget_tokens": s.budget_tokens, "max_tokens": s.max_tokens, "budget_requests": s.budget_requests,
                  "samples": s.samples, "sample_tokens": s.sample_tokens, "seed": s.seed,
                  "reference": ref.describe()},
        metrics=[{"name": "equivalence_statistic", "value": st.get("statistic"),
                  "unit": {"mmd": "MMD² (kernel units)", FIRST_TOKEN_STAT: "nats"}.get(st.get("name") or "",
                                                                                    "nats/token"),
                  "method": statistic_line(report)},
                 {"name": "budget_used", "value": report["budget_used"],
                  "unit": ("requests" if report["surface"] in ("text", "first_token")
                           else "output tokens (prompts scored × max_tokens)")}],
        artifacts=[artifact(report_path, run.path, "equivalence_report"),
                   *([artifact(out_dir / "index.json", run.path, "trajectory_index")]
                     if (out_dir / "index.json").is_file() else [])],
        missing=[] if st.get("statistic") is not None else ["equivalence_statistic"],
        limitations=report["limitations"], data={"report": report}, verdict=report["verdict"])
