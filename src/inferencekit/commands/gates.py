"""``inferencekit gates run|check|order|spec-exact``: the anti-cheat gates, live or re-judged from a run dir."""

from __future__ import annotations

import asyncio
import secrets
import sys
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint, read_api_key
from inferencekit.api.tokenize import check_tokenizer, choose_tokenizer
from inferencekit.data.bfcl import bfcl_data_dir, cap_draw, draw
from inferencekit.data.prompts import load_prompt_set
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.gates import PLANNED_GATES, RUN_COMMAND_GATES
from inferencekit.gates.check import check_run_dir, engines_in
from inferencekit.gates.order import order_settings, run_order_gate
from inferencekit.gates.probes.order import ORDER_FIXED
from inferencekit.gates.probes.plan import PROBE_FIXED, SAMPLING_FLOOR, ProbeSettings
from inferencekit.gates.record import gates_record
from inferencekit.gates.result import bounded_text, strict_gate
from inferencekit.gates.run import (
    GateRunSettings,
    default_gates,
    gate_run_dir,
    judge_gate_run,
    pin_engine,
    run_gate_probes,
    size_probes,
)
from inferencekit.options import CLIENT_ARGS, FIXED_ARG, check_client_args, check_urls
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations, structured_load_tables, verdict_style
from inferencekit.rundir import RunDir, gate_run_name

__all__ = ["gates_check", "gates_order", "gates_run", "gates_spec_exact", "judged_outcome", "render_gates"]


def render_gates(console: Any, rec: dict[str, Any]) -> None:
    """A table of the gates: verdict, reason; then limitations, the record id and how to check it."""
    from rich.table import Table

    t = Table("gate", "verdict", "reason", title=f"gates — {rec['summary'].split(':')[0]}", title_justify="left")
    for g in rec["data"]["gates"]:
        shown = g["verdict"] + ("" if g["applicable"] or g["verdict"] != "NOT RUN" else " (not asked)")
        t.add_row(g["gate"], f"[{verdict_style(g['verdict'])}]{shown}[/]", bounded_text(g))
    console.print(t)
    for g in rec["data"]["gates"]:
        for table in structured_load_tables(g):
            console.print(table)
        for prop in g.get("properties") or ():
            console.print(f"property ({g['gate']}), not a verdict: {prop.get('property')}: {prop.get('shown_by')} "
                          f"(docs/properties.md; --strict: {prop.get('strict')})", markup=False, style="yellow")
    print_limitations(console, rec["limitations"])
    console.print(f"verdict: {rec['verdict']}   record: {rec['evidence_id']}  (check: inferencekit evidence verify "
                  f"{rec['evidence_id']})", markup=False, highlight=False)


@operation(("gates", "check"), "Re-judge a recorded run dir offline with the gates that need no server.",
           description="Reads a run directory and judges, with the code the live gates use: token_count (usage vs "
                       "streamed token ids or logprob entries vs re-tokenized text), output_length (exact-length "
                       "requests came back exactly max_tokens long; lengths against a reference engine's outputs when "
                       "given) and unique_prompts (no prompt repeats inside a load level) on the load replies; every "
                       "gate run's probes (probes/<gate-run>.jsonl, written by `gates run`: caching, hidden_probes, "
                       "rare_tokens, spec_exact, …) with the settings recorded there; and the hidden probes a load "
                       "mixed in (bench serve --probes). A live gate without probe replies is NOT RUN. Writes a "
                       "'gates' evidence record into the run dir. Exit 0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit gates check runs/<run-id>",
           args=[Arg("run_dir", "string", "The run directory to judge.", required=True, positional=True,
                     metavar="RUN_DIR"),
                 Arg("engine", "string", "Which outputs/<engine>/ to judge (default: the only one)."),
                 Arg("reference_outputs", "string", "Another engine's outputs folder (outputs/<engine> of the same "
                     "layout) for output_length's per-prompt comparison."),
                 Arg("length_tolerance", "number", "output_length: per-prompt length tolerance against the reference.",
                     default=0.10),
                 Arg("max_length_outliers", "number", "output_length: share of prompts allowed outside the tolerance "
                     "(missing outputs count).", default=0.10),
                 Arg("gate_run", "array", "Judge only these gate runs (probes/<name>.jsonl; default: all of them)."),
                 Arg("strict", "boolean", "For CI: a PASS that rests on a fallback (a dropped field, a shrunk prompt "
                     "set, an allowance used) and a gate marked not applicable count as UNPROVEN (exit 3); a gate that "
                     "showed a property (docs/properties.md) takes the property's strict verdict (not-batch-invariant: "
                     "FAIL). Without it, those PASSes stand and say their limitation.", default=False)])
def gates_check(call: Call, run_dir: str, engine: str | None = None, reference_outputs: str | None = None,
                length_tolerance: float = 0.10, max_length_outliers: float = 0.10,
                gate_run: list[str] | None = None, strict: bool = False) -> Outcome:
    run = RunDir.open(run_dir)
    labels = engines_in(run.path)
    if engine is None:
        if len(labels) != 1:
            raise OpError(f"{run_dir} holds outputs of {len(labels)} engines ({', '.join(labels) or 'none'}); "
                          "pass --engine")
        engine = labels[0]
    elif engine not in labels:
        raise OpError(f"{run_dir} has no outputs/{engine}/ (it has: {', '.join(labels) or 'none'})")
    ref = Path(reference_outputs) if reference_outputs else None
    if ref is not None and not ref.is_dir():
        raise OpError(f"--reference-outputs {reference_outputs}: not a directory")
    if not 0 <= length_tolerance < 1 or not 0 <= max_length_outliers <= 1:
        raise OpError("--length-tolerance must be in [0, 1) and --max-length-outliers in [0, 1]")
    known = {gate_run_name(p) for p in run.gate_run_logs()}
    unknown = sorted(set(gate_run or ()) - known)
    if unknown:
        raise OpError(f"--gate-run {', '.join(unknown)}: no probes/<name>.jsonl of that name in {run_dir} (it has: "
                      f"{', '.join(sorted(known)) or 'none'})")
    checked = check_run_dir(run.path, engine, reference=ref, length_tolerance=length_tolerance,
                            max_length_outliers=max_length_outliers, gate_runs=gate_run or None)
    gates = [strict_gate(g) for g in checked.gates] if strict else checked.gates
    settings = {"engine": engine, "reference_outputs": reference_outputs, "length_tolerance": length_tolerance,
                "max_length_outliers": max_length_outliers, "gate_runs": gate_run, "strict": strict}
    rec = gates_record(run, gates, engine=engine, files=checked.files, mode="check", settings=settings,
                       notes=checked.notes)
    return Outcome({"evidence_id": rec["evidence_id"], "verdict": rec["verdict"],
                    "gates": {g.gate: {"verdict": g.verdict, "reason": g.reason} for g in gates}},
                   rec["verdict"], lambda console: render_gates(console, rec))


def _check_settings(gates: list[str] | None, sampling_prompts: int | None, cache_prompts: int, threshold: float,
                    max_tokens: int, spec_off_url: str | None, reference_url: str | None, rare_per_class: int
                    ) -> list[str]:
    wanted = list(gates) if gates else default_gates(spec_off_url)
    if "spec_exact" in wanted and not spec_off_url:
        raise OpError("spec_exact needs --spec-off-url (the same model without speculative decoding), or use "
                      "`inferencekit gates spec-exact --a URL --b URL`")
    if sampling_prompts is not None and sampling_prompts < 1:
        raise OpError(f"--sampling-prompts must be at least 1 (a FAIL needs {SAMPLING_FLOOR} or more)")
    if cache_prompts < 1 or max_tokens < 2 or not 0 < threshold < 10 or rare_per_class < 1:
        raise OpError("--cache-prompts and --rare-per-class must be ≥ 1, --max-tokens ≥ 2 and --threshold in (0, 10)")
    check_urls([spec_off_url, reference_url])
    return wanted


@operation(("gates", "run"), "Run the anti-cheat gates against a server: probes sent, recorded, judged.",
           description="Sends the live probes of the gates (caching, token_count, output_length, hidden_probes, "
                       "rare_tokens; spec_exact with --spec-off-url) to the server — one at a time, every probe tagged "
                       "at random and randomly interleaved, the seed fresh per run and recorded — "
                       "and writes each reply "
                       "to probes/<gate-run>.jsonl in the run dir. Then judges them, together with the run dir's load "
                       "replies when it holds a bench serve run (token_count, output_length, unique_prompts), with the "
                       "code of `gates check`. Without --base-url the embedded engine is started. Writes a 'gates' "
                       "evidence record. Exit 0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit gates run --base-url http://127.0.0.1:8080 --reference-url http://127.0.0.1:8081",
           args=[*CLIENT_ARGS,
                 Arg("run_dir", "string", "Run directory (an existing bench serve run dir is judged too; default: a "
                     "new runs/<run-id>)."),
                 Arg("gates", "array", "Gates to run (default: every gate the inputs allow).",
                     choices=RUN_COMMAND_GATES),
                 Arg("prompts", "string", "Prompt set the probes draw from: 'dev' or a .jsonl file.", default="dev"),
                 Arg("seed", "integer", "Probe seed (default: drawn fresh and recorded; "
                     "give it only to replay a run)."),
                 Arg("max_tokens", "integer", "Output tokens of the ordinary probes.", default=64),
                 Arg("echo_tokens", "integer", "Output tokens of the echo and rare-string probes.", default=64),
                 Arg("cache_prompts", "integer", "caching: first/repeat prompt pairs.", default=6),
                 Arg("sampling_prompts", "integer", "hidden_probes: prompts sent greedy and three times at T=1 "
                     "(FAIL needs all of ≥ 4 to equal greedy; default 8)."),
                 Arg("threshold", "number", "caching: largest allowed repeat speedup − 1 (0.10 = 1.10×).",
                     default=0.10),
                 Arg("rare_per_class", "integer", "rare_tokens: strings per class (CJK, Hangul, emoji, ZWJ, "
                     "Devanagari, Arabic, uncommon scripts (Runic, Cherokee, Glagolitic, Lisu), math; also code "
                     "identifiers and numbers).", default=4),
                 Arg("tokenizer", "string", "Tokenizer for re-tokenized counts: a Hugging Face folder or .gguf "
                     "(default: the engine's /tokenize endpoint when it has one)."),
                 Arg("reference_url", "string", "Reference engine (same model, trusted): rare-string misses it shares "
                     "are not counted; without one a miss is UNPROVEN."),
                 Arg("reference_api_key_env", "string", "NAME of the reference engine's API-key variable."),
                 Arg("spec_off_url", "string", "The same model without speculative decoding: runs spec_exact with "
                     "--base-url as the speculative engine."),
                 Arg("spec_limit", "integer", "spec_exact: prompts used (0 = all).", default=16),
                 Arg("spec_max_tokens", "integer", "spec_exact: greedy output tokens per request.", default=128),
                 Arg("early_tokens", "integer", "spec_exact: a divergence before this token is early.", default=32),
                 Arg("spec_tolerance", "integer", "spec_exact: early divergences allowed above the A/A floor.",
                     default=0),
                 Arg("engine_label", "string", "Label of this engine in the run dir (default: the detected engine)."),
                 FIXED_ARG])
def gates_run(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
              extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None = None,
              gates: list[str] | None = None, prompts: str = "dev", seed: int | None = None, max_tokens: int = 64,
              echo_tokens: int = 64, cache_prompts: int = 6, sampling_prompts: int | None = None,
              threshold: float = 0.10, rare_per_class: int = 4, tokenizer: str | None = None,
              reference_url: str | None = None,
              reference_api_key_env: str | None = None, spec_off_url: str | None = None, spec_limit: int = 16,
              spec_max_tokens: int = 128, early_tokens: int = 32, spec_tolerance: int = 0,
              engine_label: str | None = None, fixed: bool = False) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    read_api_key(reference_api_key_env)
    check_tokenizer(tokenizer)
    wanted = _check_settings(gates, sampling_prompts, cache_prompts, threshold, max_tokens, spec_off_url, reference_url,
                             rare_per_class)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=PROBE_FIXED, operation="gates run")
    pset = load_prompt_set(prompts)
    probe_s = ProbeSettings(gates=tuple(g for g in wanted if g in PLANNED_GATES),
                            seed=seed if seed is not None else secrets.randbits(63), max_tokens=max_tokens,
                            echo_tokens=echo_tokens, cache_prompts=cache_prompts, rare_per_class=rare_per_class,
                            sealed_prompts=prompts != "dev", sequential=not fixed)
    size_probes(probe_s, pset.prompts, sampling_prompts, prompts)
    s = GateRunSettings(gates=wanted, probes=probe_s, threshold=threshold, reference_url=reference_url,
                        spec_off_url=spec_off_url, spec_limit=spec_limit, spec_max_tokens=spec_max_tokens,
                        early_tokens=early_tokens, spec_tolerance=spec_tolerance, prompts=pset.describe(),
                        request_policy=policy.to_json())
    run, existing = gate_run_dir(run_dir)

    async def main(url: str) -> tuple[str, str]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            label = engine_label or info.engine
            pin_engine(run, info, policy.chat_template_kwargs)
            probe_s.top_k_off = info.dialect.top_k_off
            tok = choose_tokenizer(tokenizer, client, info.dialect)
            name = await run_gate_probes(client, info, run, s, list(pset.prompts), engine=label, extra=policy.extra,
                                         ctk=policy.chat_template_kwargs,
                                         tokenizer=tok, api_key_env=api_key_env,
                                         reference_key_env=reference_api_key_env, quiet=call.quiet)
        return name, label

    if not existing:
        run.update_run(command=list(call.argv), operation=call.operation)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            name, label = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    return judged_outcome(run, label, name, s, mode="run")


def judged_outcome(run: RunDir, engine: str, gate_run: str, s: GateRunSettings, *, mode: str,
                   only_asked: bool = False) -> Outcome:
    """Judge ``gate_run`` with ``gates check``'s code (``gates.run.judge_gate_run``), record and render it."""
    gates, rec = judge_gate_run(run, engine, gate_run, s, mode=mode, only_asked=only_asked)
    return Outcome({"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "run_dir": str(run.path),
                    "gate_run": gate_run, "limitations": rec["limitations"],
                    "gates": {g.gate: {"verdict": g.verdict, "reason": g.reason} for g in gates}},
                   rec["verdict"], lambda console: render_gates(console, rec))


@operation(("gates", "spec-exact"), "Speculative decoding exactness: greedy A (speculation on) vs B (off), judged "
           "against B's own A/A floor.",
           description="Sends each prompt greedy to B, then A, then B again, and compares the outputs token by token "
                       "(token ids where the engines stream them, else characters). FAIL when A diverges from B before "
                       "--early-tokens on more prompts than B diverges from itself (+ --tolerance); late-only "
                       "divergences beyond the floor are UNPROVEN. Writes probes/<gate-run>.jsonl and a 'gates' "
                       "record. Exit 0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit gates spec-exact --a http://127.0.0.1:8001 --b http://127.0.0.1:8002",
           args=[Arg("a", "string", "Base URL of the engine with speculative decoding (or MTP).", required=True),
                 Arg("b", "string", "Base URL of the same model without it.", required=True),
                 *(x for x in CLIENT_ARGS if x.name not in ("base_url",)),
                 Arg("limit", "integer", "Prompts used (0 = all).", default=16),
                 Arg("max_tokens", "integer", "Greedy output tokens per request.", default=128),
                 Arg("early_tokens", "integer", "A divergence before this token is early.", default=32),
                 Arg("tolerance", "integer", "Early divergences allowed above the A/A floor.", default=0),
                 Arg("prompts", "string", "Prompt set: 'dev' or a .jsonl file.", default="dev"),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>).")])
def gates_spec_exact(call: Call, a: str, b: str, model: str | None = None, api_key_env: str | None = None,
                     timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                     prompts: str = "dev", limit: int = 16, max_tokens: int = 128, early_tokens: int = 32,
                     tolerance: int = 0, run_dir: str | None = None) -> Outcome:
    check_urls([a, b])
    check_client_args(None, api_key_env, timeout)
    if limit < 0 or max_tokens < 2 or early_tokens < 1 or tolerance < 0:
        raise OpError("--limit ≥ 0, --max-tokens ≥ 2, --early-tokens ≥ 1 and --tolerance ≥ 0 are required")
    policy = body_policy(extra_body, chat_template_kwargs, fixed=PROBE_FIXED, operation="gates spec-exact")
    pset = load_prompt_set(prompts)
    s = GateRunSettings(gates=["spec_exact"], probes=ProbeSettings(gates=()), spec_off_url=b, spec_limit=limit,
                        spec_max_tokens=max_tokens, early_tokens=early_tokens, spec_tolerance=tolerance,
                        prompts=pset.describe(), request_policy=policy.to_json())
    run = RunDir.create(run_dir)
    run.update_run(command=list(call.argv), operation=call.operation)

    async def main() -> tuple[str, str]:
        async with Client(Endpoint.parse(a, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            run.update_run(engine=info.to_dict(), dialect=info.dialect.describe())
            name = await run_gate_probes(client, info, run, s, list(pset.prompts), engine=info.engine,
                                         extra=policy.extra, ctk=policy.chat_template_kwargs, tokenizer=None,
                                         api_key_env=api_key_env, reference_key_env=None,
                                         quiet=call.quiet)
        return name, info.engine

    try:
        name, label = asyncio.run(main())
    except OpError:
        run.discard_if_empty()
        raise
    return judged_outcome(run, label, name, s, mode="spec-exact")


@operation(("gates", "order"), "Order independence: one BFCL draw in several orders at T=0, every reply "
           "byte-identical.",
           description="Draws single-turn function-calling samples (messages, tools, tool_choice auto) from the "
                       "bfcl-eval package's data (simple, multiple, parallel, parallel_multiple, irrelevance and "
                       "their live_ variants; --per-subset from each, interleaved), and sends the draw in --orders "
                       "orders (canonical, reversed, then rotations) at temperature 0 with a fixed --max-tokens, "
                       "streamed with usage. Compares every sample across the orders byte for byte: text, "
                       "reasoning, tool calls with raw arguments, finish_reason, completion_tokens. Any difference "
                       "FAILs (first differing field and position shown); a failed request is UNMEASURED and makes "
                       "the gate at least UNPROVEN; all-empty replies FAIL as VACUOUS. --hermetic runs it with the "
                       "prompt cache bypassed and again with it on. Replies go to probes/<gate-run>.jsonl; writes a "
                       "'gates' record (`gates check` re-judges it). Exit 0 PASS, 1 FAIL, 2 bad input or a server "
                       "that does not answer, 3 UNPROVEN.",
           example="inferencekit gates order --base-url http://127.0.0.1:8080 --sample-cap 40",
           args=[*CLIENT_ARGS,
                 Arg("run_dir", "string", "Run directory (an existing one gets a new gate run; default: a new "
                     "runs/<run-id>)."),
                 Arg("orders", "integer", "Orders to issue the draw in: 2 = canonical and reversed, more adds "
                     "rotations (2..6).", default=2),
                 Arg("sample_cap", "integer", "Keep only the first N samples of the draw (0 = all); the draw "
                     "interleaves the subsets, so a cap keeps them round-robin.", default=0),
                 Arg("per_subset", "integer", "Samples drawn from each of the 13 single-turn subsets (evenly "
                     "spaced over the subset's file).", default=8),
                 Arg("max_tokens", "integer", "Generation cap per request (recorded); 0 = BFCL's own budget, 4096 "
                     "clipped to the server's context. A lower cap is a fallback on the verdict.", default=0),
                 Arg("concurrency", "integer", "Requests in flight at once (1: one after the other).", default=1),
                 Arg("hermetic", "boolean", "Run twice: prompt cache bypassed (llama.cpp cache_prompt: false, vLLM "
                     "cache_salt), then as served; the verdict says which regime failed. Refused (exit 2) on "
                     "engines with no known bypass, such as llama-cpp-python.", default=False),
                 Arg("bfcl_data", "string", "A folder holding BFCL_v4_*.json (default: the installed bfcl-eval "
                     "package's data; pip install --no-deps bfcl-eval==2026.3.23)."),
                 Arg("engine_label", "string", "Label of this engine in the run dir (default: the detected engine).")])
def gates_order(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
                extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None = None, orders: int = 2,
                sample_cap: int = 0, per_subset: int = 8, max_tokens: int = 0, concurrency: int = 1,
                hermetic: bool = False, bfcl_data: str | None = None, engine_label: str | None = None) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=ORDER_FIXED, operation="gates order")
    if sample_cap < 0 or per_subset < 1:
        raise OpError("--sample-cap must be ≥ 0 (0 = the whole draw) and --per-subset ≥ 1")
    d = draw(bfcl_data_dir(bfcl_data), per_subset=per_subset)
    samples, warning = cap_draw(d, sample_cap)
    s = order_settings(samples, orders=orders, max_tokens=max_tokens, concurrency=concurrency, hermetic=hermetic,
                       draw_info=d.describe(), cap_warning=warning)
    if warning and not call.quiet and not call.json_output:
        print(f"warning: {warning}", file=sys.stderr)
    run, existing = gate_run_dir(run_dir)

    async def main(url: str) -> tuple[str, str, GateRunSettings]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            label = engine_label or info.engine
            pin_engine(run, info, policy.chat_template_kwargs)
            name, gs = await run_order_gate(client, info, run, samples, s, engine=label, extra=policy.extra,
                                            ctk=policy.chat_template_kwargs, quiet=call.quiet,
                                            request_policy=policy.to_json())
        return name, label, gs

    if not existing:
        run.update_run(command=list(call.argv), operation=call.operation)
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            name, label, gs = asyncio.run(main(url))
    except OpError:
        run.discard_if_empty()
        raise
    return judged_outcome(run, label, name, gs, mode="order", only_asked=True)
