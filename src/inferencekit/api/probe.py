"""The capability probe: what an endpoint honours, tested by effect before a run (``inferencekit probe``).

Sends a handful of small requests (streaming with usage, ``ignore_eos`` and ``min_tokens`` each
beside a control, seeded T=1 samples, top logprobs, the dialect's token-id option, tokenize),
writes each request and reply to ``probes/capabilities.jsonl`` in the run dir, judges them with
``api/capabilities.py`` and saves a ``probe`` evidence record.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferencekit.api.body import BodyPolicy
from inferencekit.api.capabilities import CAP_RE, judge_capabilities
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import EngineTokenizer, TokenizeError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.rundir import RunDir, write_bytes

__all__ = ["CAPABILITY_FIXED", "probe_endpoint", "IGNORE_EOS_TOKENS", "MIN_TOKENS", "TOP_LOGPROBS"]

IGNORE_EOS_TOKENS = 32
MIN_TOKENS = 24
TOP_LOGPROBS = 20
SHORT_PROMPT = "Reply with just the word OK."
SEED_PROMPT = "Write one sentence about a random animal of your choice."
PATH = "/v1/chat/completions"
# Fields the capability probe sets itself (each request tests one of them): --extra-body may not override them.
CAPABILITY_FIXED = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
                              "temperature", "top_p", "seed", "ignore_eos", "min_tokens", "logprobs", "top_logprobs",
                              "return_token_ids"})


def _body(model: str, text: str, max_tokens: int, ctk: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0}
    if ctk:
        body["chat_template_kwargs"] = ctk
    body.update(fields)
    return body


async def _collect(client: Client, info: EngineInfo, ctk: dict[str, Any], extra: dict[str, Any]
                   ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    model = str(info.model)
    count = dict(info.dialect.count_fields)
    plan: list[tuple[str, str, dict[str, Any]]] = [
        ("streaming", "plain", _body(model, "Name three colours.", 16, ctk)),
        ("ignore_eos", "off", _body(model, SHORT_PROMPT, IGNORE_EOS_TOKENS, ctk, **count)),
        ("ignore_eos", "on", _body(model, SHORT_PROMPT, IGNORE_EOS_TOKENS, ctk, ignore_eos=True, **count)),
        ("min_tokens", "off", _body(model, SHORT_PROMPT, IGNORE_EOS_TOKENS, ctk, **count)),
        ("min_tokens", "on", _body(model, SHORT_PROMPT, IGNORE_EOS_TOKENS, ctk, min_tokens=MIN_TOKENS, **count)),
        ("seed", "a1", _body(model, SEED_PROMPT, 24, ctk, temperature=1.0, top_p=1.0, seed=1234)),
        ("seed", "a2", _body(model, SEED_PROMPT, 24, ctk, temperature=1.0, top_p=1.0, seed=1234)),
        ("seed", "a3", _body(model, SEED_PROMPT, 24, ctk, temperature=1.0, top_p=1.0, seed=1234)),
        ("seed", "b", _body(model, SEED_PROMPT, 24, ctk, temperature=1.0, top_p=1.0, seed=98765)),
        ("logprobs", "top", _body(model, "The capital of France is", 4, ctk, logprobs=True, top_logprobs=TOP_LOGPROBS)),
        # vLLM's return_token_ids is asked of every engine; a dialect's own way (llama-server's logprob ids) too.
        ("token_ids", "on", _body(model, "Count from one to five.", 12, ctk, **{**count, "return_token_ids": True})),
    ]
    got: dict[str, dict[str, Any]] = {}
    log: list[dict[str, Any]] = []
    for name, variant, body in plan:
        body = {**extra, **body}
        ex = await client.post(PATH, body)
        reply = ex.to_reply(id=f"{name}-{variant}", engine=info.engine)
        got.setdefault(name, {})[variant] = reply
        log.append({"probe": name, "variant": variant, "path": PATH, "request": body, "reply": reply})
        if name == "logprobs" and reply.get("status") == 400:
            m = CAP_RE.search(str(reply.get("error")))
            k = int(m.group(1)) if m else TOP_LOGPROBS // 2
            retry = {**body, "top_logprobs": k}
            ex = await client.post(PATH, retry)
            r2 = ex.to_reply(id="logprobs-retry", engine=info.engine)
            got[name]["retry"] = r2
            log.append({"probe": name, "variant": "retry", "path": PATH, "request": retry, "reply": r2})
    if info.dialect.tokenize_path:
        try:
            ids = await EngineTokenizer(client, info.dialect).encode("Hello world")
            got["tokenize"] = {"hello": {"path": info.dialect.tokenize_path, "ids": ids}}
        except TokenizeError as e:
            got["tokenize"] = {"hello": {"path": info.dialect.tokenize_path, "error": str(e)}}
        log.append({"probe": "tokenize", "variant": "hello", "path": info.dialect.tokenize_path,
                    "reply": got["tokenize"]["hello"]})
    return got, log


async def probe_endpoint(client: Client, info: EngineInfo, run: RunDir, policy: BodyPolicy) -> dict[str, Any]:
    """Collect, write, judge and record the capability probe; returns the saved ``probe`` record.

    ``policy`` (``api.body.body_policy`` with ``CAPABILITY_FIXED``) gives the extra fields and template kwargs of
    every request; its refused fields are among the record's limitations."""
    got, log = await _collect(client, info, policy.chat_template_kwargs, policy.extra)
    path = run.capabilities_log
    write_bytes(path, b"".join(orjson.dumps(x) + b"\n" for x in log))
    caps = judge_capabilities(got, ignore_eos_tokens=IGNORE_EOS_TOKENS, min_tokens=MIN_TOKENS,
                              top_logprobs=TOP_LOGPROBS)
    capacity = {"value": info.capacity, "source": info.capacity_source}
    summary = f"probe of {info.engine} ({info.model}): " + ", ".join(f"{k} {v['status']}" for k, v in caps.items())
    lim = ["each capability is judged from one or two small requests; 'inconclusive' means the replies could not "
           "tell, not that the option is absent", *policy.limitations()]
    rec = build_record(kind="probe", claim_class="observed", summary=summary,
                       identity={"engine": {k: v for k, v in info.to_dict().items() if k != "models"},
                                 "model": {"id": info.model}, "workload": {"probe": "capabilities"}},
                       artifacts=[artifact(path, run.path, "probe requests and replies")], limitations=lim,
                       data={"run_dir": str(run.path.resolve()), "capabilities": caps, "capacity": capacity,
                             "dialect": info.dialect.describe(), "detection": info.signals,
                             "request_policy": policy.to_json()})
    save_record(rec, run)
    return rec
