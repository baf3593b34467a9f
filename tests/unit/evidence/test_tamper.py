"""Every kind of tampering with a run dir is "changed", verified by id (the store's copy) and by path (the run dir's
copy); touching a file's mtime alone is not (issue 19). Records are built and saved as the commands do."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from inferencekit.evidence import build_record
from inferencekit.evidence.record import artifact
from inferencekit.evidence.store import Store, check_tree, resolve_record, save_record
from inferencekit.rundir import RunDir, write_json

LEVEL = "outputs/e/load-1"


def _run(tmp_path: Path) -> tuple[RunDir, Store, str]:
    run = RunDir.create(tmp_path / "run")
    store = Store(tmp_path / "store")
    files = []
    for i in range(3):
        p = run.path / LEVEL / "short" / f"p{i}.json"
        write_json(p, {"id": f"p{i}", "text": f"reply {i}"})
        files.append(artifact(p, run.path, "reply"))
    rec = build_record(kind="bench", claim_class="observed", summary="3 replies", identity={"engine": {}},
                       artifacts=files, covers=[LEVEL], data={"run_dir": str(run.path.resolve())})
    save_record(rec, run, store)
    return run, store, rec["evidence_id"]


def _problems(run: RunDir, store: Store, rid: str) -> dict[str, list[str]]:
    by_id = check_tree(*resolve_record(rid, store))
    by_path = check_tree(*resolve_record(str(run.evidence_dir / f"{rid}.json"), store))
    return {"id": [p for r in by_id for p in r["problems"]], "path": [p for r in by_path for p in r["problems"]]}


def _reply(run: RunDir, i: int) -> Path:
    return run.path / LEVEL / "short" / f"p{i}.json"


def _edit(run: RunDir, rid: str) -> None:
    _reply(run, 0).write_text('{"id": "p0", "text": "a better reply"}')


def _delete(run: RunDir, rid: str) -> None:
    _reply(run, 1).unlink()


def _add(run: RunDir, rid: str) -> None:
    shutil.copy(_reply(run, 2), _reply(run, 2).with_name("p2~1.json"))  # one more request in the level


def _swap(run: RunDir, rid: str) -> None:
    a, b = _reply(run, 0), _reply(run, 1)
    tmp = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(tmp)


def _truncate(run: RunDir, rid: str) -> None:
    p = _reply(run, 2)
    p.write_bytes(p.read_bytes()[:5])


def _edit_record(run: RunDir, rid: str) -> None:
    p = run.evidence_dir / f"{rid}.json"
    p.write_text(p.read_text().replace("3 replies", "3 fast replies"))


TAMPER: dict[str, tuple[Callable[[RunDir, str], None], str, str]] = {  # kind: (how, problem by id, by path)
    "edit": (_edit, "artifact changed: outputs/e/load-1/short/p0.json", "artifact changed"),
    "delete": (_delete, "artifact missing: outputs/e/load-1/short/p1.json", "artifact missing"),
    "add": (_add, "artifact added: outputs/e/load-1/short/p2~1.json", "artifact added"),
    "swap": (_swap, "artifact changed: outputs/e/load-1/short/p0.json", "artifact changed"),
    "truncate": (_truncate, "artifact changed: outputs/e/load-1/short/p2.json", "artifact changed"),
    "edit the record": (_edit_record, "the run directory's copy of the record differs", "record content changed"),
}


def test_an_untouched_run_and_an_mtime_change_are_intact(tmp_path: Path) -> None:
    run, store, rid = _run(tmp_path)
    assert _problems(run, store, rid) == {"id": [], "path": []}
    os.utime(_reply(run, 0), (1, 1))  # mtime only: the bytes are the evidence
    assert _problems(run, store, rid) == {"id": [], "path": []}


@pytest.mark.parametrize("kind", list(TAMPER))
def test_each_kind_of_tampering_is_changed_by_id_and_by_path(tmp_path: Path, kind: str) -> None:
    run, store, rid = _run(tmp_path)
    how, by_id, by_path = TAMPER[kind]
    how(run, rid)
    got = _problems(run, store, rid)
    assert any(p.startswith(by_id) for p in got["id"]), got
    assert any(p.startswith(by_path) for p in got["path"]), got


def test_a_malformed_record_is_changed_not_a_traceback(tmp_path: Path) -> None:
    run, store, rid = _run(tmp_path)
    for bad in ('"artifacts": "all"', '"artifacts": [5]', '"covers": {"a": 1}'):
        rec, path = resolve_record(str(run.evidence_dir / f"{rid}.json"), store)
        key, _, value = bad.partition(": ")
        rec[key.strip('"')] = json.loads(value)
        rows = check_tree(rec, path)
        assert any("record malformed" in p for p in rows[0]["problems"]), (bad, rows)
