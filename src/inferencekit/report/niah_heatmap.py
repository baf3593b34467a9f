"""The NIAH heat-map page: accuracy per (length, depth) cell as one self-contained HTML file with an inline SVG.

Reads the ``score_grid`` result of ``quality/niah.py`` (a JSON-able mapping) and writes nothing else;
no server is involved. The chart is drawn with matplotlib into vector SVG (no embedded raster).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferencekit.rundir import write_bytes

__all__ = ["write_heatmap"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1000px;color:#1b1b1b;
padding:0 1em}
h1{font-size:1.35em}
figure{margin:1em 0}
figure svg{max-width:100%;height:auto}
figcaption,p.note{color:#444;font-size:.92em}
table{border-collapse:collapse;margin:.8em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-variant-numeric:tabular-nums}
th:first-child{text-align:left}
"""


def _mpl_text(s: str) -> str:
    return s.replace("$", r"\$")  # a "$" would start mathtext


def _fmt_depth(d: float) -> str:
    """A depth as the case ids write it (``quality.niah.case_id``): two decimals, or as many as it needs."""
    two = f"{d:.2f}"
    return two if float(two) == d else repr(float(d))


def _heatmap_svg(result: Mapping[str, Any], label: str) -> str:
    """The chart as an inline ``<svg>`` element: vector cells, no embedded raster."""
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    lengths, depths = list(result["lengths"]), list(result["depths"])
    cells = {(c["length_tokens"], c["depth"]): c for c in result["cells"]}
    grid = [[cells[(n, d)]["accuracy"] if (n, d) in cells else math.nan for n in lengths] for d in depths]
    sent = {b["length_tokens"]: b["prompt_tokens_mean"] for b in result.get("by_length", [])}
    xticks = [f"{n}" + (f"\n(sent ≈ {sent[n]:.0f})" if sent.get(n) is not None else "") for n in lengths]
    width = min(3.2 + 1.3 * max(len(lengths), 1), 14.0)
    height = min(2.2 + 0.7 * max(len(depths), 1), 12.0)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "inferencekit-niah"}):
        fig = Figure(figsize=(width, height), layout="constrained")  # no pyplot: no backend or window state
        ax = fig.subplots()
        cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#d9d9d9")  # grey: a cell not run
        mesh = ax.pcolormesh(np.ma.masked_invalid(np.array(grid, dtype=float)), cmap=cmap, vmin=0.0, vmax=1.0,
                             edgecolors="white", linewidth=1.5)
        for i, d in enumerate(depths):
            for j, n in enumerate(lengths):
                c = cells.get((n, d))
                if c is None:
                    ax.text(j + 0.5, i + 0.5, "not run", ha="center", va="center", fontsize=9, color="#333333")
                    continue
                dark = 0.25 < c["accuracy"] < 0.75
                colour = "#1b1b1b" if dark else "#ffffff"
                ax.text(j + 0.5, i + 0.5, f"{c['hits']}/{c['trials']}", ha="center", va="center", fontsize=11,
                        fontweight="bold", color=colour)
                if c["failed"]:
                    ax.text(j + 0.5, i + 0.22, f"{c['failed']} failed", ha="center", va="center", fontsize=8,
                            color=colour)
        ax.set_xticks([j + 0.5 for j in range(len(lengths))], xticks)
        ax.set_yticks([i + 0.5 for i in range(len(depths))], [_fmt_depth(d) for d in depths])
        ax.invert_yaxis()  # depth 0 (start of the text) on top
        ax.set_xlabel("target haystack length (tokens)")
        ax.set_ylabel("needle depth (0 = start, 1 = end)")
        ax.set_title(_mpl_text(f"Needle in a haystack: {label}"))
        bar = fig.colorbar(mesh, ax=ax, label="accuracy (share of trials)")
        if bar.solids is not None:
            bar.solids.set_rasterized(False)  # vector, not an embedded PNG
            bar.solids.set_edgecolor("face")  # no hairlines between the strips
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    return text[text.index("<svg"):].strip()


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _table(result: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{n} tok</th>" for n in result["lengths"])
    cells = {(c["length_tokens"], c["depth"]): c for c in result["cells"]}
    body = []
    for d in result["depths"]:
        tds = []
        for n in result["lengths"]:
            c = cells.get((n, d))
            if c is None:
                tds.append("<td>not run</td>")
                continue
            lo, hi = c["ci95"]
            fail = f", {c['failed']} failed" if c["failed"] else ""
            tok = c["prompt_tokens_mean"]
            sent = f"<br>sent {tok:.0f} tok" if tok is not None else "<br>sent: unknown"
            tds.append(f"<td>{c['hits']}/{c['trials']} ({_pct(c['accuracy'])}, CI {_pct(lo)}–{_pct(hi)}{fail})"
                       f"{sent}</td>")
        body.append(f"<tr><th>depth {html.escape(_fmt_depth(d))}</th>{''.join(tds)}</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(body)}</table>"


def write_heatmap(result: Mapping[str, Any], path: Path, *, label: str, measurement: str) -> Path:
    """Write the grid as one self-contained HTML page: an inline SVG heat-map and a table.

    Args:
        result: ``score_grid``'s return value.
        path: the ``.html``/``.htm`` file to write, or a folder to write ``heatmap.html`` into.
        label: the model/engine the grid ran against, shown in the title.
        measurement: how chars per token was obtained, e.g. ``"measured with the engine's /tokenize:
            4.31 chars/token"`` or ``"assumed 4.0 chars/token (no tokenize endpoint)"``; shown in the
            caption.

    Returns:
        The file written (atomically, via ``rundir.write_bytes``). The page loads nothing from
        outside and holds no script.
    """
    out = path if path.suffix.lower() in (".html", ".htm") else path / "heatmap.html"
    acc, ci = result.get("accuracy"), result.get("ci95")
    overall = (f"{result['hits']}/{result['n']} found ({_pct(acc)}, 95% Wilson CI {_pct(ci[0])}–{_pct(ci[1])})"
               if acc is not None and ci else "no cases")
    if result.get("failed"):
        overall += f"; {result['failed']} request(s) failed and count as misses"
    caption = ("Columns: target haystack length in tokens; haystacks were sized in characters from "
               f"{measurement}. Under each length, the mean prompt_tokens the server reported (usage), which "
               "adds the instruction, the question and the chat template: that is the real context length. "
               "Rows: needle depth. Colour: accuracy; each cell: hits/trials.")
    page = (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>Needle in a haystack: {html.escape(label)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>Needle in a haystack: {html.escape(label)}</h1>\n"
            f"<p class=\"note\">Overall: {html.escape(overall)}.</p>\n"
            f"<figure>\n{_heatmap_svg(result, label)}\n<figcaption>{html.escape(caption)}</figcaption>\n</figure>\n"
            f"{_table(result)}\n"
            "<p class=\"note\">Intervals are 95% Wilson score intervals per cell. The filler is synthetic: this "
            "tests retrieval of one planted fact, not long-context reasoning.</p>\n</body>\n</html>\n")
    write_bytes(out, page.encode("utf-8"))
    return out
