"""The lm-eval backend of ``quality gsm8k``: a real lm-evaluation-harness subprocess, offline.

- On the embedded engine (llama-cpp-python + SmolLM2-135M): zero-shot GSM8K, 5 problems, 256 tokens,
  with Hugging Face unreachable (every non-loopback connection goes to a dead proxy; lm-eval gets an
  empty HF_HOME): lm-eval's accuracies are recomputed from its own samples file, its targets are the
  packaged answers', and its logs show no download.
- On a loopback recorder (no engine): what reaches the server (chat_template_kwargs, extra fields,
  the bearer key), that the key is written nowhere, and the failure paths (no server, timeout).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import ClassVar

import pytest

from inferencekit.data.gsm8k import load_gsm8k
from inferencekit.errors import OpError
from inferencekit.quality.gsm8k_lmeval import TASK_NAME, parse_samples, run_lm_eval

DATA_FILE = Path(str(resources.files("inferencekit.data").joinpath("gsm8k", "test.jsonl")))
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
              "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
DOWNLOAD_SIGNS = re.compile(r"huggingface\.co|Downloading|ProxyError|ConnectionError|LocalEntryNotFound",
                            re.IGNORECASE)


@pytest.fixture
def no_network(monkeypatch) -> None:
    for k, v in NO_NETWORK.items():
        monkeypatch.setenv(k, v)


def _lm_eval_logs(out: Path) -> str:
    return (out / "lm_eval.stderr.log").read_text() + (out / "lm_eval.stdout.log").read_text()


@pytest.mark.engine
def test_lm_eval_scores_five_problems_on_the_embedded_engine_offline(embedded_engine, no_network, tmp_path):
    out = tmp_path / "lmeval"
    r = run_lm_eval(base_url=embedded_engine.url, model=embedded_engine.model_name, data_file=DATA_FILE, limit=5,
                    concurrency=1, max_tokens=128, out_dir=out, timeout_s=800, api_key_env=None, seed=0)
    print("lm-eval on the embedded engine:", {k: r[k] for k in ("strict_accuracy", "flexible_accuracy", "n",
                                                                  "wall_s")})
    assert r["n"] == 5 and r["n_original"] == 1319
    assert r["lm_eval_version"] == "0.4.13"
    rows = parse_samples(Path(r["samples_path"]).read_text().splitlines())
    assert [row["doc_id"] for row in rows] == [0, 1, 2, 3, 4]
    assert [row["target"] for row in rows] == [it.target for it in load_gsm8k().items[:5]]
    assert all(row["reply"].strip() for row in rows)  # the engine answered every problem
    for label in ("strict", "flexible"):
        acc = r[f"{label}_accuracy"]
        assert 0.0 <= acc <= 1.0
        assert acc == pytest.approx(sum(row[label]["correct"] for row in rows) / 5)
    for row in rows:  # lm-eval's strict-match, re-read from the reply: the number after the first "#### "
        m = re.search(r"#### (\-?[0-9\.\,]+)", row["reply"])
        assert row["strict"]["answer"] == (m.group(1) if m else "[invalid]")
        assert row["strict"]["correct"] == (m is not None and m.group(1).replace(",", "").rstrip(".") == row["target"])
    # offline: the data came from our file, through an empty HF_HOME, and nothing tried the network
    doc = json.loads(Path(r["results_path"]).read_text())
    assert doc["configs"][TASK_NAME]["dataset_kwargs"]["data_files"]["test"] == str(DATA_FILE.resolve())
    assert doc["config"]["model_args"]["base_url"] == f"{embedded_engine.url}/v1/chat/completions"
    logs = _lm_eval_logs(out)
    assert not DOWNLOAD_SIGNS.search(logs), DOWNLOAD_SIGNS.search(logs)


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict]] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"authorization": self.headers.get("Authorization"), "body": body})
        out = json.dumps({"id": "r", "object": "chat.completion", "model": body["model"], "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "So 9 in all.\n#### 18"}}
        ]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict]]]:
    _Recorder.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/v1", _Recorder.seen
    srv.shutdown()
    srv.server_close()


def test_extra_fields_and_the_key_reach_the_server_and_the_key_is_written_nowhere(recorder, no_network, tmp_path,
                                                                                  monkeypatch):
    url, seen = recorder
    monkeypatch.setenv("IK_TEST_KEY", "sk-test-9f8e7d")
    out = tmp_path / "lmeval"
    r = run_lm_eval(base_url=url, model="recorded", data_file=DATA_FILE, limit=2, concurrency=2, max_tokens=32,
                    out_dir=out, timeout_s=300, api_key_env="IK_TEST_KEY", seed=7,
                    chat_template_kwargs={"enable_thinking": False}, extra_body={"top_k": 1, "stream": True})
    assert len(seen) == 2
    for req in seen:
        assert req["authorization"] == "Bearer sk-test-9f8e7d"
        body = req["body"]
        assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 1
        assert "stream" not in body  # refused: lm-eval reads one JSON reply
        assert (body["max_tokens"], body["temperature"], body["seed"], body["stop"]) == (32, 0, 7, [])
    # the reply "#### 18" is right for problem 0 only, under both filters
    assert (r["n"], r["strict_accuracy"], r["flexible_accuracy"]) == (2, 0.5, 0.5)
    assert "sk-test-9f8e7d" not in json.dumps(r["argv"])
    for f in out.rglob("*"):
        if f.is_file():
            assert b"sk-test-9f8e7d" not in f.read_bytes(), f
    assert not DOWNLOAD_SIGNS.search(_lm_eval_logs(out))


def test_a_server_that_does_not_answer_fails_with_lm_evals_stderr(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    port = srv.server_port
    srv.server_close()  # nothing listens there now
    with pytest.raises(OpError, match=r"lm-eval failed \(exit \d+\); last lines of .*lm_eval\.stderr\.log") as e:
        run_lm_eval(base_url=f"http://127.0.0.1:{port}", model="m", data_file=DATA_FILE, limit=1, concurrency=1,
                    max_tokens=8, out_dir=tmp_path, timeout_s=300, api_key_env=None)
    assert "Connection refused" in str(e.value) or "ConnectionError" in str(e.value)


def test_a_run_past_its_timeout_is_stopped(tmp_path):
    with pytest.raises(OpError, match=r"lm-eval did not finish within 0\.5 s"):
        run_lm_eval(base_url="http://127.0.0.1:9", model="m", data_file=DATA_FILE, limit=1, concurrency=1,
                    max_tokens=8, out_dir=tmp_path, timeout_s=0.5, api_key_env=None)
