"""A finished bench serve run as two tables, per request and per level, in CSV or Parquet (``bench export``).

``requests`` has one row per reply file of every load level (``outputs/<engine>/load-<label>/<bucket>/<key>.json``);
``levels`` one row per level, flattened from the bench record's ``data.levels[label]``. Both are built with pandas
and written with pandas (``DataFrame.to_csv``; ``DataFrame.to_parquet`` through pyarrow), the ``parquet`` extra
(``pip install 'inferencekit[parquet]'``). Load one with ``pandas.read_parquet(path)`` or ``pandas.read_csv(path)``.

Every measured column names its unit as its suffix: ``_ms``, ``_s``, ``_tok_s`` (tokens/s), ``_req_s``
(requests/s), ``_tokens``, ``_requests`` (a count of requests), ``_count`` (a count of anything else: gaps,
samples, processes), ``_fraction`` (0..1). Labels (``level``, ``point``, ``key``, ``mode``, ...), codes
(``http_status``) and dimensionless settings (``repeat``, ``burstiness``) carry none.

Per-request columns (``request_row``): the figures are the reply file's own (definitions in
``bench/manifest.py``); ``completed`` follows ``bench/metrics.py`` (HTTP 200, no recorded error, at least one
token event), ``tpot_ms`` is ``bench/metrics.py``'s per-request TPOT ((E2EL − TTFT) / (N_out − 1), N_out ≥ 2) of
a completed reply, and ``output_tokens`` is N_out with its source (``shapes.n_out``: usage, else the streamed
count, else the re-tokenized count). ``start_s`` is the send time in seconds after the run's first send (every
level, whatever ``--level`` picks), on the client's ``time.perf_counter`` clock (CLOCK_MONOTONIC on Linux: one
origin for every process of a machine, so a resumed run keeps one timeline) or, for replies of client processes
(``--workers``, ``--ray``), on the wall clock through each reply's ``clock_offset_ns`` (``shapes.reply_start_ns``).

Per-level columns (``level_row``, ``flatten_figures``): the level's spec, then every number and flag of its record
entry, named by a generic rule so figures added to the record later appear without a code change: the keys on
the path are joined with ``_``; the unit suffix of the deepest key that has one moves to the end
(``ttft_ms.p50`` → ``ttft_p50_ms``); a parent key that the rest of the name already says is dropped
(``throughput.request_throughput_req_s`` → ``request_throughput_req_s``); a summary's sample count ``n`` is
``<metric>_count``; the leaves under ``requests`` and ``n_out`` are counts of requests; an interval
(``…_ci95``: ``[lo, hi]`` or null) gives ``…_lo_<unit>`` and ``…_hi_<unit>``; another list of at most
``MAX_LIST`` numbers one column per element (``_0``, ``_1``, …). Strings and longer lists are left out (the record
keeps them). A few record keys whose words would mislead the rule are named in ``_RENAMED``. Flags (true/false)
and dimensionless statistics (Kendall's τ, a p-value) carry no unit. The server telemetry block's families keep
the engine's own metric name and take a unit only from the block's ``unit`` field (``_UNIT_FIELD``). The figures
are the record's, not recomputed.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.extras import require_extra
from inferencekit.report.export_vllm import bench_record_of, level_problems
from inferencekit.rundir import RETOKENIZED_FILE, RunDir, read_json
from inferencekit.shapes import is_ok, n_out, reply_start_ns

__all__ = ["FORMATS", "MAX_LIST", "REQUEST_COLUMNS", "check_table_format", "completed", "export_tables",
           "flatten_figures", "level_row", "request_row", "spec_columns", "table_frames", "table_targets"]

FORMATS = ("csv", "parquet")
MAX_LIST = 4  # longer lists in a level's record are distributions, not figures

# (column, pandas dtype) of the requests table, in order; "Int64" is pandas' nullable integer
REQUEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("level", "str"), ("point", "str"), ("repeat", "Int64"), ("key", "str"), ("bucket", "str"),
    ("request_id", "str"), ("endpoint", "str"), ("http_status", "Int64"), ("completed", "bool"), ("error", "str"),
    ("finish_reason", "str"), ("salt", "str"), ("start_s", "float64"), ("send_lag_ms", "float64"),
    ("ttft_ms", "float64"), ("ttfo_ms", "float64"), ("tpot_ms", "float64"), ("e2el_ms", "float64"),
    ("itl_count", "Int64"), ("itl_mean_ms", "float64"), ("itl_max_ms", "float64"), ("prompt_tokens", "Int64"),
    ("output_tokens", "Int64"), ("output_tokens_source", "str"),
)

_UNITS = ("_tok_s", "_req_s", "_ms", "_ns", "_s", "_tokens", "_requests", "_fraction", "_count", "_bytes", "_mb",
          "_kib")
# a block that says its unit in a "unit" field (a server histogram: bench/telemetry_judge.py writes "s" for a
# `_seconds` family): its figures take that unit. Nothing else is read from a Prometheus family's name: engines do
# not keep the convention (llama-server's `llamacpp:prompt_tokens_seconds` gauge is tokens/s, its HELP says)
_UNIT_FIELD = {"s": "_s", "ms": "_ms", "tokens": "_tokens", "bytes": "_bytes"}
# leaves under these containers count what the container names (nearest container wins)
_COUNT_CONTAINERS = {"requests": "_requests", "n_out": "_requests", "per_request": "_requests", "tokens": "_tokens"}
_SKIP = {("requests", "errors"), ("spec",)}  # error texts as keys; the spec has its own columns
_RENAMED = {("requests", "no_tokens"): "no_token_requests",  # a count of requests, not of tokens
            ("requests", "transport_failures"): "transport_failed_requests",
            ("throughput", "output_tokens"): "output_tokens", ("throughput", "prompt_tokens"): "prompt_tokens",
            ("client", "processes"): "client_processes_count", ("client", "kib_per_stream"): "client_per_stream_kib",
            ("window", "first_wave"): "window_first_wave_requests",
            # the server block (bench/telemetry_judge.py): scrape counts, and counts of requests in a token block
            ("server", "scrapes"): "server_scrapes_count", ("server", "ok"): "server_ok_scrapes_count",
            ("server", "failed"): "server_failed_scrapes_count", ("tokens", "straddling"): "tokens_straddling_requests",
            ("client", "requests"): "client_requests", ("client", "no_usage"): "client_no_usage_requests",
            ("client", "no_streamed"): "client_no_streamed_requests",
            ("per_request", "prefill_share_mean"): "per_request_prefill_share_mean_fraction"}
# a confidence interval or a histogram bucket, [lo, hi] (or null): columns ..._lo_<unit>, ..._hi_<unit>
_INTERVAL = re.compile(r"(^|_)(ci\d*|bucket)$")
_LEAD = ("requests", "window_s", "throughput", "goodput", "ttft_ms", "ttfo_ms", "tpot_ms", "itl_ms", "e2el_ms")
_LABELS = {"level": "str", "point": "str", "mode": "str", "arrival": "str", "repeat": "Int64"}
_SPEC_RENAMED = {"concurrency": "concurrency_requests", "max_concurrency": "max_concurrency_requests"}


# ---------------------------------------------------------------- pure: rows


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def completed(reply: Mapping[str, Any]) -> bool:
    """``bench/metrics.py``'s rule: HTTP 200 with no recorded error (``shapes.is_ok``) and at least one token event
    (not ``no_tokens``, not ``chunks`` 0)."""
    return is_ok(reply) and not (reply.get("no_tokens") is True or reply.get("chunks") == 0)


def request_row(reply: Mapping[str, Any], spec: Mapping[str, Any], *, origin_ns: int | None,
                retokenized: int | None = None) -> dict[str, Any]:
    """One reply file as a row of the requests table (columns ``REQUEST_COLUMNS``).

    Args:
        reply: the reply dict, with ``_key`` (its file stem). Every field is untrusted: a value of the wrong type is
            written as missing, never raised.
        spec: the level's record ``spec`` (``LevelSpec.describe()``: ``label``, ``point``, ``repeat``, ``mode``).
        origin_ns: the run's first send (``shapes.reply_start_ns``, ns); None → ``start_s`` missing.
        retokenized: this reply's re-tokenized output count (``retokenized.json``), the third N_out source.

    Returns:
        ``start_s`` s after ``origin_ns``; ``send_lag_ms`` = sent − scheduled (open loop only, else None);
        ``ttft_ms``, ``ttfo_ms``, ``e2el_ms`` the reply's; ``tpot_ms`` (completed replies with N_out ≥ 2);
        ``itl_count``, ``itl_mean_ms``, ``itl_max_ms`` over the reply's ``itl_ms`` gaps; ``prompt_tokens``
        (``usage.prompt_tokens``); ``output_tokens`` N_out and ``output_tokens_source``.
    """
    sent = reply_start_ns(reply) if isinstance(reply.get("sent_ns"), int) else None
    sched, sent_raw = _int(reply.get("scheduled_ns")), _int(reply.get("sent_ns"))
    lag = (sent_raw - sched) / 1e6 if spec.get("mode") == "open" and sched is not None and sent_raw is not None \
        else None
    raw_gaps = reply.get("itl_ms")
    gaps = [g for g in (_num(x) for x in raw_gaps) if g is not None] if isinstance(raw_gaps, list) else []
    usage: Mapping[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
    n, src = n_out({**reply, "usage": usage}, retokenized)  # a usage of the wrong type is no usage
    done = completed(reply)
    ttft, e2el = _num(reply.get("ttft_ms")), _num(reply.get("e2el_ms"))
    tpot = (e2el - ttft) / (n - 1) if done and n is not None and n >= 2 and ttft is not None and e2el is not None \
        else None  # bench/metrics.py _tpot_ms
    return {
        "level": str(spec.get("label")), "point": str(spec.get("point") or spec.get("label")),
        "repeat": _int(spec.get("repeat")) or 0, "key": str(reply.get("_key", "")), "bucket": _str(reply.get("bucket")),
        "request_id": _str(reply.get("request_id")), "endpoint": _str(reply.get("endpoint")),
        "http_status": _int(reply.get("status")), "completed": done, "error": _str(reply.get("error")),
        "finish_reason": _str(reply.get("finish_reason")), "salt": _str(reply.get("salt")),
        "start_s": (sent - origin_ns) / 1e9 if sent is not None and origin_ns is not None else None,
        "send_lag_ms": lag, "ttft_ms": ttft, "ttfo_ms": _num(reply.get("ttfo_ms")), "tpot_ms": tpot, "e2el_ms": e2el,
        "itl_count": len(gaps), "itl_mean_ms": sum(gaps) / len(gaps) if gaps else None,
        "itl_max_ms": max(gaps) if gaps else None, "prompt_tokens": _int(usage.get("prompt_tokens")),
        "output_tokens": n, "output_tokens_source": src,
    }


def _unit_of(key: str) -> tuple[str, str] | None:
    """``(key without its unit, unit suffix)`` when ``key`` ends in one of ``_UNITS``."""
    u = next((u for u in _UNITS if key.endswith(u) and len(key) > len(u)), None)
    return (key[: -len(u)], u) if u else None


def _leaves(d: Mapping[str, Any], path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in d.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z0-9_.:\-]+", k):
            continue  # free text used as a key (an error message): not a column
        p = (*path, k)
        if p in _SKIP or isinstance(v, str) or k == "unit":  # a "unit" leaf is said in the column's name
            continue
        if isinstance(v, Mapping):
            unit = _UNIT_FIELD.get(str(v.get("unit")))
            yield from _leaves(v, (*path, k + unit) if unit and _unit_of(k) is None else p)
        elif _INTERVAL.search(k) and (v is None or isinstance(v, list) and len(v) == 2):
            lo, hi = v or (None, None)
            yield (*p, "lo"), lo
            yield (*p, "hi"), hi
        elif isinstance(v, list):
            if len(v) <= MAX_LIST and all(_num(x) is not None or x is None for x in v):
                for i, x in enumerate(v):
                    yield (*p, str(i)), x
        elif v is None or isinstance(v, bool) or _num(v) is not None:
            yield p, v


def _column(path: tuple[str, ...]) -> str:
    """The column name of one figure's key path (the rule in the module docstring)."""
    tail = (path[-2], path[-1]) if len(path) > 1 else None
    if tail in _RENAMED:
        return "_".join([*(re.sub(r"[^A-Za-z0-9_]", "_", k) for k in path[:-2]), _RENAMED[tail]])
    raw = list(path)
    unit = ""
    if raw[-1] in ("n", "count") and len(raw) > 1:  # a summary's or a histogram's sample count
        raw = [r[0] if (r := _unit_of(k)) else k for k in raw[:-1]]
        unit = "_count"
    else:
        for i in range(len(raw) - 1, -1, -1):
            if (found := _unit_of(raw[i])) is not None:
                raw[i], unit = found
                break
    parts = [re.sub(r"[^A-Za-z0-9_]", "_", k) for k in raw]
    if not unit:
        # the nearest container that says what its leaves count
        at = next((i for i in range(len(parts) - 2, -1, -1) if parts[i] in _COUNT_CONTAINERS), None)
        if at is not None:
            unit = _COUNT_CONTAINERS[parts[at]]
            if parts[at] == unit[1:]:
                parts = parts[:at] + parts[at + 1:]
    # drop a parent that its child already says (throughput.request_throughput → request_throughput)
    kept = [p for i, p in enumerate(parts) if i == len(parts) - 1 or f"_{p}_" not in f"_{parts[i + 1]}_"]
    return "_".join(kept) + unit


def flatten_figures(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Every numeric figure and flag (null included) of one level's record entry, as ``{column: value}``: the
    headline sections first (``_LEAD``: requests, window, throughput, goodput, TTFT, TTFO, TPOT, ITL, E2EL), then
    the others in record order.

    Two paths that would give one name keep their full path joined with ``_`` (the later one), so no figure is lost.
    """
    out: dict[str, Any] = {}
    ordered = {**{k: entry[k] for k in _LEAD if k in entry}, **entry}
    for path, v in _leaves(ordered, ()):
        name = _column(path)
        if name in out:
            name = "_".join(re.sub(r"[^A-Za-z0-9_]", "_", k) for k in path)
        out[name] = v
    return out


def level_row(label: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One level of the bench record (``data.levels[label]``) as a row: ``spec_columns``, then
    ``flatten_figures(entry)``."""
    return {**spec_columns(label, entry), **flatten_figures(entry)}


def spec_columns(label: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """``level``, ``point``, ``repeat``, ``mode``, ``arrival`` and the spec's numbers (``concurrency_requests``,
    ``rate_req_s``, ``burstiness``, ``max_concurrency_requests``, any a later spec adds) of one level's entry; a
    ramp-up level adds ``ramp_up_strategy`` (its ``rate_req_s`` is the ramp's end, ``ramp_up_end_rps``)."""
    spec: Mapping[str, Any] = entry["spec"] if isinstance(entry.get("spec"), Mapping) else {}
    row: dict[str, Any] = {"level": label, "point": str(spec.get("point") or label),
                           "repeat": _int(spec.get("repeat")) or 0, "mode": _str(spec.get("mode")),
                           "arrival": _str(spec.get("arrival"))}
    for k, v in spec.items():
        if k not in ("label", "point", "repeat", "mode", "arrival") and (v is None or _num(v) is not None):
            row[_SPEC_RENAMED.get(k, k)] = v
    if spec.get("ramp_up_strategy"):  # a ramp-up level: rate_req_s is where the ramp ends (ramp_up_end_rps)
        row["ramp_up_strategy"] = _str(spec["ramp_up_strategy"])
    return row


# ---------------------------------------------------------------- I/O: the run dir and the files


def check_table_format(fmt: str, flag: str = "--format") -> None:
    """Refuse ``fmt`` (csv, parquet) when the ``parquet`` extra it writes with is missing: pandas, and pyarrow for
    Parquet. Called with the flag checks (``bench export --format``, ``bench serve --export``): nothing is imported.

    Raises:
        OpError: a module missing (``extras.require_extra``: ``pip install 'inferencekit[parquet]' (or make venv)``).
    """
    require_extra("parquet", f"{flag} {fmt}", ("pandas", "pyarrow") if fmt == "parquet" else ("pandas",))


def _pandas(fmt: str) -> Any:
    check_table_format(fmt)
    import pandas as pd

    return pd


def _frame(pd: Any, rows: Sequence[Mapping[str, Any]], dtypes: Mapping[str, str], first: Sequence[str] = ()) -> Any:
    """A DataFrame of ``rows`` (columns ``first``, then in first-seen order); a column's dtype from ``dtypes``, else
    flags as nullable ``boolean``, integers as nullable ``Int64`` and other numbers (or a column null throughout) as
    ``float64``."""
    cols: dict[str, None] = dict.fromkeys(first)
    for r in rows:
        cols.update(dict.fromkeys(r))
    series = {}
    for c in cols:
        vals = [r.get(c) for r in rows]
        known = [v for v in vals if v is not None]
        if c in dtypes:
            dtype: str | None = dtypes[c]
        elif known and all(isinstance(v, bool) for v in known):
            dtype = "boolean"
        elif known and all(_int(v) is not None for v in known):
            dtype = "Int64"
        elif all(_num(v) is not None for v in known):
            dtype = "float64"
        else:
            dtype = None
        series[c] = pd.Series(vals, dtype=dtype)
    return pd.DataFrame(series, columns=list(cols))


def table_frames(run_dir: str | Path, level: str | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """``(requests, levels, about)``: the two DataFrames of a finished bench serve run dir, and what they came from
    (``run_dir``, ``evidence_id``, ``engine``, ``levels``).

    ``level`` keeps one level, or every repeat of one load point (its ``point`` label). Reads the bench record
    (``export_vllm.bench_record_of``), each level's reply files (``RunDir.replies``) and ``retokenized.json``.

    Raises:
        OpError: no run dir, not a finished bench serve run, an unknown level, a level whose files no longer match
            the bench record (``export_vllm.level_problems``), or pandas missing.
    """
    pd = _pandas("csv")
    if not (Path(run_dir) / "run.json").is_file():
        what = "does not exist" if not Path(run_dir).exists() else "is not a bench serve run dir (no run.json)"
        raise OpError(f"{str(run_dir)!r} {what}")
    run = RunDir(Path(run_dir))
    rec = bench_record_of(run)
    data = rec.get("data") or {}
    entries: dict[str, Any] = data["levels"] if isinstance(data.get("levels"), dict) else {}
    labels = [str(lv.get("label")) for lv in (data.get("config") or {}).get("levels") or [] if isinstance(lv, dict)]
    labels = [lb for lb in labels if lb in entries] + [lb for lb in entries if lb not in labels]
    if not labels:
        raise OpError(f"{str(run.path)!r}: its bench record lists no load level")

    def point(lb: str) -> str:
        spec = entries[lb].get("spec") or {}
        return str(spec.get("point") or lb)

    chosen = labels if level is None else [lb for lb in labels if level in (lb, point(lb))]
    if not chosen:
        raise OpError(f"--level {level!r}: the run's levels are {', '.join(labels)}"
                      + (f" (load points {', '.join(dict.fromkeys(map(point, labels)))})"
                         if any(point(lb) != lb for lb in labels) else ""))
    engine = str(data.get("engine_label") or (rec.get("identity") or {}).get("engine", {}).get("engine"))
    for label in chosen:
        problems = level_problems(rec, run, engine, label)
        if problems:
            raise OpError(f"level {label}: its files do not match the bench record {rec.get('evidence_id')} "
                          f"({problems[0]}{f'; {len(problems) - 1} more' if len(problems) > 1 else ''}); nothing "
                          f"exported. `inferencekit evidence verify {rec.get('evidence_id')}` names every change")
    replies: dict[str, list[dict[str, Any]]] = {}
    for label in labels:  # every level: start_s counts from the run's first send, whatever --level picks
        replies[label] = [{**r, "_key": p.stem} for p in run.replies(engine, label)
                          if isinstance(r := read_json(p), dict)]
    starts = [s for rs in replies.values() for r in rs if isinstance(r.get("sent_ns"), int)
              and (s := reply_start_ns(r)) is not None]
    origin = min(starts) if starts else None
    rows: list[dict[str, Any]] = []
    for label in chosen:
        spec = {**(entries[label].get("spec") or {}), "label": label}
        rt = read_json(run.level_dir("outputs", engine, label) / RETOKENIZED_FILE)
        counts: dict[str, Any] = rt["counts"] if isinstance(rt, dict) and isinstance(rt.get("counts"), dict) else {}
        for r in sorted(replies[label], key=lambda r: (_int(r.get("sent_ns")) is None, r.get("sent_ns") or 0,
                                                       r["_key"])):
            rows.append(request_row(r, spec, origin_ns=origin, retokenized=_int(counts.get(r["_key"]))))
    requests = _frame(pd, rows, dict(REQUEST_COLUMNS)) if rows else pd.DataFrame(
        {c: pd.Series(dtype=t) for c, t in REQUEST_COLUMNS})
    first = [c for lb in chosen for c in spec_columns(lb, entries[lb])]
    levels = _frame(pd, [level_row(lb, entries[lb]) for lb in chosen], _LABELS, first=list(dict.fromkeys(first)))
    about = {"run_dir": str(run.path), "evidence_id": rec.get("evidence_id"), "engine": engine, "levels": chosen}
    return requests, levels, about


def table_targets(output: str | None, run_path: Path, fmt: str) -> tuple[Path, Path]:
    """``(requests file, levels file)``. Default ``<run>/export/requests.<ext>`` and ``levels.<ext>``; ``output`` an
    existing directory or one ending in ``/`` → the same names inside it; else a prefix: ``results/run1`` →
    ``results/run1-requests.<ext>`` (no ``-`` added after a prefix ending in ``-``, ``_`` or ``.``).

    Raises:
        OpError: ``output`` names an existing file (a prefix is not a file).
    """
    ext = {"csv": "csv", "parquet": "parquet"}[fmt]
    if output is None:
        base = run_path / "export"
        return base / f"requests.{ext}", base / f"levels.{ext}"
    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        return Path(output) / f"requests.{ext}", Path(output) / f"levels.{ext}"
    if Path(output).is_file():
        raise OpError(f"--output {output!r} is a file; with --format {fmt} give a directory or a prefix (two tables "
                      f"are written: <prefix>-requests.{ext} and <prefix>-levels.{ext})")
    sep = "" if output.endswith(("-", "_", ".")) else "-"
    return Path(f"{output}{sep}requests.{ext}"), Path(f"{output}{sep}levels.{ext}")


def _write(df: Any, dest: Path, fmt: str) -> None:
    """Write atomically: a temporary file beside ``dest``, then ``os.replace``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False, engine="pyarrow")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export_tables(run_dir: str | Path, fmt: str, level: str | None = None, output: str | None = None) -> list[Path]:
    """Write the requests and levels tables of a finished bench serve run dir in ``fmt`` (csv or parquet); returns
    ``[requests file, levels file]`` (``table_targets``).

    Raises:
        OpError: an unknown format, pandas or pyarrow missing (the message names the extra), anything
            ``table_frames`` refuses, or a file that cannot be written.
    """
    if fmt not in FORMATS:
        raise OpError(f"unknown table format {fmt!r}; known: {', '.join(FORMATS)}")
    _pandas(fmt)
    requests, levels, about = table_frames(run_dir, level)
    targets = table_targets(output, Path(about["run_dir"]), fmt)
    for df, dest in zip((requests, levels), targets):
        df.attrs.update({"inferencekit": {k: about[k] for k in ("run_dir", "evidence_id", "engine")}})
        try:
            _write(df, dest, fmt)
        except OSError as e:
            raise OpError(f"cannot write the export {str(dest)!r}: {e.strerror or e}") from None
    return list(targets)
