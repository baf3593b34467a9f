"""The bench report page (`inferencekit report RUN_DIR --html`) on a recorded bench serve run dir.

Figures are checked against the recorded files themselves (the record's p50s, numpy over the reply files) and
against hand-computed values for the pure helpers; the browser check is test_bench_html_browser.py.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from inferencekit.errors import OpError
from inferencekit.report.bench_charts import CHART_IDS
from inferencekit.report.bench_data import ecdf, load_bench_run, pareto_front, thin
from inferencekit.report.bench_html import bench_page, describe_level, write_bench_html
from inferencekit.report.bench_telemetry import level_series
from tests.cli_run import run_cli
from tests.unit.report.bench_runs import (
    BENCH_RUN,
    SWEEP_RUN,
    TELEMETRY,
    TELEMETRY_FILE,
    TELEMETRY_FIRST_SEND_NS,
    copy_run,
    record_path,
    rewrite_record,
    sweep_copy,
)


def figure_of(page: str, chart_id: str) -> str:
    """The ``<figure>`` element with ``chart_id``, as text."""
    start = page.index(f'<figure id="{chart_id}"')
    return page[start:page.index("</figure>", start)]


@pytest.fixture(scope="module")
def plain() -> str:
    return bench_page(load_bench_run(BENCH_RUN))


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_copy(tmp_path_factory.mktemp("sweep") / "run", telemetry=True)


@pytest.fixture(scope="module")
def swept(sweep_dir: Path) -> str:
    return bench_page(load_bench_run(sweep_dir))


# ------------------------------------------------------------------------------------------ reading the run dir

def test_the_run_is_read_level_by_level_from_its_files():
    run = load_bench_run(BENCH_RUN)
    assert run.engine == "llama-cpp-python" and run.clock == "common" and run.integrity == []
    assert [(lv.label, len(lv.requests), len(lv.completed), lv.lag_samples) for lv in run.levels] == [
        ("c1", 6, 6, 4244), ("c2", 6, 6, 4467), ("r2", 6, 6, 4447)]  # client.json's loop_lag_ms n
    sends = [r.send_s for lv in run.levels for r in lv.requests]
    assert sends[0] == 0.0 and sends == sorted(sends)  # levels ran one after another, on one clock
    rec = json.loads(record_path(BENCH_RUN).read_text())
    for lv in run.levels:
        s = rec["data"]["levels"][lv.label]
        ttft = [r.ttft_ms for r in lv.completed]
        itl = [g for r in lv.completed for g in r.itl_ms]
        assert float(np.percentile(ttft, 50)) == pytest.approx(s["ttft_ms"]["p50"], rel=1e-12)
        assert len(itl) == s["itl_ms"]["n"] and float(np.percentile(itl, 99)) == pytest.approx(s["itl_ms"]["p99"])
    assert [len(r.itl_ms) for r in run.levels[0].requests] == [15, 15, 15, 15, 15, 15]  # 16 tokens, 15 gaps


def test_a_run_dir_without_a_bench_record_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"operation": "bench.serve"}))
    with pytest.raises(OpError, match="did not finish"):
        load_bench_run(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"operation": "gates.run"}))
    with pytest.raises(OpError, match="not a bench serve run dir"):
        load_bench_run(tmp_path)


# ------------------------------------------------------------------------------------------------ pure helpers

def test_ecdf_steps_and_thinning():
    assert ecdf([3.0, 1.0, 2.0]) == ([1.0, 2.0, 3.0], [1 / 3, 2 / 3, 1.0], False)
    assert ecdf([]) == ([], [], False)
    values = [float(i) for i in range(1000)]
    xs, ys, thinned = ecdf(values, max_steps=400)
    assert thinned and len(xs) == 400 and xs[0] == 0.0 and xs[-1] == 999.0 and ys[-1] == 1.0
    for x, y in zip(xs, ys):  # each kept point is exact: F(x) = (rank + 1) / n
        assert y == (x + 1) / 1000
    assert max(b - a for a, b in zip(ys, ys[1:])) <= 1 / 400 + 1 / 1000


def test_pareto_front_keeps_the_non_dominated_points():
    pts = [(100.0, 10.0), (200.0, 20.0), (150.0, 5.0), (300.0, 20.0), (50.0, 1.0)]
    # (150, 5) is beaten by (100, 10) on both; (300, 20) ties (200, 20) on throughput at a higher latency
    assert pareto_front(pts) == [4, 0, 1]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points do not dominate each other
    assert pareto_front([]) == []


def test_thin_and_describe_level():
    assert (thin(10, 4000), thin(8001, 4000), thin(5, 0)) == (1, 3, 1)
    assert describe_level({"mode": "closed", "concurrency": 4}) == "closed loop, 4 stream(s)"
    assert describe_level({"mode": "open", "rate_req_s": 2.0, "arrival": "gamma", "burstiness": 0.5,
                           "max_concurrency": 8}) == "open loop, 2.00 req/s gamma (burstiness 0.5) (cap 8 in flight)"
    assert describe_level(None) == "—"


# ---------------------------------------------------------------------------------------------------- the page

def test_every_chart_is_on_the_page_once_and_nothing_is_fetched(plain):
    for chart_id in CHART_IDS:
        assert plain.count(f'id="{chart_id}"') == 1, chart_id
    assert "<script" not in plain and "<img" not in plain and "<link" not in plain
    assert set(re.findall(r'(?:href|src)="([^"]*)"', plain)) <= {h for h in re.findall(r'href="(#[^"]*)"', plain)}
    assert plain.count("<svg") == 6  # 3 CDFs, latency over time, throughput-latency, client: no sweep, no telemetry


def test_the_header_says_what_was_measured_and_how(plain):
    head = plain[:plain.index('id="distributions"')]
    for s in ("llama-cpp-python 0.3.36", "SmolLM2-135M-Instruct-Q4_1", "<td>dev</td>",
              "c1: closed loop, 1 stream(s); c2: closed loop, 2 stream(s); r2: open loop, 2.00 req/s poisson",
              "18 completed of 18 sent", "6 prompts", "Every figure on this page is measured on the client",
              "inferencekit.bench.metrics.v1", "time.perf_counter_ns()", "a p99 over fewer than 100 values"):
        assert s in head, s
    # the level table: each percentile with its n
    assert "954.7 / 7,051.8 (n=6)" in head and "57.3 / 107.3 (n=90)" in head
    assert "Goodput SLO: tpot_ms ≤ 50.0 ms, ttft_ms ≤ 500.0 ms" in head and "0.00 (0 of 6 met the SLO)" in head


def test_cdf_legends_give_n_and_the_records_percentiles(plain):
    ttft = figure_of(plain, "chart-cdf-ttft")
    assert "c1 (n=6 requests; p50 954.7 ms, p99 7,051.8 ms)" in ttft
    assert "r2 (n=6 requests; p50 14,826.5 ms, p99 20,910.5 ms)" in ttft
    assert "TTFT (ms), log scale" in ttft  # 250 ms to 21 s: more than 20×
    itl = figure_of(plain, "chart-cdf-itl")
    assert "c1 (n=90 gaps; p50 57.3 ms" in itl and "c2 (n=87 gaps" in itl and "r2 (n=80 gaps" in itl
    assert "not measured" not in itl


def test_throughput_latency_marks_the_pareto_front(plain):
    fig = figure_of(plain, "chart-throughput-latency")
    rows = re.findall(r"<tr><td>(c1|c2|r2)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>"
                      r"<td>([^<]*)</td>", fig)
    # c1 has both the lowest TTFT and the highest tok/s (4.36 vs 4.05, 3.77): it alone is non-dominated; this record
    # predates the within-run intervals, so no TTFT has a CI
    assert rows == [("c1", "6 requests", "4.4 (no CI)", "954.7 (no CI)", "7,051.8 (no CI)", "p50, p99"),
                    ("c2", "6 requests", "4.1 (no CI)", "5,780.7 (no CI)", "10,105.9 (no CI)", "no"),
                    ("r2", "6 requests", "3.8 (no CI)", "14,826.5 (no CI)", "20,910.5 (no CI)", "no")]


def test_absent_parts_say_so_instead_of_drawing_an_axis(plain):
    sweep, tele = figure_of(plain, "chart-sweep"), figure_of(plain, "chart-server-telemetry")
    assert 'class="ik-chart not-measured"' in sweep and "<svg" not in sweep and "no sweep block" in sweep
    assert 'class="ik-chart not-measured"' in tele and "<svg" not in tele
    assert "no server telemetry recorded" in tele


def test_the_client_self_check_gives_each_limit_and_n(plain):
    fig = figure_of(plain, "chart-client-check")
    assert "<svg" in fig
    assert "<td>c1</td><td>1</td><td>4244</td><td>3.52</td><td>14.3</td><td>closed loop</td><td>—</td><td>valid" in fig
    assert "<td>r2</td><td>1</td><td>4447</td><td>3.65</td><td>13.0</td><td>0.57 (n=6)</td><td>50.0</td>" in fig


def test_the_sweep_chart_draws_points_targets_and_boundary(swept, sweep_dir):
    assert load_bench_run(sweep_dir).integrity == []
    fig = figure_of(swept, "chart-sweep")
    assert 'class="ik-chart"' in fig and fig.count("<svg") == 1
    assert "boundary: 1.00 streams [1.00, 2.00] (95% CI); monotone: yes" in fig
    assert ("<td>c1</td><td>1.00</td><td>1</td><td>6</td><td>7,051.8 (no CI)</td><td>83.0 [60.5, 84.3]</td>"
            "<td>meets (uncertain)</td><td>NOT RUN: this recording sent no known answers (--kat 0)</td>") in fig
    assert "<td>misses (uncertain)</td><td>FAIL: hand-written: 1 of 4 known answers wrong at this load</td>" in fig
    assert "limit 8,000.0" in fig and "limit 90.0" in fig  # the targets' limits in each panel's legend
    thr = figure_of(swept, "chart-throughput-latency")
    assert "<td>meets (uncertain)</td>" in thr and "<td>misses (uncertain)</td>" in thr and "Rings: sweep points" in thr
    assert swept.count("<svg") == 8  # and the server telemetry


def plain_page_head() -> str:
    page = bench_page(load_bench_run(BENCH_RUN))
    return page[:page.index('id="distributions"')]


def test_a_recorded_bench_sweep_is_drawn_from_its_own_document():
    run = load_bench_run(SWEEP_RUN)
    assert run.integrity == [] and [lv.label for lv in run.levels] == ["c1", "c2", "c4"]
    page = bench_page(run)
    fig = figure_of(page, "chart-sweep")
    assert 'class="ik-chart"' in fig and fig.count("<svg") == 1
    assert ("boundary: 1.00 streams (no CI); monotone: yes; held when run again: yes (meets the SLO at 1 streams, "
            "misses it at 2 streams)") in fig
    # each point's TTFT p50 is its level's: numpy over the level's reply files (4 requests: no interval)
    for lv, word in zip(run.levels, ("meets (uncertain)", "misses (uncertain)", "misses (uncertain)")):
        p50 = float(np.percentile([r.ttft_ms for r in lv.completed], 50))
        value = {"c1": 1, "c2": 2, "c4": 4}[lv.label]
        assert (f"<td>{lv.label}</td><td>{value:.2f}</td><td>{value - 1 if value < 4 else 2}</td><td>4</td>"
                f"<td>{p50:,.1f} (no CI)</td><td>{word}</td><td>NOT RUN: no known answers were sent (--kat 0)</td>"
                ) in fig
    assert "limit 2,500.0" in fig and "boundary 1.00" in fig
    head = page[:page.index('id="distributions"')]
    assert "inferencekit.bench.metrics.v2" in head
    assert "95% intervals — within a level: order-statistic interval" in head
    assert "95% intervals" not in plain_page_head()  # the older record's manifest names no interval method
    thr = figure_of(page, "chart-throughput-latency")
    assert "Rings: sweep points" in thr and "<td>meets (uncertain)</td>" in thr


def test_the_page_is_the_same_bytes_each_time(sweep_dir, swept):
    assert bench_page(load_bench_run(sweep_dir)) == swept


def test_a_level_with_no_completed_request_is_named_not_drawn(tmp_path):
    run_dir = copy_run(tmp_path / "run")
    for p in sorted((run_dir / "outputs" / "llama-cpp-python" / "load-c2").glob("*/*.json")):
        r = json.loads(p.read_text())
        r.update(status=500, error="HTTP 500: injected by the test")
        p.write_text(json.dumps(r))
    run = load_bench_run(run_dir)
    assert any("artifact changed" in x for x in run.integrity)
    page = bench_page(run)
    assert 'id="integrity"' in page and "no longer matches its record" in page
    ttft = figure_of(page, "chart-cdf-ttft")
    assert "not measured at c2 (0 of 6 requests completed)" in ttft
    assert "c1 (n=6 requests" in ttft and "c2 (n=" not in ttft
    assert "the reply files differ from the record (c2: record n=6, files n=0)" in ttft
    assert "6 failed request(s): red crosses" in figure_of(page, "chart-latency-time")


def test_levels_on_different_clocks_are_laid_end_to_end(tmp_path):
    """A level whose replies carry clock_offset_ns (--workers) is on the wall clock, the others on perf_counter: the
    page cannot put them on one axis, so each level starts 1 s after the previous one ended, and says so."""
    run_dir = copy_run(tmp_path / "run")
    for p in sorted((run_dir / "outputs" / "llama-cpp-python" / "load-c2").glob("*/*.json")):
        r = json.loads(p.read_text())
        r["clock_offset_ns"] = 1_796_000_000_000_000_000
        p.write_text(json.dumps(r))
    run = load_bench_run(run_dir)
    assert run.clock == "per-level" and run.origin_ns is None
    starts = [min(r.send_s for r in lv.requests) for lv in run.levels]
    assert starts[0] == 0.0 and starts[0] < starts[1] < starts[2]
    c1_end = max(r.send_s + r.e2el_ms / 1000 for r in run.levels[0].requests)
    assert starts[1] == pytest.approx(c1_end + 1.0, abs=0.05)  # the last event ends a little after E2EL
    fig = figure_of(bench_page(run), "chart-latency-time")
    assert "gaps between levels are not real" in fig and "levels laid end to end" in fig


def test_a_run_with_no_completed_request_draws_no_empty_axes(tmp_path):
    run_dir = copy_run(tmp_path / "run")
    for p in sorted((run_dir / "outputs").glob("*/load-*/*/*.json")):
        p.write_text(json.dumps({"status": 0, "error": "connection refused", "sent_ns": 1}))
    page = bench_page(load_bench_run(run_dir))
    for chart_id, why in (("chart-cdf-ttft", "no level has any TTFT value"), ("chart-cdf-itl", "no level has any ITL"),
                          ("chart-latency-time", "no request has both a send time and a TTFT or E2EL")):
        fig = figure_of(page, chart_id)
        assert "not-measured" in fig and "<svg" not in fig and why in fig, chart_id


# ------------------------------------------------------------ what newer records add: steady windows, repeats

def _replies(run_dir: Path, label: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob(f"outputs/*/load-{label}/*/*.json"))]


def test_steady_windows_and_over_saturation_from_the_records_levels(tmp_path):
    """The fixture's record predates the steady-state window: here bench/steady.py itself computes each level's
    window and flag from the recorded replies, as bench serve now records them, and the page shows them."""
    from inferencekit.bench.steady import over_saturation, steady_window

    run_dir = copy_run(tmp_path / "run")
    got = {}

    def change(rec: dict) -> None:
        for label, lv in rec["data"]["levels"].items():
            replies = _replies(run_dir, label)
            w = steady_window(replies, open_loop=lv["spec"]["mode"] == "open")
            lv["steady_state"] = {"window": w.describe(), "ttft_ms": {"n": 0}}
            lv["over_saturation"] = over_saturation(replies, w, open_loop=lv["spec"]["mode"] == "open")
            got[label] = w.describe()

    rewrite_record(run_dir, change)
    page = bench_page(load_bench_run(run_dir))
    fig = figure_of(page, "chart-latency-time")
    assert "Shaded: each level" in fig
    w = got["c1"]
    assert (f"<tr><td>c1</td><td>{w['start_s']:,.2f} – {w['end_s']:,.2f}</td><td>{w['requests']['sent']} / "
            f"{w['requests']['measured']} / {w['requests']['finished']}</td><td>not measured (n=0)</td>"
            "<td>not judged: closed loop") in fig
    assert "<td>r2</td>" in fig and "not judged: 6 completed requests with a TTFT: fewer than 10" in fig
    assert "Shaded" not in figure_of(bench_page(load_bench_run(BENCH_RUN)), "chart-latency-time")  # older record


def test_load_points_over_repeats_are_drawn_as_means_with_their_interval(tmp_path):
    """bench/repeats.py's point summaries, as a --repeats 2 run records them; here c1 and c2 are relabelled as two
    repeats of one point (hand-edited specs) to give a point with K = 2."""
    from inferencekit.bench.repeats import point_summaries

    run_dir = copy_run(tmp_path / "run")
    out = {}

    def change(rec: dict) -> None:
        levels = rec["data"]["levels"]
        for i, label in enumerate(("c1", "c2")):
            levels[label]["spec"] = {**levels[label]["spec"], "point": "c", "repeat": i}
        rec["data"]["points"] = out["points"] = point_summaries(levels)

    rewrite_record(run_dir, change)
    thr = out["points"]["c"]["figures"]["output_throughput_tok_s"]
    assert out["points"]["c"]["repeats"] == 2 and thr["ci95"] is not None
    assert thr["mean"] == pytest.approx((4.364050891540033 + 4.053609793263922) / 2)
    fig = figure_of(bench_page(load_bench_run(run_dir)), "chart-throughput-latency")
    assert "One mark per load point" in fig and "Student t 95% CI" in fig
    assert (f"<tr><td>c</td><td>2 repeats</td><td>{thr['mean']:,.1f} [{thr['ci95'][0]:,.1f}, "
            f"{thr['ci95'][1]:,.1f}]</td>") in fig
    assert "<tr><td>r2</td><td>1 repeats</td><td>3.8 (no CI)</td>" in fig


# ---------------------------------------------------------------------------------------------- server telemetry

@pytest.mark.parametrize(("level", "scrapes", "running_max"), [("c1", 71, 1.0), ("c2", 97, 2.0)])
def test_level_series_of_recorded_llama_server_telemetry(level, scrapes, running_max):
    raw = gzip.decompress((TELEMETRY / f"{level}.{TELEMETRY_FILE}").read_bytes())
    lines = [json.loads(x) for x in raw.splitlines()]
    s = level_series(lines, TELEMETRY_FIRST_SEND_NS[level], wall=False)
    assert (s["scrapes"], s["ok"], s["interval_s"], s["no_telemetry"]) == (scrapes, scrapes, 0.5, None)
    assert s["names"] == {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred",
                          "gen_rate": "llamacpp:tokens_predicted_total"}
    assert s["kv"] == [] and max(v for _, v in s["running"]) == running_max  # --parallel 2: c2 kept both slots busy
    assert {v for _, v in s["waiting"]} == {0.0}
    assert s["running"][0][0] < 0 < s["running"][1][0]  # the first scrape is taken before the level's first send
    # the rate points integrate back to the counter's delta: 6 requests × 16 tokens
    times = [t for t, _ in s["running"]]
    rate_dt = sum(r * (b - a) for (a, b), (_, r) in zip(zip(times, times[1:]), s["gen_rate"]))
    assert len(s["gen_rate"]) == scrapes - 1 and rate_dt == pytest.approx(96.0, abs=1e-9)


def test_a_damaged_telemetry_file_is_named_not_drawn(tmp_path):
    run_dir = copy_run(tmp_path / "run")
    (run_dir / "outputs" / "llama-cpp-python" / "load-c1" / TELEMETRY_FILE).write_bytes(b"not gzip")
    fig = figure_of(bench_page(load_bench_run(run_dir)), "chart-server-telemetry")
    assert "not-measured" in fig and "cannot be read" in fig
    assert "<td>c1</td><td>unreadable file</td>" in fig and "<td>c2</td><td>no file</td>" in fig


def test_the_telemetry_chart_draws_the_recorded_scrapes(swept):
    fig = figure_of(swept, "chart-server-telemetry")
    assert 'class="ik-chart"' in fig and fig.count("<svg") == 1
    assert "<td>c1</td><td>71 of 71</td><td>0.50</td>" in fig and "<td>c2</td><td>97 of 97</td>" in fig
    assert "<td>r2</td><td>no file</td>" in fig
    assert "c1 (n=71)" in fig and "c2 (n=97)" in fig and "generated tok/s" in fig


# ------------------------------------------------------------------------------------------------- the command

@pytest.fixture
def report_op() -> None:
    import inferencekit.commands  # noqa: F401


def test_report_html_writes_the_page(report_op, tmp_path):
    page = tmp_path / "out" / "bench.html"
    code, doc = run_cli(["report", str(BENCH_RUN), "--html", str(page)])
    assert code == 0, doc
    assert doc["kind"] == "bench" and doc["html"] == str(page) and doc["levels"] == ["c1", "c2", "r2"]
    assert doc["integrity"] == "intact" and doc["record"] == record_path(BENCH_RUN).stem
    assert page.read_text(encoding="utf-8") == bench_page(load_bench_run(BENCH_RUN))
    code, doc = run_cli(["report", str(BENCH_RUN), "--output", str(tmp_path / "o.html")])
    assert code == 0 and (tmp_path / "o.html").is_file()
    code, doc = run_cli(["report", str(BENCH_RUN)])
    assert code == 0 and doc["html"] is None


def test_report_html_alone_writes_beside_the_run(report_op, tmp_path):
    run_dir = copy_run(tmp_path / "run")
    code, doc = run_cli(["report", str(run_dir), "--html"])
    assert code == 0 and doc["html"] == str(run_dir / "report.html") and (run_dir / "report.html").is_file()


@pytest.mark.parametrize(("setup", "msg"), [
    (lambda d: None, "holds neither an appliance receipt"),
    (lambda d: (d / "run.json").write_text('{"operation": "audit.equivalence"}'), "its operation is audit.equivalence"),
    (lambda d: (d / "run.json").write_text('{"operation": "bench.serve"}'), "did not finish"),
])
def test_report_refuses_a_dir_with_nothing_to_report(report_op, tmp_path, setup, msg):
    setup(tmp_path)
    code, doc = run_cli(["report", str(tmp_path), "--html", str(tmp_path / "x.html")])
    assert code == 2 and msg in doc["error"]
    assert not (tmp_path / "x.html").exists()


def test_report_refuses_two_different_pages(report_op, tmp_path):
    code, doc = run_cli(["report", str(BENCH_RUN), "--html", str(tmp_path / "a.html"), "--output",
                         str(tmp_path / "b.html")])
    assert code == 2 and "two different pages" in doc["error"]


def test_write_bench_html(tmp_path):
    out = write_bench_html(BENCH_RUN, tmp_path / "p.html")
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
