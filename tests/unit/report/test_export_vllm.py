"""``bench export`` / ``bench serve --export vllm-json``: vLLM's --save-detailed JSON from recorded replies.

Run dirs are built in the real layout (``RunDir.output_path``) from real recorded reply files
(tests/fixtures/replies, tests/capture_replies.py: vLLM 0.32 and llama-cpp-python streaming SmolLM2, an
HTTP 400 reply), and judged into a bench record by bench serve's own ``bench_record``. Expected figures
are worked out by hand from the fixtures' values (the comments show the arithmetic), and one test runs
vLLM's own ``calculate_metrics`` on an exported file.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from inferencekit.api.detect import EngineInfo
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.plan import LevelSpec, parse_levels, ramp_level
from inferencekit.bench.serve import bench_record
from inferencekit.cli import main
from inferencekit.errors import OpError
from inferencekit.report.export_vllm import UNAVAILABLE, export_run, vllm_result
from inferencekit.rundir import RunDir, write_json
from tests.conftest import _missing
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"
ANALYZE = Path("/work/shared/perf/analyze.py")


def _fix(engine: str, name: str) -> dict[str, Any]:
    r = json.loads((FIX / engine / f"{name}.json").read_text())
    r.pop("_provenance", None)
    return r


# vLLM 0.32 serving SmolLM2: usage 16 tokens; 16 token ids + usage 16; 18 token ids + usage 18; HTTP 400
VLLM = [_fix("vllm", n) for n in ("chat_stream", "chat_stream_counted", "chat_stream_natural_stop", "chat_bad_request")]
ENGINE = "vllm"


def _make_run(tmp_path: Path, levels: list[LevelSpec], replies: dict[str, list[dict[str, Any]]], *,
              retok: dict[str, dict[str, int]] | None = None, **cfg_kw: Any) -> RunDir:
    """A finished bench serve run dir: reply files where the journal writes them, then bench serve's record."""
    run = RunDir.create(tmp_path / "run")
    cfg = ServeConfig(levels=levels, retokenize=bool(retok), **cfg_kw)
    run.update_run(operation="bench.serve", bench_config=cfg.to_json())
    for label, rs in replies.items():
        for i, r in enumerate(rs):
            r = {**copy.deepcopy(r), "level": label, "id": f"p{i}", "bucket": "short"}
            write_json(run.output_path(ENGINE, label, "short", f"p{i}"), r)
        if retok and label in retok:
            write_json(run.level_dir("outputs", ENGINE, label) / "retokenized.json",
                       {"tokenizer": "local:/tok", "counts": retok[label]})
    info = EngineInfo(ENGINE, "0.32.0", ["smollm2"], "smollm2")
    bench_record(run, cfg, info, ENGINE, retok_source="local:/tok" if retok else None, fixed={})
    return run


def _ok(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((r for r in rs if r["status"] == 200), key=lambda r: r["sent_ns"])


def _export_one(run: RunDir, label: str) -> dict[str, Any]:
    [path] = export_run(run.path, level=label)
    assert path == run.path / "export" / f"vllm-{label}.json"
    return json.loads(path.read_text())


def test_closed_loop_fields_units_and_vllm_semantics(tmp_path: Path) -> None:
    run = _make_run(tmp_path, parse_levels([2], None), {"c2": VLLM})
    out = _export_one(run, "c2")
    keys = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
            "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
            "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
            "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
            "queue_times", "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"]
    keys += [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p50", "p90",
                                                                             "p99")]
    assert set(keys) <= set(out)
    assert re.fullmatch(r"\d{8}-\d{6}", out["date"])
    assert (out["endpoint_type"], out["backend"], out["label"], out["model_id"]) == ("openai-chat", "openai-chat",
                                                                                      "c2", "smollm2")
    assert out["tokenizer_id"] is None  # no re-tokenizer, no --tokenizer
    assert (out["request_rate"], out["burstiness"], out["max_concurrency"]) == ("inf", 1.0, 2)
    assert (out["num_prompts"], out["completed"], out["failed"]) == (4, 3, 1)

    rs = sorted(VLLM, key=lambda r: r["sent_ns"])  # the export lists requests in send order, as vLLM
    for i, r in enumerate(rs):
        assert out["start_times"][i] == r["sent_ns"] / 1e9  # perf_counter seconds
        assert out["queue_times"][i] is None  # closed loop: no arrival time
        if r["status"] == 200:
            assert out["ttfts"][i] == r["ttft_ms"] / 1000
            assert out["latencies"][i] == r["e2el_ms"] / 1000
            assert out["itls"][i] == [g / 1000 for g in r["itl_ms"]]
            assert out["output_lens"][i] == r["usage"]["completion_tokens"]
            assert out["input_lens"][i] == r["usage"]["prompt_tokens"]
            assert out["generated_texts"][i] == r["text"] and out["errors"][i] == ""
        else:  # vLLM's fill for a failed request
            assert out["errors"][i] == r["error"] and out["errors"][i].startswith("HTTP 400")
            assert (out["output_lens"][i], out["ttfts"][i], out["latencies"][i], out["itls"][i],
                    out["generated_texts"][i]) == (0, 0.0, 0.0, [], "")
            assert out["input_lens"][i] is None  # no usage, no known dataset length

    ok = _ok(VLLM)
    assert out["total_output_tokens"] == 16 + 16 + 18
    assert out["total_input_tokens"] == 34 + 34 + 38
    # statistics over the 3 completed requests only (vLLM's calculate_metrics), worked by hand from the fixtures:
    # TTFT 206.443062, 122.438368, 125.583701 ms: mean 454.465131 / 3; median the middle one; population std
    # sqrt((54.954685² + 29.050009² + 25.904676²) / 3); p90 and p99 by linear interpolation between the two largest
    # (positions 1.8 and 1.98 of 0..2): 125.583701 + 0.8 × 80.859361 and + 0.98 × 80.859361
    hand = {"ttft": {"mean": 151.488377, "median": 125.583701, "std": 38.88004057, "p90": 190.2711898,
                     "p99": 204.82587478},
            # E2EL 1113.242284, 941.322278, 1079.217216 ms
            "e2el": {"mean": 1044.593926, "median": 1079.217216, "std": 74.33348852, "p90": 1106.4372704,
                     "p99": 1112.56178264},
            # TPOT per request (E2EL − TTFT)/(N − 1): 906.799222/15, 818.88391/15, 953.633515/17
            "tpot": {"mean": 57.0472104170, "median": 56.0960891176}}
    for name, stats in hand.items():
        for stat, v in stats.items():
            assert out[f"{stat}_{name}_ms"] == pytest.approx(v, rel=1e-9), (stat, name)
    # ITL: the 15 + 15 + 17 gaps pooled, whose sum is the three (E2EL − TTFT): (906.799222 + 818.88391 + 953.633515)/47
    assert out["mean_itl_ms"] == pytest.approx(2679.316647 / 47, rel=1e-9)
    assert len([g for r in ok for g in r["itl_ms"]]) == 47

    # the same window and totals as inferencekit's own record, so the throughputs agree with it
    rec = json.loads(next((run.path / "evidence").glob("ev_*.json")).read_text())
    lv = rec["data"]["levels"]["c2"]
    assert out["duration"] == pytest.approx(lv["window_s"])
    assert out["request_throughput"] == pytest.approx(3 / out["duration"])
    assert out["request_throughput"] == pytest.approx(lv["throughput"]["request_throughput_req_s"])
    assert out["output_throughput"] == pytest.approx(lv["throughput"]["output_throughput_tok_s"])
    assert out["total_token_throughput"] == pytest.approx((50 + 106) / out["duration"])
    assert out["request_goodput"] is None  # no SLO
    assert out["p50_ttft_ms"] == pytest.approx(lv["ttft_ms"]["p50"])
    assert out["rtfx"] == 0.0
    meta = out["inferencekit"]
    assert meta["evidence_id"] == rec["evidence_id"] and meta["n_out_sources"] == {"usage": 3}
    assert meta["unavailable"] == UNAVAILABLE


def test_tpot_is_per_request_and_goodput_follows_vllm(tmp_path: Path) -> None:
    ok = _ok(VLLM)
    slo = {"ttft_ms": 150.0, "tpot_ms": 55.0}
    out = vllm_result(VLLM, LevelSpec("c1", "closed", concurrency=1), model="m", tokenizer=None,
                      backend="openai-chat", slo=slo)
    # TPOT = (latency − ttft)/(output_len − 1) per request, then averaged — not pooled ITL. By hand: 60.4532815,
    # 54.5922607 and 56.0960891 ms (906.799222/15, 818.88391/15, 953.633515/17), mean 57.0472104
    per_req = [60.45328146667, 54.59226066667, 56.09608911765]
    assert out["mean_tpot_ms"] == pytest.approx(57.0472104170, rel=1e-9)
    assert out["mean_tpot_ms"] != pytest.approx(out["mean_itl_ms"], rel=1e-6)
    good = sum(r["ttft_ms"] <= 150 and t <= 55 for r, t in zip(ok, per_req))
    # chat_stream misses TTFT (206 ms), natural_stop misses TPOT (56.1 ms); counted (122 ms, 54.6 ms) meets both
    assert good == 1
    assert out["request_goodput"] == pytest.approx(good / out["duration"])


def test_output_length_one_has_no_tpot_but_passes_a_tpot_slo(tmp_path: Path) -> None:
    r = _fix("vllm", "chat_stream")
    r["usage"] = {**r["usage"], "completion_tokens": 1}
    out = vllm_result([r], LevelSpec("c1", "closed", concurrency=1), model="m", tokenizer=None,
                      backend="openai-chat", slo={"tpot_ms": 1.0})
    assert out["mean_tpot_ms"] is None and out["p99_tpot_ms"] is None  # vLLM writes 0.0 over no values
    assert out["request_goodput"] == pytest.approx(1 / out["duration"])  # vLLM's all_tpots: 0 for output_len ≤ 1


def test_open_loop_rate_cap_and_queue_times(tmp_path: Path) -> None:
    rs = [dict(r, scheduled_ns=r["sent_ns"] - 1_500_000 * (i + 1)) for i, r in enumerate(VLLM)]
    run = _make_run(tmp_path, parse_levels(None, [2.5], arrival="gamma", burstiness=0.5), {"r2.5": rs})
    out = _export_one(run, "r2.5")
    assert (out["request_rate"], out["burstiness"], out["max_concurrency"]) == (2.5, 0.5, None)
    by_start = sorted(rs, key=lambda r: r["sent_ns"])
    assert out["queue_times"] == [pytest.approx((r["sent_ns"] - r["scheduled_ns"]) / 1e9) for r in by_start]
    spec = parse_levels(None, [4], arrival="constant", max_concurrency=8)[0]
    out = vllm_result(rs, spec, model="m", tokenizer=None, backend="openai-chat")
    assert (out["label"], out["request_rate"], out["burstiness"], out["max_concurrency"]) == ("r4c8", 4.0, "inf", 8)
    # the record's describe() form of a level gives the same traffic fields
    assert vllm_result(rs, spec.describe(), model="m", tokenizer=None, backend="openai-chat")["max_concurrency"] == 8
    # a ramp-up level as vLLM writes one: request_rate "inf" (vLLM refuses --request-rate beside a ramp) and the ramp
    ramp = ramp_level("linear", 1.0, 4.0)
    for form in (ramp, ramp.describe()):
        out = vllm_result(rs, form, model="m", tokenizer=None, backend="openai-chat")
        assert (out["request_rate"], out["ramp_up_strategy"], out["ramp_up_start_rps"], out["ramp_up_end_rps"]) == \
            ("inf", "linear", 1.0, 4.0)
        keys = list(out)
        assert keys.index("max_concurrency") + 1 == keys.index("ramp_up_strategy")  # vLLM's order


def test_n_out_sources_and_unknown_lengths(tmp_path: Path) -> None:
    # llama-cpp-python streams no usage: N_out from logprob entries, else re-tokenized, else unknown (null)
    counted, plain = _fix("llama-cpp-python", "chat_stream_counted"), _fix("llama-cpp-python", "chat_stream")
    run = _make_run(tmp_path, parse_levels([1], None), {"c1": [counted, plain]}, retok={"c1": {"p1": 17}})
    out = _export_one(run, "c1")
    order = sorted([("p0", counted), ("p1", plain)], key=lambda kv: kv[1]["sent_ns"])
    assert out["output_lens"] == [16 if k == "p0" else 17 for k, _ in order]
    assert out["tokenizer_id"] == "local:/tok"
    assert out["inferencekit"]["n_out_sources"] == {"streamed:logprobs": 1, "retokenized": 1}
    assert out["input_lens"] == [None, None] and out["total_input_tokens"] is None
    assert out["total_token_throughput"] is None and out["total_output_tokens"] == 33
    bare = vllm_result([plain], LevelSpec("c1", "closed", concurrency=1), model="m", tokenizer=None,
                       backend="openai-chat")
    assert bare["output_lens"] == [None] and bare["total_output_tokens"] is None and bare["output_throughput"] is None
    assert bare["mean_tpot_ms"] is None and bare["mean_ttft_ms"] == pytest.approx(plain["ttft_ms"])


def test_known_dataset_length_fills_input_lens(tmp_path: Path) -> None:
    failed = _fix("vllm", "chat_bad_request")
    salted = dict(_fix("vllm", "chat_bad_request"), salt="ik-00112233")
    out = vllm_result([VLLM[0], failed, salted], LevelSpec("c1", "closed", concurrency=1), model="m",
                      tokenizer=None, backend="openai-chat", input_len=128)
    lens = dict(zip(out["start_times"], out["input_lens"]))
    assert lens[VLLM[0]["sent_ns"] / 1e9] == 34  # usage wins
    assert out["input_lens"].count(128) == 1 and out["input_lens"].count(None) == 1  # a reuse tag adds tokens


def test_ok_reply_without_a_token_event_is_failed_as_vllm_does() -> None:
    r = _fix("vllm", "chat_stream")
    r.update(ttft_ms=None, ttfo_ms=None, e2el_ms=None, itl_ms=[], text="", usage=None, chunks=0)
    out = vllm_result([r], LevelSpec("c1", "closed", concurrency=1), model="m", tokenizer=None,
                      backend="openai-chat")
    assert (out["completed"], out["failed"], out["output_lens"], out["latencies"]) == (0, 1, [0], [0.0])
    assert "no generated token" in out["errors"][0]
    assert out["mean_ttft_ms"] is None and (out["max_output_tokens_per_s"], out["max_concurrent_requests"]) == (0.0, 0)


def test_percentile_names_and_peaks_on_synthetic_replies() -> None:
    def reply(sent_s: float, n: int) -> dict[str, Any]:
        gaps = [50.0] * (n - 1)
        return {"status": 200, "sent_ns": int(sent_s * 1e9), "ttft_ms": 100.0, "e2el_ms": 100.0 + sum(gaps),
                "itl_ms": gaps, "usage": {"completion_tokens": n, "prompt_tokens": 5}, "text": "x",
                "events": [[int((100.0 + sum(gaps)) * 1e6), "{}"]], "endpoint": "/v1/completions"}

    rs = [reply(100.0, 11), reply(100.0, 11), reply(101.2, 3)]
    out = vllm_result(rs, LevelSpec("c2", "closed", concurrency=2), model="m", tokenizer="t", backend="openai",
                      percentiles=(50, 99.9))
    assert {"p50_ttft_ms", "p99.9_ttft_ms", "p99.9_e2el_ms", "p99.9_itl_ms", "p99.9_tpot_ms"} <= set(out)
    assert "p90_ttft_ms" not in out
    # tokens at 100.1 + 0.05·k (k = 0..10) twice → 22 in second 0; the third request's 3 tokens fall in second 1
    assert out["max_output_tokens_per_s"] == 22.0
    assert out["max_concurrent_requests"] == 2
    assert out["duration"] == pytest.approx(101.2 + 0.2 - 100.0)


def test_export_paths(tmp_path: Path) -> None:
    run = _make_run(tmp_path, parse_levels([1, 2], None), {"c1": VLLM[:2], "c2": VLLM[2:]})
    assert [p.name for p in export_run(run.path)] == ["vllm-c1.json", "vllm-c2.json"]
    with pytest.raises(OpError, match=r"--export-path .* 2 levels \(c1, c2\); put \{level\}"):
        export_run(run.path, path=str(tmp_path / "one.json"))
    got = export_run(run.path, path=str(tmp_path / "out" / "v-{level}.json"))
    assert got == [tmp_path / "out" / "v-c1.json", tmp_path / "out" / "v-c2.json"]
    assert export_run(run.path, level="c2", path=str(tmp_path / "x.json")) == [tmp_path / "x.json"]
    assert json.loads((tmp_path / "x.json").read_text())["completed"] == 1
    with pytest.raises(OpError, match="--level 'c9': the run's levels are c1, c2"):
        export_run(run.path, level="c9")
    with pytest.raises(OpError, match="unknown export format"):
        export_run(run.path, "csv")


def test_analyze_parse_vllm_reads_the_export(tmp_path: Path) -> None:
    if not ANALYZE.is_file():
        _missing("shared/perf's analyze.py", f"{ANALYZE} is not on this machine")
    spec = importlib.util.spec_from_file_location("perf_analyze", ANALYZE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run = _make_run(tmp_path, parse_levels([2], None), {"c2": VLLM})
    [path] = export_run(run.path)
    d = tmp_path / "harness"
    d.mkdir()
    shutil.copy(path, d / "vllm.json")
    rep, _per = mod.parse_vllm(str(d), None)
    rec = json.loads(next((run.path / "evidence").glob("ev_*.json")).read_text())
    lv = rec["data"]["levels"]["c2"]
    assert rep["completed"] == lv["requests"]["completed"] == 3 and rep["failed"] == 1
    assert rep["ttft_p50"] == pytest.approx(lv["ttft_ms"]["p50"])
    assert rep["tpot_p50"] == pytest.approx(lv["tpot_ms"]["p50"])
    assert rep["output_tok_per_s"] == pytest.approx(lv["throughput"]["output_throughput_tok_s"])
    # the harness's custom client path (custom.json, linked to vllm.json) reads it the same way
    c = tmp_path / "custom"
    c.mkdir()
    shutil.copy(path, c / "custom.json")
    assert mod.parse_custom(str(c), None)[0] == rep


# ---- the command line

def test_bench_serve_refuses_one_export_file_for_several_levels(capsys, tmp_path: Path) -> None:
    base = ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--run-dir", str(tmp_path / "r")]
    assert main([*base, "--concurrency", "1,4", "--export", "vllm-json", "--export-path",
                 str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "--export-path" in err and "{level}" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()  # refused before a run dir or a request
    assert main([*base, "--export-path", str(tmp_path / "x.json")]) == 2
    assert "--export-path needs --export" in capsys.readouterr().err
    assert main([*base, "--export", "xlsx"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_resume_checks_the_export_path_against_the_stored_levels(capsys, tmp_path: Path) -> None:
    bench = RunDir.create(tmp_path / "b")
    bench.update_run(operation="bench.serve", target="http://127.0.0.1:9",
                     bench_config=ServeConfig(levels=parse_levels([1, 2], None)).to_json())
    args = ["bench", "serve", "--resume", str(bench.path), "--export", "vllm-json", "--export-path"]
    assert main([*args, str(tmp_path / "x.json")]) == 2
    assert "2 levels (c1, c2); put {level}" in capsys.readouterr().err
    # --export is not a run-shaping flag: a resumed run may export (here it then stops at the dead URL)
    assert main([*args, str(tmp_path / "x-{level}.json")]) == 2
    err = capsys.readouterr().err
    assert "drop" not in err and "does not answer" in err


def test_bench_export_cli(capsys, tmp_path: Path) -> None:
    run = _make_run(tmp_path, parse_levels([2], None), {"c2": VLLM})
    out = tmp_path / "vllm.json"
    assert main(["bench", "export", str(run.path), "--output", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exports"] == [str(out)]
    assert json.loads(out.read_text())["completed"] == 3


def test_bench_export_refuses_what_is_not_a_finished_bench_run(capsys, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["bench", "export", str(plain)]) == 2
    assert "is not a bench serve run dir (no run.json)" in capsys.readouterr().err
    other = RunDir.create(tmp_path / "v")
    other.update_run(operation="gates.run")
    assert main(["bench", "export", str(other.path)]) == 2
    assert "is not a bench serve run dir (it holds a gates.run run" in capsys.readouterr().err
    unfinished = RunDir.create(tmp_path / "u")
    unfinished.update_run(operation="bench.serve")
    assert main(["bench", "export", str(unfinished.path)]) == 2
    err = capsys.readouterr().err
    assert "did not finish" in err and "bench serve --resume" in err
    assert main(["bench", "export", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


_VLLM_CHECK = r"""
import json, sys
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics
j = json.load(open(sys.argv[1]))
outs = [RequestFuncOutput(generated_text=j["generated_texts"][i], success=j["errors"][i] == "",
                          latency=j["latencies"][i], output_tokens=j["output_lens"][i], ttft=j["ttfts"][i],
                          itl=j["itls"][i], prompt_len=j["input_lens"][i] or 0, error=j["errors"][i],
                          start_time=j["start_times"][i]) for i in range(j["num_prompts"])]
m, lens = calculate_metrics([], outs, j["duration"], None, [50.0, 90.0, 99.0], {"ttft": 150, "tpot": 57, "e2el": 1000})
got = {k: getattr(m, k) for k in ("completed", "failed", "total_input", "total_output", "request_throughput",
                                  "request_goodput", "output_throughput", "total_token_throughput",
                                  "max_output_tokens_per_s", "max_concurrent_requests")}
for k in ("ttft", "tpot", "itl", "e2el"):
    for s in ("mean", "median", "std"):
        got[f"{s}_{k}_ms"] = float(getattr(m, f"{s}_{k}_ms"))
    for p, v in getattr(m, f"percentiles_{k}_ms"):
        got[f"p{int(p)}_{k}_ms"] = float(v)
print(json.dumps({"metrics": got, "output_lens": lens}))
"""


def test_vllm_own_calculate_metrics_agrees(tmp_path: Path) -> None:
    """vLLM 0.32's ``calculate_metrics``, run in its own venv (``make vllm``) on the exported per-request lists,
    gives every aggregate figure of the export."""
    import os
    import subprocess

    from inferencekit.engines.recipes import VLLM_VERSION, cache_root

    py = Path(os.environ.get("INFERENCEKIT_VLLM_PYTHON") or cache_root() / f"vllm-{VLLM_VERSION}" / "venv" / "bin"
              / "python")
    if not py.is_file():
        _missing("vLLM", f"{py} missing (make vllm)")
    rs = VLLM + [_fix("llama-server", n) for n in ("chat_stream_counted", "chat_stream_natural_stop",
                                                  "chat_bad_request")]
    out = vllm_result(rs, LevelSpec("c2", "closed", concurrency=2), model="m", tokenizer=None, backend="openai-chat",
                      slo={"ttft_ms": 150.0, "tpot_ms": 57.0, "e2el_ms": 1000.0})
    f = tmp_path / "export.json"
    f.write_text(json.dumps(out))
    proc = subprocess.run([str(py), "-c", _VLLM_CHECK, str(f)], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    vllm = json.loads(proc.stdout.strip().splitlines()[-1])
    assert vllm["output_lens"] == out["output_lens"]
    names = {"total_input": "total_input_tokens", "total_output": "total_output_tokens"}
    for k, v in vllm["metrics"].items():
        assert out[names.get(k, k)] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def test_replies_from_several_hosts_are_put_on_the_wall_clock():
    from inferencekit.report.export_vllm import _on_wall

    r = {"sent_ns": 100, "scheduled_ns": 90, "dispatched_ns": 95, "clock_offset_ns": 1_000, "ttft_ms": 1.0}
    assert _on_wall(r) == {"sent_ns": 1_100, "scheduled_ns": 1_090, "dispatched_ns": 1_095, "clock_offset_ns": 0,
                           "ttft_ms": 1.0}
    assert _on_wall({"sent_ns": 5}) == {"sent_ns": 5}  # one process: its own clock throughout
