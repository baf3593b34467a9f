"""`inferencekit engine up|status|down` on the real embedded engine."""

from __future__ import annotations

import json

import pytest

from inferencekit.cli import main
from inferencekit.engines.launcher import http_ok, pid_alive

pytestmark = pytest.mark.engine


def test_engine_up_status_down(tmp_path, capsys):
    code = main(["engine", "up", "--name", "t-embedded", "--run-dir", str(tmp_path / "run"), "--json"])
    up = json.loads(capsys.readouterr().out)
    assert code == 0, up
    try:
        assert up["engine"] == "llama-cpp-python" and up["url"].startswith("http://127.0.0.1:")
        assert http_ok(up["url"] + "/v1/models")
        assert up["log_path"].startswith(str(tmp_path / "run" / "engine"))
        assert main(["engine", "up", "--name", "t-embedded"]) == 2  # the name is taken
        assert "already running" in capsys.readouterr().err
        assert main(["engine", "status", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["engines"]}
        assert rows["t-embedded"]["alive"] and rows["t-embedded"]["answers"]
    finally:
        assert main(["engine", "down", "--name", "t-embedded", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"stopped": ["t-embedded"]}
    assert not pid_alive(up["pid"]) and not http_ok(up["url"] + "/v1/models")
