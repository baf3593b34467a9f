"""``inferencekit probe``: what an endpoint honours, tested by effect before a run.

Sends a handful of small requests (streaming with usage, ``ignore_eos`` and ``min_tokens`` each
beside a control, seeded T=1 samples, top logprobs, the dialect's token-id option, tokenize),
writes each request and reply to ``probes/capabilities.jsonl`` in the run dir, judges them with
``api/capabilities.py`` and saves a ``probe`` evidence record.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.capabilities import CAP_RE, judge_capabilities
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.api.tokenize import EngineTokenizer, TokenizeError
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, template_kwargs
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import RunDir, write_bytes

__all__ = ["probe_endpoint", "IGNORE_EOS_TOKENS", "MIN_TOKENS", "TOP_LOGPROBS"]

IGNORE_EOS_TOKENS = 32
MIN_TOKENS = 24
TOP_LOGPROBS = 20
SHORT_PROMPT = "Reply with just the word OK."
SEED_PROMPT = "Write one sentence about a random animal of your choice."
PATH = "/v1/chat/completions"


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


async def probe_endpoint(client: Client, info: EngineInfo, run: RunDir, *, ctk: dict[str, Any] | None = None,
                         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Collect, write, judge and record the capability probe; returns the saved ``probe`` record."""
    got, log = await _collect(client, info, ctk or {}, extra or {})
    path = run.path / "probes" / "capabilities.jsonl"
    write_bytes(path, b"".join(orjson.dumps(x) + b"\n" for x in log))
    caps = judge_capabilities(got, ignore_eos_tokens=IGNORE_EOS_TOKENS, min_tokens=MIN_TOKENS,
                              top_logprobs=TOP_LOGPROBS)
    capacity = {"value": info.capacity, "source": info.capacity_source}
    summary = f"probe of {info.engine} ({info.model}): " + ", ".join(f"{k} {v['status']}" for k, v in caps.items())
    lim = ["each capability is judged from one or two small requests; 'inconclusive' means the replies could not "
           "tell, not that the option is absent"]
    rec = build_record(kind="probe", claim_class="observed", summary=summary,
                       identity={"engine": {k: v for k, v in info.to_dict().items() if k != "models"},
                                 "model": {"id": info.model}, "workload": {"probe": "capabilities"}},
                       artifacts=[artifact(path, run.path, "probe requests and replies")], limitations=lim,
                       data={"run_dir": str(run.path.resolve()), "capabilities": caps, "capacity": capacity,
                             "dialect": info.dialect.describe(), "detection": info.signals})
    save_record(rec, run)
    return rec


def render_probe(console: Any, rec: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table("capability", "status", "how it was judged", title=f"probe: {rec['identity']['engine']['engine']} "
              f"{rec['identity']['engine'].get('version') or ''} — judged by effect", title_justify="left")
    colour = {"honoured": "green", "ignored": "red", "refused": "red", "inconclusive": "yellow"}
    for name, j in rec["data"]["capabilities"].items():
        t.add_row(name, f"[{colour.get(j['status'], 'white')}]{j['status']}[/]", j["detail"])
    cap = rec["data"]["capacity"]
    t.add_row("parallel capacity", str(cap["value"] if cap["value"] is not None else "unknown"),
              cap["source"] or "the engine does not report it")
    console.print(t)
    console.print(f"record: {rec['evidence_id']}   run dir: {rec['data']['run_dir']}", markup=False)


@operation(("probe",), "Report what an endpoint honours (usage, ignore_eos, min_tokens, seed, logprobs, token ids).",
           description="Detects the engine (vLLM, SGLang, llama.cpp llama-server, llama-cpp-python, generic OpenAI) "
                       "and tests each option by its effect, not by the absence of an error: ignore_eos must run to "
                       "max_tokens where a control stops early, a seed must repeat a T=1 sample, logprobs must come "
                       "back with the asked number of alternatives. Requests and replies go to "
                       "<run-dir>/probes/capabilities.jsonl; a probe evidence record is saved.",
           example="inferencekit probe --base-url http://127.0.0.1:8080",
           args=[*CLIENT_ARGS, Arg("run_dir", "string", "Run directory (default: runs/<run-id>).")])
def probe(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
          extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None) -> Outcome:
    if base_url:
        normalize_base_url(base_url)
    read_api_key(api_key_env)
    check_client_args(timeout)
    extra = parse_json_object(extra_body, "--extra-body")
    ctk = template_kwargs(extra, chat_template_kwargs)
    extra.pop("chat_template_kwargs", None)
    run = RunDir.create(run_dir)

    async def main(url: str) -> dict[str, Any]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            run.pin("engine_identity", info.identity())
            run.update_run(command=list(call.argv), operation=call.operation, engine=info.to_dict(),
                           api_key_env=api_key_env)
            return await probe_endpoint(client, info, run, ctk=ctk, extra=extra)

    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            rec = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    return Outcome({"evidence_id": rec["evidence_id"], "run_dir": str(Path(run.path)), **rec["data"]}, None,
                   lambda console: render_probe(console, rec))
