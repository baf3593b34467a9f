"""The sampler check's requests (collect side): per prompt, top-k first-token logprobs twice and S seeded draws.

Each prompt is done whole before the next: its top-k list (``max_tokens: 1``, seed 0), its S draws,
then the list again. The i-th prompt draws with seeds i·S .. i·S+S−1 (``seed_block``): no seed is
shared between prompts, because an engine's seeded generator gives the same random number for one
seed whatever the prompt, which would tie the prompts' draws together and make the bootstrap over
prompts too narrow. Draws ask for ``logprobs`` with one alternative, so the drawn token is named
exactly as the list names it (an id where the engine gives ids, else the token string). The prompt's
file ``<folder>/<prompt id>.json`` is written when it is complete; a run interrupted later keeps it
(same request settings). Then a few (prompt, seed) pairs are asked again for the seed check.

Judging is ``quality/sampling.py``; nothing here decides a verdict.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt
from inferencekit.quality.logprobs import parse_chat_logprobs
from inferencekit.quality.sampling import collision_probability, seed_stage
from inferencekit.quality.task_run import ItemStore, post_chat
from inferencekit.quality.trajectory import LogprobCap, ask_logprobs

__all__ = ["FORMAT", "SEED_CHECK_PROMPTS", "SEED_CHECK_SEEDS", "SamplingPlan", "collect_side", "verbose_first_id",
           "first_token", "seed_block"]

FORMAT = "inferencekit.quality.sampling.v1"
Decide = Callable[[dict[str, dict[str, Any]], int], tuple[bool, dict[str, Any]]]
"""``decide(rows so far, look index) -> (stop, what the look showed)`` of a sequential side."""
SEED_CHECK_PROMPTS = 8
"""Prompts whose draws are asked again with seeds already used (those with the most varied first token)."""
SEED_CHECK_SEEDS = 8
"""Seeds re-asked per such prompt."""


@dataclass(slots=True)
class SamplingPlan:
    """What every request of one side sends: ``send`` (the sampling fields and --extra-body), the draw count
    ``seeds`` per prompt (a block of its own, ``seed_block``), ``top_logprobs`` asked for the lists,
    ``concurrency`` and the chat_template_kwargs given by flag (a prompt record's own win per key). ``looks``
    non-empty: the draws go in rounds up to each look's count, every prompt's round before the next
    (``collect_side``); empty: each prompt's ``seeds`` draws at once (the fixed check)."""

    send: dict[str, Any]
    seeds: int
    top_logprobs: int = 20
    concurrency: int = 1
    ctk: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the request policy's limitations (refused --extra-body fields)
    looks: tuple[int, ...] = ()  # sequential: draws per prompt at each look (``sampling_sequential.draw_looks``)


def _mixed_keys(top: list[list[Any]] | None, draws: Iterable[Any]) -> str | None:
    """The error of a prompt whose list and draws name tokens differently (ids and text), else None."""
    if len({type(k) for k, _ in (top or [])} | {type(v) for v in draws}) > 1:
        return "the list names tokens by id and some draws by text (or the reverse): they cannot be matched"
    return None


def seed_block(index: int, seeds: int) -> range:
    """The draw seeds of the ``index``-th prompt (0-based): ``seeds`` of them, shared with no other prompt."""
    return range(index * seeds, (index + 1) * seeds)


def first_token(resp: dict[str, Any], k: int | None = None) -> tuple[Any, list[list[Any]] | None, str | None]:
    """``(drawn token key, top list, error)`` of a ``max_tokens: 1`` reply with logprobs.

    The key is the token id where the reply names ids (llama-server ``id``, vLLM ``token_id:<n>`` or
    ``token_ids``), else the token string of the logprob entry. The top list is ``[[key, logprob], …]``,
    most likely first, cut to the ``k`` most likely: llama-cpp-python appends the sampled token to the
    list when it is not among the top k, and the check needs the top k alone.
    """
    try:
        parsed = parse_chat_logprobs(resp)
    except ValueError as e:
        return None, None, str(e)
    if parsed.method == "none" or not parsed.tokens:
        return None, None, "the reply has no logprobs"
    key = parsed.token_ids[0] if parsed.token_ids else parsed.tokens[0]
    top = parsed.top[0] if parsed.top else None
    if top is not None and k is not None:
        top = top[:k]
    return key, top, None


def verbose_first_id(resp: Mapping[str, Any]) -> int | None:
    """The first generated token id of a reply asked with ``Dialect.verbose_ids`` (llama-server ``__verbose.tokens``),
    else None (no such field, or not a list that starts with an int)."""
    verbose = resp.get("__verbose")
    ids = verbose.get("tokens") if isinstance(verbose, Mapping) else None
    if isinstance(ids, list) and ids and isinstance(ids[0], int) and not isinstance(ids[0], bool):
        return ids[0]
    return None


def _messages(p: Prompt) -> list[dict[str, Any]]:
    return [dict(m) for m in p.messages or ()]


class _Side:
    def __init__(self, client: Client, info: EngineInfo, plan: SamplingPlan, store: ItemStore) -> None:
        self.client, self.info, self.plan, self.store = client, info, plan, store
        self.cap = LogprobCap(plan.top_logprobs)
        self.requests = 0
        self.sem = asyncio.Semaphore(max(1, plan.concurrency))
        self.seed_stage: dict[str, Any] | None = None
        self.verbose_draws = 0  # draws whose id came from __verbose.tokens (``verbose_first_id``)

    def body(self, p: Prompt, seed: int) -> dict[str, Any]:
        ctk = {**self.plan.ctk, **(p.chat_template_kwargs or {})}
        out = {**self.info.dialect.neutral_sampling, **self.plan.send, "model": self.info.model,
               "messages": _messages(p), "max_tokens": 1, "seed": seed, "stream": False, "logprobs": True,
               **self.info.dialect.id_fields}
        if ctk:
            out["chat_template_kwargs"] = ctk
        return out

    async def top(self, p: Prompt) -> tuple[list[list[Any]] | None, str | None]:
        async with self.sem:
            self.requests += 1
            resp, _, err = await ask_logprobs(self.client, self.body(p, 0), self.cap)
        if resp is None:
            return None, err
        _, top, err = first_token(resp, self.cap.k)
        return (top, None) if top else (None, err or "the reply lists no alternatives")

    async def draw(self, p: Prompt, seed: int) -> tuple[Any, str | None]:
        async with self.sem:
            self.requests += 1
            resp, err = await post_chat(self.client, {**self.body(p, seed), "top_logprobs": 1,
                                                      **self.info.dialect.verbose_ids})
        if resp is None:
            return None, err
        key, _, err = first_token(resp)
        if key is None and (vid := verbose_first_id(resp)) is not None:
            # a drawn token the logprob entries leave out (llama-server holds back one that ends inside a UTF-8
            # character): its id from __verbose.tokens, named as the ids of the list are
            self.verbose_draws += 1
            return vid, None
        return key, err

    async def prompt(self, p: Prompt, index: int) -> dict[str, Any]:
        block = seed_block(index, self.plan.seeds)
        request = {**self.body(p, 0), "seed": f"{block.start}..{block.stop - 1}", "top_logprobs": self.cap.k}
        old = self.store.get(p.id, request)
        if old is not None:
            return old
        errors: list[str] = []
        first, err = await self.top(p)
        if err:
            errors.append(f"logprobs: {err}")
        got = await asyncio.gather(*(self.draw(p, s) for s in block))
        draws = {}
        for s, (key, e) in zip(block, got):
            if e:
                errors.append(f"seed {s}: {e}")
            else:
                draws[s] = key
        again, err = await self.top(p)
        if err:
            errors.append(f"logprobs again: {err}")
        if mixed := _mixed_keys(first, draws.values()):
            errors.append(mixed)
        row = {"format": FORMAT, "id": p.id, "bucket": p.bucket, "request": request, "top": first,
               "top_again": again, "draws": {str(s): k for s, k in draws.items()}, "errors": errors[:20],
               "failed_requests": len(errors)}
        if not errors:  # a prompt with a failure is asked again by a resumed run
            self.store.put(p.id, row)
        return row

    async def seed_repeats(self, prompts: Sequence[Prompt],
                           rows: dict[str, dict[str, Any]]) -> dict[str, dict[int, Any]]:
        """The first SEED_CHECK_SEEDS seeds of each prompt's block asked again, on the SEED_CHECK_PROMPTS prompts
        with the most varied draws."""
        drawn = max((len(rows[p.id]["draws"]) for p in prompts), default=0)
        complete = [p for p in prompts if drawn and len(rows[p.id]["draws"]) == drawn]
        varied = sorted(complete, key=lambda p: (collision_probability(Counter(rows[p.id]["draws"].values())), p.id))
        pick = varied[:SEED_CHECK_PROMPTS]
        index = {p.id: i for i, p in enumerate(prompts)}
        per = min(SEED_CHECK_SEEDS, drawn)
        seeds = {p.id: list(seed_block(index[p.id], self.plan.seeds))[:per] for p in pick}
        out: dict[str, dict[int, Any]] = {p.id: {} for p in pick}

        async def ask(part: slice) -> None:
            jobs = [(p, s) for p in pick for s in seeds[p.id][part]]
            got = await asyncio.gather(*(self.draw(p, s) for p, s in jobs))
            for (p, s), (key, err) in zip(jobs, got):
                if err is None:
                    out[p.id][s] = key

        if not self.plan.looks:
            await ask(slice(None))
            return out
        await ask(slice(0, 1))
        self.seed_stage = seed_stage({p.id: rows[p.id]["draws"] for p in pick}, out)
        if self.seed_stage["stopped"]:
            return out
        await ask(slice(1, None))
        return out


    async def rounds(self, prompts: Sequence[Prompt], decide: Decide
                     ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """The sequential collection: every prompt's first list, then the draws round by round (a round: each
        prompt's next seeds up to the look's count, prompt after prompt), ``decide(rows, look)`` after each round
        (``(stop, what the look showed)``; the latter goes into the look's state),
        and once it says stop (or at the last look) every prompt's second list. Rows are written when the whole
        collection ends; an interrupted sequential side is asked again whole (its stop depends on every prompt)."""
        plan = self.plan
        request = {"seeds": f"{plan.seeds} per prompt at most", "looks": list(plan.looks)}
        rows: dict[str, dict[str, Any]] = {}
        errors: dict[str, list[str]] = {p.id: [] for p in prompts}
        firsts = await asyncio.gather(*(self.top(p) for p in prompts))
        for p, (top, err) in zip(prompts, firsts):
            if err:
                errors[p.id].append(f"logprobs: {err}")
            block = seed_block(len(rows), plan.seeds)
            rows[p.id] = {"format": FORMAT, "id": p.id, "bucket": p.bucket,
                          "request": {**self.body(p, 0), "seed": f"{block.start}..{block.stop - 1}",
                                      "top_logprobs": self.cap.k, **request},
                          "top": top, "top_again": None, "draws": {}, "errors": [], "failed_requests": 0}
        states: list[dict[str, Any]] = []
        prev = 0
        for look, upto in enumerate(plan.looks):
            jobs = [(p, s) for i, p in enumerate(prompts) for s in seed_block(i, plan.seeds)[prev:upto]]
            got = await asyncio.gather(*(self.draw(p, s) for p, s in jobs))
            for (p, s), (key, e) in zip(jobs, got):
                if e:
                    errors[p.id].append(f"seed {s}: {e}")
                else:
                    rows[p.id]["draws"][str(s)] = key
            prev = upto
            for p in prompts:
                rows[p.id]["errors"], rows[p.id]["failed_requests"] = errors[p.id][:20], len(errors[p.id])
            stop, shown = decide(rows, look)
            states.append({"look": look + 1, "draws_per_prompt": upto, "requests_so_far": self.requests,
                           "stop": stop, **shown})
            if stop:
                break
        agains = await asyncio.gather(*(self.top(p) for p in prompts))
        for p, (again, err) in zip(prompts, agains):
            if err:
                errors[p.id].append(f"logprobs again: {err}")
            row = rows[p.id]
            row["top_again"] = again
            row["errors"], row["failed_requests"] = errors[p.id][:20], len(errors[p.id])
            if mixed := _mixed_keys(row["top"], row["draws"].values()):
                row["errors"].append(mixed)
        return rows, states


async def collect_side(client: Client, info: EngineInfo, prompts: Sequence[Prompt], plan: SamplingPlan,
                       folder: Path, *, on_done: Callable[[dict[str, Any]], None] | None = None,
                       decide: Decide | None = None) -> dict[str, Any]:
    """Every prompt's lists and draws from one server, then the seed repeats.

    With ``plan.looks`` and ``decide``, the draws go in rounds and stop once ``decide(rows so far, look index)``
    is True (``_Side.rounds``); the result then also holds ``looks_run`` (each look's draws and requests so far).

    Returns ``{"rows": {prompt id: row}, "repeats": {prompt id: {seed: key}}, "requests", "top_logprobs"
    (the k used, after any cap), "cap_errors", "refused", "reused", "looks_run"}`` (``looks_run``: rounds of draws
    sent before ``decide`` stopped them, or all of them); a row holds ``top``/``top_again``
    (``[[key, logprob], …]`` or None), ``draws`` (``{"<seed>": key}``) and ``errors``.
    """
    store = ItemStore(folder)
    store.claim({"send": plan.send, "seeds": plan.seeds, "top_logprobs": plan.top_logprobs,
                 **({"looks": list(plan.looks)} if plan.looks else {}),
                 "concurrency": plan.concurrency, "ctk": plan.ctk, "prompts": [p.id for p in prompts]}, "sampling")
    side = _Side(client, info, plan, store)
    rows: dict[str, dict[str, Any]] = {}
    looks_run: list[dict[str, Any]] = []
    if plan.looks and decide is not None:
        rows, looks_run = await side.rounds(prompts, decide)
        for row in rows.values():
            if not row["errors"]:
                store.put(row["id"], row)
            if on_done:
                on_done(row)
    else:
        for i, p in enumerate(prompts):  # one prompt at a time: its draws sit between its two lists
            rows[p.id] = await side.prompt(p, i)
            if on_done:
                on_done(rows[p.id])
    repeats = await side.seed_repeats(prompts, rows)
    return {"rows": rows, "repeats": repeats, "requests": side.requests, "top_logprobs": side.cap.k,
            "cap_errors": side.cap.errors, "refused": side.cap.refused, "reused": side.store.reused,
            "looks_run": looks_run, "seed_stage": side.seed_stage, "verbose_draws": side.verbose_draws}
