"""quality trajectory against faults a real engine here cannot show on demand (tests/fault_server.py): a
logprob cap below what was asked, and an engine that refuses logprobs outright."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_run import run_cli
from tests.fault_server import fault_server

PROMPTS = [{"id": f"p{i}", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(4)]


def prompts_file(tmp_path: Path) -> Path:
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in PROMPTS))
    return p


def test_the_cap_in_the_engines_400_is_read_once_and_every_request_uses_it(tmp_path):
    with fault_server(logprob_cap=5) as (url, seen):
        code, out = run_cli(["quality", "trajectory", "--base-url", url, "--prompts", str(prompts_file(tmp_path)),
                             "--max-tokens", "3", "--run-dir", str(tmp_path / "run")])
    assert code == 0, out
    asked = [r["body"].get("top_logprobs") for r in seen if "messages" in r["body"]]
    # the first prompt alone meets the cap (20 refused, 5 taken); the other three ask 5 at once
    assert asked == [20, 5, 5, 5, 5]
    rec = json.loads(next((tmp_path / "run" / "evidence").glob("ev_*.json")).read_text())
    assert rec["data"]["top_logprobs_returned_min"] == 5
    assert "max allowed: 5" in rec["data"]["cap_errors"][0]
    assert any("lists 5 alternatives, not the 20 asked" in x for x in rec["limitations"])
    doc = json.loads((Path(out["dir"]) / "p3.json").read_text())
    assert doc["top_logprobs_returned"] == 5 and doc["token_id_method"] == "ids"


def test_an_engine_that_refuses_logprobs_gets_text_only_trajectories(tmp_path):
    with fault_server(refuse_logprobs=True) as (url, seen):
        code, out = run_cli(["quality", "trajectory", "--base-url", url, "--prompts", str(prompts_file(tmp_path)),
                             "--max-tokens", "3", "--run-dir", str(tmp_path / "run")])
    assert code == 0, out
    doc = json.loads((Path(out["dir"]) / "p0.json").read_text())
    assert doc["token_id_method"] == "text" and doc["text"] == "Hello there" and doc["token_ids"] is None
    assert "logprobs" not in doc["request"]
    assert out["missing"] == ["logprobs"]
    assert any("refused them: HTTP 400" in x for x in out["limitations"])
    with_lp = [r for r in seen if r["body"].get("logprobs")]
    assert len(with_lp) == 5  # 20 → 10 → 5 → 2 → 1 on the first prompt, then never again
