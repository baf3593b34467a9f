"""The server-telemetry chart of the bench report page: the engine's own metrics over the run's time.

Reads each level's ``outputs/<engine>/load-<level>/server_metrics.jsonl.gz`` (``rundir.TELEMETRY_FILE``, through
``RunDir.telemetry_lines``; the line
kinds are ``bench/telemetry.py``'s: ``header``, ``scrape`` with ``t_ns``/``t_unix_ns`` and parsed ``families``,
``no_telemetry``, ``summary``). Drawn, on the page's time axis (the scrape's ``t_ns`` is the reply files'
``sent_ns`` clock; ``t_unix_ns`` when the replies are on the wall clock of ``--workers``/``--ray``):

- requests running and waiting (server gauges: vLLM ``num_requests_running``/``num_requests_waiting``, llama-server
  ``requests_processing``/``requests_deferred``, SGLang ``num_running_reqs``/``num_queue_reqs``);
- generated tokens/s: the server's generated-token counter (the counters ``bench/telemetry_judge.py`` compares with
  the client's counts) differenced between consecutive good scrapes ÷ the time between them; a counter that went
  down (a restart) gives no point;
- KV-cache use (vLLM ``kv_cache_usage_perc``, SGLang ``token_usage``, llama-server ``kv_cache_usage_ratio``), as a
  fraction.

llama-server adds a request's tokens to its counter when the request ends, so its token rate comes in spikes (one
per finished request), not as a level line; vLLM counts per engine step.

A gauge is summed over its label sets at each scrape (as ``telemetry_judge.level_deltas`` does). With no file for
any level the chart says "no server telemetry recorded" and draws no axis; every figure here is the server's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.report.bench_charts import figure, fmt, level_colors, svg_of, table
from inferencekit.report.bench_data import BenchRun, num
from inferencekit.rundir import TELEMETRY_FILE

__all__ = ["CHART_ID", "GENERATED", "KV", "RUNNING", "WAITING", "level_series", "telemetry_chart"]

CHART_ID = "chart-server-telemetry"
# sample names, first present wins (vLLM, llama-server, SGLang)
RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")
KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio",
      "sglang:token_usage")
GENERATED = ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total", "sglang:generation_tokens_total")


def _value(families: Mapping[str, Any], names: Sequence[str]) -> tuple[str, float] | None:
    """``(sample name, value summed over its label sets)`` of the first of ``names`` present in a scrape."""
    for name in names:
        total, seen = 0.0, False
        for fam in families.values():
            samples = fam.get("samples") if isinstance(fam, dict) else None
            for s in samples if isinstance(samples, list) else []:
                if isinstance(s, list) and len(s) == 3 and s[0] == name and num(s[2]) is not None:
                    total += float(s[2])
                    seen = True
        if seen:
            return name, total
    return None


def level_series(lines: Sequence[Mapping[str, Any]], origin_ns: int, wall: bool) -> dict[str, Any]:
    """One level's series on the page's time axis (seconds from ``origin_ns``; ``wall``: use ``t_unix_ns``).

    Returns ``{"running", "waiting", "kv", "gen_rate": [(t_s, value)], "names": {series: sample name},
    "scrapes": n, "ok": n, "interval_s", "no_telemetry": reason | None}``; ``gen_rate`` points sit at the midpoint
    of the two scrapes they difference.
    """
    clock = "t_unix_ns" if wall else "t_ns"
    out: dict[str, Any] = {"running": [], "waiting": [], "kv": [], "gen_rate": [], "names": {}, "scrapes": 0,
                           "ok": 0, "interval_s": None, "no_telemetry": None}
    prev: tuple[float, float] | None = None
    for x in lines:
        kind = x.get("kind")
        if kind == "header":
            out["interval_s"] = num(x.get("interval_s"))
        elif kind == "no_telemetry":
            out["no_telemetry"] = str(x.get("reason"))
        elif kind == "scrape":
            out["scrapes"] += 1
            fams, t = x.get("families"), x.get(clock)
            if not isinstance(fams, dict) or not isinstance(t, int) or isinstance(t, bool):
                continue
            out["ok"] += 1
            ts = (t - origin_ns) / 1e9
            for key, names in (("running", RUNNING), ("waiting", WAITING), ("kv", KV)):
                got = _value(fams, names)
                if got is not None:
                    out["names"][key] = got[0]
                    out[key].append((ts, got[1]))
            gen = _value(fams, GENERATED)
            if gen is not None:
                out["names"]["gen_rate"] = gen[0]
                if prev is not None and ts > prev[0] and gen[1] >= prev[1]:
                    out["gen_rate"].append(((ts + prev[0]) / 2, (gen[1] - prev[1]) / (ts - prev[0])))
                prev = (ts, gen[1])
    return out


_PANELS = (("running", "requests running (solid)\nand waiting (dashed)"),
           ("gen_rate", "generated tok/s\n(server counter)"), ("kv", "KV cache use\n(fraction)"))


def telemetry_chart(run: BenchRun) -> str:
    """The ``<figure>`` of the server's telemetry over time, or the sentence saying none was recorded."""
    title = "Server telemetry over time."
    caption = ("What the server itself reported while the levels ran (its Prometheus /metrics, scraped by the client), "
               "as opposed to the client-side figures everywhere else on this page.")
    per_level: list[tuple[str, dict[str, Any] | None]] = []
    unreadable = set()
    for lv in run.levels:
        lines = run.run.telemetry_lines(run.engine, lv.label)
        if lines is None and run.run.telemetry_path(run.engine, lv.label).is_file():
            unreadable.add(lv.label)
        per_level.append((lv.label, None if lines is None else
                          level_series(lines, run.origin_ns or 0, run.wall_clock)))
    rows = []
    for label, s in per_level:
        if s is None:
            rows.append([label, "unreadable file" if label in unreadable else "no file", "—", "—", "—"])
        else:
            rows.append([label, f"{s['ok']} of {s['scrapes']}",
                         f"{fmt(s['interval_s'], 2)}" if s["interval_s"] is not None else "—",
                         ", ".join(f"{k}: {v}" for k, v in sorted(s["names"].items())) or "none of the known ones",
                         s["no_telemetry"] or "—"])
    tbl = table(["level", "good scrapes (n)", "interval (s)", "series drawn (sample names)", "no telemetry because"],
                rows)
    if unreadable and all(s is None for _, s in per_level):
        return figure(CHART_ID, title, None, caption, "not measured: the telemetry file of "
                      f"{', '.join(sorted(unreadable))} cannot be read (not gzip JSON lines), and no other level has "
                      "one.", tbl)
    if all(s is None for _, s in per_level):
        return figure(CHART_ID, title, None, caption,
                      f"no server telemetry recorded: no level of {run.engine} has a {TELEMETRY_FILE} (bench serve "
                      "scrapes the server's /metrics when it serves one).")
    reasons = sorted({s["no_telemetry"] for _, s in per_level if s is not None and s["no_telemetry"]})
    if reasons and all(s is None or (s["no_telemetry"] and not s["ok"]) for _, s in per_level):
        return figure(CHART_ID, title, None, caption, "no server telemetry recorded: the server answered no scrape "
                      f"of its /metrics ({'; '.join(reasons)}).", tbl)
    if run.clock != "common":
        return figure(CHART_ID, title, None, caption, "not drawn: the levels' replies are on different clocks, so the "
                      "scrapes cannot be placed on this page's time axis.", tbl)
    panels = [(key, what) for key, what in _PANELS
              if any(s is not None and s[key] for _, s in per_level)]
    if not panels:
        return figure(CHART_ID, title, None, caption, "not measured: the telemetry files hold no good scrape with a "
                      "known series (requests running/waiting, generated tokens, KV cache).", tbl)
    colors = level_colors(run)

    def draw(axes: list[Any]) -> None:
        for ax, (key, what) in zip(axes, panels):
            for label, s in per_level:
                if s is None:
                    continue
                color = colors[label][0]
                if s[key]:
                    ax.plot([t for t, _ in s[key]], [v for _, v in s[key]], color=color, marker=".", markersize=3,
                            linewidth=1.2, label=f"{label} (n={len(s[key])})")
                if key == "running" and s["waiting"]:
                    ax.plot([t for t, _ in s["waiting"]], [v for _, v in s["waiting"]], color=color,
                            linestyle="--", linewidth=1.0)
            ax.set_ylabel(what, fontsize=8)
            ax.set_ylim(bottom=0)
        axes[0].legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes[-1].set_xlabel("time (s since the run's first send, the client's clock at each scrape)")

    svg = svg_of(draw, CHART_ID, (10.0, 1.9 * len(panels) + 0.8), nrows=len(panels), sharex=True)
    return figure(CHART_ID, title, svg, caption + " n = good scrapes (for tok/s: consecutive pairs). A server that "
                  "counts a request's tokens when it ends (llama-server) shows its token rate as spikes.", extra=tbl)
