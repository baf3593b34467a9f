"""``inferencekit quality niah``: needle in a haystack over the chat API, accuracy per (length, depth) cell.

Collect side only: haystacks, scoring and the heat-map are ``quality/niah.py``. Layout under the run dir:
``quality/niah/<label>/<case id>.json`` (one file per case as it finishes: the request, the reply text,
``usage.prompt_tokens`` or the error; an interrupted run with the same requests keeps them),
``quality/niah/<label>.json`` (the scored grid, listed by the ``quality_task`` record by SHA-256) and
``quality/niah/heatmap.html`` (a view of the latest grid written in this run dir; not in the record, so a
later run may rewrite it without breaking an earlier record).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.tokenize import EngineTokenizer, TokenizeError
from inferencekit.data.niah_filler import calibration_text
from inferencekit.engines.launcher import RunningEngine
from inferencekit.engines.target import EMBEDDED_N_CTX_FLAG, launched_context
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, metric
from inferencekit.quality import niah
from inferencekit.quality.task_run import ItemStore, reply_fields, save_task_record, send_in_order, write_new
from inferencekit.report.niah_heatmap import write_heatmap
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, safe_name

__all__ = ["NIAH_FIXED", "TEMPLATE_ALLOWANCE", "check_fit", "run_niah"]

# Fields a NIAH request sets itself: --extra-body may not override them.
NIAH_FIXED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stream", "n",
              "logprobs", "top_logprobs", "stream_options"}
TEMPLATE_ALLOWANCE = 64
"""Tokens allowed for the chat template (role markers, a default system prompt) when checking that a case fits."""
RESULTS_FORMAT = "inferencekit.niah.v1"


def check_fit(lengths: list[int], max_tokens: int, context: int | None, chars_per_token: float, source: str) -> None:
    """Refuse target lengths whose prompt plus reply cannot fit one request's context.

    The estimate per case, in tokens: length + the instruction and question
    (``niah.PROMPT_OVERHEAD_CHARS / chars_per_token``, rounded up) + ``TEMPLATE_ALLOWANCE`` + ``max_tokens``.
    ``context`` None (unknown) checks nothing.

    Raises:
        OpError: some length does not fit; the message names it, the context, its ``source`` and the
            largest length that fits.
    """
    if context is None:
        return
    around = math.ceil(niah.PROMPT_OVERHEAD_CHARS / chars_per_token) + TEMPLATE_ALLOWANCE + max_tokens
    too_long = [n for n in lengths if n + around > context]
    if too_long:
        raise OpError(f"--lengths {','.join(map(str, too_long))} cannot fit: each case needs its haystack plus "
                      f"≈ {around} tokens (instruction and question, {TEMPLATE_ALLOWANCE} for the chat template, "
                      f"--max-tokens {max_tokens}), and the context is {context} tokens per request ({source}); "
                      f"use lengths ≤ {context - around}")


def _context(info: EngineInfo, eng: RunningEngine | None) -> tuple[int | None, str | None]:
    """The context one request may use and where that figure comes from, or (None, None)."""
    if info.context_tokens:
        return info.context_tokens, f"reported by {info.engine}"
    launched = launched_context(eng)
    if launched:
        return launched, f"the embedded engine's {EMBEDDED_N_CTX_FLAG}"
    return None, None


async def _chars_per_token(client: Client, info: EngineInfo) -> dict[str, Any]:
    """``{"value", "method": "measured"|"assumed", "source"|"why", "chars", "tokens", "text"}``: chars per token of
    ``calibration_text()`` on the engine's own tokenizer, else ``niah.ASSUMED_CHARS_PER_TOKEN`` and why."""
    text = calibration_text()
    if not info.dialect.tokenize_path:
        why = f"{info.engine} has no known tokenize endpoint"
    else:
        tok = EngineTokenizer(client, info.dialect)
        try:
            ids = await tok.encode(text)
        except TokenizeError as e:
            ids, why = [], f"{tok.source} failed: {str(e)[:200]}"
        else:
            why = f"{tok.source} returned no tokens"
        if ids:
            value = round(len(text) / len(ids), 4)
            return {"value": value, "method": "measured", "source": tok.source, "chars": len(text),
                    "tokens": len(ids), "text": f"the engine's tokenizer ({tok.source}): {value:.2f} chars/token "
                                                f"measured on {len(text)} characters of filler"}
    value = niah.ASSUMED_CHARS_PER_TOKEN
    return {"value": value, "method": "assumed", "why": why,
            "text": f"an assumed {value} chars/token ({why}): lengths in tokens are rough"}


def _body(info: EngineInfo, case: niah.NiahCase, s: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    body = {**extra, "model": info.model, "messages": [dict(m) for m in case.messages],
            "max_tokens": s["max_tokens"], "temperature": 0.0, "seed": s["seed"], "stream": False,
            **info.dialect.neutral_sampling}
    if s["chat_template_kwargs"]:
        body["chat_template_kwargs"] = s["chat_template_kwargs"]
    return body


def _reply_row(case: niah.NiahCase, body: dict[str, Any], resp: dict[str, Any] | None,
               err: str | None) -> dict[str, Any]:
    meta = {k: v for k, v in case.to_dict().items() if k != "messages"}
    row: dict[str, Any] = {"id": case.id, "case": meta, "request": body, **reply_fields(resp, err)}
    if "error" in row:
        return row
    usage = row.pop("usage")
    tokens = usage.get("prompt_tokens")
    return {**row, "prompt_tokens": tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
            "completion_tokens": usage.get("completion_tokens")}


async def _collect(url: str, eng: RunningEngine | None, s: dict[str, Any], extra: dict[str, Any], *, out_root: Path,
                   label: str | None, model: str | None, api_key_env: str | None, timeout: float,
                   quiet: bool) -> dict[str, Any]:
    """Detect the engine, measure chars per token, check the fit, send every case; the pieces of the record."""
    async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
        info = await detect_engine(client, model)
        name = safe_name(label or info.engine, "label")
        cpt = await _chars_per_token(client, info)
        context, context_source = _context(info, eng)
        check_fit(s["lengths"], s["max_tokens"], context, cpt["value"], context_source or "")
        cases = niah.plan_grid(s["lengths"], s["depths"], s["trials"], s["seed"], cpt["value"])
        store = ItemStore(out_root / name)
        store.claim({**s, "extra_body": extra or None, "chars_per_token": cpt["value"]}, "niah")

        async def one(case: niah.NiahCase) -> dict[str, Any]:
            body = _body(info, case, s, extra)
            return await store.answer(client, case.id, body, lambda resp, err: _reply_row(case, body, resp, err))

        with ProgressBar(quiet) as bar:
            bar.on_level(f"needle in a haystack ({name}, {len(cases)} cases)", len(cases))
            rows, sent = await send_in_order(cases, one, concurrency=s["concurrency"],
                                             on_done=lambda r: bar.on_done("n", "error" not in r),
                                             counts=lambda r: r["id"] not in store.reused_ids)
    return {"rows": rows, "cases": cases, "sent": sent, "info": info, "label": name, "store": store,
            "reused": store.reused,
            "cpt": cpt, "context": context, "context_source": context_source}


def _limitations(got: dict[str, Any], result: dict[str, Any], s: dict[str, Any]) -> list[str]:
    rows, context, n = got["rows"], got["context"], result["n"]
    out = [("synthetic filler (generated village prose with one planted 7-digit code): this measures retrieval of "
            "one fact, not long-context reasoning"),
           ("lengths are targets: haystacks are sized in characters from chars per token, so each case's real "
            "token count differs a little; the instruction, question and chat template come on top (the results "
            "give the prompt_tokens the server reported per cell)")]
    if got["cpt"]["method"] == "assumed":
        out.append(f"chars per token assumed to be {got['cpt']['value']} ({got['cpt']['why']}): the haystacks may "
                   "be well off their target lengths in this engine's tokens")
    if result["failed"]:
        out.append(f"{result['failed']} of {n} requests failed and count as misses (each case file holds its error)")
    cut = [r for r in rows if "error" not in r and context and r.get("prompt_tokens") is not None
           and r["prompt_tokens"] + s["max_tokens"] > context]
    ctx_err = [r for r in rows if "context" in str(r.get("error", "")).lower()]
    if cut or ctx_err:
        out.append(f"{len(cut) + len(ctx_err)} of {n} cases were truncated by the context"
                   f"{f' of {context} tokens' if context else ''} (prompt + --max-tokens over it, or refused for its "
                   "length): their reply may be cut short or missing")
    short = sum(1 for r in rows if r.get("finish_reason") == "length")
    if short:
        out.append(f"{short} of {n} replies stopped at --max-tokens {s['max_tokens']}: a code after it is not seen")
    if context is None:
        out.append("the server reports no context length: lengths were not checked against it")
    if got["reused"]:
        out.append(f"{got['reused']} of {n} replies read back from an earlier run of the same requests in this run dir "
                   "(resumed)")
    return out


def _metrics(result: dict[str, Any], label: str) -> list[dict[str, Any]]:
    out = [metric("niah_accuracy", c["accuracy"], "fraction", "rate", c["trials"], ci95=c["ci95"],
                  subject=f"{label} length {c['length_tokens']} depth {c['depth']:g}")
           for c in result["cells"]]
    out.append(metric("niah_accuracy", result["accuracy"], "fraction", "rate", result["n"], ci95=result["ci95"],
                      subject=f"{label} overall"))
    out.append(metric("niah_failed_requests", result["failed"], "cases", "count", result["n"], subject=label))
    return out


def run_niah(url: str, eng: RunningEngine | None, run: RunDir, s: dict[str, Any], extra: dict[str, Any], *,
         label: str | None, model: str | None, api_key_env: str | None, timeout: float, quiet: bool,
         notes: Sequence[str] = ()) -> dict[str, Any]:
    out_root = run.quality_dir("niah")
    got = asyncio.run(_collect(url, eng, s, extra, out_root=out_root, label=label, model=model,
                               api_key_env=api_key_env, timeout=timeout, quiet=quiet))
    rows, name, info, cpt = got["rows"], got["label"], got["info"], got["cpt"]
    by_id = {r["id"]: r for r in rows}
    replies = {i: None if "error" in r else r.get("text") for i, r in by_id.items()}
    result = niah.score_grid(got["cases"], replies, {i: r.get("prompt_tokens") for i, r in by_id.items()})
    for row in result["rows"]:  # the reply beside its score: the results file can be re-scored on its own
        r = by_id[row["id"]]
        row.update(reply=r.get("text"), finish_reason=r.get("finish_reason"))
        if "error" in r:
            row["error"] = r["error"]
    # Only what decides the outcome goes in the results file (no timings, no resume counts): the same requests
    # and replies write the same bytes, so a resumed run leaves an earlier record's artifact intact.
    results = write_new(out_root / f"{name}.json", orjson.dumps({"format": RESULTS_FORMAT, "label": name,
                         "engine": info.identity(), "model": info.model,
                         "settings": {k: s[k] for k in ("lengths", "depths", "trials", "max_tokens", "seed",
                                                        "chat_template_kwargs")},
                         "extra_body": extra or None, "chars_per_token": cpt, "context_tokens": got["context"],
                         "context_source": got["context_source"], **result}, option=orjson.OPT_INDENT_2) + b"\n")
    index = got["store"].write_index([c.id for c in got["cases"]])
    heatmap = write_heatmap(result, out_root / "heatmap.html", label=name, measurement=cpt["text"])
    acc, ci = result["accuracy"], result["ci95"]
    summary = (f"{name}: needle in a haystack {result['hits']}/{result['n']} found = {acc:.1%} (95% Wilson CI "
               f"{ci[0]:.1%} to {ci[1]:.1%}) over {len(result['lengths'])} lengths × {len(result['depths'])} depths × "
               f"{s['trials']} trials" + (f" — UNPROVEN: {result['failed']} requests failed (counted as misses)"
                                         if result["failed"] else ""))
    return save_task_record(
        run, task="niah", label=name, summary=summary, engine=info.identity(), model=str(info.model),
        workload={"lengths": s["lengths"], "depths": s["depths"], "trials": s["trials"], "max_tokens": s["max_tokens"],
                  "temperature": 0.0, "seed": s["seed"], "concurrency": s["concurrency"],
                  "chars_per_token": cpt["value"], "chars_per_token_method": cpt["method"]},
        metrics=_metrics(result, name),
        artifacts=[artifact(results, run.path, "niah_results"), artifact(index, run.path, "niah_items")],
        missing=["responses"] if result["failed"] else [], limitations=[*_limitations(got, result, s), *notes],
        fallbacks=list(notes), verdict="UNPROVEN" if result["failed"] else None,
        data={"settings": s, "extra_body": extra or None, "chars_per_token": cpt, "context_tokens": got["context"],
              "context_source": got["context_source"], "results_file": results.relative_to(run.path).as_posix(),
              "cases_dir": (out_root / name).relative_to(run.path).as_posix(),
              "heatmap": heatmap.relative_to(run.path).as_posix(), "cells": result["cells"],
              "by_length": result["by_length"], "n": result["n"], "hits": result["hits"], "failed": result["failed"],
              "accuracy": acc, "ci95": ci, "sent": got["sent"], "reused_replies": got["reused"]})


