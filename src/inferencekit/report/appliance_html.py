"""The appliance receipt as one self-contained HTML page: the card's tables plus a chart per section.

The page holds no reference to anything outside itself: the style sheet is inline and the charts
are matplotlib figures (Agg backend) embedded as inline SVG. The tables come from the same
``card_model`` as the terminal card, so the page and the card print the same strings; every
value taken from the receipt is HTML-escaped.
"""

from __future__ import annotations

import html
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencekit.report.appliance_card import (
    DASH,
    CardModel,
    Section,
    card_model,
    fmt_rate,
)
from inferencekit.report.appliance_card import _sorted_numeric as _sorted_items
from inferencekit.rundir import write_bytes

__all__ = ["page_html", "write_html"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;color:#1b1b1b;
padding:0 1em}
h1{font-size:1.4em;margin-bottom:.2em}
h2{font-size:1.15em;margin-top:1.8em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-variant-numeric:tabular-nums}
th:first-child,td:first-child{text-align:left}
table.meta td{text-align:left}
table.meta td.k{font-weight:600;background:#f6f6f6}
p.note{color:#555;font-size:.92em;margin:.3em 0}
ul.details{color:#b00020;font-size:.92em}
.bad{color:#b00020;font-weight:700}
.warn{color:#9a6700;font-weight:600}
.good{color:#1a7f37}
.verdict{font-size:1.3em;font-weight:700}
.v-PASS{color:#1a7f37}.v-FAIL{color:#b00020}.v-UNPROVEN{color:#9a6700}
figure{margin:1em 0}
figure svg{max-width:100%;height:auto}
"""

_PALETTE = ("#4477aa", "#ee7733", "#228833")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _stat(summary: Any, key: str) -> float | None:
    return _num(summary.get(key)) if isinstance(summary, dict) else None


def _mpl_text(s: str) -> str:
    """A label matplotlib draws literally (a ``$`` would start mathtext)."""
    return s.replace("$", r"\$")


# --------------------------------------------------------------------------------------------- charts

def _svg(draw: Callable[[Any], None], salt: str, size: tuple[float, float] = (7.5, 3.6)) -> str:
    """Draw one chart with ``draw(ax)`` and return it as an inline ``<svg>`` element (no XML prolog)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # a host that already chose a backend keeps it (no window opens:
        matplotlib.use("Agg")                     # every figure is closed here)
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"inferencekit-{salt}",
                                "axes.spines.top": False, "axes.spines.right": False}):
        fig, ax = plt.subplots(figsize=size)
        try:
            draw(ax)
            fig.tight_layout()
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
        finally:
            plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def _bars_with_range(ax: Any, xs: list[float], summaries: list[Any], width: float, color: str, label: str | None
                     ) -> list[float]:
    """Median bars with min–max error bars; x positions whose summary is null are returned (not drawn)."""
    pos, med, lo, hi, missing = [], [], [], [], []
    for x, s in zip(xs, summaries, strict=True):
        m, mn, mx = _stat(s, "median"), _stat(s, "minimum"), _stat(s, "maximum")
        if m is None:
            missing.append(x)
            continue
        pos.append(x)
        med.append(m)
        lo.append(max(m - (mn if mn is not None else m), 0.0))
        hi.append(max((mx if mx is not None else m) - m, 0.0))
    if pos:
        ax.bar(pos, med, width=width, color=color, label=label, yerr=[lo, hi], capsize=4,
               error_kw={"elinewidth": 1, "ecolor": "#333333"})
        for x, m, h in zip(pos, med, hi, strict=True):
            _label(ax, x, m + h, fmt_rate(m))
    elif label:
        ax.bar([], [], width=width, color=color, label=label)
    return missing


def _headroom(ax: Any) -> None:
    """y from 0, with room above the tallest error bar for its value label."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)


def _label(ax: Any, x: float, y: float, text: str) -> None:
    ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)


def _mark_missing(ax: Any, xs: list[float]) -> None:
    for x in xs:
        ax.annotate("no usable\nsample", (x, 0), xytext=(0, 4), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8, color="#b00020")


def _gate_note(workload: Any) -> str:
    gate = (workload or {}).get("completion_gate") if isinstance(workload, dict) else None
    if isinstance(gate, dict) and isinstance(gate.get("passed"), int) and isinstance(gate.get("total"), int) \
            and gate["passed"] < gate["total"]:
        return f"\ngate {gate['passed']}/{gate['total']} FAIL"
    return ""


def _decode_chart(receipt: dict[str, Any]) -> str:
    items = list(receipt["decode"].items())

    def draw(ax: Any) -> None:
        xs = [float(i) for i in range(len(items))]
        missing = _bars_with_range(ax, xs, [(w or {}).get("decode_tokens_per_second") for _, w in items], 0.6,
                                   _PALETTE[0], None)
        _mark_missing(ax, missing)
        ax.set_xticks(xs, [_mpl_text(str(k)) + _gate_note(w) for k, w in items])
        ax.set_xlim(-0.6, len(items) - 0.4)
        ax.set_ylabel("decode tok/s")
        ax.set_title("decode: median tok/s per workload (error bars: min–max)", fontsize=10, loc="left")
        _headroom(ax)

    return _svg(draw, "decode", (max(6.5, 1.4 * len(items) + 2.5), 3.6))


def _prefill_chart(receipt: dict[str, Any]) -> str:
    items = _sorted_items(receipt["prefill"])

    def draw(ax: Any) -> None:
        xs = [float(i) for i in range(len(items))]
        w = 0.38
        miss = _bars_with_range(ax, [x - w / 2 for x in xs],
                                [((p or {}).get("cold") or {}).get("effective_prefill_tokens_per_second")
                                 for _, p in items], w, _PALETTE[0], "cold")
        miss += _bars_with_range(ax, [x + w / 2 for x in xs],
                                 [((p or {}).get("warm_replay") or {}).get("effective_prefill_tokens_per_second")
                                  for _, p in items], w, _PALETTE[1], "warm replay")
        _mark_missing(ax, miss)
        ax.set_xticks(xs, [_mpl_text(f"{k} tokens") for k, _ in items])
        ax.set_xlim(-0.6, len(items) - 0.4)
        ax.set_ylabel("prefill tok/s")
        ax.set_title("prefill: median tok/s per depth, cold vs warm replay (error bars: min–max)", fontsize=10,
                     loc="left")
        _headroom(ax)
        ax.legend(frameon=False, fontsize=9, loc="upper left")

    return _svg(draw, "prefill", (max(6.5, 1.6 * len(items) + 2.5), 3.6))


def _concurrency_chart(receipt: dict[str, Any]) -> str:
    items = _sorted_items(receipt["concurrency"])

    def draw(ax: Any) -> None:
        xs, med, lo, hi, ticks, line = [], [], [], [], [], []
        for i, (lvl, c) in enumerate(items):
            ticks.append(str(lvl))
            s = (c or {}).get("aggregate_end_to_end_tokens_per_second")
            m, mn, mx = _stat(s, "median"), _stat(s, "minimum"), _stat(s, "maximum")
            line.append(float("nan") if m is None else m)  # the line breaks at a level without a figure
            if m is None:
                _mark_missing(ax, [float(i)])
                continue
            xs.append(float(i))
            med.append(m)
            lo.append(max(m - (mn if mn is not None else m), 0.0))
            hi.append(max((mx if mx is not None else m) - m, 0.0))
            _label(ax, float(i), mx if mx is not None else m, fmt_rate(m))
        ax.plot([float(i) for i in range(len(items))], line, "-", color=_PALETTE[2])
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], fmt="o", color=_PALETTE[2], ecolor="#333333", elinewidth=1,
                        capsize=4)
        ax.set_xticks([float(i) for i in range(len(items))], [_mpl_text(t) for t in ticks])
        ax.set_xlim(-0.5, len(items) - 0.5)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("aggregate tok/s")
        ax.set_title("concurrency: median aggregate tok/s per level (error bars: min–max over rounds)", fontsize=10,
                     loc="left")
        _headroom(ax)

    return _svg(draw, "concurrency", (max(6.5, 1.2 * len(items) + 3.0), 3.6))


_CHARTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "decode": _decode_chart, "prefill": _prefill_chart, "concurrency": _concurrency_chart}


# --------------------------------------------------------------------------------------------- page

def _cell(tag: str, text: str, cls: str | None) -> str:
    attr = f' class="{_e(cls)}"' if cls else ""
    return f"<{tag}{attr}>{_e(text)}</{tag}>"


def _table(sec: Section) -> str:
    head = "".join(_cell("th", c, None) for c in sec.columns)
    body = "".join("<tr>" + "".join(_cell("td", c.text, c.tag) for c in row) + "</tr>\n" for row in sec.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _header(m: CardModel) -> str:
    rows = []
    pairs = m.header
    for i in range(0, len(pairs), 2):
        rows.append("<tr>" + "".join(f'<td class="k">{_e(k)}</td><td>{_e(v)}</td>' for k, v in pairs[i:i + 2])
                    + "</tr>")
    return '<table class="meta"><tbody>\n' + "\n".join(rows) + "\n</tbody></table>"


def page_html(receipt: dict[str, Any]) -> str:
    """The HTML page of ``receipt`` (a parsed ``inferencekit.appliance.v1`` receipt) as a string.

    Same figures as the card, as tables, each section followed by its chart; no external resources.
    """
    m = card_model(receipt)
    vcls = f"v-{m.verdict}" if m.verdict in ("PASS", "FAIL", "UNPROVEN") else ""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>appliance receipt — {_e(m.title)}</title>", f"<style>{_CSS}</style>", "</head><body>",
             f"<h1>appliance receipt — {_e(m.title)}</h1>",
             f'<p class="verdict">verdict: <span class="{vcls}">{_e(m.verdict)}</span></p>',
             _header(m), f'<p class="note">{_e(m.header_note)}</p>']
    for sec in m.sections:
        parts += [f"<section id=\"{_e(sec.key)}\">", f"<h2>{_e(sec.title)}</h2>", _table(sec),
                  f'<p class="note">how measured: {_e(sec.note)}</p>']
        if sec.details:
            parts.append('<ul class="details">' + "".join(f"<li>{_e(d)}</li>" for d in sec.details) + "</ul>")
        parts += [f'<figure aria-label="{_e(sec.key)} chart">{_CHARTS[sec.key](receipt)}</figure>', "</section>"]
    if m.skipped:
        parts += ["<h2>skipped</h2>", "<ul>" + "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in m.skipped)
                  + "</ul>"]
    parts += ["<h2>verdict</h2>", f'<p class="verdict"><span class="{vcls}">{_e(m.verdict)}</span></p>',
              f'<p class="note">{_e(m.verdict_note)}</p>']
    if m.limitations:
        parts.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in m.limitations) + "</ul>")
    else:
        parts.append(f'<p class="note">limitations: {DASH}</p>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_html(receipt: dict[str, Any], path: str | Path) -> Path:
    """Write the page of ``receipt`` to ``path`` atomically (UTF-8) and return ``path`` as a Path.

    Folders above ``path`` are created. Raises OSError when the file cannot be written.
    """
    out = Path(path)
    write_bytes(out, page_html(receipt).encode("utf-8"))
    return out
