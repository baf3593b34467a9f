"""Terminal cards (rich): the bench level table and the verification card.

Every figure says how it was measured: the table header names the statistic and unit, and the
footer names the clock, the N_out source and where the files are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bench_table", "open_loop_table", "print_limitations", "render_bench", "render_bench_notes",
           "structured_load_tables", "verdict_style"]

_STYLE = {"PASS": "bold green", "FAIL": "bold red", "UNPROVEN": "bold yellow", "NOT RUN": "bold magenta"}


def verdict_style(v: str | None) -> str:
    return _STYLE.get(v or "", "bold")


def print_limitations(console: Any, lines: Any, prefix: str = "limitation") -> None:
    """One ``<prefix>: <line>`` per limitation of a record (plain text: a limitation may hold brackets)."""
    for line in lines:
        console.print(f"{prefix}: {line}", markup=False, highlight=False)


def _f(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def bench_table(record: dict[str, Any]) -> Any:
    """A rich Table: one row per load level of a ``bench`` record."""
    from rich.table import Table

    levels = record["data"]["levels"]
    has_goodput = any("goodput" in v for v in levels.values())
    t = Table(title="bench serve — client-side, per level (ms unless stated)", title_justify="left")
    for col in ("level", "ok/total", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p50", "E2EL p50", "out tok/s", "req/s"):
        t.add_column(col, justify="right" if col != "level" else "left")
    if has_goodput:
        t.add_column("goodput req/s", justify="right")
    for label, v in levels.items():
        rq, th = v["requests"], v["throughput"]
        row = [label, f"{rq['completed']}/{rq['total']}", _f(v["ttft_ms"]["p50"]), _f(v["ttft_ms"]["p99"]),
               _f(v["tpot_ms"]["p50"]), _f(v["itl_ms"]["p50"]), _f(v["e2el_ms"]["p50"]),
               _f(th["output_throughput_tok_s"]), _f(th["request_throughput_req_s"], 2)]
        if has_goodput:
            row.append(_f((v.get("goodput") or {}).get("goodput_req_s"), 2))
        t.add_row(*row)
    return t


def _rate_cell(fig: dict[str, Any] | None) -> str:
    """``ok/judged rate [low–high]`` of one structured-load figure (``gates/judges/structured_load.py`` ``rate``), and
    its cut and errored replies when there are any."""
    if not fig or not fig.get("n"):
        return "—"
    extra = ", ".join(f"{k} {fig[k]}" for k in ("cut", "error") if fig.get(k))
    if not fig.get("judged"):
        return f"0 judged of {fig['n']}" + (f" ({extra})" if extra else "")
    lo, hi = fig["ci"]
    return f"{fig['ok']}/{fig['judged']} {fig['rate']:.0%} [{lo:.0%}–{hi:.0%}]" + (f" ({extra})" if extra else "")


def _failures(fig: dict[str, Any] | None, good: str) -> str:
    buckets = (fig or {}).get("buckets") or {}
    return ", ".join(f"{b} {n}" for b, n in buckets.items() if n and b not in (good, "cut", "error")) or "—"


def structured_load_tables(gate: dict[str, Any]) -> list[Any]:
    """Rich tables of the structured requests alone vs under load (``bench serve --structured``), one per part of a
    ``gates`` record's gate (its JSON form) that holds them: per level, the schema-valid and AST-correct rates with
    their Wilson 95% intervals, the AST failure buckets, and each level's verdict against the rates alone."""
    from rich.table import Table

    metrics = gate.get("metrics") or {}
    parts = [metrics] + [v for k, v in metrics.items() if k.startswith("part") and isinstance(v, dict)]
    out = []
    for part in parts:
        table = part.get("structured_load")
        if not isinstance(table, dict):
            continue
        t = Table(title=f"{gate.get('gate')} — structured requests alone vs under load (Wilson 95%)",
                  title_justify="left")
        for col in ("requests", "JSON schema-valid", "tool call AST-correct", "AST failures", "vs alone"):
            t.add_column(col, justify="left")
        for name, row in table.items():
            js, tool = row.get("json"), row.get("tool")
            verdicts = ", ".join(f"{w} {f['verdict']}" for w, f in (("json", js), ("tool", tool))
                                 if f and f.get("verdict"))
            t.add_row(name, _rate_cell(js), _rate_cell(tool), _failures(tool, "correct"), verdicts or "—")
        out.append(t)
    return out


def _sources(record: dict[str, Any]) -> str:
    srcs: dict[str, int] = {}
    for v in record["data"]["levels"].values():
        for k, n in v["n_out"]["sources"].items():
            srcs[k] = srcs.get(k, 0) + n
    return ", ".join(f"{k} ×{n}" for k, n in sorted(srcs.items())) or "none"


def open_loop_table(record: dict[str, Any]) -> Any | None:
    """Offered vs achieved rate and latencies from the schedule, for open-loop levels (None if there are none)."""
    from rich.table import Table

    rows = [(lbl, v) for lbl, v in record["data"]["levels"].items() if v["spec"]["mode"] == "open"]
    if not rows:
        return None
    t = Table(title="open loop — from the arrival schedule (no coordinated omission), ms", title_justify="left")
    for col in ("level", "offered req/s", "achieved req/s", "send lag p50", "send lag p99", "sched. TTFT p50",
                "sched. TTFT p99", "sched. E2EL p50"):
        t.add_column(col, justify="right" if col != "level" else "left")
    for lbl, v in rows:
        sp = v["spec"]
        offered = (f"{sp['ramp_up_strategy']} {_f(sp.get('ramp_up_start_rps'), 2)}→{_f(sp.get('ramp_up_end_rps'), 2)}"
                   if sp.get("ramp_up_strategy") else _f(sp["rate_req_s"], 2))
        if sp.get("session_start_rate_req_s") is not None:  # open-loop sessions (--rate-of): starts, then turns
            offered = (f"{_f(sp['session_start_rate_req_s'], 2)} sessions/s × {_f(sp['turns_per_session_mean'], 2)} "
                       f"turns = {_f(sp['offered_turn_rate_req_s'], 2)} (rate of {sp['rate_of']})")
        t.add_row(lbl, offered, _f(v["throughput"]["request_throughput_req_s"], 2),
                  _f(v["send_lag_ms"]["p50"]), _f(v["send_lag_ms"]["p99"]), _f(v["scheduled_ttft_ms"]["p50"]),
                  _f(v["scheduled_ttft_ms"]["p99"]), _f(v["scheduled_e2el_ms"]["p50"]))
    return t


def client_pace_table(record: dict[str, Any]) -> Any:
    """Per level: the client's own event-loop lag and send lateness against the limits it was judged by (None for
    a record without them)."""
    from rich.table import Table

    rows = [(lbl, v["client"]) for lbl, v in record["data"]["levels"].items() if v.get("client")]
    if not rows:
        return None
    t = Table(title="client self-check — event-loop lag (timer lateness, every 5 ms) and open-loop send lateness, ms; "
                    "a level the client paced is invalid; KiB/stream = client memory growth ÷ streams (a bound)",
              title_justify="left")
    for col in ("level", "processes", "loop lag p99 (worst)", "lag limit", "send late p99", "late limit",
                "KiB/stream", "valid"):
        t.add_column(col, justify="left" if col in ("level", "valid") else "right")
    for lbl, c in rows:
        late = c.get("send_late_ms") or {}
        valid = {True: "yes", False: "NO", None: "not judged"}[c.get("valid")]
        t.add_row(lbl, str(c.get("processes", "")), _f(c.get("loop_lag_p99_ms"), 2), _f(c.get("lag_limit_ms"), 1),
                  _f(late.get("p99"), 2), _f(c.get("late_limit_ms"), 1), _f(c.get("kib_per_stream"), 0), valid)
    return t


def render_bench_notes(console: Any, record: dict[str, Any]) -> None:
    """How the figures were measured, and the record's limitations."""
    eng = record["identity"]["engine"]
    n_min = min((v["requests"]["completed"] for v in record["data"]["levels"].values()), default=0)
    console.print(f"engine: {eng.get('engine')} {eng.get('version') or ''}  "
                  f"model: {record['identity']['model']['id']}  "
                  f"N_out from: {_sources(record)}", markup=False)
    console.print("TTFT = send → first token event; TPOT = (E2EL − TTFT)/(N_out − 1); ITL = gaps between token events; "
                  "clock: perf_counter_ns on the client. Definitions: the record's data.metrics_manifest."
                  + (f" Percentiles over as few as {n_min} requests: p99 is near the maximum." if n_min < 100 else ""),
                  markup=False, style="dim")
    for lim in record.get("limitations", []):
        console.print(f"note: {lim}", markup=False, style="yellow")
    for miss in record.get("missing", []):
        console.print(f"missing: {miss}", markup=False, style="yellow")


def shared_prefix_line(record: dict[str, Any]) -> str | None:
    """One line on a shared-prefix run (``data.shared_prefix``, bench/shared_prefix_judge.py); None for other runs."""
    sp = record["data"].get("shared_prefix")
    if not isinstance(sp, dict):
        return None
    first, later = sp["first"], sp["later"]

    def cached(side: dict[str, Any]) -> str:
        c = side["cached_tokens"]
        return "not reported" if not c["n"] else f"{_f(c['p50'], 0)}"

    ratio = sp.get("ttft_p50_ratio_later_over_first")
    return (f"shared prefix: {sp['groups']} group(s) × {sp['tokens']} tokens — TTFT p50 of each group's first request "
            f"{_f(first['ttft_ms']['p50'])} ms (n={first['completed']}), of later ones "
            f"{_f(later['ttft_ms']['p50'])} ms (n={later['completed']})"
            + (f", ratio {ratio:.2f}" if ratio is not None else "")
            + f"; server-reported cached prompt tokens p50: first {cached(first)}, later {cached(later)}")


def conversation_line(record: dict[str, Any]) -> str | None:
    """One line on a multi-turn run (``data.conversations``, bench/sessions_judge.py); None for other runs."""
    cv = record["data"].get("conversations")
    if not isinstance(cv, dict):
        return None
    s = cv["sessions"]
    ttft = ", ".join(f"{k}: {_f(v['ttft_ms']['p50'])}" for k, v in cv["by_turn"].items())
    cached = ", ".join(f"{k}: {_f(v['cached_tokens']['p50'], 0)}" for k, v in cv["by_turn"].items()
                       if v["cached_tokens"]["n"])
    per = (f"up to {cv['turns']} turns (ShareGPT's human turns, {s['turns_planned']} in all)"
           if cv.get("source") == "sharegpt" and "turns_planned" in s else f"{cv['turns']} turns")
    return (f"conversations: {s['started']} sessions × {per} ({s['completed']} completed, think time "
            f"{cv['think_time_s']:g} s) — TTFT p50 by turn, ms: {ttft}"
            + (f"; server-reported cached prompt tokens p50 by turn: {cached}" if cached else ""))


def render_bench(console: Any, record: dict[str, Any]) -> None:
    """Print the level tables and how the figures were measured."""
    console.print(bench_table(record))
    for extra in (open_loop_table(record), client_pace_table(record)):
        if extra is not None:
            console.print(extra)
    for line in (shared_prefix_line(record), conversation_line(record)):
        if line:
            console.print(line, markup=False)
    render_bench_notes(console, record)
    if record.get("verdict"):
        console.print(f"verdict: {record['verdict']} (the notes above say why)", markup=False,
                      style=verdict_style(record["verdict"]))
    console.print(f"record: {record['evidence_id']}   run dir: {record['data']['run_dir']}", markup=False)
