"""``inferencekit quality gsm8k``: GSM8K zero-shot chain of thought over the chat API, accuracy with a Wilson CI.

Collect side only: the problems, the prompt, extraction and the statistics are ``quality/gsm8k.py``.
Layout under the run dir: ``quality/gsm8k/<label>/<item id>.json`` (one file per problem as it finishes:
the request, the reply text, finish reason and usage; an interrupted run resumes from them) and
``quality/gsm8k/<label>.jsonl`` (the graded rows, listed by the ``quality_task`` record by SHA-256).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.gsm8k import PACKAGED_COUNT, GsmData, GsmItem
from inferencekit.errors import OpError
from inferencekit.evidence import (
    Store,
    artifact,
    compute_id,
    integrity_problems,
    metric,
    record_base,
    resolve_record,
    sha256_file,
)
from inferencekit.quality.gsm8k import PAIR_FIELDS, mcnemar, prompt_messages, prompt_sha256, score_items
from inferencekit.quality.task_run import (
    ItemStore,
    auto_concurrency,
    reply_fields,
    save_task_record,
    send_in_order,
    write_new,
)
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, read_json

__all__ = ["EXTRACTION", "gsm8k_settings", "load_paired_run", "run_builtin"]

EXTRACTION = "last '#### n', else the last \\boxed{}, else the last number; numeric equality"
# Fields a GSM8K request sets itself: --extra-body may not override them.
GSM_FIXED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stream", "n",
             "logprobs", "top_logprobs", "stream_options"}
PROBE_MAX_TOKENS = 32  # the auto-concurrency timing probe's requests


def gsm8k_settings(dataset: GsmData, *, max_tokens: int, ctk: dict[str, Any] | None, backend: str,
                   seed: int) -> dict[str, Any]:
    """What a GSM8K run records as its settings: every ``PAIR_FIELDS`` key (what a pair must share), plus the
    dataset's name and the seed. Greedy: temperature 0."""
    return {"dataset": dataset.name, "dataset_sha256": dataset.sha256, "prompt_sha256": prompt_sha256(),
            "max_tokens": max_tokens, "temperature": 0.0, "chat_template_kwargs": ctk or None, "backend": backend,
            "seed": seed}


def _record_lists(rec: Any, sha: str) -> bool:
    return (isinstance(rec, dict) and rec.get("kind") == "quality_task"
            and (rec.get("data") or {}).get("task") == "gsm8k"
            and any(a.get("role") == "gsm8k_results" and a.get("sha256") == sha for a in rec.get("artifacts") or []))


def _intact(rec: dict[str, Any]) -> bool:
    try:
        return compute_id(rec) == rec.get("evidence_id")
    except ValueError:
        return False


def load_paired_run(ref: str) -> dict[str, Any]:
    """An earlier ``quality gsm8k`` run for ``--paired-with``: ``{"rows", "settings", "evidence_id", "file"}``.

    ``ref`` is the run's results file (``quality/gsm8k/<label>.jsonl``) or its evidence id. Either way
    the file must be listed, with its current SHA-256, by an intact gsm8k ``quality_task`` record (the
    run's own ``evidence/`` first, then the store): the record holds the settings the pair is checked on.

    Raises:
        OpError: no such file or record; a record that is not a gsm8k task, or was edited; a results file
            changed since its record, or listed by no record (its settings cannot be checked).
    """
    p = Path(ref)
    if p.is_file() and p.suffix == ".jsonl":
        sha = sha256_file(p)
        run = p.resolve().parents[2] if len(p.resolve().parents) > 2 else p.parent
        local = RunDir(run).evidence_files()
        rec = next((r for r in (read_json(x) for x in [*local, *Store().all()]) if _record_lists(r, sha)
                    and _intact(r)), None)
        if rec is None:
            raise OpError(f"--paired-with {ref}: no intact quality gsm8k evidence record lists this file as it is now "
                          "(edited, or not written by quality gsm8k), so the settings of that run cannot be checked")
        path = p
    else:
        rec, rec_path = resolve_record(ref)
        data = rec.get("data") or {}
        if rec.get("kind") != "quality_task" or data.get("task") != "gsm8k":
            raise OpError(f"--paired-with {ref}: not a quality gsm8k record (kind {rec.get('kind')}, "
                          f"task {data.get('task')})")
        if not _intact(rec):
            raise OpError(f"--paired-with {ref}: the record was edited after it was written (its id does not match)")
        arts = [a for a in rec.get("artifacts") or [] if a.get("role") == "gsm8k_results"]
        base = record_base(rec_path, rec)
        if not arts:
            raise OpError(f"--paired-with {ref}: the record lists no per-problem results file")
        if base is None:
            raise OpError(f"--paired-with {ref}: its run directory is gone, so its results cannot be read")
        problems = integrity_problems(rec, base)  # the results file and the item index, by SHA-256
        if problems:
            raise OpError(f"--paired-with {ref}: its files changed after the record was written ({problems[0]})")
        path = base / arts[0]["path"]
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return {"rows": rows, "settings": (rec.get("data") or {}).get("settings") or {}, "evidence_id": rec["evidence_id"],
            "file": str(path)}


def _body(info: EngineInfo, item: GsmItem, s: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    body = {**extra, "model": info.model, "messages": prompt_messages(item.question), "max_tokens": s["max_tokens"],
            "temperature": 0.0, "seed": s["seed"], "stream": False, **info.dialect.neutral_sampling}
    if s["chat_template_kwargs"]:
        body["chat_template_kwargs"] = s["chat_template_kwargs"]
    return body


def _reply_row(item: GsmItem, body: dict[str, Any], resp: dict[str, Any] | None, err: str | None) -> dict[str, Any]:
    return {"id": item.id, "request": body, **reply_fields(resp, err)}


async def _collect(url: str, items: list[GsmItem], s: dict[str, Any], extra: dict[str, Any], *, out_root: Path,
                   label: str | None, model: str | None, api_key_env: str | None, timeout: float,
                   deadline: float | None, concurrency: int, quiet: bool) -> dict[str, Any]:
    """Detect the engine, size the pool, send the problems; ``{"rows", "sent", "conc", "info", "store", "label"}``."""
    async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
        info = await detect_engine(client, model)
        name = label or info.engine
        store = ItemStore(out_root / name)
        store.claim({**s, "extra_body": extra or None, "problems": len(items), "first": items[0].id}, "gsm8k")
        if concurrency == 0:
            probe = {**_body(info, items[0], s, extra), "max_tokens": PROBE_MAX_TOKENS}
            conc = {"requested": 0, **await auto_concurrency(client, info, probe)}
        else:
            conc = {"requested": concurrency, "used": concurrency, "source": "flag", "detail": {}}

        async def one(item: GsmItem) -> dict[str, Any]:
            body = _body(info, item, s, extra)
            return await store.answer(client, item.id, body, lambda resp, err: _reply_row(item, body, resp, err))

        with ProgressBar(quiet) as bar:
            bar.on_level(f"GSM8K ({len(items)} problems, concurrency {conc['used']})", len(items))
            rows, sent = await send_in_order(items, one, concurrency=conc["used"], deadline=deadline,
                                             on_done=lambda r: bar.on_done("g", "error" not in r),
                                             counts=lambda r: r["id"] not in store.reused_ids)
    return {"rows": rows, "sent": sent, "conc": conc, "info": info, "store": store, "label": name}


def _limitations(graded: dict[str, Any], rows: list[dict[str, Any]], *, asked: int, data: GsmData,
                 sent: dict[str, Any], conc: dict[str, Any], s: dict[str, Any], budget: float | None,
                 reused: int) -> list[str]:
    out = []
    n = graded["n"]
    if graded["failed"]:
        out.append(f"{graded['failed']} of {n} requests failed and count as wrong (each file under the label's folder "
                   "holds the error)")
    cut = sum(1 for r in rows if r.get("finish_reason") == "length")
    if cut:
        out.append(f"{cut} of {n} replies stopped at max_tokens {s['max_tokens']}: their answer may be cut off")
    if sent["stopped_early"]:
        out.append(f"subset: the first {n} of {asked} problems — --time-budget-s {budget:g} stopped new requests (all "
                   f"{asked} were projected to take about {sent['projected_full_s']:.0f} s at concurrency "
                   f"{conc['used']})")
    if n < data.count:
        out.append(f"subset: the first {n} of the {data.count} problems of {data.name}: the accuracy and its interval "
                   "are of this subset, not of the whole split")
    if conc["source"] == "timing_probe" and conc["detail"].get("error"):
        out.append(f"auto concurrency: {conc['detail']['error']}; ran with {conc['used']}")
    if reused:
        out.append(f"{reused} of {n} replies read back from an earlier run of the same requests in this run dir "
                   "(resumed); timings and the budget's projection count only the requests sent by this run")
    return out


def _paired(graded: dict[str, Any], other: dict[str, Any] | None) -> dict[str, Any] | None:
    if other is None:
        return None
    test = mcnemar(graded["rows"], other["rows"])
    delta = (test["accuracy_a"] - test["accuracy_b"]) if test["n_common"] else None
    return {**test, "accuracy_delta": delta, "other_evidence_id": other["evidence_id"], "other_file": other["file"]}


def _metrics(graded: dict[str, Any], rows: list[dict[str, Any]], paired: dict[str, Any] | None,
             label: str) -> list[dict[str, Any]]:
    n = graded["n"]
    out = [metric("gsm8k_accuracy", graded["accuracy"], "fraction", "rate", n, ci95=graded["ci95"], subject=label),
           metric("gsm8k_truncated_at_max_tokens", sum(1 for r in rows if r.get("finish_reason") == "length"),
                  "problems", "count", n, subject=label),
           metric("gsm8k_failed_requests", graded["failed"], "problems", "count", n, subject=label)]
    if paired is not None:
        out += [metric("gsm8k_accuracy_delta", paired["accuracy_delta"], "fraction", "paired_difference",
                       paired["n_common"], subject=f"{label} minus {paired['other_evidence_id']}"),
                metric("mcnemar_exact_p", paired["p_value"], "p", "two_sided", paired["b"] + paired["c"],
                       subject=f"{label} vs {paired['other_evidence_id']}")]
    return out


def _summary(label: str, graded: dict[str, Any], paired: dict[str, Any] | None, sent: dict[str, Any],
             conc: dict[str, Any]) -> str:
    acc, ci = graded["accuracy"], graded["ci95"]
    text = (f"{label}: GSM8K {graded['correct']}/{graded['n']} = {acc:.1%} (95% Wilson CI {ci[0]:.1%} to {ci[1]:.1%})"
            if acc is not None else f"{label}: GSM8K: no problem answered")
    if paired is not None and paired["p_value"] is not None:
        text += (f"; paired with {paired['other_evidence_id']} on {paired['n_common']} problems: "
                 f"{paired['accuracy_delta']:+.1%}, McNemar exact p = {paired['p_value']:.3g} "
                 f"({paired['b']} right only here, {paired['c']} only there)")
    if graded["failed"]:
        text += f" — UNPROVEN: {graded['failed']} of {graded['n']} requests failed (counted as wrong)"
    if sent["stopped_early"]:
        text += f"; time budget: first {sent['sent']} of {sent['of']}"
    if conc["source"] != "flag":
        text += f"; concurrency {conc['used']} ({conc['source']})"
    return text


def run_builtin(url: str, run: RunDir, dataset: GsmData, items: list[GsmItem], s: dict[str, Any],
                 extra: dict[str, Any], other: dict[str, Any] | None, *, label: str | None, model: str | None,
                 api_key_env: str | None, timeout: float, concurrency: int, deadline: float | None,
                 budget: float | None, quiet: bool, notes: Sequence[str] = ()) -> dict[str, Any]:
    out_root = run.quality_dir("gsm8k")
    got = asyncio.run(_collect(url, items, s, extra, out_root=out_root, label=label, model=model,
                               api_key_env=api_key_env, timeout=timeout, deadline=deadline, concurrency=concurrency,
                               quiet=quiet))
    rows, sent, conc, info, store, name = (got[k] for k in ("rows", "sent", "conc", "info", "store", "label"))
    asked = items[:len(rows)]
    graded = score_items(asked, {r["id"]: (r.get("text") if "error" not in r else None) for r in rows})
    by_id = {r["id"]: r for r in rows}
    lines = []
    for g in graded["rows"]:
        r = by_id[g["id"]]
        lines.append({**g, "finish_reason": r.get("finish_reason"),
                      "completion_tokens": (r.get("usage") or {}).get("completion_tokens"),
                      **({"error": r["error"]} if "error" in r else {}), "reply": r.get("text")})
    results = write_new(out_root / f"{name}.jsonl", b"".join(orjson.dumps(x) + b"\n" for x in lines))
    index = store.write_index([it.id for it in asked])
    paired = _paired(graded, other)
    lim = _limitations(graded, rows, asked=len(items), data=dataset, sent=sent, conc=conc, s=s, budget=budget,
                       reused=store.reused) + list(notes)
    if paired is not None and (paired["only_in_a"] or paired["only_in_b"]):
        lim.append(f"paired on the {paired['n_common']} problems both runs answered ({paired['only_in_a']} only "
                   f"here, {paired['only_in_b']} only in {paired['other_evidence_id']})")
    budget_info = {**sent, "budget_s": budget} if budget else None
    return save_task_record(
        run, task="gsm8k", label=name, summary=_summary(name, graded, paired, sent, conc), engine=info.identity(),
        model=str(info.model),
        workload={"dataset": dataset.describe(), "problems": len(rows), "max_tokens": s["max_tokens"],
                  "temperature": 0.0, "seed": s["seed"], "concurrency": conc["used"]},
        metrics=_metrics(graded, rows, paired, name),
        artifacts=[artifact(results, run.path, "gsm8k_results"), artifact(index, run.path, "gsm8k_items")],
        missing=["responses"] if graded["failed"] else [], limitations=lim, fallbacks=list(notes),
        verdict="UNPROVEN" if graded["failed"] else None,
        data={"settings": s, "dataset": dataset.describe(), "results_file": results.relative_to(run.path).as_posix(),
              "items_dir": (out_root / name).relative_to(run.path).as_posix(), "n": graded["n"],
              "correct": graded["correct"], "failed": graded["failed"], "accuracy": graded["accuracy"],
              "ci95": graded["ci95"], "extraction": EXTRACTION, "extraction_methods": graded["methods"],
              "packaged_count": PACKAGED_COUNT, "concurrency": conc, "time_budget": budget_info, "sent": sent,
              "paired": paired, "extra_body": extra or None, "reused_replies": store.reused,
              "pair_fields": list(PAIR_FIELDS)})
