"""The appliance card, its HTML page and `inferencekit report`, on receipts built to docs/appliance.md."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from inferencekit.report.appliance_card import card_text
from inferencekit.report.appliance_html import write_html
from tests.cli_run import run_cli


def _summary(values: list[float], digits: int = 3) -> dict[str, Any] | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return {"median": round(median, digits), "minimum": round(s[0], digits), "maximum": round(s[-1], digits),
            "p90": round(s[round((len(s) - 1) * 0.9)], digits), "n": len(s)}


def _decode_row(i: int, rate: float | None, ttft: float, valid: bool = True, key: str = "run") -> dict[str, Any]:
    usable = rate is not None
    row = {key: i, "request_id": f"req-{key}{i}", "reply": f"outputs/x/{i}.json", "status": 200, "usable": usable,
           "prompt_tokens": 40, "completion_tokens": 129, "completion_tokens_source": "usage",
           "cached_prompt_tokens": None, "ttft_seconds": ttft, "time_to_first_visible_seconds": ttft,
           "time_to_last_output_seconds": ttft + 2.0, "decode_seconds": 2.0 if usable else None,
           "decode_tokens_per_second": rate, "measured_sse_events": 129, "wall_seconds": ttft + 2.1,
           "response_tail_seconds": 0.01, "stream_done_marker": True, "finish_reason": "length", "output": "x",
           "output_characters": 1, "output_sha256": "0" * 64, "reasoning_characters": 0, "reasoning_sha256": None,
           "stream_sha256": "1" * 64,
           "completion_validation": {"valid": True} if valid else {"valid": False, "error": "not a JSON array"}}
    if not usable:
        row["unusable_reason"] = "only one token-bearing SSE event"
    return row


def _workload(rates: list[float | None], ttfts: list[float], valid: list[bool]) -> dict[str, Any]:
    rows = [_decode_row(i + 1, r, t, v) for i, (r, t, v) in enumerate(zip(rates, ttfts, valid, strict=True))]
    ok = [r for r in rows if r["usable"]]
    return {"runs": rows, "decode_tokens_per_second": _summary([r["decode_tokens_per_second"] for r in ok]),
            "pooled_decode_tokens_per_second": (round(sum(128 for _ in ok) / sum(2.0 for _ in ok), 3) if ok else None),
            "ttft_seconds": _summary([r["ttft_seconds"] for r in ok], 6),
            "time_to_last_output_seconds": _summary([r["time_to_last_output_seconds"] for r in ok], 6),
            "wall_seconds": _summary([r["wall_seconds"] for r in ok], 6),
            "completion_gate": {"passed": sum(v for v in valid), "total": len(valid)}}


def _prefill_row(i: int, depth: int, ttft: float) -> dict[str, Any]:
    return {"run": i, "request_id": f"p{depth}-{i}", "reply": f"outputs/x/p{i}.json", "status": 200, "usable": True,
            "requested_prompt_tokens": depth, "prompt_tokens": depth, "prompt_tokens_source": "usage",
            "cached_prompt_tokens": 0, "ttft_seconds": ttft,
            "effective_prefill_tokens_per_second": round(depth / ttft, 3),
            "prompt_form": "token ids"}


def _prefill_half(depth: int, ttfts: list[float]) -> dict[str, Any]:
    rows = [_prefill_row(i + 1, depth, t) for i, t in enumerate(ttfts)]
    return {"runs": rows, "effective_prefill_tokens_per_second": _summary([r["effective_prefill_tokens_per_second"]
                                                                           for r in rows]),
            "ttft_seconds": _summary(ttfts, 6)}


def _level(level: int, aggregates: list[float], stream_rate: float, ttft: float) -> dict[str, Any]:
    rounds = [{"round": k + 1, "wall_seconds": round(level * 128 / agg, 6), "completion_tokens": level * 128,
               "aggregate_end_to_end_tokens_per_second": agg,
               "streams": [_decode_row(s + 1, stream_rate, ttft, key="stream") for s in range(level)]}
              for k, agg in enumerate(aggregates)]
    return {"rounds": rounds, "aggregate_end_to_end_tokens_per_second": _summary(aggregates),
            "per_stream_decode_tokens_per_second": _summary([stream_rate] * level * len(aggregates)),
            "per_stream_ttft_seconds": _summary([ttft] * level * len(aggregates), 6)}


def make_receipt() -> dict[str, Any]:
    """A receipt per docs/appliance.md: 3 decode workloads (one failing its gate, one with no usable sample),
    2 prefill depths (one cold not server-verified), concurrency levels 1, 2, 4."""
    return {
        "format": "inferencekit.appliance.v1", "schema": 1,
        "protocol": {"version": "1.0.0", "nonce_version": "1.0.0", "prompts_version": "2025.1",
                     "prompts_sha256": "abcdef0123456789" + "0" * 48},
        "tool": {"name": "inferencekit", "version": "0.1.0", "source": "git-worktree",
                 "git_revision": "0123456789abcdef0123456789abcdef01234567", "git_dirty": True,
                 "worktree_sha256": "f" * 64},
        "run": {"label": "rig <b>one</b> & co", "comparison_id": "sweep-2025-06", "started_at": "2025-06-01T10:00:00Z",
                "finished_at": "2025-06-01T10:20:00Z", "model": "smollm2-135m",
                "engine": {"engine": "llama.cpp", "version": "b5000"},
                "appliance": {"hardware": "Ryzen 7950X, 64 GiB", "topology": "single socket", "model": "smollm2-135m",
                              "model_revision": "r1", "quantisation": "Q8_0", "kv_cache_dtype": "f16",
                              "serving_engine": "llama-server b5000", "context_limit": 8192,
                              "competing_traffic": "none"},
                "metadata_source": "file", "api_key_env": None, "python": "3.12.3", "platform": "Linux"},
        "settings": {"runs": 3, "decode_tokens": 128, "temperature": 0.0, "top_p": 1.0, "seed": 7, "extra_body": {},
                     "prefill_depths": [512, 2048], "prefill_runs": 2, "prefill_tokens": 8,
                     "prefill_cache_isolation": "cache_prompt:false", "concurrency": [1, 2, 4],
                     "concurrency_runs": 2, "concurrency_tokens": 128, "concurrency_workload": "chat"},
        "decode": {
            "chat": _workload([41.25, 43.5, 40.75], [0.1215, 0.125, 0.13], [True, True, True]),
            "json-array-50": _workload([1234.5, 1300.25], [0.2, 0.25], [False, False]),
            "long-story": _workload([None, None], [0.3, 0.3], [True, True]),
        },
        "prefill": {
            "512": {"cold": _prefill_half(512, [0.25, 0.2]), "warm_replay": _prefill_half(512, [0.02, 0.025]),
                    "cold_verification": "server-verified"},
            "2048": {"cold": _prefill_half(2048, [1.6, 1.7]), "warm_replay": _prefill_half(2048, [0.05, 0.04]),
                     "cold_verification": "cold not server-verified"},
        },
        "concurrency": {str(lv): _level(lv, aggs, sr, t) for lv, aggs, sr, t in
                        ((1, [42.125, 44.0], 42.0, 0.12), (2, [80.5, 84.25], 40.0, 0.15),
                         (4, [150.75, 160.0], 38.5, 0.2))},
        "skipped": {},
        "verdict": "UNPROVEN",
        "limitations": ["decode json-array-50: completion gate passed 0/2", "decode long-story: no usable sample"],
    }


def test_card_shows_every_section_as_measured():
    r = make_receipt()
    text = card_text(r)
    # header
    for s in ("rig <b>one</b> & co", "smollm2-135m", "llama.cpp b5000", "Ryzen 7950X, 64 GiB", "single socket",
              "Q8_0", "f16", "llama-server b5000", "8192", "sweep-2025-06", "1.0.0", "sha256 abcdef012345",
              "0123456789ab dirty", "2025-06-01T10:00:00Z"):
        assert s in text, s
    assert "abcdef0123456" not in text  # the prompts hash is cut to 12 hex digits
    # decode: median, min–max, p90, pooled, TTFT; the failed gate and the null summary
    chat = next(line for line in text.splitlines() if "chat" in line and "41.2" in line)
    for s in ("41.2", "40.8–43.5", "43.5", "64.0", "0.125", "3/3 ok"):
        assert s in chat, s
    gate = next(line for line in text.splitlines() if "json-array-50" in line)
    assert "0/2 FAIL" in gate and "1,267.4" in gate and "1,234.5–1,300.2" in gate
    story = next(line for line in text.splitlines() if "long-story" in line)
    assert story.count("—") >= 5 and "0/2" in story and " 0.0 " not in story
    assert "unusable: long-story run 1: only one token-bearing SSE event" in text
    # prefill: cold and warm medians with TTFT, the cold label
    d2048 = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("2048"))
    for s in ("1,242.4", "1.650", "46,080.0", "0.045", "cold not server-verified"):
        assert s in d2048, s
    assert "server-verified" in next(line for line in text.splitlines() if line.lstrip("│ ").startswith("512"))
    # concurrency
    c4 = [line for line in text.splitlines() if re.match(r"^│\s+4\s+│", line)]
    assert c4 and "155.4" in c4[0] and "150.8–160.0" in c4[0] and "38.5" in c4[0] and "0.200" in c4[0]
    # how measured (notes may wrap), verdict, limitations
    flat = " ".join(text.split())
    assert flat.count("how measured:") == 3
    assert "(completion tokens − 1) / time from the first to the last token-bearing SSE event" in flat
    assert "prompt tokens / TTFT" in flat and "max_tokens 8" in flat
    assert "completion tokens of all streams / round wall time, streams released together by a barrier" in flat
    assert "verdict: UNPROVEN" in text
    assert "limitation: decode json-array-50: completion gate passed 0/2" in text
    assert "\x1b[" not in text


def test_card_without_git_and_with_skips():
    r = make_receipt()
    r["tool"].update(git_revision=None, git_dirty=None, source="installed")
    r["prefill"], r["concurrency"] = {}, {}
    r["skipped"] = {"prefill": "--prefill-depths not given", "concurrency": "--concurrency not given"}
    text = card_text(r)
    assert "inferencekit 0.1.0 (installed)" in text and "dirty" not in text
    assert "skipped prefill: --prefill-depths not given" in text
    assert "skipped concurrency: --concurrency not given" in text
    assert "cold tok/s" not in text and "aggregate tok/s" not in text


def test_card_names_an_archived_revision_and_the_files_fingerprint():
    r = make_receipt()
    r["tool"].update(git_revision="89abcdef0123456789abcdef0123456789abcdef", git_dirty=None, source="git-archive",
                     source_sha256="c0ffee" + "0" * 58)
    text = card_text(r)
    assert "inferencekit 0.1.0 @ 89abcdef0123 (git archive), files sha256 c0ffee000000" in text


def test_html_page_is_self_contained_with_a_chart_per_section(tmp_path):
    r = make_receipt()
    out = write_html(r, tmp_path / "page" / "receipt.html")
    assert out == tmp_path / "page" / "receipt.html"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 3
    for s in ("41.2", "40.8–43.5", "0/2 FAIL", "1,242.4", "cold not server-verified", "155.4", "150.8–160.0",
              "UNPROVEN", "—", "sha256 abcdef012345", "0123456789ab dirty", "round wall time"):
        assert s in page, s
    assert "rig &lt;b&gt;one&lt;/b&gt; &amp; co" in page and "<b>one</b>" not in page
    assert not re.search(r"<(script|link|img|iframe)\b", page, re.IGNORECASE)
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?://", page, re.IGNORECASE)
    assert "@import" not in page and "url(http" not in page
    assert not list(out.parent.glob(".*.tmp"))


def test_html_without_prefill_has_two_charts_and_the_reason(tmp_path):
    r = make_receipt()
    r["prefill"] = {}
    r["skipped"] = {"prefill": "no --prefill-depths <given>"}
    page = write_html(r, tmp_path / "p.html").read_text(encoding="utf-8")
    assert page.count("<svg") == 2
    assert "no --prefill-depths &lt;given&gt;" in page
    assert "cold not server-verified" not in page


@pytest.fixture
def report_op() -> None:
    """Every operation is registered (``inferencekit.commands``), as the command line has them."""
    import inferencekit.commands  # noqa: F401


def test_report_reprints_and_writes_html(report_op, tmp_path, capsys):
    from inferencekit.cli import main

    run = tmp_path / "run"
    (run / "appliance").mkdir(parents=True)
    r = make_receipt()
    (run / "appliance" / "receipt.json").write_text(json.dumps(r))
    page = tmp_path / "out" / "r.html"
    code, doc = run_cli(["report", str(run), "--html", str(page)])
    assert code == 0
    receipt_path = run / "appliance" / "receipt.json"
    assert doc == {"receipt": str(receipt_path), "html": str(page), "verdict": "UNPROVEN", "integrity": "unchecked",
                   "integrity_detail": f"{receipt_path} is not inside its run dir: not checked against its evidence "
                                       "record"}
    assert page.read_text(encoding="utf-8").count("<svg") == 3
    # the card itself, without --json
    assert main(["report", str(run / "appliance" / "receipt.json")]) == 0
    out = capsys.readouterr().out
    assert "0/2 FAIL" in out and "verdict: UNPROVEN" in out and "cold not server-verified" in out
    code, doc = run_cli(["report", str(run / "appliance" / "receipt.json")])
    assert code == 0 and doc["html"] is None


@pytest.mark.parametrize("content,msg", [
    (None, "no such receipt file"),
    ("{not json", "not a readable JSON receipt"),
    (json.dumps({"format": "inferencekit.evidence.v1"}), "inferencekit.appliance.v1"),
    (json.dumps([1, 2]), "inferencekit.appliance.v1"),
])
def test_report_refuses_bad_receipts(report_op, tmp_path, capsys, content, msg):
    from inferencekit.cli import main

    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and msg in err and err.count("\n") == 1
    code, doc = run_cli(["report", str(path), "--html", str(tmp_path / "x.html")])
    assert code == 2 and str(path) in doc["error"]
    assert not (tmp_path / "x.html").exists()


def test_report_refuses_a_run_dir_without_a_receipt(report_op, tmp_path, capsys):
    from inferencekit.cli import main

    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "appliance" / "receipt.json") in err


def test_receipt_is_not_modified(tmp_path):
    r = make_receipt()
    before = copy.deepcopy(r)
    card_text(r)
    write_html(r, tmp_path / "p.html")
    assert r == before
