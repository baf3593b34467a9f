"""``inferencekit probe``: what an endpoint honours, judged by effect (``api/probe.py`` collects and judges);
``probe --contract``: the API contract, item by item (``gates/contract.py``, judged by ``gates/judges/contract.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.probe import CAPABILITY_FIXED, probe_endpoint
from inferencekit.api.tokenize import check_tokenizer, choose_tokenizer
from inferencekit.commands.gates import render_gates
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.gates.contract import contract_settings, run_contract_gate
from inferencekit.gates.probes.contract import CONTRACT_FIXED, ContractSettings
from inferencekit.gates.run import GateRunSettings, gate_run_dir, judge_gate_run, pin_engine
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations
from inferencekit.rundir import RunDir

__all__ = ["probe", "render_contract", "render_probe"]


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
    print_limitations(console, rec["limitations"][1:])
    console.print(f"record: {rec['evidence_id']}   run dir: {rec['data']['run_dir']}", markup=False)


def render_contract(console: Any, items: list[dict[str, Any]]) -> None:
    """The contract's items: group, item, verdict (or the finding), what decided it and the requests."""
    from rich.table import Table

    from inferencekit.report.card import verdict_style

    t = Table("group", "item", "verdict", "how it was judged", "requests", title="API contract — judged by effect",
              title_justify="left")
    for i in items:
        v = i["verdict"] or ("compliant" if i.get("compliant") else "finding")
        style = verdict_style(i["verdict"]) if i["verdict"] else ("green" if i.get("compliant") else "yellow")
        t.add_row(i["group"], i["item"], f"[{style}]{v}[/]", i["reason"], ", ".join(r.rsplit("/", 1)[-1]
                                                                                    for r in i["requests"][:4]))
    console.print(t)


@operation(("probe",), "Report what an endpoint honours (usage, ignore_eos, min_tokens, seed, logprobs, token ids); "
           "--contract: the whole API contract, item by item.",
           description="Detects the engine (vLLM, SGLang, llama.cpp llama-server, llama-cpp-python, generic OpenAI) "
                       "and tests each option by its effect, not by the absence of an error: ignore_eos must run to "
                       "max_tokens where a control stops early, a seed must repeat a T=1 sample, logprobs must come "
                       "back with the asked number of alternatives. Requests and replies go to "
                       "<run-dir>/probes/capabilities.jsonl; a probe evidence record is saved. With --contract it "
                       "instead checks the API contract (docs/contract.md): sampling options (temperature, top_k, "
                       "top_p, min_p, seed, penalties, logit_bias, n, stop, max_tokens) by their effect, what the "
                       "endpoint does with invalid values, usage.prompt_tokens against the chat template counted by "
                       "the model's own tokenizer, the context limit, response_format JSON alone and under load, and "
                       "tool_choice; each item PASS, FAIL (accepted and not applied), UNPROVEN or NOT RUN with the "
                       "requests that decided it, into probes/<gate-run>.jsonl and a 'gates' record. Exit 0 PASS, "
                       "1 FAIL, 3 UNPROVEN.",
           example="inferencekit probe --base-url http://127.0.0.1:8080 --contract",
           args=[*CLIENT_ARGS, Arg("run_dir", "string", "Run directory (default: runs/<run-id>)."),
                 Arg("contract", "boolean", "Check the API contract item by item instead of the capability probe.",
                     default=False),
                 Arg("json_load", "integer", "--contract: structured-output requests sent under load (96 see a 5% "
                     "corruption with ≥ 99% probability).", default=96),
                 Arg("concurrency", "integer", "--contract: requests in flight for the structured-output load.",
                     default=4),
                 Arg("tokenizer", "string", "--contract: the model's GGUF file or Hugging Face folder, to count "
                     "prompts and name token ids when the engine has no route for it (llama-cpp-python)."),
                 Arg("items", "array", "--contract: only these item groups, comma-separated (temperature, top_k, "
                     "top_p, min_p, seed, penalties, logit_bias, n, stop, max_tokens, validation, accounting, "
                     "context, json, tools); default all.")])
def probe(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
          extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None, contract: bool = False,
          json_load: int = 96, concurrency: int = 4, tokenizer: str | None = None,
          items: list[str] | None = None) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    if contract:
        return _contract(call, base_url, model, api_key_env, timeout, extra_body, chat_template_kwargs, run_dir,
                         contract_settings(json_load=json_load, concurrency=concurrency, tokenizer=tokenizer,
                                           items=items))
    if tokenizer is not None or items:
        raise OpError("--tokenizer and --items are used by --contract only")
    policy = body_policy(extra_body, chat_template_kwargs, fixed=CAPABILITY_FIXED, operation="probe")
    run = RunDir.create(run_dir)

    async def main(url: str) -> dict[str, Any]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            run.pin("engine_identity", info.identity())
            run.update_run(command=list(call.argv), operation=call.operation, engine=info.to_dict(),
                           api_key_env=api_key_env)
            return await probe_endpoint(client, info, run, policy)

    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            rec = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    return Outcome({"evidence_id": rec["evidence_id"], "run_dir": str(Path(run.path)), **rec["data"]}, None,
                   lambda console: render_probe(console, rec))


def _contract(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
              extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None,
              s: ContractSettings) -> Outcome:
    policy = body_policy(extra_body, chat_template_kwargs, fixed=CONTRACT_FIXED, operation="probe --contract")
    if s.tokenizer is not None and not Path(s.tokenizer).exists():
        raise OpError(f"--tokenizer {s.tokenizer!r}: no such file or folder")
    check_tokenizer(s.tokenizer)
    run, existing = gate_run_dir(run_dir)

    async def main(url: str) -> tuple[str, str, GateRunSettings]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            pin_engine(run, info, policy.chat_template_kwargs)
            tok = choose_tokenizer(s.tokenizer, client, info.dialect)
            name, gs = await run_contract_gate(client, info, run, s, engine=info.engine, tokenizer=tok,
                                               extra=policy.extra, ctk=policy.chat_template_kwargs, quiet=call.quiet,
                                               request_policy=policy.to_json())
        return name, info.engine, gs

    if not existing:
        run.update_run(command=list(call.argv), operation=call.operation, api_key_env=api_key_env)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            name, label, gs = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    gates, rec = judge_gate_run(run, label, name, gs, mode="contract", only_asked=True)
    gate = gates[0]
    items = list(gate.metrics.get("items") or [])

    def show(console: Any) -> None:
        render_contract(console, items)
        render_gates(console, rec)

    return Outcome({"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "run_dir": str(run.path),
                    "gate_run": name, "limitations": rec["limitations"], "contract": {"verdict": gate.verdict,
                    "reason": gate.reason, "counts": gate.metrics.get("counts")}, "items": items}, rec["verdict"], show)
