"""``bench/journal.py``: the level's append-only journal, read back and turned into reply files."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from inferencekit.api.client import Exchange
from inferencekit.bench.journal import JOURNAL_NAME, Journal, journal_paths, materialise, read_journal
from inferencekit.rundir import RunDir


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def delta(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}}]})


def stream_exchange(rid: str = "rid-1", t0: int = 1_000_000_000) -> Exchange:
    """A streamed reply whose chunks cut an event, a line end and a two-byte UTF-8 character ("é" = c3 a9)."""
    e = delta("caf\u00e9")  # ... "caf\xc3\xa9" ...
    cut = e.index(b"\xc3") + 1
    chunks = [(t0 + 5_000_000, delta("Hi")),
              (t0 + 7_000_000, e[:cut]),                 # ends inside "é": not valid UTF-8 on its own
              (t0 + 9_000_000, e[cut:] + b"data: [DO"),  # starts with the lone continuation byte 0xa9
              (t0 + 9_500_000, b"NE]\n\n")]
    return Exchange(request_id=rid, path="/v1/chat/completions",
                    body={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True},
                    sent_ns=t0, call_ns=t0 - 1000, status=200, chunks=chunks, content_type="text/event-stream",
                    dropped_fields=["stream_options"], retried="reset before the first byte")


def raw_exchange(chunks: list[tuple[int, bytes]], rid: str = "rid-raw") -> Exchange:
    return Exchange(request_id=rid, path="/v1/completions", body={"prompt": "p"}, sent_ns=10, call_ns=5, status=200,
                    chunks=chunks, content_type="text/event-stream")


ODD_CHUNKS = [(11, b"\xff\xfe\x00binary"), (12, b"\n"), (13, b"a\nb\n\n"), (14, b""), (15, b"\x80\n\xc3")]


def test_append_close_read_round_trip_keeps_every_byte(tmp_path):
    path = tmp_path / "outputs" / "eng" / "load-c1" / JOURNAL_NAME  # parents are made by the journal
    ex1, ex2 = stream_exchange(), raw_exchange(ODD_CHUNKS)
    with Journal(path) as j:
        j.append("p1", "short", {"id": "p1", "level": "c1"}, ex1)
        j.append("p2~1", "long", {"id": "p2", "salt": "ik-00ab"}, ex2)
    records, torn = read_journal(path)
    assert torn == 0 and len(records) == 2
    assert [(r["key"], r["bucket"]) for r in records] == [("p1", "short"), ("p2~1", "long")]
    assert records[1]["meta"] == {"id": "p2", "salt": "ik-00ab"}
    for rec, ex in zip(records, (ex1, ex2)):
        got = rec["exchange"]
        assert got.chunks == ex.chunks  # bytes and times exactly, b"\n" and non-UTF-8 included
        for f in ("request_id", "path", "body", "sent_ns", "call_ns", "status", "error", "content_type",
                  "dropped_fields", "retried"):
            assert getattr(got, f) == getattr(ex, f), f
    assert journal_paths(path.parent) == [path]


def test_torn_last_record_is_dropped_and_counted(tmp_path):
    path = tmp_path / JOURNAL_NAME
    with Journal(path) as j:
        j.append("a", "b", {}, raw_exchange(ODD_CHUNKS, "r1"))
        j.append("c", "b", {}, raw_exchange(ODD_CHUNKS, "r2"))
    whole = path.read_bytes()
    second = whole.index(b'{"key":"c"')
    for cut in (second + 10,            # inside the second header
                len(whole) - 5,          # inside the second record's stream bytes
                len(whole) - 1):         # only its final newline missing
        path.write_bytes(whole[:cut])
        records, torn = read_journal(path)
        assert torn == 1, cut
        assert [r["exchange"].request_id for r in records] == ["r1"]
    path.write_bytes(whole)
    assert read_journal(path)[1] == 0


def test_older_one_line_format_is_still_read(tmp_path):
    old = stream_exchange("old-1")
    line = orjson.dumps({"key": "p9", "bucket": "short", "meta": {"id": "p9"}, "exchange": old.to_journal()}) + b"\n"
    path = tmp_path / JOURNAL_NAME
    path.write_bytes(line)
    with Journal(path) as j:  # a resumed client appending to an older journal
        j.append("p10", "short", {"id": "p10"}, raw_exchange(ODD_CHUNKS, "new-1"))
    records, torn = read_journal(path)
    assert torn == 0
    assert [r["key"] for r in records] == ["p9", "p10"]
    assert records[0]["exchange"].chunks == old.chunks and records[0]["meta"] == {"id": "p9"}
    assert records[1]["exchange"].chunks == ODD_CHUNKS


def test_materialise_writes_input_and_reply_files_with_extra_meta_and_deletes_the_journal(tmp_path):
    run = RunDir(tmp_path / "run")
    level_dir = run.level_dir("outputs", "eng", "c2")
    path = level_dir / "journal-w1.jsonl"
    ex = stream_exchange("rid-7")
    with Journal(path) as j:
        j.append("p1", "short", {"id": "p1", "engine": "eng", "level": "c2", "bucket": "short"}, ex)
    extra = {"worker": 1, "clock_offset_ns": 1_700_000_000_123_456_789}
    replies = list(materialise(run, "eng", "c2", path, extra_meta=extra))
    assert not path.exists()
    (reply,) = replies
    assert reply["worker"] == 1 and reply["clock_offset_ns"] == 1_700_000_000_123_456_789
    assert reply["text"] == "Hicaf\u00e9"  # the character cut across two chunks comes back whole
    assert reply["request_id"] == "rid-7" and reply["level"] == "c2" and "error" not in reply
    assert reply["ttft_ms"] == pytest.approx(5.0)
    assert reply["dropped_fields"] == ["stream_options"] and reply["retried"] == "reset before the first byte"
    on_disk = json.loads(run.output_path("eng", "c2", "short", "p1").read_text())
    assert on_disk == json.loads(orjson.dumps(reply))
    assert json.loads(run.input_path("eng", "c2", "short", "p1").read_text()) == ex.body
    assert sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*") if p.is_file()) == [
        "inputs/eng/load-c2/short/p1.json", "outputs/eng/load-c2/short/p1.json"]


def test_materialise_without_extra_meta_adds_nothing(tmp_path):
    run = RunDir(tmp_path / "run")
    path = run.level_dir("outputs", "eng", "c1") / JOURNAL_NAME
    with Journal(path) as j:
        j.append("p1", "short", {"id": "p1"}, stream_exchange())
    (reply,) = materialise(run, "eng", "c1", path)
    assert "worker" not in reply and "clock_offset_ns" not in reply


def test_an_error_in_the_writer_thread_stops_the_journal_and_is_kept_for_the_caller(tmp_path):
    path = tmp_path / JOURNAL_NAME
    j = Journal(path)
    j.append("ok", "b", {}, raw_exchange([(1, b"x")], "r-ok"))
    bad = raw_exchange([(2, b"y")], "r-bad")
    bad.body = {"not json": {1, 2}}  # a set: the writer thread cannot encode it
    j.append("bad", "b", {}, bad)
    j.append("after", "b", {}, raw_exchange([(3, b"z")], "r-after"))
    j.close()
    # the level's caller raises it (LoadRunner.run_level: a bug stays a bug, a full disk a StorageError)
    assert j.failed and isinstance(j.error, TypeError)
    assert (j.written, j.lost) == (1, 2)
    records, torn = read_journal(path)
    assert [r["key"] for r in records] == ["ok"] and torn == 0  # nothing half-written; later ones are not written


def test_a_file_closed_under_the_writer_is_kept_as_the_error(tmp_path):
    j = Journal(tmp_path / JOURNAL_NAME)
    j._f.close()  # the disk goes away under the writer thread
    j.append("k", "b", {}, raw_exchange([(1, b"x")]))
    j.close()
    assert isinstance(j.error, ValueError) and (j.written, j.lost) == (0, 1)  # "write to closed file"


def test_a_failed_write_cuts_the_journal_back_to_its_last_whole_record(tmp_path, monkeypatch):
    # a full disk may take half a record before refusing: the journal must end on a whole record
    import errno
    import os
    import time

    path = tmp_path / JOURNAL_NAME
    j = Journal(path)
    j.append("a", "b", {}, raw_exchange([(1, b"x")], "r-a"))
    for _ in range(3000):  # the writer thread takes it (at most 30 s)
        if j.written:
            break
        time.sleep(0.01)
    real = j._f

    class HalfFull:
        name = real.name

        def write(self, data: bytes) -> int:
            real.write(data[: len(data) // 2])
            real.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(real, name)

    j._f = HalfFull()
    j.append("b", "b", {}, raw_exchange([(2, b"y" * 1000)], "r-b"))
    j.close()
    assert j.error is not None and j.error.errno == errno.ENOSPC and (j.written, j.lost) == (1, 1)
    records, torn = read_journal(path)
    assert [r["key"] for r in records] == ["a"] and torn == 0


def test_a_path_under_a_file_fails_at_once(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OSError):  # FileExistsError / NotADirectoryError from making the level folder
        Journal(tmp_path / "afile" / "load-c1" / JOURNAL_NAME)
    assert (tmp_path / "afile").read_text() == "x"


def test_journal_paths_lists_the_single_and_the_worker_journals(tmp_path):
    for name in ("journal-w1.jsonl", JOURNAL_NAME, "journal-w0.jsonl", "client.json"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in journal_paths(tmp_path)] == ["journal-w0.jsonl", "journal-w1.jsonl", JOURNAL_NAME]
    assert journal_paths(Path(tmp_path / "nope")) == []


def test_a_burst_is_waited_out_once_then_written_back_to_back(tmp_path, monkeypatch):
    # failed before 2026-12-06: the writer waited out the burst again before each of its records (~20 ms each), so at
    # 1,024 streams most finished exchanges were still in memory, not on disk, when the level ended
    import threading

    from inferencekit.bench import journal as jmod

    all_in = threading.Event()
    waits: list[int] = []
    encode = jmod.encode_record

    def first_waits(*a, **k):  # the writer holds its first record until the whole burst is queued behind it
        all_in.wait(5)
        return encode(*a, **k)

    monkeypatch.setattr(jmod, "encode_record", first_waits)
    monkeypatch.setattr(jmod.Journal, "_wait_out_burst", lambda self: waits.append(self._q.qsize()))
    n = 3 * jmod.BURST
    with Journal(tmp_path / JOURNAL_NAME) as j:
        for i in range(n):
            j.append(f"p{i}", "b", {"id": f"p{i}"}, raw_exchange([(11, b"x")], rid=f"r{i}"))
        all_in.set()
    assert len(waits) == 1 and waits[0] > jmod.BURST  # one wait for the burst, none before each of its records
    records, torn = read_journal(tmp_path / JOURNAL_NAME)
    assert [r["key"] for r in records] == [f"p{i}" for i in range(n)] and torn == 0
