"""A bench serve run dir as one self-contained HTML page: what was measured, then a chart per question.

The page holds no reference to anything outside itself (inline style sheet, inline SVG from matplotlib, no
script). Sections, each a ``<figure class="ik-chart">`` with a stable id (``bench_charts.CHART_IDS``):

- per level, the CDFs of TTFT, ITL and E2EL (``chart-cdf-ttft``, ``chart-cdf-itl``, ``chart-cdf-e2el``);
- each request's TTFT and E2EL against its send time (``chart-latency-time``);
- output throughput against TTFT p50/p99 across levels with the Pareto front (``chart-throughput-latency``);
- the sweep's points, targets and boundary when the record has ``data.sweep`` (``chart-sweep``);
- the client's self-check per level (``chart-client-check``);
- the server's telemetry over time (``chart-server-telemetry``).

Every value taken from the run dir is HTML-escaped; every figure printed names its unit and its n; a chart with
nothing to draw says what is missing.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from inferencekit.report.bench_charts import (
    cdf_chart,
    client_chart,
    fmt,
    latency_time_chart,
    sweep_chart,
    table,
    throughput_latency_chart,
)
from inferencekit.report.bench_data import BenchRun, load_bench_run, num, sub
from inferencekit.report.bench_telemetry import telemetry_chart
from inferencekit.rundir import write_bytes

__all__ = ["bench_page", "describe_level", "write_bench_html"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1150px;color:#1b1b1b;
padding:0 1em;background:#fff}
h1{font-size:1.4em;margin-bottom:.2em}
h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f6f6f6}
th:first-child,td:first-child{text-align:left}
table.meta td{text-align:left}
table.meta td.k{font-weight:600;background:#f6f6f6}
p.note,figcaption{color:#444;font-size:.92em;margin:.3em 0}
p.measured{background:#eef4fb;border-left:4px solid #4477aa;padding:.5em .8em}
p.missing{color:#b00020;font-weight:600;border:1px dashed #b00020;padding:1em;background:#fff5f5}
div.integrity{color:#b00020;border:2px solid #b00020;padding:.5em 1em;margin:1em 0}
ul.lim{color:#7a4d00;font-size:.92em}
.v-PASS{color:#1a7f37}.v-FAIL{color:#b00020}.v-UNPROVEN{color:#9a6700}
figure{margin:1em 0}
figure svg{max-width:100%;height:auto}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def describe_level(spec: Any) -> str:
    """A level's load in words from its record ``spec`` (``LevelSpec.describe()``): ``closed loop, 4 streams`` or
    ``open loop, 2 req/s poisson (cap 8)``."""
    if not isinstance(spec, dict):
        return "—"
    if spec.get("mode") == "closed":
        return f"closed loop, {spec.get('concurrency')} stream(s)"
    if spec.get("mode") == "open":
        cap = spec.get("max_concurrency")
        return (f"open loop, {fmt(num(spec.get('rate_req_s')), 2)} req/s {spec.get('arrival', '')}"
                + (f" (burstiness {spec.get('burstiness')})" if spec.get("arrival") == "gamma" else "")
                + (f" (cap {cap} in flight)" if cap else ""))
    return _e(spec.get("mode", "—"))


def _header(run: BenchRun) -> str:
    rec = run.record
    ident = sub(rec, "identity")
    eng = sub(ident, "engine")
    wl = sub(ident, "workload")
    host = sub(ident, "host")
    tool = sub(rec, "tool")
    total = sum(len(lv.requests) for lv in run.levels)
    ok = sum(len(lv.completed) for lv in run.levels)
    pairs = [
        ("engine", f"{eng.get('engine', '—')} {eng.get('version') or ''}".strip()),
        ("model", sub(ident, "model").get("id", "—")),
        ("dataset", wl.get("dataset", "—")),
        ("levels", "; ".join(f"{lv.label}: {describe_level(lv.summary.get('spec'))}" for lv in run.levels)),
        ("requests", f"{ok} completed of {total} sent in the load levels (reply files)"),
        ("per level", f"{wl.get('num_prompts')} prompts" if wl.get("num_prompts") else
         f"{wl.get('duration_s')} s of sending" if wl.get("duration_s") else "—"),
        ("max tokens", str(wl.get("max_tokens") if wl.get("max_tokens") is not None else "the prompt's own")
         + (" (ignore_eos)" if wl.get("ignore_eos") else "")),
        ("temperature", str(wl.get("temperature", "—"))),
        ("host", f"{host.get('os', '')} {host.get('machine', '')}, {host.get('cpus', '?')} CPUs".strip()),
        ("recorded", str(rec.get("created_at", "—"))),
        ("record", str(rec.get("evidence_id", "—"))),
        ("tool", f"{tool.get('name', '')} {tool.get('version', '')} @ {str(tool.get('git_revision') or '?')[:10]}"
         + (" (dirty tree)" if tool.get("git_dirty") else "")),
    ]
    rows = []
    for i in range(0, len(pairs), 2):
        rows.append("<tr>" + "".join(f'<td class="k">{_e(k)}</td><td>{_e(v)}</td>' for k, v in pairs[i:i + 2])
                    + "</tr>")
    return '<table class="meta" id="run-header"><tbody>\n' + "\n".join(rows) + "\n</tbody></table>"


def _measured(run: BenchRun) -> str:
    man = sub(run.data, "metrics_manifest")
    metrics = sub(man, "metrics")
    defs = "; ".join(f"{name.removesuffix('_ms').upper()} = {metrics[key]['formula']}"
                     for key, name in (("ttft_ms", "ttft_ms"), ("itl_ms", "itl_ms"), ("e2el_ms", "e2el_ms"))
                     if isinstance(metrics.get(key), dict) and metrics[key].get("formula"))
    n_min = min((len(lv.completed) for lv in run.levels), default=0)
    return (f'<p class="measured" id="measured">Every figure on this page is measured on the client: '
            f"{_e(man.get('clock', 'client clock (the record names none)'))}. Statistics: "
            f"{_e(man.get('statistics', '—'))}. Definitions ({_e(man.get('version', 'no manifest in the record'))}, "
            f"the record's data.metrics_manifest): {_e(defs or '—')}."
            + (f" The smallest level has {n_min} completed request(s): a p99 over fewer than 100 values is close "
               "to the maximum." if n_min < 100 else "")
            + _intervals(man)
            + " The server's own telemetry, where drawn, is labelled as the server's.</p>")


def _intervals(man: dict[str, Any]) -> str:
    """The manifest's interval methods in one sentence (manifest v2 ``intervals``), or "" for an older record."""
    iv = sub(man, "intervals")
    parts = [f"{what}: {sub(iv, key).get('method')} (needs {sub(iv, key).get('needs', '—')})"
             for key, what in (("within_level", "within a level"), ("across_repeats", "across repeats"))
             if sub(iv, key).get("method")]
    return (" 95% intervals — " + _e("; ".join(parts)) + ".") if parts else ""


def _pct(summary: dict[str, Any], metric: str) -> str:
    """``p50 / p99 (n=…)`` of one metric's record summary, or ``not measured (n=0)``."""
    d = sub(summary, metric)
    if not d.get("n"):
        return "not measured (n=0)"
    return f"{fmt(num(d.get('p50')))} / {fmt(num(d.get('p99')))} (n={d.get('n')})"


def _levels_table(run: BenchRun) -> str:
    rows = []
    slos = set()
    for lv in run.levels:
        s = lv.summary
        rq = sub(s, "requests")
        th = sub(s, "throughput")


        g = sub(s, "goodput") or None
        if g is not None:
            slos.add(", ".join(f"{k} ≤ {v} ms" for k, v in sorted((g.get("slo") or {}).items())))
        rows.append([lv.label, describe_level(s.get("spec")), f"{rq.get('completed', '—')}/{rq.get('total', '—')}",
                     _pct(s, "ttft_ms"), _pct(s, "itl_ms"), _pct(s, "e2el_ms"),
                     fmt(num(th.get("output_throughput_tok_s"))), fmt(num(th.get("request_throughput_req_s")), 2),
                     fmt(num(s.get("window_s")), 1),
                     "—" if g is None else f"{fmt(num(g.get('goodput_req_s')), 2)} ({g.get('good_requests')} of "
                                           f"{rq.get('total', '?')} met the SLO)"])
    note = (f'<p class="note">Goodput SLO: {_e("; ".join(sorted(slos)))} (per request, --slo); failed requests '
            "count as missing it.</p>") if slos else ""
    return table(["level", "load", "completed/sent", "TTFT p50 / p99 (ms)", "ITL p50 / p99 (ms, n gaps)",
                  "E2EL p50 / p99 (ms)", "output tok/s", "req/s", "window (s)", "goodput req/s"], rows,
                 cls="levels") + note


def _list(title: str, items: Any) -> str:
    if not isinstance(items, list) or not items:
        return ""
    return f"<h2>{_e(title)}</h2><ul class=\"lim\">" + "".join(f"<li>{_e(x)}</li>" for x in items) + "</ul>"


def bench_page(run: BenchRun) -> str:
    """The page of a bench run (``load_bench_run``) as a string."""
    ident = sub(run.record, "identity")
    eng = sub(ident, "engine")
    model = sub(ident, "model").get("id", "?")
    title = f"bench serve — {eng.get('engine', '?')} {eng.get('version') or ''} · {model}"
    verdict = run.record.get("verdict")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title>", f"<style>{_CSS}</style>", "</head><body>",
             f"<h1>{_e(title)}</h1>", _header(run), _measured(run)]
    if run.integrity:
        parts.append('<div class="integrity" id="integrity"><b>The run dir no longer matches its record:</b><ul>'
                     + "".join(f"<li>{_e(x)}</li>" for x in run.integrity[:20])
                     + (f"<li>… {len(run.integrity) - 20} more</li>" if len(run.integrity) > 20 else "")
                     + "</ul>the charts below are drawn from the files as they are now.</div>")
    if verdict:
        parts.append(f'<p class="note">record verdict: <b class="v-{_e(verdict)}">{_e(verdict)}</b> (the '
                     "limitations below say why)</p>")
    parts += ["<h2>Levels</h2>", _levels_table(run),
              '<section id="distributions"><h2>Distributions per level</h2>',
              cdf_chart(run, "ttft_ms"), cdf_chart(run, "itl_ms"), cdf_chart(run, "e2el_ms"), "</section>",
              '<section id="over-time"><h2>Latency over the run</h2>', latency_time_chart(run), "</section>",
              '<section id="throughput-latency"><h2>Throughput vs latency</h2>', throughput_latency_chart(run),
              "</section>",
              '<section id="sweep"><h2>Sweep</h2>', sweep_chart(run), "</section>",
              '<section id="client"><h2>Client self-check</h2>', client_chart(run), "</section>",
              '<section id="telemetry"><h2>Server telemetry</h2>', telemetry_chart(run), "</section>",
              _list("Limitations (from the record)", run.record.get("limitations")),
              _list("Missing (from the record)", run.record.get("missing")),
              f'<p class="note">run dir: {_e(run.path)}; engine label: {_e(run.engine)}.</p>',
              "</body></html>\n"]
    return "\n".join(p for p in parts if p)


def write_bench_html(run_dir: str | Path, path: str | Path) -> Path:
    """Read the bench run at ``run_dir`` and write its page to ``path`` atomically (UTF-8); returns ``path``.

    Raises:
        OpError: ``run_dir`` holds no finished bench run (``load_bench_run``).
        OSError: the page cannot be written.
    """
    page = bench_page(load_bench_run(run_dir))
    out = Path(path)
    write_bytes(out, page.encode("utf-8"))
    return out
