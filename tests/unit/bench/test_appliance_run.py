"""bench appliance: bad input is refused before anything is sent (exit 2, one line, no run dir left)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferencekit.api.dialects import PrefillIsolation, dialect
from inferencekit.bench.appliance_collect import request_nonce
from inferencekit.bench.appliance_metadata import REQUIRED_FIELDS, check_metadata
from inferencekit.bench.appliance_run import APPLIANCE_DEFAULTS, embedded_metadata, settings_from_args
from inferencekit.cli import main

DEAD = "http://127.0.0.1:9"  # nothing listens: reaching it would be a different error


def metadata(tmp_path: Path, **over) -> str:
    meta = {"hardware": "8x H100 SXM", "topology": "one host, TP 8", "model": "Llama-3.1-70B-Instruct",
            "model_revision": "main@abc123", "quantisation": "fp8", "kv_cache_dtype": "fp8_e4m3",
            "serving_engine": "vllm 0.11.0", "context_limit": 4096, "competing_traffic": "none: dedicated", **over}
    p = tmp_path / "meta.json"
    p.write_text(json.dumps(meta))
    return str(p)


def run(tmp_path: Path, *flags: str) -> int:
    return main(["bench", "appliance", "--label", "box-a", "--comparison-id", "sweep-1",
                 "--run-dir", str(tmp_path / "r"), *flags])


@pytest.mark.parametrize(("flags", "msg"), [
    ([], "--metadata FILE is required with --base-url"),
    (["--prefill-depths", "4089"],
     "prefill depth 4089 + 8 generated tokens = 4097 exceeds the declared context_limit 4096"),
    (["--extra-body", '[1]'], "--extra-body must be a JSON object, got list"),
    (["--runs", "0"], "--runs must be ≥ 1"),
    (["--prefill-depths", "0"], "--prefill-depths takes positive integers, got 0"),
    (["--concurrency", "0"], "--concurrency takes positive integers, got 0"),
    (["--prefill-depths", "64,64"], "--prefill-depths lists a value twice (64,64)"),
    (["--concurrency", "2", "--concurrency", "2"], "--concurrency lists a value twice (2,2)"),
])
def test_bad_flags_are_refused_before_sending(tmp_path, capsys, flags, msg):
    meta = [] if not flags else ["--metadata", metadata(tmp_path)]
    assert run(tmp_path, "--base-url", DEAD, *meta, *flags) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_placeholder_metadata_is_refused(tmp_path, capsys):
    path = metadata(tmp_path, hardware="CHANGE ME", extra={"notes": ["fine", "change me later"]})
    assert run(tmp_path, "--base-url", DEAD, "--metadata", path) == 2
    err = capsys.readouterr().err
    assert path in err and "$.hardware" in err and "$.extra.notes[1]" in err
    assert not (tmp_path / "r").exists()


def test_a_dead_server_is_one_line_and_no_run_dir(tmp_path, capsys):
    assert run(tmp_path, "--base-url", DEAD, "--metadata", metadata(tmp_path), "--prefill-depths", "256") == 2
    err = capsys.readouterr().err
    assert "does not answer as an OpenAI-compatible server" in err
    assert not (tmp_path / "r").exists()


def test_label_must_have_a_letter_or_digit(tmp_path, capsys):
    assert run(tmp_path, "--base-url", DEAD, "--metadata", metadata(tmp_path), "--label", "..") == 2
    assert "--label must contain a letter or a digit" in capsys.readouterr().err


def test_embedded_defaults_fit_the_embedded_context():
    base = {"prefill_runs": 3, "concurrency_runs": 3, "concurrency_tokens": 256, "concurrency_workload": "code",
            "seed": 1, "timeout": 60.0}
    emb = settings_from_args(dict(base), embedded=True)
    url = settings_from_args(dict(base), embedded=False)
    assert (emb.runs, emb.decode_tokens, emb.prefill_depths) == (3, 1024, [256, 1024, 2048])
    assert (url.runs, url.decode_tokens, url.prefill_depths) == (5, 8192, [8192, 32768, 65536])
    meta = check_metadata(embedded_metadata(), "embedded metadata")
    assert set(REQUIRED_FIELDS) <= set(meta) and meta["context_limit"] == 4096
    assert "sha256" in meta["model_revision"] and "Q4_1" in meta["quantisation"]


def test_extra_body_fields_the_receipt_fixes_are_not_sent_and_said():
    base = {**APPLIANCE_DEFAULTS, "timeout": 60.0}
    s = settings_from_args({**base, "extra_body": '{"max_tokens": 5, "top_k": 1, "n_predict": 4}',
                            "chat_template_kwargs": '{"enable_thinking": false}'}, embedded=True)
    assert s.extra_body == {"top_k": 1, "chat_template_kwargs": {"enable_thinking": False}}
    assert s.notes == ["--extra-body fields max_tokens, n_predict were not sent: bench appliance sets them itself"]
    assert "notes" not in s.to_json()  # what the receipt compares is what was measured, not what was refused
    assert settings_from_args({**base, "extra_body": '{"top_k": 1}'}, embedded=True).notes == []


def test_nonces_are_deterministic_per_comparison_id():
    assert request_nonce("sweep-1", "decode", "code", 1) == request_nonce("sweep-1", "decode", "code", 1)
    assert request_nonce("sweep-1", "decode", "code", 1) != request_nonce("sweep-2", "decode", "code", 1)
    assert request_nonce("sweep-1", "decode", "code", 1) != request_nonce("sweep-1", "decode", "code", 2)
    assert len(request_nonce("x")) == 32


def isolation_for(engine: str) -> PrefillIsolation:
    return dialect(engine).prefill_isolation


def test_cold_isolation_per_engine():
    assert isolation_for("vllm").cold_fields("s") == {"cache_salt": "s"} == isolation_for("vllm").warm_fields("s")
    assert isolation_for("llama-server").cold_fields("s") == {"cache_prompt": False}
    assert isolation_for("llama-server").warm_fields("s") == {}
    assert isolation_for("sglang").reset_path == "/flush_cache"
    lcp = isolation_for("llama-cpp-python")
    assert lcp.form == "text" and lcp.random_prefix and "not server-verified" in lcp.description
