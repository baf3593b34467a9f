"""A level's append-only journal: finished exchanges on disk at once, reply files after the level.

Deriving a reply and writing two files per request costs ~1.4 ms of CPU; done on the event loop
inside a level, that work lands on the timestamps of every other open stream (in a closed loop the
streams end together, so it comes in bursts). So during a level the loop only hands each finished
exchange to a writer thread, which appends it raw to ``outputs/<engine>/load-<level>/journal.jsonl``
(one ``write`` + flush per exchange: nothing finished is lost if the client dies); after the level
``materialise`` turns the journal into the per-request input and reply files (atomic writes) and
deletes it. ``--resume`` materialises a journal left by a client that died mid-level.

Record format (binary-safe, cheap to write): one JSON header line holding everything but the
stream, with ``k`` the number of chunks; then the chunks' arrival times (perf_counter ns) and byte
lengths as two little-endian int64 arrays of k values; then the stream's raw bytes, then a newline.
A record cut short (the client died during the write) is dropped and counted. The writer thread
spends most of its time in ``write`` (the GIL is released there), so the loop loses only the
moments it takes to encode a header; when many requests end at once it waits for the burst to pass
first (``Journal._wait_out_burst``).

When a write fails (a full disk, a folder made read-only), the file is cut back to its last whole
record, nothing more is written, and ``Journal.failed`` tells the sender to stop; the level's caller
raises ``StorageError`` once what is on disk is materialised, and ``--resume`` sends the rest.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from inferencekit.api.client import Exchange
from inferencekit.redact import has_secrets
from inferencekit.rundir import RunDir, journal_paths, write_json

__all__ = ["Journal", "JOURNAL_NAME", "journal_paths", "read_journal", "materialise", "encode_record"]

JOURNAL_NAME = "journal.jsonl"
SWITCH_INTERVAL_S = 0.0005
BURST, BURST_PAUSE_S, BURST_MAX_S = 16, 0.02, 0.5
_STOP = object()


def encode_record(key: str, bucket: str, meta: dict[str, Any], ex: Exchange) -> bytes:
    """One journal record: a JSON header line (``k`` = number of chunks), then the chunks' arrival times and byte
    lengths as two little-endian int64 arrays of k values, the chunks' bytes, and a newline.

    A streamed reply still in its HTTP framing (``Exchange.framed``, api/h1.py) is written as it was read: its k
    network reads' times and lengths, then the bytes with the framing, the header saying ``"framed": true``; it is
    taken apart when the journal is read (after the level), so the writer thread, which shares the GIL with the
    streams, does not unframe during the level (~270 µs a 256-token reply). With an API key registered the reply
    is taken apart first, so that the key is scrubbed from what is written (``Exchange.raw_chunks``)."""
    fr = ex.framed  # read once: the loop may take the exchange apart meanwhile (it keeps these objects whole)
    framed = False
    if fr is not None and not has_secrets():
        framed = True
        raw, read_times, read_ends = fr
        times = np.frombuffer(read_times, np.int64)
        lens = np.diff(np.frombuffer(read_ends, np.int64), prepend=0)
        payload = [raw] if isinstance(raw, bytes) else list(raw)
    else:
        times, lens, joined = ex.raw_chunks()
        payload = [joined]
    head = {"key": key, "bucket": bucket, "meta": meta, "request_id": ex.request_id, "path": ex.path,
            "body": ex.body, "sent_ns": ex.sent_ns, "call_ns": ex.call_ns, "status": ex.status, "error": ex.error,
            "content_type": ex.content_type, "dropped_fields": ex.dropped_fields, "retried": ex.retried,
            "k": len(times), **({"framed": True} if framed else {})}
    return b"".join([orjson.dumps(head), b"\n", times.astype("<i8").tobytes(), lens.astype("<i8").tobytes(), *payload,
                     b"\n"])


class Journal:
    """Appends exchanges to one file from a writer thread. ``append`` never blocks on the disk.

    Use ``close()`` (or ``with``) to drain the queue; a write error is re-raised there.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = open(path, "ab")
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._good = self._f.tell()  # the end of the last whole record
        self.written = 0  # records on disk
        self.lost = 0  # exchanges that finished after a failed write (not on disk; --resume sends them again)
        self._closing = False
        self._thread = threading.Thread(target=self._drain, name=f"journal:{path.parent.name}", daemon=True)
        # The writer holds the GIL while it encodes; when the loop wants it back it waits up to the switch
        # interval (5 ms by default), which would land on the timestamps. 0.5 ms bounds that wait.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_S))
        self._thread.start()

    def append(self, key: str, bucket: str, meta: dict[str, Any], ex: Exchange) -> None:
        self._q.put((key, bucket, meta, ex))

    def _drain(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            if self._q.qsize() > BURST:
                self._wait_out_burst()
            if self._error is not None:
                self.lost += 1
                continue
            try:
                self._f.write(encode_record(*item))  # one write a record: a failed one is cut back whole
                self._f.flush()
                self._good = self._f.tell()
                self.written += 1
            except BaseException as exc:  # noqa: BLE001 - kept, and reported by the level's caller (error)
                self._error = exc
                self.lost += 1
                self._cut_back()

    def _cut_back(self) -> None:
        """After a failed write: drop the partial record (and whatever the buffer still holds) so the journal
        ends on a whole record; a later append by ``--resume`` then follows a readable file."""
        try:
            self._f.close()
        except OSError:
            pass  # the buffer's bytes could not be written either: they are the partial record
        try:
            with open(self.path, "r+b") as f:
                f.truncate(self._good)
        except OSError:
            pass  # read_journal drops a torn last record anyway
        self._f = open(os.devnull, "ab")

    @property
    def failed(self) -> bool:
        """True once a write failed: send nothing more into this level."""
        return self._error is not None

    @property
    def error(self) -> BaseException | None:
        """The write error, if any (set by the writer thread)."""
        return self._error

    def _wait_out_burst(self) -> None:
        """Many requests ended at once (a closed loop's streams end together) and the loop is busy starting their
        successors; encoding now would take the GIL from it. Wait while more keep arriving (at most
        ``BURST_MAX_S``), then write them all. Measured at 1,024 streams (the peers' method, benchmarks/README.md):
        96.7% of ideal without the wait, 97.5% with it."""
        waited = 0.0
        while not self._closing and waited < BURST_MAX_S:
            before = self._q.qsize()
            time.sleep(BURST_PAUSE_S)
            waited += BURST_PAUSE_S
            if self._q.qsize() <= before:
                return

    def close(self) -> None:
        self._closing = True
        if self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join()
        sys.setswitchinterval(self._switch)
        try:
            self._f.close()
        except OSError as exc:  # the last flush failed: the same as a failed write
            if self._error is None:
                self._error = exc
            self._cut_back()
            self._f.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exchange(head: dict[str, Any], times: Any, lens: Any, raw: bytes) -> Exchange:
    chunks, pos = [], 0
    framed = None
    if head.get("framed"):  # the reply as read, framing included: taken apart by whoever reads it (Exchange.settle)
        framed = (raw, array("q", times), array("q", np.cumsum(lens, dtype=np.int64)))
    else:
        for t, n in zip(times, lens):
            chunks.append((int(t), raw[pos:pos + int(n)]))
            pos += int(n)
    return Exchange(request_id=head["request_id"], path=head["path"], body=head["body"], sent_ns=head["sent_ns"],
                    call_ns=head.get("call_ns", 0), status=head["status"], error=head["error"],
                    content_type=head["content_type"], dropped_fields=list(head["dropped_fields"]),
                    retried=head.get("retried"), chunks=chunks, framed=framed)


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """``([{key, bucket, meta, exchange: Exchange}, ...], records cut short and dropped)``."""
    data = path.read_bytes()
    records, torn, pos = [], 0, 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            torn += 1
            break
        try:
            head = orjson.loads(data[pos:nl])
        except orjson.JSONDecodeError:
            torn += 1
            break
        if "exchange" in head:  # the one-line format of earlier versions (chunks as latin-1 strings)
            records.append({**head, "exchange": Exchange.from_journal(head["exchange"])})
            pos = nl + 1
            continue
        if "k" in head:  # arrays of k int64 times and lengths, then the bytes
            k = int(head["k"])
            arrays = data[nl + 1:nl + 1 + 16 * k]
            if len(arrays) < 16 * k:
                torn += 1
                break
            times = np.frombuffer(arrays[:8 * k], "<i8")
            lens = np.frombuffer(arrays[8 * k:], "<i8")
            begin = nl + 1 + 16 * k
        else:  # times and lengths as JSON lists (an earlier version of this format)
            times, lens, begin = head["t"], head["n"], nl + 1
        end = begin + int(sum(lens))
        if end >= len(data) or data[end:end + 1] != b"\n":
            torn += 1
            break
        records.append({"key": head["key"], "bucket": head["bucket"], "meta": head["meta"],
                        "exchange": _exchange(head, times, lens, data[begin:end])})
        pos = end + 1
    return records, torn


def materialise(run: RunDir, engine: str, level: str, path: Path,
                extra_meta: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Write the input and reply file of every journal record, yield each load reply, then delete the journal.

    A record whose meta names a ``folder`` is an extra request the caller mixed into the level (hidden probe,
    known answer): its files go to ``inputs|outputs/<engine>/<folder>/<id>.json`` and it is not yielded (it is
    not a load request). ``extra_meta`` is added to every reply (``--workers``: the worker and its clock anchor).
    """
    records, _torn = read_journal(path)
    for rec in records:
        ex = rec["exchange"]
        meta = dict(rec["meta"])
        folder = meta.pop("folder", None)
        reply = ex.to_reply(**meta, **(extra_meta or {}))
        if folder is not None:
            write_json(run.special_path(engine, folder, rec["key"], kind="inputs"), ex.body)
            write_json(run.special_path(engine, folder, rec["key"]), reply)
            continue
        write_json(run.input_path(engine, level, rec["bucket"], rec["key"]), ex.body)
        write_json(run.output_path(engine, level, rec["bucket"], rec["key"]), reply)
        yield reply
    path.unlink()
