"""Correctness under load (``bench serve --kat N``): known answers alone, then inside the heaviest level.

N greedy requests from the packaged dev prompts (chat, short and medium buckets, in file order) are
sent one at a time before the load, into ``outputs/<engine>/kat/alone/``; the same bodies are then
mixed into the heaviest load level (``heaviest_level``) as hidden requests, into
``outputs/<engine>/kat/load/`` (bodies under ``inputs/`` at the same paths). The order gate's
comparison (``gates/order_judge.py``) then asks whether each reply under load is byte-identical to
its reply alone: at temperature 0 a batch, a busy cache or a preempted slot must not change an
answer. Not part of the level's metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferencekit.bench.plan import LevelSpec
from inferencekit.gates.order_collect import order_body
from inferencekit.gates.order_judge import compare_sample, judge_order
from inferencekit.gates.result import Gate
from inferencekit.rundir import read_json, safe_name

__all__ = ["KAT_ALONE", "KAT_LOAD", "heaviest_level", "judge_kat", "kat_pool_size", "kat_probes", "read_kat"]

KAT_ALONE, KAT_LOAD = "kat/alone", "kat/load"


def heaviest_level(levels: Sequence[LevelSpec]) -> str:
    """Label of the level with the most load: the highest request rate when any level is open-loop, else the
    highest concurrency; the last such level on a tie."""
    open_ = [lv for lv in levels if lv.mode == "open"]
    if open_:
        return max(reversed(open_), key=lambda lv: lv.rate or 0.0).label
    return max(reversed(list(levels)), key=lambda lv: lv.concurrency).label


def _pool() -> list[Any]:
    from inferencekit.data.prompts import load_prompt_set
    from inferencekit.gates.probe_plan import probe_pool

    return probe_pool(load_prompt_set("dev").prompts)


def kat_pool_size() -> int:
    """How many known-answer prompts the dev set offers (its short and medium chat prompts)."""
    return len(_pool())


def kat_probes(n: int, *, model: str, max_tokens: int, extra: dict[str, Any], ctk: dict[str, Any]
               ) -> list[dict[str, Any]]:
    """The ``n`` known-answer requests as probe dicts (``id``, ``kind``, ``key``, ``endpoint``, ``body``).

    Raises:
        ValueError: the dev set has fewer than ``n`` chat prompts fit for probes.
    """
    pool = _pool()
    if n > len(pool):
        raise ValueError(f"--kat {n}: the dev set has {len(pool)} short/medium chat prompts")
    return [{"id": f"kat-{p.id}", "kind": "kat", "key": p.id, "endpoint": "/v1/chat/completions",
             "body": order_body({"messages": [dict(m) for m in p.messages or ()]}, model=model, max_tokens=max_tokens,
                                extra=extra, ctk=ctk)} for p in pool[:n]]


def read_kat(run_dir: Path, engine: str) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """``compare_sample`` rows (alone first, then under load) of every known-answer request of ``engine``, the
    reply files read (relative paths) and the level the load copies ran in (None when none did)."""
    base = run_dir / "outputs" / safe_name(engine)
    alone = {p.stem: p for p in sorted((base / KAT_ALONE).glob("*.json"))}
    load = {p.stem: p for p in sorted((base / KAT_LOAD).glob("*.json"))}
    rows, files, level = [], [], None
    for key in sorted(set(alone) | set(load)):
        a = read_json(alone[key]) if key in alone else None
        b = read_json(load[key]) if key in load else None
        level = level or (b or {}).get("level")
        files += [p.relative_to(run_dir).as_posix() for p in (alone.get(key), load.get(key)) if p is not None]
        rows.append(compare_sample(key, [("alone", a if isinstance(a, dict) else None),
                                         ("under load", b if isinstance(b, dict) else None)]))
    return rows, files, level


def judge_kat(rows: Sequence[dict[str, Any]], level: str | None) -> Gate:
    """The order gate on known-answer requests alone vs under load (``judge_order``)."""
    where = f"inside load level {level}" if level else "under load (no copy ran under load)"
    return judge_order(rows, what=f"{len(rows)} known-answer requests alone vs {where}")
