"""``inferencekit gates run`` and ``gates spec-exact``: send the live probes, record them, judge them.

Collect, then judge: the probes of one gate run go to ``probes/<gate-run>.jsonl`` in the run dir as
they finish (``probe_collect``), and the verdicts come from ``check_run_dir`` on that run dir — the
very code ``gates check`` runs offline, so a recorded run re-judges to the same verdicts.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.api.tokenize import Tokenizer, choose_tokenizer
from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.gates.check import check_run_dir
from inferencekit.gates.ops import gates_record, render_gates
from inferencekit.gates.probe_collect import ProbeLog, retokenize_probes, send_probes
from inferencekit.gates.probe_plan import (LIVE_GATES, OPTIONAL_FIELDS, SAMPLING_FLOOR, ProbeSettings, plan_probes,
                                           probe_pool, prompts_needed, top_k_off)
from inferencekit.gates.result import GATES, Gate
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, split_extra_body, template_kwargs
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir

__all__ = [
    "PROBE_FIXED",
    "RUN_GATES",
    "GateRunSettings",
    "gate_run_dir",
    "gate_run_id",
    "gates_run",
    "gates_spec_exact",
    "judged_outcome",
    "pin_engine",
    "run_gate_probes",
]

# Fields every probe sets itself: --extra-body may not override them.
PROBE_FIXED = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream", "stream_options",
               "temperature", "top_p", "top_k", "seed", "ignore_eos", "min_tokens", "logprobs", "top_logprobs",
               "return_token_ids", "n", "n_predict", "stop"}
SPEC_KINDS = ("spec_b", "spec_a", "spec_b2")
RUN_GATES = tuple(g for g in GATES if g != "order")  # the order gate has its own command (gates order)


@dataclass(slots=True)
class GateRunSettings:
    """What one gate run sends and how it is judged (stored in the probe log's header)."""

    gates: list[str]
    probes: ProbeSettings
    threshold: float = 0.10
    reference_url: str | None = None
    spec_off_url: str | None = None
    spec_limit: int = 16
    spec_max_tokens: int = 128
    early_tokens: int = 32
    spec_tolerance: int = 0
    prompts: dict[str, Any] | None = None
    order: dict[str, Any] | None = None  # gates order: OrderSettings.to_json()

    def header(self) -> dict[str, Any]:
        out = {"gates": self.gates, "probes": self.probes.to_json(), "threshold": self.threshold,
               "reference_url": self.reference_url, "spec_off_url": self.spec_off_url, "spec_limit": self.spec_limit,
               "spec_max_tokens": self.spec_max_tokens, "early_tokens": self.early_tokens,
               "spec_tolerance": self.spec_tolerance, "prompts": self.prompts}
        if self.order is not None:
            out["order"] = self.order
        return out


def gate_run_id() -> str:
    """A sortable, unique gate-run name: UTC time and 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def _spec_probes(prompts: list[Prompt], limit: int, max_tokens: int, model: str, extra: dict[str, Any],
                 ctk: dict[str, Any], count_fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Greedy bodies for spec_exact, one per short/medium chat prompt of the set in its order (the first
    ``limit``; 0 = all), asking for the engine's per-token stream (``count_fields``) so outputs are compared
    token by token. Long prompts are left out: their prefill, three times per prompt, would dominate the
    gate's time and a divergence shows in the output, not the prompt."""
    chosen = probe_pool(prompts)[: limit or None]
    out = []
    for p in chosen:
        body = {**extra, "model": model, "messages": [dict(m) for m in p.messages or ()], "max_tokens": max_tokens,
                "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0, **count_fields}
        if ctk:
            body["chat_template_kwargs"] = dict(ctk)
        out.append({"id": p.id, "kind": "spec", "key": p.id, "meta": {"bucket": p.bucket},
                    "endpoint": "/v1/chat/completions", "body": body})
    return out


async def _spec_exact(a: Client, b: Client, b_model: str, probes: list[dict[str, Any]], log: ProbeLog,
                      tick: Any) -> None:
    """B, then A, then B again per prompt (B's repeat is the A/A floor); each reply logged as it ends."""
    for p in probes:
        for kind in SPEC_KINDS:
            client, model = (a, None) if kind == "spec_a" else (b, b_model)
            await send_probes(client, [{**p, "id": f"{p['key']}.{kind}", "kind": kind}], log,
                              optional=OPTIONAL_FIELDS, model=model, on_done=tick)


async def run_gate_probes(client: Client, info: EngineInfo, run: RunDir, s: GateRunSettings, prompts: list[Prompt], *,
                          engine: str, extra: dict[str, Any], ctk: dict[str, Any], tokenizer: Tokenizer | None,
                          api_key_env: str | None, reference_key_env: str | None, quiet: bool = True) -> str:
    """Send one gate run's probes into ``run`` (``probes/<gate-run>.jsonl``) and return the gate-run name.

    The reference engine (``s.reference_url``) gets copies of the rare-string probes; the spec-off engine
    (``s.spec_off_url``) the spec_exact prompts. Nothing is judged here."""
    name = gate_run_id()
    plan = plan_probes(prompts, s.probes, model=str(info.model), extra=extra, ctk=ctk,
                       count_fields=info.dialect.count_fields, neutral=info.dialect.neutral_sampling,
                       ) if set(s.gates) & set(LIVE_GATES) else []
    header = {"gate_run": name, "engine": engine, "model": info.model, "engine_info": info.identity(),
              "known_ignored_options": list(info.dialect.ignores), "settings": s.header()}
    with ProbeLog(run.path / "probes" / f"{name}.jsonl", header) as log, ProgressBar(quiet) as bar:
        def tick(rec: dict[str, Any]) -> None:
            bar.on_done("probes", bool(rec["reply"].get("status") == 200 and not rec["reply"].get("error")))

        bar.on_level(f"gate probes ({engine})", len(plan))
        records = await send_probes(client, plan, log, optional=OPTIONAL_FIELDS, on_done=tick)
        rare = [r for r in plan if r["kind"] == "rare"]
        if s.reference_url and rare:
            async with Client(Endpoint.parse(s.reference_url, reference_key_env), timeout_s=client.timeout_s) as ref:
                ref_info = await detect_engine(ref)
                bar.on_level("rare strings on the reference engine", len(rare))
                records += await send_probes(ref, rare, log, optional=OPTIONAL_FIELDS, kind_suffix="_reference",
                                             model=str(ref_info.model), on_done=tick)
        if s.spec_off_url:
            spec = _spec_probes(prompts, s.spec_limit, s.spec_max_tokens, str(info.model),
                                {**extra, **info.dialect.neutral_sampling}, ctk, info.dialect.count_fields)
            async with Client(Endpoint.parse(s.spec_off_url, api_key_env), timeout_s=client.timeout_s) as off:
                off_info = await detect_engine(off)
                bar.on_level("spec_exact: A, B, B again", 3 * len(spec))
                await _spec_exact(client, off, str(off_info.model), spec, log, tick)
        if tokenizer is not None:
            counts = await retokenize_probes(tokenizer, records)
            log.append({"tokenizer": tokenizer.source, "retokenized": counts})
    return name


def _check_settings(gates: list[str] | None, sampling_prompts: int | None, cache_prompts: int, threshold: float,
                    max_tokens: int, spec_off_url: str | None, reference_url: str | None, rare_per_class: int
                    ) -> list[str]:
    wanted = list(gates) if gates else [g for g in RUN_GATES if g != "unique_prompts"
                                        and (g != "spec_exact" or spec_off_url)]
    if "spec_exact" in wanted and not spec_off_url:
        raise OpError("spec_exact needs --spec-off-url (the same model without speculative decoding), or use "
                      "`inferencekit gates spec-exact --a URL --b URL`")
    if sampling_prompts is not None and sampling_prompts < 1:
        raise OpError(f"--sampling-prompts must be at least 1 (a FAIL needs {SAMPLING_FLOOR} or more)")
    if cache_prompts < 1 or max_tokens < 2 or not 0 < threshold < 10 or rare_per_class < 1:
        raise OpError("--cache-prompts and --rare-per-class must be ≥ 1, --max-tokens ≥ 2 and --threshold in (0, 10)")
    for url in (spec_off_url, reference_url):
        if url:
            normalize_base_url(url)
    return wanted


@operation(("gates", "run"), "Run the anti-cheat gates against a server: probes sent, recorded, judged.",
           description="Sends the live probes of the gates (caching, token_count, output_length, hidden_probes, "
                       "rare_tokens; spec_exact with --spec-off-url) to the server — one at a time, every probe tagged "
                       "at random and randomly interleaved, the seed fresh per run and recorded — and writes each reply "
                       "to probes/<gate-run>.jsonl in the run dir. Then judges them, together with the run dir's load "
                       "replies when it holds a bench serve run (token_count, output_length, unique_prompts), with the "
                       "code of `gates check`. Without --base-url the embedded engine is started. Writes a 'gates' "
                       "evidence record. Exit 0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit gates run --base-url http://127.0.0.1:8080 --reference-url http://127.0.0.1:8081",
           args=[*CLIENT_ARGS,
                 Arg("run_dir", "string", "Run directory (an existing bench serve run dir is judged too; default: a "
                     "new runs/<run-id>)."),
                 Arg("gates", "array", "Gates to run (default: every gate the inputs allow).", choices=RUN_GATES),
                 Arg("prompts", "string", "Prompt set the probes draw from: 'dev' or a .jsonl file.", default="dev"),
                 Arg("seed", "integer", "Probe seed (default: drawn fresh and recorded; give it only to replay a run)."),
                 Arg("max_tokens", "integer", "Output tokens of the ordinary probes.", default=64),
                 Arg("echo_tokens", "integer", "Output tokens of the echo and rare-string probes.", default=64),
                 Arg("cache_prompts", "integer", "caching: first/repeat prompt pairs.", default=6),
                 Arg("sampling_prompts", "integer", "hidden_probes: prompts sent greedy and three times at T=1 "
                     "(FAIL needs all of ≥ 4 to equal greedy; default 8)."),
                 Arg("threshold", "number", "caching: largest allowed repeat speedup − 1 (0.10 = 1.10×).", default=0.10),
                 Arg("rare_per_class", "integer", "rare_tokens: strings per class (CJK, Hangul, emoji, ZWJ, Devanagari, "
                     "Arabic, math; also code identifiers and numbers).", default=4),
                 Arg("tokenizer", "string", "Tokenizer for re-tokenized counts: a Hugging Face folder or .gguf (default: "
                     "the engine's /tokenize endpoint when it has one)."),
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
                 Arg("engine_label", "string", "Label of this engine in the run dir (default: the detected engine).")])
def gates_run(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
              extra_body: str | None, chat_template_kwargs: str | None, run_dir: str | None = None,
              gates: list[str] | None = None, prompts: str = "dev", seed: int | None = None, max_tokens: int = 64,
              echo_tokens: int = 64, cache_prompts: int = 6, sampling_prompts: int | None = None,
              threshold: float = 0.10, rare_per_class: int = 4, tokenizer: str | None = None,
              reference_url: str | None = None,
              reference_api_key_env: str | None = None, spec_off_url: str | None = None, spec_limit: int = 16,
              spec_max_tokens: int = 128, early_tokens: int = 32, spec_tolerance: int = 0, engine_label: str | None = None) -> Outcome:
    if base_url:
        normalize_base_url(base_url)
    read_api_key(api_key_env)
    read_api_key(reference_api_key_env)
    check_client_args(timeout)
    wanted = _check_settings(gates, sampling_prompts, cache_prompts, threshold, max_tokens, spec_off_url, reference_url,
                             rare_per_class)
    extra_all = parse_json_object(extra_body, "--extra-body")
    extra, refused = split_extra_body(extra_all, PROBE_FIXED)
    ctk = template_kwargs(extra_all, chat_template_kwargs)
    pset = load_prompt_set(prompts)
    probe_s = ProbeSettings(gates=tuple(g for g in wanted if g in LIVE_GATES),
                            seed=seed if seed is not None else secrets.randbits(63), max_tokens=max_tokens,
                            echo_tokens=echo_tokens, cache_prompts=cache_prompts, rare_per_class=rare_per_class)
    pool = len(probe_pool(pset.prompts))
    if sampling_prompts is None and "hidden_probes" in probe_s.gates:
        room = pool - prompts_needed(ProbeSettings(gates=probe_s.gates, cache_prompts=cache_prompts, sampling_prompts=0))
        probe_s.sampling_prompts = max(SAMPLING_FLOOR, min(probe_s.sampling_prompts, room))
    elif sampling_prompts is not None:
        probe_s.sampling_prompts = sampling_prompts
    if probe_s.gates and pool < prompts_needed(probe_s):
        raise OpError(f"prompt set {prompts!r} has {pool} usable chat prompts; the probes need {prompts_needed(probe_s)}")
    s = GateRunSettings(gates=wanted, probes=probe_s, threshold=threshold, reference_url=reference_url,
                        spec_off_url=spec_off_url, spec_limit=spec_limit, spec_max_tokens=spec_max_tokens,
                        early_tokens=early_tokens,
                        spec_tolerance=spec_tolerance, prompts=pset.describe())
    if refused:
        probe_s.notes.append(f"--extra-body fields set by the probes themselves were not sent: {', '.join(refused)}")
    run, existing = gate_run_dir(run_dir)

    async def main(url: str) -> tuple[str, str]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            label = engine_label or info.engine
            pin_engine(run, info, ctk)
            probe_s.top_k_off = top_k_off(info.engine)
            tok = choose_tokenizer(tokenizer, client, info.dialect)
            name = await run_gate_probes(client, info, run, s, list(pset.prompts), engine=label, extra=extra, ctk=ctk,
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


def gate_run_dir(run_dir: str | None) -> tuple[RunDir, bool]:
    """``(run dir, existed)``: an existing run dir (a bench serve run, an earlier gate run) gets a new gate run
    beside what it holds; otherwise a new one is created."""
    existing = bool(run_dir) and (Path(str(run_dir)) / "run.json").is_file()
    return (RunDir.open(str(run_dir)) if existing else RunDir.create(run_dir)), existing


def pin_engine(run: RunDir, info: EngineInfo, ctk: dict[str, Any]) -> None:
    """Pin the model and template kwargs (a different engine later in the same run dir is refused there) and
    record the engine when the run dir has none yet."""
    run.pin("model", info.model)
    run.pin("chat_template_kwargs", ctk)
    if not run.read_run().get("engine"):
        run.update_run(engine=info.to_dict(), dialect=info.dialect.describe())


def judged_outcome(run: RunDir, engine: str, gate_run: str, s: GateRunSettings, *, mode: str,
                   only_asked: bool = False) -> Outcome:
    """Judge ``gate_run`` (and the run dir's load replies) with ``gates check``'s code; record and render it.
    ``only_asked`` keeps just the gates the run asked for (``gates order`` reports the order gate alone)."""
    gates, files = check_run_dir(run.path, engine, gate_runs=[gate_run])
    gates = [_applicable(g, s.gates) for g in gates if not only_asked or g.gate in s.gates]
    rec = gates_record(run, gates, engine=engine, files=files, mode=mode,
                       settings={"gate_run": gate_run, **s.header()})
    return Outcome({"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "run_dir": str(run.path),
                    "gate_run": gate_run, "limitations": rec["limitations"],
                    "gates": {g.gate: {"verdict": g.verdict, "reason": g.reason} for g in gates}},
                   rec["verdict"], lambda console: render_gates(console, rec))


def _applicable(g: Gate, wanted: list[str]) -> Gate:
    """A gate the run asked for that ended NOT RUN counts as UNPROVEN (DESIGN.md); others are not asked."""
    if g.gate not in wanted and g.verdict == "NOT RUN":
        g.applicable = False
    elif g.gate in wanted:
        g.applicable = True
    return g


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
    normalize_base_url(a)
    normalize_base_url(b)
    read_api_key(api_key_env)
    check_client_args(timeout)
    if limit < 0 or max_tokens < 2 or early_tokens < 1 or tolerance < 0:
        raise OpError("--limit ≥ 0, --max-tokens ≥ 2, --early-tokens ≥ 1 and --tolerance ≥ 0 are required")
    extra_all = parse_json_object(extra_body, "--extra-body")
    extra, _ = split_extra_body(extra_all, PROBE_FIXED)
    ctk = template_kwargs(extra_all, chat_template_kwargs)
    pset = load_prompt_set(prompts)
    s = GateRunSettings(gates=["spec_exact"], probes=ProbeSettings(gates=()), spec_off_url=b, spec_limit=limit,
                        spec_max_tokens=max_tokens, early_tokens=early_tokens, spec_tolerance=tolerance,
                        prompts=pset.describe())
    run = RunDir.create(run_dir)
    run.update_run(command=list(call.argv), operation=call.operation)

    async def main() -> tuple[str, str]:
        async with Client(Endpoint.parse(a, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            run.update_run(engine=info.to_dict(), dialect=info.dialect.describe())
            name = await run_gate_probes(client, info, run, s, list(pset.prompts), engine=info.engine, extra=extra,
                                         ctk=ctk, tokenizer=None, api_key_env=api_key_env, reference_key_env=None,
                                         quiet=call.quiet)
        return name, info.engine

    try:
        name, label = asyncio.run(main())
    except OpError:
        run.discard_if_empty()
        raise
    return judged_outcome(run, label, name, s, mode="spec-exact")
