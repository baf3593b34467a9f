"""What a gate's judge is handed: one gate run's probe records, or the rows read from a run directory.

Judges (``gates/judges/<gate>.py``) are pure: they take these, never a run directory. ``gates/check.py``
builds both from the files (through ``rundir.py``'s readers), and ``gates run`` / ``gates order`` build
a ``ProbeRun`` from the probe log they just wrote, so a live run and an offline re-judgement go
through the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from inferencekit.shapes import CountRow, ProbeRecord, ReplyFile

__all__ = ["LengthInputs", "ProbeRun", "RunRows", "dropped_note", "reply_file"]


def reply_file(obj: Mapping[str, Any]) -> ReplyFile:
    """``obj`` taken as the reply file it was written as: a JSON object read back from a run dir or a probe log, or
    the client's ``Exchange.to_reply()``. Nothing is checked here: every reader tests the fields it uses (an absent
    or ill-typed field is unknown, ``shapes``)."""
    return cast(ReplyFile, obj)


def dropped_note(records: Iterable[ProbeRecord], cap: int = 8) -> str | None:
    """A fallback line when the server rejected optional fields of these probes (HTTP 400) and the client sent
    them without (``Exchange.dropped_fields``): which fields, on how many requests, and the requests (their ids,
    at most ``cap``, then how many more); None when none was dropped. What was measured changed: the probes ran
    without what they asked for. A ``dropped_fields`` that is not a list of strings (an edited file) is read as
    its strings only."""
    by_field: dict[str, int] = {}
    ids: list[str] = []
    for rec in records:
        raw = (rec.get("reply") or {}).get("dropped_fields")
        fields = [f for f in raw if isinstance(f, str)] if isinstance(raw, list) else []
        for f in fields:
            by_field[f] = by_field.get(f, 0) + 1
        if fields:
            ids.append(str(rec.get("id")))
    if not by_field:
        return None
    said = ", ".join(f"{f} on {n}" for f, n in sorted(by_field.items()))
    more = f" and {len(ids) - cap} more" if len(ids) > cap else ""
    return (f"the server rejected optional fields (HTTP 400) and the probes were sent without them: {said} "
            f"request(s) (requests: {', '.join(ids[:cap])}{more})")


@dataclass(frozen=True, slots=True)
class ProbeRun:
    """One gate run's probe records and the settings they were sent with.

    Attributes:
        header: the probe log's header: ``settings`` (the gates asked, each gate's own settings), ``engine``,
            ``engine_info``, ``known_ignored_options``, ``tokenizer`` and ``retokenized`` (counts by probe id).
        records: the probe records (planned probe + ``reply``), in send order.
        where: ``"live"`` for a gate run's own probes, ``"load"`` for hidden probes mixed into a load.
    """

    header: Mapping[str, Any]
    records: Sequence[ProbeRecord]
    where: str = "live"

    @property
    def settings(self) -> Mapping[str, Any]:
        """``header["settings"]`` (``{}`` when absent)."""
        return self.header.get("settings") or {}


@dataclass(frozen=True, slots=True)
class LengthInputs:
    """What output_length's run-dir part judges, read from one engine's folders.

    Attributes:
        lengths: generated length of every reply by key (``<id>[~k]`` or ``load-<level>/<id>[~k]``):
            ``{"source", "bucket", "level", "length", "method", "problem"}`` (``gates/check.py``
            ``output_lengths``).
        exact: the exact-length requests by the same key: ``(max_tokens, forcing options, source file)``.
        reference: another engine's lengths by key (``--reference-outputs``), None without one.
        reference_name: where the reference came from, for the reason.
        tolerance, max_outliers: per-prompt length tolerance and allowed share of outliers (the seed's 10%, 10%).
        ignored_options: options the engine's dialect is known to drop (``ignore_eos`` on llama-cpp-python).
    """

    lengths: Mapping[str, Mapping[str, Any]]
    exact: Mapping[str, tuple[int, frozenset[str], str]]
    reference: Mapping[str, Mapping[str, Any]] | None = None
    reference_name: str = ""
    tolerance: float = 0.10
    max_outliers: float = 0.10
    ignored_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunRows:
    """Everything the gates judge from a run directory's files, for one engine.

    Attributes:
        engine: the engine label (``outputs/<engine>/``).
        has_load: the run dir holds load replies of this engine (``load-*/``).
        count_rows: one ``CountRow`` per reply (token_count): the load levels', the warm-up's and the extra requests'
            (``check.token_rows``).
        tokenizer: the re-tokenizer named in the levels' ``retokenized.json`` (None: none ran).
        retokenize_refused: load replies whose text that tokenizer refused, ``{"load-<level>/<key>": error}``.
        lengths: output_length's inputs.
        requests: one row per load request of every engine (unique_prompts): ``{"source", "engine", "level",
            "key", "salt", "prompt"}``.
        journals: load levels whose journal was never turned into files (an interrupted run).
        unreadable_schedule_lines: lines of another harness's load schedule that held no readable request.
        mixed_probes: the hidden probes a load mixed in (``outputs/<engine>/probes/``).
        kat_rows: ``compare_sample`` rows of the known answers alone vs under load (``kat/``).
        kat_level: the level the known answers ran in under load (None: none did).
        kat_records: the known-answer replies as probe records (kind ``kat``), for the fields dropped on them.
        structured_rows: one ``structured_row`` per structured request of a load (``bench serve --structured``:
            ``structured/alone/`` and ``structured/load-<level>/``), alone first.
    """

    engine: str
    has_load: bool = False
    count_rows: Sequence[CountRow] = ()
    tokenizer: str | None = None
    retokenize_refused: Mapping[str, str] = field(default_factory=dict)
    lengths: LengthInputs | None = None
    requests: Sequence[Mapping[str, Any]] = ()
    journals: Sequence[str] = ()
    unreadable_schedule_lines: int = 0
    mixed_probes: Sequence[ProbeRecord] = ()
    kat_rows: Sequence[Mapping[str, Any]] = ()
    kat_level: str | None = None
    kat_records: Sequence[ProbeRecord] = ()
    structured_rows: Sequence[Mapping[str, Any]] = ()
