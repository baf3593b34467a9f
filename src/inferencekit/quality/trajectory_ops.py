"""``inferencekit quality trajectory``: greedy trajectories from an engine, or from the in-process float32 reference."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.engines.model import embedded_gguf
from inferencekit.engines.recipes import cache_root
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.evidence.canonical import canonical_json, sha256_file, sha256_hex
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, split_extra_body, template_kwargs
from inferencekit.quality.trajectory import (TrajectorySettings, collect_engine, collect_local, select_prompts,
                                             write_index)
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, read_json, safe_name, write_json

__all__ = ["quality_trajectory", "trajectory_record", "run_local_trajectories", "run_engine_trajectories",
           "local_source"]

# Fields a trajectory request sets itself: --extra-body may not override them.
TRAJ_FIXED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "logprobs",
              "top_logprobs", "stream", "stream_options", "n", "return_token_ids", "return_tokens_as_token_ids"}


def local_source(spec: str) -> Path:
    """``embedded`` → the embedded GGUF; else a path (a ``.gguf`` file or a Hugging Face directory).

    Raises:
        OpError: the path does not exist.
    """
    p = embedded_gguf() if spec == "embedded" else Path(spec)
    if not p.exists():
        raise OpError(f"--local {spec}: no such file or directory")
    return p


def trajectory_record(run: RunDir, out_dir: Path, rows: list[dict[str, Any]], *, label: str, engine: dict[str, Any],
                      model: str, s: TrajectorySettings, prompts: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The ``quality_trajectory`` record: the index (and each trajectory file) by SHA-256, what was captured and
    what is missing. Saved to the store and the run dir."""
    ok = [r for r in rows if "error" not in r]
    failed = [r for r in rows if "error" in r]
    text_only = [r for r in ok if r["method"] == "text"]
    with_lists = [r for r in ok if r["method"] != "text"]
    k_min = min((r["k"] for r in with_lists), default=0)
    methods = sorted({str(r["method"]) for r in ok})
    tokens = sum(r["tokens"] for r in ok)
    missing, lim = [], []
    if failed:
        missing.append("trajectories")
        lim.append(f"{len(failed)}/{len(rows)} prompts failed (data.failed has each error)")
    if text_only:
        missing.append("logprobs")
        why = f"it refused them: {state['refused']}" if state.get("refused") else "none in its replies"
        lim.append(f"no logprobs in {len(text_only)} of {len(ok)} replies ({why}): those prompts can be scored for "
                   "top-1 agreement and NLL only, from the reference's reading of their text; KL and TV need the "
                   "engine's own lists")
    if "strings" in methods:
        lim.append("logprob entries name token strings, not ids (llama-cpp-python): the text is re-tokenized for "
                   "scoring — agreement and NLL only — and a re-tokenization need not match the tokens sampled")
    if with_lists and k_min < s.top_logprobs:
        lim.append(f"each position lists {k_min} alternatives, not the {s.top_logprobs} asked (the engine's cap): KL "
                   f"will be taken on top-{k_min} lists on both sides, where less of a divergence shows")
    no_prompt_ids = [r["id"] for r in ok if not r.get("prompt_ids")]
    if no_prompt_ids:
        lim.append(f"{len(no_prompt_ids)}/{len(ok)} prompts without the engine's prompt token ids (it shows none): the "
                   "chat template is checked by prompt token count only")
    if state.get("resumed"):
        lim.append(f"{state['resumed']} trajectories kept from an earlier run of the same request ({state.get('source') or 'resume'})")
    index_path = out_dir / "index.json"
    arts = [artifact(index_path, run.path, "trajectory_index")] + [
        artifact(out_dir / r["file"], run.path, "trajectory") for r in ok]
    what = (f"{tokens} tokens, top-{k_min} logprobs, token ids via {'/'.join(methods)}" if with_lists else
            f"{sum(r['chars'] for r in ok)} characters of text only (no logprobs)")
    rec = build_record(
        kind="quality_trajectory", claim_class="observed",
        summary=f"{label}: greedy trajectories for {len(ok)}/{len(rows)} prompts, {what}",
        identity={"engine": engine, "model": {"id": model},
                  "workload": {"prompts": prompts, "max_tokens": s.max_tokens, "top_logprobs": s.top_logprobs,
                               "seed": s.seed, "concurrency": s.concurrency}},
        metrics=[{"name": "prompts_ok", "value": len(ok), "unit": "prompts", "stat": "count", "n": len(rows)},
                 {"name": "generated_tokens", "value": tokens, "unit": "tokens", "stat": "sum", "n": len(ok)},
                 {"name": "top_logprobs_returned", "value": k_min, "unit": "tokens", "stat": "min",
                  "n": len(with_lists)},
                 {"name": "text_only_prompts", "value": len(text_only), "unit": "prompts", "stat": "count",
                  "n": len(ok)}],
        artifacts=arts, missing=missing, limitations=lim,
        data={"run_dir": str(run.path.resolve()), "label": label, "dir": f"quality/{label}",
              "top_logprobs_requested": s.top_logprobs, "top_logprobs_returned_min": k_min, "token_id_methods": methods,
              "truncated_at_max_tokens": sum(1 for r in ok if r["finish_reason"] == "length"),
              "chat_template_kwargs": s.ctk or None, "logprobs_refused": state.get("refused"),
              "cap_errors": state.get("cap_errors") or [], "failed": {r["id"]: r["error"] for r in failed},
              "prompt_ids_sources": sorted({str(r["prompt_ids"]) for r in ok if r.get("prompt_ids")})})
    save_record(rec, run)
    return rec


def run_engine_trajectories(url: str, run: RunDir, prompts: list[Prompt], s: TrajectorySettings, *,
                            api_key_env: str | None, timeout: float, model: str | None, prompts_info: dict[str, Any],
                            quiet: bool) -> dict[str, Any]:
    """Trajectories from the engine at ``url`` into ``run/quality/<label>/`` (an empty ``s.label`` becomes the
    detected engine's name); returns the record."""

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
        async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
            info = await detect_engine(client, model)
            s.label = s.label or info.engine
            with ProgressBar(quiet) as bar:
                bar.on_level(f"trajectories ({s.label})", len(prompts))
                rows, state = await collect_engine(client, info, prompts, run.path / "quality" / s.label, s,
                                                   on_done=lambda r: bar.on_done("t", "error" not in r))
            return rows, state, info

    rows, state, info = asyncio.run(main())
    out_dir = run.path / "quality" / s.label
    write_index(out_dir, label=s.label, model=str(info.model), engine=info.engine, prompts_sha256=prompts_info["sha256"],
                rows=rows)
    return trajectory_record(run, out_dir, rows, label=s.label, engine=info.identity(), model=str(info.model), s=s,
                             prompts=prompts_info, state=state)


def _cache_key(source: Path, prompts: list[Prompt], s: TrajectorySettings, versions: dict[str, Any]) -> str:
    weights = source if source.is_file() else source / "model.safetensors"
    ident = {"weights": sha256_file(weights) if weights.is_file() else str(source), "versions": versions,
             "prompts": [[p.id, list(p.messages or ()), s.tokens_for(p)] for p in prompts],
             "top_logprobs": s.top_logprobs, "ctk": s.ctk}
    return sha256_hex(canonical_json(ident))[:24]


def run_local_trajectories(source: Path, run: RunDir, prompts: list[Prompt], s: TrajectorySettings, *,
                           prompts_info: dict[str, Any], quiet: bool, use_cache: bool = True) -> dict[str, Any]:
    """The in-process float32 reference's greedy trajectories into ``run/quality/<label>/``; returns the record.

    They are deterministic for one model file, prompt list, settings and library versions, so they are kept in
    ``$INFERENCEKIT_CACHE/quality-baselines/<key>/`` and copied from there when asked again (a fresh record
    says so)."""
    from inferencekit.quality.local_model import load_local_model

    out_dir = run.path / "quality" / s.label
    model = load_local_model(source)
    cache = cache_root() / "quality-baselines" / _cache_key(source, prompts, s, model.describe()["versions"])
    reused = 0
    if use_cache and cache.is_dir():
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in cache.glob("*.json"):
            doc = read_json(f)
            if isinstance(doc, dict):
                write_json(out_dir / f.name, {**doc, "label": s.label})
                reused += 1
    with ProgressBar(quiet) as bar:
        bar.on_level(f"reference trajectories ({s.label}, float32 in-process)", len(prompts))
        rows = collect_local(model, prompts, out_dir, s, on_done=lambda r: bar.on_done("t", "error" not in r))
    if use_cache:
        cache.mkdir(parents=True, exist_ok=True)
        for r in rows:
            if "error" not in r and not (cache / r["file"]).is_file():
                shutil.copyfile(out_dir / r["file"], cache / r["file"])
    write_index(out_dir, label=s.label, model=model.name, engine="local-transformers",
                prompts_sha256=prompts_info["sha256"], rows=rows)
    state = {"resumed": reused, "source": f"cached in {cache}" if reused else None}
    return trajectory_record(run, out_dir, rows, label=s.label, engine=model.describe(), model=model.name, s=s,
                             prompts=prompts_info, state=state)


def print_tail(console: Any, rec: dict[str, Any], where: str) -> None:
    """A record's limitations, one per line, then ``where`` (plain text: no rich markup)."""
    for line in rec["limitations"]:
        console.print(f"limitation: {line}", markup=False, highlight=False)
    console.print(where, markup=False, highlight=False)


def render_trajectory(console: Any, rec: dict[str, Any]) -> None:
    console.print(rec["summary"], markup=False, highlight=False)
    print_tail(console, rec, f"folder: {rec['data']['run_dir']}/{rec['data']['dir']}   record: {rec['evidence_id']}")


@operation(("quality", "trajectory"), "Greedy trajectories with top-k logprobs and token ids, one file per prompt "
           "(the input of quality score).",
           description="Sends each prompt greedy (temperature 0, one seed) with logprobs and top_logprobs over the chat "
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
                 Arg("seed", "integer", "Seed sent with every request (greedy needs none; some engines use it).", default=0),
                 Arg("concurrency", "integer", "Requests in flight (1 = one at a time; batching can change numerics).",
                     default=1),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_trajectory(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                       timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                       local: str | None = None, label: str | None = None, prompts: str = "dev", limit: int = 32,
                       max_tokens: int | None = None, top_logprobs: int = 20, seed: int = 0, concurrency: int = 1,
                       run_dir: str | None = None) -> Outcome:
    if local and base_url:
        raise OpError("give --base-url (an engine) or --local (the in-process reference), not both")
    if base_url:
        normalize_base_url(base_url)
    read_api_key(api_key_env)
    check_client_args(timeout)
    if top_logprobs < 1 or limit < 0 or concurrency < 1 or (max_tokens is not None and max_tokens < 1):
        raise OpError("--top-logprobs ≥ 1, --limit ≥ 0, --concurrency ≥ 1 and --max-tokens ≥ 1 are required")
    src = local_source(local) if local else None
    extra_all = parse_json_object(extra_body, "--extra-body")
    extra, refused = split_extra_body(extra_all, TRAJ_FIXED)
    if refused:
        raise OpError(f"--extra-body may not set {', '.join(refused)}: quality trajectory sets them itself")
    pset = load_prompt_set(prompts)
    chosen = select_prompts(pset.prompts, limit)
    if not chosen:
        raise OpError(f"prompt set {prompts!r} has no chat prompts")
    if label is not None:
        safe_name(label, "--label")
    existing = bool(run_dir) and (Path(run_dir) / "run.json").is_file()
    run = RunDir.open(run_dir) if existing else RunDir.create(run_dir)
    if not existing:
        run.update_run(command=list(call.argv), operation=call.operation)
    info = {**pset.describe(), "selected": [p.id for p in chosen]}
    s = TrajectorySettings(label="", max_tokens=max_tokens, top_logprobs=top_logprobs, seed=seed,
                           concurrency=concurrency, ctk=template_kwargs(extra_all, chat_template_kwargs), extra=extra)
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
               "dir": str(run.path / "quality" / s.label), "prompts_ok": ok, "prompts": len(chosen),
               "summary": rec["summary"], "missing": rec["missing"], "limitations": rec["limitations"]}
    verdict = None if ok == len(chosen) else "UNPROVEN"  # a prompt that failed is missing evidence
    return Outcome(payload, verdict, lambda console: render_trajectory(console, rec))
