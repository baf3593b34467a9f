"""`bench compare`: receipts measured alike give ratio and noise rows; receipts measured differently are refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from inferencekit.bench.compare import ABSENT, Difference, compare_receipts, receipt_differences, receipt_notes
from inferencekit.cli import main
from inferencekit.commands.appliance import bench_compare
from inferencekit.errors import OpError
from inferencekit.evidence.receipt import load_receipt
from inferencekit.registry import Call
from tests.cli_run import run_cli


@pytest.fixture
def cli() -> None:
    """Every operation is registered (``inferencekit.commands``), as the command line has them."""
    import inferencekit.commands  # noqa: F401


def summary(median: float, lo: float, hi: float, n: int = 3) -> dict[str, Any]:
    return {"median": median, "minimum": lo, "maximum": hi, "p90": hi, "n": n}


SETTINGS = {"runs": 3, "decode_tokens": 256, "temperature": 0.0, "top_p": 1.0, "seed": 7, "extra_body": {},
            "prefill_depths": [512, 4096], "prefill_runs": 3, "prefill_tokens": 8,
            "prefill_cache_isolation": "cache_prompt:false", "concurrency": [1, 4], "concurrency_runs": 2,
            "concurrency_tokens": 128, "concurrency_workload": "chat"}


def make_receipt(*, decode: dict[str, tuple[dict | None, float | None]] | None = None,
                 prefill: dict[str, tuple[dict | None, dict | None]] | None = None,
                 concurrency: dict[str, tuple[dict | None, dict | None]] | None = None,
                 settings: dict[str, Any] | None = None, label: str = "a", model: str = "smollm2",
                 engine: str = "llama-server", hardware: str = "8x CPU") -> dict[str, Any]:
    """A valid appliance receipt (docs/appliance.md) with the given summaries; rows are left out.

    ``decode`` maps workload -> (decode_tokens_per_second summary, pooled rate); ``prefill`` maps depth ->
    (cold, warm) effective-prefill summaries; ``concurrency`` maps level -> (aggregate, per-stream) summaries.
    """
    decode = {"chat": (summary(100, 90, 110), 101.5)} if decode is None else decode
    prefill = {"512": (summary(2000, 1900, 2100), summary(9000, 8800, 9100))} if prefill is None else prefill
    concurrency = {"4": (summary(300, 290, 310), summary(80, 75, 85))} if concurrency is None else concurrency
    skipped = {}
    if not prefill:
        skipped["prefill"] = "no --prefill-depths"
    if not concurrency:
        skipped["concurrency"] = "no --concurrency"
    return {
        "format": "inferencekit.appliance.v1", "schema": 1,
        "protocol": {"version": "1.0.0", "nonce_version": "1.0.0", "prompts_version": "2024-01",
                     "prompts_sha256": "ab" * 32},
        "tool": {"name": "inferencekit", "version": "0.1.0", "source": "git-worktree", "git_revision": "c0ffee",
                 "git_dirty": False, "worktree_sha256": None},
        "run": {"label": label, "comparison_id": "cmp-1", "started_at": "t0", "finished_at": "t1", "model": model,
                "engine": {"engine": engine, "version": "b1"},
                "appliance": {"hardware": hardware, "topology": "1 node", "model": model, "model_revision": "r1",
                              "quantisation": "Q4_1", "kv_cache_dtype": "f16", "serving_engine": engine,
                              "context_limit": 8192, "competing_traffic": "none"},
                "metadata_source": "file", "api_key_env": None, "python": "3.11", "platform": "linux"},
        "settings": copy.deepcopy(SETTINGS if settings is None else settings),
        "decode": {w: {"runs": [], "decode_tokens_per_second": s, "pooled_decode_tokens_per_second": pooled,
                       "ttft_seconds": summary(0.1, 0.09, 0.11), "time_to_last_output_seconds": None,
                       "wall_seconds": None, "completion_gate": {"passed": 3, "total": 3}}
                   for w, (s, pooled) in decode.items()},
        "prefill": {d: {"cold": {"runs": [], "effective_prefill_tokens_per_second": cold, "ttft_seconds": None},
                        "warm_replay": {"runs": [], "effective_prefill_tokens_per_second": warm,
                                        "ttft_seconds": None},
                        "cold_verification": "server-verified"}
                    for d, (cold, warm) in prefill.items()},
        "concurrency": {c: {"rounds": [], "aggregate_end_to_end_tokens_per_second": agg,
                            "per_stream_decode_tokens_per_second": per, "per_stream_ttft_seconds": None}
                        for c, (agg, per) in concurrency.items()},
        "skipped": skipped, "verdict": "PASS", "limitations": [],
    }


def _by(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["section"], r["key"], r["metric"]): r for r in rows}


# --- matched pairs: ratios and the noise rule ---------------------------------------------------------------

def test_matched_pair_has_no_differences_and_exact_ratios():
    a = make_receipt(decode={"chat": (summary(100, 90, 110), 100.0), "json": (summary(50, 40, 60), 50.0)},
                     prefill={"4096": (summary(1000, 950, 1050), summary(4000, 3900, 4100)),
                              "512": (summary(2000, 1900, 2100), summary(9000, 8800, 9100))},
                     concurrency={"1": (summary(100, 95, 105), summary(100, 95, 105)),
                                  "4": (summary(300, 290, 310), summary(80, 75, 85))})
    b = make_receipt(label="b",
                     decode={"chat": (summary(120, 115, 125), 125.0), "json": (summary(55, 45, 65), 54.0)},
                     prefill={"512": (summary(2200, 2100, 2300), summary(9000, 8000, 10000)),
                              "4096": (summary(500, 490, 510), summary(4000, 3950, 4050))},
                     concurrency={"4": (summary(450, 440, 460), summary(80, 79, 81)),
                                  "1": (summary(100, 96, 104), summary(100, 96, 104))})
    assert receipt_differences(a, b) == []
    assert receipt_notes(a, b) == []
    rows = compare_receipts(a, b)
    assert [(r["section"], r["key"], r["metric"]) for r in rows] == [
        ("decode", "chat", "decode_tokens_per_second"), ("decode", "chat", "pooled_decode_tokens_per_second"),
        ("decode", "json", "decode_tokens_per_second"), ("decode", "json", "pooled_decode_tokens_per_second"),
        ("prefill", "d512 cold", "effective_prefill_tokens_per_second"),
        ("prefill", "d512 warm", "effective_prefill_tokens_per_second"),
        ("prefill", "d4096 cold", "effective_prefill_tokens_per_second"),
        ("prefill", "d4096 warm", "effective_prefill_tokens_per_second"),
        ("concurrency", "c1", "aggregate_end_to_end_tokens_per_second"),
        ("concurrency", "c1", "per_stream_decode_tokens_per_second"),
        ("concurrency", "c4", "aggregate_end_to_end_tokens_per_second"),
        ("concurrency", "c4", "per_stream_decode_tokens_per_second"),
    ]
    by = _by(rows)
    chat = by[("decode", "chat", "decode_tokens_per_second")]
    assert chat == {"section": "decode", "key": "chat", "metric": "decode_tokens_per_second", "unit": "tokens/s",
                    "a_median": 100, "a_range": [90, 110], "b_median": 120, "b_range": [115, 125],
                    "ratio_b_over_a": 1.2, "beyond_noise": True, "note": None}
    assert by[("decode", "json", "decode_tokens_per_second")]["ratio_b_over_a"] == 1.1
    assert by[("decode", "json", "decode_tokens_per_second")]["beyond_noise"] is False  # 40–60 vs 45–65
    pooled = by[("decode", "chat", "pooled_decode_tokens_per_second")]
    assert (pooled["a_median"], pooled["b_median"], pooled["ratio_b_over_a"]) == (100.0, 125.0, 1.25)
    assert pooled["a_range"] is None and pooled["beyond_noise"] is None and "noise not judged" in pooled["note"]
    cold4k = by[("prefill", "d4096 cold", "effective_prefill_tokens_per_second")]
    assert (cold4k["ratio_b_over_a"], cold4k["beyond_noise"]) == (0.5, True)  # B slower, beyond noise
    assert by[("prefill", "d512 warm", "effective_prefill_tokens_per_second")]["beyond_noise"] is False
    assert by[("prefill", "d512 cold", "effective_prefill_tokens_per_second")]["ratio_b_over_a"] == 1.1
    agg4 = by[("concurrency", "c4", "aggregate_end_to_end_tokens_per_second")]
    assert (agg4["ratio_b_over_a"], agg4["beyond_noise"]) == (1.5, True)
    per4 = by[("concurrency", "c4", "per_stream_decode_tokens_per_second")]
    assert (per4["ratio_b_over_a"], per4["beyond_noise"]) == (1.0, False)


@pytest.mark.parametrize("rng_b,beyond", [
    ((111, 130), True),    # just above A's maximum
    ((110, 130), False),   # touching: within noise
    ((50, 89.9), True),    # just below A's minimum
    ((50, 90), False),     # touching from below
    ((95, 105), False),    # inside A's range
    ((80, 120), False),    # around A's range
])
def test_beyond_noise_means_the_ranges_do_not_overlap(rng_b, beyond):
    a = make_receipt(decode={"chat": (summary(100, 90, 110), None)}, prefill={}, concurrency={})
    b = make_receipt(decode={"chat": (summary(sum(rng_b) / 2, *rng_b), None)}, prefill={}, concurrency={})
    row = compare_receipts(a, b)[0]
    assert row["b_range"] == list(rng_b)
    assert row["beyond_noise"] is beyond


def test_a_null_summary_gives_no_ratio_and_a_note():
    a = make_receipt(concurrency={"4": (summary(300, 290, 310), None)})
    b = make_receipt(concurrency={"4": (summary(600, 590, 610), summary(80, 75, 85))})
    by = _by(compare_receipts(a, b))
    per = by[("concurrency", "c4", "per_stream_decode_tokens_per_second")]
    assert per["a_median"] is None and per["a_range"] is None and per["b_median"] == 80
    assert per["ratio_b_over_a"] is None and per["beyond_noise"] is False
    assert per["note"] == "no usable sample on A"
    agg = by[("concurrency", "c4", "aggregate_end_to_end_tokens_per_second")]
    assert (agg["ratio_b_over_a"], agg["beyond_noise"], agg["note"]) == (2.0, True, None)


def test_a_single_run_range_is_flagged():
    a = make_receipt(decode={"chat": (summary(100, 100, 100, n=1), None)}, prefill={}, concurrency={})
    b = make_receipt(decode={"chat": (summary(101, 101, 101, n=1), None)}, prefill={}, concurrency={})
    row = compare_receipts(a, b)[0]
    assert row["beyond_noise"] is None and row["ratio_b_over_a"] == 1.01  # one sample is no spread: not judged
    assert "A has n=1" in row["note"] and "B has n=1" in row["note"]


# --- refusals -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,value", [
    ("protocol.prompts_sha256", "cd" * 32),
    ("protocol.version", "2.0.0"),
    ("protocol.nonce_version", "1.1.0"),
    ("run.comparison_id", "cmp-2"),
    ("settings.extra_body", {"chat_template_kwargs": {"enable_thinking": False}}),
    ("settings.decode_tokens", 512),
    ("settings.prefill_depths", [512, 8192]),
    ("settings.concurrency", [1, 8]),
    ("settings.runs", 5),
    ("settings.seed", 8),
    ("settings.concurrency_workload", "json"),
    ("schema", 2),
])
def test_each_measurement_field_is_refused_and_named(path, value):
    a, b = make_receipt(), make_receipt()
    *parents, leaf = path.split(".")
    target = b
    for p in parents:
        target = target[p]
    before = target[leaf]
    target[leaf] = value
    assert receipt_differences(a, b) == [Difference(path, before, value)]
    assert receipt_notes(a, b) == []


def test_a_settings_key_on_one_side_only_is_refused():
    b = make_receipt(settings={**SETTINGS, "ignore_eos": True})
    assert receipt_differences(make_receipt(), b) == [Difference("settings.ignore_eos", ABSENT, True)]


def test_a_section_skipped_on_one_side_is_refused():
    b = make_receipt(prefill={})
    assert receipt_differences(make_receipt(), b) == [
        Difference("skipped.prefill", "ran", "skipped: no --prefill-depths")]
    assert all(r["section"] != "prefill" for r in compare_receipts(make_receipt(), b))


def test_engine_model_and_cache_isolation_are_notes_only():
    a = make_receipt()
    b = make_receipt(settings={**SETTINGS, "prefill_cache_isolation": "cache_salt"}, model="qwen3", engine="vllm",
                     hardware="1x H200")
    b["prefill"]["512"]["cold_verification"] = "cold not server-verified"
    b["verdict"] = "UNPROVEN"
    b["tool"]["git_revision"] = "deadbeef"
    assert receipt_differences(a, b) == []
    notes = {d.field: (d.a, d.b) for d in receipt_notes(a, b)}
    assert notes == {
        "run.model": ("smollm2", "qwen3"), "run.engine.engine": ("llama-server", "vllm"),
        "run.appliance.hardware": ("8x CPU", "1x H200"), "run.appliance.model": ("smollm2", "qwen3"),
        "run.appliance.serving_engine": ("llama-server", "vllm"),
        "settings.prefill_cache_isolation": ("cache_prompt:false", "cache_salt"),
        "prefill.512.cold_verification": ("server-verified", "cold not server-verified"),
        "tool.git_revision": ("c0ffee", "deadbeef"), "verdict": ("PASS", "UNPROVEN")}
    assert len(compare_receipts(a, b)) == 6


def test_a_workload_in_one_receipt_only_is_a_note_without_a_row():
    a = make_receipt()
    b = make_receipt(decode={"chat": (summary(100, 90, 110), 100.0), "json": (summary(50, 40, 60), 50.0)})
    assert receipt_differences(a, b) == []
    assert receipt_notes(a, b) == [Difference("decode.json", ABSENT, "measured")]
    assert {r["key"] for r in compare_receipts(a, b) if r["section"] == "decode"} == {"chat"}


# --- loading ------------------------------------------------------------------------------------------------

def _write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_a_receipt_file_or_its_run_dir_is_accepted(tmp_path):
    doc = make_receipt()
    f = _write(tmp_path / "r.json", doc)
    _write(tmp_path / "run" / "appliance" / "receipt.json", doc)
    assert load_receipt(f) == doc
    assert load_receipt(str(tmp_path / "run")) == doc


def test_other_files_are_refused_with_their_path(tmp_path):
    other = _write(tmp_path / "other.json", {**make_receipt(), "format": "inferencekit.evidence.v1"})
    with pytest.raises(OpError, match="format 'inferencekit.evidence.v1'") as e:
        load_receipt(other)
    assert str(other) in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(OpError, match="not a readable JSON receipt"):
        load_receipt(bad)
    with pytest.raises(OpError, match="not an appliance receipt"):
        load_receipt(_write(tmp_path / "list.json", [1, 2]))
    with pytest.raises(OpError, match="no such receipt file"):
        load_receipt(tmp_path / "missing.json")
    (tmp_path / "empty-run").mkdir()
    with pytest.raises(OpError, match="without appliance/receipt.json"):
        load_receipt(tmp_path / "empty-run")


# --- the operation and the CLI ------------------------------------------------------------------------------

def _pair(tmp_path: Path, **b_changes: Any) -> tuple[Path, Path]:
    a = make_receipt(label="llama")
    b = make_receipt(label="vllm", engine="vllm",
                     decode={"chat": (summary(120, 115, 125), 121.0)}, **b_changes)
    _write(tmp_path / "run-b" / "appliance" / "receipt.json", b)
    return _write(tmp_path / "a.json", a), tmp_path / "run-b"


def test_the_operation_returns_rows_and_no_verdict(tmp_path):
    pa, pb = _pair(tmp_path)
    out = bench_compare(Call("bench.compare", (), {}), a=str(pa), b=str(pb), allow_mismatch=False)
    assert out.verdict is None
    assert out.payload["a"] == {"label": "llama", "path": str(pa), "integrity": "unchecked"}  # no run dir, no record
    assert out.payload["b"] == {"label": "vllm", "path": str(pb), "integrity": "unchecked"}  # a run dir, no record
    assert out.payload["differences"] == []
    assert {"field": "run.engine.engine", "a": "llama-server", "b": "vllm"} in out.payload["notes"]
    assert out.payload["rows"][0]["ratio_b_over_a"] == 1.2


def test_cli_refuses_a_mismatched_pair_naming_each_field(tmp_path, capsys, cli):
    pa, pb = _pair(tmp_path, settings={**SETTINGS, "decode_tokens": 512, "extra_body": {"think": False}})
    assert main(["bench", "compare", str(pa), str(pb)]) == 2
    err = capsys.readouterr().err
    assert "settings.decode_tokens: A=256  B=512" in err
    assert 'settings.extra_body: A={}  B={"think": false}' in err
    assert "--allow-mismatch" in err and "Traceback" not in err


def test_cli_allow_mismatch_compares_and_keeps_the_differences(tmp_path, capsys, cli):
    pa, pb = _pair(tmp_path, settings={**SETTINGS, "decode_tokens": 512})
    code, doc = run_cli(["bench", "compare", str(pa), str(pb), "--allow-mismatch"])
    assert code == 0
    assert "warning" in capsys.readouterr().err
    assert doc["differences"] == [{"field": "settings.decode_tokens", "a": 256, "b": 512}]
    chat = doc["rows"][0]
    assert (chat["key"], chat["a_median"], chat["b_median"], chat["ratio_b_over_a"], chat["beyond_noise"]) == \
        ("chat", 100, 120, 1.2, True)
    assert len(doc["rows"]) == 6


def test_cli_card_shows_ratio_noise_and_notes(tmp_path, capsys, cli):
    pa, pb = _pair(tmp_path)
    assert main(["bench", "compare", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "1.200×" in out and "beyond noise" in out and "within noise" in out
    assert "100.0 (90.0–110.0)" in out and "120.0 (115.0–125.0)" in out
    assert "run.engine.engine" in out and "do not overlap" in out


def test_a_small_ratio_keeps_four_significant_digits():
    from inferencekit.bench.compare import _ratio

    # 4 decimal places gave 0.018 for 0.0180275..., 0.15% off the medians' own ratio (a CI run, 7 Dec 2026)
    assert _ratio(1000.0, 18.0275) == 0.01803
    assert _ratio(3.0, 4.0) == 1.333 and _ratio(0.0, 1.0) is None and _ratio(None, 1.0) is None
