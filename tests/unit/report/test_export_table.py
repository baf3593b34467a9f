"""``bench export --format csv|parquet``: the requests and levels tables of a finished bench serve run.

The run dir is built in the real layout (``RunDir.output_path``) from real recorded reply files (vLLM 0.32 and
llama-cpp-python streaming SmolLM2, an HTTP 400 reply: tests/fixtures/replies, as test_export_vllm.py) and judged
into a bench record by bench serve's own ``bench_record``. Every expected value is worked out by hand from the
fixtures (the comments give the arithmetic) and checked after a round trip through ``pandas.read_parquet`` and
``pandas.read_csv``.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd  # the `parquet` extra (pandas, pyarrow), which `make install` installs
import pytest

from inferencekit.api.detect import EngineInfo
from inferencekit.bench.config import ServeConfig
from inferencekit.bench.plan import LevelSpec
from inferencekit.bench.serve import bench_record
from inferencekit.bench.telemetry import server_block
from inferencekit.cli import main
from inferencekit.errors import OpError
from inferencekit.report.export_table import (
    export_tables,
    flatten_figures,
    request_row,
    table_frames,
    table_targets,
)
from inferencekit.rundir import RunDir, write_json
from tests.hide import hide_modules
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"
ENGINE = "vllm"


def _fix(engine: str, name: str) -> dict[str, Any]:
    r = json.loads((FIX / engine / f"{name}.json").read_text())
    r.pop("_provenance", None)
    return r


# vLLM 0.32: usage 16 tokens (sent 2506990580717 ns); 16 (sent 2508104980649); 18, finish stop (2509048550337);
# HTTP 400 (2511123055059, no event)
STREAM, COUNTED, STOP, BAD = (_fix("vllm", n) for n in ("chat_stream", "chat_stream_counted",
                                                       "chat_stream_natural_stop", "chat_bad_request"))
T0 = STREAM["sent_ns"]  # the run's first send
LCP_COUNTED, LCP_PLAIN = _fix("llama-cpp-python", "chat_stream_counted"), _fix("llama-cpp-python", "chat_stream")

LEVELS = [LevelSpec("c2", "closed", concurrency=2), LevelSpec("r2.5", "open", rate=2.5),
          LevelSpec("c1_rep1", "closed", concurrency=1, point="c1", repeat=1),
          LevelSpec("c1_rep2", "closed", concurrency=1, point="c1", repeat=2)]
REPLIES = {
    "c2": [STREAM, COUNTED, STOP, BAD],
    # the open level: 10 s after the run's start, sent 1.5 ms and 0.25 ms after their scheduled times
    "r2.5": [dict(STREAM, sent_ns=T0 + 10_000_000_000, scheduled_ns=T0 + 10_000_000_000 - 1_500_000),
             dict(COUNTED, sent_ns=COUNTED["sent_ns"] + 10_000_000_000,
                  scheduled_ns=COUNTED["sent_ns"] + 10_000_000_000 - 250_000)],
    # llama-cpp-python sends no usage: N_out from the streamed logprob count, else the re-tokenized count
    "c1_rep1": [dict(LCP_COUNTED, sent_ns=T0 + 20_000_000_000), dict(LCP_PLAIN, sent_ns=T0 + 21_000_000_000)],
    "c1_rep2": [dict(STOP, sent_ns=T0 + 30_000_000_000, salt="ik-00112233")],
}


def _make_run(tmp_path: Path) -> RunDir:
    """A finished bench serve run dir: reply files where the journal writes them, then bench serve's record."""
    run = RunDir.create(tmp_path / "run")
    cfg = ServeConfig(levels=LEVELS, retokenize=True, slo={"ttft_ms": 150.0})
    run.update_run(operation="bench.serve", bench_config=cfg.to_json())
    for label, rs in REPLIES.items():
        for i, r in enumerate(rs):
            r = {**copy.deepcopy(r), "level": label, "id": f"p{i}", "bucket": "short"}
            write_json(run.output_path(ENGINE, label, "short", f"p{i}"), r)
    write_json(run.level_dir("outputs", ENGINE, "c1_rep1") / "retokenized.json",
               {"tokenizer": "local:/tok", "counts": {"p1": 17}})
    bench_record(run, cfg, EngineInfo(ENGINE, "0.32.0", ["smollm2"], "smollm2"), ENGINE, retok_source="local:/tok",
                 fixed={})
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    return _make_run(tmp_path_factory.mktemp("export_table"))


def _read(path: Path) -> Any:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def _null(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


# By hand from the fixtures. start_s = (sent − T0) / 1e9; tpot_ms = (E2EL − TTFT)/(N_out − 1); the ITL gaps of each
# vLLM reply sum to E2EL − TTFT (906.799222, 818.88391, 953.633515 ms over 15, 15, 17 gaps).
EXPECTED_REQUESTS = [
    # level, point, repeat, key, http_status, completed, finish_reason, salt, start_s, send_lag_ms, ttft_ms, e2el_ms,
    # tpot_ms, itl_count, itl_max_ms, prompt_tokens, output_tokens, output_tokens_source
    ("c2", "c2", 0, "p0", 200, True, "length", None, 0.0, None, 206.443062, 1113.242284, 906.799222 / 15, 15,
     81.528031, 34, 16, "usage"),
    ("c2", "c2", 0, "p1", 200, True, "length", None, 1.114399932, None, 122.438368, 941.322278, 818.88391 / 15, 15,
     61.571804, 34, 16, "usage"),
    ("c2", "c2", 0, "p2", 200, True, "stop", None, 2.05796962, None, 125.583701, 1079.217216, 953.633515 / 17, 17,
     64.012458, 38, 18, "usage"),
    ("c2", "c2", 0, "p3", 400, False, None, None, 4.132474342, None, None, None, None, 0, None, None, None, None),
    ("r2.5", "r2.5", 0, "p0", 200, True, "length", None, 10.0, 1.5, 206.443062, 1113.242284, 906.799222 / 15, 15,
     81.528031, 34, 16, "usage"),
    ("r2.5", "r2.5", 0, "p1", 200, True, "length", None, 11.114399932, 0.25, 122.438368, 941.322278, 818.88391 / 15,
     15, 61.571804, 34, 16, "usage"),
    # llama-cpp-python: TTFT 138.002585 / E2EL 8473.491176 ms, 16 logprob entries; TTFT 570.618051 / E2EL 1995.054894,
    # no count but the re-tokenized 17; no usage, so no prompt_tokens
    ("c1_rep1", "c1", 1, "p0", 200, True, "length", None, 20.0, None, 138.002585, 8473.491176,
     (8473.491176 - 138.002585) / 15, 15, 2936.101964, None, 16, "streamed:logprobs"),
    ("c1_rep1", "c1", 1, "p1", 200, True, "length", None, 21.0, None, 570.618051, 1995.054894,
     (1995.054894 - 570.618051) / 16, 15, 215.454293, None, 17, "retokenized"),
    ("c1_rep2", "c1", 2, "p0", 200, True, "stop", "ik-00112233", 30.0, None, 125.583701, 1079.217216,
     953.633515 / 17, 17, 64.012458, 38, 18, "usage"),
]
REQ_COLS = ["level", "point", "repeat", "key", "http_status", "completed", "finish_reason", "salt", "start_s",
            "send_lag_ms", "ttft_ms", "e2el_ms", "tpot_ms", "itl_count", "itl_max_ms", "prompt_tokens", "output_tokens",
            "output_tokens_source"]
APPROX = {"tpot_ms", "send_lag_ms"}  # computed in another order than the hand arithmetic: equal to 1e-12


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_requests_table_round_trips_with_exact_values(run: RunDir, fmt: str) -> None:
    req_path, lev_path = export_tables(run.path, fmt)
    assert (req_path, lev_path) == (run.path / "export" / f"requests.{fmt}", run.path / "export" / f"levels.{fmt}")
    df = _read(req_path)
    assert len(df) == len(EXPECTED_REQUESTS)
    for (_, row), want in zip(df.iterrows(), EXPECTED_REQUESTS):
        for col, w in zip(REQ_COLS, want):
            got = row[col]
            if w is None:
                assert _null(got), (row["level"], row["key"], col, got)
            elif col in APPROX:
                assert got == pytest.approx(w, rel=1e-12), (row["level"], row["key"], col)
            else:
                assert got == w, (row["level"], row["key"], col, got, w)
    # the failed request keeps its error; the completed ones have none
    assert df["error"].iloc[3].startswith("HTTP 400: ") and df["error"].drop(index=3).isna().all()
    # ITL mean per request: the gaps' own mean (their sum is E2EL − TTFT for the vLLM replies)
    assert df["itl_mean_ms"].iloc[0] == pytest.approx(906.799222 / 15, rel=1e-12)
    assert df["ttfo_ms"].iloc[:3].tolist() == [206.443062, 122.438368, 125.583701]
    assert set(df["request_id"].iloc[:4]) == {STREAM["request_id"], COUNTED["request_id"], STOP["request_id"],
                                              BAD["request_id"]}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_levels_table_flattens_every_figure_with_units(run: RunDir, fmt: str) -> None:
    df = _read(export_tables(run.path, fmt)[1]).set_index("level")
    assert list(df.index) == ["c2", "r2.5", "c1_rep1", "c1_rep2"]
    c2 = df.loc["c2"]
    # c2: 3 completed of 4; window = the HTTP 400 reply's send (its only event) − T0 = 4132474342 ns
    assert (c2["point"], c2["repeat"], c2["mode"], c2["concurrency_requests"]) == ("c2", 0, "closed", 2)
    assert (c2["total_requests"], c2["completed_requests"], c2["failed_requests"], c2["no_token_requests"]) == (
        4, 3, 1, 0)
    assert c2["window_s"] == 4.132474342
    assert (c2["output_tokens"], c2["prompt_tokens"]) == (16 + 16 + 18, 34 + 34 + 38)
    assert c2["request_throughput_req_s"] == 3 / 4.132474342
    assert c2["output_throughput_tok_s"] == 50 / 4.132474342
    assert c2["total_token_throughput_tok_s"] == 156 / 4.132474342
    # TTFT 122.438368, 125.583701, 206.443062: median the middle; p99 at position 1.98 of 0..2 (linear)
    assert c2["ttft_p50_ms"] == 125.583701 and c2["ttft_min_ms"] == 122.438368 and c2["ttft_max_ms"] == 206.443062
    assert c2["ttft_p99_ms"] == pytest.approx(125.583701 + 0.98 * (206.443062 - 125.583701), rel=1e-12)
    assert c2["ttft_count"] == 3 and c2["itl_count"] == 15 + 15 + 17
    assert c2["tpot_mean_ms"] == pytest.approx((906.799222 / 15 + 818.88391 / 15 + 953.633515 / 17) / 3, rel=1e-12)
    assert c2["e2el_mean_ms"] == pytest.approx((1113.242284 + 941.322278 + 1079.217216) / 3, rel=1e-12)
    # goodput, --slo ttft=150: 122.4 and 125.6 ms meet it, 206.4 does not, the 400 is not good: 2 of 4
    assert (c2["goodput_good_requests"], c2["goodput_fraction"], c2["goodput_slo_ttft_ms"]) == (2, 0.5, 150.0)
    assert c2["goodput_req_s"] == 2 / 4.132474342
    assert c2["n_out_sources_usage_requests"] == 3
    # the open level: its spec, and the send lag of 1.5 and 0.25 ms
    r = df.loc["r2.5"]
    assert (r["mode"], r["arrival"], r["rate_req_s"], r["burstiness"]) == ("open", "poisson", 2.5, 1.0)
    assert _null(r["max_concurrency_requests"]) and _null(r["concurrency_requests"])
    assert r["send_lag_max_ms"] == pytest.approx(1.5) and r["send_lag_min_ms"] == pytest.approx(0.25)
    assert r["scheduled_ttft_max_ms"] == pytest.approx(206.443062 + 1.5, rel=1e-12)
    assert _null(c2["send_lag_p50_ms"])  # closed loop has no schedule
    rep1 = df.loc["c1_rep1"]
    assert (rep1["point"], rep1["repeat"], df.loc["c1_rep2"]["repeat"]) == ("c1", 1, 2)
    assert (rep1["n_out_sources_streamed_logprobs_requests"], rep1["n_out_sources_retokenized_requests"]) == (1, 1)
    assert rep1["output_tokens"] == 16 + 17 and _null(rep1["prompt_tokens"])


def test_every_level_figure_names_its_unit(run: RunDir) -> None:
    """A column without a unit suffix is a label or setting, a flag (true/false/null) or a dimensionless statistic
    (Kendall's tau, a p-value): every other figure, including those other parts add to the record, says its unit."""
    _, df, _ = table_frames(run.path)
    units = ("_ms", "_s", "_tok_s", "_req_s", "_tokens", "_requests", "_count", "_fraction")
    plain = {"level", "point", "repeat", "mode", "arrival", "burstiness"}
    unitless = [c for c in df.columns if c not in plain and not c.endswith(units)]
    assert [c for c in unitless if not (str(df[c].dtype) == "boolean" or df[c].isna().all()
                                        or c.endswith(("_tau", "_p_value")))] == []
    assert {"ttft_p99_ms", "tpot_mean_ms", "output_throughput_tok_s", "request_throughput_req_s", "goodput_req_s",
            "goodput_fraction", "completed_requests", "failed_requests", "window_s", "output_tokens"} <= set(df.columns)


def test_recorded_run_tables_agree_with_its_record(tmp_path: Path) -> None:
    """A real recorded run (tests/fixtures/bench_run: llama-cpp-python, levels c1, c2, r2, 6 requests each): the
    per-request rows rebuild the record's level figures (medians, counts, token totals)."""
    src = FIXTURES / "bench_run"
    req, lev = export_tables(src, "parquet", output=str(tmp_path) + "/")  # never into the fixture
    rq, lv = pd.read_parquet(req), pd.read_parquet(lev).set_index("level")
    rec = json.loads(next((src / "evidence").glob("ev_*.json")).read_text())["data"]["levels"]
    assert list(lv.index) == list(rec) == ["c1", "c2", "r2"]
    for label, entry in rec.items():
        rows = rq[rq["level"] == label]
        assert len(rows) == entry["requests"]["total"] == lv.loc[label, "total_requests"]
        assert int(rows["completed"].sum()) == entry["requests"]["completed"]
        out_tokens = entry["throughput"]["output_tokens"]
        assert int(rows["output_tokens"].sum()) == out_tokens == lv.loc[label, "output_tokens"]
        for metric in ("ttft", "tpot", "e2el"):
            assert rows[f"{metric}_ms"].median() == pytest.approx(entry[f"{metric}_ms"]["p50"], rel=1e-12)
            assert lv.loc[label, f"{metric}_p50_ms"] == entry[f"{metric}_ms"]["p50"]
        assert int(rows["itl_count"].sum()) == entry["itl_ms"]["n"]
    assert (lv.loc["r2", "mode"], lv.loc["r2", "rate_req_s"]) == ("open", 2.0)
    open_loop = rq["level"] == "r2"
    assert rq.loc[open_loop, "send_lag_ms"].notna().all() and rq.loc[~open_loop, "send_lag_ms"].isna().all()
    assert not (src / "export").exists()


def test_request_columns_carry_units() -> None:
    row = request_row(dict(STREAM, _key="p0"), {"label": "c2", "mode": "closed"}, origin_ns=T0)
    plain = {"level", "point", "repeat", "key", "bucket", "request_id", "endpoint", "http_status", "completed", "error",
             "finish_reason", "salt", "output_tokens_source"}
    assert [c for c in row if c not in plain and not re.search(r"_(ms|s|tokens|count)$", c)] == []


def test_wrong_types_in_a_reply_are_missing_values_not_exceptions() -> None:
    bad = dict(STREAM, _key="p9", status="200", usage=["16"], itl_ms=[50.0, "x", None, True, 70.0], ttft_ms="fast",
               finish_reason=7, error={"e": 1}, sent_ns="now", n_streamed=True)
    row = request_row(bad, {"label": "c2", "mode": "open"}, origin_ns=T0)
    assert (row["http_status"], row["completed"], row["ttft_ms"], row["tpot_ms"], row["start_s"]) == (
        None, False, None, None, None)
    assert (row["finish_reason"], row["error"], row["prompt_tokens"], row["output_tokens"], row["send_lag_ms"]) == (
        None, None, None, None, None)
    assert (row["itl_count"], row["itl_mean_ms"], row["itl_max_ms"]) == (2, 60.0, 70.0)  # the two numbers only
    assert row["e2el_ms"] == 1113.242284


def test_level_filter_by_label_and_by_point(run: RunDir, tmp_path: Path) -> None:
    req, lev = export_tables(run.path, "parquet", level="r2.5", output=str(tmp_path / "one") + "/")
    assert (req, lev) == (tmp_path / "one" / "requests.parquet", tmp_path / "one" / "levels.parquet")
    df = pd.read_parquet(req)
    assert df["level"].tolist() == ["r2.5", "r2.5"]
    assert df["start_s"].tolist() == [10.0, 11.114399932]  # still from the run's first send, in level c2
    assert pd.read_parquet(lev)["level"].tolist() == ["r2.5"]
    # a load point keeps every repeat
    req, lev = export_tables(run.path, "csv", level="c1", output=str(tmp_path / "pt"))
    assert (req, lev) == (tmp_path / "pt-requests.csv", tmp_path / "pt-levels.csv")
    assert pd.read_csv(req)["level"].tolist() == ["c1_rep1", "c1_rep1", "c1_rep2"]
    assert pd.read_csv(lev)["level"].tolist() == ["c1_rep1", "c1_rep2"]
    with pytest.raises(OpError, match=r"--level 'c9': the run's levels are c2, r2.5, c1_rep1, c1_rep2 \(load points "
                                      r"c2, r2.5, c1\)"):
        export_tables(run.path, "csv", level="c9")


def test_targets(tmp_path: Path) -> None:
    assert table_targets("out/run1_", tmp_path, "csv") == (Path("out/run1_requests.csv"), Path("out/run1_levels.csv"))
    assert table_targets(str(tmp_path), tmp_path, "parquet") == (tmp_path / "requests.parquet",
                                                                 tmp_path / "levels.parquet")
    (tmp_path / "f.csv").write_text("")
    with pytest.raises(OpError, match="is a file; with --format csv give a directory or a prefix"):
        table_targets(str(tmp_path / "f.csv"), tmp_path, "csv")


def test_flatten_is_generic_for_figures_added_later() -> None:
    entry = {"spec": {"label": "c4"}, "requests": {"errors": {"HTTP 500: boom": 2}, "completed": 5},
             "ttft_ms": {"n": 5, "p99": 10.0, "p99_ci95": [8.0, 12.5], "p50_ci95": None, "hist": [1, 2, 3, 4, 5]},
             "steady": {"window_s": 3.5, "ttft_ms": {"p50": 4.0}, "oversaturated": False},
             "client": {"reasons": ["x"], "valid": None}, "note": "text is left out"}
    assert flatten_figures(entry) == {
        "completed_requests": 5, "ttft_count": 5, "ttft_p99_ms": 10.0, "ttft_p99_ci95_lo_ms": 8.0,
        "ttft_p99_ci95_hi_ms": 12.5, "ttft_p50_ci95_lo_ms": None, "ttft_p50_ci95_hi_ms": None,
        "steady_window_s": 3.5, "steady_ttft_p50_ms": 4.0, "steady_oversaturated": False, "client_valid": None}


def test_flatten_names_the_server_block() -> None:
    """The server block's shape (bench/telemetry_judge.py ``judge_level``): a family keeps the engine's own name and
    takes a unit only from the block's ``unit`` field (a ``_seconds`` histogram); sample counts are ``_count``, a
    bucket is an interval, the token comparison counts tokens and its ``requests`` count requests."""
    server = {"telemetry": "ok", "scrapes": 12, "ok": 11, "failed": 1, "window_s": 5.5,
              "counters": {"vllm:generation_tokens_total": {"delta": 640.0}},
              "histograms": {"vllm:time_to_first_token_seconds": {"count": 8.0, "sum": 1.2, "mean": 0.15,
                                                                   "p50": 0.1, "p50_bucket": [0.08, 0.1],
                                                                   "unit": "s"},
                             "vllm:request_params_n": {"count": 8.0, "p50": 0.5, "unit": None}},
              "gauges": {"vllm:kv_cache_usage_perc": {"min": 0.0, "mean": 0.2, "max": 0.4, "n": 11}},
              "tokens": {"generated_vs_usage": {"status": "agree", "server": 640.0, "client": 640, "tolerance": 6.4,
                                                "counters": ["vllm:generation_tokens_total"]},
                         "client": {"requests": 8, "usage_completion": 640, "no_usage": 0},
                         "straddling": 0, "side_requests": 2},
              "per_request": {"joined": 8, "malformed": 0, "prefill_share_mean": 0.4,
                              "ttft_split": {"prefill_ms": {"n": 8, "p50": 30.0}}, "disagree": {"decode_time": 1}},
              "flags": []}
    ttft = "server_histograms_vllm_time_to_first_token_seconds"
    assert flatten_figures({"server": server}) == {
        "server_scrapes_count": 12, "server_ok_scrapes_count": 11, "server_failed_scrapes_count": 1,
        "server_window_s": 5.5, "server_counters_vllm_generation_tokens_total_delta": 640.0,
        f"{ttft}_count": 8.0, f"{ttft}_sum_s": 1.2, f"{ttft}_mean_s": 0.15, f"{ttft}_p50_s": 0.1,
        f"{ttft}_p50_bucket_lo_s": 0.08, f"{ttft}_p50_bucket_hi_s": 0.1,
        "server_histograms_vllm_request_params_n_count": 8.0, "server_histograms_vllm_request_params_n_p50": 0.5,
        "server_gauges_vllm_kv_cache_usage_perc_min": 0.0, "server_gauges_vllm_kv_cache_usage_perc_mean": 0.2,
        "server_gauges_vllm_kv_cache_usage_perc_max": 0.4, "server_gauges_vllm_kv_cache_usage_perc_count": 11,
        "server_generated_vs_usage_server_tokens": 640.0, "server_generated_vs_usage_client_tokens": 640,
        "server_generated_vs_usage_tolerance_tokens": 6.4, "server_tokens_client_requests": 8,
        "server_client_usage_completion_tokens": 640, "server_tokens_client_no_usage_requests": 0,
        "server_tokens_straddling_requests": 0, "server_tokens_side_requests": 2,
        "server_per_request_joined_requests": 8, "server_per_request_malformed_requests": 0,
        "server_per_request_prefill_share_mean_fraction": 0.4, "server_per_request_ttft_split_prefill_count": 8,
        "server_per_request_ttft_split_prefill_p50_ms": 30.0, "server_per_request_disagree_decode_time_requests": 1}


@pytest.mark.parametrize(("run_name", "engine"), [("llama-server", "llama-server"), ("vllm", "vllm")])
def test_recorded_server_blocks_flatten_with_units(run_name: str, engine: str) -> None:
    """The server blocks of real runs (tests/fixtures/telemetry/runs: llama-server and vLLM-CPU, level c4): every
    column says its unit, but for the engine's own families (their unit is the engine's HELP text), and the values
    come through unchanged."""
    block = server_block(RunDir(FIXTURES / "telemetry" / "runs" / run_name), engine, "c4")
    assert block is not None
    flat = flatten_figures({"server": block})
    units = ("_ms", "_s", "_tokens", "_requests", "_count", "_fraction")
    own = ("server_counters_", "server_gauges_", "server_histograms_")
    assert [c for c in flat if not c.endswith(units) and not c.startswith(own)] == []
    t = block["tokens"]["generated_vs_usage"]
    assert flat["server_generated_vs_usage_server_tokens"] == t["server"]
    assert flat["server_generated_vs_usage_client_tokens"] == t["client"]
    assert flat["server_scrapes_count"] == block["scrapes"]
    if engine == "llama-server":
        assert t["server"] == 144  # test_telemetry_judge: exact on an honest engine
        assert flat["server_gauges_llamacpp_requests_processing_max"] == 4.0  # --concurrency 4 on --parallel 4
        assert flat["server_per_request_joined_requests"] == 6
    else:
        h = block["histograms"]["vllm:time_to_first_token_seconds"]
        assert flat["server_histograms_vllm_time_to_first_token_seconds_p99_s"] == h["p99"]
        assert flat["server_histograms_vllm_time_to_first_token_seconds_count"] == h["count"] == 8


def test_refuses_what_is_not_a_finished_bench_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["bench", "export", str(plain), "--format", "parquet"]) == 2
    assert "is not a bench serve run dir (no run.json)" in capsys.readouterr().err
    other = RunDir.create(tmp_path / "g")
    other.update_run(operation="gates.run")
    assert main(["bench", "export", str(other.path), "--format", "csv"]) == 2
    assert "is not a bench serve run dir (it holds a gates.run run" in capsys.readouterr().err
    unfinished = RunDir.create(tmp_path / "u")
    unfinished.update_run(operation="bench.serve")
    assert main(["bench", "export", str(unfinished.path), "--format", "csv"]) == 2
    assert "did not finish" in capsys.readouterr().err
    assert not (plain / "export").exists() and not (other.path / "export").exists()


def test_edited_reply_is_refused(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    p = run.output_path(ENGINE, "c2", "short", "p0")
    p.write_text(p.read_text().replace("206.443062", "6.443062"))
    with pytest.raises(OpError, match="level c2: its files do not match the bench record"):
        export_tables(run.path, "csv")
    assert not (run.path / "export").exists()


def test_cli_writes_both_tables_and_vllm_json_still_works(capsys: pytest.CaptureFixture[str], run: RunDir,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "cli"
    assert main(["bench", "export", str(run.path), "--format", "parquet", "--output", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["exports"] == [str(out) + "-requests.parquet", str(out) + "-levels.parquet"]
    assert pd.read_parquet(got["exports"][0])["ttft_ms"].iloc[0] == 206.443062
    assert main(["bench", "export", str(run.path), "--level", "c2", "--output", str(tmp_path / "v.json")]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["completed"] == 3


def test_missing_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch, run: RunDir) -> None:
    hide_modules(monkeypatch, "pyarrow")
    with pytest.raises(OpError) as e:
        export_tables(run.path, "parquet")
    assert str(e.value) == ("--format parquet needs pandas and pyarrow (missing: pyarrow): "
                            "pip install 'inferencekit[parquet]' (or make venv)")
    hide_modules(monkeypatch, "pandas")
    with pytest.raises(OpError) as e:
        export_tables(run.path, "csv")
    assert str(e.value) == ("--format csv needs pandas and pyarrow (missing: pandas): "
                            "pip install 'inferencekit[parquet]' (or make venv)")
