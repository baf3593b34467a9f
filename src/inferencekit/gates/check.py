"""``gates check RUN_DIR``: judge a recorded run offline, with the same code the live gates use.

Three sources, each judged and then merged per gate (``merge_gates``):

- the run-dir gates on the load replies (../shared/seeds/000, with DESIGN.md's departure: the load
  folders ``load-*/`` are read too): token_count, output_length, unique_prompts;
- every gate run's probe log ``probes/<gate-run>.jsonl`` (``gates run``): the live gates re-judged
  from the recorded replies with the settings in the log's header;
- the hidden probes a load mixed in (``bench serve --probes``, ``outputs/<engine>/probes/``):
  hidden_probes judged as probes sent under load;
- the known-answer requests of ``bench serve --kat`` (``outputs/<engine>/kat/``): the order gate,
  alone vs under load.

A live gate with no probe replies in the run dir is NOT RUN, not applicable, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit.bench.kat import judge_kat, read_kat
from inferencekit.gates.judge_probes import judge_gate_run
from inferencekit.gates.live_hidden import gate_hidden_probes
from inferencekit.gates.probe_collect import probe_logs, read_probe_log
from inferencekit.gates.result import GATES, Gate, merge_gates
from inferencekit.gates.rundir_checks import gate_output_length_static, gate_unique_prompts
from inferencekit.gates.token_count import count_row, gate_token_count
from inferencekit.rundir import read_json

__all__ = ["engines_in", "token_rows", "check_run_dir", "LIVE_GATES", "load_probe_records", "gate_run_parts"]

LIVE_GATES = ("caching", "spec_exact", "hidden_probes", "rare_tokens")
RETOK_TOL = 0.02  # re-tokenized count tolerance of the token_count gate (the seed's value)


def engines_in(run_dir: Path) -> list[str]:
    """Engine labels with outputs in ``run_dir`` (``outputs/<engine>/``) or probe logs (``probes/``), sorted."""
    base = run_dir / "outputs"
    labels = {p.name for p in base.iterdir() if p.is_dir()} if base.is_dir() else set()
    for path in probe_logs(run_dir):
        engine = read_probe_log(path)[0].get("engine")
        if isinstance(engine, str):
            labels.add(engine)
    return sorted(labels)


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


def load_probe_records(run_dir: Path, engine: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The hidden-probe records a load mixed in (``outputs/<engine>/probes/<key>.<kind>.json``, bodies from
    ``inputs/…``), and the files read."""
    records, files = [], []
    for path in sorted((run_dir / "outputs" / engine / "probes").glob("*.json")):
        reply = read_json(path)
        key, _, kind = path.stem.rpartition(".")
        if not isinstance(reply, dict) or not key:
            continue
        body = read_json(run_dir / "inputs" / engine / "probes" / path.name) or {}
        records.append({"id": path.stem, "kind": kind, "key": key, "meta": {}, "body": body, "reply": reply})
        files.append(path.relative_to(run_dir).as_posix())
    return records, files


def gate_run_parts(run_dir: Path, engine: str, gate_runs: list[str] | None = None
                   ) -> tuple[dict[str, list[Gate]], list[str], list[str]]:
    """Gates judged from the probe logs of ``engine`` (all, or those named in ``gate_runs``): parts by gate
    name, the log files read, and notes (e.g. torn lines)."""
    parts: dict[str, list[Gate]] = {}
    files, notes = [], []
    for path in probe_logs(run_dir):
        if gate_runs is not None and path.stem not in gate_runs:
            continue
        header, records, bad = read_probe_log(path)
        if header.get("engine") not in (None, engine):
            continue
        rel = path.relative_to(run_dir).as_posix()
        files.append(rel)
        if bad:
            notes.append(f"{rel}: {bad} unreadable line(s) skipped (a write cut short?)")
        for name, gate in judge_gate_run(header, records).items():
            parts.setdefault(name, []).append(gate)
    return parts, files, notes


def check_run_dir(run_dir: Path, engine: str, *, reference: Path | None = None, length_tolerance: float = 0.10,
                  max_length_outliers: float = 0.10, gate_runs: list[str] | None = None
                  ) -> tuple[list[Gate], list[str]]:
    """Every gate judged from the files of ``run_dir`` alone, in ``GATES`` order, and the files read.

    Args:
        engine: the ``outputs/<engine>/`` label to judge.
        reference: another engine's outputs folder (same layout) for the output_length comparison.
        length_tolerance, max_length_outliers: output_length's per-prompt tolerance and allowed share of
            outliers (the seed's defaults, 10% and 10%).
        gate_runs: judge only these probe logs (``probes/<name>.jsonl`` stems); None = all of them.
    """
    run = read_json(run_dir / "run.json") or {}
    ignored = tuple((run.get("dialect") or {}).get("known_ignored_options") or ())
    rows, tokenizer, files = token_rows(run_dir, engine)
    has_load = bool(files)
    parts, logs, notes = gate_run_parts(run_dir, engine, gate_runs)
    files += logs
    static = {
        "token_count": gate_token_count(rows, retok_tol=RETOK_TOL, tokenizer=tokenizer),
        "output_length": gate_output_length_static(run_dir, engine, reference=reference, tol=length_tolerance,
                                                   max_outliers=max_length_outliers, ignored_options=ignored),
        "unique_prompts": gate_unique_prompts(run_dir),
    }
    for name, gate in static.items():
        if not has_load and gate.verdict == "NOT RUN":
            gate.applicable = False  # nothing of the load to judge (e.g. a run dir of gates order alone)
        if has_load or name not in parts or gate.verdict != "NOT RUN":
            parts.setdefault(name, []).insert(0, gate)
    kat_rows, kat_files, kat_level = read_kat(run_dir, engine)
    if kat_rows:
        parts.setdefault("order", []).append(judge_kat(kat_rows, kat_level))
        files += kat_files
    mixed, mixed_files = load_probe_records(run_dir, engine)
    if mixed:
        parts.setdefault("hidden_probes", []).append(gate_hidden_probes(mixed, where="load"))
        files += mixed_files
    out = []
    for name in GATES:
        if name in parts:
            gate = merge_gates(name, parts[name])
        else:
            gate = Gate(name, "NOT RUN", "a live gate: it needs probes sent to a server, and this run dir holds no "
                        "probe replies for it", applicable=False)
        gate.limitations.extend(notes if name == GATES[0] else [])
        out.append(gate)
    return out, files
