"""Public request traces (Mooncake, Azure LLM inference, BurstGPT), read into rows a replay can send.

A trace gives, per request, an arrival time and token counts, never the text. ``load_trace`` reads one
file into ``TraceRow``s: ``t_s`` (seconds after the first request kept, ≥ 0, non-decreasing),
``input_len`` and ``output_len`` (tokens), and for Mooncake its ``hash_ids`` (one id per block of
``block_size`` prompt tokens; requests that share an id share that block of tokens). The prompt text is
built elsewhere (``data/trace_blocks.py``).

The formats, as checked against the published files and two peer tools' readers:

- ``mooncake`` — JSON lines ``{"timestamp": 0, "input_length": 6758, "output_length": 500,
  "hash_ids": [0, 1, ..., 13]}``: ``timestamp`` in milliseconds since the trace's start (ties are
  common: many requests share one), ``hash_ids`` one id per 512-token block, the last block partial
  (6758 tokens → ⌈6758/512⌉ = 14 ids). Sources: kvcache-ai/Mooncake ``FAST25-release/README.md`` and
  ``FAST25-release/traces/conversation_trace.jsonl``; ai-dynamo/aiperf
  ``src/aiperf/dataset/loader/mooncake_trace.py`` and ``src/aiperf/dataset/generator/prompt.py``
  (``_build_token_sequence``: the last block is the remainder and must be 1..block_size tokens, i.e.
  exactly ⌈input/block⌉ ids); vllm-project/guidellm ``src/guidellm/data/deserializers/trace_mooncake.py``
  (``_validate_row``: ⌈input/block⌉ must equal the number of ids; block size 512 by default, from the
  Mooncake paper). Other keys (``session_id``, ``delay``, …) are ignored; ``hash_ids`` may be absent
  or null (the row then shares nothing).
- ``azure`` — CSV with header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` a date and
  time, ``2023-11-16 18:17:03.9799600`` (7 fractional digits) in the 2023 files, and
  ``2024-05-10 00:00:00.009930+00:00`` in the 2024 week-long one. Sources: Azure/AzurePublicDataset
  ``data/AzureLLMInferenceTrace_code.csv``, ``AzureLLMInferenceDataset2023.md`` and
  ``AzureLLMInferenceDataset2024.md``. The time is read to the nanosecond without floats; a
  time without an offset is taken as UTC.
- ``burstgpt`` — CSV with header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
  ``Timestamp`` in seconds from 0:00:00 of the first day; rows with ``Response tokens`` 0 are the
  trace's failed requests (its ``*_without_fails_*`` files drop them). Sources: HPMLL/BurstGPT
  ``README.md`` ("Schema", and the list of files); ai-dynamo/aiperf
  ``src/aiperf/dataset/loader/burst_gpt.py`` (needs only ``Timestamp``, ``Request tokens``,
  ``Response tokens``; other columns, such as newer ``Session ID``, are ignored here too).

Rules (every one checked before anything is sent):

- every malformed line raises ``OpError`` as ``path:line: what is wrong`` (bad JSON or CSV, a field
  count that differs from the header's, a missing, negative or non-integer length, a bad timestamp,
  ``hash_ids`` that are not a list of integers, or not ⌈input_length/block_size⌉ of them: too few or
  too many both mean the trace was cut at another block size). A file with no requests is an error;
- rows are **sorted** by time (stably: equal times keep the file's order) rather than refused when out
  of order. Real traces have many equal timestamps and merged logs can be slightly out of order; a
  replay only needs each request's arrival time, and guidellm sorts likewise
  (``trace_common.py``, ``_load_trace_rows``). ``Trace.reordered`` counts the rows that came after a
  later time in the file, so a card can say so;
- rows are **skipped and counted**, not refused, when they cannot or should not be sent:
  ``over_context`` (``input_len + output_len > max_context``: ``fit_context``, which ``bench serve`` calls with the
  server's context per request when the server reports one), ``no_output`` (0 output tokens: BurstGPT's
  failed requests; a request for no tokens cannot be sent), ``no_input`` (0 input tokens). If every row
  is skipped, that is an error;
- ``t_s`` counts from the first row kept, so a replay starts at once; the gaps between kept rows are
  the trace's.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import hashlib
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import orjson

from inferencekit.errors import OpError

__all__ = ["FORMATS", "DEFAULT_BLOCK_SIZE", "SKIP_REASONS", "SAMPLE_FILES", "SAMPLE_BLOCK_SIZE", "TraceRow", "Trace",
           "context_note", "fit_context", "load_trace", "load_sample", "parse_trace", "replay_rate", "scale"]

FORMATS = ("mooncake", "azure", "burstgpt")
DEFAULT_BLOCK_SIZE = 512  # tokens per Mooncake hash id (the Mooncake paper's block size)
SKIP_REASONS = ("over_context", "no_output", "no_input")
# The packaged samples (scripts/make_sample_traces.py), under inferencekit/data/; cut at 64-token blocks.
SAMPLE_FILES = {"mooncake": "traces/mooncake_sample.jsonl", "azure": "traces/azure_sample.csv",
                "burstgpt": "traces/burstgpt_sample.csv"}
SAMPLE_BLOCK_SIZE = 64

_HEADERS = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
            "burstgpt": ("Timestamp", "Request tokens", "Response tokens")}
_AZURE_TIME = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                         r"(Z|[+-][0-9]{2}:?[0-9]{2})?$")
_COUNT = re.compile(r"^[0-9]+$")
_SECONDS = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace.

    Attributes:
        line: its line in the file (1-based; the header is line 1 of a CSV).
        t_s: arrival time in seconds after the first request kept (≥ 0; rows are in time order).
        input_len: prompt tokens (≥ 1).
        output_len: tokens to generate (≥ 1).
        hash_ids: Mooncake block ids, one per ``block_size`` prompt tokens (the last block partial);
            None where the trace has none (Azure, BurstGPT, a Mooncake row without them).
    """

    line: int
    t_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace read and checked: the rows to send, in time order, and what was left out.

    Attributes:
        path: where it was read from (a file path, or ``inferencekit:traces/...`` for a sample).
        format: one of ``FORMATS``.
        rows: the requests kept, sorted by ``t_s``.
        skipped: rows left out, by reason (every key of ``SKIP_REASONS``, 0 when none).
        sha256: of the file's bytes (after gunzip for ``.gz``).
        read: request rows read (kept + skipped).
        reordered: rows that came after a later time in the file (sorted into place).
        block_size: tokens per hash id the ``hash_ids`` were checked against (Mooncake), else None.
        max_context: the context rows were checked against (None: not checked).
    """

    path: str
    format: str
    rows: tuple[TraceRow, ...]
    skipped: dict[str, int]
    sha256: str
    read: int
    reordered: int
    block_size: int | None
    max_context: int | None

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary for a run's record."""
        return {"path": self.path, "format": self.format, "sha256": self.sha256, "requests": len(self.rows),
                "read": self.read, "skipped": dict(self.skipped), "reordered": self.reordered,
                "block_size": self.block_size, "max_context": self.max_context,
                "context_checked": self.max_context is not None,
                "duration_s": self.rows[-1].t_s if self.rows else 0.0,
                "input_tokens": sum(r.input_len for r in self.rows),
                "output_tokens": sum(r.output_len for r in self.rows)}


def context_note(described: Mapping[str, Any]) -> str | None:
    """The limitation line a replay's record carries about the server's context (``Trace.describe``'s dict of a trace
    passed through ``fit_context`` with the server's context, or not): the rows skipped as over it, or that the
    server reported none so nothing was checked; None when every row fits."""
    ctx = described.get("max_context")
    if ctx is None:
        return ("trace replay: the server reports no context length, so the trace's rows were not checked against "
                "it (a row over the server's context fails or is cut there, and counts in the figures)")
    over = (described.get("skipped") or {}).get("over_context") or 0
    if not over:
        return None
    return (f"trace replay: {over} of {described.get('read')} rows were skipped, not sent: their input + output is "
            f"over the server's context of {ctx} tokens per request")


@dataclass(frozen=True, slots=True)
class _Raw:
    """One parsed row before sorting: ``when`` in the format's own unit (ms, ns or s)."""

    line: int
    when: int | float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None


def _fail(where: str, msg: str) -> OpError:
    return OpError(f"{where}: {msg}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_hash_ids(where: str, ids: Any, input_len: int, block_size: int) -> tuple[int, ...] | None:
    if ids is None:
        return None
    if not isinstance(ids, list):
        raise _fail(where, f"'hash_ids' must be a list of integer block ids, got {orjson.dumps(ids).decode()[:80]}")
    for i, b in enumerate(ids):
        if not _is_int(b):
            raise _fail(where, f"'hash_ids'[{i}] must be an integer block id, got {b!r}")
    need = math.ceil(input_len / block_size)
    if len(ids) != need:
        few = "too few" if len(ids) < need else "too many"
        raise _fail(where, f"{few} 'hash_ids': input_length {input_len} at {block_size} tokens per block needs "
                           f"{need} block id(s), the row has {len(ids)} (was the trace cut at another block size? "
                           "see --trace-block-size)")
    return tuple(ids)


def _mooncake_row(where: str, line: int, raw: str, block_size: int, first: bool) -> _Raw:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        other = _guess(_header(raw)) if first else None
        hint = f" (it looks like the header of a {other} trace: --trace-format {other})" if other else ""
        raise _fail(where, f"not valid JSON ({e}){hint}") from None
    if not isinstance(obj, dict):
        raise _fail(where, "each line must be a JSON object")
    if "timestamp" not in obj:
        raise _fail(where, "'timestamp' (milliseconds since the trace's start) is missing")
    ts = obj["timestamp"]
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise _fail(where, f"'timestamp' must be a number of milliseconds ≥ 0, got {ts!r}")
    lengths = []
    for key in ("input_length", "output_length"):
        if key not in obj:
            raise _fail(where, f"'{key}' (tokens) is missing")
        v = obj[key]
        if not _is_int(v) or v < 0:
            raise _fail(where, f"'{key}' must be a non-negative integer (tokens), got {v!r}")
        lengths.append(v)
    ids = _check_hash_ids(where, obj.get("hash_ids"), lengths[0], block_size)
    return _Raw(line, ts, lengths[0], lengths[1], ids)


def _count(where: str, column: str, text: str) -> int:
    v = text.strip()
    if not _COUNT.match(v):
        raise _fail(where, f"{column} must be a non-negative integer (tokens), got {text!r}")
    return int(v)


def _azure_ns(where: str, text: str) -> int:
    m = _AZURE_TIME.match(text.strip())
    try:
        if m is None:
            raise ValueError
        y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
        secs = (dt.datetime(y, mo, d, h, mi, s) - _EPOCH) // dt.timedelta(seconds=1)
    except ValueError:
        raise _fail(where, f"TIMESTAMP {text!r} is not a date and time like 2023-11-16 18:17:03.9799600") from None
    frac = m.group(7) or ""
    offset = m.group(8) or "Z"
    shift = 0
    if offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        hh, mm = int(offset[1:3]), int(offset[-2:])
        shift = sign * (hh * 3600 + mm * 60)
    return (secs - shift) * 1_000_000_000 + int(frac.ljust(9, "0"))


def _burst_seconds(where: str, text: str) -> float:
    v = text.strip()
    if not _SECONDS.match(v):
        raise _fail(where, f"Timestamp must be a number of seconds ≥ 0, got {text!r}")
    return float(v)


def _header(text: str) -> list[str]:
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return []


def _guess(header: Sequence[str]) -> str | None:
    names = {h.strip() for h in header}
    return next((f for f, need in _HEADERS.items() if set(need) <= names), None)


def _csv_rows(fmt: str, lines: list[tuple[int, str]], source: str) -> list[_Raw]:
    if not lines:
        return []
    first_no, first = lines[0]
    header = _header(first)
    need = _HEADERS[fmt]
    names = [h.strip() for h in header]
    missing = [n for n in need if n not in names]
    if missing:
        other = _guess(header)
        if other is None and first.lstrip().startswith("{"):
            other = "mooncake"
        hint = f" (it looks like a {other} trace: --trace-format {other})" if other and other != fmt else ""
        article = "an" if fmt[0] in "aeiou" else "a"
        raise _fail(f"{source}:{first_no}", f"{article} {fmt} trace starts with a header naming "
                                            f"{', '.join(need)}; this one lacks {', '.join(missing)}{hint}")
    col = {n: names.index(n) for n in need}
    out = []
    for n, text in lines[1:]:
        where = f"{source}:{n}"
        try:
            fields = next(csv.reader([text], strict=True))
        except csv.Error as e:
            raise _fail(where, f"not a valid CSV row ({e})") from None
        if len(fields) != len(names):
            raise _fail(where, f"{len(fields)} field{'' if len(fields) == 1 else 's'}, the header has {len(names)}")
        if fmt == "azure":
            when: int | float = _azure_ns(where, fields[col["TIMESTAMP"]])
            inp = _count(where, "ContextTokens", fields[col["ContextTokens"]])
            outp = _count(where, "GeneratedTokens", fields[col["GeneratedTokens"]])
        else:
            when = _burst_seconds(where, fields[col["Timestamp"]])
            inp = _count(where, "Request tokens", fields[col["Request tokens"]])
            outp = _count(where, "Response tokens", fields[col["Response tokens"]])
        out.append(_Raw(n, when, inp, outp, None))
    return out


def _text_lines(data: bytes, source: str) -> list[tuple[int, str]]:
    """Non-blank lines as ``(line number, text)``; a UTF-8 BOM at the start is dropped."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise _fail(f"{source}:{n}", "not UTF-8 text") from None
        if text.strip():
            out.append((n, text))
    return out


_UNIT_S: dict[str, Callable[[int | float], float]] = {
    "mooncake": lambda d: d / 1000.0, "azure": lambda d: d / 1e9, "burstgpt": float}


def _check_args(fmt: str, block_size: int, max_context: int | None) -> None:
    if fmt not in FORMATS:
        raise OpError(f"trace format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not _is_int(block_size) or block_size < 1:
        raise OpError(f"trace block size must be a positive integer (tokens), got {block_size!r}")
    if max_context is not None and (not _is_int(max_context) or max_context < 1):
        raise OpError(f"trace max context must be a positive integer (tokens), got {max_context!r}")


def parse_trace(data: bytes, fmt: str, source: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
                max_context: int | None = None) -> Trace:
    """Read a trace's bytes (see the module docstring for the formats and rules).

    Args:
        data: the file's bytes (already gunzipped).
        fmt: ``mooncake``, ``azure`` or ``burstgpt``.
        source: the name errors and ``Trace.path`` give (a path).
        block_size: tokens per Mooncake hash id (checked against every row's ``hash_ids``; unused otherwise).
        max_context: rows with ``input_len + output_len`` above it are skipped (``over_context``); None: no check.

    Returns:
        The ``Trace``: rows sorted by time, ``t_s`` from the first row kept, skipped rows counted.

    Raises:
        OpError: bad arguments; the first malformed line, as ``source:line: what is wrong``; no requests;
            every request skipped.
    """
    _check_args(fmt, block_size, max_context)
    lines = _text_lines(data, source)
    if fmt == "mooncake":
        raws = [_mooncake_row(f"{source}:{n}", n, text, block_size, i == 0) for i, (n, text) in enumerate(lines)]
    else:
        raws = _csv_rows(fmt, lines, source)
    if not raws:
        raise OpError(f"trace {source!r} holds no requests")
    reordered, latest = 0, raws[0].when
    for r in raws:
        if r.when < latest:
            reordered += 1
        latest = max(latest, r.when)
    ordered = sorted(raws, key=lambda r: r.when)  # stable: equal times keep the file's order
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    kept: list[_Raw] = []
    for r in ordered:
        if r.input_len == 0:
            skipped["no_input"] += 1
        elif r.output_len == 0:
            skipped["no_output"] += 1
        else:
            kept.append(r)
    if not kept:
        _all_skipped(source, len(raws), skipped, None)
    to_s = _UNIT_S[fmt]
    origin = kept[0].when
    rows = tuple(TraceRow(r.line, to_s(r.when - origin), r.input_len, r.output_len, r.hash_ids) for r in kept)
    trace = Trace(path=source, format=fmt, rows=rows, skipped=skipped, sha256=hashlib.sha256(data).hexdigest(),
                  read=len(raws), reordered=reordered, block_size=block_size if fmt == "mooncake" else None,
                  max_context=None)
    return fit_context(trace, max_context)


def _all_skipped(source: str, read: int, skipped: dict[str, int], context: int | None) -> NoReturn:
    why = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in skipped.items() if v)
    ctx = f" (context {context} tokens)" if context is not None else ""
    raise OpError(f"trace {source!r}: all {read} requests were skipped: {why}{ctx}")


def fit_context(trace: Trace, context: int | None) -> Trace:
    """The trace without the rows a server of ``context`` tokens per request cannot serve whole (pure).

    A row whose ``input_len + output_len`` exceeds ``context`` cannot be replayed honestly: its prompt would be
    refused or its output cut, so it is skipped and counted (``skipped["over_context"]``), never sent. ``t_s``
    then counts from the first row kept (a replay starts at once; the gaps between kept rows stay the trace's).

    Args:
        trace: a trace as read (``parse_trace``); rows already checked against a context are checked again.
        context: tokens one request may use (prompt + output), e.g. ``api/detect.py`` ``EngineInfo.context_tokens``;
            None: nothing is checked (the trace is returned as it is).

    Returns:
        The ``Trace`` with ``rows`` filtered, ``skipped["over_context"]`` increased by the rows dropped here, and
        ``max_context`` = ``context``.

    Raises:
        OpError: ``context`` is not a positive integer, or every row of the trace is skipped (the message counts
            each reason and names the context).
    """
    if context is None:
        return trace
    _check_args(trace.format, trace.block_size or DEFAULT_BLOCK_SIZE, context)
    kept = [r for r in trace.rows if r.input_len + r.output_len <= context]
    skipped = {**trace.skipped, "over_context": trace.skipped.get("over_context", 0) + len(trace.rows) - len(kept)}
    if not kept:
        _all_skipped(trace.path, trace.read, skipped, context)
    origin = kept[0].t_s
    rows = tuple(replace(r, t_s=r.t_s - origin) for r in kept) if origin else tuple(kept)
    return replace(trace, rows=rows, skipped=skipped, max_context=context)


def replay_rate(rows: Sequence[TraceRow]) -> float:
    """The mean arrival rate of ``rows`` in requests/s: rows ÷ the span from the first time to the last (all the
    rows at once: as many per second as there are rows). The open-loop level's ``rate``, by which the client's send
    lateness is judged (``bench/pace_judge.py``).

    Raises:
        OpError: no rows.
    """
    if not rows:
        raise OpError("a trace replay needs at least one request")
    span = rows[-1].t_s - rows[0].t_s
    return len(rows) / span if span > 0 else float(len(rows))


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise OpError(f"cannot read trace file {str(path)!r}: {e}") from None
    return data


def load_trace(path: str | Path, fmt: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
               max_context: int | None = None) -> Trace:
    """Read and check a trace file (``.gz`` is gunzipped); see ``parse_trace``.

    Raises:
        OpError: not a file, unreadable, or anything ``parse_trace`` raises.
    """
    _check_args(fmt, block_size, max_context)
    p = Path(path)
    if not p.is_file():
        raise OpError(f"trace file {str(path)!r} does not exist or is not a file")
    return parse_trace(_read(p), fmt, str(path), block_size=block_size, max_context=max_context)


def load_sample(fmt: str, *, block_size: int = SAMPLE_BLOCK_SIZE, max_context: int | None = None) -> Trace:
    """The packaged sample trace of ``fmt`` (``SAMPLE_FILES``; Mooncake's is cut at 64-token blocks).

    Raises:
        OpError: as ``parse_trace``.
    """
    _check_args(fmt, block_size, max_context)
    ref = resources.files("inferencekit.data").joinpath(SAMPLE_FILES[fmt])
    with resources.as_file(ref) as p:
        data = _read(Path(p))
    return parse_trace(data, fmt, f"inferencekit:{SAMPLE_FILES[fmt]}", block_size=block_size,
                       max_context=max_context)


def scale(rows: Iterable[TraceRow], time_scale: float) -> tuple[TraceRow, ...]:
    """The rows with every ``t_s`` multiplied by ``time_scale`` (0.5: the trace replayed twice as fast).

    Raises:
        OpError: ``time_scale`` is not a finite number > 0.
    """
    if (not isinstance(time_scale, int | float) or isinstance(time_scale, bool) or not math.isfinite(time_scale)
            or time_scale <= 0):
        raise OpError(f"trace time scale must be a finite number > 0 (0.5 replays twice as fast), got {time_scale!r}")
    return tuple(replace(r, t_s=r.t_s * time_scale) for r in rows)
