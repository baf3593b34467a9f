"""``inferencekit quality trajectory|score|gsm8k|niah|sampling``: the quality checks' operations and cards.

The jobs they call live in ``quality/*_run.py``; nothing here is measured or judged.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint, read_api_key
from inferencekit.data.gsm8k import load_gsm8k
from inferencekit.data.prompts import load_prompt_set
from inferencekit.engines.recipes import DEFAULT_CONTEXT
from inferencekit.engines.target import EMBEDDED_N_CTX_FLAG, serve_target
from inferencekit.errors import OpError
from inferencekit.options import CLIENT_ARGS, FIXED_ARG, check_client_args, check_urls
from inferencekit.quality import niah
from inferencekit.quality.gsm8k import pair_problem
from inferencekit.quality.gsm8k_lmeval_run import check_lm_eval_request, run_lm_eval_backend
from inferencekit.quality.gsm8k_run import GSM_FIXED, gsm8k_settings, load_paired_run, run_builtin
from inferencekit.quality.local_model import require_reference
from inferencekit.quality.niah_run import NIAH_FIXED, check_fit, run_niah
from inferencekit.quality.reference import (
    REFERENCE_KINDS,
    LocalReference,
    Reference,
    VllmReference,
    check_echo_reference,
)
from inferencekit.quality.sampling import MIN_PROMPTS, sampling_settings
from inferencekit.quality.sampling_collect import SamplingPlan
from inferencekit.quality.sampling_run import DEFAULT_SETTINGS, OWN_FIELDS, SAMPLING_FIELDS, run_sampling_check
from inferencekit.quality.sampling_sequential import draw_looks
from inferencekit.quality.score_run import CONTEXTS, score_record, score_sets
from inferencekit.quality.task_run import open_task_run, pinned_template_kwargs
from inferencekit.quality.trajectory import TrajectorySettings, select_prompts
from inferencekit.quality.trajectory_run import (
    TRAJ_FIXED,
    local_source,
    run_engine_trajectories,
    run_local_trajectories,
)
from inferencekit.quality.trajectory_store import label_dirs, load_set, run_of
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import print_limitations, verdict_style
from inferencekit.rundir import RunDir, safe_name

__all__ = ["print_tail", "quality_gsm8k", "quality_niah", "quality_sampling", "quality_score", "quality_trajectory",
           "render_gsm8k", "render_niah", "render_sampling", "render_score", "render_trajectory"]

EMBEDDED_CONTEXT = DEFAULT_CONTEXT  # the embedded engine's n_ctx (quality niah checks the grid against it)


# ---- quality trajectory

def print_tail(console: Any, rec: dict[str, Any], where: str) -> None:
    """A record's limitations, one per line, then ``where`` (plain text: no rich markup)."""
    print_limitations(console, rec["limitations"])
    console.print(where, markup=False, highlight=False)


def render_trajectory(console: Any, rec: dict[str, Any]) -> None:
    console.print(rec["summary"], markup=False, highlight=False)
    print_tail(console, rec, f"folder: {rec['data']['run_dir']}/{rec['data']['dir']}   record: {rec['evidence_id']}")


@operation(("quality", "trajectory"), "Greedy trajectories with top-k logprobs and token ids, one file per prompt "
           "(the input of quality score).",
           description="Sends each prompt greedy (temperature 0, one seed) with logprobs and top_logprobs over "
                       "the chat "
                       "API, and writes <run-dir>/quality/<label>/<prompt id>.json with the generated token ids (where "
                       "the engine names them: llama-server ids, vLLM return_token_ids), the top-k list at every "
                       "position and the prompt's token ids as the engine rendered its chat template (vLLM's reply, "
                       "its /tokenize with messages, or llama-server's /apply-template + /tokenize); then index.json "
                       "with each file's SHA-256 and a quality_trajectory evidence record listing it. A logprob cap "
                       "is read from the engine's 400 message (or k is halved); an engine that refuses logprobs gets "
                       "text-only trajectories. With --local, the same files come from the float32 reference in this "
                       "process (transformers; the embedded GGUF dequantised by default): the baseline of quality "
                       "score --reference local, cached between runs. Prompts are taken in turn from each bucket of "
                       "the set. Files already there from an interrupted run with the same request are kept.",
           example="inferencekit quality trajectory --base-url http://127.0.0.1:8080 --label llama-server --limit 32 "
                   "--run-dir runs/q1",
           args=[*CLIENT_ARGS,
                 Arg("local", "string", "Instead of a server: the in-process float32 reference — 'embedded' (the "
                     "embedded GGUF, dequantised) or a .gguf file or Hugging Face directory."),
                 Arg("label", "string", "Name of this engine/configuration (the folder name; default: the engine name, "
                     "or 'reference' with --local)."),
                 Arg("prompts", "string", "Prompt set: 'dev' or a .jsonl file.", default="dev"),
                 Arg("limit", "integer", "Prompts used, taken in turn from each bucket (0 = all chat prompts).",
                     default=32),
                 Arg("max_tokens", "integer", "Tokens per prompt (default: each prompt's max_tokens, else 256)."),
                 Arg("top_logprobs", "integer", "Alternatives per position (lowered to the engine's cap).", default=20),
                 Arg("seed", "integer", "Seed sent with every request (greedy needs none; some engines use it).",
                     default=0),
                 Arg("concurrency", "integer", "Requests in flight (1 = one at a time; batching can change numerics).",
                     default=1),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_trajectory(call: Call, base_url: str | None = None, model: str | None = None,
                       api_key_env: str | None = None,
                       timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                       local: str | None = None, label: str | None = None, prompts: str = "dev", limit: int = 32,
                       max_tokens: int | None = None, top_logprobs: int = 20, seed: int = 0, concurrency: int = 1,
                       run_dir: str | None = None) -> Outcome:
    if local and base_url:
        raise OpError("give --base-url (an engine) or --local (the in-process reference), not both")
    check_client_args(base_url, api_key_env, timeout)
    if top_logprobs < 1 or limit < 0 or concurrency < 1 or (max_tokens is not None and max_tokens < 1):
        raise OpError("--top-logprobs ≥ 1, --limit ≥ 0, --concurrency ≥ 1 and --max-tokens ≥ 1 are required")
    if local:
        require_reference("--local")
    src = local_source(local) if local else None
    chat_template_kwargs = pinned_template_kwargs(run_dir, chat_template_kwargs)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=TRAJ_FIXED, operation="quality trajectory")
    pset = load_prompt_set(prompts)
    chosen = select_prompts(pset.prompts, limit)
    if not chosen:
        raise OpError(f"prompt set {prompts!r} has no chat prompts")
    if label is not None:
        safe_name(label, "--label")
    run = open_task_run(run_dir, call.argv, call.operation)
    run.pin("chat_template_kwargs", dict(policy.chat_template_kwargs or {}))
    info = {**pset.describe(), "selected": [p.id for p in chosen]}
    s = TrajectorySettings(label="", max_tokens=max_tokens, top_logprobs=top_logprobs, seed=seed,
                           concurrency=concurrency, ctk=policy.chat_template_kwargs, extra=policy.extra,
                           notes=policy.limitations())
    try:
        if src is not None:
            s.label = label or "reference"
            rec = run_local_trajectories(src, run, chosen, s, prompts_info=info, quiet=call.quiet)
        else:
            with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
                s.label = label or ""  # the detected engine's name when not given
                rec = run_engine_trajectories(url, run, chosen, s, api_key_env=api_key_env, timeout=timeout,
                                              model=model, prompts_info=info, quiet=call.quiet)
    except OpError:
        run.discard_if_empty()
        raise
    ok = rec["metrics"][0]["value"]
    payload = {"evidence_id": rec["evidence_id"], "run_dir": str(run.path), "label": s.label,
               "dir": str(run.quality_dir(s.label)), "prompts_ok": ok, "prompts": len(chosen),
               "summary": rec["summary"], "missing": rec["missing"], "limitations": rec["limitations"]}
    verdict = None if ok == len(chosen) else "UNPROVEN"  # a prompt that failed is missing evidence
    return Outcome(payload, verdict, lambda console: render_trajectory(console, rec))


# ---- quality score

def render_score(console: Any, rec: dict[str, Any], report: dict[str, Any]) -> None:
    from rich.table import Table

    def pct(m: dict[str, Any]) -> str:
        if m.get("value") is None:
            return "—"
        lo, hi = m["ci95"]
        return f"{100 * m['value']:.2f}%" + (f" [{100 * lo:.2f}, {100 * hi:.2f}]" if lo is not None else "")

    def num(m: dict[str, Any]) -> str:
        if m.get("value") is None:
            return "—"
        lo, hi = m["ci95"]
        return f"{m['value']:.4f}" + (f" [{lo:.4f}, {hi:.4f}]" if lo is not None else "")

    t = Table("trajectories", "verdict", "top-1 agreement", "KL nats/token", "TV", "ref NLL nats/token", "prompts",
              title=f"quality score vs {report['reference'].get('engine')} (95% CI over prompts)", title_justify="left")
    rows = [(label, b, b["verdict"]["verdict"]) for label, b in report["engines"].items()]
    if report.get("floor"):
        rows.append((f"{report['floor']['label']} (A/A floor)", report["floor"], ""))
    for label, b, verdict in rows:
        a = b["all"]
        t.add_row(label, f"[{verdict_style(verdict)}]{verdict}[/]" if verdict else "", pct(a["top1_agreement"]),
                  num(a["kl_mean"]), num(a["tv_mean"]), num(a["ref_nll_mean"]), f"{b['n_scored']}/{b['n_prompts']}")
    console.print(t)
    for label, b in report["engines"].items():
        console.print(f"{label}: {b['verdict']['reason']}", markup=False, highlight=False)
    print_tail(console, rec, f"verdict: {rec['verdict']}   record: {rec['evidence_id']}  (report: "
                             f"{rec['data']['score_file']})")


@operation(("quality", "score"), "Teacher-force trajectories through a reference: top-1 agreement, KL, TV and NLL "
           "per position bucket against the reference's A/A noise floor.",
           description="Scores every trajectory folder (quality trajectory's output) on a reference model: at each "
                       "generated position the reference's top-k distribution (teacher forcing) gives top-1 agreement "
                       "with the engine's token, KL(reference ‖ engine) and total variation on the two top-k lists "
                       "(cut to the engine's k; see kl_method), and the reference's NLL of the engine's token; the "
                       "first divergence from the reference's greedy path (--baseline). Each is a pooled mean with a "
                       "prompt-level bootstrap CI, overall and per position bucket. The A/A floor is the reference's "
                       "own greedy run (--baseline-repeat, else --baseline) scored the same way; each engine gets "
                       "PASS/FAIL/UNPROVEN from paired bootstrap CIs of engine minus floor against pre-registered "
                       "margins. Integrity (every file against its index, every index against an intact "
                       "quality_trajectory record), coverage, chat-template and prompt-file problems downgrade a PASS "
                       "to UNPROVEN. References: local (float32 transformers in this process; the embedded GGUF "
                       "dequantised by default, or --reference-model PATH), vllm (--reference-url; /v1/completions "
                       "with prompt_logprobs), llama-cpp-python (checked, then refused: its echo lists are one "
                       "position late). Writes quality/score.json and a quality_score record. Exit 0 PASS, 1 FAIL, "
                       "3 UNPROVEN.",
           example="inferencekit quality score runs/q1/quality/llama-server --reference local "
                   "--baseline runs/q1/quality/reference",
           args=[Arg("trajectories", "array", "Trajectory folders (run/quality/<label>), or a run dir / quality folder "
                     "holding them.", required=True, positional=True, metavar="DIR"),
                 Arg("reference", "string", "Which model teacher-forces the trajectories (see above).", default="local",
                     choices=REFERENCE_KINDS),
                 Arg("reference_url", "string", "The reference server (vllm, llama-cpp-python)."),
                 Arg("reference_model", "string", "local: a .gguf file or Hugging Face directory (default: the "
                     "embedded GGUF); vllm: the served model name (default: the first of /v1/models)."),
                 Arg("reference_api_key_env", "string", "NAME of the reference server's API-key variable."),
                 Arg("baseline", "string", "The reference's own greedy trajectories (quality trajectory --local, or "
                     "against the reference server): the first-divergence path, and the A/A floor without "
                     "--baseline-repeat."),
                 Arg("baseline_repeat", "string", "A second greedy run of the reference: the A/A floor, with "
                     "run-to-run variation."),
                 Arg("context", "string", "Prompt ids to teacher-force after: the reference's chat template, or the "
                     "engine's own prompt ids where its trajectory has them (a template difference is then reported, "
                     "not judged).", default="reference", choices=CONTEXTS),
                 Arg("top_k", "integer", "Reference alternatives per position (vLLM caps at --max-logprobs, 20).",
                     default=20),
                 Arg("margin_agreement", "number", "Largest allowed drop in top-1 agreement below the floor "
                     "(fraction).", default=0.02),
                 Arg("margin_kl", "number", "Largest allowed rise in mean KL above the floor (nats/token).",
                     default=0.02),
                 Arg("margin_tv", "number", "Largest allowed rise in mean TV above the floor (without it TV is "
                     "reported, not judged)."),
                 Arg("margin_nll", "number", "Largest allowed rise in reference NLL above the floor (nats/token).",
                     default=0.05),
                 Arg("resamples", "integer", "Bootstrap resamples per confidence interval.", default=2000),
                 Arg("seed", "integer", "Seed of the bootstrap resampling.", default=0),
                 Arg("timeout", "number", "Per-request limit in seconds (HTTP references).", default=600.0),
                 Arg("out", "string", "Report path (default: <run-dir>/quality/score.json).")])
def quality_score(call: Call, trajectories: list[str], reference: str = "local", reference_url: str | None = None,
                  reference_model: str | None = None, reference_api_key_env: str | None = None,
                  baseline: str | None = None, baseline_repeat: str | None = None, context: str = "reference",
                  top_k: int = 20, margin_agreement: float = 0.02, margin_kl: float = 0.02,
                  margin_tv: float | None = None, margin_nll: float = 0.05, resamples: int = 2000, seed: int = 0,
                  timeout: float = 600.0, out: str | None = None) -> Outcome:
    if baseline_repeat and not baseline:
        raise OpError("--baseline-repeat needs --baseline")
    if reference != "local" and not reference_url:
        raise OpError(f"--reference {reference} needs --reference-url")
    if reference == "local":
        require_reference("--reference local")
    check_urls([reference_url])
    read_api_key(reference_api_key_env)
    if top_k < 1 or resamples < 10 or not timeout > 0:
        raise OpError("--top-k ≥ 1, --resamples ≥ 10 and --timeout > 0 are required")
    margins = {"agreement": margin_agreement, "kl": margin_kl, "tv": margin_tv, "nll": margin_nll}
    if any(m is not None and not m >= 0 for m in margins.values()):
        raise OpError("margins must be ≥ 0")
    base_dirs = [Path(p) for p in (baseline, baseline_repeat) if p]
    for b in base_dirs:
        if not (b / "index.json").is_file():
            raise OpError(f"{b}: not a trajectory folder (no index.json)")
    if baseline_repeat and Path(baseline_repeat).resolve() == Path(baseline or "").resolve():
        raise OpError("--baseline-repeat must be a second greedy run of the reference, not --baseline again")
    dirs = [d for d in label_dirs(trajectories) if d.resolve() not in {b.resolve() for b in base_dirs}]
    if not dirs:
        raise OpError("no engine trajectories to score besides the baseline")
    engines = [load_set(d) for d in dirs]
    base = load_set(base_dirs[0]) if baseline else None
    rep = load_set(base_dirs[1]) if baseline_repeat else None
    run_path = run_of(dirs[0])
    run = RunDir.open(run_path) if run_path is not None and (run_path / "run.json").is_file() else None

    async def main() -> dict[str, Any]:
        async with AsyncExitStack() as stack:
            ref: Reference
            if reference == "local":
                from inferencekit.quality.local_model import load_local_model

                ref = LocalReference(load_local_model(local_source(reference_model or "embedded")), k=top_k)
            else:
                client = await stack.enter_async_context(Client(Endpoint.parse(str(reference_url),
                                                                               reference_api_key_env),
                                                                timeout_s=timeout))
                info = await detect_engine(client, reference_model)
                if reference == "llama-cpp-python":
                    await check_echo_reference(client, str(info.model))
                ref = VllmReference(client, str(info.model), k=top_k)
            return await score_sets(ref, engines, base, rep, context=context, margins=margins, resamples=resamples,
                                    seed=seed)

    report = asyncio.run(main())
    out_path = Path(out) if out else (run.quality_file("score.json") if run else Path("quality_score.json"))
    rec = score_record(report, out_path, run, context=context, margins=margins, have_baseline=base is not None)
    payload = {"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "verdicts": report["verdicts"],
               "score_file": str(out_path),
               "engines": {label: {"verdict": b["verdict"]["verdict"], "reason": b["verdict"]["reason"],
                                   "top1_agreement": b["all"]["top1_agreement"], "kl_mean": b["all"]["kl_mean"],
                                   "tv_mean": b["all"]["tv_mean"], "ref_nll_mean": b["all"]["ref_nll_mean"]}
                           for label, b in report["engines"].items()}}
    return Outcome(payload, rec["verdict"], lambda console: render_score(console, rec, report))


# ---- quality gsm8k

def render_gsm8k(console: Any, rec: dict[str, Any]) -> None:
    from rich.table import Table

    d = rec["data"]
    console.print(rec["summary"], markup=False, highlight=False)
    t = Table("answer read by", "replies", caption=d["extraction"], caption_justify="left")
    for k, v in d["extraction_methods"].items():
        t.add_row(k, str(v))
    t.add_row("request failed", str(d["failed"]))
    console.print(t)
    print_tail(console, rec, f"results: {d['run_dir']}/{d['results_file']}   record: {rec['evidence_id']}")


@operation(("quality", "gsm8k"), "GSM8K zero-shot chain of thought at temperature 0: accuracy with a Wilson 95% CI; "
           "--paired-with adds McNemar's exact test.",
           description="Sends each problem of the GSM8K test split (1,319, MIT, shipped with inferencekit; --data for "
                       "another JSONL/Parquet file) as one user turn asking for step-by-step working and a final "
                       "'#### <number>' line, greedy, over the chat API. The answer is the last '#### n', "
                       "else the last "
                       "\\boxed{}, else the last number, compared by numeric value. Writes one file per problem as it "
                       "finishes (an interrupted run resumes), the graded rows, and a quality_task record. "
                       "--paired-with another run (its results file or evidence id) adds McNemar's exact test on the "
                       "problems both answered, and is refused before any request when the dataset, prompt, "
                       "max_tokens, temperature, chat template or backend differ. --concurrency 0 sizes the pool from "
                       "the server (llama.cpp /props total_slots, SGLang /get_server_info) or a timing probe. "
                       "--time-budget-s stops sending once the next problem would end past the budget; the record "
                       "says which subset ran.",
           example="inferencekit quality gsm8k --limit 50 --run-dir runs/g1",
           args=[*CLIENT_ARGS,
                 Arg("label", "string", "Name of this engine/configuration (default: the detected engine's name)."),
                 Arg("limit", "integer", "The first N problems (0 = all of them).", default=0),
                 Arg("data", "string", "A GSM8K-format file instead of the packaged test split: JSONL lines "
                     "{question, answer ending '#### n'} or Parquet with those columns."),
                 Arg("max_tokens", "integer", "Generation budget per problem, in tokens.", default=1024),
                 Arg("concurrency", "integer", "Requests in flight; 0 = from the server's reported capacity, else a "
                     "timing probe (one alone, bursts of 8 then 32), at most 32.", default=0),
                 Arg("time_budget_s", "number", "Wall-clock budget in seconds (the concurrency probe included): no "
                     "problem is sent once it is projected to end past it."),
                 Arg("paired_with", "string", "Another gsm8k run on the same problems (its results .jsonl or evidence "
                     "id): adds McNemar's exact test."),
                 Arg("backend", "string", "builtin (this tool's requests and extraction) or lm-eval "
                     "(lm-evaluation-harness local-chat-completions, offline on the same data file).",
                     default="builtin", choices=("builtin", "lm-eval")),
                 Arg("seed", "integer", "Seed sent with every request.", default=0),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_gsm8k(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                  timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                  label: str | None = None, limit: int = 0, data: str | None = None, max_tokens: int = 1024,
                  concurrency: int = 0, time_budget_s: float | None = None, paired_with: str | None = None,
                  backend: str = "builtin", seed: int = 0, run_dir: str | None = None) -> Outcome:
    t_start = time.monotonic()
    check_client_args(base_url, api_key_env, timeout)
    if limit < 0 or max_tokens < 1 or concurrency < 0:
        raise OpError("--limit ≥ 0, --max-tokens ≥ 1 and --concurrency ≥ 0 (0 = auto) are required")
    if time_budget_s is not None and not time_budget_s > 0:
        raise OpError("--time-budget-s must be a number of seconds above 0")
    if label is not None:
        safe_name(label, "--label")
    chat_template_kwargs = pinned_template_kwargs(run_dir, chat_template_kwargs)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=GSM_FIXED, operation="quality gsm8k")
    extra, ctk = policy.extra, policy.chat_template_kwargs or None
    dataset = load_gsm8k(data)
    items = list(dataset.items[:limit] if limit else dataset.items)
    s = gsm8k_settings(dataset, max_tokens=max_tokens, ctk=ctk, backend=backend, seed=seed)
    if backend == "lm-eval":
        check_lm_eval_request(extra=extra, ctk=ctk, paired_with=paired_with, time_budget_s=time_budget_s)
    other = load_paired_run(paired_with) if paired_with else None
    if other is not None:
        problem = pair_problem(s, other["settings"])
        if problem:
            raise OpError(f"--paired-with {paired_with}: {problem}")
    run = open_task_run(run_dir, call.argv, call.operation)
    run.pin("chat_template_kwargs", dict(policy.chat_template_kwargs or {}))
    deadline = t_start + time_budget_s if time_budget_s else None
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            if backend == "lm-eval":
                rec = run_lm_eval_backend(url, run, dataset, items, s, label=label, model=model,
                                          api_key_env=api_key_env, timeout=timeout, concurrency=concurrency,
                                          extra=extra, quiet=call.quiet, notes=policy.limitations())
            else:
                rec = run_builtin(url, run, dataset, items, s, extra, other, label=label, model=model,
                                   api_key_env=api_key_env, timeout=timeout, concurrency=concurrency,
                                   deadline=deadline, budget=time_budget_s, quiet=call.quiet,
                                   notes=policy.limitations())
    except OpError:
        run.discard_if_empty()
        raise
    d = rec["data"]
    payload = {"evidence_id": rec["evidence_id"], "run_dir": str(run.path), "label": d["label"],
               "results_file": str(run.path / d["results_file"]), "n": d["n"], "correct": d["correct"],
               "failed": d["failed"], "accuracy": d["accuracy"], "ci95": d["ci95"], "paired": d.get("paired"),
               "concurrency": d.get("concurrency"), "time_budget": d.get("time_budget"), "summary": rec["summary"],
               "limitations": rec["limitations"]}
    verdict = "UNPROVEN" if d["failed"] else None  # a failed request is missing evidence, not a wrong answer
    return Outcome(payload, verdict, lambda console: (render_gsm8k if "extraction_methods" in d else _render_plain)(
        console, rec))


def _render_plain(console: Any, rec: dict[str, Any]) -> None:
    console.print(rec["summary"], markup=False, highlight=False)
    print_tail(console, rec, f"record: {rec['evidence_id']}")


# ---- quality niah

def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def render_niah(console: Any, rec: dict[str, Any]) -> None:
    """The summary, a depth × length table of the cells, the limitations, and where everything is."""
    from rich.table import Table

    d = rec["data"]
    console.print(rec["summary"], markup=False, highlight=False)
    lengths = sorted({c["length_tokens"] for c in d["cells"]})
    depths = sorted({c["depth"] for c in d["cells"]})
    cells = {(c["length_tokens"], c["depth"]): c for c in d["cells"]}
    t = Table("depth", *(f"{n} tok" for n in lengths), title="needle depth × target length")
    for dep in depths:
        out = []
        for n in lengths:
            c = cells.get((n, dep))
            if c is None:
                out.append("not run")
                continue
            tok = "sent ? tok" if c["prompt_tokens_mean"] is None else f"sent ≈ {c['prompt_tokens_mean']:.0f} tok"
            fail = f", {c['failed']} failed" if c["failed"] else ""
            out.append(f"{c['hits']}/{c['trials']} = {_pct(c['accuracy'])}{fail}\n"
                       f"CI {_pct(c['ci95'][0])}–{_pct(c['ci95'][1])}\n{tok}")
        t.add_row(f"{dep:g}", *out)
    console.print(t)
    console.print(f"chars per token: {d['chars_per_token']['text']}", markup=False, highlight=False)
    for line in rec["limitations"]:
        console.print(f"limitation: {line}", markup=False, highlight=False)
    sent = d["sent"]
    console.print(f"{sent['sent']} cases in {sent['elapsed_s']} s ({d['reused_replies']} kept from an earlier run)",
                  markup=False, highlight=False)
    console.print(f"heat-map: {d['run_dir']}/{d['heatmap']}\nfolder: {d['run_dir']}/{d['cases_dir']}   "
                  f"record: {rec['evidence_id']}", markup=False, highlight=False)


@operation(("quality", "niah"), "Needle in a haystack: a 7-digit code planted at set depths of filler of set token "
           "lengths, greedy; accuracy per cell with Wilson 95% CIs and an HTML heat-map.",
           description="Builds one haystack per (length, depth, trial): synthetic filler prose sized in characters "
                       "from the engine's own chars per token (its tokenize endpoint on a calibration text; else 4.0 "
                       "assumed, and said so), with one sentence giving a 7-digit code at the chosen depth, then asks "
                       "for the code over the chat API, greedy. A reply counts when it gives the code as a whole "
                       "number. Lengths that cannot fit the server's context (with the instruction, the chat template "
                       "and --max-tokens) are refused before any case is sent. Writes one file per case as it "
                       "finishes (an interrupted run with the same requests keeps them; a failed request is recorded "
                       "and counts as a miss), the scored grid with the prompt_tokens the server reported per cell, "
                       "heatmap.html (an inline-SVG heat-map and a table) and a quality_task record.",
           example="inferencekit quality niah --lengths 512,1024,1536 --depths 0.1,0.5,0.9 --trials 3 "
                   "--run-dir runs/n1",
           args=[*CLIENT_ARGS,
                 Arg("label", "string", "Name of this engine/configuration (default: the detected engine's name)."),
                 Arg("lengths", "array", "Target haystack lengths in tokens (each at least 64), comma-separated; "
                     "the instruction, question and chat template come on top.", items="integer",
                     default=(512, 1024, 1536)),
                 Arg("depths", "array", "Needle depths as fractions of the haystack (0 = start, 1 = end), "
                     "comma-separated.", items="number", default=(0.1, 0.5, 0.9)),
                 Arg("trials", "integer", "Haystacks per (length, depth) cell, each with its own code and filler.",
                     default=3),
                 Arg("max_tokens", "integer", "Generation budget per case, in tokens (the code needs about 4).",
                     default=32),
                 Arg("concurrency", "integer", "Requests in flight (1 = one at a time; results stay in case order).",
                     default=1),
                 Arg("seed", "integer", "Seed of the haystacks and codes, also sent with every request.", default=0),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_niah(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                 timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                 label: str | None = None, lengths: list[int] | None = None, depths: list[float] | None = None,
                 trials: int = 3, max_tokens: int = 32, concurrency: int = 1, seed: int = 0,
                 run_dir: str | None = None) -> Outcome:
    check_client_args(base_url, api_key_env, timeout)
    if lengths == [] or depths == []:
        raise OpError("--lengths and --depths need at least one value each (comma-separated)")
    lengths = list(lengths or (512, 1024, 1536))
    depths = [float(d) for d in (depths or (0.1, 0.5, 0.9))]
    if max_tokens < 1 or concurrency < 1:
        raise OpError("--max-tokens ≥ 1 and --concurrency ≥ 1 are required")
    try:
        niah.plan_grid(lengths, depths, trials, seed, niah.ASSUMED_CHARS_PER_TOKEN)
    except ValueError as e:
        raise OpError(str(e)) from None
    if label is not None:
        safe_name(label, "--label")
    chat_template_kwargs = pinned_template_kwargs(run_dir, chat_template_kwargs)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=NIAH_FIXED, operation="quality niah")
    s = {"lengths": lengths, "depths": depths, "trials": trials, "max_tokens": max_tokens, "seed": seed,
         "concurrency": concurrency, "temperature": 0.0,
         "chat_template_kwargs": policy.chat_template_kwargs or None}
    if base_url is None:  # the embedded engine's context is known before it starts
        check_fit(lengths, max_tokens, EMBEDDED_CONTEXT, niah.ASSUMED_CHARS_PER_TOKEN,
                  f"the embedded engine's {EMBEDDED_N_CTX_FLAG}")
    run = open_task_run(run_dir, call.argv, call.operation)
    run.pin("chat_template_kwargs", dict(policy.chat_template_kwargs or {}))
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, eng):
            rec = run_niah(url, eng, run, s, policy.extra, label=label, model=model, api_key_env=api_key_env,
                           timeout=timeout, quiet=call.quiet, notes=policy.limitations())
    except OpError:
        run.discard_if_empty()
        raise
    d = rec["data"]
    payload = {"evidence_id": rec["evidence_id"], "run_dir": str(run.path), "label": d["label"],
               **{k: str(run.path / d[k]) for k in ("results_file", "heatmap", "cases_dir")},
               **{k: d[k] for k in ("n", "hits", "failed", "accuracy", "ci95", "cells", "chars_per_token",
                                    "reused_replies")},
               "elapsed_s": d["sent"]["elapsed_s"], "summary": rec["summary"], "limitations": rec["limitations"]}
    verdict = "UNPROVEN" if d["failed"] else None  # a failed request is missing evidence, not a miss of the model
    return Outcome(payload, verdict, lambda console: render_niah(console, rec))


# ---- quality sampling

def _settings(extra: dict[str, Any], temperature: float | None, top_k: int | None, top_p: float | None,
              min_p: float | None, omit: list[str]) -> dict[str, Any]:
    flags = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    unknown = sorted(set(omit) - set(SAMPLING_FIELDS))
    if unknown:
        raise OpError(f"--omit names {', '.join(unknown)}; it takes {', '.join(SAMPLING_FIELDS)}")
    if "temperature" in omit:
        raise OpError("--omit temperature: the check needs the temperature it is asked with")
    both = sorted(k for k in omit if flags.get(k) is not None)
    if both:
        raise OpError(f"--{both[0].replace('_', '-')} is given and also named in --omit: send it or omit it, not both")
    send = {**DEFAULT_SETTINGS, **{k: v for k, v in extra.items()},
            **{k: v for k, v in flags.items() if v is not None}}
    for k in omit:
        send.pop(k, None)
    try:
        sampling_settings(send)
    except ValueError as e:
        raise OpError(f"sampling settings: {e}") from None
    if send["temperature"] <= 0:
        raise OpError("--temperature must be above 0: at temperature 0 there is no distribution to sample")
    return send


def render_sampling(console: Any, rec: dict[str, Any]) -> None:
    from rich.table import Table

    d = rec["data"]
    console.print(rec["summary"], markup=False, highlight=False)
    t = Table("check", "verdict", "figures")
    c = d["checks"]
    tv, oos, greedy = c["excess_tv"], c["out_of_support"], c["greedy_only"]
    t.add_row("excess TV", tv["verdict"], tv["reason"])
    t.add_row("out of support", oos["verdict"], f"{oos['draws']} of {oos['of']} draws outside the kept tokens")
    t.add_row("greedy only", greedy["verdict"],
              f"{greedy['greedy_draws']} of {greedy['draws']} draws were the top token")
    t.add_row("settings", c["settings"]["verdict"], ", ".join(c["settings"]["unmodelled"]) or "all modelled")
    console.print(t)
    if d["dropped"]:
        console.print("not judged for TV: "
                      + "; ".join(f"{n} {k} ({d['dropped_why'][k]})" for k, n in d["dropped"].items()),
                      markup=False, highlight=False)
    console.print(f"verdict: {d['verdict']} — {d['reason']}", markup=False, highlight=False)
    print_tail(console, rec, f"results: {d['run_dir']}/{d['results_file']}   record: {rec['evidence_id']}")


@operation(("quality", "sampling"), "Sampler check: do the engine's seeded draws follow its own first-token logprobs "
           "under the sampling settings sent?",
           description="Per prompt: the top-20 first-token log-probabilities (asked before and after the draws, to "
                       "see they are stable), then S draws with seeds 0..S-1 at max_tokens 1 with the sampling "
                       "settings. The distribution those settings imply (temperature, top_k, top_p, min_p, under "
                       "every engine's filter order; prompts whose kept set is ambiguous are not judged) is compared "
                       "with the draws: mean excess TV (observed minus its exact expectation under correct sampling) "
                       "with a bootstrap 95% CI over prompts against --margin, draws outside the kept tokens (Wilson "
                       "bound), and an exact test that not every draw was the top token. A request field the check "
                       "does not model makes it UNPROVEN; a sampling field left unsent is named (the engine may apply "
                       "its own default). Sends temperature 1, top_k 20, top_p 1, min_p 0 unless told otherwise. "
                       "--baseline-url checks a second server the same way. The draws go in four rounds, judged "
                       "after each, and stop once the verdict is decided (docs/quality-tasks.md, 'Sequential "
                       "sampler check'); --fixed takes all S.",
           example="inferencekit quality sampling --n-prompts 16 --seeds 256 --run-dir runs/s1",
           args=[*CLIENT_ARGS,
                 Arg("label", "string", "Name of the server checked (default: the detected engine's name)."),
                 Arg("prompts", "string", "Prompt set: 'dev' or a .jsonl file.", default="dev"),
                 Arg("n_prompts", "integer", f"Prompts, taken in turn from each bucket ({MIN_PROMPTS} informative ones "
                     "are needed for a verdict).", default=16),
                 Arg("seeds", "integer", "Draws per prompt (seeds 0..S-1).", default=256),
                 Arg("temperature", "number", "Sampling temperature sent (default 1)."),
                 Arg("top_k", "integer", "top_k sent (default 20: a kept set the top-20 list provably holds)."),
                 Arg("top_p", "number", "top_p sent (default 1)."),
                 Arg("min_p", "number", "min_p sent (default 0)."),
                 Arg("omit", "array", "Sampling fields not to send (top_k, top_p, min_p), to see an engine's own "
                     "defaults at work.", items="string"),
                 Arg("margin", "number", "Pre-registered margin on the mean excess TV (probability mass).",
                     default=0.02),
                 Arg("resamples", "integer", "Bootstrap resamples over prompts.", default=10000),
                 Arg("bootstrap_seed", "integer", "Seed of the bootstrap's generator.", default=0),
                 Arg("concurrency", "integer", "Requests in flight (1: batching changes an engine's logits).",
                     default=1),
                 Arg("baseline_url", "string", "A second server checked the same way after the first (information: "
                     "the record's verdict is the first server's)."),
                 Arg("baseline_model", "string", "Model name on the baseline server (default: --model)."),
                 Arg("baseline_api_key_env", "string", "NAME of the environment variable with the baseline's API key."),
                 FIXED_ARG,
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_sampling(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                     timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                     label: str | None = None, prompts: str = "dev", n_prompts: int = 16, seeds: int = 256,
                     temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                     min_p: float | None = None, omit: list[str] | None = None, margin: float = 0.02,
                     resamples: int = 10000, bootstrap_seed: int = 0, concurrency: int = 1,
                     baseline_url: str | None = None, baseline_model: str | None = None,
                     baseline_api_key_env: str | None = None, fixed: bool = False, run_dir: str | None = None
                     ) -> Outcome:
    check_urls([baseline_url])
    check_client_args(base_url, api_key_env, timeout)
    read_api_key(baseline_api_key_env)
    for flag, value, low in (("--n-prompts", n_prompts, 2), ("--seeds", seeds, 2), ("--concurrency", concurrency, 1),
                             ("--resamples", resamples, 1)):
        if value < low:
            raise OpError(f"{flag} must be at least {low}, got {value}")
    if not 0 < margin <= 0.5:
        raise OpError(f"--margin must lie in (0, 0.5] (probability mass; TV is at most 1, so a wider margin "
                      f"passes anything), got {margin:g}")
    if label is not None:
        safe_name(label, "--label")
    chat_template_kwargs = pinned_template_kwargs(run_dir, chat_template_kwargs)
    policy = body_policy(extra_body, chat_template_kwargs, fixed=OWN_FIELDS, operation="quality sampling")
    send = _settings(policy.extra, temperature, top_k, top_p, min_p, list(omit or []))
    pset = load_prompt_set(prompts)
    chosen = select_prompts(pset.prompts, n_prompts)
    if len(chosen) < 2:
        raise OpError(f"prompt set {prompts!r} has {len(chosen)} chat prompt(s); the check needs at least 2")
    plan = SamplingPlan(send=send, seeds=seeds, concurrency=concurrency, ctk=policy.chat_template_kwargs,
                        notes=policy.limitations(), looks=() if fixed else draw_looks(seeds))
    run = open_task_run(run_dir, call.argv, call.operation)
    run.pin("chat_template_kwargs", dict(policy.chat_template_kwargs or {}))
    info = {**pset.describe(), "selected": [p.id for p in chosen]}
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            rec = run_sampling_check(url, run, chosen, plan, label=label, model=model, api_key_env=api_key_env,
                                     timeout=timeout, margin=margin, resamples=resamples, bootstrap_seed=bootstrap_seed,
                                     baseline_url=baseline_url, baseline_model=baseline_model,
                                     baseline_api_key_env=baseline_api_key_env, prompts_info=info, quiet=call.quiet)
    except OpError:
        run.discard_if_empty()
        raise
    d = rec["data"]
    payload = {"evidence_id": rec["evidence_id"], "run_dir": str(run.path), "label": d["label"],
               "verdict": d["verdict"], "reason": d["reason"], "sent": d["sent"], "checks": d["checks"],
               "dropped": d["dropped"],
               "n_informative": d["n_informative"], "seed_check": d["seed_check"], "not_sent": d["not_sent"],
               "results_file": str(run.path / d["results_file"]), "baseline": d["baseline"],
               "requests": d["requests"], "sequential": d.get("sequential"), "seed_stage": d.get("seed_stage"),
               "summary": rec["summary"], "limitations": rec["limitations"]}
    return Outcome(payload, d["verdict"], lambda console: render_sampling(console, rec))
