"""Every live gate judged offline from real, recorded gate runs (``probes/<gate-run>.jsonl``).

The logs were recorded by ``benchmarks/gate_calibration.py`` on 30 Nov 2026: ``gates run`` through the
cheat proxy in front of llama.cpp's llama-server serving SmolLM2-135M-Instruct, with the server itself
as the reference engine (gzip-compressed here). The honest one is the proxy with no cheat, all six
live gates; the others are one cheat each against its target gate.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from inferencekit.gates.check import check_run_dir, engines_in, judge_probe_log
from inferencekit.gates.probes.collect import read_probe_log
from tests.paths import FIXTURES

LOGS = FIXTURES / "gates" / "probe-logs"


def unpack(name: str, run_dir: Path) -> Path:
    """The log as ``run_dir/probes/<gate-run>.jsonl`` (its name is the gate run's, from the header)."""
    raw = gzip.decompress((LOGS / f"{name}.jsonl.gz").read_bytes())
    gate_run = orjson.loads(raw.split(b"\n", 1)[0])["gate_run"]
    path = run_dir / "probes" / f"{gate_run}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    return path


def judged(name: str, tmp_path: Path) -> dict[str, Any]:
    header, records, bad = read_probe_log(unpack(name, tmp_path))
    assert bad == 0
    return judge_probe_log(header, records)


def test_honest_llama_server_passes_every_live_gate(tmp_path):
    gates = judged("llama-server-honest-full", tmp_path)
    assert {g: v.verdict for g, v in gates.items()} == {
        "caching": "PASS", "token_count": "PASS", "output_length": "PASS", "hidden_probes": "PASS",
        "rare_tokens": "PASS", "spec_exact": "PASS"}
    caching = gates["caching"].metrics
    assert caching["pairs"] == 4 and caching["ttft_speedup_median"] < 1.1 and caching["decode_speedup_median"] < 1.1
    assert gates["output_length"].metrics["exact"] == 3  # llama-server honours ignore_eos
    assert gates["spec_exact"].metrics["ab_early_divergences"] == gates["spec_exact"].metrics["aa_early_divergences"]
    assert gates["token_count"].metrics["streamed_methods"] == ["token_ids"]  # ids through logprobs top 1


def test_output_cache_cheat_fails_caching_with_the_output_cache_reason(tmp_path):
    caching = judged("llama-server-output-cache", tmp_path)["caching"]
    assert caching.verdict == "FAIL" and caching.metrics["cause"] == "output_cache"
    assert "output caching" in caching.reason and "one instant" in caching.reason
    assert caching.metrics["decode_speedup_median"] >= 1e6  # every repeat's tokens arrived at once


def test_ignore_eos_dropped_cheat_fails_output_length(tmp_path):
    # the proxy strips ignore_eos, then claims finish "length" and usage = max_tokens: the token-id stream
    # of a reply that stopped early is shorter than the usage it claims
    gate = judged("llama-server-ignore-eos-dropped", tmp_path)["output_length"]
    assert gate.verdict == "FAIL" and gate.metrics["ignore_eos_requests"] == 3
    assert gate.reason.startswith("2/3 ignore_eos replies are not max_tokens long")
    short = [d for d in gate.details if d["usage"] == 16]
    assert len(short) == 2 and all(d["streamed"] < 16 for d in short)


def test_temperature_ignored_cheat_fails_hidden_probes_while_the_logprobs_are_sound(tmp_path):
    gate = judged("llama-server-temperature-ignored", tmp_path)["hidden_probes"]
    assert gate.verdict == "FAIL"
    assert "T=1 samples equal the greedy output on all 8/8 prompts (temperature ignored?)" in gate.reason
    assert gate.metrics["samples_equal_greedy"] == 8 and gate.metrics["logprob_violations"] == 0


@pytest.mark.parametrize("name", ["llama-server-honest-full", "llama-server-output-cache",
                                  "llama-server-ignore-eos-dropped", "llama-server-temperature-ignored"])
def test_gates_check_on_a_run_dir_gives_the_gate_runs_verdicts(name, tmp_path):
    direct = judged(name, tmp_path / "a")
    run_dir = tmp_path / "b"
    unpack(name, run_dir)
    assert engines_in(run_dir) == ["llama-server"]
    result = check_run_dir(run_dir, "llama-server")
    gates, files = result.gates, result.files
    checked = {g.gate: g.verdict for g in gates if g.gate in direct}
    assert checked == {g: v.verdict for g, v in direct.items()}
    assert len(files) == 1 and files[0].startswith("probes/")
    # a torn last line (the process died while writing) is skipped and said, not fatal
    log = next((run_dir / "probes").glob("*.jsonl"))
    with open(log, "ab") as fh:
        fh.write(b'{"id": "x", "kind": "cou')
    again = check_run_dir(run_dir, "llama-server")
    assert {g.gate: g.verdict for g in again.gates if g.gate in direct} == checked
    assert any("unreadable line" in x for x in again.notes)
    shutil.rmtree(run_dir)


def test_every_pass_of_the_honest_run_names_its_n_and_bound_and_strict_turns_what_rests_on_less_unproven(tmp_path):
    import json

    from tests.cli_run import run_cli

    run_dir = tmp_path / "run"
    unpack("llama-server-honest-full", run_dir)
    (run_dir / "run.json").write_text("{}")
    code, out = run_cli(["gates", "check", str(run_dir)])
    rec = json.loads(next((run_dir / "evidence").glob(f"{out['evidence_id']}.json")).read_text())
    passes = [g for g in rec["data"]["gates"] if g["verdict"] == "PASS"]
    assert code == 0 and len(passes) == 6
    assert all(g["judged"] > 0 and g["rules_out"] for g in passes), passes
    assert any("is ruled out at 95% (Wilson)" in g["rules_out"] for g in passes)
    # unique_prompts and order judged nothing here (no load, no order draw): not applicable, so they do not count…
    na = {g["gate"] for g in rec["data"]["gates"] if not g["applicable"]}
    assert na >= {"unique_prompts"}
    # …unless --strict, for CI: then a gate that never ran is no pass
    code, out = run_cli(["gates", "check", str(run_dir), "--strict"])
    assert code == 3 and out["verdict"] == "UNPROVEN"
    assert out["gates"]["unique_prompts"]["reason"].startswith("--strict: not applicable to this run (NOT RUN)")


def test_a_field_the_server_rejected_on_a_gates_probes_is_a_fallback_of_that_gate(tmp_path):
    from inferencekit.gates.result import strict_gate

    header, records, _ = read_probe_log(unpack("llama-server-honest-full", tmp_path))
    count = next(r for r in records if r["kind"] == "count")
    count["reply"] = {**count["reply"], "dropped_fields": ["chat_template_kwargs"]}
    gates = judge_probe_log(header, records)
    tc = gates["token_count"]
    assert tc.verdict == "PASS" and len(tc.fallbacks) == 1
    assert tc.fallbacks[0] == ("the server rejected optional fields (HTTP 400) and the probes were sent without them: "
                               f"chat_template_kwargs on 1 request(s) (requests: {count['id']})")
    assert tc.fallbacks[0] in tc.limitations and strict_gate(tc).verdict == "UNPROVEN"
    assert gates["caching"].fallbacks == ()  # only the gate whose probes lost the field


def test_a_gzipped_probe_log_of_an_archived_run_is_judged_like_a_plain_one(tmp_path):
    # before: RunDir.gate_run_logs globbed probes/*.jsonl only, so an archived run's gate runs went unjudged
    from inferencekit.rundir import RunDir, gate_run_name

    direct = judged("llama-server-honest-full", tmp_path / "a")
    run_dir = tmp_path / "b"
    plain = unpack("llama-server-honest-full", run_dir)
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert RunDir(run_dir).gate_run_logs() == [packed] and gate_run_name(packed) == plain.stem
    result = check_run_dir(run_dir, "llama-server", gate_runs=[plain.stem])
    assert {g.gate: g.verdict for g in result.gates if g.gate in direct} == {g: v.verdict for g, v in direct.items()}
    assert result.files == [f"probes/{packed.name}"] and not result.notes
    # a gzipped log cut short keeps the lines before the cut and says so
    packed.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    header, records, bad = read_probe_log(packed)
    assert header.get("gate_run") == plain.stem and 0 < len(records) and bad == 1
