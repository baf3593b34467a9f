"""The appliance card: the headline of an appliance receipt, drawn with rich for people to paste.

The figures are laid out once, by ``card_model``, as plain strings with a style tag per cell; the
terminal card (``render_appliance``), its plain-text copy (``card_text``) and the HTML page
(``appliance_html``) all draw that one model, so they cannot disagree. Every section says in one
line how its figures were measured. A summary that is ``null`` in the receipt (no usable sample)
prints as "—", never as 0.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from inferencekit.evidence.receipt import RECEIPT_FORMAT
from inferencekit.report.card import verdict_style

__all__ = ["RECEIPT_FORMAT", "CardModel", "Cell", "Section", "card_model", "card_text", "render_appliance"]


DASH = "—"

# style tag -> rich style (the HTML page maps the same tags to CSS classes)
_SHORT = 26  # header values longer than this get a row of their own on the card

_RICH_STYLE = {"bad": "bold red", "warn": "yellow", "good": "green", "dim": "dim"}


@dataclass(frozen=True, slots=True)
class Cell:
    """One figure as printed: ``text``, and ``tag`` None, "bad", "warn", "good" or "dim"."""

    text: str
    tag: str | None = None


@dataclass(slots=True)
class Section:
    """One table of the card: ``key`` ("decode", "prefill", "concurrency"), a title, the one-line
    "how measured" ``note``, column names, rows of cells (one per workload / depth / level), and
    ``details`` (extra lines, e.g. why samples were unusable)."""

    key: str
    title: str
    note: str
    columns: tuple[str, ...]
    rows: list[tuple[Cell, ...]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CardModel:
    """Everything the card shows, as strings: ``header`` (name, value) pairs with its ``header_note``,
    the sections present in the receipt, ``skipped`` (section, reason) pairs, the verdict with its
    rule, and the limitations."""

    title: str
    header: list[tuple[str, str]]
    header_note: str
    sections: list[Section]
    skipped: list[tuple[str, str]]
    verdict: str
    verdict_note: str
    limitations: list[str]


# --------------------------------------------------------------------------------------------- figures

def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def fmt_rate(x: Any) -> str:
    """A rate in tokens/s as printed on the card (1 decimal, thousands separators), "—" for None."""
    v = _num(x)
    return DASH if v is None else f"{v:,.1f}"


def fmt_seconds(x: Any) -> str:
    """A duration in seconds as printed on the card (3 decimals), "—" for None."""
    v = _num(x)
    return DASH if v is None else f"{v:.3f}"


def _summary(s: Any, key: str) -> Any:
    return s.get(key) if isinstance(s, dict) else None


def _range(s: Any, fmt: Any = fmt_rate) -> str:
    lo, hi = _summary(s, "minimum"), _summary(s, "maximum")
    if _num(lo) is None or _num(hi) is None:
        return DASH
    return f"{fmt(lo)}–{fmt(hi)}"


def _usable(rows: list[Any]) -> tuple[int, int]:
    rows = [r for r in rows if isinstance(r, dict)]
    return sum(1 for r in rows if r.get("usable")), len(rows)


def _usable_cell(*counts: tuple[int, int]) -> Cell:
    text = " · ".join(f"{u}/{n}" for u, n in counts)
    return Cell(text, "bad" if any(u < n for u, n in counts) else None)


def _unusable_lines(where: str, rows: list[Any], ident: str = "run") -> list[str]:
    out = []
    for r in rows:
        if isinstance(r, dict) and not r.get("usable"):
            why = r.get("unusable_reason") or r.get("error") or f"status {r.get('status')}"
            out.append(f"unusable: {where} {ident} {r.get(ident, '?')}: {why}")
    return out


def _sorted_numeric(d: dict[str, Any]) -> list[tuple[str, Any]]:
    def key(item: tuple[str, Any]) -> tuple[int, float, str]:
        try:
            return (0, float(item[0]), item[0])
        except ValueError:
            return (1, 0.0, item[0])

    return sorted(d.items(), key=key)


def _section_dict(receipt: dict[str, Any], key: str) -> dict[str, Any]:
    v = receipt.get(key)
    return v if isinstance(v, dict) else {}


# --------------------------------------------------------------------------------------------- sections

def _header(receipt: dict[str, Any]) -> tuple[str, list[tuple[str, str]], str]:
    run = _section_dict(receipt, "run")
    tool = _section_dict(receipt, "tool")
    proto = _section_dict(receipt, "protocol")
    eng = run.get("engine")
    eng = eng if isinstance(eng, dict) else {}
    meta = run.get("appliance")
    meta = meta if isinstance(meta, dict) else {}
    label = str(run.get("label") or "(no label)")
    items: list[tuple[str, str]] = [("label", label), ("model", str(run.get("model") or DASH))]
    if meta.get("model_revision"):
        items.append(("model revision", str(meta["model_revision"])))
    engine = " ".join(str(x) for x in (eng.get("engine"), eng.get("version")) if x)
    items.append(("engine", engine or DASH))
    for k in ("hardware", "topology", "quantisation", "kv_cache_dtype", "serving_engine", "context_limit",
              "competing_traffic"):
        if k in meta:
            items.append((k.replace("_", " "), str(meta[k])))
    items.append(("comparison id", str(run.get("comparison_id") or DASH)))
    items.append(("protocol", str(proto.get("version") or DASH)))
    sha = proto.get("prompts_sha256")
    prompts = (f"{proto.get('prompts_version')} " if proto.get("prompts_version") else "") + \
        (f"sha256 {str(sha)[:12]}" if sha else "")
    items.append(("prompts", prompts.strip() or DASH))
    tv = f"{tool.get('name') or 'inferencekit'} {tool.get('version') or '?'}"
    if tool.get("git_revision"):
        tv += f" @ {str(tool['git_revision'])[:12]}" + (" dirty" if tool.get("git_dirty") else "")
        tv += " (git archive)" if tool.get("source") == "git-archive" else ""
    elif tool.get("source"):
        tv += f" ({tool['source']})"
    if tool.get("source_sha256"):
        tv += f", files sha256 {str(tool['source_sha256'])[:12]}"
    items.append(("tool", tv))
    items.append(("started", str(run.get("started_at") or DASH)))
    src = run.get("metadata_source")
    note = ("Appliance fields are as declared" + (f" ({src})" if src else "") +
            ", not measured; the comparison id ties receipts of one sweep together.")
    return label, items, note


def _decode(receipt: dict[str, Any]) -> Section | None:
    dec = _section_dict(receipt, "decode")
    if not dec:
        return None
    st = _section_dict(receipt, "settings")
    extra = []
    if st.get("runs") is not None:
        extra.append(f"{st['runs']} runs per workload")
    if st.get("decode_tokens") is not None:
        extra.append(f"max_tokens {st['decode_tokens']}")
    note = ("decode tok/s = (completion tokens − 1) / time from the first to the last token-bearing SSE event, "
            "per run; pooled = Σ(tokens − 1) / Σ decode time; TTFT = send → first token event"
            + (f"; {', '.join(extra)}" if extra else "") + ".")
    sec = Section("decode", "decode — per workload (tok/s; median TTFT in seconds)", note,
                  ("workload", "median", "min–max", "p90", "pooled", "TTFT s", "gate", "usable"))
    for name, w in dec.items():
        w = w if isinstance(w, dict) else {}
        s = w.get("decode_tokens_per_second")
        gate = w.get("completion_gate")
        gate = gate if isinstance(gate, dict) else {}
        passed, total = gate.get("passed"), gate.get("total")
        if isinstance(passed, int) and isinstance(total, int):
            bad = passed < total
            gate_cell = Cell(f"{passed}/{total}" + (" FAIL" if bad else " ok"), "bad" if bad else "good")
        else:
            gate_cell = Cell(DASH)
        runs = w.get("runs")
        runs = runs if isinstance(runs, list) else []
        sec.rows.append((Cell(str(name)), Cell(fmt_rate(_summary(s, "median"))), Cell(_range(s)),
                         Cell(fmt_rate(_summary(s, "p90"))), Cell(fmt_rate(w.get("pooled_decode_tokens_per_second"))),
                         Cell(fmt_seconds(_summary(w.get("ttft_seconds"), "median"))), gate_cell,
                         _usable_cell(_usable(runs))))
        sec.details += _unusable_lines(str(name), runs)
    return sec


def _prefill(receipt: dict[str, Any]) -> Section | None:
    pre = _section_dict(receipt, "prefill")
    if not pre:
        return None
    st = _section_dict(receipt, "settings")
    iso = st.get("prefill_cache_isolation")
    note = (f"prefill tok/s = prompt tokens / TTFT of a streamed /v1/completions request with max_tokens "
            f"{st.get('prefill_tokens', 8)}; cold = prompt cache isolated"
            + (f" ({iso})" if iso else "")
            + ", warm = the same prompt replayed at once; usable = cold · warm samples.")
    sec = Section("prefill", "prefill — per prompt depth in tokens (tok/s; TTFT in seconds)", note,
                  ("depth", "cold tok/s", "cold TTFT", "warm tok/s", "warm TTFT", "cold check", "usable"))
    for depth, p in _sorted_numeric(pre):
        p = p if isinstance(p, dict) else {}
        cold = p.get("cold")
        cold = cold if isinstance(cold, dict) else {}
        warm = p.get("warm_replay")
        warm = warm if isinstance(warm, dict) else {}
        label = str(p.get("cold_verification") or DASH)
        cold_runs = cold.get("runs")
        cold_runs = cold_runs if isinstance(cold_runs, list) else []
        warm_runs = warm.get("runs")
        warm_runs = warm_runs if isinstance(warm_runs, list) else []
        sec.rows.append((
            Cell(str(depth)),
            Cell(fmt_rate(_summary(cold.get("effective_prefill_tokens_per_second"), "median"))),
            Cell(fmt_seconds(_summary(cold.get("ttft_seconds"), "median"))),
            Cell(fmt_rate(_summary(warm.get("effective_prefill_tokens_per_second"), "median"))),
            Cell(fmt_seconds(_summary(warm.get("ttft_seconds"), "median"))),
            Cell(label, "good" if label == "server-verified" else "warn"),
            _usable_cell(_usable(cold_runs), _usable(warm_runs))))
        sec.details += _unusable_lines(f"depth {depth} cold", cold_runs)
        sec.details += _unusable_lines(f"depth {depth} warm", warm_runs)
    return sec


def _concurrency(receipt: dict[str, Any]) -> Section | None:
    con = _section_dict(receipt, "concurrency")
    if not con:
        return None
    st = _section_dict(receipt, "settings")
    extra = []
    if st.get("concurrency_workload"):
        extra.append(f"workload {st['concurrency_workload']}")
    if st.get("concurrency_tokens") is not None:
        extra.append(f"max_tokens {st['concurrency_tokens']}")
    note = ("aggregate tok/s = completion tokens of all streams / round wall time, streams released together by "
            "a barrier; per-stream figures are medians over every stream of every round"
            + (f"; {', '.join(extra)}" if extra else "") + ".")
    sec = Section("concurrency", "concurrency — per level (tok/s; median TTFT in seconds)", note,
                  ("streams", "aggregate", "min–max", "per-stream", "stream TTFT s", "rounds", "usable"))
    for level, c in _sorted_numeric(con):
        c = c if isinstance(c, dict) else {}
        agg = c.get("aggregate_end_to_end_tokens_per_second")
        rounds = c.get("rounds")
        rounds = rounds if isinstance(rounds, list) else []
        streams = [s for r in rounds if isinstance(r, dict) for s in (r.get("streams") or [])]
        sec.rows.append((Cell(str(level)), Cell(fmt_rate(_summary(agg, "median"))), Cell(_range(agg)),
                         Cell(fmt_rate(_summary(c.get("per_stream_decode_tokens_per_second"), "median"))),
                         Cell(fmt_seconds(_summary(c.get("per_stream_ttft_seconds"), "median"))),
                         Cell(str(len(rounds))), _usable_cell(_usable(streams))))
        for r in rounds:
            if isinstance(r, dict):
                sec.details += _unusable_lines(f"level {level} round {r.get('round', '?')}", r.get("streams") or [],
                                               ident="stream")
    return sec


def card_model(receipt: dict[str, Any]) -> CardModel:
    """Lay out an appliance receipt (``inferencekit.appliance.v1``, as parsed JSON) as printed strings.

    Sections absent or empty in the receipt are left out; their reasons come from ``skipped``.
    Missing fields print as "—"; nothing here raises on a partial receipt (``report.ops`` checks the
    format before drawing).
    """
    title, header, header_note = _header(receipt)
    sections = [s for s in (_decode(receipt), _prefill(receipt), _concurrency(receipt)) if s is not None]
    skipped = [(str(k), str(v)) for k, v in _section_dict(receipt, "skipped").items()]
    lims = receipt.get("limitations")
    return CardModel(
        title=title, header=header, header_note=header_note, sections=sections, skipped=skipped,
        verdict=str(receipt.get("verdict") or DASH),
        verdict_note="PASS when every sample of every section that ran was usable and every decode completion "
                     "gate passed; otherwise UNPROVEN, with the reasons below.",
        limitations=[str(x) for x in lims] if isinstance(lims, list) else [])


# --------------------------------------------------------------------------------------------- rich

def _text(cell: Cell) -> Any:
    from rich.text import Text

    return Text(cell.text, style=_RICH_STYLE.get(cell.tag or "", ""))


def render_appliance(console: Any, receipt: dict[str, Any]) -> None:
    """Draw the appliance card of ``receipt`` (a parsed ``inferencekit.appliance.v1`` receipt) on a rich
    ``console``: header panel, decode / prefill / concurrency tables (each with its "how measured"
    line), skipped sections with their reasons, the verdict and the limitations."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    m = card_model(receipt)
    # short values two pairs to a row, long ones (label, tool revision, ...) a row each, so none wraps
    width = max((len(k) for k, _ in m.header), default=0)
    short = [p for p in m.header if len(p[1]) <= _SHORT]
    long_ = [p for p in m.header if len(p[1]) > _SHORT]
    pairs_grid = Table.grid(padding=(0, 2))
    for _ in range(2):
        pairs_grid.add_column(style="bold", no_wrap=True, min_width=width)
        pairs_grid.add_column(min_width=_SHORT)
    for i in range(0, len(short), 2):
        row: list[Any] = []
        for k, v in short[i:i + 2]:
            row += [Text(k), Text(v)]
        pairs_grid.add_row(*row)
    long_grid = Table.grid(padding=(0, 2))
    long_grid.add_column(style="bold", no_wrap=True, min_width=width)
    long_grid.add_column()
    for k, v in long_:
        long_grid.add_row(Text(k), Text(v))
    grid = Group(pairs_grid, long_grid) if long_ else pairs_grid
    console.print(Panel(grid, title=Text(f"appliance receipt — {m.title}"), title_align="left",
                        subtitle=Text(m.verdict, style=verdict_style(m.verdict)), subtitle_align="right"))
    console.print(m.header_note, markup=False, style="dim")
    for sec in m.sections:
        t = Table(title=sec.title, title_justify="left")
        for i, col in enumerate(sec.columns):
            # figures never wrap or get cut: the name column gives way first
            t.add_column(col, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
        for cells in sec.rows:
            t.add_row(*(_text(c) for c in cells))
        console.print(t)
        console.print(f"how measured: {sec.note}", markup=False, style="dim")
        for line in sec.details:
            console.print(line, markup=False, style="red")
    for name, why in m.skipped:
        console.print(f"skipped {name}: {why}", markup=False, style="yellow")
    verdict_line = Text("verdict: ")
    verdict_line.append(m.verdict, style=verdict_style(m.verdict))
    console.print(verdict_line)
    console.print(m.verdict_note, markup=False, style="dim")
    for lim in m.limitations:
        console.print(f"limitation: {lim}", markup=False, style="yellow")


def card_text(receipt: dict[str, Any], width: int = 100) -> str:
    """The card of ``render_appliance`` as plain text (no colour codes), ``width`` columns wide."""
    from rich.console import Console

    console = Console(record=True, width=width, file=io.StringIO(), color_system=None, force_terminal=False,
                      soft_wrap=False, highlight=False)
    render_appliance(console, receipt)
    return console.export_text(styles=False)
