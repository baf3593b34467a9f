"""One gate's result: a verdict with the reason, the figures and the requests that decided it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferencekit.stats import VERDICTS, Verdict, combine_claims

__all__ = ["Gate", "bounded_text", "merge_gates", "overall", "strict_gate"]


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
        judged: how many items (replies, pairs, positions, samples) the verdict rests on. A PASS that judged
            none is no claim: the constructor turns it into UNPROVEN (docs/design.md, "A PASS is a bounded
            claim").
        rules_out: for a PASS, what it rules out with that n: a Wilson bound for counts
            (``stats.rules_out``), the limit and the figures for a continuous statistic.
        fallbacks: the limitations that changed what was measured (a dropped field, a shrunk prompt set, an
            allowance used); each is also in ``limitations``. ``--strict`` turns a PASS carrying any into
            UNPROVEN (``strict_gate``).
        properties: what the engine was shown to lack that an honest engine may lack (``gates.properties``:
            the closed list; each ``{"property", "lacks", "shown_by", "strict", …}``). They neither FAIL the gate
            nor make it UNPROVEN; ``--strict`` gives the gate each one's ``strict`` verdict (``strict_gate``).

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
    judged: int = 0
    rules_out: str = ""
    fallbacks: tuple[str, ...] = ()
    properties: tuple[Mapping[str, Any], ...] = ()

    # written out (``init=False``) so the constructor can take what the judges build (a verdict's plain string,
    # lists) while the fields keep their stored types: a ``Verdict`` and tuples
    def __init__(self, gate: str, verdict: Verdict | str, reason: str, metrics: Mapping[str, Any] | None = None,
                 details: Iterable[Mapping[str, Any]] = (), limitations: Iterable[str] = (),
                 applicable: bool = True, *, judged: int = 0, rules_out: str = "",
                 fallbacks: Iterable[str] = (), properties: Iterable[Mapping[str, Any]] = ()) -> None:
        if verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}")
        fallbacks = tuple(fallbacks)
        limitations = (*limitations, *(f for f in fallbacks if f not in limitations))
        if verdict == Verdict.PASS and judged < 1:
            verdict, reason = Verdict.UNPROVEN, f"judged no item, so no PASS: {reason}"
        object.__setattr__(self, "gate", gate)
        object.__setattr__(self, "verdict", Verdict(verdict))
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "metrics", {} if metrics is None else metrics)
        object.__setattr__(self, "details", tuple(details))
        object.__setattr__(self, "limitations", tuple(limitations))
        object.__setattr__(self, "applicable", applicable)
        object.__setattr__(self, "judged", int(judged))
        object.__setattr__(self, "rules_out", rules_out)
        object.__setattr__(self, "fallbacks", fallbacks)
        object.__setattr__(self, "properties", tuple(properties))

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
                "applicable": self.applicable, "judged": self.judged, "rules_out": self.rules_out,
                "fallbacks": list(self.fallbacks), "properties": [dict(p) for p in self.properties]}

    @property
    def bounded_reason(self) -> str:
        """The reason, and for a PASS what it judged and rules out (the card's line, ``bounded_text``)."""
        return bounded_text(self.to_json())


def bounded_text(gate: Mapping[str, Any]) -> str:
    """A gate's reason (its JSON form, ``Gate.to_json``) and, for a PASS, ``[n=<judged>; <rules_out>]``: the
    card's line. A record written before these fields existed shows its reason alone."""
    reason = str(gate.get("reason", ""))
    if gate.get("verdict") != Verdict.PASS or "judged" not in gate:
        return reason
    bound = gate.get("rules_out")
    return f"{reason} [n={gate['judged']}" + (f"; {bound}]" if bound else "]")


def merge_gates(name: str, parts: Sequence[Gate]) -> Gate:
    """One gate from several checks of it (e.g. live probes and the run dir): verdicts combined by
    ``combine_claims``, reasons joined with their part's verdict, metrics (``part1``, ``part2``, …), details and
    limitations kept; applicable when any part is; ``judged`` summed, ``rules_out`` and ``fallbacks`` joined."""
    if len(parts) == 1:
        return parts[0]
    metrics = {f"part{i + 1}": dict(p.metrics) for i, p in enumerate(parts)}
    return Gate(name, combine_claims(p.verdict for p in parts), "; ".join(f"{p.verdict}: {p.reason}" for p in parts),
                metrics, tuple(d for p in parts for d in p.details), tuple(x for p in parts for x in p.limitations),
                any(p.applicable for p in parts), judged=sum(p.judged for p in parts),
                rules_out="; ".join(p.rules_out for p in parts if p.rules_out),
                fallbacks=tuple(x for p in parts for x in p.fallbacks),
                properties=tuple(x for p in parts for x in p.properties))


def strict_gate(gate: Gate) -> Gate:
    """``--strict``: a gate that showed a property (``Gate.properties``) takes that property's strict verdict (the
    seed's rule: a not-batch-invariant engine FAILs the order gate) when it is worse; a PASS that carries a
    fallback (``Gate.fallbacks``) becomes UNPROVEN, and so does a gate marked not applicable (nothing asked for
    it), so a CI job cannot pass on an allowance or on a gate that never ran. Other gates are returned
    unchanged."""
    worse = [p for p in gate.properties if str(p.get("strict")) in VERDICTS
             and combine_claims((gate.verdict, str(p.get("strict")))) != gate.verdict]
    if worse:
        p = worse[0]
        return gate.replace(verdict=Verdict(str(p["strict"])),
                            reason=f"--strict: {p['property']} is {p['strict']} under the strict rule "
                                   f"({p['shown_by']}): {gate.reason}")
    if gate.verdict == Verdict.PASS and gate.fallbacks:
        return gate.replace(verdict=Verdict.UNPROVEN, reason=f"--strict: a PASS resting on a fallback "
                            f"({gate.fallbacks[0]}): {gate.reason}")
    if not gate.applicable:
        return gate.replace(verdict=Verdict.UNPROVEN, applicable=True,
                            reason=f"--strict: not applicable to this run ({gate.verdict}): {gate.reason}")
    return gate


def overall(gates: Iterable[Gate]) -> Verdict:
    """The verdict of a set of gates: ``combine_claims``, a NOT RUN gate that was applicable counting as
    UNPROVEN (docs/design.md: missing evidence is never a pass)."""
    return combine_claims(Verdict.UNPROVEN if g.verdict == Verdict.NOT_RUN and g.applicable else g.verdict
                          for g in gates)
