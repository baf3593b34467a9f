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
import hashlib
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferencekit.api.body import BodyPolicy
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.reply import is_ok
from inferencekit.api.tokenize import TokenizeError, Tokenizer, choose_tokenizer, refused_texts_note
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.journal import materialise
from inferencekit.bench.manifest import METRICS_MANIFEST
from inferencekit.bench.metrics import level_metrics
from inferencekit.bench.pace_judge import judge_client_pace
from inferencekit.bench.plan import LevelSpec, PlannedRequest, Planner, new_salt, request_body, session_levels
from inferencekit.bench.repeats import interval_notes, point_summaries
from inferencekit.bench.runner import LevelOutcome, LoadRunner
from inferencekit.bench.sessions_judge import conversation_block
from inferencekit.bench.shared_prefix_judge import shared_prefix_block
from inferencekit.bench.split import Share, split_level
from inferencekit.bench.telemetry import level_telemetry, server_block
from inferencekit.bench.workers import ProcessPool, WorkerTask, run_level_split
from inferencekit.data.datasets import build_dynamic
from inferencekit.data.prompts import Prompt
from inferencekit.data.shared_prefix import shared_prefix_prompts
from inferencekit.data.sharing import check_declared_sharing
from inferencekit.data.trace_prompts import trace_prompts
from inferencekit.data.traces import Trace, context_note, load_trace, replay_rate, scale
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, metric, save_record
from inferencekit.rundir import (
    CLIENT_FILE,
    KAT_ALONE,
    KAT_LOAD,
    PROBES_FOLDER,
    RETOKENIZED_FILE,
    STRUCTURED_FOLDER,
    RunDir,
    file_key,
    read_json,
    write_json,
)
from inferencekit.shapes import ExtraRequests

__all__ = ["EXTRA_ROLES", "ServeSession", "run_bench", "load_level_replies", "bench_record", "prepare_serve",
           "salts_first_use"]

Progress = Callable[[str, bool], None]
# artifact roles of the extra requests' replies in the bench record, by folder (rundir.EXTRA_FOLDERS; the
# structured requests' folders, one per level, are "structured request reply")
EXTRA_ROLES = {PROBES_FOLDER: "hidden probe reply", KAT_ALONE: "known-answer reply", KAT_LOAD: "known-answer reply"}


def load_level_replies(run: RunDir, engine: str, label: str) -> list[dict[str, Any]]:
    """Reply dicts of one level, each with ``_key`` (file stem) and ``_path`` added."""
    out = []
    for p in run.replies(engine, label):
        r = read_json(p)
        if isinstance(r, dict):
            out.append({**r, "_key": p.stem, "_path": str(p)})
    return out


async def _retokenize(tok: Tokenizer, replies: Sequence[dict[str, Any]], limit: int = 4
                      ) -> tuple[dict[str, int], dict[str, str]]:
    """Re-tokenized counts of every successful reply's text (reasoning and answer), by file key, and the texts the
    tokenizer refused (a 422 from ``/tokenize``: ``{key: error}``): recorded beside the counts, never dropped."""
    sem = asyncio.Semaphore(limit)
    out: dict[str, int] = {}
    errors: dict[str, str] = {}

    async def one(r: dict[str, Any]) -> None:
        async with sem:
            try:
                out[r["_key"]] = len(await tok.encode(r.get("text", "") + r.get("reasoning", "")))
            except TokenizeError as e:
                errors[r["_key"]] = str(e)[:200]

    await asyncio.gather(*(one(r) for r in replies if is_ok(r)))
    return out, errors


def _fixed_fields(cfg: ServeConfig, info: EngineInfo, load_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields every load request sets itself: temperature, ``ignore_eos``, the dialect's count fields, and what
    the mixed-in gate requests ask the load to carry (``ExtraRequests.load_fields``: the known answers' logprob
    fields, so nothing marks them)."""
    fixed: dict[str, Any] = {"temperature": cfg.temperature}
    if cfg.ignore_eos:
        fixed["ignore_eos"] = True
    if cfg.count_tokens:
        fixed.update(info.dialect.count_fields)
    fixed.update(load_fields or {})
    return fixed


async def run_bench(cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir, prompts: Sequence[Prompt], *,
                    on_done: Progress | None = None, on_level: Callable[[str, int], None] | None = None,
                    resume: bool = False, extras: ExtraRequests | None = None) -> dict[str, Any]:
    """Run every level of ``cfg`` into ``run`` and return the ``bench`` record (saved).

    Args:
        prompts: the resolved prompt pool (dataset already loaded/built).
        on_done: progress callback per finished request ``(level, ok)``.
        on_level: called with ``(label, planned requests or 0 for duration mode)`` as each level starts.
        resume: keep finished levels already on disk.
        extras: requests the caller mixes in (hidden probes, known answers; ``shapes.ExtraRequests``): the
            ``alone`` ones are sent after the warm-up, the others inside their level. They are recorded in their
            folders and listed in the record, never judged here and never in a level's metrics; a resumed run
            sends only those without a reply file.
    """
    session = ServeSession(cfg, client, info, run, prompts, on_done=on_done, on_level=on_level, resume=resume,
                           extras=extras)
    try:
        await session.start()
        for spec in cfg.levels:
            await session.run_level(spec)
        return await session.finish()
    finally:
        session.close()


class ServeSession:
    """One ``bench serve`` run, level by level: ``start`` (warm-up, the extra requests sent alone), ``run_level`` for
    each level (a finished level kept from before is skipped), ``finish`` (re-tokenized counts, the record), ``close``.

    ``bench sweep`` drives it one load point at a time, choosing the next point from the last one's figures; the
    levels it runs are appended to ``cfg.levels`` (and stored in run.json) before each is sent, so the record and a
    resumed run see them all. Arguments as ``run_bench``'s.
    """

    def __init__(self, cfg: ServeConfig, client: Client, info: EngineInfo, run: RunDir, prompts: Sequence[Prompt], *,
                 on_done: Progress | None = None, on_level: Callable[[str, int], None] | None = None,
                 resume: bool = False, extras: ExtraRequests | None = None) -> None:
        self.cfg, self.client, self.info, self.run, self.prompts = cfg, client, info, run, prompts
        self.on_done, self.on_level, self.resume = on_done, on_level, resume
        self.engine = cfg.engine_label or info.engine
        load_fields: dict[str, Any] = extras.get("load_fields", {}) if extras else {}
        self.fixed = _fixed_fields(cfg, info, load_fields)
        self.optional = ("stream_options", *(k for k in {**info.dialect.count_fields, **load_fields}
                                             if k in self.fixed))
        self.body_kw: dict[str, Any] = {"model": str(info.model), "max_tokens": cfg.max_tokens,
                                        "extra": cfg.extra_body, "fixed": self.fixed,
                                        "chat_template_kwargs": cfg.chat_template_kwargs}
        body_kw = self.body_kw

        def body_for(req: PlannedRequest) -> dict[str, Any]:
            return request_body(req, **body_kw)

        self.planner = Planner(prompts, cfg.seed, in_order=bool(cfg.trace), salt_first_use=salts_first_use(cfg))
        if resume:
            for journal in run.journals(self.engine):
                # a client that died mid-level left its finished exchanges here: recover them as files
                list(materialise(run, self.engine, journal.parent.name.removeprefix("load-"), journal))
            self.planner.restore(run.sent_keys(self.engine))
        self.runner = LoadRunner(client, run, self.engine, body_for, optional=self.optional, on_done=on_done,
                                 extras=extras)
        self.runner.think_time_s = cfg.think_time_s
        if cfg.trace:  # the trace's own times, scaled (the file was checked when the flags were)
            rows = scale(replay_trace(cfg, info).rows, cfg.time_scale)
            self.runner.offsets_for.update({s.label: [r.t_s for r in rows] for s in cfg.levels})
        # the client processes first: a Ray cluster that cannot be reached (or is too small) stops the run before
        # anything is sent
        self.pool = open_pool(cfg) if cfg.workers > 1 or cfg.ray is not None else None
        self.state: dict[str, Any] = {}
        self.ran: list[str] = []
        self.retokenized: set[str] = set()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    async def start(self) -> None:
        """The warm-up (once per run) and the extra requests sent alone that have no reply yet."""
        run, cfg = self.run, self.cfg
        self.state = run.read_run().get("bench_state") or {"levels": {}, "warmup_done": False, "superseded": []}
        if not self.state.get("warmup_done") and cfg.warmup > 0:
            if self.on_level:
                self.on_level("warmup", cfg.warmup)
            await self.runner.warmup(self.planner, cfg.warmup)
        self.state["warmup_done"] = True
        run.update_run(bench_state=self.state)
        alone = [p for p in self.runner.extras["alone"] if self.runner.unsent(p)]
        if alone and self.on_level:
            self.on_level("extra requests, alone", len(alone))
        for p in alone:
            await self.runner.send_alone(p)

    def level_done(self, label: str) -> bool:
        """True when ``label`` finished before (a resumed run keeps it) and lost no request to a dead server."""
        st = self.state["levels"].get(label, {})
        return st.get("state") == "done" and not any(r.get("status") == 0 for r in
                                                      load_level_replies(self.run, self.engine, label))

    async def run_level(self, spec: LevelSpec) -> LevelOutcome | None:
        """Send one level into its folder (None when it finished before and is kept); an earlier, unfinished
        attempt is moved to ``superseded/``."""
        run, cfg, state = self.run, self.cfg, self.state
        if self.level_done(spec.label):
            return None
        st = state["levels"].get(spec.label, {})
        if st or run.level_dir("outputs", self.engine, spec.label).exists():
            extras = [(x.get("folder", PROBES_FOLDER), x["id"])
                      for x in self.runner.extras["by_level"].get(spec.label, ())]
            moved = run.supersede_level(self.engine, spec.label, extras)
            if moved:
                state["superseded"].append({"level": spec.label, "to": moved})
        state["levels"][spec.label] = {"state": "running", "attempt": int(st.get("attempt", 0)) + 1}
        run.update_run(bench_state=state)
        if self.on_level:
            self.on_level(spec.label, (cfg.num_prompts or 0) if cfg.duration_s is None else 0)
        seed = random.Random(f"{cfg.seed}:{spec.label}:{state['levels'][spec.label]['attempt']}").getrandbits(32)
        n_req = None if cfg.duration_s else cfg.num_prompts
        async with level_telemetry(self.client, run, self.engine, spec.label, interval_s=cfg.metrics_interval_s):
            if self.pool is None:
                outcome = await self.runner.run_level(spec, self.planner, num_requests=n_req,
                                                      duration_s=cfg.duration_s, seed=seed)
            else:
                outcome = await _split_level(self.pool, cfg, self.client, run, self.engine, spec, self.planner,
                                             self.runner, self.body_kw, self.optional, self.prompts, n_req, seed,
                                             self.on_done)
        state["levels"][spec.label].update(state="done", sent=outcome.sent, ok=outcome.ok, failed=outcome.failed,
                                           wall_s=round(outcome.wall_s, 3))
        run.update_run(bench_state=state)
        self.ran.append(spec.label)
        return outcome

    async def retokenize(self) -> str | None:
        """Re-tokenized counts of the levels sent in this session (off the timing path; levels kept from before keep
        their counts, unless counting them failed, which is tried again); the tokenizer's source, None without one."""
        if not self.cfg.retokenize:
            return None
        tok = choose_tokenizer(self.cfg.tokenizer, self.client, self.info.dialect)
        if tok is None:
            return None
        kept_with_errors = [s.label for s in self.cfg.levels if s.label not in self.ran
                            and (f := self.run.level_dir("outputs", self.engine, s.label) / RETOKENIZED_FILE).is_file()
                            and read_json(f).get("errors")]  # e.g. the server died before it could count them
        for label in [*self.ran, *kept_with_errors]:
            if label in self.retokenized:
                continue
            counts, errors = await _retokenize(tok, load_level_replies(self.run, self.engine, label))
            write_json(self.run.level_dir("outputs", self.engine, label) / RETOKENIZED_FILE,
                       {"tokenizer": tok.source, "counts": dict(sorted(counts.items())),
                        **({"errors": dict(sorted(errors.items()))} if errors else {})})
            self.retokenized.add(label)
        # the replies outside the levels (warm-up, hidden probes, known answers, structured requests), so token_count
        # can settle their counts by the text too: outputs/<engine>/retokenized.json, keyed "<folder>/<file key>"
        side = [{**r, "_key": f"{folder}/{file_key(p)}"} for folder, p in self.run.side_replies(self.engine)
                if isinstance(r := read_json(p), dict)]
        if side:
            counts, errors = await _retokenize(tok, side)
            write_json(self.run.side_retokenized(self.engine),
                       {"tokenizer": tok.source, "counts": dict(sorted(counts.items())),
                        **({"errors": dict(sorted(errors.items()))} if errors else {})})
        return tok.source

    async def finish(self, extra_data: dict[str, Any] | None = None,
                     extra_artifacts: Sequence[tuple[Path, str]] = ()) -> dict[str, Any]:
        """Re-tokenize the levels sent in this session, then judge every level's files into the record (saved); a
        resumed run with nothing left to send returns its stored record. ``extra_data``, ``extra_artifacts``: as
        ``bench_record``'s."""
        run, cfg, engine = self.run, self.cfg, self.engine
        previous = run.read_run().get("bench_record")
        if self.resume and not self.ran and previous and (run.evidence_dir / f"{previous}.json").is_file():
            record: dict[str, Any] = read_json(run.evidence_dir / f"{previous}.json")
            return record  # nothing was left to do: the record stands
        source = await self.retokenize()
        return bench_record(run, cfg, self.info, engine, retok_source=source, fixed=self.fixed,
                            extra_data=extra_data, extra_artifacts=extra_artifacts)


async def _split_level(pool: Any, cfg: ServeConfig, client: Client, run: RunDir, engine: str, spec: LevelSpec,
                       planner: Planner, runner: LoadRunner, body_kw: dict[str, Any], optional: tuple[str, ...],
                       prompts: Sequence[Prompt], n_req: int | None, seed: int, on_done: Progress | None
                       ) -> LevelOutcome:
    """One level sent by the pool's processes (``--workers`` / ``--ray``), merged into the run dir; the planner then
    continues after the draws they used. The level's extra requests (hidden probes, known answers) go with process 0."""
    shares = split_level(spec, pool.size, num_requests=n_req, seed=seed)
    used = list(planner.used.elements())
    mixed = [p for p in runner.extras["by_level"].get(spec.label, []) if runner.unsent(p)]
    extras: ExtraRequests = {"alone": [], "by_level": {spec.label: mixed}, "optional": runner.extras["optional"]}
    dealt: dict[int, list[PlannedRequest]] = {}
    if n_req is not None:  # the level's requests drawn here as one client would draw them, dealt in blocks
        for share in shares:
            dealt[share.worker] = [planner.take() for _ in range(share.num_requests or 0)]

    def make_task(share: Share) -> WorkerTask:
        return WorkerTask(share=share, url=client.endpoint.root, api_key_env=client.endpoint.api_key_env,
                          timeout_s=cfg.timeout_s, engine=engine, run_path=str(run.path) if pool.shared_fs else None,
                          prompts=list(prompts), planner_seed=planner.seed, used_keys=used,
                          salt_first_use=planner.salt_first_use, body=body_kw,
                          optional=optional, rejected_fields=sorted(client.rejected_fields), duration_s=cfg.duration_s,
                          extras=extras if share.worker == 0 else None, requests=dealt.get(share.worker),
                          read_timeout_s=client.read_timeout_s, fresh_connections=client.fresh_connections)

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


def bench_record(run: RunDir, cfg: ServeConfig, info: EngineInfo, engine: str, *, retok_source: str | None,
                 fixed: dict[str, Any], extra_data: dict[str, Any] | None = None,
                 extra_artifacts: Sequence[tuple[Path, str]] = ()) -> dict[str, Any]:
    """Judge the files of a finished run into the ``bench`` record (pure but for reading files and saving).

    ``extra_data``: more keys for the record's data (``bench sweep`` adds ``sweep``); ``extra_artifacts``: more
    files the record lists and hashes, ``(path, role)``."""
    levels: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []
    artifacts: list[dict[str, str]] = []
    dropped: set[str] = set()
    total = ok = 0
    usage_seen = False
    invalid: list[str] = []
    missing: list[str] = []
    limitations: list[str] = []
    refused: dict[str, str] = {}  # texts the tokenizer refused, by level/key
    retok_name = retok_source
    all_replies: list[dict[str, Any]] = []
    for spec in cfg.levels:
        replies = load_level_replies(run, engine, spec.label)
        all_replies += replies
        rt_file = run.level_dir("outputs", engine, spec.label) / RETOKENIZED_FILE
        rt = read_json(rt_file)
        errs = (rt or {}).get("errors") if isinstance(rt, dict) else None
        if isinstance(errs, dict):
            refused.update({f"load-{spec.label}/{k}": str(v) for k, v in errs.items()})
            retok_name = retok_name or rt.get("tokenizer")
        m = level_metrics(replies, slo=cfg.slo, retokenized=(rt or {}).get("counts"), open_loop=spec.mode == "open",
                          ramp=bool(spec.ramp))
        client_file = run.level_dir("outputs", engine, spec.label) / CLIENT_FILE
        pace = judge_client_pace((read_json(client_file) or {}).get("processes") or [], replies,
                                 rate=spec.start_rate if spec.mode == "open" else None,
                                 streams=spec.concurrency or None)
        if pace["valid"] is False:
            invalid.append(spec.label)
            limitations += [f"level {spec.label} is invalid, the client set its pace: {x}" for x in pace["reasons"]]
        levels[spec.label] = {"spec": spec.describe(), **m, "client": pace}
        server = server_block(run, engine, spec.label)  # the server's /metrics over the level (bench/telemetry.py)
        if server is not None:
            levels[spec.label]["server"] = server
            artifacts.append(artifact(run.path / server["file"], run.path, "server telemetry"))
            limitations += [f"server telemetry disagrees with the client: {f}" for f in server["flags"]]
        if client_file.is_file():
            artifacts.append(artifact(client_file, run.path, "client pace figures"))
        total += m["requests"]["total"]
        ok += m["requests"]["completed"]
        for r in replies:
            dropped.update(r.get("dropped_fields") or [])
            usage_seen = usage_seen or bool(r.get("usage"))
            artifacts.append(artifact(Path(r["_path"]), run.path, "reply"))
        for p in run.level_files("inputs", engine, spec.label, gz=False):
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
    if cfg.retokenize and not any((run.level_dir("outputs", engine, s.label) / RETOKENIZED_FILE).is_file()
                                  for s in cfg.levels):
        missing.append("re-tokenized counts: this engine has no known tokenize endpoint and no --tokenizer was given")
    refused_note = refused_texts_note(str(retok_name), refused)
    if refused_note:
        limitations.append(refused_note)
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
    fallbacks: list[str] = []  # what changed what was measured: verify --strict does not let a PASS rest on it
    if dropped:
        fallbacks.append(f"the server rejected optional fields {sorted(dropped)} (HTTP 400); they were dropped")
        limitations.append(fallbacks[-1])
    policy = BodyPolicy("bench serve", cfg.extra_body, cfg.chat_template_kwargs, tuple(cfg.refused_fields))
    limitations += policy.limitations()
    extra_counts: dict[str, int] = {}
    for folder, path in run.extra_replies(engine):
        extra_counts[folder] = extra_counts.get(folder, 0) + 1
        role = "structured request reply" if folder.startswith(f"{STRUCTURED_FOLDER}/") else "extra request reply"
        artifacts.append(artifact(path, run.path, EXTRA_ROLES.get(folder, role)))
    artifacts += [artifact(path, run.path, role) for path, role in extra_artifacts]
    failed = total - ok
    if failed:
        command = "bench sweep" if extra_data and "sweep" in extra_data else "bench serve"
        limitations.append(f"{failed} of {total} requests failed (see each level's errors); `inferencekit {command} "
                           f"--resume {run.path}` re-runs levels that lost requests to a dead server")
    workload = {"dataset": cfg.dataset, "levels": [s.describe() for s in cfg.levels], "num_prompts": cfg.num_prompts,
                "duration_s": cfg.duration_s, "max_tokens": cfg.max_tokens, "ignore_eos": cfg.ignore_eos,
                "temperature": cfg.temperature, "input_len": cfg.input_len,
                **({"turns": cfg.turns, "think_time_s": cfg.think_time_s, "rate_of": cfg.rate_of,
                    "conversation_source": cfg.conversation_source} if cfg.dataset == "conversations" else {}),
                **({"shared_prefix_tokens": cfg.shared_prefix_tokens, "prefix_groups": cfg.prefix_groups}
                   if cfg.shared_prefix_tokens else {})}
    summary = (f"bench serve on {info.engine} {info.version or ''} ({info.model}): {ok}/{total} requests ok over "
               f"{len(cfg.levels)} level(s) " + ", ".join(
                   f"{lbl}: TTFT p50 {_fmt(v['ttft_ms']['p50'])} ms, "
                   f"{_fmt(v['throughput']['output_throughput_tok_s'])} tok/s"
                   for lbl, v in levels.items())
               + (f"; extra requests (judged by the gates): {extra_counts}" if extra_counts else ""))
    warm = [r for f in run.extra_files(engine, "warmup") if isinstance(r := read_json(f), dict)]
    shared = (shared_prefix_block(all_replies, tokens=cfg.shared_prefix_tokens, groups=cfg.prefix_groups,
                                  warmup=warm) if cfg.shared_prefix_tokens else None)
    if shared is not None:
        extra_data = {"shared_prefix": shared, **(extra_data or {})}
        if cfg.workers > 1 or cfg.ray is not None:
            limitations.append("shared prefix: each group's first request is the earliest by its own client process's "
                               "clock; with several processes the order across them is not exact")
    conv = (conversation_block(all_replies, turns=cfg.turns, think_time_s=cfg.think_time_s,
                               source=cfg.conversation_source) if cfg.dataset == "conversations" else None)
    if conv is not None:
        extra_data = {"conversations": conv, **(extra_data or {})}
    points = point_summaries(levels)  # each load point across its --repeats, with 95% intervals (bench/repeats.py)
    limitations += interval_notes(points, levels)
    run_json = run.read_run()
    if cfg.trace:  # the replay's description (data/trace_prompts.py), with the rows the server's context left out
        trace_desc = run_json.get("prompt_set") or {}
        extra_data = {"trace": trace_desc, **(extra_data or {})}
        note = context_note(trace_desc)
        if note:
            limitations.append(note)
    rec = build_record(
        kind="bench", claim_class="observed", summary=summary,
        identity={"engine": {k: v for k, v in info.to_dict().items() if k != "models"}, "model": {"id": info.model},
                  "workload": workload},
        metrics=metrics, artifacts=artifacts, missing=missing, limitations=limitations,
        verdict=_bench_verdict(failed, invalid),
        covers=[run.level_dir(kind, engine, s.label).relative_to(run.path).as_posix()
                for s in cfg.levels for kind in ("outputs", "inputs")],
        data={"run_dir": str(run.path.resolve()), "engine_label": engine, "levels": levels, "config": cfg.to_json(),
              "request_fields_fixed": fixed, "request_policy": policy.to_json(), "retokenizer": retok_source,
              "dropped_fields": sorted(dropped), "fallbacks": fallbacks, "retokenize_refused": sorted(refused),
              "pins": run_json.get("pins"), "history": run_json.get("bench_state"),
              "resumes": run_json.get("resumes", []), "metrics_manifest": METRICS_MANIFEST,
              "extra_requests": extra_counts, "points": points, **(extra_data or {})})
    save_record(rec, run)
    run.update_run(bench_record=rec["evidence_id"])
    return rec


def _bench_verdict(failed: int, invalid: Sequence[str] = ()) -> str | None:
    """None (a measurement) unless something is wrong: failed requests, or a level whose pace the client set
    (``bench/pace_judge.py``), make it UNPROVEN. The extra requests mixed in are judged by the gates, not here."""
    return "UNPROVEN" if failed or invalid else None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def salts_first_use(cfg: ServeConfig) -> bool:
    """Whether a prompt's first use carries a salt: yes for a fixed prompt set (dev, a file, ShareGPT, ShareGPT
    sessions), no for one drawn afresh per run (``_drawn_per_run``) or a trace, whose texts are new per run and
    token-exact (``bench/plan.py`` ``Planner.salt_first_use``)."""
    return not _drawn_per_run(cfg) and not cfg.trace


def replay_trace(cfg: ServeConfig, info: EngineInfo) -> Trace:
    """The ``--trace`` file read and checked, less the rows over the server's context per request
    (``EngineInfo.context_tokens``; nothing is checked when the server reports none): ``data/traces.py``
    ``load_trace`` with ``max_context``, i.e. ``fit_context``. Times unscaled.

    Raises:
        OpError: the file cannot be read or is malformed, or every row is skipped (before any request).
        ValueError: ``cfg`` has no trace (a bug).
    """
    if cfg.trace is None:
        raise ValueError("replay_trace needs a ServeConfig with a trace")
    return load_trace(cfg.trace, cfg.trace_format, block_size=cfg.trace_block_size, max_context=info.context_tokens)


def _drawn_per_run(cfg: ServeConfig) -> bool:
    """True for a prompt set drawn afresh per run, unsalted on first use (``--dataset random``, synthetic
    conversations): its texts are new each run. A fixed set (dev, a file, ShareGPT, ShareGPT sessions) is salted."""
    return cfg.dataset == "random" or (cfg.dataset == "conversations" and cfg.conversation_source == "synthetic")


def fresh_draw_seed(run: RunDir, seed: int) -> int:
    """The seed of a prompt set drawn afresh per run (``--dataset random``, synthetic conversations, ``--trace``):
    ``seed`` mixed with a 64-bit CSPRNG nonce pinned in run.json (``prompt_nonce``), so a resume draws the same set
    and a second run with the same ``--seed`` does not send texts a prompt cache still holds (bench/plan.py)."""
    nonce = run.read_run().get("pins", {}).get("prompt_nonce") or run.pin("prompt_nonce", new_salt())
    return int.from_bytes(hashlib.sha256(f"{seed}:{nonce}".encode()).digest()[:8], "big")


async def prepare_serve(cfg: ServeConfig, client: Client, run: RunDir, model: str | None,
                        static: tuple[list[Prompt], dict[str, Any]] | None, *, argv: Sequence[str], operation: str,
                        api_key_env: str | None, resume: bool = False, quiet: bool = False
                        ) -> tuple[EngineInfo, list[Prompt]]:
    """Detect the engine, pin identity/model/template kwargs, resolve the dataset, write run.json (the command line
    ``argv`` and ``operation`` as given; on ``resume`` the command is added to ``resumes``).

    Sets in ``cfg`` what only the server and the prompts decide, before run.json stores it: for ``--trace``,
    ``num_prompts`` and the trace level's rate from the rows that fit the server's context (``replay_trace``); for
    open-loop sessions, each level's mean turns per session over the run's sessions (``plan.session_levels``).

    Raises:
        OpError: the server does not answer, or the run dir pins another engine, model or template kwargs; a trace
            whose every row is over the server's context, or (on ``resume``) a changed trace file or context.
    """
    info = await detect_engine(client, model)
    run.pin("engine_identity", info.identity())
    run.pin("model", info.model)
    run.pin("chat_template_kwargs", cfg.chat_template_kwargs)
    if cfg.trace:
        tok = choose_tokenizer(cfg.tokenizer, client, info.dialect)
        if tok is None:
            raise OpError("--trace needs a tokenizer to make the trace's lengths token-exact: this engine has no "
                          "tokenize endpoint; pass --tokenizer")
        trace = replay_trace(cfg, info)
        stored = (run.read_run().get("prompt_set") or {}) if resume else {}
        before = stored.get("sha256")
        if before is not None and before != trace.sha256:
            raise OpError(f"--resume: the trace file {cfg.trace!r} changed since the run began (sha256 {before[:12]}… "
                          f"then, {trace.sha256[:12]}… now); replay it into a new run dir")
        if before is not None and stored.get("max_context") != trace.max_context:
            raise OpError(f"--resume: the run replayed the trace against a context of {stored.get('max_context')} "
                          f"tokens per request, the server now reports {trace.max_context}: other rows would be sent; "
                          "replay it into a new run dir")
        draw = fresh_draw_seed(run, cfg.seed)
        prompts, desc = await trace_prompts(trace, seed=draw, tokenizer=tok, keep_repeats=cfg.keep_trace_repeats)
        desc["time_scale"] = cfg.time_scale
        # the rows that fit the server's context set the level's requests and rate (the flags counted every row)
        cfg.num_prompts = len(trace.rows)
        rate = replay_rate(scale(trace.rows, cfg.time_scale))
        cfg.levels = [replace(s, rate=rate) if s.label == "trace" else s for s in cfg.levels]
    elif static is None:
        n = (cfg.num_prompts or 32) * len(cfg.levels) + cfg.warmup
        tok = choose_tokenizer(cfg.tokenizer, client, info.dialect)
        seed: int = cfg.seed
        if _drawn_per_run(cfg):
            seed = fresh_draw_seed(run, cfg.seed)
        prompts, desc = await build_dynamic(cfg.dataset, n=n, seed=seed, tokenizer=tok, client=client,
                                            input_len=cfg.input_len, max_tokens=cfg.max_tokens, turns=cfg.turns,
                                            conversation_source=cfg.conversation_source)
        if any(s.rate_of for s in cfg.levels):  # open-loop sessions: their mean turns set a --rate-of turns level's
            cfg.levels = session_levels(cfg.levels, sum(1 + len(p.followups) for p in prompts) / len(prompts))
        if cfg.shared_prefix_tokens and tok is not None:
            prompts = await shared_prefix_prompts(prompts, tokens=cfg.shared_prefix_tokens,
                                                  groups=cfg.prefix_groups, seed=seed, tokenizer=tok)
            desc = {**desc, "shared_prefix_tokens": cfg.shared_prefix_tokens, "prefix_groups": cfg.prefix_groups}
    else:
        prompts, desc = static
    if not cfg.trace:  # a trace's sharing is its hash_ids, planned exact block by block (data/trace_blocks.py)
        desc = {**desc, "sharing_checked": check_declared_sharing(prompts, salted=salts_first_use(cfg))}
    if desc.get("truncated") and not quiet:
        print(f"inferencekit: note: the {desc.get('name', cfg.dataset)} data file is truncated; "
              f"{desc.get('conversations')} complete conversations were read (recorded in run.json)",
              file=sys.stderr)
    limits = {"timeout_s": client.timeout_s, "read_timeout_s": client.read_timeout_s}  # --timeout, --read-timeout
    if resume:
        resumes = run.read_run().get("resumes", [])
        run.update_run(resumes=[*resumes, {"command": list(argv), "engine": info.to_dict(), "client_limits": limits}])
    else:
        run.update_run(command=list(argv), operation=operation, engine=info.to_dict(),
                       dialect=info.dialect.describe(), api_key_env=api_key_env, prompt_set=desc,
                       bench_config=cfg.to_json(), client_limits=limits)
    return info, prompts
