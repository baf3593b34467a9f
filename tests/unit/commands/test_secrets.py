"""The API key's value never reaches disk (issue 19): a server that echoes the Authorization header, a key that
was pasted into the URL path, and one inside --extra-body; every byte written, run dir and evidence store, is
grepped for the value. The key is read from an environment variable whose name alone is recorded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferencekit.cli import main
from inferencekit.redact import MARK
from tests.fault_server import fault_server

KEY = "sk-test-7f3a9c0e1b2d4f6a8c0e2b4d6f8a0c1e"


def _written(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for r in roots if r.is_dir() for p in r.rglob("*") if p.is_file()}


def test_no_written_byte_holds_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("IK_TEST_KEY", KEY)
    home = Path(os.environ["INFERENCEKIT_HOME"])
    with fault_server(echo_auth=True) as (url, seen):
        for i, (base, extra) in enumerate([(url, "{}"), (f"{url}/{KEY}", "{}"), (url, f'{{"user": "{KEY}"}}')]):
            code = main(["bench", "serve", "--base-url", base, "--api-key-env", "IK_TEST_KEY", "--concurrency", "1",
                         "--num-prompts", "2", "--max-tokens", "4", "--warmup", "0", "--extra-body", extra,
                         "--run-dir", str(tmp_path / f"r{i}"), "--json", "--quiet"])
            assert code in (1, 3), (base, code)
    assert any(s["headers"].get("Authorization") == f"Bearer {KEY}" for s in seen)  # it was sent, and echoed back
    out = capsys.readouterr()
    files = _written(tmp_path, home)
    assert any(p.endswith(".json") and "/outputs/" in p for p in files)  # the 401 replies were written
    leaks = [p for p, data in files.items() if KEY.encode() in data]
    assert leaks == [] and KEY not in out.out and KEY not in out.err
    assert any(MARK.encode() in data for data in files.values())  # scrubbed, not left out: the reply says where
    assert any(b"IK_TEST_KEY" in data for data in files.values())  # the variable's name is recorded
