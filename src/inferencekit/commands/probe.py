"""``inferencekit probe``: what an endpoint honours, judged by effect (``api/probe.py`` collects and judges)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.probe import CAPABILITY_FIXED, probe_endpoint
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations
from inferencekit.rundir import RunDir

__all__ = ["probe", "render_probe"]


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
    check_client_args(base_url, api_key_env, timeout)
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
