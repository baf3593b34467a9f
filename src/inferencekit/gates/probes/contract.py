"""Send the API-contract probes (``probe --contract``, verify's contract part) and keep every reply (collect).

Requests that judge a count (accounting, max_tokens, context) are not streamed: every engine puts ``usage`` in a
non-streamed reply, and llama-cpp-python drops ``stream_options`` (no usage in its streams). Each item's requests
go one at a time, in the order of ``gates/judges/contract.py`` (which judges them), except
the structured-output replies under load, sent ``concurrency`` at a time. Every finished request is one line of
``probes/<gate-run>.jsonl`` (kind ``contract``, key the item, ``meta.variant`` its role), synced at once.

Requests that depend on an earlier reply are built after it: the logit-bias ban takes the T=0 reply's first
token, the accounting items carry the count of the template rendered by the engine's own route (llama-server
``/apply-template`` + ``/tokenize``, vLLM ``/tokenize`` with messages) or by ``--tokenizer`` (transformers
``apply_chat_template``), and the context items are sized from that count and the context the engine reports.
An item that cannot be built is a record of variant ``skipped`` with the reason in ``meta.why`` and no reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import LocalTokenizer, TokenizeError, Tokenizer, engine_chat_ids
from inferencekit.gates.inputs import reply_file
from inferencekit.gates.probes.collect import ProbeLog
from inferencekit.shapes import ProbeRecord, is_ok

__all__ = ["CONTRACT_FIXED", "ContractSettings", "ITEM_GROUPS", "send_contract"]

#: requests each item group sends (``send_contract``), besides the structured-output load; the temperature group's
#: four are also the controls of top_k, top_p, min_p, seed and logit_bias
GROUP_REQUESTS = {"temperature": 4, "top_k": 3, "top_p": 3, "min_p": 3, "seed": 1, "penalties": 3, "logit_bias": 2,
                  "n": 1, "stop": 2, "max_tokens": 1, "validation": 4, "accounting": 4, "context": 2, "json": 8,
                  "tools": 4}
_NEEDS_CONTROLS = ("temperature", "top_k", "top_p", "min_p", "seed", "logit_bias")

CHAT = "/v1/chat/completions"
STORY = "Write a short story about a cat."
COUNTING = "Count from 1 to 20, separated by commas."
REPEAT = "Repeat the word hello twenty times, separated by spaces."
FORCE_PIECES = (".", "!", "?", ",")
FILLER = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
JSON_PROMPTS = ("Describe a person as JSON with name and age.", "Give a city as JSON with name and country.",
                "Describe a book as JSON with title and year.", "Describe a pet as JSON with name and age.")
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                          "required": ["name", "age"]}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}}]
NAMED_TOOL = "get_time"
ACCOUNTING: dict[str, list[dict[str, Any]]] = {
    "user": [{"role": "user", "content": "Hi there, how are you today?"}],
    "system": [{"role": "system", "content": "You answer in one short sentence."},
               {"role": "user", "content": "What is the capital of France?"}],
    "multi-turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke about cats."}],
    "tools": [{"role": "user", "content": "What is the weather in Paris?"}],
    # the tools prompt without the tools: equal prompt_tokens show a chat template that renders no tools (the
    # property template-without-tools, judges/contract_structured.py)
    "tools-off": [{"role": "user", "content": "What is the weather in Paris?"}],
}
#: what ``--items`` may name (docs/contract.md); each judged item belongs to one
ITEM_GROUPS = ("temperature", "top_k", "top_p", "min_p", "seed", "penalties", "logit_bias", "n", "stop", "max_tokens",
               "validation", "accounting", "context", "json", "tools")
# Fields the contract sets itself: --extra-body may not override them.
CONTRACT_FIXED = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
                            "temperature", "top_p", "top_k", "min_p", "seed", "frequency_penalty", "presence_penalty",
                            "repeat_penalty", "logit_bias", "n", "stop", "response_format", "tools", "tool_choice"})


@dataclass(slots=True)
class ContractSettings:
    """What one contract run sends (stored in the probe log's header under ``contract``).

    Attributes:
        max_tokens: output budget of the sampling requests.
        json_load: structured-output requests sent under load (``concurrency`` in flight); 96 lets a 5% corruption
            be seen with ≥ 99% probability (1 − 0.95⁹⁰ = 99.0%; issue 21).
        concurrency: requests in flight for those.
        margin: tokens left free under the context for the at-the-limit prompt (its reply included).
        context_cap: the largest context filled (a hosted 128k context would cost a fortune per run): above it the
            context items are skipped, with the reason.
        tokenizer: ``--tokenizer`` (a GGUF or Hugging Face directory) to count prompts when the engine has no route.
        schema, named_tool: the JSON schema and the function a named ``tool_choice`` asks for (the judge reads them).
        items: the item groups asked (``ITEM_GROUPS``); None for all.
    """

    max_tokens: int = 24
    json_load: int = 96
    concurrency: int = 4
    margin: int = 64
    context_cap: int = 32768
    tokenizer: str | None = None
    schema: dict[str, Any] = field(default_factory=lambda: dict(SCHEMA))
    named_tool: str = NAMED_TOOL
    items: list[str] | None = None

    def wants(self, *groups: str) -> bool:
        """Whether any of ``groups`` is asked."""
        return self.items is None or any(g in self.items for g in groups)

    def planned_requests(self) -> int:
        """How many requests ``send_contract`` sends at most (``GROUP_REQUESTS`` of the asked groups, the
        temperature controls when a group needs them, and the load): the progress bar's total."""
        n = sum(k for g, k in GROUP_REQUESTS.items() if g != "temperature" and self.wants(g))
        n += GROUP_REQUESTS["temperature"] if self.wants(*_NEEDS_CONTROLS) else 0
        return n + (self.json_load if self.wants("json") else 0)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _body(model: str, content: str | list[dict[str, Any]], max_tokens: int, *, stream: bool = True,
          **fields: Any) -> dict[str, Any]:
    msgs = [{"role": "user", "content": content}] if isinstance(content, str) else content
    body: dict[str, Any] = {"model": model, "messages": msgs, "max_tokens": max_tokens, "temperature": 0.0,
                            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(fields)
    return body


class _Sender:
    """Sends one contract request and appends it, with its whole reply, to the probe log as soon as it ends.
    ``stream_options`` is optional: a server that refuses it with HTTP 400 gets the request again without it, and
    the reply names the dropped field (``api/client.py``)."""

    def __init__(self, client: Client, log: ProbeLog, extra: Mapping[str, Any], ctk: Mapping[str, Any],
                 on_done: Callable[[ProbeRecord], None] | None) -> None:
        self.client, self.log, self.extra, self.ctk, self.on_done = client, log, extra, ctk, on_done

    async def send(self, key: str, variant: str, body: dict[str, Any], **meta: Any) -> ProbeRecord:
        body = {**self.extra, **body}
        if self.ctk:
            body["chat_template_kwargs"] = dict(self.ctk)
        rid = f"contract/{key}/{variant}"
        ex = await self.client.post(CHAT, body, optional=("stream_options",))
        rec: ProbeRecord = {"id": rid, "kind": "contract", "key": key, "endpoint": CHAT, "body": body,
                            "meta": {"variant": variant, **meta}, "reply": reply_file(ex.to_reply(id=rid))}
        self.log.append(rec)
        if self.on_done is not None:
            self.on_done(rec)
        return rec

    def skip(self, key: str, why: str) -> None:
        """Record that ``key`` was not sent, and why (a record with no reply)."""
        self.log.append({"id": f"contract/{key}/skipped", "kind": "contract", "key": key, "endpoint": CHAT, "body": {},
                         "meta": {"variant": "skipped", "why": why}, "reply": None})


async def _count(client: Client, info: EngineInfo, local: LocalTokenizer | None, messages: list[dict[str, Any]],
                 ctk: Mapping[str, Any], tools: list[dict[str, Any]] | None) -> tuple[int | None, str | None, str]:
    """``(tokens, source, error)`` of ``messages`` rendered with the model's template."""
    ids, src, err = await engine_chat_ids(client, info.dialect, info.model, messages, ctk, tools)
    if ids:
        return len(ids), src, ""
    if local is not None:
        try:
            return len(await local.chat_ids(messages, tools, ctk)), local.source, ""
        except TokenizeError as e:
            return None, None, str(e)
    return None, None, f"{err}; give --tokenizer (the model's GGUF or Hugging Face directory) to count it locally"


async def send_contract(client: Client, info: EngineInfo, log: ProbeLog, s: ContractSettings, *,
                        tokenizer: Tokenizer | None, extra: Mapping[str, Any], ctk: Mapping[str, Any],
                        on_done: Callable[[ProbeRecord], None] | None = None) -> None:
    """Send every contract item into ``log``; an item that cannot be built is recorded as skipped, with the reason.

    Args:
        tokenizer: encodes single texts (the logit-bias tokens): the engine's tokenize endpoint, or a local one
            (``--tokenizer``), which also counts chat prompts where the engine has no route; None skips the logit-bias
            items.
    """
    model = str(info.model)
    full = info.dialect.full_distribution()
    tx = _Sender(client, log, extra, ctk, on_done)
    mt = s.max_tokens
    # sampling: T=0 and three seeded T=1 replies over the whole distribution (the controls of top_k/top_p/min_p)
    base: ProbeRecord | None = None
    if s.wants(*_NEEDS_CONTROLS):
        base = await tx.send("temperature", "t0", _body(model, STORY, mt, **info.dialect.neutral_sampling))
        for seed in (1, 2, 3):
            await tx.send("temperature", f"t1-s{seed}", _body(model, STORY, mt, temperature=1.0, seed=seed, **full))
    for key, value in (("top_k", 1), ("top_p", 0.001), ("min_p", 1.0)):
        if s.wants(key):
            for seed in (1, 2, 3):
                await tx.send(key, f"on-s{seed}", _body(model, STORY, mt, temperature=1.0, seed=seed,
                                                       **{**full, key: value}))
    if s.wants("seed"):
        await tx.send("seed", "s1-again", _body(model, STORY, mt, temperature=1.0, seed=1, **full))
    neutral = dict(info.dialect.neutral_sampling)
    if s.wants("penalties"):
        await tx.send("frequency_penalty", "off", _body(model, REPEAT, 40, **neutral))  # both penalties' control
        for key in ("frequency_penalty", "presence_penalty"):
            await tx.send(key, "on", _body(model, REPEAT, 40, **{**neutral, key: 2.0}))
    if s.wants("logit_bias") and base is not None:
        await _logit_bias(tx, model, base, tokenizer, s, neutral)
    if s.wants("n"):
        await tx.send("n", "n2", _body(model, STORY, 8, stream=False, temperature=1.0, n=2, **full))
    if s.wants("stop"):
        await tx.send("stop", "control", _body(model, COUNTING, 64, **neutral))
        await tx.send("stop", "stop", _body(model, COUNTING, 64, stop=["7"], **neutral))
    if s.wants("max_tokens"):
        await tx.send("max_tokens", "cut", _body(model, COUNTING, 7, stream=False, **neutral))
    if s.wants("validation"):
        for variant, what, fields in (("temperature", "temperature -1", {"temperature": -1.0}),
                                      ("top_p", "top_p 2", {"top_p": 2.0}), ("max_tokens", "max_tokens -5", {}),
                                      ("response_format", "response_format type 'bogus'",
                                       {"response_format": {"type": "bogus"}})):
            body = _body(model, STORY, 8 if variant != "max_tokens" else -5, **fields)
            await tx.send("validation", variant, body, what=what)
    local = tokenizer if isinstance(tokenizer, LocalTokenizer) else None
    if s.wants("accounting"):
        await _accounting(tx, client, info, local, model, ctk, s)
    if s.wants("context"):
        await _context(tx, client, info, local, model, ctk, s)
    if s.wants("json"):
        await _structured(tx, model, s)
    if s.wants("tools"):
        await _tools(tx, model, s)


async def _logit_bias(tx: _Sender, model: str, base: ProbeRecord, tokenizer: Tokenizer | None, s: ContractSettings,
                      neutral: Mapping[str, Any]) -> None:
    text = (base.get("reply") or {}).get("text")
    if tokenizer is None or not is_ok(base.get("reply") or {}) or not isinstance(text, str) or not text:
        tx.skip("logit_bias", "no tokenizer to name a token id (the engine has no tokenize endpoint; give "
                                   "--tokenizer)" if tokenizer is None else "the T=0 reply failed or was empty")
        return
    try:
        first = (await tokenizer.encode(text))[0]
        piece = await tokenizer.decode([first])
        force = None
        for p in FORCE_PIECES:
            ids = await tokenizer.encode(p)
            if len(ids) == 1 and not text.startswith(p):
                force = (ids[0], p)
                break
    except (TokenizeError, IndexError) as e:
        tx.skip("logit_bias", f"the tokenizer failed: {e}")
        return
    await tx.send("logit_bias", "ban", _body(model, STORY, s.max_tokens, logit_bias={str(first): -100}, **neutral),
                  token_id=first, piece=piece)
    if force is not None:
        await tx.send("logit_bias", "force", _body(model, STORY, 5, logit_bias={str(force[0]): 100}, **neutral),
                      token_id=force[0], piece=force[1])


async def _accounting(tx: _Sender, client: Client, info: EngineInfo, local: LocalTokenizer | None, model: str,
                      ctk: Mapping[str, Any], s: ContractSettings) -> None:
    for variant, messages in ACCOUNTING.items():
        tools = TOOLS if variant == "tools" else None
        n, src, err = await _count(client, info, local, messages, ctk, tools)
        fields: dict[str, Any] = {"tools": tools} if tools else {}
        await tx.send("accounting", variant, _body(model, messages, 1, stream=False, **fields),
                      expected_prompt_tokens=n, count_source=src, count_error=err or None)


async def _context(tx: _Sender, client: Client, info: EngineInfo, local: LocalTokenizer | None, model: str,
                   ctk: Mapping[str, Any], s: ContractSettings) -> None:
    ctx = info.context_tokens
    if not ctx:
        tx.skip("context", "the engine reports no context length")
        return
    if ctx > s.context_cap:
        tx.skip("context", f"the context of {ctx} tokens is above the {s.context_cap} this check fills")
        return

    async def sized(target: int) -> tuple[list[dict[str, Any]], int | None, str]:
        one, _, err = await _count(client, info, local, [{"role": "user", "content": FILLER * 10}], ctk, None)
        empty, _, _ = await _count(client, info, local, [{"role": "user", "content": ""}], ctk, None)
        if one is None or empty is None:
            return [], None, err
        reps = max(1, int((target - empty) * 10 / max(1, one - empty)))
        msgs = [{"role": "user", "content": FILLER * reps}]
        for _ in range(6):  # walk to the largest count ≤ target (BPE is not compositional: count, never assume)
            n, _, err = await _count(client, info, local, msgs, ctk, None)
            if n is None:
                return [], None, err
            if n <= target:
                return msgs, n, ""
            reps -= max(1, (n - target) // 12 + 1)
            msgs = [{"role": "user", "content": FILLER * reps}]
        return [], None, "could not size the prompt under the target"

    near, n_near, err = await sized(ctx - s.margin)
    if n_near is None:
        tx.skip("context", f"no count of the rendered prompt: {err}")
        return
    await tx.send("context", "near", _body(model, near, 8, stream=False), expected_prompt_tokens=n_near,
                  context_tokens=ctx)
    over = [{"role": "user", "content": near[0]["content"] * 2}]
    n_over, _, _ = await _count(client, info, local, over, ctk, None)
    await tx.send("context", "over", _body(model, over, 8, stream=False), expected_prompt_tokens=n_over,
                  context_tokens=ctx)


async def _structured(tx: _Sender, model: str, s: ContractSettings) -> None:
    formats = {"json_object": {"type": "json_object"},
               "json_schema": {"type": "json_schema", "json_schema": {"name": "record", "schema": s.schema}}}
    for key, rf in formats.items():
        for i, prompt in enumerate(JSON_PROMPTS[:3]):
            await tx.send(key, f"alone-{i}", _body(model, prompt, 60, response_format=rf))
        await tx.send(key, "plain-0", _body(model, JSON_PROMPTS[0], 60, stream=False, response_format=rf))
    queue = [(("json_object", "json_schema")[i % 2], i) for i in range(s.json_load)]
    queue.reverse()

    async def worker() -> None:
        while queue:
            key, i = queue.pop()
            await tx.send(key, f"load-{i}", _body(model, JSON_PROMPTS[i % len(JSON_PROMPTS)], 60,
                                                  response_format=formats[key]))

    await asyncio.gather(*(worker() for _ in range(max(1, s.concurrency))))


async def _tools(tx: _Sender, model: str, s: ContractSettings) -> None:
    for variant, choice in (("none", "none"), ("required", "required"),
                            ("named", {"type": "function", "function": {"name": s.named_tool}})):
        await tx.send("tool_choice", variant, _body(model, ACCOUNTING["tools"], 60, stream=False, tools=TOOLS,
                                                    tool_choice=choice))
    await tx.send("tool_choice", "named-stream", _body(model, ACCOUNTING["tools"], 60, tools=TOOLS,
                                                       tool_choice={"type": "function",
                                                                    "function": {"name": s.named_tool}}))
