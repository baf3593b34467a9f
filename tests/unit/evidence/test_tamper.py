"""Every kind of tampering with a run dir is "changed", verified by id (the store's copy) and by path (the run dir's
copy); touching a file's mtime alone is not (issue 19). Records are built and saved as the commands do: a bench
record, a gates record (``gates_record``) and a quality task record (``save_task_record``), each tampered with in
the part of the run dir it covers."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from inferencekit.evidence import build_record
from inferencekit.evidence.record import PART_FILE, artifact
from inferencekit.evidence.store import Store, check_tree, resolve_record, save_record
from inferencekit.rundir import RunDir, write_json

LEVEL = "outputs/e/load-1"
GATE_RUN = "20260101T000000Z-abcdef"
ITEMS = "quality/gsm8k/lbl"


def _level(run: RunDir) -> list[Path]:
    """A load level of three replies, and its request bodies (what bench serve leaves)."""
    files = []
    for i in range(3):
        p = run.path / LEVEL / "short" / f"p{i}.json"
        write_json(p, {"id": f"p{i}", "text": f"reply {i}"})
        write_json(run.path / "inputs" / LEVEL.partition("/")[2] / "short" / f"p{i}.json", {"max_tokens": 4})
        files.append(p)
    return files


def _bench(run: RunDir, store: Store) -> tuple[str, list[Path]]:
    files = _level(run)
    rec = build_record(kind="bench", claim_class="observed", summary="3 replies", identity={"engine": {}},
                       artifacts=[artifact(p, run.path, "reply") for p in files], covers=[LEVEL],
                       data={"run_dir": str(run.path.resolve())})
    save_record(rec, run, store)
    return rec["evidence_id"], files


def _gates(run: RunDir, store: Store) -> tuple[str, list[Path]]:
    """A ``gates`` record as ``gates run`` writes it (gates/record.py): the judged level replies and its log."""
    from inferencekit.gates.record import gates_record
    from inferencekit.gates.result import Gate

    files = _level(run)
    log = run.gate_run_log(GATE_RUN)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text('{"header": true}\n{"id": "x"}\n')
    rel = [p.relative_to(run.path).as_posix() for p in [*files, log]]
    rec = gates_record(run, [Gate("token_count", "PASS", "3 replies agree", judged=3)], engine="e", files=rel,
                       mode="run", settings={"gate_run": GATE_RUN})
    return rec["evidence_id"], files


def _quality(run: RunDir, store: Store) -> tuple[str, list[Path]]:
    """A ``quality_task`` record as ``quality gsm8k`` writes it (quality/task_run.py): its results, and the item store
    that index.json lists."""
    from inferencekit.quality.task_run import ItemStore, save_task_record

    items = ItemStore(run.path / ITEMS)
    items.claim({"max_tokens": 8}, "gsm8k")
    for i in range(3):
        items.put(f"q{i}", {"request": {"i": i}, "text": f"answer {i}"})
    index = items.write_index([f"q{i}" for i in range(3)])
    results = run.path / "quality" / "gsm8k" / "lbl.jsonl"
    results.write_text('{"id": "q0", "correct": true}\n')
    rec = save_task_record(run, task="gsm8k", label="lbl", summary="3 problems", engine={}, model="m", workload={},
                           metrics=[], artifacts=[artifact(results, run.path, "gsm8k_results"),
                                                  artifact(index, run.path, "gsm8k_items")],
                           missing=[], limitations=[], data={})
    return rec["evidence_id"], [run.path / ITEMS / f"q{i}.json" for i in range(3)]


RECORDS: dict[str, Callable[[RunDir, Store], tuple[str, list[Path]]]] = {
    "bench": _bench, "gates": _gates, "quality": _quality}


def _run(tmp_path: Path, kind: str = "bench") -> tuple[RunDir, Store, str, list[Path]]:
    run = RunDir.create(tmp_path / "run")
    store = Store()  # the session's private store ($INFERENCEKIT_HOME, tests/conftest.py), where commands save
    rid, files = RECORDS[kind](run, store)
    return run, store, rid, files


def _problems(run: RunDir, store: Store, rid: str) -> dict[str, list[str]]:
    by_id = check_tree(*resolve_record(rid, store))
    by_path = check_tree(*resolve_record(str(run.evidence_dir / f"{rid}.json"), store))
    return {"id": [p for r in by_id for p in r["problems"]], "path": [p for r in by_path for p in r["problems"]]}


def _rel(run: RunDir, p: Path) -> str:
    return p.relative_to(run.path).as_posix()


def _edit(run: RunDir, rid: str, files: list[Path]) -> str:
    files[0].write_text('{"id": "p0", "text": "a better reply"}')
    return f"artifact changed: {_rel(run, files[0])}"


def _delete(run: RunDir, rid: str, files: list[Path]) -> str:
    files[1].unlink()
    return f"artifact missing: {_rel(run, files[1])}"


def _add(run: RunDir, rid: str, files: list[Path]) -> str:
    extra = files[2].with_name("p2~1.json")
    shutil.copy(files[2], extra)  # one more file in the part the record covers
    return f"artifact added: {_rel(run, extra)}"


def _swap(run: RunDir, rid: str, files: list[Path]) -> str:
    a, b = files[0], files[1]
    tmp = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(tmp)
    return f"artifact changed: {_rel(run, a)}"


def _truncate(run: RunDir, rid: str, files: list[Path]) -> str:
    files[2].write_bytes(files[2].read_bytes()[:5])
    return f"artifact changed: {_rel(run, files[2])}"


def _edit_record(run: RunDir, rid: str, files: list[Path]) -> str:
    p = run.evidence_dir / f"{rid}.json"
    rec = json.loads(p.read_text())
    rec["summary"] += " (fast)"
    p.write_text(json.dumps(rec))
    return "the run directory's copy of the record differs"


TAMPER: dict[str, tuple[Callable[[RunDir, str, list[Path]], str], str]] = {  # kind: (how → problem by id, by path)
    "edit": (_edit, "artifact changed"),
    "delete": (_delete, "artifact missing"),
    "add": (_add, "artifact added"),
    "swap": (_swap, "artifact changed"),
    "truncate": (_truncate, "artifact changed"),
    "edit the record": (_edit_record, "record content changed"),
}


@pytest.mark.parametrize("record", list(RECORDS))
def test_an_untouched_run_and_an_mtime_change_are_intact(tmp_path: Path, record: str) -> None:
    run, store, rid, files = _run(tmp_path, record)
    assert _problems(run, store, rid) == {"id": [], "path": []}
    os.utime(files[0], (1, 1))  # mtime only: the bytes are the evidence
    assert _problems(run, store, rid) == {"id": [], "path": []}


@pytest.mark.parametrize("record", list(RECORDS))
@pytest.mark.parametrize("kind", list(TAMPER))
def test_each_kind_of_tampering_is_changed_by_id_and_by_path(tmp_path: Path, kind: str, record: str) -> None:
    run, store, rid, files = _run(tmp_path, record)
    how, by_path = TAMPER[kind]
    by_id = how(run, rid, files)
    got = _problems(run, store, rid)
    assert any(p.startswith(by_id) for p in got["id"]), got
    assert any(p.startswith(by_path) for p in got["path"]), got


def test_each_record_lists_every_file_of_the_parts_it_covers(tmp_path: Path) -> None:
    # the gates record covers the level it judged (replies, and files it did not read there, as part files) and its
    # own log; the quality record its item store (every item index.json lists, and settings.json) and its results
    run, store, rid, _ = _run(tmp_path / "g", "gates")
    rec = resolve_record(rid, store)[0]
    assert rec["covers"] == [LEVEL]
    paths = {a["path"] for a in rec["artifacts"]}
    assert f"probes/{GATE_RUN}.jsonl" in paths and {f"{LEVEL}/short/p{i}.json" for i in range(3)} <= paths
    run, store, rid, _ = _run(tmp_path / "q", "quality")
    rec = resolve_record(rid, store)[0]
    assert rec["covers"] == [ITEMS]
    assert {a["path"]: a["role"] for a in rec["artifacts"]} == {
        "quality/gsm8k/lbl.jsonl": "gsm8k_results", f"{ITEMS}/index.json": "gsm8k_items",
        f"{ITEMS}/settings.json": PART_FILE, **{f"{ITEMS}/q{i}.json": PART_FILE for i in range(3)}}


def test_a_later_operations_files_do_not_change_an_earlier_record(tmp_path: Path) -> None:
    # a second gate run's log, a second quality label's results and item store, the capability probe's log and a new
    # level are that operation's files: the earlier records stay intact
    run, store, rid, _ = _run(tmp_path, "quality")
    write_json(run.path / "probes" / "20260102T000000Z-123456.jsonl", {"header": True})
    write_json(run.path / "probes" / "capabilities.jsonl", {"probe": 1})
    write_json(run.path / "quality" / "gsm8k" / "other.jsonl", {"id": "q0"})
    write_json(run.path / "quality" / "gsm8k" / "other" / "q0.json", {"text": "x"})
    write_json(run.path / "outputs" / "e" / "load-2" / "short" / "p0.json", {"id": "p0"})
    assert _problems(run, store, rid) == {"id": [], "path": []}


def test_a_malformed_record_is_changed_not_a_traceback(tmp_path: Path) -> None:
    run, store, rid, _ = _run(tmp_path)
    for bad in ('"artifacts": "all"', '"artifacts": [5]', '"covers": {"a": 1}'):
        rec, path = resolve_record(str(run.evidence_dir / f"{rid}.json"), store)
        key, _, value = bad.partition(": ")
        rec[key.strip('"')] = json.loads(value)
        rows = check_tree(rec, path)
        assert any("record malformed" in p for p in rows[0]["problems"]), (bad, rows)
