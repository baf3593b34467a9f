"""``quality gsm8k --backend lm-eval``: the same problems through lm-evaluation-harness, recorded like the builtin run.

The problems asked (the packaged split or ``--data``, cut to ``--limit``) are written to
``quality/gsm8k/<label>.lm_eval/problems.jsonl`` and lm-eval reads that file offline
(``gsm8k_lmeval.run_lm_eval``). Its flexible-extract accuracy (last number) is the headline, with a
Wilson interval from its per-problem samples; strict-match (``#### n``) is reported beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.gsm8k import GsmData, GsmItem
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, metric
from inferencekit.quality.gsm8k import prompt_messages
from inferencekit.quality.gsm8k_lmeval import parse_samples, refused_settings, require_lm_eval, run_lm_eval
from inferencekit.quality.task_run import auto_concurrency, save_task_record, write_new
from inferencekit.rundir import RunDir, write_bytes
from inferencekit.stats import wilson_interval

__all__ = ["check_lm_eval_request", "run_lm_eval_backend"]


def check_lm_eval_request(*, extra: dict[str, Any], ctk: dict[str, Any] | None, paired_with: str | None,
                          time_budget_s: float | None) -> None:
    """Refuse, before any request, what the lm-eval backend cannot do.

    Raises:
        OpError: the ``lmeval`` extra missing (``pip install 'inferencekit[lmeval]' (or make venv)``), --paired-with
            (lm-eval grades with its own filters: pair two builtin runs), --time-budget-s (lm-eval runs its own
            request loop), or an --extra-body field lm-eval sets itself or cannot pass.
    """
    require_lm_eval()
    if paired_with:
        raise OpError("--paired-with needs the builtin backend: lm-eval grades with its own filters, so McNemar's "
                      "test is offered on builtin runs only")
    if time_budget_s is not None:
        raise OpError("--time-budget-s needs the builtin backend: lm-eval runs its own request loop and cannot be "
                      "stopped at a projected deadline")
    refused = refused_settings(chat_template_kwargs=ctk, extra_body=extra)
    if refused:
        raise OpError("; ".join(refused))


def _problems_file(path: Path, items: list[GsmItem]) -> Path:
    write_bytes(path, b"".join(orjson.dumps({"question": it.question, "answer": it.answer_text}) + b"\n"
                               for it in items))
    return path


def run_lm_eval_backend(url: str, run: RunDir, dataset: GsmData, items: list[GsmItem], s: dict[str, Any], *,
                        label: str | None, model: str | None, api_key_env: str | None, timeout: float,
                        concurrency: int, extra: dict[str, Any], quiet: bool, notes: Sequence[str] = ()
                        ) -> dict[str, Any]:
    """Run lm-eval on ``items`` against ``url``; write the per-problem rows and the ``quality_task`` record
    (``data.backend`` "lm-eval"); return the record."""

    async def detect() -> tuple[Any, dict[str, Any]]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            if concurrency:
                return info, {"requested": concurrency, "used": concurrency, "source": "flag", "detail": {}}
            probe = {"model": info.model, "messages": prompt_messages(items[0].question), "max_tokens": 32,
                     "temperature": 0.0, "seed": s["seed"], "stream": False}
            return info, {"requested": 0, **await auto_concurrency(client, info, probe)}

    info, conc = asyncio.run(detect())
    name = label or info.engine
    out_root = run.quality_dir("gsm8k")
    work = out_root / f"{name}.lm_eval"
    data_file = _problems_file(work / "problems.jsonl", items)
    if not quiet:
        import sys
        print(f"inferencekit: lm-eval on {len(items)} problems (concurrency {conc['used']}); this runs its own "
              "progress", file=sys.stderr)
    got = run_lm_eval(base_url=url, model=str(info.model), data_file=data_file, limit=None,
                      concurrency=conc["used"], max_tokens=s["max_tokens"], out_dir=work,
                      timeout_s=max(timeout, 60.0) * max(1, len(items)), api_key_env=api_key_env, seed=s["seed"],
                      chat_template_kwargs=s["chat_template_kwargs"],
                      extra_body={**info.dialect.neutral_sampling, **extra})  # as the builtin backend sends them
    samples = parse_samples(Path(got["samples_path"]).read_text(encoding="utf-8").splitlines())
    rows = [{"id": items[r["doc_id"]].id, "target": items[r["doc_id"]].target,
             "extracted": r["flexible"]["answer"], "method": "lm-eval flexible-extract",
             "correct": r["flexible"]["correct"], "strict_correct": r["strict"]["correct"], "failed": False,
             "reply": r["reply"]} for r in samples]
    results = write_new(out_root / f"{name}.jsonl", b"".join(orjson.dumps(r) + b"\n" for r in rows))
    n = len(rows)
    correct = sum(r["correct"] for r in rows)
    strict = sum(r["strict_correct"] for r in rows)
    ci = list(wilson_interval(correct, n)) if n else None
    acc = correct / n if n else None
    lim = [("lm-eval backend: lm-evaluation-harness sends the same prompt and grades with its own filters "
            "(flexible-extract: the last number; strict-match: '#### n'); McNemar pairing is offered on builtin runs")]
    if n < len(items):
        lim.append(f"lm-eval graded {n} of the {len(items)} problems sent")
    if n < dataset.count:
        lim.append(f"subset: the first {n} of the {dataset.count} problems of {dataset.name}: the accuracy and its "
                   "interval are of this subset, not of the whole split")
    summary = (f"{name}: GSM8K (lm-eval {got.get('lm_eval_version') or '?'}) flexible-extract {correct}/{n} = "
               f"{acc:.1%} (95% Wilson CI {ci[0]:.1%} to {ci[1]:.1%}), strict-match {strict}/{n}"
               if acc is not None and ci else f"{name}: GSM8K (lm-eval): no problem graded")
    arts = [artifact(results, run.path, "gsm8k_results"), artifact(data_file, run.path, "gsm8k_problems"),
            artifact(Path(got["results_path"]), run.path, "lm_eval_results"),
            artifact(Path(got["samples_path"]), run.path, "lm_eval_samples")]
    return save_task_record(
        run, task="gsm8k", label=name, summary=summary, engine=info.identity(), model=str(info.model),
        workload={"dataset": dataset.describe(), "problems": n, "max_tokens": s["max_tokens"], "temperature": 0.0,
                  "seed": s["seed"], "concurrency": conc["used"]},
        metrics=[metric("gsm8k_accuracy", acc, "fraction", "rate", n, ci95=ci, subject=name),
                 metric("gsm8k_strict_accuracy", strict / n if n else None, "fraction", "rate", n, subject=name)],
        artifacts=arts, missing=[] if n == len(items) else ["responses"], limitations=[*lim, *notes],
        fallbacks=list(notes),
        data={"settings": s, "dataset": dataset.describe(), "results_file": results.relative_to(run.path).as_posix(),
              "n": n, "correct": correct, "failed": len(items) - n, "accuracy": acc, "ci95": ci,
              "strict_correct": strict, "extraction": "lm-eval filters (flexible-extract; strict-match beside it)",
              "lm_eval": {k: v for k, v in got.items() if k not in ("results_path", "samples_path")},
              "concurrency": conc, "time_budget": None, "paired": None})
