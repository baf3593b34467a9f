"""The error budget of verify's statistical FAILs (issue 42, item 4; pure).

A FAIL is evidence that an engine did other work than it claims. Some FAILs are *deterministic*: a count in
``usage`` the stream contradicts, a reply outside its JSON schema, a token that is not the top of its own
candidates at T=0. An honest engine cannot produce them, so they have no α. Others are *statistical*: a timing
speedup, T=1 samples equal to greedy, a known answer that diverged at a confident position. An honest engine
produces those by chance at some rate, and a verification runs several such rules at once, so each rule's own α
adds up. The budget bounds the sum: the statistical rules of one verification share a family-wise false-FAIL
rate ``FAMILY_ALPHA`` (1%) for an honest engine, split by Holm's step-down rule (Holm 1979, "A simple
sequentially rejective multiple test procedure", Scand. J. Statist. 6:65-70), which controls the family-wise
error under any dependence between the rules.

How a judge takes part: for each statistical rule it evaluated, it lists a *null test* in its gate's metrics
(``metrics["null_tests"]``, ``null_test``): the rule, its p-value under the honest null (or a valid upper bound;
1.0 when the rule had nothing to flag), the α the rule uses on its own, and the honest calibration the null rests
on (engines, runs, date). A FAIL says whether it rests on a statistical rule alone (``metrics["fail_kind"] =
"statistical"``) or on deterministic evidence (``"deterministic"``, which wins when a gate has both).

The gate's p-value is its null tests' Bonferroni minimum, ``min(1, T·min p)`` over its ``T`` tests, after the tests
of one binomial rule (the hidden probes' sampling rule, once live and once inside the load) are pooled into one
binomial tail (``k`` hits of ``n`` at the null rate ``q``). Holm then orders the ``m`` gates that ran a null test
by p and rejects the j-th smallest (0-based) while ``p ≤ α / (m − j)``. A statistical FAIL Holm rejects stays
FAIL, naming its p, its Holm threshold and its calibration; one it does not is UNPROVEN (significant at its own
α, not within the family's). A FAIL without a ``fail_kind`` (a judge not yet instrumented) is left as it is and
named outside the budget.

Holm's guarantee needs valid p-values under the honest null. A rule whose p is reported only when it fires (1.0
otherwise) still has one: ``P(p' ≤ t) ≤ P(p ≤ t) ≤ t``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from inferencekit.gates.result import Gate
from inferencekit.stats import Verdict

__all__ = ["DETERMINISTIC_GATES", "FAMILY_ALPHA", "Budget", "apply_budget", "binomial_tail", "gate_p", "holm",
           "null_test", "null_tests"]

FAMILY_ALPHA = 0.01  # the family-wise false-FAIL rate for an honest engine over one verification's statistical FAILs
# gates every FAIL of which rests on deterministic evidence: a count or length claimed against the stream
# (token_count, output_length), a prompt repeated inside a level (unique_prompts)
DETERMINISTIC_GATES = frozenset({"token_count", "output_length", "unique_prompts"})


def null_test(rule: str, p: float | None, alpha: float, calibration: str, *, fired: bool,
              binomial: tuple[int, int, float] | None = None) -> dict[str, Any]:
    """One statistical rule as a judge evaluated it, for ``metrics["null_tests"]``.

    Args:
        rule: the rule's name, the same in every gate run (pooled by name when ``binomial`` is given).
        p: its p-value under the honest null, or a valid upper bound; None when it had nothing to test (kept as 1).
        alpha: the α the rule uses on its own (the gate's verdict outside a verification).
        calibration: the honest calibration behind the null (engines, runs, date, the committed file).
        fired: whether the rule FAILed the gate on its own.
        binomial: ``(hits, trials, null rate)`` when the rule is a count of hits each at most ``null rate`` likely
            under the null, so runs of it can be pooled.
    """
    out: dict[str, Any] = {"rule": rule, "p": 1.0 if p is None else float(min(1.0, max(0.0, p))), "alpha": alpha,
                           "calibration": calibration, "fired": fired}
    if binomial is not None:
        out["binomial"] = list(binomial)
    return out


def binomial_tail(k: int, n: int, q: float) -> float:
    """``P(X ≥ k)`` for ``X ~ Binomial(n, q)``: the p-value of ``k`` hits of ``n`` at a null rate ``q`` (1.0 for
    ``k ≤ 0``)."""
    return 1.0 if k <= 0 else float(stats.binom.sf(k - 1, n, q))


def null_tests(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every null test of a gate's metrics, including those of merged parts (``merge_gates``: ``part1``, …)."""
    out = [t for t in metrics.get("null_tests") or () if isinstance(t, Mapping)]
    for key, sub in metrics.items():
        if key.startswith("part") and isinstance(sub, Mapping):
            out += null_tests(sub)
    return out


def _fail_kinds(metrics: Mapping[str, Any]) -> set[str]:
    kinds = {str(metrics["fail_kind"])} if metrics.get("fail_kind") else set()
    for key, sub in metrics.items():
        if key.startswith("part") and isinstance(sub, Mapping):
            kinds |= _fail_kinds(sub)
    return kinds


def gate_p(tests: Sequence[Mapping[str, Any]]) -> tuple[float, int]:
    """``(p, T)``: a gate's p-value from its null tests (Bonferroni over the ``T`` tests after binomial runs of one
    rule are pooled) and ``T``. No test: ``(1.0, 0)``."""
    pooled: dict[str, list[int | float]] = {}
    ps: list[float] = []
    for t in tests:
        b = t.get("binomial")
        if b:
            acc = pooled.setdefault(str(t["rule"]), [0, 0, float(b[2])])
            acc[0] += int(b[0])
            acc[1] += int(b[1])
            acc[2] = max(float(acc[2]), float(b[2]))  # the least favourable null rate of the runs pooled
        else:
            ps.append(float(t["p"]))
    ps += [binomial_tail(int(k), int(n), float(q)) for k, n, q in pooled.values()]
    if not ps:
        return 1.0, 0
    return min(1.0, len(ps) * min(ps)), len(ps)


def holm(ps: Sequence[float], alpha: float) -> list[tuple[bool, float]]:
    """Holm's step-down rule: per p-value (in the given order), ``(rejected, threshold)``; the j-th smallest
    (0-based) is compared with ``alpha / (m − j)`` and rejection stops at the first that exceeds its threshold
    (Holm 1979). Raises ValueError for α outside (0, 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"α must lie in (0, 1), got {alpha}")
    m = len(ps)
    order = sorted(range(m), key=lambda i: (ps[i], i))
    out: list[tuple[bool, float]] = [(False, 0.0)] * m
    going = True
    for j, i in enumerate(order):
        thr = alpha / (m - j)
        going = going and ps[i] <= thr
        out[i] = (going, thr)
    return out


@dataclass(frozen=True, slots=True)
class Budget:
    """What the budget did in one verification.

    Attributes:
        alpha: the family-wise false-FAIL rate shared by the statistical rules.
        family: per gate that ran a null test: ``{"gate", "p", "tests", "threshold", "rejected"}``.
        kept: gates whose statistical FAIL Holm rejected (FAIL stands).
        withheld: gates whose statistical FAIL Holm did not reject (now UNPROVEN).
        deterministic: gates that FAILed on deterministic evidence (no α).
        outside: gates that FAILed with no ``fail_kind`` (a judge not in the budget).
    """

    alpha: float
    family: tuple[Mapping[str, Any], ...]
    kept: tuple[str, ...]
    withheld: tuple[str, ...]
    deterministic: tuple[str, ...]
    outside: tuple[str, ...]

    def line(self) -> str:
        """The card's one line."""
        names = ", ".join(f["gate"] for f in self.family) or "none ran"
        out = (f"error budget: statistical FAILs share a family-wise false-FAIL rate of {self.alpha:.0%} for an "
               f"honest engine, split by Holm (1979) over {len(self.family)} gate(s) ({names}); deterministic "
               "FAILs (a count or length against the stream, a non-greedy token at T=0, an old string echoed) have "
               "no α")
        if self.withheld:
            out += f"; withheld (significant alone, not within the budget): {', '.join(self.withheld)}"
        if self.outside:
            out += f"; outside the budget at their own α: {', '.join(self.outside)}"
        return out

    def to_json(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "rule": "Holm (1979) step-down over the gates' Bonferroni p-values",
                "family": [dict(f) for f in self.family], "kept": list(self.kept), "withheld": list(self.withheld),
                "deterministic": list(self.deterministic), "outside": list(self.outside), "line": self.line()}


def _calibrations(tests: Iterable[Mapping[str, Any]]) -> str:
    seen: list[str] = []
    for t in tests:
        c = str(t.get("calibration") or "")
        if c and c not in seen:
            seen.append(c)
    return "; ".join(seen) or "none stated"


def apply_budget(gates: Sequence[Gate], alpha: float = FAMILY_ALPHA) -> tuple[list[Gate], Budget]:
    """``gates`` with their statistical FAILs held to the family budget, and what the budget did.

    A FAIL resting on deterministic evidence (``fail_kind`` "deterministic" in its metrics or a merged part's) is
    unchanged but for a note that it has no α. A statistical FAIL stays FAIL when Holm rejects its gate's p at
    ``alpha`` over the gates that ran a null test; else it becomes UNPROVEN with the p and the threshold it missed.
    Other verdicts are unchanged. Raises ValueError for α outside (0, 1).
    """
    tested = [(g, null_tests(g.metrics)) for g in gates]
    fam = [(g, ts) for g, ts in tested if ts]
    scored = [(g, ts, *gate_p(ts)) for g, ts in fam]
    decided = holm([p for _, _, p, _ in scored], alpha)
    by_gate = {g.gate: (p, n, rej, thr, ts) for (g, ts, p, n), (rej, thr) in zip(scored, decided, strict=True)}
    kept, withheld, determ, outside = [], [], [], []
    out: list[Gate] = []
    m = len(scored)
    for g in gates:
        if g.verdict != Verdict.FAIL:
            out.append(g)
            continue
        kinds = _fail_kinds(g.metrics) | ({"deterministic"} if g.gate in DETERMINISTIC_GATES else set())
        if "deterministic" in kinds:
            determ.append(g.gate)
            out.append(g.replace(reason=f"{g.reason} [deterministic evidence: no α]"))
        elif "statistical" in kinds and g.gate in by_gate:
            p, n, rej, thr, ts = by_gate[g.gate]
            said = (f"p = {p:.2g} over {n} null test(s), Holm threshold {thr:.2g} of the {alpha:.0%} family budget "
                    f"over {m} gate(s); honest calibration: {_calibrations(ts)}")
            if rej:
                kept.append(g.gate)
                out.append(g.replace(reason=f"{g.reason} [{said}]"))
            else:
                withheld.append(g.gate)
                own = min(float(t.get("alpha") or 0) for t in ts if t.get("fired")) if any(
                    t.get("fired") for t in ts) else math.nan
                out.append(g.replace(verdict=Verdict.UNPROVEN,
                                     reason=f"withheld by the error budget: {g.reason} — significant at its own α = "
                                            f"{own:g}, but {said}, which it does not meet"))
        else:
            outside.append(g.gate)
            out.append(g)
    fam_rows = tuple({"gate": g.gate, "p": p, "tests": n, "threshold": thr, "rejected": rej}
                     for (g, _, p, n), (rej, thr) in zip(scored, decided, strict=True))
    return out, Budget(alpha, fam_rows, tuple(kept), tuple(withheld), tuple(determ), tuple(outside))
