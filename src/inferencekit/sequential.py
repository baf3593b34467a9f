"""Sequential verdicts: stop sending a gate's trials as soon as its verdict is decided (issue 24).

A gate that decides from repeated independent trials (a caching pair, a perturbed echo, …) counts one binary
outcome per trial, a *hit* (evidence of the cheat: a repeat served faster than the limit, the old string echoed),
and states beforehand:

- the honest hypothesis H0: hits occur at a rate ``p0`` at most (an honest engine on a noisy host);
- the smallest cheat it must catch, H1: hits at a rate ``p1`` at least;
- α, the false-FAIL rate it accepts under H0, and β, the missed-cheat rate under H1;
- the cap: the trials the fixed plan sends (today's count), after which it stops whatever the data say.

The rule is Wald's sequential probability ratio test (A. Wald, "Sequential tests of statistical hypotheses",
Ann. Math. Statist. 16(2), 1945): after n trials with k hits, the log-likelihood ratio
``Λ = k·ln(p1/p0) + (n−k)·ln((1−p1)/(1−p0))``; FAIL once ``Λ ≥ ln((1−β)/α)``, PASS once ``Λ ≤ ln(β/(1−α))``,
else send another trial; at the cap, the gate's own fixed-n rule decides (the verdict it gives today). A rule may
give up the early FAIL (``SprtPlan.early_fail``) and stop early only at PASS, when its H0 rate cannot be trusted
before the whole plan is in. Wald's
bounds keep the error rates at α/(1−β) and β/(1−α) at most without a cap; a cap and a gate whose per-trial
outcome is judged with limits the run itself sets make that approximate, so each rule's rates are measured on
recorded trials (``benchmarks/``) rather than assumed. ``p0 = 0`` (an honest engine never hits) is allowed:
one hit is then decisive.

The bound a sequential PASS prints is valid at a data-dependent stop: the upper end of the one-sided 95%
confidence sequence of the hit rate from the Beta(1, 1) mixture martingale (H. Robbins, "Statistical methods
related to the law of the iterated logarithm", Ann. Math. Statist. 41(5), 1970; S. Howard, A. Ramdas,
J. McAuliffe, J. Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2),
2021, §3): the p whose mixture likelihood ratio ``B(1+k, 1+n−k) / (B(1,1)·p^k·(1−p)^(n−k))`` stays below 1/α; by
Ville's inequality it covers the true rate at every n at once with probability ≥ 1 − α, so stopping early does
not void it (a fixed-n Wilson bound would be too narrow there).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from scipy.optimize import brentq
from scipy.special import betaln

__all__ = ["SprtPlan", "SprtState", "cs_upper_bound", "sprt_decision"]


@dataclass(frozen=True, slots=True)
class SprtPlan:
    """One gate's pre-stated sequential rule.

    Attributes:
        trial: what one trial is, and what counts as a hit (a sentence for the record).
        p0: the hit rate an honest engine stays at or below (0 ≤ p0 < p1).
        p1: the smallest hit rate of the cheat the rule must catch (p0 < p1 ≤ 1).
        alpha: accepted false-FAIL rate under p0; beta: accepted miss rate under p1 (both in (0, 0.5)).
        cap: the most trials sent (the fixed plan's count); at the cap the gate's fixed rule decides.
        min_trials: trials sent before any stop (≥ 1).
        early_fail: whether the FAIL boundary stops the trials before the cap. False for a rule whose H0 rate is
            not trusted early in a run (the caching timing pairs: ``gates/judges/caching.py``): it may still stop
            early at PASS, but a FAIL is left to the gate's fixed rule on every trial of the cap.

    Raises:
        ValueError: rates or counts out of range.
    """

    trial: str
    p0: float
    p1: float
    alpha: float
    beta: float
    cap: int
    min_trials: int = 1
    early_fail: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.p0 < self.p1 <= 1:
            raise ValueError(f"need 0 ≤ p0 < p1 ≤ 1, got p0={self.p0}, p1={self.p1}")
        if not (0 < self.alpha < 0.5 and 0 < self.beta < 0.5):
            raise ValueError(f"α and β must lie in (0, 0.5), got {self.alpha}, {self.beta}")
        if not 1 <= self.min_trials <= self.cap:
            raise ValueError(f"need 1 ≤ min_trials ≤ cap, got {self.min_trials}, {self.cap}")

    @property
    def fail_at(self) -> float:
        """Wald's upper boundary ln((1−β)/α)."""
        return math.log((1 - self.beta) / self.alpha)

    @property
    def pass_at(self) -> float:
        """Wald's lower boundary ln(β/(1−α))."""
        return math.log(self.beta / (1 - self.alpha))

    def llr(self, hits: int, n: int) -> float:
        """Λ after ``n`` trials with ``hits`` hits (+inf when p0 = 0 and a hit was seen; −inf when p1 = 1 and a
        miss was seen)."""
        up = math.inf if self.p0 == 0 else math.log(self.p1 / self.p0)
        down = -math.inf if self.p1 == 1 else math.log((1 - self.p1) / (1 - self.p0))
        total = 0.0
        if hits:
            total += hits * up
        if n - hits:
            total += (n - hits) * down
        return total

    def describe(self) -> dict[str, Any]:
        """The rule as the record states it."""
        method = "SPRT (Wald 1945), truncated at the cap" + ("" if self.early_fail else "; stops early only at PASS")
        return {**asdict(self), "method": method, "fail_boundary": self.fail_at,
                "pass_boundary": self.pass_at,
                "bound": "one-sided 95% Beta(1,1)-mixture confidence sequence (Robbins 1970; Howard et al. 2021)"}


@dataclass(frozen=True, slots=True)
class SprtState:
    """Where a sequential rule stands: ``decision`` "FAIL", "PASS", "cap" (the fixed rule decides) or None
    (send another trial); ``why`` says it in words."""

    hits: int
    n: int
    llr: float
    decision: str | None
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"hits": self.hits, "trials": self.n, "llr": self.llr if math.isfinite(self.llr) else str(self.llr),
                "decision": self.decision, "why": self.why}


def sprt_decision(plan: SprtPlan, hits: int, n: int) -> SprtState:
    """The rule's state after ``n`` trials with ``hits`` hits.

    Raises:
        ValueError: ``hits`` outside 0..n or ``n`` beyond the cap.
    """
    if not 0 <= hits <= n <= plan.cap:
        raise ValueError(f"need 0 ≤ hits ≤ n ≤ cap, got {hits}, {n}, {plan.cap}")
    lam = plan.llr(hits, n)
    if n >= plan.min_trials and lam >= plan.fail_at and plan.early_fail:
        return SprtState(hits, n, lam, "FAIL", f"{hits} hit(s) in {n} trial(s): the likelihood ratio for a cheat "
                         f"at ≥ {plan.p1:g} reached the FAIL boundary (α {plan.alpha:g})")
    if n >= plan.min_trials and lam <= plan.pass_at:
        return SprtState(hits, n, lam, "PASS", f"{hits} hit(s) in {n} trial(s): the likelihood ratio for an honest "
                         f"rate ≤ {plan.p0:g} reached the PASS boundary (β {plan.beta:g})")
    if n >= plan.cap:
        where = ("past the FAIL boundary, which this rule does not stop at" if lam >= plan.fail_at
                 else "no boundary reached")
        return SprtState(hits, n, lam, "cap", f"{hits} hit(s) in {n} trial(s): {where} by the cap of {plan.cap}; "
                         "the gate's fixed rule decides")
    if lam >= plan.fail_at:
        return SprtState(hits, n, lam, None, f"{hits} hit(s) in {n} trial(s): past the FAIL boundary, but this rule "
                         f"FAILs only at the cap of {plan.cap} (the gate's fixed rule decides there)")
    return SprtState(hits, n, lam, None, f"{hits} hit(s) in {n} trial(s): undecided")


def cs_upper_bound(hits: int, n: int, alpha: float = 0.05) -> float:
    """Upper end of the one-sided (1 − α) Beta(1, 1)-mixture confidence sequence for a Bernoulli rate after ``n``
    trials with ``hits`` hits: the largest p with ``log B(1+k, 1+n−k) − k·ln p − (n−k)·ln(1−p) < ln(1/α)``,
    valid at any stopping time (Ville's inequality; module docstring). 1.0 when nothing rules a rate out.

    Raises:
        ValueError: ``hits`` outside 0..n or α outside (0, 1).
    """
    if not 0 <= hits <= n:
        raise ValueError(f"need 0 ≤ hits ≤ n, got {hits}, {n}")
    if not 0 < alpha < 1:
        raise ValueError(f"α must lie in (0, 1), got {alpha}")
    if n == 0:
        return 1.0
    log_mix = float(betaln(1 + hits, 1 + n - hits))  # log of the mixture likelihood B(1+k, 1+n−k) / B(1, 1); B(1,1) = 1
    target = math.log(1 / alpha)

    def excess(p: float) -> float:  # log mixture ratio − ln(1/α): < 0 inside the sequence
        return log_mix - hits * math.log(p) - (n - hits) * math.log1p(-p) - target

    hi = 1 - 1e-12
    mle = hits / n
    if excess(hi) < 0:
        return 1.0
    start = min(max(mle, 1e-12), hi)
    if excess(start) >= 0:  # the whole range above the MLE is excluded (cannot happen for α < 1)
        return start
    return float(brentq(excess, start, hi, xtol=1e-10))
