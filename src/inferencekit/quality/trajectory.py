"""Greedy trajectories: what an engine generated, token by token, with its top-k logprobs (collect side).

One file per prompt, ``<run>/quality/<label>/<prompt id>.json`` (``TRAJ_FORMAT``), and an
``index.json`` (``INDEX_FORMAT``) holding each file's SHA-256, written last. ``quality score`` reads
them back; the ``quality_trajectory`` evidence record lists the index by its hash, so a file edited
after capture, or an index rewritten to match, is caught (``quality/trajectory_store.py``).

An engine caps top-k logprobs (vLLM ``--max-logprobs``, 20 by default; the OpenAI API 20): the cap is
read from the 400 message ("… max allowed: 20") or k is halved, and the first prompt runs alone so
every later one asks with the discovered k. An engine that refuses logprobs outright gets text-only
trajectories: agreement and NLL can still be scored from re-tokenized text, KL and TV cannot.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import engine_chat_ids
from inferencekit.data.prompts import Prompt
from inferencekit.evidence.canonical import sha256_file
from inferencekit.quality.logprobs import ChatLogprobs, parse_chat_logprobs
from inferencekit.rundir import read_json, write_json

__all__ = ["INDEX_FORMAT", "TRAJ_FORMAT", "LogprobCap", "TrajectorySettings", "ask_logprobs", "cap_from_error",
           "collect_engine", "collect_local", "engine_prompt_ids", "select_prompts", "trajectory_doc", "write_index"]

TRAJ_FORMAT = "inferencekit.quality.trajectory.v1"
INDEX_FORMAT = "inferencekit.quality.index.v1"
DEFAULT_MAX_TOKENS = 256
_CAP = re.compile(r"max(?:imum)?(?: allowed)?\D{0,20}?(\d+)", re.IGNORECASE)


@dataclass(slots=True)
class TrajectorySettings:
    """What every request of one trajectory set asks (recorded in each file and the evidence record).

    ``max_tokens`` None: each prompt's own ``max_tokens``, else ``DEFAULT_MAX_TOKENS``."""

    label: str
    max_tokens: int | None = None
    top_logprobs: int = 20
    seed: int = 0
    concurrency: int = 1
    ctk: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the request policy's limitations (refused --extra-body fields)

    def tokens_for(self, p: Prompt) -> int:
        return int(self.max_tokens or p.max_tokens or DEFAULT_MAX_TOKENS)


def select_prompts(prompts: Sequence[Prompt], limit: int | None) -> list[Prompt]:
    """The chat prompts of a set, taken in turn from each bucket (file order within a bucket), so the first
    ``limit`` cover short and long inputs alike; all of them when ``limit`` is None or 0."""
    by_bucket: dict[str, list[Prompt]] = {}
    for p in prompts:
        if p.is_chat:
            by_bucket.setdefault(p.bucket, []).append(p)
    out: list[Prompt] = []
    queues = list(by_bucket.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out[:limit] if limit else out


def cap_from_error(message: str, k: int) -> int:
    """The top-k an engine's "too many logprobs" error allows: the number it names when below ``k``, else k // 2."""
    m = _CAP.search(message or "")
    if m and 0 < int(m.group(1)) < k:
        return int(m.group(1))
    return k // 2


def _is_logprob_refusal(status: int, error: str | None) -> bool:
    return status in (400, 422) and "logprob" in (error or "").lower()


async def engine_prompt_ids(client: Client, info: EngineInfo, messages: list[dict[str, Any]], ctk: dict[str, Any],
                            resp: dict[str, Any]) -> tuple[list[int] | None, str | None, str | None]:
    """``(prompt ids, source, note)``: the token ids of the prompt as the engine rendered it.

    From the reply itself (vLLM ``prompt_token_ids``), else the engine's own chat tokenizer (vLLM
    ``/tokenize`` with messages; llama-server ``/apply-template`` then ``/tokenize`` with special tokens
    parsed). Ids whose count differs from the reply's ``usage.prompt_tokens`` are not what the engine saw:
    they are dropped, with a note. llama-cpp-python renders its template internally and shows no ids.
    """
    ids = resp.get("prompt_token_ids")
    if isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids):
        return [int(t) for t in ids], "response.prompt_token_ids", None
    ids, src, _ = await engine_chat_ids(client, info.dialect, info.model, messages, ctk)
    if not ids:
        return None, None, None
    counted = (resp.get("usage") or {}).get("prompt_tokens")
    if isinstance(counted, int) and counted != len(ids):
        return None, None, (f"{src} gave {len(ids)} prompt ids but the reply counted {counted} prompt tokens: "
                            "not the prompt the engine saw, not used")
    return ids, src, None


def trajectory_doc(p: Prompt, s: TrajectorySettings, *, engine: str, model: str, base_url: str | None,
                   request: dict[str, Any], parsed: ChatLogprobs, usage: dict[str, Any] | None,
                   prompt_ids: list[int] | None, prompt_src: str | None, notes: list[str]) -> dict[str, Any]:
    """One trajectory file's content (``TRAJ_FORMAT``)."""
    return {"format": TRAJ_FORMAT, "id": p.id, "bucket": p.bucket, "label": s.label, "engine": engine, "model": model,
            "base_url": base_url, "messages": [dict(m) for m in p.messages or ()],
            "chat_template_kwargs": _kwargs(p, s) or None, "request": request,
            "top_logprobs_requested": request.get("top_logprobs"), "top_logprobs_returned": parsed.top_k_returned,
            "token_id_method": parsed.method, "token_ids": parsed.token_ids, "tokens": parsed.tokens,
            "logprobs": parsed.logprobs, "top_logprobs": parsed.top,
            "id_mismatch_positions": parsed.id_mismatch_positions, "prompt_token_ids": prompt_ids,
            "prompt_token_ids_source": prompt_src, "usage": usage, "finish_reason": parsed.finish_reason,
            "text": parsed.text, "notes": notes}


def _kwargs(p: Prompt, s: TrajectorySettings) -> dict[str, Any]:
    """chat_template_kwargs of one prompt: the flag's, under the prompt record's own (per key)."""
    return {**s.ctk, **(p.chat_template_kwargs or {})}


class LogprobCap:
    """The top-k every request asks for, lowered once by the engine's cap and shared by later requests."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.errors: list[str] = []
        self.refused: str | None = None


async def ask_logprobs(client: Client, body: dict[str, Any],
                       cap: LogprobCap) -> tuple[dict[str, Any] | None, dict[str, Any], str | None]:
    """POST one greedy request with ``top_logprobs = cap.k``, lowering k on a cap error; text only once logprobs
    are refused. Returns ``(reply JSON or None, body sent, error)``."""
    plain = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
    while cap.refused is None:
        sent = {**body, "top_logprobs": cap.k}
        ex = await client.post("/v1/chat/completions", sent)
        if ex.ok:
            val = ex.json()
            return (val, sent, None) if isinstance(val, dict) else (None, sent, "reply is not a JSON object")
        if not _is_logprob_refusal(ex.status, ex.error):
            return None, sent, ex.error or f"HTTP {ex.status}"
        new = cap_from_error(ex.error or "", cap.k)
        if new < 1:
            cap.refused = (ex.error or "")[:200]
            cap.errors = [e for e in cap.errors if e != cap.refused]  # the halvings were no cap: a refusal
            break
        if new < cap.k:
            cap.errors.append((ex.error or "")[:200])
            cap.k = new
    ex = await client.post("/v1/chat/completions", plain)
    val = ex.json() if ex.ok else None
    if isinstance(val, dict):
        return val, plain, None
    return None, plain, ex.error or f"HTTP {ex.status}"


async def collect_engine(client: Client, info: EngineInfo, prompts: Sequence[Prompt], out_dir: Path,
                         s: TrajectorySettings, *, on_done: Callable[[dict[str, Any]], None] | None = None
                         ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Greedy trajectories of ``prompts`` from one engine into ``out_dir`` (one atomic file each).

    A file already there from an earlier, interrupted run with the same request settings is kept
    (resume). Returns ``(rows, state)``: one row per prompt (``{id, file, sha256, tokens, k, method}`` or
    ``{id, error}``) and ``{"k", "cap_errors", "refused", "resumed"}``.
    """
    cap = LogprobCap(s.top_logprobs)
    sem = asyncio.Semaphore(max(1, s.concurrency))
    resumed = 0

    async def one(p: Prompt) -> dict[str, Any]:
        nonlocal resumed
        path = out_dir / f"{p.id}.json"
        body = {**s.extra, "model": info.model, "messages": [dict(m) for m in p.messages or ()],
                "max_tokens": s.tokens_for(p), "temperature": 0.0, "seed": s.seed, "logprobs": True,
                "stream": False, **info.dialect.id_fields, **info.dialect.neutral_sampling}
        if _kwargs(p, s):
            body["chat_template_kwargs"] = _kwargs(p, s)
        old = read_json(path) if path.is_file() else None
        if isinstance(old, dict) and old.get("format") == TRAJ_FORMAT and _same_request(old.get("request"), body):
            resumed += 1
            return _row(p.id, path, old)
        async with sem:
            resp, sent, err = await ask_logprobs(client, body, cap)
            if resp is None:
                return {"id": p.id, "error": str(err)[:300]}
            try:
                parsed = parse_chat_logprobs(resp)
            except ValueError as e:
                return {"id": p.id, "error": str(e)}
            if parsed.method == "none" and not parsed.text:
                return {"id": p.id, "error": "the reply has neither logprobs nor text"}
            if parsed.method == "none":
                parsed.method = "text"
            ids, src, note = await engine_prompt_ids(client, info, body["messages"], _kwargs(p, s), resp)
        doc = trajectory_doc(p, s, engine=info.engine, model=str(info.model), base_url=client.endpoint.root,
                             request=sent, parsed=parsed, usage=resp.get("usage"), prompt_ids=ids, prompt_src=src,
                             notes=[note] if note else [])
        write_json(path, doc)
        return _row(p.id, path, doc)

    async def tracked(p: Prompt) -> dict[str, Any]:
        row = await one(p)
        if on_done:
            on_done(row)
        return row

    rows: list[dict[str, Any]] = []
    if prompts:
        rows.append(await tracked(prompts[0]))  # alone: a logprob cap it meets holds for all the others
        rows += await asyncio.gather(*(tracked(p) for p in prompts[1:]))
    return rows, {"k": cap.k, "cap_errors": cap.errors[:3], "refused": cap.refused, "resumed": resumed}


def collect_local(model: Any, prompts: Sequence[Prompt], out_dir: Path, s: TrajectorySettings, *,
                  on_done: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Greedy trajectories of ``prompts`` from a ``LocalModel`` (the in-process float32 reference) into
    ``out_dir``, in the same file format as an engine's: exact token ids, top-k from the float32 logits,
    prompt ids from the model's own chat template. Resumes like ``collect_engine``."""
    rows = []
    for p in prompts:
        path = out_dir / f"{p.id}.json"
        request = {"model": model.name, "messages": [dict(m) for m in p.messages or ()], "max_tokens": s.tokens_for(p),
                   "temperature": 0.0, "logprobs": True, "top_logprobs": s.top_logprobs}
        if _kwargs(p, s):
            request["chat_template_kwargs"] = _kwargs(p, s)
        old = read_json(path) if path.is_file() else None
        if isinstance(old, dict) and old.get("format") == TRAJ_FORMAT and old.get("request") == request:
            row = _row(p.id, path, old)
        else:
            prompt_ids = model.chat_prompt_ids(request["messages"], _kwargs(p, s))
            g = model.greedy(prompt_ids, request["max_tokens"], s.top_logprobs)
            parsed = ChatLogprobs(method="ids", text=model.decode(g["token_ids"]), finish_reason=g["finish_reason"],
                                  token_ids=g["token_ids"], tokens=model.pieces(g["token_ids"]), logprobs=g["logprobs"],
                                  top=g["top"], top_k_returned=min((len(t) for t in g["top"]), default=0))
            usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(g["token_ids"])}
            doc = trajectory_doc(p, s, engine="local-transformers", model=model.name, base_url=None, request=request,
                                 parsed=parsed, usage=usage, prompt_ids=prompt_ids, prompt_src="local_chat_template",
                                 notes=[])
            write_json(path, doc)
            row = _row(p.id, path, doc)
        rows.append(row)
        if on_done:
            on_done(row)
    return rows


def _same_request(old: Any, body: dict[str, Any]) -> bool:
    """An earlier file answers this request: same fields, except the top-k a cap may have lowered."""
    if not isinstance(old, dict):
        return False
    keep = ("logprobs", "top_logprobs")
    return {k: v for k, v in old.items() if k not in keep} == {k: v for k, v in body.items() if k not in keep}


def _row(pid: str, path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    return {"id": pid, "file": path.name, "sha256": sha256_file(path), "tokens": len(doc.get("tokens") or []),
            "chars": len(doc.get("text") or ""), "k": int(doc.get("top_logprobs_returned") or 0),
            "method": doc.get("token_id_method"), "finish_reason": doc.get("finish_reason"),
            "prompt_ids": doc.get("prompt_token_ids_source")}


def write_index(out_dir: Path, *, label: str, model: str, engine: str, prompts_sha256: str,
                rows: Sequence[dict[str, Any]]) -> Path:
    """``index.json`` (``INDEX_FORMAT``): every trajectory file with its SHA-256, and the prompts that failed."""
    index = {"format": INDEX_FORMAT, "label": label, "model": model, "engine": engine, "prompts_sha256": prompts_sha256,
             "files": {r["id"]: {"file": r["file"], "sha256": r["sha256"]} for r in rows if "error" not in r},
             "failed": {r["id"]: r["error"] for r in rows if "error" in r}}
    path = out_dir / "index.json"
    write_json(path, index, indent=True)
    return path
