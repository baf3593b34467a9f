"""One gate's result: a verdict with the reason, the figures and the requests that decided it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferencekit.stats import VERDICTS, Verdict, combine_claims

__all__ = ["Gate", "merge_gates", "overall"]


@dataclass(frozen=True, slots=True, init=False)
class Gate:
    """A gate's verdict (frozen: a change is a new ``Gate``, made with ``replace`` or ``with_limitations``).

    Attributes:
        gate: the gate's name, a key of ``inferencekit.gates.GATES``.
        verdict: PASS, FAIL, UNPROVEN or NOT RUN (``stats.Verdict``; a plain string of one is accepted).
        reason: one line a person reads first: what decided the verdict, with counts.
        metrics: the figures behind it (JSON-able), e.g. ``{"replies_checked": 40, "mismatches": 0}``.
        details: the rows that decided it (offending requests first, each naming its file or key).
        limitations: what the verdict cannot see.
        applicable: the inputs asked for (or allowed) this gate, so NOT RUN counts as UNPROVEN overall.

    Raises:
        ValueError: a verdict outside the four.
    """

    gate: str
    verdict: Verdict
    reason: str
    metrics: Mapping[str, Any] = field(default_factory=dict)
    details: tuple[Mapping[str, Any], ...] = ()
    limitations: tuple[str, ...] = ()
    applicable: bool = True

    # written out (``init=False``) so the constructor can take what the judges build (a verdict's plain string,
    # lists) while the fields keep their stored types: a ``Verdict`` and tuples
    def __init__(self, gate: str, verdict: Verdict | str, reason: str, metrics: Mapping[str, Any] | None = None,
                 details: Iterable[Mapping[str, Any]] = (), limitations: Iterable[str] = (),
                 applicable: bool = True) -> None:
        if verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}")
        object.__setattr__(self, "gate", gate)
        object.__setattr__(self, "verdict", Verdict(verdict))
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "metrics", {} if metrics is None else metrics)
        object.__setattr__(self, "details", tuple(details))
        object.__setattr__(self, "limitations", tuple(limitations))
        object.__setattr__(self, "applicable", applicable)

    def replace(self, **changes: Any) -> Gate:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def with_limitations(self, more: Iterable[str]) -> Gate:
        """A copy with ``more`` appended to the limitations."""
        return dataclasses.replace(self, limitations=(*self.limitations, *more))

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in a ``gates`` record (``data.gates``)."""
        return {"gate": self.gate, "verdict": str(self.verdict), "reason": self.reason, "metrics": dict(self.metrics),
                "details": [dict(d) for d in self.details], "limitations": list(self.limitations),
                "applicable": self.applicable}


def merge_gates(name: str, parts: Sequence[Gate]) -> Gate:
    """One gate from several checks of it (e.g. live probes and the run dir): verdicts combined by
    ``combine_claims``, reasons joined with their part's verdict, metrics (``part1``, ``part2``, …), details and
    limitations kept; applicable when any part is."""
    if len(parts) == 1:
        return parts[0]
    metrics = {f"part{i + 1}": dict(p.metrics) for i, p in enumerate(parts)}
    return Gate(name, combine_claims(p.verdict for p in parts), "; ".join(f"{p.verdict}: {p.reason}" for p in parts),
                metrics, tuple(d for p in parts for d in p.details), tuple(x for p in parts for x in p.limitations),
                any(p.applicable for p in parts))


def overall(gates: Iterable[Gate]) -> Verdict:
    """The verdict of a set of gates: ``combine_claims``, a NOT RUN gate that was applicable counting as
    UNPROVEN (docs/design.md: missing evidence is never a pass)."""
    return combine_claims(Verdict.UNPROVEN if g.verdict == Verdict.NOT_RUN and g.applicable else g.verdict
                          for g in gates)
