"""``bench serve`` against vLLM on CPU (float32 SmolLM2-135M-Instruct), and vLLM's own TTFT histogram.

One ``bench serve`` run (concurrency 1 and 2, a few requests each: float32 decodes at ≈ 15 tok/s
here) is shared by the tests of this module:

- the run directory has the same layout as on the embedded engine, one reply per request, N_out
  from usage, and ``evidence verify`` finds the record intact;
- every reply streams ``token_ids`` (``return_token_ids``), exactly ``usage.completion_tokens`` of
  them — the EOS id 2 included at a natural stop, as vLLM counts it;
- the mean client TTFT over the run's requests is within 10% of the mean of vLLM's
  ``vllm:time_to_first_token_seconds`` histogram over the same requests (``_sum``/``_count`` read from
  ``/metrics`` just before and just after the run, and differenced; ``--warmup 0`` so no warm-up
  request is counted on either side).
"""

from __future__ import annotations

import json
import os
import statistics
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from inferencekit.cli import main
from tests.cli_run import bench_ok, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.vllm]

ENGINE = "vllm"
LEVELS = ("c1", "c2")
MAX_SLEW = 500e-6  # the largest rate error of a slewed wall clock (adjtimex(2), MAXFREQ)
N = 4  # requests per level
MAX_TOKENS = 16
EOS_ID = 2  # SmolLM2-Instruct's <|im_end|>


def ttft_histogram(url: str) -> tuple[float, float]:
    """(``_sum`` in seconds, ``_count``) of ``vllm:time_to_first_token_seconds``, over all label sets."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:  # noqa: S310 (loopback)
        text = r.read().decode()
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        for kind in total:
            if name == f"vllm:time_to_first_token_seconds_{kind}":
                total[kind] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def level_files(run_dir: Path, kind: str, label: str) -> list[Path]:
    base = run_dir / kind / ENGINE / f"load-{label}"
    return sorted(p.relative_to(base) for p in base.glob("*/*.json"))


def ok(reply: dict[str, Any]) -> bool:
    return reply.get("status") == 200 and not reply.get("error")


@pytest.fixture(scope="module")
def vllm_run(vllm_engine, tmp_path_factory) -> dict[str, Any]:
    run_dir = tmp_path_factory.mktemp("vllm-bench") / "run"
    before = ttft_histogram(vllm_engine.url)
    code, payload = run_cli(["bench", "serve", "--base-url", vllm_engine.url, "--concurrency", "1,2",
                             "--num-prompts", str(N), "--max-tokens", str(MAX_TOKENS), "--warmup", "0",
                             "--seed", "5", "--run-dir", str(run_dir)])
    after = ttft_histogram(vllm_engine.url)
    assert payload is not None, f"bench serve printed nothing (exit {code})"
    replies = {}
    for lbl in LEVELS:
        base = run_dir / "outputs" / ENGINE / f"load-{lbl}"
        replies[lbl] = [{**json.loads((base / rel).read_text()), "_rel": str(rel)}
                        for rel in level_files(run_dir, "outputs", lbl)]
    return {"code": code, "payload": payload, "run_dir": run_dir, "replies": replies,
            "metrics_before": before, "metrics_after": after}


def all_replies(vllm_run: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for lbl in LEVELS for r in vllm_run["replies"][lbl]]


def test_bench_serve_layout_and_evidence(vllm_run, capsys) -> None:
    run_dir: Path = vllm_run["run_dir"]
    payload = vllm_run["payload"]
    # every request succeeded (exit 3 only when a level was marked as paced by the client on a busy machine)
    assert bench_ok(vllm_run["code"], payload)
    assert payload["verdict"] is None or vllm_run["code"] == 3
    run = json.loads((run_dir / "run.json").read_text())
    assert run["operation"] == "bench.serve"
    assert run["engine"]["engine"] == ENGINE and run["pins"]["engine_identity"]["engine"] == ENGINE
    assert run["dialect"]["stream_count_fields"] == {"return_token_ids": True}
    assert run["bench_record"] == payload["evidence_id"]
    assert not (run_dir / "outputs" / ENGINE / "warmup").exists()  # --warmup 0
    for lbl in LEVELS:
        ins, outs = level_files(run_dir, "inputs", lbl), level_files(run_dir, "outputs", lbl)
        assert ins == outs and len(outs) == N  # one reply per request, same names
        assert {rel.parts[0] for rel in outs} <= {"very_short", "short", "medium", "long"}
        for r in vllm_run["replies"][lbl]:
            rel = Path(r["_rel"])
            assert ok(r), r.get("error")
            assert (r["engine"], r["level"], r["bucket"]) == (ENGINE, lbl, rel.parts[0])
            assert r["id"] == rel.stem.split("~")[0]
            body = json.loads((run_dir / "inputs" / ENGINE / f"load-{lbl}" / rel).read_text())
            assert body["return_token_ids"] is True and body["max_tokens"] == MAX_TOKENS
        m = payload["levels"][lbl]
        assert m["requests"] == {"total": N, "completed": N, "failed": 0, "transport_failures": 0, "no_tokens": 0,
                                  "errors": {}}
        assert m["n_out"]["sources"] == {"usage": N}
        assert m["n_out"]["streamed_vs_usage"] == {"compared": N, "disagree": 0}
    assert sorted(p.stem for p in (run_dir / "evidence").glob("ev_*.json")) == [payload["evidence_id"]]
    capsys.readouterr()
    assert main(["evidence", "verify", payload["evidence_id"], "--json", "--quiet"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["intact"] is True
    # requests, replies, and per level the retokenized table, client.json (the client's self-check) and the server
    # telemetry scraped from vLLM's /metrics (server_metrics.jsonl.gz)
    assert len(list(run_dir.glob("outputs/*/load-*/server_metrics.jsonl.gz"))) == len(LEVELS)
    assert verdict["artifacts_checked"] == 2 * N * len(LEVELS) + 3 * len(LEVELS)


def test_streamed_token_ids_equal_usage(vllm_run) -> None:
    rows = []
    for r in all_replies(vllm_run):
        usage = r["usage"]
        ids = r["token_ids"]
        assert r["streamed_method"] == "token_ids" and r["n_streamed"] == len(ids), r["_rel"]
        assert len(ids) == usage["completion_tokens"], r["_rel"]
        assert len(r["prompt_token_ids"]) == usage["prompt_tokens"], r["_rel"]
        assert r["finish_reason"] in ("stop", "length"), r["_rel"]
        if r["finish_reason"] == "stop":
            assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1], r["_rel"]  # vLLM streams and counts the EOS
        else:
            assert len(ids) == MAX_TOKENS and EOS_ID not in ids, r["_rel"]
        assert r["chunks"] == len(ids)  # one token per event here: every id has its own event
        rows.append((r["_rel"], r["finish_reason"], len(ids), usage["completion_tokens"]))
    print("\n[vllm streamed token_ids vs usage]", rows)


def test_client_ttft_contains_vllm_histogram(vllm_run) -> None:
    """Mean client TTFT vs the mean of ``vllm:time_to_first_token_seconds`` over the same requests.

    vLLM 0.32 observes ``iteration_timestamp − arrival_time`` (v1/metrics/stats.py): ``arrival_time`` is
    taken when the frontend starts rendering the chat request (renderers/base.py, before the chat
    template and tokenization, after the HTTP body was parsed and validated); the iteration timestamp
    is when the frontend's output processor handles the engine output holding the first token. The
    client's TTFT contains that interval plus the HTTP parsing before it and the detokenization, the
    SSE write and the loopback read after it — so client ≥ server, to the rate at which the two clocks may
    disagree (vLLM's is the wall clock, which NTP may slew). How close the means come (within
    10% on a quiet machine) is a timing figure: printed here, measured by benchmarks/timing_agreement.py
    (``--engine vllm``), not asserted. Nothing but this run's requests reached the server between the two
    ``/metrics`` reads (``--warmup 0``; re-tokenization uses ``/tokenize``, which is no
    generation), which the histogram's count confirms.
    """
    replies = all_replies(vllm_run)
    s0, c0 = vllm_run["metrics_before"]
    s1, c1 = vllm_run["metrics_after"]
    assert c1 - c0 == len(replies) == N * len(LEVELS)
    server_ms = (s1 - s0) / (c1 - c0) * 1e3
    client = [r["ttft_ms"] for r in replies]
    client_ms = statistics.fmean(client)
    print(f"\n[vllm TTFT] n={len(client)}, load avg {os.getloadavg()[0]:.2f}: client mean {client_ms:.1f} ms "
          f"(p50 {statistics.median(client):.1f}, min {min(client):.1f}, max {max(client):.1f}) vs server histogram "
          f"mean {server_ms:.1f} ms ({s1 - s0:.4f} s / {c1 - c0:.0f}) -> {100 * (client_ms / server_ms - 1):+.2f}% "
          f"({client_ms - server_ms:+.1f} ms per request)")
    # vLLM times with time.time() (the wall clock), the client with perf_counter: a wall clock being slewed runs up to
    # 500 ppm fast or slow (adjtimex(2): NTP's maximum frequency offset), so the ordering holds to that rate, not to
    # the microsecond (a make test run of 7 Dec 2026: client 1133.156 ms, server 1133.495 ms, 300 ppm apart)
    assert client_ms >= server_ms * (1 - MAX_SLEW) and server_ms > 0


def test_probe_on_vllm(vllm_engine, tmp_path) -> None:
    """vLLM honours what ENGINES.md observed: ignore_eos, seeds, usage in streams, token ids, tokenize."""
    code, out = run_cli(["probe", "--base-url", vllm_engine.url, "--run-dir", str(tmp_path / "p")])
    assert code == 0 and out is not None
    caps = {k: v["status"] for k, v in out["capabilities"].items()}
    assert caps["ignore_eos"] == "honoured" and caps["usage_in_stream"] == "honoured"
    assert caps["token_ids"] == "honoured" and caps["tokenize"] == "honoured" and caps["seed"] == "honoured"
    assert caps["logprobs"] == "honoured"  # top_logprobs 20 is vLLM's cap: accepted


def test_contract_on_vllm(vllm_engine, tmp_path) -> None:
    """vLLM refuses out-of-range values with HTTP 400, returns n choices, and with the recipe's tool parser honours
    a named tool_choice (docs/contract.md)."""
    code, out = run_cli(["probe", "--base-url", vllm_engine.url, "--contract", "--items", "n,validation,tools",
                         "--run-dir", str(tmp_path / "c")])
    items = {i["item"]: i for i in out["items"]}
    assert code == 0 and out["verdict"] == "PASS", out["contract"]
    assert items["n"]["verdict"] == "PASS"
    assert all(items[f"invalid {w}"]["compliant"] for w in ("temperature -1", "top_p 2", "max_tokens -5",
                                                             "response_format type 'bogus'"))
    assert items["tool_choice named"]["calls"] == ["get_time"]
    assert items["tool calls streamed vs not"]["verdict"] == "PASS"


def test_sweep_resets_vllms_prefix_cache_between_points(vllm_engine, tmp_path) -> None:
    """``bench sweep --reset-cache``: vLLM's POST /reset_prefix_cache (served because `engine up` sets
    VLLM_SERVER_DEV_MODE=1) before every point, recorded per point in sweep.json."""
    run = tmp_path / "sweep"
    code, out = run_cli(["bench", "sweep", "--base-url", vllm_engine.url, "--concurrency", "1,2", "--reset-cache",
                         "--slo-target", "ttft_p50=600000", "--kat", "0", "--num-prompts", "4", "--max-tokens", "4",
                         "--warmup", "0", "--run-dir", str(run)])
    assert out is not None, code
    doc = json.loads((run / "sweep.json").read_text())
    assert doc["cache_reset"]["asked"] is True
    done = {"reset": True, "path": "/reset_prefix_cache", "status": 200}
    assert doc["cache_reset"]["points"] == [{"level": "c1", **done}, {"level": "c2", **done}]
