"""``gates check RUN_DIR``: judge a recorded run offline, with the same code the live gates use.

This module reads; the judges (``gates/judges/``) decide. From a run dir it reads, through
``rundir.py``'s readers:

- the load replies and request bodies (token_count, output_length, unique_prompts; docs/design.md's
  departure from the seed: the load folders ``load-*/`` are read too) into ``RunRows``;
- every gate run's probe log ``probes/<gate-run>.jsonl`` into a ``ProbeRun`` each (the live gates
  re-judged from the recorded replies with the settings in the log's header);
- the hidden probes a load mixed in (``bench serve --probes``, ``outputs/<engine>/probes/``) and the
  known answers of ``bench serve --kat`` (``outputs/<engine>/kat/``) and the structured requests of ``bench serve
  --structured`` (``outputs/<engine>/structured/``) into ``RunRows`` too.

Then every gate of ``GATES`` gets its parts (run dir first, then each gate run), merged into one
``Gate`` (``merge_gates``). A live gate with no probe replies in the run dir is NOT RUN, not
applicable, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferencekit.gates import GATES
from inferencekit.gates.inputs import LengthInputs, ProbeRun, RunRows, dropped_note, reply_file
from inferencekit.gates.judges.order import compare_sample
from inferencekit.gates.judges.output_length import exact_length_of, forcing_options, reply_length
from inferencekit.gates.judges.structured_load import structured_row
from inferencekit.gates.judges.token_count import count_row
from inferencekit.gates.judges.unique_prompts import request_row, schedule_rows
from inferencekit.gates.probes.collect import read_probe_log
from inferencekit.gates.result import Gate, merge_gates
from inferencekit.rundir import (
    KAT_ALONE,
    KAT_LOAD,
    PROBES_FOLDER,
    RETOKENIZED_FILE,
    RunDir,
    file_key,
    gate_run_name,
    read_json,
    walk_engine_folder,
)
from inferencekit.shapes import CountRow, ProbeRecord, is_ok

__all__ = ["Checked", "check_run_dir", "engines_in", "judge_probe_log", "load_requests", "output_lengths",
           "read_run_rows", "read_structured", "retokenize_refusals", "token_rows"]


@dataclass(frozen=True, slots=True)
class Checked:
    """What ``check_run_dir`` found: one ``Gate`` per row of ``GATES`` (in its order), the files judged (paths
    relative to the run dir) and notes on the reading (a torn probe-log line, refused ``--extra-body`` fields)."""

    gates: list[Gate]
    files: list[str]
    notes: list[str]


def engines_in(run_dir: Path) -> list[str]:
    """Engine labels with outputs in ``run_dir`` (``outputs/<engine>/``) or probe logs (``probes/``), sorted."""
    run = RunDir(run_dir)
    labels = set(run.engines())
    for path in run.gate_run_logs():
        engine = read_probe_log(path)[0].get("engine")
        if isinstance(engine, str):
            labels.add(engine)
    return sorted(labels)


def _rel(run: RunDir, path: Path) -> str:
    return path.relative_to(run.path).as_posix()


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def token_rows(run_dir: Path, engine: str) -> tuple[list[CountRow], str | None, list[str]]:
    """Count rows of every reply of ``engine`` (``count_row``): the load levels' (``load-*/``), then those outside
    them (``RunDir.side_replies``: the warm-up, the hidden probes and the known answers a load mixed in); the
    re-tokenizer named in the levels' ``retokenized.json`` (None when no level has one); and the reply files
    read (relative paths). Re-tokenized counts are the levels' ``retokenized.json`` and, for the replies outside
    them, ``outputs/<engine>/retokenized.json`` (keyed ``<folder>/<file key>``; a run recorded before it has none
    there); a level's ``errors`` (texts the tokenizer refused) are left to ``retokenize_refusals``.

    A reply's ``max_tokens`` comes from its request body (``inputs/…``, same relative path); a warm-up written
    without one takes the run's ``bench_config.max_tokens`` (run.json), as the warm-up is sent with the load's
    body. Gzipped files (``.json.gz``, an archived run) are read like the others."""
    run = RunDir(run_dir)
    rows: list[CountRow] = []
    files: list[str] = []
    tokenizer = None

    def add(key: str, path: Path, retokenized: Any, default_max: int | None = None) -> None:
        reply = read_json(path)
        if not isinstance(reply, dict):
            return
        body = read_json(run.input_of(path))
        mt = _int_or_none(body.get("max_tokens")) if isinstance(body, dict) else default_max
        row = count_row(key, reply_file(reply), max_tokens=mt, retokenized=_int_or_none(retokenized))
        files.append(_rel(run, path))
        if row is not None:
            rows.append(row)

    for level in run.levels(engine):
        found = read_json(run.level_dir("outputs", engine, level) / RETOKENIZED_FILE)
        retok: dict[str, Any] = found if isinstance(found, dict) else {}
        raw_counts = retok.get("counts")
        counts: dict[str, Any] = raw_counts if isinstance(raw_counts, dict) else {}
        tokenizer = tokenizer or (retok.get("tokenizer") if isinstance(retok.get("tokenizer"), str) else None)
        for path in run.level_files("outputs", engine, level):
            add(f"load-{level}/{path.parent.name}/{file_key(path)}", path, counts.get(file_key(path)))
    config = run.read_run().get("bench_config")
    warm_max = _int_or_none(config.get("max_tokens")) if isinstance(config, dict) else None
    found = read_json(run.side_retokenized(engine))  # the side replies' counts (bench/serve.py)
    raw_side = found.get("counts") if isinstance(found, dict) else None
    side: dict[str, Any] = raw_side if isinstance(raw_side, dict) else {}
    for folder, path in run.side_replies(engine):
        key = f"{folder}/{file_key(path)}"
        add(key, path, side.get(key), warm_max if folder == "warmup" else None)
    return rows, tokenizer, files


def retokenize_refusals(run_dir: Path, engine: str) -> dict[str, str]:
    """The load replies whose text the tokenizer refused (a 422 from ``/tokenize``), ``{"load-<level>/<key>":
    error}``, from each level's ``retokenized.json`` ``errors`` (``bench/serve.py`` writes them)."""
    run = RunDir(run_dir)
    out: dict[str, str] = {}
    for level in run.levels(engine):
        retok = read_json(run.level_dir("outputs", engine, level) / RETOKENIZED_FILE)
        errors = retok.get("errors") if isinstance(retok, dict) else None
        if isinstance(errors, dict):
            out.update({f"load-{level}/{k}": str(v)[:200] for k, v in errors.items()})
    return out


def _key(level: str | None, path: Path) -> str:
    """``<id>[~k]`` for a top-level request, ``load-<level>/<id>[~k]`` for a load request (ids repeat across levels,
    so the level is part of the key)."""
    return file_key(path) if level is None else f"load-{level}/{file_key(path)}"


def output_lengths(outputs: Path) -> dict[str, dict[str, Any]]:
    """Generated length of every reply of one engine's outputs folder (``outputs/<engine>``, of this run dir or
    another's; top-level buckets and load levels, not the warm-up or the extra requests' folders), by ``_key``:
    ``{"source" (relative to the folder), "bucket", "level", "length", "method", "problem"}`` (``reply_length``)."""
    out: dict[str, dict[str, Any]] = {}
    for level, p in walk_engine_folder(outputs):
        length, method, problem = reply_length(read_json(p))
        out[_key(level, p)] = {"source": p.relative_to(outputs).as_posix(), "bucket": p.parent.name, "level": level,
                               "length": length, "method": method, "problem": problem}
    return out


def exact_requests(run: RunDir, engine: str) -> dict[str, tuple[int, frozenset[str], str]]:
    """``{key: (max_tokens, forcing options, source)}`` for one engine's exact-length request bodies."""
    out = {}
    for level, p in run.walk("inputs", engine):
        body = read_json(p)
        want = exact_length_of(body) if isinstance(body, dict) else None
        if want is not None:
            out[_key(level, p)] = (want, forcing_options(body), _rel(run, p))
    return out


def load_requests(run: RunDir) -> tuple[list[dict[str, Any]], int, list[str]]:
    """One ``request_row`` per load request of every engine: the request bodies of each level, or its reply files
    when the level holds no bodies; with no load level at all, the rows of any load schedule another harness left
    (``RunDir.schedule_files``, ``schedule_rows``). Also the count of schedule lines that held no request, and the
    schedule files read (relative paths)."""
    rows = _level_requests(run)
    if rows:
        return rows, 0, []
    bad, files = 0, []
    for path in run.schedule_files():
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        rel = _rel(run, path)
        got, n_bad = schedule_rows(rel, lines, path.parent.relative_to(run.path).as_posix() or ".")
        rows += got
        bad += n_bad
        files.append(rel)
    return rows, bad, files


def _level_requests(run: RunDir) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    levels = sorted({(e, lv) for kind in ("inputs", "outputs") for e in run.load_engines(kind)
                     for lv in run.levels(e, kind)})
    for engine, level in levels:
        bodies = run.level_files("inputs", engine, level)
        from_inputs = bool(bodies)
        for p in bodies or run.level_files("outputs", engine, level):
            row = request_row(_rel(run, p), engine, level, file_key(p).split("~", 1)[0], read_json(p),
                              from_inputs=from_inputs)
            if row is not None:
                rows.append(row)
    return rows


def _probe_meta(reply: dict[str, Any]) -> dict[str, Any]:
    """The planner's ``meta`` a load wrote into a probe's reply file (``probe_meta``: ``bench/runner.py``), its
    string values only (the file is untrusted: anything else is left out); {} when absent."""
    meta = reply.get("probe_meta")
    if not isinstance(meta, dict):
        return {}
    return {k: v for k, v in meta.items() if isinstance(k, str) and isinstance(v, str)}


def load_probe_records(run: RunDir, engine: str) -> tuple[list[ProbeRecord], list[str]]:
    """The hidden-probe records a load mixed in (``outputs/<engine>/probes/<key>.<kind>.json``, bodies from
    ``inputs/…``; ``meta`` from the reply's ``probe_meta``, e.g. ``prompt_source``), and the files read."""
    records: list[ProbeRecord] = []
    files = []
    for path in run.extra_files(engine, PROBES_FOLDER, gz=True):
        reply = read_json(path)
        key, _, kind = file_key(path).rpartition(".")
        if not isinstance(reply, dict) or not key:
            continue
        body = read_json(run.input_of(path)) or {}
        records.append({"id": file_key(path), "kind": kind, "key": key, "meta": _probe_meta(reply), "body": body,
                        "reply": reply_file(reply)})
        files.append(_rel(run, path))
    return records, files


def _kat_folders(run: RunDir, engine: str) -> list[tuple[str, str | None]]:
    """``(folder, level or None)`` of every known-answer folder under load: ``kat/load`` (the one level of ``bench
    serve --kat``), then each ``kat/load-<level>`` (every point of ``bench sweep``)."""
    return [(KAT_LOAD, None), *((folder, level) for level, folder in run.kat_level_folders(engine))]


def load_kat_records(run: RunDir, engine: str) -> list[ProbeRecord]:
    """The known-answer replies a load mixed in (``kat/alone/``, ``kat/load/``, ``kat/load-<level>/``) as probe
    records (kind ``kat``, id ``<folder>/<key>``), for what they share with the hidden probes: the fields the client
    dropped on an HTTP 400 (``dropped_note``)."""
    records: list[ProbeRecord] = []
    for folder in (KAT_ALONE, *(f for f, _ in _kat_folders(run, engine))):
        for path in run.extra_files(engine, folder, gz=True):
            reply = read_json(path)
            if isinstance(reply, dict):
                records.append({"id": f"{folder}/{file_key(path)}", "kind": "kat", "key": file_key(path), "meta": {},
                                "body": {}, "reply": reply_file(reply)})
    return records


def read_kat(run: RunDir, engine: str, levels: Sequence[str] | None = None
             ) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """``compare_sample`` rows (alone first, then each copy under load) of every known-answer request of ``engine``,
    the reply files read (relative paths) and the level(s) the load copies ran in (None when none did).

    ``levels``: only the copies sent inside these levels (``bench sweep`` judges each point on its own); default
    every level's. A request sent alone but in none of them is a row with no copy under load (UNMEASURED).
    """
    alone = {file_key(p): p for p in run.extra_files(engine, KAT_ALONE, gz=True)}
    loads: list[tuple[str | None, dict[str, Path]]] = []
    for folder, level in _kat_folders(run, engine):
        files = {file_key(p): p for p in run.extra_files(engine, folder, gz=True)}
        if files and (levels is None or (level is not None and level in levels)):
            loads.append((level, files))
    rows, files_read = [], []
    seen_levels: list[str] = []
    for key in sorted(set(alone).union(*(set(f) for _, f in loads))):
        a = read_json(alone[key]) if key in alone else None
        variants: list[tuple[str, dict[str, Any] | None]] = [("alone", a if isinstance(a, dict) else None)]
        files_read += [_rel(run, alone[key])] if key in alone else []
        for level, by_key in loads:
            b = read_json(by_key[key]) if key in by_key else None
            where = level or ((b or {}).get("level") if isinstance(b, dict) else None)
            if where and where not in seen_levels:
                seen_levels.append(where)
            if key in by_key:
                files_read.append(_rel(run, by_key[key]))
            variants.append((f"inside {where}" if level else "under load", b if isinstance(b, dict) else None))
        if len(variants) == 1:
            variants.append(("under load", None))
        rows.append(compare_sample(key, variants, tokens=True))
    return rows, files_read, ", ".join(seen_levels) or None


def read_structured(run: RunDir, engine: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``structured_row`` of every structured request of ``engine`` (``bench serve --structured``): the copies sent
    alone (``structured/alone/``), then each level's (``structured/load-<level>/``); and the reply files read."""
    rows: list[dict[str, Any]] = []
    files: list[str] = []
    for level, folder in run.structured_folders(engine):
        for path in run.extra_files(engine, folder, gz=True):
            reply = read_json(path)
            row = structured_row(level, file_key(path), reply) if isinstance(reply, dict) else None
            if row is not None:
                rows.append(row)
                files.append(_rel(run, path))
    return rows, files


def read_run_rows(run_dir: Path, engine: str, *, reference: Path | None = None, length_tolerance: float = 0.10,
                  max_length_outliers: float = 0.10, ignored_options: Sequence[str] | None = None
                  ) -> tuple[RunRows, list[str]]:
    """Everything the gates judge from ``run_dir``'s own files for ``engine``, and the files read.

    Args:
        reference: another engine's outputs folder (same layout) for output_length's comparison.
        length_tolerance, max_length_outliers: output_length's per-prompt tolerance and allowed share of outliers.
        ignored_options: options the engine drops (None: the dialect's, from run.json).
    """
    run = RunDir(run_dir)
    counts, tokenizer, files = token_rows(run.path, engine)
    lengths = output_lengths(run.engine_outputs(engine))
    ignored = tuple(ignored_options if ignored_options is not None else
                    (run.read_run().get("dialect") or {}).get("known_ignored_options") or ())
    ref = output_lengths(reference) if reference is not None else None
    length_inputs = LengthInputs(lengths, exact_requests(run, engine), ref, str(reference) if reference else "",
                                 length_tolerance, max_length_outliers, ignored) if lengths else None
    mixed, mixed_files = load_probe_records(run, engine)
    kat_rows, kat_files, kat_level = read_kat(run, engine)
    structured, structured_files = read_structured(run, engine)
    requests, bad_lines, schedules = load_requests(run)
    has_load = any(f.startswith(f"outputs/{engine}/load-") for f in files)
    rows = RunRows(engine=engine, has_load=has_load, count_rows=counts, tokenizer=tokenizer, lengths=length_inputs,
                   retokenize_refused=retokenize_refusals(run.path, engine),
                   requests=requests, journals=[_rel(run, p) for p in run.journals()],
                   unreadable_schedule_lines=bad_lines, mixed_probes=mixed, kat_rows=kat_rows, kat_level=kat_level,
                   kat_records=load_kat_records(run, engine), structured_rows=structured)
    return rows, list(dict.fromkeys(files + mixed_files + kat_files + structured_files + schedules))


def judge_probe_log(header: dict[str, Any], records: Sequence[ProbeRecord], *, where: str = "live"
                    ) -> dict[str, Gate]:
    """The gates one gate run asked for (``header["settings"]["gates"]``) that have a live part, by name.

    A gate that needs an answered probe (``GateSpec.needs_answer``) is NOT RUN when the endpoint answered none.
    """
    run = ProbeRun(header, records, where)
    asked = [GATES[g] for g in run.settings.get("gates") or () if g in GATES and GATES[g].judge_probes is not None]
    answered = any(r.get("reply") and is_ok(r["reply"] or {}) for r in records
                   if not str(r.get("kind", "")).endswith("_reference"))
    out: dict[str, Gate] = {}
    for spec in asked:
        assert spec.judge_probes is not None
        if spec.needs_answer and not answered:
            first = next((err for r in records if (err := (r.get("reply") or {}).get("error"))), None)
            out[spec.name] = Gate(spec.name, "NOT RUN", "the endpoint answered no probe"
                                  + (f" (first error: {first[:200]})" if first else ""))
        else:
            gate = spec.judge_probes(run)
            drop = dropped_note(r for r in records if r.get("kind") in spec.probe_kinds)
            out[spec.name] = gate.replace(fallbacks=(*gate.fallbacks, drop)) if drop else gate
    return out


def _gate_run_parts(run: RunDir, engine: str, gate_runs: Sequence[str] | None
                    ) -> tuple[dict[str, list[Gate]], list[str], list[str]]:
    """Gates judged from the probe logs of ``engine`` (all, or those named in ``gate_runs``): parts by gate name,
    the log files read, and notes (torn lines, refused ``--extra-body`` fields)."""
    parts: dict[str, list[Gate]] = {}
    files, notes = [], []
    for path in run.gate_run_logs():
        if gate_runs is not None and gate_run_name(path) not in gate_runs:
            continue
        header, records, bad = read_probe_log(path)
        if header.get("engine") not in (None, engine):
            continue
        rel = _rel(run, path)
        files.append(rel)
        if bad:
            notes.append(f"{rel}: {bad} unreadable line(s) skipped (a write cut short?)")
        refused = ((header.get("settings") or {}).get("request_policy") or {}).get("refused_fields") or []
        if refused:
            notes.append(f"{rel}: --extra-body fields {', '.join(refused)} were not sent: the probes set them "
                         "themselves")
        for name, gate in judge_probe_log(header, records).items():
            parts.setdefault(name, []).append(gate)
    return parts, files, notes


def check_run_dir(run_dir: Path, engine: str, *, reference: Path | None = None, length_tolerance: float = 0.10,
                  max_length_outliers: float = 0.10, gate_runs: Sequence[str] | None = None,
                  only: Sequence[str] | None = None) -> Checked:
    """Every gate of ``GATES`` judged from ``run_dir`` for ``engine`` (module docstring).

    Args:
        reference: another engine's outputs folder for output_length's per-prompt comparison.
        length_tolerance, max_length_outliers: output_length's per-prompt tolerance and allowed share of
            outliers (the seed's defaults, 10% and 10%).
        gate_runs: judge only these probe logs (``probes/<name>.jsonl`` stems); None = all of them.
        only: judge only these gates (e.g. those a load's extra requests feed); None = every gate.
    """
    rows, files = read_run_rows(run_dir, engine, reference=reference, length_tolerance=length_tolerance,
                                max_length_outliers=max_length_outliers)
    parts, logs, notes = _gate_run_parts(RunDir(run_dir), engine, gate_runs)
    files += logs
    out = []
    for spec in GATES.values():
        if only is not None and spec.name not in only:
            continue
        mine = list(parts.get(spec.name, ()))
        from_run = spec.judge_run(rows) if spec.judge_run is not None else None
        if from_run is not None:
            if not rows.has_load and from_run.verdict == "NOT RUN":
                from_run = from_run.replace(applicable=False)  # nothing of the load to judge (a gates order run dir)
            if rows.has_load or not mine or from_run.verdict != "NOT RUN":
                mine.insert(0, from_run)
        if mine:
            out.append(merge_gates(spec.name, mine))
        elif spec.judge_probes is not None:
            out.append(Gate(spec.name, "NOT RUN", f"a live gate: it needs probes sent to a server (`{spec.command}`), "
                            "and this run dir holds no probe replies for it", applicable=False))
        else:
            out.append(Gate(spec.name, "NOT RUN", "this run dir holds nothing it judges", applicable=False))
    return Checked(out, files, notes)
