"""A level's append-only journal: finished exchanges on disk at once, reply files after the level.

Deriving a reply and writing two files per request costs ~1.4 ms of event-loop time; done inside a
level, that work lands on the timestamps of every other open stream (in a closed loop the streams
end together, so it comes in bursts). So during a level each finished exchange is appended raw,
as one line, to ``outputs/<engine>/load-<level>/journal.jsonl`` (one ``write`` + flush: nothing
finished is lost if the client dies), and after the level ``materialise`` turns the journal into
the per-request input and reply files (atomic writes) and deletes it. ``--resume`` materialises a
journal left by a client that died mid-level. A torn last line is dropped and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from inferencekit.api.client import Exchange
from inferencekit.rundir import RunDir, write_json

__all__ = ["Journal", "JOURNAL_NAME", "read_journal", "materialise"]

JOURNAL_NAME = "journal.jsonl"


class Journal:
    """Appends ``{key, bucket, meta, exchange}`` lines to one open file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: BinaryIO = open(path, "ab")

    def append(self, key: str, bucket: str, meta: dict[str, Any], ex: Exchange) -> None:
        self._f.write(orjson.dumps({"key": key, "bucket": bucket, "meta": meta, "exchange": ex.to_journal()}) + b"\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(records, torn lines dropped)."""
    records, torn = [], 0
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            torn += 1
    return records, torn


def materialise(run: RunDir, engine: str, level: str, path: Path) -> Iterator[dict[str, Any]]:
    """Write the input and reply file of every journal record, yield each reply, then delete the journal."""
    records, _torn = read_journal(path)
    for rec in records:
        ex = Exchange.from_journal(rec["exchange"])
        write_json(run.input_path(engine, level, rec["bucket"], rec["key"]), ex.body)
        reply = ex.to_reply(**rec["meta"])
        write_json(run.output_path(engine, level, rec["bucket"], rec["key"]), reply)
        yield reply
    path.unlink()
