"""A bench serve level in vLLM's ``vllm bench serve --save-result --save-detailed`` JSON format.

The reference is vLLM 0.32's ``vllm/benchmarks/serve.py``: ``calculate_metrics`` (the per-request
and aggregate figures), the ``result = {...}`` dict of ``benchmark()`` (the per-request lists),
``process_one_metric`` (``mean_/median_/std_/pNN_<metric>_ms``) and the ``result_json`` set-up of
``main_async`` (date, backend, label, model, traffic). ``vllm_result`` is a pure function of reply
files (``outputs/<engine>/load-<label>/<bucket>/<key>.json``); ``export_run`` reads a finished run
directory and writes one file per level.

Each figure follows vLLM's semantics, computed from our measurements (the per-request times are the
reply file's own ``ttft_ms``/``e2el_ms``/``itl_ms`` ÷ 1000, so the metric definitions are ours —
bench/manifest.py — and the aggregation is vLLM's):

- a request is *completed* when our reply is ok (HTTP 200, no error) and carried a token event
  (vLLM fails a stream that never delivered a chunk); every other request is *failed*;
- completed requests alone feed the statistics, the token totals and goodput; a failed one stays in
  the per-request lists with vLLM's fill values: output length 0, latency 0.0, text "", TTFT 0.0
  unless a token arrived before the failure (then that TTFT and the gaps seen so far, as vLLM keeps
  them), and its error string;
- TPOT per request = (latency − TTFT) / (output_len − 1), only for output_len > 1 (vLLM's ``tpots``);
  for goodput a request with output_len ≤ 1 has TPOT 0 (vLLM's ``all_tpots``);
- ITL statistics pool every gap of every completed request (vLLM's ``itls += output.itl``);
- mean, median, std (population) and percentiles are numpy's (``np.percentile``, linear), taken on
  seconds and multiplied by 1000, as vLLM does;
- peak output tokens/s and peak concurrent requests use vLLM's one-second buckets from
  ``start_time + ttft + cumsum(itl)``.

Where the two tools differ, or our data cannot give a field (listed again in ``UNAVAILABLE``):

- ``duration``: our level window, first send → last event of any reply (the window of our own bench
  record, so ``request_throughput`` and ``output_throughput`` equal the record's); vLLM times from
  just before its first request to the end of its gather, a few ms more;
- ``queue_times``: open-loop levels give send − scheduled send (the wait behind the schedule and the
  ``--max-concurrency`` cap, which is what vLLM's ``client_queue_time`` measures); closed-loop levels
  have no arrival time, so each entry is null (vLLM's closed loop makes every request arrive at the
  start, and its queue time is the wait for a free stream);
- a statistic over no values (no completed request, or none with output_len > 1 for TPOT) is null
  where vLLM writes 0.0;
- ``output_lens`` of a completed request is null when no N_out source exists (no usage, no streamed
  count, no re-tokenized count); the token totals and throughputs are then null (vLLM counts 1);
- ``input_lens``: ``usage.prompt_tokens``, else the length of the ``prompt_token_ids`` the engine
  returned, else the dataset's known token count (``--dataset random``: ``--input-len``, the user
  content without the chat template — what vLLM's random dataset records; not for a reply whose
  prompt carries a reuse tag), else null; ``total_input_tokens`` and ``total_token_throughput`` are
  null when a completed request's input length is unknown;
- ``request_goodput``: null unless SLOs were given; ttft, tpot, e2el are judged as vLLM does; our
  extra keys ttfo and itl (per-request max gap) as our own goodput does (a missing value misses);
- ``burstiness``: 1.0 for Poisson and for closed loop (vLLM's default), the gamma shape for gamma
  arrivals, "inf" for constant arrivals (the gamma limit; vLLM has no constant process);
- ``label``: the level's label (e.g. ``c4``); vLLM writes its ``--label`` (default null);
- ``tokenizer_id``: the tokenizer our re-tokenized counts came from (``engine:…`` or ``local:…``),
  else ``--tokenizer``, else null (vLLM's ``--skip-tokenizer-init``);
- ``rtfx``: 0.0, what vLLM writes when no audio was sent.

An ``inferencekit`` object (vLLM's ``--metadata`` position) says where each figure came from.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferencekit.errors import OpError
from inferencekit.evidence.record import integrity_problems
from inferencekit.rundir import CLIENT_FILE, RETOKENIZED_FILE, RunDir, read_json, write_json
from inferencekit.shapes import is_ok, n_out, reply_end_ns, reply_start_ns

__all__ = ["FORMATS", "UNAVAILABLE", "bench_record_of", "export_run", "export_targets", "level_problems", "vllm_result"]

FORMATS = ("vllm-json",)

# vLLM fields our data cannot give as vLLM does, and what is written instead (see the module docstring).
UNAVAILABLE: dict[str, str] = {
    "queue_times": "null per request in closed loop (no arrival time); open loop: send − scheduled send",
    "input_lens": "null where neither usage, nor prompt_token_ids, nor a known dataset length gives it",
    "output_lens": "null for a completed request with no N_out source",
    "total_input_tokens": "null when a completed request's input length is unknown",
    "total_output_tokens": "null when a completed request's output length is unknown",
    "total_token_throughput": "null when either total is unknown",
    "output_throughput": "null when total_output_tokens is unknown",
    "request_goodput": "null unless SLOs were given (as vLLM)",
    "mean/median/std/pNN_*_ms": "null over no values (vLLM writes 0.0)",
    "rtfx": "0.0 (no audio)",
}

_NO_TOKEN = "no generated token in the stream (vLLM counts a stream without a valid chunk as failed)"


def _traffic(spec: Any) -> dict[str, Any]:
    """``label``, ``mode``, ``arrival`` and vLLM's ``request_rate``, ``burstiness``, ``max_concurrency`` of a
    level given as a ``LevelSpec``, its ``asdict`` form (ServeConfig JSON) or its ``describe()`` form (record)."""
    d = asdict(spec) if is_dataclass(spec) and not isinstance(spec, type) else dict(spec)
    mode = d.get("mode")
    if mode == "closed":
        return {"label": d.get("label"), "mode": mode, "arrival": None, "request_rate": "inf", "burstiness": 1.0,
                "max_concurrency": int(d["concurrency"])}
    if mode != "open":
        raise ValueError(f"level spec with unknown mode {mode!r}")
    rate = d["rate_req_s"] if "rate_req_s" in d else d["rate"]
    cap = d["max_concurrency"] if "rate_req_s" in d else (d.get("concurrency") or None)
    arrival = d.get("arrival", "poisson")
    burst: float | str = "inf" if arrival == "constant" else float(d.get("burstiness", 1.0))
    out: dict[str, Any] = {"label": d.get("label"), "mode": mode, "arrival": arrival, "request_rate": float(rate),
                           "burstiness": burst, "max_concurrency": int(cap) if cap else None}
    strategy = d.get("ramp_up_strategy", d.get("ramp"))
    if strategy:  # vLLM's ramp-up result: request_rate "inf" (it refuses --request-rate with a ramp) and the ramp
        out.update(request_rate="inf", ramp_up_strategy=strategy,
                   ramp_up_start_rps=float(d.get("ramp_up_start_rps", d.get("ramp_start")) or 0.0),
                   ramp_up_end_rps=float(d.get("ramp_up_end_rps", d.get("ramp_end")) or 0.0))
    return out


def _p_word(p: float) -> str:
    """vLLM's percentile key word: ``50`` for 50.0, ``99.9`` for 99.9 (``process_one_metric``)."""
    p = float(p)
    return str(int(p)) if int(p) == p else str(p)


def _stats(out: dict[str, Any], name: str, values_s: Sequence[float], percentiles: Sequence[float]) -> None:
    """``mean_/median_/std_/pNN_<name>_ms`` of values in seconds, as vLLM's ``calculate_metrics`` (numpy on
    seconds, × 1000); null over no values."""
    if values_s:
        arr = np.asarray(values_s, dtype=float)
        out[f"mean_{name}_ms"] = float(np.mean(arr) * 1000)
        out[f"median_{name}_ms"] = float(np.median(arr) * 1000)
        out[f"std_{name}_ms"] = float(np.std(arr) * 1000)
        for p in percentiles:
            out[f"p{_p_word(p)}_{name}_ms"] = float(np.percentile(arr, float(p)) * 1000)
    else:
        for k in ("mean", "median", "std"):
            out[f"{k}_{name}_ms"] = None
        for p in percentiles:
            out[f"p{_p_word(p)}_{name}_ms"] = None


def _peaks(starts: Sequence[float], ttfts: Sequence[float], itls: Sequence[Sequence[float]],
           latencies: Sequence[float]) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests`` over completed requests: token times
    ``start + ttft + cumsum(itl)`` and each request's active seconds, in one-second buckets from the first
    start (``calculate_metrics``). (0.0, 0) with no completed request, as vLLM."""
    if not starts:
        return 0.0, 0
    t0 = min(starts)
    t_end = max(s + lat for s, lat in zip(starts, latencies))
    n = int(np.ceil(t_end - t0)) + 1
    tokens = np.zeros(n)
    active = np.zeros(n)
    for s, ttft, gaps, lat in zip(starts, ttfts, itls, latencies):
        t = s + ttft
        times = [t]
        for g in gaps:
            t += g
            times.append(t)
        for tt in times:
            b = int(tt - t0)
            if 0 <= b < n:
                tokens[b] += 1
        for sec in range(int(s - t0), int((s + lat) - t0) + 1):
            active[sec] += 1
    return float(np.max(tokens)), int(np.max(active))


def _input_len(r: Mapping[str, Any], known: int | None) -> tuple[int | None, str]:
    pt = (r.get("usage") or {}).get("prompt_tokens")
    if isinstance(pt, int) and not isinstance(pt, bool):
        return pt, "usage"
    ids = r.get("prompt_token_ids")
    if isinstance(ids, list) and ids:
        return len(ids), "prompt_token_ids"
    if known is not None and not r.get("salt"):
        return int(known), "dataset"
    return None, "unknown"


def vllm_result(replies: Sequence[Mapping[str, Any]], spec: Any, *, model: str | None, tokenizer: str | None,
                backend: str, percentiles: Sequence[float] = (50, 90, 99), slo: Mapping[str, float] | None = None,
                retokenized: Mapping[str, int] | None = None, date: str | None = None, input_len: int | None = None,
                metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One level's replies as vLLM's ``--save-result --save-detailed`` dict (vLLM 0.32 key order).

    Args:
        replies: reply dicts of one load level (successful and failed), each with ``_key`` (file stem) when
            ``retokenized`` is given. Sorted here by ``sent_ns`` (send order, as vLLM lists its outputs).
        spec: the level (``LevelSpec``, its ServeConfig JSON or its record ``describe()`` form).
        model: ``model_id``. tokenizer: ``tokenizer_id`` (None → null). backend: ``"openai-chat"`` or
            ``"openai"`` (written to ``backend`` and ``endpoint_type``).
        percentiles: the ``pNN_<metric>_ms`` keys written for ttft, tpot, itl, e2el (vLLM's
            ``--metric-percentiles``; ``99.9`` names ``p99.9_…``).
        slo: goodput limits in ms keyed ``ttft_ms``, ``tpot_ms``, ``e2el_ms`` (vLLM's rule), ``ttfo_ms``,
            ``itl_ms`` (ours); None or empty → ``request_goodput`` null.
        retokenized: re-tokenized output counts by file stem (third N_out source, bench/metrics.py ``n_out``).
        date: ``"%Y%m%d-%H%M%S"``; default now (local time, as vLLM).
        input_len: the dataset's known prompt length in tokens, used when a reply gives none.
        metadata: written under ``"inferencekit"`` (vLLM's ``--metadata`` position), beside this function's own.

    Returns:
        Scalars — ``duration`` s; ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``
        counts; ``request_throughput``, ``request_goodput`` req/s; ``output_throughput``,
        ``total_token_throughput``, ``max_output_tokens_per_s`` tokens/s; ``max_concurrent_requests``.
        Per-request lists in send order — ``input_lens``, ``output_lens`` tokens; ``ttfts``, ``latencies``
        s (reply ``ttft_ms``/``e2el_ms`` ÷ 1000); ``itls`` list of lists, s (reply ``itl_ms`` ÷ 1000);
        ``start_times`` s on ``time.perf_counter``'s clock (``sent_ns`` ÷ 1e9); ``queue_times`` s;
        ``generated_texts``; ``errors`` ("" for success). Statistics — ``mean_/median_/std_/pNN_X_ms`` for X in
        ttft, tpot, itl, e2el, ms. Fill values and nulls: module docstring.
    """
    tr = _traffic(spec)
    retok = retokenized or {}
    pcts = [float(p) for p in percentiles]
    for p in pcts:
        if not 0 <= p <= 100:
            raise ValueError(f"percentile {p} is outside 0..100")
    rows = sorted(replies, key=lambda r: (not isinstance(r.get("sent_ns"), int), r.get("sent_ns") or 0))
    input_lens: list[int | None] = []
    output_lens: list[int | None] = []
    ttfts: list[float] = []
    itls: list[list[float]] = []
    latencies: list[float] = []
    start_times: list[float | None] = []
    queue_times: list[float | None] = []
    texts: list[str] = []
    errors: list[str] = []
    ok_ttft: list[float] = []
    ok_e2el: list[float] = []
    ok_itl: list[float] = []
    tpots: list[float] = []
    peak_rows: list[tuple[float, float, list[float], float]] = []
    n_sources: Counter[str] = Counter()
    in_sources: Counter[str] = Counter()
    completed = good = 0
    total_in: int | None = 0
    total_out: int | None = 0
    slo = dict(slo or {})
    for r in rows:
        sent = r.get("sent_ns")
        start = sent / 1e9 if isinstance(sent, int) else None
        start_times.append(start)
        sched = r.get("scheduled_ns")
        queue_times.append((sent - sched) / 1e9 if tr["mode"] == "open" and isinstance(sched, int)
                           and isinstance(sent, int) else None)
        ilen, isrc = _input_len(r, input_len)
        input_lens.append(ilen)
        gaps = [g / 1000 for g in (r.get("itl_ms") or [])]
        ttft_ms, e2el_ms = r.get("ttft_ms"), r.get("e2el_ms")
        if not is_ok(r) or ttft_ms is None or e2el_ms is None:
            errors.append((r.get("error") or f"HTTP {r.get('status')}") if not is_ok(r) else _NO_TOKEN)
            output_lens.append(0)
            ttfts.append(ttft_ms / 1000 if ttft_ms is not None else 0.0)
            itls.append(gaps)
            latencies.append(0.0)
            texts.append("")
            continue
        completed += 1
        in_sources[isrc] += 1
        n, src = n_out(r, retok.get(str(r.get("_key", ""))))
        n_sources[src or "unknown"] += 1
        ttft, lat = ttft_ms / 1000, e2el_ms / 1000
        errors.append("")
        output_lens.append(n)
        ttfts.append(ttft)
        itls.append(gaps)
        latencies.append(lat)
        texts.append(r.get("text") or "")
        ok_ttft.append(ttft)
        ok_e2el.append(lat)
        ok_itl.extend(gaps)
        if start is not None:
            peak_rows.append((start, ttft, gaps, lat))
        total_in = None if total_in is None or ilen is None else total_in + ilen
        total_out = None if total_out is None or n is None else total_out + n
        tpot = None if n is None else 0.0  # vLLM's all_tpots: 0 for output_len <= 1
        if n is not None and n > 1:
            tpot = (lat - ttft) / (n - 1)
            tpots.append(tpot)
        if slo:
            good += _good(slo, ttft=ttft, tpot=tpot, e2el=lat, ttfo_ms=r.get("ttfo_ms"), itl_s=gaps)
    starts = [s for s in (reply_start_ns(r) for r in rows) if s is not None]
    ends = [e for e in (reply_end_ns(r) for r in rows) if e is not None]
    dur = (max(ends) - min(starts)) / 1e9 if starts and ends and max(ends) > min(starts) else None

    def per_s(x: float | None) -> float | None:
        return None if x is None or not dur else x / dur

    peak_tok, peak_conc = _peaks(*zip(*peak_rows)) if peak_rows else (0.0, 0)
    meta: dict[str, Any] = {
        "level": tr["label"], "mode": tr["mode"], "arrival": tr["arrival"],
        "n_out_sources": dict(n_sources), "input_len_sources": dict(in_sources),
        "duration": "first send → last event of any reply (inferencekit's level window)",
        "unavailable": UNAVAILABLE, **(metadata or {})}
    out: dict[str, Any] = {
        "date": date or _dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend, "backend": backend, "label": tr["label"], "model_id": model,
        "tokenizer_id": tokenizer, "num_prompts": len(rows), "inferencekit": meta,
        "request_rate": tr["request_rate"], "burstiness": tr["burstiness"], "max_concurrency": tr["max_concurrency"],
        **{k: tr[k] for k in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps") if k in tr},
        "duration": dur, "completed": completed, "failed": len(rows) - completed,
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": per_s(completed), "request_goodput": per_s(good) if slo else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(None if total_in is None or total_out is None else total_in + total_out),
        "input_lens": input_lens, "output_lens": output_lens, "ttfts": ttfts, "itls": itls,
        "latencies": latencies, "start_times": start_times, "queue_times": queue_times,
        "generated_texts": texts, "errors": errors,
        "max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_conc, "rtfx": 0.0,
    }
    _stats(out, "ttft", ok_ttft, pcts)
    _stats(out, "tpot", tpots, pcts)
    _stats(out, "itl", ok_itl, pcts)
    _stats(out, "e2el", ok_e2el, pcts)
    return out


def _good(slo: Mapping[str, float], *, ttft: float, tpot: float | None, e2el: float, ttfo_ms: float | None,
          itl_s: Sequence[float]) -> bool:
    """One completed request meets every SLO: ttft, tpot, e2el as vLLM's ``calculate_metrics`` (value in s ≤
    limit ms / 1000; TPOT 0 for output_len ≤ 1); ttfo and itl (max gap) as bench/metrics.py ``meets_slo`` (a
    missing value misses). An unknown N_out (``tpot`` None) misses a TPOT limit."""
    values: dict[str, float | None] = {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el,
                                       "ttfo_ms": None if ttfo_ms is None else ttfo_ms / 1000,
                                       "itl_ms": max(itl_s) if itl_s else None}
    for key, limit_ms in slo.items():
        v = values.get(key)
        if v is None or not limit_ms / 1000 >= v:
            return False
    return True


# ---------------------------------------------------------------- run directories

def bench_record_of(run: RunDir) -> dict[str, Any]:
    """The bench record of a finished ``bench serve`` (or ``verify``) run dir.

    Raises:
        OpError: the run dir holds no bench run, or its run never finished (no record).
    """
    stored = run.read_run()
    rec_id = stored.get("bench_record")
    if not rec_id:
        if stored.get("operation") == "bench.serve":
            raise OpError(f"{str(run.path)!r} holds a bench serve run that did not finish (no bench record); "
                          f"finish it with `inferencekit bench serve --resume {run.path}`")
        raise OpError(f"{str(run.path)!r} is not a bench serve run dir (it holds a "
                      f"{stored.get('operation') or 'unknown'} run with no bench record)")
    rec = read_json(run.evidence_dir / f"{rec_id}.json")
    if not isinstance(rec, dict) or rec.get("kind") != "bench":
        raise OpError(f"{str(run.path)!r}: its bench record evidence/{rec_id}.json is missing or unreadable")
    return rec


def level_problems(rec: dict[str, Any], run: RunDir, engine: str, label: str) -> list[str]:
    """How level ``label``'s files differ from the bench record ``rec`` (``evidence.integrity_problems``: a reply
    added, missing or changed under ``<inputs|outputs>/<engine>/load-<label>/``), and any problem of the record
    itself (its content no longer hashes to its id); [] when they match."""
    here = [f"{kind}/{engine}/load-{label}/" for kind in ("outputs", "inputs")]
    return [p for p in integrity_problems(rec, run.path)
            if not p.startswith(("artifact ", "covered folder")) or any(h in p for h in here)]


def export_targets(labels: Sequence[str], path: str | None, run_path: Path, *, flag: str = "--export-path"
                   ) -> list[tuple[str, Path]]:
    """``(level label, file)`` for each level to write.

    Default ``<run_path>/export/vllm-<label>.json``. ``path`` names the file itself when there is one level;
    ``{level}`` in it is replaced by each label (required for several levels).

    Raises:
        OpError: several levels and a ``path`` without ``{level}``, or a ``path`` that is a directory (the
            message names ``flag``).
    """
    if path is None:
        return [(lb, run_path / "export" / f"vllm-{lb}.json") for lb in labels]
    if len(labels) > 1 and "{level}" not in path:
        raise OpError(f"{flag} {path!r} names one file, but the run has {len(labels)} levels "
                      f"({', '.join(labels)}); put {{level}} in the path (e.g. out-{{level}}.json) or pick a level")
    out = [(lb, Path(path.replace("{level}", lb))) for lb in labels]
    for _, p in out:
        if p.is_dir():
            raise OpError(f"{flag} {str(p)!r} is a directory; give a file path")
    return out


def _backend(replies: Sequence[Mapping[str, Any]]) -> str:
    """``openai`` when every request went to /v1/completions, else ``openai-chat``."""
    eps = {str(r.get("endpoint") or "") for r in replies}
    return "openai" if eps and all(e.endswith("/completions") and not e.endswith("chat/completions")
                                   for e in eps) else "openai-chat"


def _local_date(created_at: Any) -> str | None:
    try:
        return _dt.datetime.fromisoformat(str(created_at)).astimezone().strftime("%Y%m%d-%H%M%S")
    except ValueError:
        return None


def _on_wall(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply's perf_counter stamps (send, schedule, dispatch) moved to the wall clock by its ``clock_offset_ns``."""
    off = reply.get("clock_offset_ns")
    if not isinstance(off, int):
        return reply
    moved = {k: reply[k] + off for k in ("sent_ns", "scheduled_ns", "dispatched_ns") if isinstance(reply.get(k), int)}
    return {**reply, **moved, "clock_offset_ns": 0}


def export_run(run_dir: str | Path, fmt: str = "vllm-json", level: str | None = None, path: str | None = None,
               *, flag: str = "--export-path") -> list[Path]:
    """Write the levels of a finished bench serve run dir in ``fmt``; returns the files written.

    Reads the run's bench record (levels, config, model, re-tokenizer), each level's reply files and
    ``retokenized.json``; writes ``vllm_result`` of each level atomically (``rundir.write_json``), dated by the
    record's ``created_at``. ``level`` picks one level; ``path`` as ``export_targets``.

    Raises:
        OpError: an unknown format or level, not a finished bench run dir, a bad ``path``, a level whose files do
            not match the bench record (``level_problems``: a reply added, removed or edited since the run would be
            exported as if it were the run's), or a file that cannot be written.
    """
    if fmt not in FORMATS:
        raise OpError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if not (Path(run_dir) / "run.json").is_file():
        what = "does not exist" if not Path(run_dir).exists() else "is not a bench serve run dir (no run.json)"
        raise OpError(f"{str(run_dir)!r} {what}")
    run = RunDir(Path(run_dir))
    rec = bench_record_of(run)
    data = rec.get("data") or {}
    cfg = data.get("config") or {}
    specs = {lv["label"]: lv for lv in cfg.get("levels") or []}
    if not specs:
        raise OpError(f"{str(run.path)!r}: its bench record lists no load level")
    if level is not None and level not in specs:
        raise OpError(f"--level {level!r}: the run's levels are {', '.join(specs)}")
    labels = [level] if level is not None else list(specs)
    targets = export_targets(labels, path, run.path, flag=flag)
    engine = data.get("engine_label") or (rec.get("identity") or {}).get("engine", {}).get("engine")
    model = ((rec.get("identity") or {}).get("model") or {}).get("id")
    tokenizer = data.get("retokenizer") or cfg.get("tokenizer")
    known_len = cfg.get("input_len") if cfg.get("dataset") == "random" else None
    from inferencekit import __version__

    for label, _ in targets:
        problems = level_problems(rec, run, str(engine), label)
        if problems:
            raise OpError(f"level {label}: its files do not match the bench record {rec.get('evidence_id')} "
                          f"({problems[0]}{f'; {len(problems) - 1} more' if len(problems) > 1 else ''}); nothing "
                          f"exported. `inferencekit evidence verify {rec.get('evidence_id')}` names every change")
    written = []
    for label, dest in targets:
        replies = [{**r, "_key": p.stem} for p in run.replies(str(engine), label)
                   if isinstance(r := read_json(p), dict)]
        clock = "perf_counter"
        client = read_json(run.level_dir("outputs", str(engine), label) / CLIENT_FILE) or {}
        if len({p.get("host") for p in client.get("processes") or []}) > 1:
            # several hosts (--ray): their perf_counter clocks share no origin; put every stamp on the wall clock
            # (each process's anchor), so start times, order and the per-second peaks compare across hosts
            clock = "wall (several hosts)"
            replies = [_on_wall(r) for r in replies]
        rt = read_json(run.level_dir("outputs", str(engine), label) / RETOKENIZED_FILE) or {}
        result = vllm_result(replies, specs[label], model=model, tokenizer=tokenizer, backend=_backend(replies),
                             slo=cfg.get("slo") or None, retokenized=rt.get("counts"),
                             date=_local_date(rec.get("created_at")), input_len=known_len,
                             metadata={"tool": f"inferencekit {__version__}", "run_dir": str(run.path),
                                       "evidence_id": rec.get("evidence_id"), "verdict": rec.get("verdict"),
                                       "engine": engine, "start_times_clock": clock})
        try:
            write_json(dest, result)
        except OSError as e:
            raise OpError(f"cannot write the export {str(dest)!r}: {e.strerror or e}") from None
        written.append(dest)
    return written
