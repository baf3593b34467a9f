"""One gate's result: a verdict with the reason, the figures and the requests that decided it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from inferencekit.stats import combine_claims

__all__ = ["GATES", "VERDICTS", "Gate", "merge_gates", "overall"]

# The seven gates of ../shared/seeds/000, then the order gate (../shared/seeds/004); the order is the report's.
GATES = ("caching", "token_count", "output_length", "unique_prompts", "spec_exact", "hidden_probes", "rare_tokens",
         "order")
VERDICTS = ("PASS", "FAIL", "UNPROVEN", "NOT RUN")


@dataclass(slots=True)
class Gate:
    """A gate's verdict.

    Attributes:
        gate: one of ``GATES``.
        verdict: PASS, FAIL, UNPROVEN or NOT RUN.
        reason: one line a person reads first: what decided the verdict, with counts.
        metrics: the figures behind it (JSON-able), e.g. ``{"replies_checked": 40, "mismatches": 0}``.
        details: the rows that decided it (offending requests first, each naming its file or key).
        limitations: what the verdict cannot see.
        applicable: the inputs asked for (or allowed) this gate, so NOT RUN counts as UNPROVEN overall.
    """

    gate: str
    verdict: str
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    applicable: bool = True

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"unknown gate {self.gate!r}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def merge_gates(name: str, parts: Iterable[Gate]) -> Gate:
    """One gate from several checks of it (e.g. live probes and the run dir): verdicts combined by
    ``combine_claims``, reasons joined with their part's verdict, metrics / details / limitations kept."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    metrics: dict[str, Any] = {}
    for i, p in enumerate(parts):
        metrics[f"part{i + 1}"] = p.metrics
    return Gate(name, combine_claims(p.verdict for p in parts), "; ".join(f"{p.verdict}: {p.reason}" for p in parts),
                metrics, [d for p in parts for d in p.details], [x for p in parts for x in p.limitations],
                any(p.applicable for p in parts))


def overall(gates: Iterable[Gate]) -> str:
    """The verdict of a set of gates: ``combine_claims``, a NOT RUN gate that was applicable counting as
    UNPROVEN (DESIGN.md: missing evidence is never a pass)."""
    return combine_claims("UNPROVEN" if g.verdict == "NOT RUN" and g.applicable else g.verdict for g in gates)
