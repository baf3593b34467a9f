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
A record cut short (the client died during the write) is dropped and counted. A long streamed reply is written
in pieces as it streams (``Journal.parts``, api/h1.py's ``SPILL_BLOCKS``): part records ``{"part": token, "n":
bytes}``, the bytes, a newline; its own record then names the token (``"parts"``) and how many bytes went ahead
(``"spilled"``), and the reader puts them back in front. Parts that no record names (a reply that had not ended
when the client died) are dropped.

The writer thread spends most of its time in ``write`` (the GIL is released there), so the loop loses only the
moments it takes to encode a header; when many requests end at once it waits for the burst to pass first
(``Journal._wait_out_burst``).

When a write fails (a full disk, a folder made read-only), the file is cut back to its last whole
record, nothing more is written, and ``Journal.failed`` tells the sender to stop; the level's caller
raises ``StorageError`` once what is on disk is materialised, and ``--resume`` sends the rest.
"""

from __future__ import annotations

import itertools
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

__all__ = ["Journal", "JOURNAL_NAME", "PartSink", "encode_part", "encode_record", "iter_journal", "journal_paths",
           "materialise", "read_journal"]

JOURNAL_NAME = "journal.jsonl"
SWITCH_INTERVAL_S = 0.0005
BURST, BURST_PAUSE_S, BURST_MAX_S = 16, 0.02, 0.5
_STOP = object()
_PART = object()


def encode_part(token: str, blocks: list[bytearray]) -> bytes:
    """A part record: the full blocks a streaming reply handed over (``PartSink``), as a JSON line ``{"part": token,
    "n": bytes}``, the bytes and a newline. Its exchange's own record comes later and names the token."""
    n = sum(len(b) for b in blocks)
    return b"".join([orjson.dumps({"part": token, "n": n}), b"\n", *blocks, b"\n"])


def encode_record(key: str, bucket: str, meta: dict[str, Any], ex: Exchange, parts: str | None = None) -> bytes:
    """One journal record: a JSON header line (``k`` = number of chunks), then the chunks' arrival times and byte
    lengths as two little-endian int64 arrays of k values, the chunks' bytes, and a newline.

    A streamed reply still in its HTTP framing (``Exchange.framed``, api/h1.py) is written as it was read: its k
    network reads' times and lengths, then the bytes with the framing, the header saying ``"framed": true``; it is
    taken apart when the journal is read (after the level), so the writer thread, which shares the GIL with the
    streams, does not unframe during the level (~270 µs a 256-token reply). With an API key registered the reply
    is taken apart first, so that the key is scrubbed from what is written (``Exchange.raw_chunks``). A reply whose
    first bytes went out as part records (``Exchange.spilled``) names them: ``"parts"`` (their token) and
    ``"spilled"`` (their bytes, which the lengths count and the bytes here do not hold)."""
    fr = ex.framed  # read once: the loop may take the exchange apart meanwhile (it keeps these objects whole)
    framed = False
    if fr is not None and (ex.spilled or not has_secrets()):  # a spilled reply cannot be taken apart here
        framed = True
        raw, read_times, read_ends = fr
        times = np.frombuffer(read_times, np.int64)
        lens = _lengths(np.frombuffer(read_ends, np.int64))
        payload = [raw] if isinstance(raw, bytes) else list(raw)
    else:
        times, lens, joined = ex.raw_chunks()
        payload = [joined]
    head = {"key": key, "bucket": bucket, "meta": meta, "request_id": ex.request_id, "path": ex.path,
            "body": ex.body, "sent_ns": ex.sent_ns, "call_ns": ex.call_ns, "status": ex.status, "error": ex.error,
            "content_type": ex.content_type, "dropped_fields": ex.dropped_fields, "retried": ex.retried,
            "k": len(times), **({"framed": True} if framed else {}),
            **({"parts": parts, "spilled": ex.spilled} if ex.spilled else {}),
            **({"count_chunks": True} if ex.count_chunks else {})}
    return b"".join([orjson.dumps(head), b"\n", times.astype("<i8").tobytes(), lens.astype("<i8").tobytes(), *payload,
                     b"\n"])


def _lengths(ends: np.ndarray) -> np.ndarray:
    """Each read's byte count from the end offsets [k] (int64): ``np.diff(ends, prepend=0)``, without the ~8 µs that
    ``prepend`` costs (it goes through ``np.broadcast_to``) on the writer thread, which holds the GIL meanwhile."""
    lens = ends.copy()
    lens[1:] -= ends[:-1]
    return lens


WRITER_NICE = 19  # the writer thread's nice value (Linux): the CPU goes to the event loop first


def _background() -> None:
    """Lower the calling thread's CPU priority to ``WRITER_NICE`` (Linux: ``setpriority`` on a thread id sets that
    thread's nice value, man 2 setpriority, NOTES; elsewhere it would name a process, so nothing is done).

    The writer shares the client's core with the event loop (a client pinned to one CPU, as the peers' method pins
    it, or a busy machine). At nice 19 the scheduler runs it when the loop waits for the network; with the loop
    runnable it gets little CPU (observed at 1,024 streams on one core: single 16 KiB part writes taking 2-35 ms of
    wall time, while the loop went on). What it saves the loop was not measured apart from the other changes of
    2026-12-06 (docs/load-generation.md): the lag the writer seemed to cause came from the GC, not its CPU.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
    except OSError:
        pass  # not allowed here: the writer keeps the loop's priority


class PartSink:
    """One streaming reply's sink (``Journal.parts``): called on the loop with full blocks, it only queues them."""

    __slots__ = ("_q", "token")

    def __init__(self, q: queue.SimpleQueue[Any], token: str) -> None:
        self._q = q
        self.token = token

    def __call__(self, blocks: list[bytearray]) -> None:
        self._q.put((_PART, self.token, blocks))


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
        # part tokens: unique in the file even when --resume appends to a dead client's journal
        self._prefix = os.urandom(6).hex()
        self._tokens = itertools.count()
        self._thread = threading.Thread(target=self._drain, name=f"journal:{path.parent.name}", daemon=True)
        # The writer holds the GIL while it encodes; when the loop wants it back it waits up to the switch
        # interval (5 ms by default), which would land on the timestamps. 0.5 ms bounds that wait.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_S))
        self._thread.start()

    def append(self, key: str, bucket: str, meta: dict[str, Any], ex: Exchange, parts: PartSink | None = None
               ) -> None:
        """Queue ``ex``'s record; ``parts``: the sink its reply streamed into (``parts()``), if any."""
        self._q.put((key, bucket, meta, ex, parts.token if parts is not None else None))

    def parts(self) -> PartSink:
        """A sink for one streaming reply's full blocks (``Client.post(sink=...)``): each hand-over is queued as a
        part record at once, so a long reply is not held whole in memory until it ends. Give it to ``append`` with
        the exchange. Not for a reply the caller reads before the level ends (a session's turn), nor with an API key
        registered (its bytes could not be scrubbed before they are written)."""
        return PartSink(self._q, f"{self._prefix}-{next(self._tokens)}")

    def _drain(self) -> None:
        _background()
        # one wait per burst: once it has passed, its records are written back to back until the queue is empty.
        # (Waiting again before each of them held ~20 ms a record: measured at 1,024 streams x 4 waves, 725 of
        # 4,096 finished exchanges were on disk when the level ended, and the other 3,370 were in memory.)
        settled = True
        while True:
            item = self._q.get()
            if item is _STOP:
                return
            if settled and self._q.qsize() > BURST:
                self._wait_out_burst()
                settled = False
            if self._q.qsize() == 0:
                settled = True
            part = item[0] is _PART  # a streaming reply's blocks: not an exchange of its own
            if self._error is not None:
                self.lost += not part
                continue
            try:
                # one write a record: a failed one is cut back whole
                self._f.write(encode_part(item[1], item[2]) if part else encode_record(*item))
                self._f.flush()
                self._good = self._f.tell()
                self.written += not part
            except BaseException as exc:  # noqa: BLE001 - kept, and reported by the level's caller (error)
                self._error = exc
                self.lost += not part
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
    ex = Exchange(request_id=head["request_id"], path=head["path"], body=head["body"], sent_ns=head["sent_ns"],
                  call_ns=head.get("call_ns", 0), status=head["status"], error=head["error"],
                  content_type=head["content_type"], dropped_fields=list(head["dropped_fields"]),
                  retried=head.get("retried"), chunks=chunks, framed=framed)
    if head.get("count_chunks"):  # a broken stream that went out in parts: its chunks can be counted now
        ex.count_chunks_into_error()
    return ex


class _Torn(Exception):
    """The journal ends inside a record (the client died while writing it)."""


class _Broken(Exception):
    """A whole record that cannot be read back (its part records are not all there)."""


def _read_record(f: Any, head: dict[str, Any], parts: dict[str, list[bytes]]) -> dict[str, Any]:
    """The rest of the record whose header line was ``head``, read from ``f``; a spilled reply's front is taken from
    ``parts`` (token -> the part records' bytes read so far).

    Raises:
        _Torn: the file ends before the record does.
        _Broken: the record is whole, but its parts' bytes are not what it says went out.
    """
    if "exchange" in head:  # the one-line format of earlier versions (chunks as latin-1 strings)
        return {**head, "exchange": Exchange.from_journal(head["exchange"])}
    if "k" in head:  # arrays of k int64 times and lengths, then the bytes
        k = int(head["k"])
        arrays = f.read(16 * k)
        if len(arrays) < 16 * k:
            raise _Torn
        times: Any = np.frombuffer(arrays[:8 * k], "<i8")
        lens: Any = np.frombuffer(arrays[8 * k:], "<i8")
    else:  # times and lengths as JSON lists (an earlier version of this format)
        times, lens = head["t"], head["n"]
    spilled = int(head.get("spilled", 0))
    size = int(sum(lens)) - spilled
    raw = f.read(size + 1)
    if len(raw) < size + 1 or raw[size:] != b"\n":
        raise _Torn
    body = raw[:size]
    if spilled:
        front = b"".join(parts.pop(str(head.get("parts")), []))
        if len(front) != spilled:
            raise _Broken
        body = front + body
    return {"key": head["key"], "bucket": head["bucket"], "meta": head["meta"],
            "exchange": _exchange(head, times, lens, body)}


def iter_journal(path: Path, torn: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's records, ``{key, bucket, meta, exchange: Exchange}``, read one at a time (a level's journal
    holds every reply's bytes: 2,048 replies of 256 tokens are ~120 MB, which reading it whole held in memory
    twice over after the level). Part records are joined to the record that names them; parts no record names (a
    reply that had not ended when the client died) are dropped. A record cut short ends the iteration; ``torn``,
    when given, gets a 1 appended for it, and for a whole record whose parts are missing (skipped)."""
    parts: dict[str, list[bytes]] = {}
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                return
            try:
                if not line.endswith(b"\n"):
                    raise _Torn
                try:
                    head = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise _Torn from None
                if "part" in head:
                    n = int(head["n"])
                    data = f.read(n + 1)
                    if len(data) < n + 1 or data[n:] != b"\n":
                        raise _Torn
                    parts.setdefault(str(head["part"]), []).append(data[:n])
                    continue
                try:
                    rec = _read_record(f, head, parts)
                except _Broken:
                    if torn is not None:
                        torn.append(1)
                    continue
                yield rec
            except _Torn:
                if torn is not None:
                    torn.append(1)
                return


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """``([{key, bucket, meta, exchange: Exchange}, ...], records cut short and dropped)``: ``iter_journal`` whole."""
    torn: list[int] = []
    records = list(iter_journal(path, torn))
    return records, len(torn)


def materialise(run: RunDir, engine: str, level: str, path: Path,
                extra_meta: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Write the input and reply file of every journal record, yield each load reply, then delete the journal.

    A record whose meta names a ``folder`` is an extra request the caller mixed into the level (hidden probe,
    known answer): its files go to ``inputs|outputs/<engine>/<folder>/<id>.json`` and it is not yielded (it is
    not a load request). ``extra_meta`` is added to every reply (``--workers``: the worker and its clock anchor).
    """
    for rec in iter_journal(path):
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
