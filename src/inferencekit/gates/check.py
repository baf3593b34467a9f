"""``gates check RUN_DIR``: judge a recorded run offline with the gates that need no server.

The run-dir gates (../shared/seeds/000, with DESIGN.md's departure: the load replies ``load-*/`` are
read too) are token_count, output_length and unique_prompts. The live gates — caching,
hidden_probes, rare_tokens, spec_exact — need probes sent to a server; a run dir without their
replies lists them as NOT RUN, not applicable, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.gates.result import GATES, Gate
from inferencekit.gates.rundir_checks import gate_output_length_static, gate_unique_prompts
from inferencekit.gates.token_count import count_row, gate_token_count
from inferencekit.rundir import read_json

__all__ = ["engines_in", "token_rows", "check_run_dir", "LIVE_GATES"]

LIVE_GATES = ("caching", "spec_exact", "hidden_probes", "rare_tokens")
RETOK_TOL = 0.02  # re-tokenized count tolerance of the token_count gate (the seed's value)


def engines_in(run_dir: Path) -> list[str]:
    """Engine labels with outputs in ``run_dir`` (``outputs/<engine>/``), sorted."""
    base = run_dir / "outputs"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def token_rows(run_dir: Path, engine: str) -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """Count rows of every load reply of ``engine`` (``count_row``), the re-tokenizer named in the levels'
    ``retokenized.json`` (None when no level has one), and the reply files read (relative paths).

    A reply's ``max_tokens`` comes from its request body (``inputs/…``, same relative path)."""
    rows: list[dict[str, Any]] = []
    files: list[str] = []
    tokenizer = None
    for level in sorted((run_dir / "outputs" / engine).glob("load-*")):
        if not level.is_dir():
            continue
        retok = read_json(level / "retokenized.json") or {}
        counts = retok.get("counts") or {}
        tokenizer = tokenizer or retok.get("tokenizer")
        for path in sorted(level.glob("*/*.json")):
            reply = read_json(path)
            if not isinstance(reply, dict):
                continue
            rel = path.relative_to(run_dir)
            body = read_json(run_dir / "inputs" / rel.relative_to("outputs")) or {}
            mt = body.get("max_tokens") if isinstance(body, dict) else None
            row = count_row(f"{level.name}/{path.parent.name}/{path.stem}", reply,
                            max_tokens=mt if isinstance(mt, int) else None, retokenized=counts.get(path.stem))
            files.append(rel.as_posix())
            if row is not None:
                rows.append(row)
    return rows, tokenizer, files


def check_run_dir(run_dir: Path, engine: str, *, reference: Path | None = None, length_tolerance: float = 0.10,
                  max_length_outliers: float = 0.10) -> tuple[list[Gate], list[str]]:
    """Every gate judged from the files of ``run_dir`` alone, in ``GATES`` order, and the reply files read.

    Args:
        engine: the ``outputs/<engine>/`` label to judge.
        reference: another engine's outputs folder (same layout) for the output_length comparison.
        length_tolerance, max_length_outliers: output_length's per-prompt tolerance and allowed share of
            outliers (the seed's defaults, 10% and 10%).
    """
    run = read_json(run_dir / "run.json") or {}
    ignored = tuple((run.get("dialect") or {}).get("known_ignored_options") or ())
    rows, tokenizer, files = token_rows(run_dir, engine)
    by_name = {
        "token_count": gate_token_count(rows, retok_tol=RETOK_TOL, tokenizer=tokenizer),
        "output_length": gate_output_length_static(run_dir, engine, reference=reference, tol=length_tolerance,
                                                   max_outliers=max_length_outliers, ignored_options=ignored),
        "unique_prompts": gate_unique_prompts(run_dir),
    }
    for name in LIVE_GATES:
        by_name[name] = Gate(name, "NOT RUN", "a live gate: it needs probes sent to a server, and this run dir holds "
                             "no probe replies for it", applicable=False)
    return [by_name[g] for g in GATES], files
