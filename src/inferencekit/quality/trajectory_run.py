"""``inferencekit quality trajectory``: greedy trajectories from an engine, or from the in-process float32 reference."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.prompts import Prompt
from inferencekit.engines.model import embedded_gguf
from inferencekit.engines.recipes import cache_root
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.evidence.canonical import canonical_json, sha256_file, sha256_hex
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, collect_local, write_index
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, read_json, write_json

__all__ = ["trajectory_record", "run_local_trajectories", "run_engine_trajectories",
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
                      model: str, s: TrajectorySettings, prompts: dict[str, Any], state: dict[str, Any]
                      ) -> dict[str, Any]:
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
        lim.append(f"{state['resumed']} trajectories kept from an earlier run of the same request "
                   f"({state.get('source') or 'resume'})")
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
        artifacts=arts, missing=missing, limitations=[*lim, *s.notes],
        data={"run_dir": str(run.path.resolve()), "label": label, "dir": f"quality/{label}",
              "top_logprobs_requested": s.top_logprobs, "top_logprobs_returned_min": k_min, "token_id_methods": methods,
              "truncated_at_max_tokens": sum(1 for r in ok if r["finish_reason"] == "length"),
              "chat_template_kwargs": s.ctk or None, "logprobs_refused": state.get("refused"),
              "cap_errors": state.get("cap_errors") or [], "failed": {r["id"]: r["error"] for r in failed},
              "prompt_ids_sources": sorted({str(r["prompt_ids"]) for r in ok if r.get("prompt_ids")}),
              # refused --extra-body fields changed what was sent: verify --strict does not let a PASS rest on them
              "fallbacks": list(s.notes)})
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
                rows, state = await collect_engine(client, info, prompts, run.quality_dir(s.label), s,
                                                   on_done=lambda r: bar.on_done("t", "error" not in r))
            return rows, state, info

    rows, state, info = asyncio.run(main())
    out_dir = run.quality_dir(s.label)
    write_index(out_dir, label=s.label, model=str(info.model), engine=info.engine,
                prompts_sha256=prompts_info["sha256"], rows=rows)
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

    out_dir = run.quality_dir(s.label)
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


