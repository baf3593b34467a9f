"""The charts of the bench report page, each one function from a ``BenchRun`` to an HTML ``<figure>``.

Every figure has a stable ``id`` (``CHART_IDS``) and the class ``ik-chart``, so a test finds it in the DOM; a
chart with nothing to draw is still there, with the class ``not-measured`` and a sentence saying what is
missing, never an empty axis. Charts are matplotlib figures (``matplotlib.figure.Figure``: no pyplot, no
backend state) written as inline vector SVG with a fixed hash salt per chart, so the same run gives the same
bytes and two charts' SVG ids never collide. Axis labels carry units; legends and tables carry each figure's n.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from typing import Any

from inferencekit.report.bench_data import BenchRun, Level, ecdf, num, pareto_front, sub, thin

__all__ = ["CHART_IDS", "cdf_chart", "client_chart", "figure", "fmt", "latency_time_chart", "level_colors", "svg_of",
           "sweep_chart", "table", "throughput_latency_chart"]

# Paul Tol's "bright" qualitative scheme (colour-blind safe), then the same hues dashed for levels 8-14, …
_PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")
_STYLES = ("-", "--", ":", "-.")
_PASS, _FAIL, _UNKNOWN = "#1a7f37", "#b00020", "#8c8c8c"
MAX_POINTS = 4000  # per scatter panel; above it every k-th request is drawn and the caption says so

CHART_IDS = ("chart-cdf-ttft", "chart-cdf-itl", "chart-cdf-e2el", "chart-latency-time", "chart-throughput-latency",
             "chart-sweep", "chart-client-check", "chart-server-telemetry")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _mpl(s: str) -> str:
    return s.replace("$", r"\$")  # a "$" would start mathtext


def fmt(x: float | None, digits: int = 1) -> str:
    """A figure for the page: thousands separated, ``—`` for None."""
    return "—" if x is None else f"{x:,.{digits}f}"


def level_colors(run: BenchRun) -> dict[str, tuple[str, str]]:
    """``label → (colour, line style)``, the same in every chart."""
    return {lv.label: (_PALETTE[i % len(_PALETTE)], _STYLES[(i // len(_PALETTE)) % len(_STYLES)])
            for i, lv in enumerate(run.levels)}


def svg_of(draw: Callable[[Any], None], salt: str, size: tuple[float, float], ncols: int = 1, nrows: int = 1,
         sharex: bool = False) -> str:
    """Draw one figure with ``draw(axes)`` (a list of Axes) and return it as an inline ``<svg>`` element."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"inferencekit-bench-{salt}",
                                "axes.spines.top": False, "axes.spines.right": False, "font.size": 9}):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False).ravel().tolist()
        draw(axes)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def figure(chart_id: str, title: str, svg: str | None, caption: str, missing: str | None = None,
           extra: str = "") -> str:
    """One chart's ``<figure>``: its SVG (or, when ``svg`` is None, the ``missing`` sentence), caption and any
    ``extra`` HTML (a table) after it."""
    cls = "ik-chart" if svg is not None else "ik-chart not-measured"
    body = svg if svg is not None else f'<p class="missing">{_e(missing or "not measured")}</p>'
    return (f'<figure id="{_e(chart_id)}" class="{cls}" data-chart="{_e(chart_id)}">'
            f"<figcaption><b>{_e(title)}</b> {_e(caption)}</figcaption>\n{body}\n{extra}</figure>")


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "figs") -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>'


def _log_if_wide(ax: Any, values: Sequence[float], axis: str = "x") -> bool:
    """Log scale on ``axis`` when the positive values span more than 20×; True when set."""
    pos = [v for v in values if v > 0]
    if len(pos) >= 2 and max(pos) / min(pos) > 20 and len(pos) == len(values):
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        return True
    return False


def _formula(run: BenchRun, metric: str) -> str:
    m = ((run.data.get("metrics_manifest") or {}).get("metrics") or {}).get(metric)
    return str(m.get("formula")) if isinstance(m, dict) and m.get("formula") else "(no definition in the record)"


# ------------------------------------------------------------------------------------------------- CDFs

_CDF = {"ttft_ms": ("TTFT", "chart-cdf-ttft"), "itl_ms": ("ITL", "chart-cdf-itl"),
        "e2el_ms": ("E2EL", "chart-cdf-e2el")}


def _values(level: Level, metric: str) -> list[float]:
    if metric == "itl_ms":
        return [g for r in level.completed for g in r.itl_ms]
    return [v for r in level.completed for v in [getattr(r, metric)] if v is not None]


def cdf_chart(run: BenchRun, metric: str) -> str:
    """Per level, the empirical CDF of ``metric`` (``ttft_ms``, ``itl_ms`` pooled gaps, ``e2el_ms``) from the reply
    files, one line per level; the legend gives each line's n and its p50/p99 as the record states them."""
    name, chart_id = _CDF[metric]
    colors = level_colors(run)
    series = [(lv, _values(lv, metric)) for lv in run.levels]
    drawn = [(lv, v) for lv, v in series if v]
    absent = [lv for lv, v in series if not v]
    unit = "gaps" if metric == "itl_ms" else "requests"
    notes = [f"{name} = {_formula(run, metric)}; measured on the client."]
    if absent:
        notes.append("not measured at " + ", ".join(
            f"{lv.label} ({len(lv.completed)} of {len(lv.requests)} requests completed)" for lv in absent) + ".")
    mismatch = [f"{lv.label}: record n={(lv.summary.get(metric) or {}).get('n')}, files n={len(v)}"
                for lv, v in series if isinstance((lv.summary.get(metric) or {}).get("n"), int)
                and lv.summary[metric]["n"] != len(v)]
    if mismatch:
        notes.append("the reply files differ from the record (" + "; ".join(mismatch) + "): the lines are the files'.")
    if not drawn:
        return figure(chart_id, f"{name} distribution per level.", None, " ".join(notes),
                      f"not measured: no level has any {name} value (no completed request with one).")
    thinned = []

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        for lv, vals in drawn:
            xs, ys, th = ecdf(vals)
            if th:
                thinned.append(lv.label)
            s = lv.summary.get(metric) or {}
            p50, p99 = num(s.get("p50")), num(s.get("p99"))
            color, style = colors[lv.label]
            ax.step(xs, ys, where="post", color=color, linestyle=style, linewidth=1.6,
                    label=_mpl(f"{lv.label} (n={len(vals)} {unit}; p50 {fmt(p50)} ms, p99 {fmt(p99)} ms)"))
        for q in (0.5, 0.99):
            ax.axhline(q, color="#999999", linewidth=0.6, linestyle=":")
        ax.set_ylim(0, 1.02)
        _log_if_wide(ax, [x for _, v in drawn for x in v])
        ax.set_xlabel(f"{name} (ms)" + (", log scale" if ax.get_xscale() == "log" else ""))
        ax.set_ylabel(f"fraction of {unit} ≤ x")
        ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    svg = svg_of(draw, chart_id, (10.0, 3.4))
    if thinned:
        notes.append(f"lines of {', '.join(thinned)} drawn through 400 evenly spaced ranks (within 1/400 of the "
                     "exact CDF).")
    notes.append("Dotted lines: F = 0.5 and 0.99; percentiles in the legend are the record's (numpy linear).")
    return figure(chart_id, f"{name} distribution per level (empirical CDF).", svg, " ".join(notes))


# ------------------------------------------------------------------------------------------ latency over time

def latency_time_chart(run: BenchRun) -> str:
    """Each request's TTFT (top) and E2EL (bottom) against its send time, coloured by level; failed requests as
    red crosses on the time axis."""
    chart_id = "chart-latency-time"
    colors = level_colors(run)
    timed = [(lv, [r for r in lv.requests if r.send_s is not None]) for lv in run.levels]
    n_points = sum(1 for _, rs in timed for r in rs if r.ttft_ms is not None or r.e2el_ms is not None)
    if not n_points:
        return figure(chart_id, "Latency over the run's time.", None, "",
                      "not measured: no request has both a send time and a TTFT or E2EL.")
    total = sum(len(rs) for _, rs in timed)
    stride = thin(total, MAX_POINTS)
    failed = [(lv, r) for lv, rs in timed for r in rs if not r.ok]
    caption = ("Each dot is one request at its send time (client clock; "
               + ("seconds since the run's first send" if run.clock == "common" else
                  "the levels' replies are on different clocks, so each level is drawn from where the previous one "
                  "ended, 1 s apart: gaps between levels are not real")
               + f"). {n_points} requests with a latency")
    caption += f", every {stride}th drawn." if stride > 1 else "."
    if failed:
        caption += f" {len(failed)} failed request(s): red crosses at the bottom of each panel (no latency)."

    windows = _steady_windows(run)
    if windows:
        caption += (" Shaded: each level's steady-state window (bench/steady.py: from the end of the first wave, or "
                    "the first end in open loop, to the last send); the table gives its figures' n and the "
                    "over-saturation test.")

    def draw(axes: list[Any]) -> None:
        for label, a, b in windows:
            for ax in axes:
                ax.axvspan(a, b, color=colors[label][0], alpha=0.10, linewidth=0)
        for ax, attr, name in ((axes[0], "ttft_ms", "TTFT"), (axes[1], "e2el_ms", "E2EL")):
            ys_all: list[float] = []
            for lv, rs in timed:
                pts = [(r.send_s, getattr(r, attr)) for r in rs[::stride] if getattr(r, attr) is not None]
                if not pts:
                    continue
                ys_all += [y for _, y in pts]
                n_lv = sum(1 for r in rs if getattr(r, attr) is not None)
                ax.scatter([x for x, _ in pts], [y for _, y in pts], s=14, color=colors[lv.label][0],
                           label=_mpl(f"{lv.label} (n={n_lv})"), alpha=0.85, linewidths=0)
            if ys_all:
                _log_if_wide(ax, ys_all, "y")
            if failed:
                low = ax.get_ylim()[0]
                ax.scatter([r.send_s for _, r in failed], [low] * len(failed), marker="x", color=_FAIL, s=30,
                           label=f"failed (n={len(failed)})", clip_on=False)
            ax.set_ylabel(f"{name} (ms)" + (", log" if ax.get_yscale() == "log" else ""))
        axes[1].set_xlabel("send time (s" + (" since the run's first send)" if run.clock == "common"
                                             else ", levels laid end to end)"))
        axes[0].legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    return figure(chart_id, "Latency over the run's time.", svg_of(draw, chart_id, (10.0, 5.0), nrows=2, sharex=True),
                  caption, extra=_steady_table(run))


def _steady_windows(run: BenchRun) -> list[tuple[str, float, float]]:
    """``(label, start, end)`` on the page's time axis of each level's recorded steady-state window
    (``steady_state.window``: seconds from the level's first send), for the levels that have a non-empty one."""
    out = []
    for lv in run.levels:
        w = sub(sub(lv.summary, "steady_state"), "window")
        a, b = num(w.get("start_s")), num(w.get("end_s"))
        sends = [r.send_s for r in lv.requests if r.send_s is not None]
        if a is not None and b is not None and b > a and not w.get("empty") and sends:
            out.append((lv.label, min(sends) + a, min(sends) + b))
    return out


def _oversat_text(o: dict[str, Any]) -> str:
    if o.get("flag") is True:
        return (f"OVER-SATURATED: queueing grows (Kendall τ {fmt(num(o.get('kendall_tau')), 2)}, p "
                f"{fmt(num(o.get('p_value')), 4)}, growth {fmt(num(o.get('growth_fraction')), 2)}× the median, "
                f"n={o.get('n')})")
    if o.get("flag") is False:
        return (f"no (τ {fmt(num(o.get('kendall_tau')), 2)}, p {fmt(num(o.get('p_value')), 4)}, "
                f"growth {fmt(num(o.get('growth_fraction')), 2)}×, n={o.get('n')})")
    return f"not judged: {o.get('reason') or 'not recorded'}"


def _steady_table(run: BenchRun) -> str:
    """Per level: the steady-state window (s from the level's first send), its requests, its TTFT p50/p99 with n,
    and the over-saturation flag; empty string when no level records a window (an older record)."""
    if not any(sub(lv.summary, "steady_state") for lv in run.levels):
        return ""
    rows = []
    for lv in run.levels:
        st = sub(lv.summary, "steady_state")
        w = sub(st, "window")
        rq = sub(w, "requests")
        t = sub(st, "ttft_ms")
        a, b = num(w.get("start_s")), num(w.get("end_s"))
        span = (f"{fmt(a, 2)} – {fmt(b, 2)}" if a is not None and b is not None and not w.get("empty")
                else f"none ({w.get('empty') or 'not recorded'})")
        rows.append([lv.label, span, f"{rq.get('sent', '—')} / {rq.get('measured', '—')} / {rq.get('finished', '—')}",
                     f"{fmt(num(t.get('p50')))} / {fmt(num(t.get('p99')))} (n={t.get('n', 0)})" if t.get("n")
                     else "not measured (n=0)", _oversat_text(sub(lv.summary, "over_saturation"))])
    return table(["level", "steady window (s from the level's first send)", "requests sent / measured / finished "
                  "in it", "steady TTFT p50 / p99 (ms)", "over-saturated"], rows)


# --------------------------------------------------------------------------------- throughput vs latency

def _sweep_points(run: BenchRun) -> dict[str, dict[str, Any]]:
    """Sweep points by their label and by each of their level labels (a point over ``--repeats`` has several)."""
    pts = (run.sweep or {}).get("points")
    out: dict[str, dict[str, Any]] = {}
    for p in pts if isinstance(pts, list) else []:
        if isinstance(p, dict) and isinstance(p.get("label"), str) and not p.get("hold"):
            out.setdefault(p["label"], p)
            for lb in p.get("levels") or []:
                if isinstance(lb, str):
                    out.setdefault(lb, p)
    return out


def _uncertain(p: dict[str, Any]) -> bool:
    """A point whose figures' intervals straddle a limit: ``certain`` False (an early draft of the format) or
    ``"uncertain"`` (``bench/sweep_point.py``: ``pass``/``fail``/``uncertain``)."""
    return p.get("certain") is False or p.get("certain") == "uncertain"


def _meets_word(p: dict[str, Any] | None) -> str:
    """``meets``/``misses``/``undecided`` for a sweep point (``(uncertain)`` added when its CI straddles a limit)."""
    if p is None:
        return "—"
    word = "meets" if p.get("meets") is True else "misses" if p.get("meets") is False else "undecided"
    return word + (" (uncertain)" if _uncertain(p) else "")


def _meets_color(p: dict[str, Any]) -> str:
    return _PASS if p.get("meets") is True else _FAIL if p.get("meets") is False else _UNKNOWN


def _ci(x: Any) -> tuple[float, float] | None:
    if isinstance(x, list) and len(x) == 2 and num(x[0]) is not None and num(x[1]) is not None:
        return float(x[0]), float(x[1])
    return None


def _ci_text(v: float | None, ci: tuple[float, float] | None, digits: int = 1) -> str:
    if v is None:
        return "not measured"
    return fmt(v, digits) + (f" [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]" if ci else " (no CI)")


class _Mark:
    """One point of the throughput-latency chart: a level, or a load point's mean over its repeats."""

    def __init__(self, name: str, labels: list[str], n: str, figs: dict[str, tuple[float | None,
                 tuple[float, float] | None]]) -> None:
        self.name, self.labels, self.n, self.figs = name, labels, n, figs

    def get(self, key: str) -> tuple[float | None, tuple[float, float] | None]:
        return self.figs.get(key, (None, None))


def _marks(run: BenchRun) -> tuple[list[_Mark], bool]:
    """The chart's points and whether they are load points over repeats (``data.points``, ``bench/repeats.py``:
    used when some point ran ≥ 2 times; each figure the mean over repeats with its Student t 95% CI), else one per
    level with the record's within-run order-statistic CI of each TTFT percentile (``p50_ci95``/``p99_ci95``)."""
    points = run.data.get("points")
    if isinstance(points, dict) and any(isinstance(p, dict) and isinstance(p.get("repeats"), int)
                                        and p["repeats"] >= 2 for p in points.values()):
        out = []
        for name, p in points.items():
            if not isinstance(p, dict):
                continue
            figs = sub(p, "figures")
            got = {k: (num(sub(figs, f).get("mean")), _ci(sub(figs, f).get("ci95")))
                   for k, f in (("thr", "output_throughput_tok_s"), ("p50", "ttft_ms.p50"), ("p99", "ttft_ms.p99"))}
            labels = [str(x) for x in p.get("labels") or []]
            out.append(_Mark(str(name), labels, f"{p.get('repeats')} repeats", got))
        return out, True
    out = []
    for lv in run.levels:
        t = sub(lv.summary, "ttft_ms")
        n = sub(lv.summary, "requests").get("completed")
        out.append(_Mark(lv.label, [lv.label], f"{n} requests" if isinstance(n, int) else "—",
                         {"thr": (num(sub(lv.summary, "throughput").get("output_throughput_tok_s")), None),
                          "p50": (num(t.get("p50")), _ci(t.get("p50_ci95"))),
                          "p99": (num(t.get("p99")), _ci(t.get("p99_ci95")))}))
    return out, False


def throughput_latency_chart(run: BenchRun) -> str:
    """Output tok/s against TTFT p50 (left) and p99 (right), one mark per level (or per load point over its repeats,
    ``_marks``), with its 95% CI where the record gives one; the Pareto front (non-dominated: no other mark has both
    lower TTFT and higher throughput) outlined and joined by a line; sweep points ringed green (meets the targets),
    red (misses) or grey (undecided)."""
    chart_id = "chart-throughput-latency"
    colors = level_colors(run)
    sweep = _sweep_points(run)
    marks, by_point = _marks(run)

    def sweep_of(m: _Mark) -> dict[str, Any] | None:
        return sweep.get(m.name) or next((sweep[lb] for lb in m.labels if lb in sweep), None)

    def color_of(m: _Mark) -> str:
        return colors[m.labels[0]][0] if m.labels and m.labels[0] in colors else _UNKNOWN

    usable = {q: [m for m in marks if m.get("thr")[0] is not None and m.get(q)[0] is not None] for q in ("p50", "p99")}
    fronts = {q: {u[i].name for i in pareto_front([(m.get(q)[0] or 0.0, m.get("thr")[0] or 0.0) for m in u])}
              for q, u in usable.items()}
    rows = [[m.name, m.n, _ci_text(*m.get("thr")), _ci_text(*m.get("p50")), _ci_text(*m.get("p99")),
             ", ".join(q for q in ("p50", "p99") if m.name in fronts[q]) or "no", _meets_word(sweep_of(m))]
            for m in marks]
    what = "load point" if by_point else "level"
    tbl = table([what, "n", "output tok/s [95% CI]", "TTFT p50 (ms) [95% CI]", "TTFT p99 (ms) [95% CI]",
                 "on the Pareto front", "sweep point"], rows)
    missing = [m.name for m in marks if m.get("thr")[0] is None or m.get("p50")[0] is None]
    caption = (f"One mark per {what}: output throughput (Σ N_out of completed requests ÷ the level's window) against "
               "its TTFT percentile, " + ("each the mean over the point's repeats with its Student t 95% CI "
                                          "(run-to-run spread; the record's data.points)" if by_point else
                                          "the record's figures; horizontal bars: the within-run order-statistic 95% "
                                          "CI of the percentile where n allows one (a p99 needs ≥ 368 values)")
               + ". Outlined in black and joined by the dashed line: the Pareto front, marks no other beats on both "
               "(lower TTFT and higher tok/s).")
    if sweep:
        caption += " Rings: sweep points, green meets the sweep's targets, red misses, grey undecided."
    if missing:
        caption += f" Not measured (no throughput or TTFT): {', '.join(missing)}."
    if not usable["p50"] and not usable["p99"]:
        return figure(chart_id, "Throughput vs latency across levels.", None, caption,
                      "not measured: no level has both an output throughput and a TTFT percentile.", tbl)

    def draw(axes: list[Any]) -> None:
        for ax, q in zip(axes, ("p50", "p99")):
            u = usable[q]
            if not u:
                ax.text(0.5, 0.5, f"TTFT {q}: not measured", ha="center", va="center", transform=ax.transAxes,
                        color=_FAIL)
                continue
            for m in u:
                (x, xci), (y, yci) = m.get(q), m.get("thr")
                if x is None or y is None:
                    continue
                xerr = [[max(x - xci[0], 0.0)], [max(xci[1] - x, 0.0)]] if xci else None
                yerr = [[max(y - yci[0], 0.0)], [max(yci[1] - y, 0.0)]] if yci else None
                on_front = m.name in fronts[q]
                ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color=color_of(m), ecolor=color_of(m),
                            elinewidth=1, capsize=2, markersize=6, markeredgecolor="#1b1b1b" if on_front else
                            color_of(m), markeredgewidth=1.2 if on_front else 0.5, zorder=3)
                ax.annotate(_mpl(m.name), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
                sp = sweep_of(m)
                if sp is not None:
                    ax.scatter([x], [y], s=150, facecolors="none", edgecolors=_meets_color(sp), linewidths=1.8,
                               zorder=4)
            front = sorted((m.get(q)[0] or 0.0, m.get("thr")[0] or 0.0) for m in u if m.name in fronts[q])
            if len(front) > 1:
                ax.step([x for x, _ in front], [y for _, y in front], where="post", color="#333333",
                        linewidth=1.0, linestyle="--", zorder=2, label="Pareto front")
                ax.legend(frameon=False, fontsize=8, loc="lower right")
            _log_if_wide(ax, [m.get(q)[0] or 0.0 for m in u])
            ax.set_xlabel(f"TTFT {q} (ms)" + (", log" if ax.get_xscale() == "log" else ""))
            ax.set_ylabel("output throughput (tok/s)")
            ax.margins(0.15)

    svg = svg_of(draw, chart_id, (8.6, 3.6), ncols=2)
    return figure(chart_id, "Throughput vs latency across levels.", svg, caption, extra=tbl)


# --------------------------------------------------------------------------------------------- the sweep

GOODPUT = "goodput fraction"


def _fig(p: dict[str, Any], key: str) -> tuple[float | None, tuple[float, float] | None]:
    """``(value, 95% CI)`` of one target's figure at a sweep point: ``figures[key]`` (``value``, ``ci95``); for
    goodput the point's ``goodput`` block (``fraction``, ``ci95``: ``bench/sweep_point.py``) or
    ``figures["goodput_fraction"]``."""
    if key == GOODPUT:
        g = sub(p, "goodput")
        if g:
            return num(g.get("fraction")), _ci(g.get("ci95"))
        key = "goodput_fraction"
    f = sub(sub(p, "figures"), key)
    return num(f.get("value")), _ci(f.get("ci95"))


def _targets(sweep: dict[str, Any]) -> list[tuple[str, str, float | None]]:
    """``(figure key, what, limit)`` per panel: each percentile target, then goodput's fraction when set.

    A target is ``{"name", "metric", "stat", "limit_ms"}`` (``bench/sweep.py`` ``Target.to_json``: its figure is
    ``figures[name]``), or ``{"key", "stat", "limit"}`` (figure ``figures["<key>_<stat>"]``)."""
    out = []
    for t in sweep.get("targets") or []:
        if not isinstance(t, dict) or not isinstance(t.get("stat"), str):
            continue
        metric = t.get("metric", t.get("key"))
        if not isinstance(metric, str):
            continue
        name = t["name"] if isinstance(t.get("name"), str) else f"{metric}_{t['stat']}"
        what = f"{metric.removesuffix('_ms').upper()} {t['stat']} (ms)"
        out.append((name, what, num(t.get("limit_ms", t.get("limit")))))
    g = sweep.get("goodput")
    if isinstance(g, dict):
        out.append((GOODPUT, "goodput fraction (of requests)", num(g.get("min_fraction"))))
    return out


def sweep_chart(run: BenchRun) -> str:
    """The sweep (``data.sweep``): per target, each point's figure with its 95% CI against the sweep's axis value,
    the limit as a dashed line, points green (meets every target), red (misses) or grey (undecided; hollow when the
    CI straddles the limit); the boundary and its CI as a vertical line and band."""
    chart_id = "chart-sweep"
    sweep = run.sweep
    if sweep is None:
        return figure(chart_id, "Sweep and SLO boundary.", None, "",
                      "not a sweep: this run's record has no sweep block (data.sweep; `bench sweep` writes one), "
                      "so there are no targets or boundary to draw.")
    axis = sweep.get("axis")
    unit = {"rate": "request rate (req/s)", "concurrency": "concurrency (streams)"}.get(str(axis), f"{axis}")
    points = sorted((p for p in sweep.get("points") or [] if isinstance(p, dict) and num(p.get("value")) is not None),
                    key=lambda p: (float(p["value"]), bool(p.get("hold"))))
    targets = _targets(sweep)
    b = sub(sweep, "boundary")
    bval = num(b.get("value")) if b.get("found") else None
    bci = _ci(b.get("ci95")) or (None, None)
    rows = []
    for p in points:
        figs = []
        for key, _, _ in targets:
            v, ci = _fig(p, key)
            figs.append(_ci_text(v, ci, 3 if key == GOODPUT else 1))
        corr = sub(p, "correctness")
        n_req = p.get("requests")
        rows.append([str(p.get("label")) + (" (hold: the boundary run again)" if p.get("hold") else ""),
                     fmt(num(p.get("value")), 2), str(p.get("order", "—")),
                     (f"{n_req}" + (f" ({p['failed']} failed)" if p.get("failed") else "")) if n_req is not None
                     else "—", *figs,
                     _meets_word(p), f"{corr.get('verdict', 'NOT RUN')}" + (f": {corr['reason']}"
                                                                           if corr.get("reason") else "")])
    tbl = table(["point", unit, "search order", "requests (n)", *[f"{w} [95% CI]" for _, w, _ in targets], "targets",
                 "correctness at this load"], rows)
    res = num(sweep.get("resolution"))
    if b.get("found") and bval is not None:
        btxt = (f"boundary: {fmt(bval, 2)} {unit.split('(')[-1].rstrip(')')}"
                + (f" [{fmt(bci[0], 2)}, {fmt(bci[1], 2)}] (95% CI)" if None not in bci else " (no CI)")
                + f"; monotone: {'yes' if b.get('monotone') else 'no'}"
                + ("" if b.get("held") is None else f"; held when run again: {'yes' if b.get('held') else 'NO'}"))
    else:
        btxt = "boundary: not found"
    if b.get("reason"):
        btxt += f" ({b['reason']})"
    caption = (f"{len(points)} point(s) along {unit}" + (f", resolution {fmt(res, 3)}" if res is not None else "")
               + ". Each panel: one target's figure per point with its 95% CI, the limit dashed; green meets every "
               "target, red misses one, grey undecided (hollow: its interval straddles a limit; a diamond: the "
               "boundary run once more to check it holds). " + btxt + ".")
    if not points or not targets:
        return figure(chart_id, "Sweep and SLO boundary.", None, caption,
                      "not measured: the sweep block has " + ("no points" if not points else "no targets") + ".", tbl)

    def draw(axes: list[Any]) -> None:
        for ax, (key, what, limit) in zip(axes, targets):
            drew = False
            for p in points:
                v, ci = _fig(p, key)
                x = float(p["value"])
                color = _meets_color(p)
                if v is None:
                    ax.annotate("not\nmeasured", (x, 0), xycoords=("data", "axes fraction"), ha="center",
                                va="bottom", fontsize=7, color=_FAIL)
                    continue
                drew = True
                err = [[max(v - ci[0], 0.0)], [max(ci[1] - v, 0.0)]] if ci else None
                hollow = _uncertain(p)
                ax.errorbar([x], [v], yerr=err, fmt="D" if p.get("hold") else "o", color=color, ecolor=color,
                            capsize=3, markersize=6,
                            markerfacecolor="white" if hollow else color, zorder=3)
                ax.annotate(_mpl(str(p.get("label"))), (x, v), xytext=(4, 4), textcoords="offset points",
                            fontsize=7)
            if limit is not None:
                ax.axhline(limit, color="#333333", linestyle="--", linewidth=1,
                           label=f"limit {fmt(limit, 3 if key == GOODPUT else 1)}")
            if bval is not None:
                ax.axvline(bval, color="#4477aa", linewidth=1.4, label=f"boundary {fmt(bval, 2)}")
                if None not in bci:
                    ax.axvspan(bci[0], bci[1], color="#4477aa", alpha=0.12, label="boundary 95% CI")
            ax.set_xlabel(unit)
            ax.set_ylabel(_mpl(what))
            if not drew:
                ax.text(0.5, 0.5, "not measured at any point", ha="center", va="center", transform=ax.transAxes,
                        color=_FAIL)
            ax.legend(frameon=False, fontsize=7, loc="best")

    n = len(targets)
    svg = svg_of(draw, chart_id, (min(4.3 * n, 13.0), 3.4), ncols=n)
    return figure(chart_id, "Sweep and SLO boundary.", svg, caption, extra=tbl)


# -------------------------------------------------------------------------------------- client self-check

def client_chart(run: BenchRun) -> str:
    """The client's self-check per level (the record's ``client``, ``bench/pace_judge.py``): the worst process's
    event-loop lag p99 and (open loop) the send lateness p99, bars in ms, each with the limit it was judged by as
    a black tick; levels the client paced are marked INVALID."""
    chart_id = "chart-client-check"
    rows, data = [], []
    for lv in run.levels:
        c = lv.summary.get("client")
        if not isinstance(c, dict):
            rows.append([lv.label, "—", "—", "—", "—", "—", "—", "not recorded"])
            continue
        late = sub(c, "send_late_ms")
        valid = {True: "valid", False: "INVALID", None: "not judged"}.get(c.get("valid"), "not judged")
        lag, lim = num(c.get("loop_lag_p99_ms")), num(c.get("lag_limit_ms"))
        lp99, llim = num(late.get("p99")), num(c.get("late_limit_ms"))
        rows.append([lv.label, str(c.get("processes", "—")),
                     str(lv.lag_samples) if lv.lag_samples is not None else "—", fmt(lag, 2), fmt(lim, 1),
                     f"{fmt(lp99, 2)} (n={late.get('n')})" if late else "closed loop", fmt(llim, 1), valid
                     + ("".join(f" — {r}" for r in c.get("reasons") or []) if c.get("valid") is False else "")])
        data.append((lv.label, lag, lim, lp99, llim, c.get("valid")))
    tbl = table(["level", "client processes", "loop-lag samples (n)", "loop lag p99, worst process (ms)",
                 "lag limit (ms)", "send late p99 (ms)", "late limit (ms)", "verdict"], rows)
    caption = ("Is the client, not the server, setting the pace? Event-loop lag = how late a 5 ms timer fires in each "
               "client process; send lateness = actual send − scheduled send (open loop). A level is invalid when "
               "either p99 passes its limit (limits as the record states them: bench/pace_judge.py).")
    if not any(lag is not None or lp99 is not None for _, lag, _, lp99, _, _ in data):
        return figure(chart_id, "Client self-check per level.", None, caption,
                      "not measured: no level records the client's event-loop lag or send lateness (an older run "
                      "dir, or levels too short to sample).", tbl)

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        w = 0.38
        for i, (_, lag, lim, lp99, llim, valid) in enumerate(data):
            for dx, v, limit, color, name in ((-w / 2, lag, lim, "#4477aa", "loop lag p99"),
                                              (w / 2, lp99, llim, "#ccbb44", "send late p99")):
                if v is None:
                    continue
                ax.bar([i + dx], [v], width=w, color=color, label=name if i == next(
                    j for j, d in enumerate(data) if d[1 if dx < 0 else 3] is not None) else None)
                if limit is not None:
                    ax.plot([i + dx - w / 2, i + dx + w / 2], [limit, limit], color="#1b1b1b", linewidth=2,
                            label="limit" if i == 0 and dx < 0 else None)
            if valid is False:
                ax.annotate("INVALID", (i, 0), xytext=(0, -22), textcoords="offset points", ha="center",
                            color=_FAIL, fontsize=8, fontweight="bold")
        ax.set_xticks(list(range(len(data))), [_mpl(d[0]) for d in data])
        ax.set_ylabel("ms")
        top = max([v for d in data for v in (d[1], d[2], d[3], d[4]) if v is not None] or [1.0])
        ax.set_ylim(0, top * 1.15)
        ax.legend(frameon=False, fontsize=8, loc="upper left")

    svg = svg_of(draw, chart_id, (max(5.0, 1.1 * len(data) + 3.0), 3.2))
    return figure(chart_id, "Client self-check per level.", svg, caption, extra=tbl)

