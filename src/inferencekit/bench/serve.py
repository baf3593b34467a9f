"""``bench serve``: load at several levels, every request on disk, one ``bench`` evidence record.

Flow: detect the engine (an unreachable URL is an OpError before anything is sent) → pin the engine
identity, model and chat_template_kwargs in run.json → warm-up (not counted) → each level, its
replies written as they end → re-tokenized counts (engine tokenizer, off the timing path) →
metrics from the files → record. ``--resume RUN_DIR`` replays the stored settings: finished levels
are kept; a level that was interrupted, or lost requests to a dead server (status 0), is moved to
``superseded/<n>/`` and run again whole (a level must not mix two engine lifetimes, and an open-loop
schedule cannot restart half-way).
"""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.reply import is_ok
from inferencekit.api.tokenize import TokenizeError, Tokenizer, choose_tokenizer
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.journal import materialise
from inferencekit.bench.kat import KAT_ALONE, KAT_LOAD, heaviest_level, judge_kat, kat_probes, read_kat
from inferencekit.bench.manifest import METRICS_MANIFEST
from inferencekit.bench.metrics import level_metrics
from inferencekit.bench.pace import CLIENT_FILE
from inferencekit.bench.pace_judge import judge_client_pace
from inferencekit.bench.plan import LevelSpec, PlannedRequest, Planner, request_body
from inferencekit.bench.runner import LevelOutcome, LoadRunner
from inferencekit.bench.split import Share, split_level
from inferencekit.bench.workers import ProcessPool, WorkerTask, run_level_split
from inferencekit.data.prompts import Prompt
from inferencekit.evidence import artifact, build_record, metric, save_record
from inferencekit.gates.result import Gate
from inferencekit.stats import combine_claims
from inferencekit.rundir import RunDir, read_json, write_json

__all__ = ["run_bench", "load_level_replies", "bench_record"]

Progress = Callable[[str, bool], None]


def load_level_replies(run: RunDir, engine: str, label: str) -> list[dict[str, Any]]:
    """Reply dicts of one level, each with ``_key`` (file stem) and ``_path`` added."""
    out = []
    for p in run.replies(engine, label):
        r = read_json(p)
        if isinstance(r, dict):
            out.append({**r, "_key": p.stem, "_path": str(p)})
    return out


def _supersede(run: RunDir, engine: str, label: str) -> str | None:
    """Move an interrupted level's files to ``superseded/<n>/``; returns the new folder (None if nothing)."""
    moved = None
    root = run.path / "superseded"
    n = len(list(root.iterdir())) + 1 if root.is_dir() else 1
    for kind in ("inputs", "outputs"):
        src = run.level_dir(kind, engine, label)
        if src.exists():
            dst = root / str(n) / kind / engine / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(src), str(dst))
            moved = str(root / str(n))
    return moved


def _used_keys(run: RunDir, engine: str) -> list[str]:
    """File stems of every request already sent in this run (superseded ones too)."""
    stems = [p.stem for p in (run.path / "outputs" / engine).glob("**/*.json")] if (run.path / "outputs").is_dir() else []
    sup = run.path / "superseded"
    if sup.is_dir():
        stems += [p.stem for p in sup.glob(f"*/outputs/{engine}/**/*.json")]
    return [s for s in stems if s != "retokenized"]


async def _retokenize(tok: Tokenizer, replies: Sequence[dict[str, Any]], limit: int = 4) -> dict[str, int]:
    sem = asyncio.Semaphore(limit)
    out: dict[str, int] = {}

    async def one(r: dict[str, Any]) -> None:
        async with sem:
            try:
                out[r["_key"]] = len(await tok.encode(r.get("text", "") + r.get("reasoning", "")))
            except TokenizeError:
                pass

    await asyncio.gather(*(one(r) for r in replies if is_ok(r)))
    return out


def hidden_probes_by_level(cfg: ServeConfig, info: EngineInfo, labels: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """``bench serve --probes``: the hidden-probe groups (from the packaged dev prompts, tagged at random with a
    seed derived from the run's), dealt to the levels round robin, one group at a time."""
    from inferencekit.data.prompts import load_prompt_set
    from inferencekit.gates.probe_plan import load_probe_bodies, top_k_off

    probes = load_probe_bodies(list(load_prompt_set("dev").prompts), seed=random.Random(f"{cfg.seed}:probes").getrandbits(62),
                               model=str(info.model), max_tokens=cfg.max_tokens or 64, top_k_off=top_k_off(info.engine),
                               sampling_prompts=4, extra=cfg.extra_body, ctk=cfg.chat_template_kwargs,
                               neutral=info.dialect.neutral_sampling)
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in probes:
        groups.setdefault(p["key"], []).append(p)
    out: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    for i, group in enumerate(groups.values()):
        out[labels[i % len(labels)]].extend(group)
    return out


def _fixed_fields(cfg: ServeConfig, info: EngineInfo) -> dict[str, Any]:
    fixed: dict[str, Any] = {"temperature": cfg.temperature}
    if cfg.ignore_eos:
        fixed["ignore_eos"] = True
    if cfg.count_tokens:
        fixed.update(info.dialect.count_fields)
    return fixed


async def run_bench(cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir, prompts: Sequence[Prompt], *,
                    on_done: Progress | None = None, on_level: Callable[[str, int], None] | None = None,
                    resume: bool = False) -> dict[str, Any]:
    """Run every level of ``cfg`` into ``run`` and return the ``bench`` record (saved).

    Args:
        prompts: the resolved prompt pool (dataset already loaded/built).
        on_done: progress callback per finished request ``(level, ok)``.
        on_level: called with ``(label, planned requests or 0 for duration mode)`` as each level starts.
        resume: keep finished levels already on disk.
    """
    engine = cfg.engine_label or info.engine
    fixed = _fixed_fields(cfg, info)
    optional = ("stream_options", *(k for k in info.dialect.count_fields if k in fixed))

    body_kw = {"model": str(info.model), "max_tokens": cfg.max_tokens, "extra": cfg.extra_body, "fixed": fixed,
               "chat_template_kwargs": cfg.chat_template_kwargs}

    def body_for(req: PlannedRequest) -> dict[str, Any]:
        return request_body(req, **body_kw)

    planner = Planner(prompts, cfg.seed)
    if resume:
        for journal in (run.path / "outputs" / engine).glob("load-*/journal*.jsonl"):
            # a client that died mid-level left its finished exchanges here: recover them as files
            list(materialise(run, engine, journal.parent.name.removeprefix("load-"), journal))
        planner.restore(_used_keys(run, engine))
    runner = LoadRunner(client, run, engine, body_for, optional=optional, on_done=on_done)
    if cfg.probes:
        runner.probes = hidden_probes_by_level(cfg, info, [lv.label for lv in cfg.levels])
    # the client processes first: a Ray cluster that cannot be reached (or is too small) stops the run before
    # anything is sent
    pool = open_pool(cfg) if cfg.workers > 1 or cfg.ray is not None else None
    try:
        return await _run_with_pool(cfg, client, info, run, prompts, engine, fixed, optional, body_kw, planner,
                                    runner, pool, on_done, on_level, resume)
    finally:
        if pool is not None:
            pool.close()


async def _run_with_pool(cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir, prompts: Sequence[Prompt],
                         engine: str, fixed: dict[str, Any], optional: tuple[str, ...], body_kw: dict[str, Any],
                         planner: Planner, runner: LoadRunner, pool: Any, on_done: Progress | None,
                         on_level: Callable[[str, int], None] | None, resume: bool) -> dict[str, Any]:
    state = run.read_run().get("bench_state") or {"levels": {}, "warmup_done": False, "superseded": []}
    if not state.get("warmup_done") and cfg.warmup > 0:
        if on_level:
            on_level("warmup", cfg.warmup)
        await runner.warmup(planner, cfg.warmup)
    state["warmup_done"] = True
    run.update_run(bench_state=state)
    if cfg.kat:
        await _known_answers_alone(cfg, info, runner, on_level)
    ran: list[str] = []
    for spec in cfg.levels:
        st = state["levels"].get(spec.label, {})
        if st.get("state") == "done" and not any(r.get("status") == 0 for r in
                                                  load_level_replies(run, engine, spec.label)):
            continue
        if st or run.level_dir("outputs", engine, spec.label).exists():
            moved = _supersede(run, engine, spec.label)
            if moved:
                state["superseded"].append({"level": spec.label, "to": moved})
        state["levels"][spec.label] = {"state": "running", "attempt": int(st.get("attempt", 0)) + 1}
        run.update_run(bench_state=state)
        if on_level:
            on_level(spec.label, cfg.num_prompts if cfg.duration_s is None else 0)
        seed = random.Random(f"{cfg.seed}:{spec.label}:{state['levels'][spec.label]['attempt']}").getrandbits(32)
        n_req = None if cfg.duration_s else cfg.num_prompts
        if pool is None:
            outcome = await runner.run_level(spec, planner, num_requests=n_req, duration_s=cfg.duration_s, seed=seed)
        else:
            outcome = await _split_level(pool, cfg, client, run, engine, spec, planner, runner, body_kw, optional,
                                         prompts, n_req, seed, on_done)
        state["levels"][spec.label].update(state="done", sent=outcome.sent, ok=outcome.ok, failed=outcome.failed,
                                           wall_s=round(outcome.wall_s, 3))
        run.update_run(bench_state=state)
        ran.append(spec.label)
    previous = run.read_run().get("bench_record")
    if resume and not ran and previous and (run.evidence_dir / f"{previous}.json").is_file():
        return read_json(run.evidence_dir / f"{previous}.json")  # nothing was left to do: the record stands
    tok = choose_tokenizer(cfg.tokenizer, client, info.dialect) if cfg.retokenize else None
    if tok is not None:
        for label in ran:  # levels kept from before keep their counts (and the files their record hashed)
            counts = await _retokenize(tok, load_level_replies(run, engine, label))
            write_json(run.level_dir("outputs", engine, label) / "retokenized.json",
                       {"tokenizer": tok.source, "counts": dict(sorted(counts.items()))})
    return bench_record(run, cfg, info, engine, retok_source=tok.source if tok else None, fixed=fixed)


async def _split_level(pool: Any, cfg: ServeConfig, client: Client, run: RunDir, engine: str, spec: LevelSpec,
                       planner: Planner, runner: LoadRunner, body_kw: dict[str, Any], optional: tuple[str, ...],
                       prompts: Sequence[Prompt], n_req: int | None, seed: int, on_done: Progress | None) -> LevelOutcome:
    """One level sent by the pool's processes (``--workers`` / ``--ray``), merged into the run dir; the planner then
    continues after the draws they used. Hidden probes and known answers of the level go with process 0."""
    shares = split_level(spec, pool.size, num_requests=n_req, seed=seed)
    used = list(planner.used.elements())
    probes = [p for p in runner.probes.get(spec.label, []) if runner.unsent(p)]
    dealt: dict[int, list[PlannedRequest]] = {}
    if n_req is not None:  # the level's requests drawn here as one client would draw them, dealt in blocks
        for share in shares:
            dealt[share.worker] = [planner.take() for _ in range(share.num_requests or 0)]

    def make_task(share: Share) -> WorkerTask:
        return WorkerTask(share=share, url=client.endpoint.root, api_key_env=client.endpoint.api_key_env,
                          timeout_s=cfg.timeout_s, engine=engine, run_path=str(run.path) if pool.shared_fs else None,
                          prompts=list(prompts), planner_seed=planner.seed, used_keys=used, body=body_kw,
                          optional=optional, rejected_fields=sorted(client.rejected_fields), duration_s=cfg.duration_s,
                          probes=probes if share.worker == 0 else [], requests=dealt.get(share.worker))

    outcome = await run_level_split(pool, run, engine, shares, make_task, on_done=on_done)
    for _ in range(max(outcome.client.get("draws") or [0])):  # duration mode: past the furthest process's draws
        planner.take()
    client.rejected_fields.update(outcome.client.get("rejected_fields") or [])
    return outcome


def open_pool(cfg: ServeConfig) -> Any:
    """The client processes of a ``--workers``/``--ray`` run: local spawned processes, or Ray actors."""
    if cfg.ray is not None:
        from inferencekit.bench.ray_pool import RayPool

        return RayPool(cfg.ray, cfg.workers)
    return ProcessPool(cfg.workers)


async def _known_answers_alone(cfg: ServeConfig, info: EngineInfo, runner: LoadRunner,
                               on_level: Callable[[str, int], None] | None) -> None:
    """``--kat``: send the known-answer requests one at a time (those not on disk yet), then queue their copies
    for the heaviest level."""
    kat = kat_probes(cfg.kat, model=str(info.model), max_tokens=cfg.kat_max_tokens, extra=cfg.extra_body,
                     ctk=cfg.chat_template_kwargs)
    todo = [p for p in ({**p, "folder": KAT_ALONE} for p in kat) if runner.unsent(p)]
    if todo and on_level:
        on_level("known answers, alone", len(todo))
    for p in todo:
        await runner.send_probe(p, None)
    runner.probes.setdefault(heaviest_level(cfg.levels), []).extend({**p, "folder": KAT_LOAD} for p in kat)


def bench_record(run: RunDir, cfg: ServeConfig, info: EngineInfo, engine: str, *, retok_source: str | None,
                 fixed: dict[str, Any]) -> dict[str, Any]:
    """Judge the files of a finished run into the ``bench`` record (pure but for reading files and saving)."""
    levels: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []
    artifacts: list[dict[str, str]] = []
    dropped: set[str] = set()
    total = ok = 0
    usage_seen = False
    invalid: list[str] = []
    missing: list[str] = []
    limitations: list[str] = []
    for spec in cfg.levels:
        replies = load_level_replies(run, engine, spec.label)
        rt_file = run.level_dir("outputs", engine, spec.label) / "retokenized.json"
        rt = read_json(rt_file)
        m = level_metrics(replies, slo=cfg.slo, retokenized=(rt or {}).get("counts"), open_loop=spec.mode == "open")
        client_file = run.level_dir("outputs", engine, spec.label) / CLIENT_FILE
        pace = judge_client_pace((read_json(client_file) or {}).get("processes") or [], replies,
                                 rate=spec.rate if spec.mode == "open" else None, streams=spec.concurrency or None)
        if pace["valid"] is False:
            invalid.append(spec.label)
            limitations += [f"level {spec.label} is invalid, the client set its pace: {x}" for x in pace["reasons"]]
        levels[spec.label] = {"spec": spec.describe(), **m, "client": pace}
        if client_file.is_file():
            artifacts.append(artifact(client_file, run.path, "client pace figures"))
        total += m["requests"]["total"]
        ok += m["requests"]["completed"]
        for r in replies:
            dropped.update(r.get("dropped_fields") or [])
            usage_seen = usage_seen or bool(r.get("usage"))
            artifacts.append(artifact(Path(r["_path"]), run.path, "reply"))
        for p in sorted(run.level_dir("inputs", engine, spec.label).glob("*/*.json")):
            artifacts.append(artifact(p, run.path, "request"))
        if rt_file.is_file():
            artifacts.append(artifact(rt_file, run.path, "retokenized counts"))
        n = m["requests"]["completed"]
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "ttfo_ms"):
            s = m[name]
            for stat in ("mean", "p50", "p99"):
                metrics.append(metric(name, s[stat], "ms", stat, s["n"], subject=spec.label))
        th = m["throughput"]
        metrics.append(metric("output_throughput", th["output_throughput_tok_s"], "tokens/s", "aggregate", n,
                              subject=spec.label))
        metrics.append(metric("request_throughput", th["request_throughput_req_s"], "requests/s", "aggregate", n,
                              subject=spec.label))
        if "goodput" in m:
            metrics.append(metric("goodput", m["goodput"]["goodput_req_s"], "requests/s", "aggregate",
                                  m["requests"]["total"], subject=spec.label))
    if not usage_seen:
        missing.append("usage in streamed replies: the server sent none, so N_out comes from streamed counts")
    for what in ("streamed_vs_usage", "retokenized_vs_usage", "retokenized_vs_streamed"):
        cmp = [v["n_out"][what] for v in levels.values()]
        n_cmp, n_dis = sum(c["compared"] for c in cmp), sum(c["disagree"] for c in cmp)
        if n_dis:
            a, b = what.split("_vs_")
            limitations.append(f"token counts disagree: {a} ≠ {b} on {n_dis} of {n_cmp} replies (an EOS or a "
                               "merged multi-byte character can explain one token; more needs the token_count gate)")
    if cfg.retokenize and not any((run.level_dir("outputs", engine, s.label) / "retokenized.json").is_file()
                                  for s in cfg.levels):
        missing.append("re-tokenized counts: this engine has no known tokenize endpoint and no --tokenizer was given")
    if cfg.ignore_eos and "ignore_eos" in info.dialect.ignores:
        limitations.append(f"--ignore-eos was sent, but {info.engine} is known to drop it silently (see "
                           "`inferencekit probe`): replies may stop before --max-tokens")
    busy = any(s.mode == "open" or s.concurrency > 1 for s in cfg.levels)
    if info.capacity == 1 and busy:
        limitations.append(f"{info.engine} serves one request at a time ({info.capacity_source}); at concurrency > 1 "
                           "requests queue inside the server, so TTFT grows with the level")
    if cfg.count_tokens and info.dialect.count_fields:
        limitations.append(f"requests asked for {sorted(info.dialect.count_fields)} so each streamed event says how "
                           "many tokens it carried; the server computed that extra output for every token")
    if dropped:
        limitations.append(f"the server rejected optional fields {sorted(dropped)} (HTTP 400); they were dropped")
    kat = None
    if cfg.kat:
        rows, kat_files, kat_level = read_kat(run.path, engine)
        kat = judge_kat(rows, kat_level)
        artifacts += [artifact(run.path / f, run.path, "known-answer reply") for f in kat_files]
        limitations += [f"known answers: {x}" for x in kat.limitations]
    failed = total - ok
    if failed:
        limitations.append(f"{failed} of {total} requests failed (see each level's errors); `inferencekit bench serve "
                           f"--resume {run.path}` re-runs levels that lost requests to a dead server")
    workload = {"dataset": cfg.dataset, "levels": [s.describe() for s in cfg.levels], "num_prompts": cfg.num_prompts,
                "duration_s": cfg.duration_s, "max_tokens": cfg.max_tokens, "ignore_eos": cfg.ignore_eos,
                "temperature": cfg.temperature, "input_len": cfg.input_len}
    summary = (f"bench serve on {info.engine} {info.version or ''} ({info.model}): {ok}/{total} requests ok over "
               f"{len(cfg.levels)} level(s) " + ", ".join(
                   f"{lbl}: TTFT p50 {_fmt(v['ttft_ms']['p50'])} ms, {_fmt(v['throughput']['output_throughput_tok_s'])} tok/s"
                   for lbl, v in levels.items())
               + (f"; known answers alone vs under load: {kat.verdict}" if kat else ""))
    run_json = run.read_run()
    rec = build_record(
        kind="bench", claim_class="observed", summary=summary,
        identity={"engine": {k: v for k, v in info.to_dict().items() if k != "models"}, "model": {"id": info.model},
                  "workload": workload},
        metrics=metrics, artifacts=artifacts, missing=missing, limitations=limitations,
        verdict=_bench_verdict(failed, kat, invalid),
        data={"run_dir": str(run.path.resolve()), "engine_label": engine, "levels": levels, "config": cfg.to_json(),
              "request_fields_fixed": fixed, "retokenizer": retok_source, "dropped_fields": sorted(dropped),
              "pins": run_json.get("pins"), "history": run_json.get("bench_state"),
              "resumes": run_json.get("resumes", []), "metrics_manifest": METRICS_MANIFEST,
              **({"kat": kat.to_json()} if kat else {})})
    save_record(rec, run)
    run.update_run(bench_record=rec["evidence_id"])
    return rec


def _bench_verdict(failed: int, kat: Gate | None, invalid: Sequence[str] = ()) -> str | None:
    """None (a measurement) unless something is wrong: failed requests, or a level whose pace the client set
    (``bench/pace_judge.py``), make it UNPROVEN; with ``--kat`` the known-answer comparison's verdict counts too
    (a KAT that could not run counts as UNPROVEN)."""
    parts = ["UNPROVEN"] if failed or invalid else []
    if kat is not None:
        parts.append("UNPROVEN" if kat.verdict == "NOT RUN" else kat.verdict)
    return combine_claims(parts) if parts else None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"
