"""User errors found by a new-user trial: each is one line, exit 2, nothing sent, nothing left behind."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from inferencekit.cli import main
from inferencekit.rundir import RunDir, write_json
from tests.fault_server import fault_server


@pytest.mark.parametrize("url,msg", [
    ("http://127.0.0.1:99999", "not a valid URL"),
    ("http://127.0.0.1:abc", "not a valid URL"),
    ("http://[::1", "not a valid URL"),
    ("http://127.0.0.1:8000/v1?org=acme", "has a query string"),  # failed before 19: dropped, written to run.json
])
def test_malformed_urls(url, msg, capsys, tmp_path):
    assert main(["bench", "serve", "--base-url", url, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


BAD_VALUES = [
    (["--request-rate", "inf"], "finite"),
    (["--request-rate", "nan"], "finite"),
    (["--slo", "ttft=100,ttft=200"], "twice"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--temperature", "-1"], "--temperature"),
    (["--input-len", "50"], "only to --dataset random"),
    (["--max-concurrency", "4"], "give --request-rate"),
    (["--kat", "-1"], "--kat must be ≥ 0"),
    (["--kat", "500"], "--kat 500: the packaged dev set has 110"),
    (["--structured", "-1"], "--structured must be ≥ 0"),
    (["--structured", "500"], "--structured 500: at most 200"),
    (["--repeats", "0"], "--repeats must be ≥ 1"),
    (["--metrics-interval", "-1"], "--metrics-interval takes 0 (off) or seconds from 0.1"),
    (["--metrics-interval", "0.001"], "--metrics-interval takes 0 (off) or seconds from 0.1"),
    (["--shared-prefix-tokens", "64"], "applies only to --dataset random"),
    (["--turns", "3"], "--turns and --think-time apply only to --dataset conversations"),
    (["--dataset", "conversations", "--input-len", "8", "--request-rate", "2", "--workers", "2"],
     "runs its sessions from one client process"),
    (["--dataset", "conversations", "--input-len", "8", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2",
      "--ramp-up-strategy", "linear"], "drop --ramp-up-strategy/--workers/--ray"),
    (["--rate-of", "turns", "--request-rate", "2"], "--rate-of turns applies to --dataset conversations"),
    (["--conversation-source", "sharegpt"], "--conversation-source applies only to --dataset conversations"),
    (["--dataset", "conversations", "--conversation-source", "sharegpt", "--input-len", "8"],
     "--conversation-source sharegpt sends ShareGPT's human messages as they are"),
    (["--dataset", "conversations", "--input-len", "8", "--rate-of", "turns"], "with --request-rate"),
    (["--dataset", "conversations", "--input-len", "8", "--think-time", "-1"], "--think-time from 0 to 3600"),
    (["--dataset", "random", "--input-len", "8", "--shared-prefix-tokens", "0"], "takes a positive token count"),
    (["--prefix-groups", "3"], "--prefix-groups needs --shared-prefix-tokens"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--concurrency", "2"],
     "drop --concurrency"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "needs --ramp-up-start-rps and --ramp-up-end-rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "4", "--ramp-up-end-rps", "2"], "must be ≤"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--request-rate", "3"],
     "drop --request-rate"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--duration", "5"],
     "drop --duration"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--workers", "2"],
     "drop --workers"),
    (["--ramp-up-end-rps", "2"], "need --ramp-up-strategy"),
    (["--structured", "4", "--structured-max-tokens", "0"], "--structured-max-tokens ≥ 1"),
    # failed before 19 (a traceback, or refused only after a request was sent):
    (["--max-tokens", str(2**64)], "argument --max-tokens: 18446744073709551616 is out of range"),
    (["--seed", str(2**64)], "argument --seed: 18446744073709551616 is out of range"),
    (["--num-prompts", str(2**64)], "argument --num-prompts: 18446744073709551616 is out of range"),
    (["--timeout", "inf"], "argument --timeout: expected a finite number, got 'inf'"),
    (["--duration", "inf"], "argument --duration: expected a finite number"),
    (["--duration", "nan"], "argument --duration: expected a finite number"),
    (["--arrival", "gamma", "--request-rate", "2", "--burstiness", "nan"], "argument --burstiness: expected a finite"),
    (["--request-rate", "1e-300"], "--request-rate 1e-300 is outside 0.001..1e+06 requests/s"),
    (["--request-rate", "1e308"], "--request-rate 1e+308 is outside 0.001..1e+06 requests/s"),
    (["--request-rate", "2,inf"], "argument --request-rate: expected a comma-separated list of numbers"),
    (["--temperature", "nan"], "argument --temperature: expected a finite number"),
    (["--engine-label", "../x"], "--engine-label '../x' is not a safe file name"),
    (["--engine-label", ".."], "--engine-label '..' is not a safe file name"),
]


@pytest.mark.parametrize("flags,msg", BAD_VALUES, ids=[" ".join(f) for f, _ in BAD_VALUES])
def test_bad_values(flags, msg, capsys, tmp_path):
    hits: list[str] = []  # a live server that counts every request, engine detection's GETs included
    with fault_server(hits=hits) as (url, _):
        assert main(["bench", "serve", "--base-url", url, *flags, "--run-dir", str(tmp_path / "r")]) == 2
    assert hits == []  # nothing sent
    err = capsys.readouterr().err
    assert msg in err
    assert err.count("\n") == 1 and err.startswith("inferencekit: error: "), err  # one line
    assert [f for f in flags if f.startswith("--")][-1] in err, err  # naming the flag (the last one given is at fault)
    assert not (tmp_path / "r").exists()


def test_json_mode_errors_are_one_json_document(capsys, tmp_path):
    assert main(["bench", "serve", "--request-rate", "0", "--json"]) == 2
    assert json.loads(capsys.readouterr().out) == {
        "error": "--request-rate values must be finite and > 0 requests/s, got 0.0 (for 'as fast as possible' use "
                 "closed loop: --concurrency)", "exit_code": 2}


def test_a_run_dir_holds_one_run(capsys, tmp_path):
    run = RunDir.create(tmp_path / "r")
    run.update_run(operation="verify")
    assert main(["bench", "serve", "--base-url", "http://127.0.0.1:9", "--run-dir", str(run.path)]) == 2
    assert "already holds a run (verify)" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["probe", "--base-url", "http://127.0.0.1:9", "--run-dir", str(f)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_resume_refuses_other_runs_and_new_settings(capsys, tmp_path):
    other = RunDir.create(tmp_path / "v")
    other.update_run(operation="verify")
    assert main(["bench", "serve", "--resume", str(other.path)]) == 2
    assert "--resume finishes bench serve runs" in capsys.readouterr().err
    bench = RunDir.create(tmp_path / "b")
    bench.update_run(operation="bench.serve", bench_config={"levels": [{"label": "c1", "mode": "closed",
                                                                        "concurrency": 1}]})
    assert main(["bench", "serve", "--resume", str(bench.path), "--concurrency", "8", "--max-tokens", "100"]) == 2
    assert "drop --concurrency, --max-tokens" in capsys.readouterr().err


def test_unreachable_server_leaves_no_run_dir(capsys, tmp_path):
    assert main(["probe", "--base-url", "http://127.0.0.1:9", "--run-dir", str(tmp_path / "p")]) == 2
    assert "does not answer" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_evidence_show_warns_when_a_record_does_not_verify(capsys, tmp_path):
    from inferencekit.evidence import build_record

    rec = build_record(kind="bench", claim_class="observed", summary="s", identity={})
    rec["summary"] = "edited"
    p = tmp_path / "ev.json"
    write_json(p, rec)
    assert main(["evidence", "show", str(p)]) == 0
    assert "WARNING: this record does not verify (record content changed" in capsys.readouterr().err


@pytest.mark.parametrize("flags,msg", [
    (["--orders", "1"], "--orders must be 2..6"),
    (["--orders", "7"], "--orders must be 2..6"),
    (["--max-tokens", "-1"], "--max-tokens must be at least 1 (or 0: BFCL's own budget)"),
    (["--concurrency", "0"], "--concurrency at least 1"),
    (["--sample-cap", "-1"], "--sample-cap must be ≥ 0"),
    (["--per-subset", "0"], "--per-subset ≥ 1"),
    (["--bfcl-data", "/nonexistent"], "/nonexistent"),
    (["--extra-body", '{"chat_template_kwargs": 3}'], "chat_template_kwargs must be a JSON object"),
])
def test_gates_order_bad_values(flags, msg, capsys, tmp_path):
    assert main(["gates", "order", "--base-url", "http://127.0.0.1:9", *flags, "--run-dir", str(tmp_path / "r")]) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_bench_appliance_refuses_to_guess_among_several_served_models(capsys, tmp_path):
    # before 18 the receipt took the first listed model; the seed refused
    from tests.fault_server import fault_server

    meta = tmp_path / "meta.json"
    write_json(meta, {"hardware": "test box", "topology": "1 node", "model": "m-a", "model_revision": "r1",
                      "quantisation": "none", "kv_cache_dtype": "f16", "serving_engine": "fault",
                      "context_limit": 200000, "competing_traffic": "none"})
    with fault_server(model_ids=("m-a", "m-b")) as (url, seen):
        code = main(["bench", "appliance", "--base-url", url, "--metadata", str(meta), "--label", "a",
                     "--comparison-id", "c1", "--run-dir", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code == 2 and "lists 2 models (m-a, m-b); pass --model" in err, err
    assert not [s for s in seen if s.get("body")]  # nothing was generated
    assert not (tmp_path / "a").exists()


def _gz_flipped(path: Path) -> Path:
    """A .jsonl.gz whose deflate stream has one byte flipped (its header intact): zlib fails inside the stream."""
    raw = bytearray(gzip.compress(b"".join(json.dumps({"id": f"p{i}", "prompt": f"Count to {i}."}).encode() + b"\n"
                                           for i in range(20))))
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("record,msg", [
    ({"id": "a", "messages": [{"role": ["user"], "content": "hi"}]}, "messages[0].role ['user'] is not one of"),
    ({"id": "a", "bucket": "..", "prompt": "hi"}, "'bucket' '..' must be a safe name"),
    ({"id": "../etc", "prompt": "hi"}, "'../etc'"),
    (None, "prompts.jsonl.gz"),  # a flipped byte in a gzipped prompt file: its path and why, not a zlib traceback
], ids=["role-is-a-list", "bucket-dotdot", "id-dotdot", "gz-flipped-byte"])
def test_a_bad_prompt_file_is_refused_before_any_request_and_leaves_no_run_dir(record, msg, capsys, tmp_path):
    if record is None:
        path = _gz_flipped(tmp_path / "prompts.jsonl.gz")
    else:
        path = tmp_path / "prompts.jsonl"
        path.write_text(json.dumps({"id": "ok", "prompt": "fine"}) + "\n" + json.dumps(record) + "\n")
    hits: list[str] = []
    with fault_server(hits=hits) as (url, _):
        code = main(["bench", "serve", "--base-url", url, "--dataset", str(path), "--num-prompts", "2",
                     "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and hits == [], (code, hits)  # nothing sent: not even the engine detection's GET
    assert err.count("\n") == 1 and err.startswith("inferencekit: error: ") and str(path) in err and msg in err, err
    if record is not None:
        assert f"{path}:2:" in err  # the path and the line
    assert "Traceback" not in err and not (tmp_path / "run").exists()


CHEAT_PROXY_BAD_FLAGS = [
    (["--cheat", "none", "--truncate-chars", "100"],
     "--truncate-chars applies only to --cheat silent-truncate; add silent-truncate or drop --truncate-chars"),
    (["--cheat", "usage-inflate", "--corrupt-share", "0.5"],
     "--corrupt-share applies only to --cheat json-broken-under-load"),
    (["--cheat", "none", "--corrupt-seed", "3"], "--corrupt-seed applies only to --cheat json-broken-under-load"),
    (["--cheat", "none", "--mask-block", "cjk"], "--mask-block applies only to --cheat vocab-mask"),
    (["--cheat", "silent-truncate", "--truncate-chars", "1"], "--truncate-chars must be ≥ 2"),
    (["--cheat", "json-broken-under-load", "--corrupt-share", "0"], "--corrupt-share must be in (0, 1], got 0.0"),
    (["--cheat", "json-broken-under-load", "--corrupt-share", "1.5"], "--corrupt-share must be in (0, 1], got 1.5"),
]


@pytest.mark.parametrize("flags,msg", CHEAT_PROXY_BAD_FLAGS, ids=[" ".join(f) for f, _ in CHEAT_PROXY_BAD_FLAGS])
def test_cheat_proxy_refuses_a_cheat_flag_without_its_cheat_or_out_of_range(flags, msg, capsys):
    hits: list[str] = []
    with fault_server(hits=hits) as (url, _):
        assert main(["cheat-proxy", "--upstream", url, *flags]) == 2
    assert hits == []  # refused before the upstream check
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and err.startswith("inferencekit: error: "), err


@pytest.mark.parametrize("flags, msg", [
    (["--contract", "--items", "bogus"], "--items: unknown item 'bogus'; known: temperature, top_k"),
    (["--contract", "--json-load", "-1"], "--json-load must be ≥ 0"),
    (["--contract", "--concurrency", "1"], "--concurrency ≥ 2"),
    (["--contract", "--tokenizer", "/nonexistent/model.gguf"], "--tokenizer '/nonexistent/model.gguf': no such file"),
    (["--items", "stop"], "--tokenizer and --items are used by --contract only"),
])
def test_probe_contract_refuses_bad_flags_before_any_request(flags, msg, capsys, tmp_path):
    hits: list = []
    with fault_server(hits=hits) as (url, _):  # a server that would answer: nothing may be sent to it
        assert main(["probe", "--base-url", url, "--run-dir", str(tmp_path / "r"), *flags]) == 2
    assert hits == []
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


def _serve_run(path: Path, record: dict | None, prompt_set: dict | None = None) -> Path:
    """A bench serve run dir as `bench compare` reads it: run.json naming the record, the record in evidence/."""
    run = RunDir(path)
    path.mkdir(parents=True)
    fields: dict = {"operation": "bench.serve", "prompt_set": prompt_set or {"name": "dev", "sha256": "ab"}}
    if record is not None:
        fields["bench_record"] = record["evidence_id"]
        write_json(run.evidence_dir / f"{record['evidence_id']}.json", record)
    write_json(path / "run.json", fields)
    return path


def _serve_record(max_tokens: int = 16) -> dict:
    return {"kind": "bench", "evidence_id": f"ev_{max_tokens:024d}",
            "identity": {"workload": {"dataset": "dev", "max_tokens": max_tokens}},
            "data": {"config": {}, "levels": {"c1": {"spec": {"label": "c1", "mode": "closed", "concurrency": 1,
                                                              "point": "c1"}}}}}


@pytest.mark.parametrize("which, msg", [
    ("receipt", "is a bench serve run directory but"),
    ("unfinished", "a bench serve run dir without a bench record (the run did not finish; `inferencekit bench serve "
                   "--resume"),
    ("damaged", "its bench record ev_000000000000000000000016 is missing or damaged"),
])
def test_bench_compare_refuses_a_serve_run_it_cannot_compare(which, msg, capsys, tmp_path):
    a = _serve_run(tmp_path / "a", _serve_record())
    if which == "receipt":
        b = tmp_path / "receipt.json"
        b.write_text("{}")
    elif which == "unfinished":
        b = _serve_run(tmp_path / "b", None)
    else:
        b = _serve_run(tmp_path / "b", _serve_record())
        (b / "evidence" / "ev_000000000000000000000016.json").write_text("[1]")
    assert main(["bench", "compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err


def test_bench_compare_refuses_serve_runs_measured_unalike_listing_the_fields(capsys, tmp_path):
    a = _serve_run(tmp_path / "a", _serve_record(16))
    b = _serve_run(tmp_path / "b", _serve_record(64), prompt_set={"name": "dev", "sha256": "cd"})
    assert main(["bench", "compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "were not measured alike; refusing to compare them (2 differing fields):" in err
    assert '  prompt_set.sha256: A="ab"  B="cd"' in err and "  workload.max_tokens: A=16  B=64" in err
    assert main(["bench", "compare", str(a), str(b), "--allow-mismatch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [d["field"] for d in out["differences"]] == ["prompt_set.sha256", "workload.max_tokens"]


@pytest.mark.parametrize("flags,msg", [
    ([], "bench sweep needs an SLO"),
    (["--goodput", "0.9"], "--goodput needs --slo"),
    (["--goodput", "1.5", "--slo", "ttft=500"], "--goodput is a fraction"),
    (["--slo-target", "ttft_p98=500"], "use <metric>_<stat>"),
    (["--slo-target", "ttft_p99=500", "--concurrency", "1,2", "--request-rate", "1"], "give one grid"),
    (["--slo-target", "ttft_p99=500", "--start", "8", "--max", "4"], "need --min ≤ --start ≤ --max"),
    (["--slo-target", "ttft_p99=500", "--axis", "concurrency", "--start", "1.5"], "whole streams"),
    (["--slo-target", "ttft_p99=500", "--resolution", "1.5"], "--resolution must be"),
    (["--slo-target", "ttft_p99=500", "--repeats", "0"], "--repeats must be ≥ 1"),
    (["--slo-target", "ttft_p99=500", "--kat", "-2"], "--kat must be ≥ 0"),
])
def test_bench_sweep_refuses_bad_flags_before_anything_is_sent(flags, msg, capsys, tmp_path):
    assert main(["bench", "sweep", "--base-url", "http://127.0.0.1:9", *flags, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_bench_sweep_resume_refuses_other_runs_and_new_settings(capsys, tmp_path):
    other = RunDir.create(tmp_path / "serve")
    other.update_run(operation="bench.serve", bench_config={"levels": []})
    assert main(["bench", "sweep", "--resume", str(other.path)]) == 2
    assert "--resume finishes bench sweep runs" in capsys.readouterr().err
    sweep = RunDir.create(tmp_path / "sweep")
    sweep.update_run(operation="bench.sweep", bench_config={"levels": []}, sweep_settings={"space": {}})
    assert main(["bench", "sweep", "--resume", str(sweep.path), "--max", "8", "--kat", "2"]) == 2
    assert "drop --kat, --max" in capsys.readouterr().err


@pytest.mark.parametrize("line,flags,msg", [
    ('{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]}', [],
     "{path}:2: too few 'hash_ids'"),
    ('{"timestamp": 0, "input_length": "40", "output_length": 4}', [], "{path}:2:"),
    ('not json', [], "{path}:2:"),
    ('{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2]}', ["--concurrency", "2"],
     "--trace sets the load, the prompts and their times itself; drop --concurrency"),
    ('{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2]}', ["--time-scale", "0"],
     "--time-scale must be > 0"),
    ('{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [0, 1, 2]}', ["--max-tokens", "8"],
     "drop --max-tokens"),
])
def test_a_bad_trace_is_refused_before_any_request(line, flags, msg, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 16, "output_length": 4, "hash_ids": [0]}\n' + line + "\n")
    hits: list[str] = []
    with fault_server(hits=hits) as (url, _):
        assert main(["bench", "serve", "--base-url", url, "--trace", str(trace), "--trace-block-size", "16", *flags,
                     "--run-dir", str(tmp_path / "r")]) == 2
    assert hits == []
    err = capsys.readouterr().err
    assert msg.format(path=trace) in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
