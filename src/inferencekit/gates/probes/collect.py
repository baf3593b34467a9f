"""Send the live probes and keep every reply on disk (collect; the judging is in ``gates/judges/``).

A gate run writes ``probes/<gate-run>.jsonl`` (docs/design.md, run directory): a header line
``{"gate_run", "settings", ...}`` and then one line per finished probe — the probe as planned
(``id``, ``kind``, ``key``, ``meta``, ``endpoint``, ``body``) with its whole reply file under
``reply`` (every SSE payload with its receive time), so ``gates check`` re-judges it with the same
code. A line is written and synced as soon as its probe ends; a torn last line (the process died
while writing) is skipped on reading. Probes go one at a time (concurrency 1) through the
foundation's client; a refused or broken probe is recorded like any other.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import orjson

from inferencekit.api.client import Client
from inferencekit.api.tokenize import TokenizeError, Tokenizer
from inferencekit.gates.inputs import reply_file
from inferencekit.redact import scrub
from inferencekit.shapes import ProbeRecord, generated_text, is_ok

__all__ = ["ProbeLog", "read_probe_log", "send_probes", "retokenize_probes"]


class ProbeLog:
    """Append-only ``probes/<gate-run>.jsonl``; the header is written on creation."""

    def __init__(self, path: Path, header: Mapping[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")  # noqa: SIM115 - held open for the gate run, closed by close()
        if self._fh.tell() == 0:
            self._write(header)

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._fh.write(scrub(orjson.dumps(obj)) + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one finished probe, or the re-tokenized counts (as a single line, synced)."""
        self._write(record)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ProbeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log_lines(path: Path) -> tuple[list[bytes], int]:
    """The lines of a probe log (``.jsonl``, or gzipped ``.jsonl.gz``), and 1 when a gzipped one ends damaged or
    cut short (the lines before the damage are kept), else 0."""
    if not path.name.endswith(".gz"):
        with open(path, "rb") as fh:
            return fh.read().splitlines(), 0
    dec = zlib.decompressobj(wbits=47)  # a gzip (or zlib) header; stops where the data does
    parts: list[bytes] = []
    damaged = False
    with open(path, "rb") as fh:
        while not dec.eof and (block := fh.read(1 << 16)):
            try:
                parts.append(dec.decompress(block))
            except zlib.error:  # keep what came before the damage
                damaged = True
                break
    data = b"".join(parts)
    cut = damaged or not dec.eof
    lines = data.splitlines()
    if cut and lines and not data.endswith(b"\n"):
        lines.pop()  # the last line stopped inside the damage
    return lines, int(cut)


def read_probe_log(path: Path) -> tuple[dict[str, Any], list[ProbeRecord], int]:
    """``(header, probe records, unreadable lines)`` of one ``probes/<gate-run>.jsonl`` (or ``.jsonl.gz``).

    Lines after the header that carry no ``kind`` (the re-tokenized counts written after the probes)
    are merged into the header. A line that is not a JSON object (a torn last write), or the damaged end
    of a gzipped log, is counted, not raised."""
    header: dict[str, Any] = {}
    records: list[ProbeRecord] = []
    lines, bad = _log_lines(path)
    for i, line in enumerate(lines):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
        elif i == 0 and "gate_run" in obj:
            header = obj
        elif "kind" in obj:
            records.append(cast(ProbeRecord, obj))  # a probe line as written (fields unchecked: JSON)
        else:
            header.update(obj)
    return header, records, bad


async def send_probes(client: Client, probes: Sequence[ProbeRecord], log: ProbeLog | None, *,
                      optional: Iterable[str] = (), kind_suffix: str = "", model: str | None = None,
                      on_done: Callable[[ProbeRecord], None] | None = None,
                      skip: Callable[[ProbeRecord], bool] | None = None) -> list[ProbeRecord]:
    """Send ``probes`` in order, one at a time; return them with ``reply`` set (each also appended to ``log``).

    Args:
        optional: body fields the server may refuse with 400 (dropped and resent by the client, recorded).
        kind_suffix: appended to kind and id (``"_reference"`` for a reference engine's copies).
        model: replaces the body's model (a reference engine serves its own name).
        skip: asked just before each probe is sent; True leaves it unsent (a sequential rule already decided
            its family: ``gates/run.py``). Skipped probes are neither logged nor returned.
    """
    out: list[ProbeRecord] = []
    for p in probes:
        if skip is not None and skip(p):
            continue
        body = dict(p["body"])
        if model is not None:
            body["model"] = model
        ex = await client.post(p["endpoint"], body, optional=optional)
        rec: ProbeRecord = {**p, "id": p["id"] + kind_suffix, "kind": p["kind"] + kind_suffix, "body": body,
                            "reply": reply_file(ex.to_reply(id=p["id"] + kind_suffix))}
        if log is not None:
            log.append(rec)
        if on_done is not None:
            on_done(rec)
        out.append(rec)
    return out


async def retokenize_probes(tok: Tokenizer, records: Sequence[ProbeRecord]) -> tuple[dict[str, int], dict[str, Any]]:
    """Re-tokenized counts of the generated text of every answered probe, by probe id, and what failed:
    ``{"n": failures, "of": texts tried, "first": the first error}`` (``{}`` when none did). A tokenizer that
    fails (a 422 from ``/tokenize``) leaves those counts missing; the failure is recorded, never silent."""
    out: dict[str, int] = {}
    failed, tried, first = 0, 0, None
    for r in records:
        reply = r.get("reply")
        if reply and is_ok(reply):
            tried += 1
            try:
                out[r["id"]] = len(await tok.encode(generated_text(reply)))
            except TokenizeError as e:
                failed += 1
                first = first or f"{r['id']}: {str(e)[:200]}"
    return out, ({"n": failed, "of": tried, "first": first} if failed else {})
