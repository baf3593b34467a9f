"""The equivalence audit's text surface: sampled completions from the engine and from the reference.

What an endpoint without logprobs allows (``--surface text``, or ``auto`` when no logprobs come back): for each
prompt, ``samples`` completions of ``sample_tokens`` tokens sampled at temperature 1 from the engine (seed ``j``
for the ``j``-th, with the fields that make it sample the whole distribution: ``Dialect.full_distribution``) and
as many from the reference in this process (``LocalModel.sample``, full vocabulary, seeded by the prompt's place),
reduced to the prompt-blocked MMD² (``equivalence_stats.blocked_mmd_test``), judged in requests.

Collect (``collect_text``, ``ReferenceSamples``) does the I/O; ``text_report`` is pure.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt
from inferencekit.quality.equivalence_judge import cell_notes, judge_equivalence
from inferencekit.quality.equivalence_run import AUDIT_FORMAT, AuditSettings
from inferencekit.quality.equivalence_stats import SPECTRUM_N, blocked_mmd_test
from inferencekit.rundir import write_json

__all__ = ["ReferenceSamples", "collect_text", "text_report"]


class ReferenceSamples:
    """Completions sampled from the local reference, optionally behind a file cache (calibration: the substitutes'
    run ``i`` uses the prompts and the seed of the honest run ``i``, so the reference's samples are the same and are
    drawn once). A cache line is keyed by the model file, the prompt ids, the token count, ``n`` and the seed.

    ``model`` is a ``LocalModel`` (``chat_prompt_ids``, ``sample``, ``decode``, ``source``).
    """

    def __init__(self, model: Any, cache: Path | None = None) -> None:
        self.model, self.cache = model, cache
        self.rows: dict[str, list[str]] = {}
        if cache is not None and cache.is_file():
            for line in cache.read_text().splitlines():
                try:
                    d = json.loads(line)
                    self.rows[str(d["key"])] = [str(t) for t in d["texts"]]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a killed run: sampled again

    def _draw(self, prompt: Prompt, tokens: int, n: int, seed: int) -> list[str]:
        ids = self.model.chat_prompt_ids([dict(m) for m in prompt.messages or ()], {})
        key = hashlib.sha256(json.dumps([str(getattr(self.model, "source", "")), ids, tokens, n, seed])
                             .encode()).hexdigest()
        if key in self.rows:
            return self.rows[key]
        texts = [self.model.decode(t) for t in self.model.sample(ids, tokens, n=n, temperature=1.0, seed=seed)]
        self.rows[key] = texts
        if self.cache is not None:
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            with self.cache.open("a") as f:
                f.write(json.dumps({"key": key, "texts": texts}) + "\n")
        return texts

    async def draw(self, prompt: Prompt, tokens: int, n: int, seed: int) -> list[str]:
        """``n`` completions of ``prompt`` (its chat rendering by the reference's template), in a worker thread."""
        return await asyncio.to_thread(self._draw, prompt, tokens, n, seed)


async def collect_text(client: Client, info: EngineInfo, ref: ReferenceSamples, prompts: Sequence[Prompt],
                       out_dir: Path, s: AuditSettings, *, concurrency: int = 4) -> dict[str, Any]:
    """``s.samples`` completions per prompt from the engine, then as many from the reference (prompt ``k`` seeded
    ``s.seed · 100003 + k``); one file per prompt in ``out_dir``. A failed request is recorded, not raised.

    Returns:
        ``{"engine": {prompt id: [text]}, "reference": {…}, "failed": [{"id", "error"}], "requests": sent,
        "surface": "text", "sampling": the fields sent beside temperature 1 and the seed}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    sem = asyncio.Semaphore(concurrency)
    fields = info.dialect.full_distribution()

    async def sample(p: Prompt, j: int) -> tuple[str | None, str | None]:
        body = {"model": info.model, "messages": [dict(m) for m in p.messages or ()], "max_tokens": s.sample_tokens,
                "temperature": 1.0, "seed": j, "stream": False, **fields}
        async with sem:
            val, err = await client.post_json("/v1/chat/completions", body)
        try:
            text = val["choices"][0]["message"]["content"] if err is None else None
        except (TypeError, KeyError, IndexError):
            text, err = None, "the reply has no choices[0].message.content"
        if not isinstance(text, str):
            return None, str(err or "content is not a string")[:300]
        return text, None

    got = await asyncio.gather(*(sample(p, j) for p in prompts for j in range(s.samples)))
    engine: dict[str, list[str]] = {}
    reference: dict[str, list[str]] = {}
    failed: list[dict[str, Any]] = []
    for k, p in enumerate(prompts):
        texts = []
        for j, (text, err) in enumerate(got[k * s.samples:(k + 1) * s.samples]):
            if text is None:
                failed.append({"id": f"{p.id}#{j}", "error": err})
            else:
                texts.append(text)
        refs = await ref.draw(p, s.sample_tokens, s.samples, s.seed * 100_003 + k)
        engine[p.id], reference[p.id] = texts, refs
        write_json(out_dir / f"{p.id}.json", {"id": p.id, "engine": texts, "reference": refs,
                                              "sample_tokens": s.sample_tokens, "temperature": 1.0,
                                              "sampling": fields})
    return {"engine": engine, "reference": reference, "failed": failed, "requests": len(prompts) * s.samples,
            "surface": "text", "sampling": fields}


def text_report(collected: Mapping[str, Any], cells: Sequence[Mapping[str, Any]], s: AuditSettings,
                table_source: str, *, permutations: int = 1000) -> dict[str, Any]:
    """The audit's report on the text surface (pure): the prompt-blocked MMD² judged in requests."""
    res = blocked_mmd_test(collected["engine"], collected["reference"], permutations=permutations, seed=s.seed)
    stat = {"statistic": res["statistic"], "name": "mmd" if res["statistic"] is not None else None,
            "p_value": res["p_value"], "prompts": res["prompts"], "skipped": res["skipped"],
            "kernel": f"character {SPECTRUM_N}-gram spectrum, cosine-normalised", "positions": collected["requests"],
            "sampling": collected.get("sampling")}
    verdict = judge_equivalence(res["statistic"], cells, method="text", claim=s.claim,
                                budget_used=collected["requests"], unit="requests", name=stat["name"], made=s.made())
    limitations = ["text surface: the logprobs the endpoint may serve were not asked for (--surface text)"]
    sampling = collected.get("sampling") or {}
    if "top_k" not in sampling:
        limitations.append("text surface: top_k and min_p were not sent (a plain OpenAI endpoint may reject them); "
                           "a server-side top-k or min-p default would truncate the engine's samples")
    if collected["failed"]:
        limitations.append(f"{len(collected['failed'])} sample request(s) failed")
    if not cells:
        limitations.append(f"no calibration table ({table_source}): no threshold, so no verdict but UNPROVEN")
    limitations += cell_notes(verdict.get("cell"))
    return {"format": AUDIT_FORMAT, "surface": "text", "method": "text", "claim": s.claim,
            "budget_requests": s.budget_requests, "budget_used": collected["requests"], "statistic": stat,
            "verdict": str(verdict["verdict"]), "reason": verdict["reason"], "power": verdict.get("power"),
            "threshold": verdict.get("threshold"), "cell": verdict.get("cell"), "prompts": res["prompts"],
            "failed": list(collected["failed"]), "limitations": limitations, "table": table_source}
