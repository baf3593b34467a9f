"""Sampler self-consistency: the first-token distribution a request's settings imply, and its verdict.

The check (``inferencekit quality sampling``) asks an engine, per prompt, for its top-k natural-log
probabilities at the first generated position (twice, to see they are stable), then takes S seeded
``max_tokens: 1`` draws with the sampling settings under test. This module is the pure part: no
HTTP, no clock, randomness only from a seed argument.

1. ``implied_distribution`` turns the listed log-probabilities and the settings (temperature, top_k,
   top_p, min_p) into the set of tokens a correct sampler may draw and their probabilities. Engines
   apply the filters in different orders (``SAMPLER_ORDERS``); the kept set is computed under every
   order asked for, and a prompt whose kept set depends on the order, on the unlisted tail of the
   distribution, or on a cut that rounding could move, is marked and not judged.
2. ``excess_tv`` compares a prompt's draws with that distribution: the total variation (TV) between
   the draws' empirical distribution and the implied one, minus its exact expectation under correct
   sampling (``expected_tv``), and the number of draws outside the kept set.
3. ``judge_sampling`` turns the per-prompt rows into PASS / FAIL / UNPROVEN: the mean excess TV over
   the informative prompts with a prompt-level bootstrap interval against a pre-registered margin, the
   out-of-support share with a Wilson bound, an exact test for "every draw was the greedy token", and
   UNPROVEN whenever the request carries a setting this module does not model.
4. ``seed_check`` says whether re-asking a (prompt, seed) pair reproduces its first draw (information
   only: unseeded draws are still draws from the distribution).

Units: probabilities and TV are probability mass in [0, 1]; log-probabilities are natural logs, raw
log-softmax of the model's logits (before temperature and filters). Tokens are any hashable keys
(token ids, or text bins when ids are missing), as long as the listed tokens and the draws use the same
ones.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
from scipy.stats import binom

from inferencekit import stats

__all__ = ["DEFAULT_ORDERS", "DROPPED_WHY", "GREEDY_ONLY_ALPHA", "GREEDY_T", "LOGPROB_TOL", "MIN_PROMPTS",
           "NEAR_DETERMINISTIC", "OOS_MAX", "SAMPLER_ORDERS", "SEED_INCONCLUSIVE", "SEED_MATCH_MIN",
           "SEED_STAGE_CHANCE", "UNMODELLED", "Implied", "collision_probability", "combine_seed_checks", "excess_tv",
           "expected_tv", "implied_distribution", "judge_sampling", "observed_tv", "sampling_settings", "seed_check",
           "seed_stage", "tv_between", "unmodelled_settings"]

Token = Hashable

LOGPROB_TOL = 1e-4
"""Nats by which a listed log-probability may be off (rounding); a filter cut that moves within it is a
``boundary``. A judge widens it to the largest change seen between the two identical top-k requests."""
GREEDY_T = 1e-5
"""Temperatures below this are greedy decoding (vLLM's ``_SAMPLING_EPS``; llama.cpp: ``temp <= 0``)."""
NEAR_DETERMINISTIC = 0.98
"""Implied top-token probability from which a prompt adds nothing to the TV statistic (support check only)."""
MIN_PROMPTS = 8
"""Informative prompts needed for a TV verdict: a percentile bootstrap over fewer prompts covers poorly."""
OOS_MAX = 0.005
"""Out-of-support share the sampler FAILs beyond, judged by the Wilson 95% lower bound."""
GREEDY_ONLY_ALPHA = 1e-6
"""The all-greedy event FAILs when its probability under the implied distributions is below this."""
SEED_MATCH_MIN = 0.9
SEED_STAGE_CHANCE = 1e-3
"""A sequential sampler side asks one seed per re-asked prompt first and stops there when every repeat came back the
same and an engine that ignored the seed would have matched them all with probability at most this (``seed_stage``);
else it asks the other seeds, as the fixed check does."""
"""Share of re-asked (prompt, seed) pairs that must reproduce their first draw for "honoured"."""
SEED_INCONCLUSIVE = 0.8
"""Chance repeat rate above which the seed check cannot tell an honoured seed from an ignored one."""

SAMPLER_ORDERS: dict[str, tuple[str, ...]] = {
    # llama.cpp's default chain (common/sampling: … top_k, typ_p, top_p, min_p, xtc, temperature) and
    # llama-cpp-python's Llama._init_sampler: every filter on the raw distribution, temperature last;
    # top-p renormalises over what top-k kept
    "llama.cpp": ("top_k", "top_p", "min_p", "temperature"),
    # vLLM V1 Sampler: temperature, then min-p (an argmax-invariant logits processor), then top-k and
    # top-p together, top-p over the top-k tokens renormalised
    "vllm": ("temperature", "min_p", "top_k", "top_p"),
    # Hugging Face generate's warper order (and SGLang when min-p is set): temperature, top-k, top-p
    # over the top-k tokens, min-p
    "hf": ("temperature", "top_k", "top_p", "min_p"),
    # SGLang's joint filter: top-p over the whole (tempered) distribution, intersected with top-k
    "sglang": ("temperature", "top_p", "top_k", "min_p"),
}
DEFAULT_ORDERS: tuple[str, ...] = tuple(SAMPLER_ORDERS)

# Request fields that change the first-token distribution in a way this module does not compute, with
# their neutral values: any other value makes the verdict UNPROVEN. presence_penalty and frequency_penalty
# are absent on purpose: they act on generated tokens, and at the first position there are none.
UNMODELLED: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (1, 1.0), "repeat_penalty": (1, 1.0), "typical_p": (1, 1.0), "min_tokens": (0,),
    "logit_bias": ({},), "allowed_token_ids": ([],), "bad_words": ([],), "logits_processors": ([],),
    "guided_json": (), "guided_regex": (), "guided_choice": ([],), "guided_grammar": (), "grammar": ("",),
    "structured_outputs": ({},), "response_format": ({"type": "text"},), "mirostat": (0,), "mirostat_mode": (0,),
    "tfs_z": (1, 1.0), "xtc_probability": (0, 0.0), "dry_multiplier": (0, 0.0), "top_n_sigma": (-1, -1.0),
    "dynatemp_range": (0, 0.0), "ignore_eos": (False,),
}

DROPPED_WHY = {
    "incomplete": "a request for this prompt failed, or draws are missing",
    "logprobs_unstable": "the listed tokens changed between two identical requests",
    "bad_logprobs": "the listed log-probabilities are unusable (not numbers, above 0, or summing above 1)",
    "beyond_top": "the kept tokens may reach past the listed ones",
    "boundary": "a cut (top-k, top-p, min-p, greedy tie) lies within the rounding tolerance",
    "ambiguous_order": "engines' filter orders keep different tokens",
    "near_deterministic": f"top token at {NEAR_DETERMINISTIC:.0%} or more (support check only)",
}

_JUDGED = ("ok", "near_deterministic")


@dataclass(frozen=True, slots=True)
class Implied:
    """The first-token distribution a sampler with given settings should draw from.

    Attributes:
        status: ``ok`` (judge it), ``near_deterministic`` (probs valid, top token ≥ the threshold: support
            check only), ``beyond_top`` (the kept set may hold unlisted tokens), ``ambiguous_order`` (the
            orders asked for keep different tokens), ``boundary`` (a cut within the rounding tolerance) or
            ``bad_logprobs``. Only ``ok`` and ``near_deterministic`` carry ``probs``.
        probs: kept token → probability (sums to 1); empty unless judged.
        kept: the kept tokens, most likely first; empty unless judged.
        listed: every listed token, most likely first.
        listed_mass: Σ exp(logprob) over the listed tokens (the rest is the unlisted tail).
        max_p: the top kept token's probability, None unless judged.
        reasons: one line per reason the prompt is not ``ok`` (empty when ok).
        kept_by_order: order name → the kept tokens under that order, or None when not determined.
        temperature: the temperature the probabilities were computed at.
    """

    status: str
    probs: dict[Token, float]
    kept: tuple[Token, ...]
    listed: tuple[Token, ...]
    listed_mass: float
    max_p: float | None
    reasons: tuple[str, ...] = ()
    kept_by_order: dict[str, tuple[Token, ...] | None] = field(default_factory=dict)
    temperature: float = 1.0

    @property
    def judged(self) -> bool:
        """True when ``probs`` hold a distribution to compare draws with (ok or near_deterministic)."""
        return self.status in _JUDGED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; token keys become ``[token, p]`` pairs so integer ids survive."""
        return {"status": self.status, "implied": [[k, self.probs[k]] for k in self.kept],
                "listed": list(self.listed), "listed_mass": self.listed_mass, "max_p": self.max_p,
                "reasons": list(self.reasons), "temperature": self.temperature,
                "kept_by_order": {n: (list(v) if v is not None else None) for n, v in self.kept_by_order.items()}}


# ------------------------------------------------------------------------------------------------ settings


def _real(x: object) -> TypeGuard[float]:
    """A real number, bool excluded (typed float: mypy cannot compute with ``numbers.Real``)."""
    return not isinstance(x, bool) and isinstance(x, numbers.Real)


def _number(x: object, name: str) -> float:
    if not _real(x) or not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def sampling_settings(body: Mapping[str, Any]) -> tuple[dict[str, float | int | None], list[str]]:
    """The modelled sampling settings of a request body, each turned off (None) where neutral.

    Args:
        body: the sampling fields sent with every draw (``--extra-body``). ``temperature`` is required;
            ``top_k`` (None, 0 or negative: off), ``top_p`` (None or 1: off), ``min_p`` (None or 0: off)
            are optional.

    Returns:
        ``(cfg, unsent)``: cfg ``{"temperature", "top_k", "top_p", "min_p"}`` with None for an off filter;
        unsent the names of top_k/top_p/min_p the body leaves out. They are read as off, but an engine
        may apply its own default to them (llama.cpp: top_k 40, top_p 0.95, min_p 0.05; vLLM: the
        model's generation_config.json), so the caller should say so.

    Raises:
        ValueError: temperature missing or negative, top_k not an integer, top_p outside (0, 1], min_p
        outside [0, 1], or a value that is not a finite number.
    """
    if body.get("temperature") is None:
        raise ValueError("temperature is required (the check compares draws at a stated temperature)")
    t = _number(body["temperature"], "temperature")
    if t < 0:
        raise ValueError(f"temperature must be >= 0, got {t}")
    k = body.get("top_k")
    if k is not None:
        if not _real(k) or not math.isfinite(k) or int(k) != k:
            raise ValueError(f"top_k must be an integer, got {k!r}")
        k = int(k) if k > 0 else None
    p = body.get("top_p")
    if p is not None:
        p = _number(p, "top_p")
        if not 0 < p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {p}")
        p = p if p < 1 else None
    m = body.get("min_p")
    if m is not None:
        m = _number(m, "min_p")
        if not 0 <= m <= 1:
            raise ValueError(f"min_p must lie in [0, 1], got {m}")
        m = m if m > 0 else None
    unsent = [name for name in ("top_k", "top_p", "min_p") if body.get(name) is None]
    return {"temperature": t, "top_k": k, "top_p": p, "min_p": m}, unsent


def unmodelled_settings(body: Mapping[str, Any]) -> list[str]:
    """Names of fields in ``body`` that change the first-token distribution in a way not computed here.

    A field counts when present, not None, and not one of its neutral values (``UNMODELLED``), e.g.
    ``repetition_penalty`` 1.1 or a non-empty ``logit_bias``. Sorted.
    """
    return sorted(k for k, neutral in UNMODELLED.items()
                  if k in body and body[k] is not None and body[k] not in neutral)


# ------------------------------------------------------------------------------------- implied distribution


@dataclass(slots=True)
class _Ranking:
    """The listed tokens sorted by logprob, and what is known of the unlisted tail."""

    lp: np.ndarray  # listed logprobs, descending, shape (n,)
    tail: float  # unlisted raw mass
    n_tail: float  # number of unlisted tokens (math.inf when the vocabulary size is unknown)
    tol: float

    @property
    def n(self) -> int:
        return int(self.lp.size)

    def tail_sum(self, j: float, alpha: float) -> tuple[float, float]:
        """Bounds on Σ q^alpha over the j most likely unlisted tokens, in units of q_top^alpha.

        Known: the unlisted tokens hold ``tail`` in all, number ``n_tail``, and none is above the least
        likely listed one (q_min). At alpha = 1 the bounds are on their mass. For alpha > 1 (temperature
        below 1) the sum is largest when the mass sits in as few tokens as possible (q^alpha ≤ q·q_min^(alpha-1))
        and smallest when spread evenly (Jensen); for alpha < 1 the other way round.
        """
        if self.tail <= 0 or j <= 0:
            return 0.0, 0.0
        j = min(j, self.n_tail)
        q_min_log = float(self.lp[-1])
        hi_mass = min(self.tail, j * math.exp(q_min_log)) if math.isfinite(j) else self.tail
        if j >= self.n_tail:
            lo_mass = self.tail
        elif math.isinf(self.n_tail):
            lo_mass = 0.0
        else:
            lo_mass = max(self.tail - (self.n_tail - j) * math.exp(q_min_log), j * self.tail / self.n_tail)
        top = float(self.lp[0])
        # q^alpha / q_top^alpha for a token at q_min, per unit of mass at q_min
        at_min = math.exp(alpha * (q_min_log - top) - q_min_log)

        def spread(mass: float) -> float:  # j tokens of mass/j each
            if mass <= 0:
                return 0.0
            if math.isinf(j):
                return 0.0 if alpha > 1 else math.inf
            return j * math.exp(alpha * (math.log(mass / j) - top))

        if alpha == 1.0:
            return lo_mass / math.exp(top), hi_mass / math.exp(top)
        if alpha > 1.0:
            return spread(lo_mass), hi_mass * at_min
        return lo_mass * at_min, spread(hi_mass)


def _odds(x: float) -> float:
    return math.inf if x >= 1.0 else x / (1.0 - x)


def _top_k(r: _Ranking, k: int, lo: float, hi: float, notes: list[str]) -> tuple[float, float]:
    if hi > k and k < r.n and r.lp[k - 1] - r.lp[k] <= 2 * r.tol:
        notes.append(f"top_k {k}: tokens {k} and {k + 1} are tied within {2 * r.tol:.2g} nats")
    return min(lo, k), min(hi, k)


def _min_p(r: _Ranking, m: float, alpha: float, lo: float, hi: float, notes: list[str]) -> tuple[float, float]:
    # keep q with (q/q_top)^alpha >= m, i.e. log q - log q_top >= log(m) / alpha
    thr = math.log(m) / alpha
    rel = r.lp - r.lp[0]
    passing = int(np.count_nonzero(rel >= thr))
    near = np.flatnonzero(np.abs(rel[: int(min(hi, r.n))] - thr) <= 2 * r.tol)
    if near.size:
        notes.append(f"min_p {m:g}: token {int(near[0]) + 1} sits within {2 * r.tol:.2g} nats of the threshold")
    if passing < r.n:
        c_lo = c_hi = float(passing)
    else:  # every listed token passes; unlisted ones at or just below q_min may pass too
        c_lo, c_hi = float(r.n), float(r.n) + r.n_tail if r.tail > 0 else float(r.n)
    return min(lo, c_lo), min(hi, c_hi)


def _nucleus(r: _Ranking, p: float, alpha: float, cw: np.ndarray, alive: float, z: float,
             notes: list[str] | None) -> int | None:
    """Smallest j (≤ the listed alive tokens) whose cumulative share of z reaches p; None when none does."""
    last = int(min(alive, r.n))
    if not math.isfinite(z):
        return None
    hit = np.flatnonzero(cw[:last] >= p * z)
    if hit.size == 0:
        return None
    j = int(hit[0]) + 1
    if notes is not None:
        spread = math.exp(2 * alpha * r.tol)
        prev = cw[j - 2] / z if j >= 2 else 0.0
        here = cw[j - 1] / z
        if (j >= 2 and _odds(prev) * spread >= _odds(p)) or (here < 1.0 and _odds(here) / spread < _odds(p)):
            notes.append(f"top_p {p:g}: the cumulative probability at token {j} is within the rounding tolerance")
        elif j < alive and j < r.n and r.lp[j - 1] - r.lp[j] <= 2 * r.tol:
            notes.append(f"top_p {p:g}: tokens {j} and {j + 1} are tied within {2 * r.tol:.2g} nats")
    return j


def _top_p(r: _Ranking, p: float, alpha: float, lo: float, hi: float, notes: list[str]) -> tuple[float, float]:
    cw = np.cumsum(np.exp(alpha * (r.lp - r.lp[0])))

    def z(alive: float, upper: bool) -> float:
        if alive <= r.n:
            return float(cw[int(alive) - 1])
        t_lo, t_hi = r.tail_sum(alive - r.n, alpha)
        return float(cw[-1]) + (t_hi if upper else t_lo)

    j_lo = _nucleus(r, p, alpha, cw, lo, z(lo, upper=False), notes)
    j_hi = _nucleus(r, p, alpha, cw, hi, z(hi, upper=True), notes if hi != lo else None)
    new_lo = float(j_lo) if j_lo is not None else float(min(lo, r.n + 1))
    new_hi = float(j_hi) if j_hi is not None else hi
    return new_lo, max(new_lo, new_hi)


def _run_order(r: _Ranking, steps: Sequence[str], t: float, k: int | None, p: float | None,
               m: float | None) -> tuple[float, float, list[str]]:
    """Bounds [lo, hi] on how many tokens of the full ranking the filters keep, and boundary notes."""
    lo = hi = r.n + r.n_tail if r.tail > 0 else float(r.n)
    alpha = 1.0
    notes: list[str] = []
    for step in steps:
        if step == "temperature":
            alpha = 1.0 / t
        elif step == "top_k" and k is not None:
            lo, hi = _top_k(r, k, lo, hi, notes)
        elif step == "min_p" and m is not None:
            lo, hi = _min_p(r, m, alpha, lo, hi, notes)
        elif step == "top_p" and p is not None:
            lo, hi = _top_p(r, p, alpha, lo, hi, notes)
    return lo, hi, notes


def _resolve_orders(order: Iterable[str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for o in order:
        if isinstance(o, str):
            if o not in SAMPLER_ORDERS:
                raise ValueError(f"unknown sampler order {o!r}; known: {', '.join(SAMPLER_ORDERS)}")
            out[o] = SAMPLER_ORDERS[o]
        else:
            steps = tuple(o)
            if sorted(steps) != ["min_p", "temperature", "top_k", "top_p"]:
                raise ValueError(f"a custom order lists temperature, top_k, top_p, min_p once each, got {steps}")
            out["→".join(steps)] = steps
    if not out:
        raise ValueError("order must name at least one sampler order")
    return out


def _bad_logprob(v: object) -> bool:
    if not _real(v) or math.isnan(v):
        return True
    return v > 1e-6  # a log-probability is <= 0 (a little above is rounding)


def implied_distribution(top: Mapping[Token, float], *, temperature: float, top_k: int | None = None,
                         top_p: float | None = None, min_p: float | None = None,
                         order: Iterable[str | Sequence[str]] = DEFAULT_ORDERS, tol: float = LOGPROB_TOL,
                         near_deterministic: float = NEAR_DETERMINISTIC,
                         vocab_size: int | None = None) -> Implied:
    """The kept tokens and their probabilities under the settings, from the listed top-k log-probabilities.

    Filters, each cutting a prefix of the ranking (min_keep 1):
    - **top_k**: the k most likely tokens (None or ≤ 0: off);
    - **top_p** (nucleus): the smallest prefix whose cumulative probability, renormalised over the tokens
      still kept at that step, is ≥ p (None or 1: off);
    - **min_p**: tokens with p ≥ min_p · p_max at that step (None or 0: off);
    - **temperature** T: logits / T. Rank is unchanged, but top-p and min-p see tempered probabilities
      when it comes first (vLLM) and raw ones when it comes last (llama.cpp). T below ``GREEDY_T``
      is greedy decoding: the top token alone, whatever the filters.

    The kept set is computed under every order in ``order`` (``SAMPLER_ORDERS``: llama.cpp, vLLM, Hugging
    Face, SGLang). Probabilities are then ``exp(lp / T)`` renormalised over the kept set, which does not
    depend on the order. The unlisted tail (mass ``1 − listed_mass``, no token above the least likely
    listed one) is carried as bounds: a cut that may fall in the tail, or whose position depends on
    the tail's unknown shape, gives ``beyond_top``.

    Args:
        top: listed token → raw natural-log probability (log-softmax before any sampling step), e.g.
            the engine's top 20 at the first generated position.
        temperature, top_k, top_p, min_p: the request's settings, as ``sampling_settings`` returns them.
        order: order names from ``SAMPLER_ORDERS``, or custom tuples of the four step names; pass the one
            order of a known engine to avoid ``ambiguous_order``.
        tol: nats a listed logprob may be off; a cut within it is a ``boundary``.
        near_deterministic: top-token probability from which the status is ``near_deterministic``.
        vocab_size: number of tokens in the vocabulary, if known; it narrows the bounds on the tail (above
            all for top-p over the tail at temperature above 1, which is unbounded without it).

    Returns:
        An ``Implied``. Unusable log-probabilities (not numbers, NaN, above 0, summing above 1 beyond
        ``tol``, a zero-probability token listed while mass is unlisted, or more unlisted mass than the
        rest of the vocabulary can hold below the least likely listed token) give ``bad_logprobs``.

    Raises:
        ValueError: bad settings (negative or non-finite temperature, top_p outside (0, 1], min_p outside
        [0, 1], non-integer top_k), an unknown order, or ``vocab_size`` below the number of listed tokens.
    """
    t = _number(temperature, "temperature")
    if t < 0:
        raise ValueError(f"temperature must be >= 0, got {t}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k):
        raise ValueError(f"top_k must be an integer, got {top_k!r}")
    k = int(top_k) if top_k is not None and top_k > 0 else None
    p = _number(top_p, "top_p") if top_p is not None else None
    if p is not None and not 0 < p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {p}")
    p = p if p is not None and p < 1 else None
    m = _number(min_p, "min_p") if min_p is not None else None
    if m is not None and not 0 <= m <= 1:
        raise ValueError(f"min_p must lie in [0, 1], got {m}")
    m = m if m else None
    orders = _resolve_orders(order)
    if vocab_size is not None and vocab_size < len(top):
        raise ValueError(f"vocab_size {vocab_size} is below the {len(top)} listed tokens")

    def unjudged(status: str, reasons: list[str], listed: tuple[Token, ...] = (), mass: float = math.nan,
                 by_order: dict[str, tuple[Token, ...] | None] | None = None) -> Implied:
        return Implied(status, {}, (), listed, mass, None, tuple(reasons), by_order or {}, t)

    bad = [k_ for k_, v in top.items() if _bad_logprob(v)]
    if not top or bad:
        why = "no listed tokens" if not top else f"listed log-probability not usable: {bad[0]!r}: {top[bad[0]]!r}"
        return unjudged("bad_logprobs", [why], tuple(top))
    items = sorted(top.items(), key=lambda kv: (-kv[1], str(kv[0])))
    keys = tuple(kv[0] for kv in items)
    lp = np.minimum(np.array([kv[1] for kv in items], dtype=float), 0.0)
    mass = float(np.exp(lp).sum())
    if mass > math.exp(tol) + 1e-12:
        return unjudged("bad_logprobs", [f"listed probabilities sum to {mass:.6f} > 1: not raw log-softmax"],
                        keys, mass)
    tail = 1.0 - mass
    # the listed tokens hold all the mass, up to rounding (not up to a tolerance widened by a noisy engine:
    # that would hide a real tail from the support check)
    if tail <= 1.0 - math.exp(-min(tol, LOGPROB_TOL)):
        tail = 0.0
    n_tail = 0.0 if tail == 0 else (math.inf if vocab_size is None else float(vocab_size - len(keys)))
    if tail > 0 and (n_tail == 0 or math.isinf(lp[-1]) or tail > n_tail * math.exp(lp[-1] + tol)):
        why = (f"{tail:.4f} of the mass is unlisted, more than the unlisted tokens can hold below the least "
               "likely listed one: not the top of the distribution")
        return unjudged("bad_logprobs", [why], keys, mass)
    r = _Ranking(lp, tail, n_tail, tol)

    if t < GREEDY_T:
        if r.n > 1 and lp[0] - lp[1] <= 2 * tol:
            return unjudged("boundary", [f"greedy: the top two tokens are tied within {2 * tol:.2g} nats"], keys,
                            mass)
        by_order: dict[str, tuple[Token, ...] | None] = {name: keys[:1] for name in orders}
        return Implied("near_deterministic", {keys[0]: 1.0}, keys[:1], keys, mass, 1.0,
                       (f"temperature {t:g} is greedy decoding",), by_order, t)

    by_order = {}
    beyond: list[str] = []
    notes: list[str] = []
    for name, steps in orders.items():
        lo, hi, order_notes = _run_order(r, steps, t, k, p, m)
        notes += [f"{name}: {w}" for w in order_notes]
        if lo == hi and hi <= r.n:
            by_order[name] = keys[: int(hi)]
        else:
            by_order[name] = None
            beyond.append(name)
    if beyond:
        why = (f"under {', '.join(beyond)} order the kept tokens may reach past the listed ones (the {r.n} "
               f"listed hold {mass:.4f} of the mass)")
        return unjudged("beyond_top", [why], keys, mass, by_order)
    if notes:
        return unjudged("boundary", notes, keys, mass, by_order)
    sets = {v for v in by_order.values()}
    if len(sets) > 1:
        parts = ", ".join(f"{name} keeps {len(v or ())}" for name, v in by_order.items())
        return unjudged("ambiguous_order", [f"the orders keep different tokens: {parts}"], keys, mass, by_order)
    kept = next(iter(sets)) or ()
    lk = lp[: len(kept)]
    finite = np.isfinite(lk)
    kept = tuple(kk for kk, f in zip(kept, finite) if f)
    s = (lk[finite] - lk[0]) / t
    w = np.exp(s)
    prob = w / w.sum()
    probs = {kk: float(v) for kk, v in zip(kept, prob)}
    max_p = float(prob[0])
    if max_p >= near_deterministic:
        return Implied("near_deterministic", probs, kept, keys, mass, max_p,
                       (f"top token at {max_p:.4f} >= {near_deterministic:g}",), by_order, t)
    return Implied("ok", probs, kept, keys, mass, max_p, (), by_order, t)


# ------------------------------------------------------------------------------------------------------- TV


def expected_tv(p: Sequence[float] | np.ndarray, n: int) -> float:
    """Exact expectation of the TV between the empirical distribution of n i.i.d. draws from p and p.

    ``E[½ Σ_i |X_i/n − p_i|]`` where marginally ``X_i ~ Binomial(n, p_i)``; each term is the sum over
    x = 0..n of ``binom.pmf(x, n, p_i) · |x/n − p_i|`` (scipy.stats.binom), so the result is exact up to
    float rounding. It is the TV a correct sampler shows on average from sampling noise alone.

    Args:
        p: probabilities, shape (m,), non-negative and summing to 1 (within 1e-6).
        n: number of draws, ≥ 1.

    Returns:
        The expected TV, probability mass in [0, 1).

    Raises:
        ValueError: p not 1-D, negative, non-finite or not summing to 1; n not a positive integer.

    Source: linearity of expectation over the binomial marginals; the per-token term equals de Moivre's
    mean absolute deviation of the binomial, ``E|X − np| = 2ν·C(n, ν)·p^ν·(1−p)^(n−ν+1)`` with
    ν = ⌊np⌋ + 1 (Diaconis & Zabell, *Closed form summation for classical distributions*, Statistical
    Science 6(3), 1991).
    """
    arr = np.asarray(p, dtype=float)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"p must be a non-empty 1-D array of non-negative probabilities, got {p!r}")
    if abs(arr.sum() - 1.0) > 1e-6:
        raise ValueError(f"p must sum to 1, sums to {arr.sum()!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    n = int(n)
    x = np.arange(n + 1)
    pmf = binom.pmf(x[None, :], n, arr[:, None])  # shape (m, n + 1)
    dev = np.abs(x[None, :] / n - arr[:, None])
    return float(0.5 * (pmf * dev).sum())


def observed_tv(draws: Mapping[Token, int], probs: Mapping[Token, float]) -> float:
    """TV between the empirical distribution of ``draws`` (token → count) and ``probs`` (token → p).

    Tokens drawn but absent from ``probs`` count with p = 0. Raises ValueError on a negative count or no
    draws."""
    n = sum(draws.values())
    if n < 1 or any(c < 0 for c in draws.values()):
        raise ValueError(f"draws must be non-negative counts with at least one draw, got {dict(draws)!r}")
    keys = set(draws) | set(probs)
    return 0.5 * sum(abs(draws.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


def tv_between(a: Mapping[Token, float], b: Mapping[Token, float]) -> float:
    """TV ½ Σ |a_i − b_i| between two distributions given as token → probability (missing: 0)."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def excess_tv(draws: Mapping[Token, int], implied: Implied) -> dict[str, Any]:
    """One prompt's draws against the implied distribution.

    Args:
        draws: token → count of the S draws (a ``Counter``), binned like ``implied``'s tokens.
        implied: an ``Implied`` with status ok or near_deterministic.

    Returns:
        ``{"n_draws", "tv", "tv_expected", "excess", "out_of_support", "outside_listed", "kept", "max_p"}``:
        observed TV (probability mass), its exact expectation under correct sampling (``expected_tv``),
        their difference, draws outside the kept set (count), draws not even among the listed tokens
        (count), the kept-set size and the top kept probability.

    Raises:
        ValueError: ``implied`` carries no distribution, or the draws are empty or negative.
    """
    if not implied.judged:
        raise ValueError(f"no implied distribution to compare with (status {implied.status})")
    tv = observed_tv(draws, implied.probs)
    n = sum(draws.values())
    p = np.array([implied.probs[k] for k in implied.kept])
    expected = expected_tv(p, n)
    listed = set(implied.listed)
    return {"n_draws": n, "tv": tv, "tv_expected": expected, "excess": tv - expected,
            "out_of_support": sum(c for k, c in draws.items() if k not in implied.probs),
            "outside_listed": sum(c for k, c in draws.items() if k not in listed),
            "kept": len(implied.kept), "max_p": implied.max_p}


# ----------------------------------------------------------------------------------------------- seed check


def collision_probability(draws: Mapping[Token, int]) -> float:
    """Estimated probability that two independent draws give the same token: Σ c(c−1) / (n(n−1)).

    The unbiased (U-statistic) estimate of Σ p_i² from counts; 1.0 with fewer than two draws."""
    n = sum(draws.values())
    if n < 2:
        return 1.0
    return sum(c * (c - 1) for c in draws.values()) / (n * (n - 1))


def _seed_status(same: int, repeats: int, chance: float, match_min: float, inconclusive: float) -> str:
    if repeats == 0:
        return "not checked"
    if chance > inconclusive:
        return "inconclusive"
    return "honoured" if same >= match_min * repeats else "ignored"


def seed_check(first: Mapping[int, Token], repeat: Mapping[int, Token], implied: Implied | None = None, *,
               match_min: float = SEED_MATCH_MIN, inconclusive: float = SEED_INCONCLUSIVE) -> dict[str, Any]:
    """Does re-asking a seed reproduce its first draw? One prompt.

    Args:
        first: seed → token of the first round of draws (all S of them).
        repeat: seed → token of the same seeds asked again (a subset).
        implied: the prompt's implied distribution, if judged; its Σp² is a second estimate of the chance
            repeat rate.

    Returns:
        ``{"status", "repeats", "same", "expected_same_if_ignored"}``. The chance rate is the larger of
        the draws' collision estimate (how the engine actually draws) and the implied Σp². Status:
        ``not checked`` (no seed in both), ``inconclusive`` (chance rate above ``inconclusive``: a
        repeat says nothing), ``honoured`` (at least ``match_min`` of the repeats give the first token),
        else ``ignored``.
    """
    both = [s for s in repeat if s in first]
    same = sum(1 for s in both if repeat[s] == first[s])
    chance = collision_probability(Counter(first.values()))
    if implied is not None and implied.judged:
        chance = max(chance, float(sum(v * v for v in implied.probs.values())))
    return {"status": _seed_status(same, len(both), chance, match_min, inconclusive), "repeats": len(both),
            "same": same, "expected_same_if_ignored": chance}


def combine_seed_checks(checks: Sequence[Mapping[str, Any]], *, match_min: float = SEED_MATCH_MIN,
                        inconclusive: float = SEED_INCONCLUSIVE) -> dict[str, Any]:
    """Several prompts' ``seed_check`` results as one: repeats and matches summed, the chance rate
    weighted by repeats, and the status by the same rules."""
    repeats = sum(int(c["repeats"]) for c in checks)
    same = sum(int(c["same"]) for c in checks)
    chance = (sum(c["expected_same_if_ignored"] * c["repeats"] for c in checks) / repeats) if repeats else 1.0
    return {"status": _seed_status(same, repeats, chance, match_min, inconclusive), "repeats": repeats,
            "same": same, "expected_same_if_ignored": chance, "prompts": len([c for c in checks if c["repeats"]])}


def seed_stage(first: Mapping[str, Mapping[str, Token]], got: Mapping[str, Mapping[int, Token]], *,
               chance_max: float = SEED_STAGE_CHANCE) -> dict[str, Any]:
    """The sequential seed check's first stage, judged: one repeat per prompt.

    Args:
        first: prompt id → its first draws (``{"<seed>": token}``); got: prompt id → {seed: token} of the repeats.
        chance_max: the largest chance of all-same repeats under an ignored seed that still stops.

    Returns:
        ``{"stopped", "repeats", "same", "chance_all_same", "why"}``. ``chance_all_same`` is the product over the
        repeats of the prompt's collision probability (Σ over tokens of the drawn share squared, with n(n−1)
        pairs), the chance that an engine ignoring the seed gives every repeat its first token; ``stopped`` when
        every repeat matched and that chance is ≤ ``chance_max`` (a likelihood-ratio stop: an honoured seed matches
        every time, so all-same is ≥ 1/chance times likelier under it).
    """
    repeats = same = 0
    chance = 1.0
    for pid, draws in first.items():
        rate = collision_probability(Counter(draws.values()))
        for s, key in got.get(pid, {}).items():
            if str(s) in draws:
                repeats += 1
                same += draws[str(s)] == key
                chance *= rate
    stopped = bool(repeats) and same == repeats and chance <= chance_max
    why = (f"{same} of {repeats} first repeats matched; an engine ignoring the seed matches them all with chance "
           f"{chance:.1e}" + (f" (≤ {chance_max:g}): stopped" if stopped else ": the other seeds asked"))
    return {"stopped": stopped, "repeats": repeats, "same": same, "chance_all_same": chance, "why": why}



# -------------------------------------------------------------------------------------------------- judge


def _as_counts(draws: Mapping[int, Token] | Sequence[Token] | None) -> Counter[Token]:
    if draws is None:
        return Counter()
    return Counter(draws.values()) if isinstance(draws, Mapping) else Counter(draws)


def _repeat_delta(a: Mapping[Token, float], b: Mapping[Token, float]) -> float:
    deltas = []
    for k in a:
        x, y = a[k], b[k]
        if _bad_logprob(x) or _bad_logprob(y):
            continue
        deltas.append(0.0 if x == y else abs(x - y))
    return max(deltas, default=0.0)


def _fmt_dropped(dropped: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(dropped.items())) or "none"


def _tempered_reading(inf: list[dict[str, Any]], margin: float, resamples: int, seed: int) -> dict[str, Any] | None:
    """Diagnosis for a TV FAIL at T ≠ 1: the excess TV when each informative prompt's logprobs are taken as already
    divided by T. None unless every informative prompt has that reading. ``fits``: its CI lies within the margin."""
    alt = np.array([r["excess_if_tempered"] for r in inf if "excess_if_tempered" in r], dtype=float)
    if not inf or alt.size != len(inf):
        return None
    lo, hi = stats.cluster_bootstrap_ci([(float(x), 1) for x in alt], resamples, seed)
    return {"excess": float(alt.mean()), "ci95": [lo, hi], "fits": hi is not None and hi <= margin}


def _precedence(*, unmodelled: list[str], fails: list[str], problems: list[str], tv: tuple[str, str],
                tail: str) -> tuple[str, str]:
    """The verdict, most decisive cause first: settings the check cannot model (UNPROVEN: nothing it computes
    applies), a failed check (FAIL), incomplete data (UNPROVEN), then the excess-TV verdict itself. Where the
    verdict is not the statistic's own, the statistic's outcome is still given in the reason."""
    tv_v, tv_why = tv
    stat = f"[excess TV by itself: {tv_v} — {tv_why}]"
    if unmodelled:
        parts = [f"not computable: the request sets {', '.join(unmodelled)}, which reshape the first-token "
                 "distribution beyond this check's model", stat]
        if fails:
            parts.append("checks that failed regardless: " + "; ".join(fails))
        return "UNPROVEN", " ".join(parts)
    if fails:
        return "FAIL", "; ".join(fails) + (f" [further: {'; '.join(problems)}]" if problems else "")
    if problems:
        return "UNPROVEN", "; ".join(problems) + " " + stat
    if tv_v != "PASS":
        return tv_v, tv_why
    return "PASS", f"{tv_why}; {tail}"


def judge_sampling(per_prompt: Sequence[Mapping[str, Any]], *, sampling: Mapping[str, Any], margin: float,
                   resamples: int = 10000, seed: int = 0, n_seeds: int | None = None,
                   min_prompts: int = MIN_PROMPTS, oos_max: float = OOS_MAX,
                   order: Iterable[str | Sequence[str]] = DEFAULT_ORDERS, tol: float = LOGPROB_TOL,
                   near_deterministic: float = NEAR_DETERMINISTIC, greedy_alpha: float = GREEDY_ONLY_ALPHA,
                   vocab_size: int | None = None, confidence: float = 0.95,
                   oos_decision: tuple[str, str] | None = None,
                   tv_decision: tuple[str, str] | None = None) -> dict[str, Any]:
    """One server's sampler verdict from its per-prompt logprobs and draws.

    Per prompt: requests failed or draws missing → ``incomplete``; listed tokens that differ between the
    two logprob requests → ``logprobs_unstable``; else the implied distribution (tolerance widened to
    the largest logprob change between the two requests) and, when it has one, the draws against it.
    Only ``ok`` prompts are informative for TV; ``near_deterministic`` ones join the support check.

    Checks:
    - **excess_tv**: mean over informative prompts of (observed TV − expected TV), with a percentile
      bootstrap 95% interval over prompts (``stats.cluster_bootstrap_ci`` on units (excess, 1)), judged by
      ``stats.margin_verdict`` against ``margin``. Fewer than ``min_prompts`` informative prompts →
      UNPROVEN. An engine that ignores temperature (draws the greedy token) shows up here as a large
      excess, about 1 − p_max per prompt.
    - **out_of_support**: draws outside the kept set over all draws of informative and near-deterministic
      prompts; FAIL when the Wilson 95% lower bound exceeds ``oos_max``, PASS when the upper bound is
      within it, else UNPROVEN (too few draws to bound the share), which makes the verdict UNPROVEN.
    - **greedy_only**: at a sampling temperature, every draw of every informative prompt was its top
      token; FAIL when that event's probability under the implied distributions, Π p_max^n, is below
      ``greedy_alpha`` (an exact test; it does not depend on ``min_prompts``). It can only FAIL.
    - **settings**: a field in ``sampling`` this module does not model (``unmodelled_settings``) →
      UNPROVEN, whatever the statistics say (they are still reported).

    Verdict, in order: unmodelled settings → UNPROVEN; any FAIL → FAIL; any ``incomplete`` prompt (a failed
    request, missing logprobs or draws) → UNPROVEN; else the excess_tv verdict (PASS or UNPROVEN).

    Args:
        per_prompt: one dict per prompt: ``id``; ``top`` and ``top_again`` (token → logprob of the two
            identical logprob requests, None when one failed); ``draws`` (seed → token, or a list of
            tokens); optional ``error`` (a failed request, text), ``bucket`` and ``repeat`` (seed → token
            of seeds asked again, for the seed check).
        sampling: the sampling fields sent with every draw (temperature required; see
            ``sampling_settings``); also searched for unmodelled fields.
        margin: pre-registered margin on the mean excess TV (probability mass).
        resamples, seed: bootstrap replicates and generator seed.
        n_seeds: draws each prompt must have (fewer → incomplete); None: no count check.
        min_prompts, oos_max, order, tol, near_deterministic, greedy_alpha, vocab_size: see the module
            constants and ``implied_distribution``.
        confidence: coverage of the excess-TV bootstrap interval (0.95; a sequential look uses 1 − α/K, the
            Bonferroni share of one of K looks: ``quality/sampling_sequential.py``). ``ci95`` holds the interval
            at this coverage, named in ``confidence`` and in the reason.
        oos_decision: ``(verdict, why)`` that replaces the out-of-support Wilson rule (a sequential look's SPRT
            decision); None keeps the Wilson rule.
        tv_decision: ``(verdict, why)`` that replaces the excess-TV margin rule when that rule did not FAIL (a
            sequential look's early PASS by the top-share SPRT, ``quality/sampling_sequential.py``); the interval
            is still computed and named in the reason. Ignored with fewer than ``min_prompts`` informative prompts.

    Returns:
        ``{"verdict", "reason", "checks": {"excess_tv", "out_of_support", "greedy_only", "settings"},
        "dropped": {reason: count}, "dropped_why", "n_prompts", "n_informative", "n_support_checked",
        "problems", "notes", "seed_check", "rows"}``. ``rows`` hold each prompt's status and figures.

    Raises:
        ValueError: bad settings in ``sampling`` or a bad order (user errors, for the caller to report).
    """
    cfg, unsent = sampling_settings(sampling)
    unmodelled = unmodelled_settings(sampling)
    t = float(cfg["temperature"] or 0.0)
    kw: dict[str, Any] = {"temperature": t, "top_k": cfg["top_k"], "top_p": cfg["top_p"], "min_p": cfg["min_p"],
                          "order": tuple(order), "near_deterministic": near_deterministic,
                          "vocab_size": vocab_size}
    rows: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    errors: list[str] = []
    seed_rows = []
    for item in per_prompt:
        pid = item.get("id")
        row: dict[str, Any] = {"id": pid}
        imp: Implied | None = None
        if item.get("bucket") is not None:
            row["bucket"] = item["bucket"]
        a, b = item.get("top"), item.get("top_again")
        draws = item.get("draws")
        counts = _as_counts(draws)
        n = sum(counts.values())
        if item.get("error"):
            errors.append(f"{pid}: {str(item['error'])[:200]}")
        if item.get("error") or a is None or b is None or n == 0 or (n_seeds is not None and n < n_seeds):
            row["status"] = "incomplete"
        elif set(a) != set(b) or not math.isfinite(delta := _repeat_delta(a, b)):
            row.update(status="logprobs_unstable", listed=sorted(map(str, a)), listed_again=sorted(map(str, b)))
        else:
            tol_here = max(tol, delta)
            imp = implied_distribution(a, tol=tol_here, **kw)
            row.update(logprob_repeat_max_delta=delta, tolerance=tol_here, listed_mass=imp.listed_mass,
                       kept_by_order={k: (len(v) if v is not None else None) for k, v in imp.kept_by_order.items()})
            if not imp.judged:
                row.update(status=imp.status, detail="; ".join(imp.reasons))
            else:
                row["status"] = "informative" if imp.status == "ok" else "near_deterministic"
                row.update(excess_tv(counts, imp))
                row["greedy_draws"] = counts.get(imp.kept[0], 0)
                row["implied"] = [[k, imp.probs[k]] for k in imp.kept]
                row["histogram"] = [[k, c] for k, c in counts.most_common()]
                if row["status"] == "informative" and t != 1.0:
                    # diagnosis only: the same logprobs read as already temperature-scaled
                    alt = implied_distribution(a, tol=tol_here, **{**kw, "temperature": 1.0})
                    if alt.judged:
                        row["excess_if_tempered"] = excess_tv(counts, alt)["excess"]
        if item.get("repeat") and isinstance(draws, Mapping) and row["status"] != "incomplete":
            seed_rows.append(seed_check(draws, item["repeat"], imp))
        rows.append(row)

    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault(r["status"], []).append(r)
    dropped.update({status: len(rs) for status, rs in grouped.items() if status != "informative"})
    inf = grouped.get("informative", [])
    sup = inf + grouped.get("near_deterministic", [])  # every prompt whose kept set is known
    lo, hi = (stats.cluster_bootstrap_ci([(r["excess"], 1) for r in inf], resamples, seed, confidence)
              if len(inf) >= 2 else (None, None))
    cov = f"{confidence * 100:.4g}%"

    def mean(key: str) -> float | None:
        return float(np.mean([r[key] for r in inf])) if inf else None

    tv_check: dict[str, Any] = {
        "mean_tv": mean("tv"), "mean_tv_expected": mean("tv_expected"), "excess": mean("excess"),
        "ci95": [lo, hi], "confidence": confidence, "margin": margin, "n_prompts": len(inf),
        "min_prompts": min_prompts, "resamples": resamples, "bootstrap_seed": seed}
    if len(inf) < min_prompts:
        tv_v = "UNPROVEN"
        tv_why = f"{len(inf)} informative prompt(s), need {min_prompts} (dropped: {_fmt_dropped(dropped)})"
    else:
        tv_v, _ = stats.margin_verdict(lo, hi, margin)
        tv_why = (f"mean excess TV {tv_check['excess']:+.4f} (observed {tv_check['mean_tv']:.4f}, expected "
                  f"{tv_check['mean_tv_expected']:.4f}), {cov} CI {lo:+.4f} to {hi:+.4f} against margin {margin:g} "
                  f"over {len(inf)} prompts")
        if tv_decision is not None and tv_v != "FAIL":
            tv_v, tv_why = tv_decision[0], f"{tv_decision[1]}; {tv_why}"
    tv_check.update(verdict=tv_v, reason=tv_why)

    oos = sum(r["out_of_support"] for r in sup)
    outside = sum(r["outside_listed"] for r in sup)
    of = sum(r["n_draws"] for r in sup)
    wl, wh = stats.wilson_interval(oos, of) if of else (None, None)
    oos_fail = wl is not None and wl > oos_max
    oos_short = of > 0 and not oos_fail and wh is not None and wh > oos_max  # too few draws to bound the rate
    oos_verdict = "FAIL" if oos_fail else ("UNPROVEN" if oos_short else "PASS" if of else "NOT RUN")
    if oos_decision is not None and of:
        oos_verdict = oos_decision[0]
        oos_fail, oos_short = oos_verdict == "FAIL", oos_verdict == "UNPROVEN"
    oos_check = {"verdict": oos_verdict, "draws": oos, "of": of,
                 "rate": oos / of if of else None, "ci95": [wl, wh], "max_rate": oos_max,
                 "outside_listed": outside, "prompts": len(sup)}

    greedy = sum(r["greedy_draws"] for r in inf)
    drawn = sum(r["n_draws"] for r in inf)
    log10_p = (sum(r["n_draws"] * math.log10(r["max_p"]) for r in inf) if inf else None)
    greedy_fail = (t >= GREEDY_T and bool(inf) and greedy == drawn and log10_p is not None
                   and log10_p < math.log10(greedy_alpha))
    greedy_check = {"verdict": "FAIL" if greedy_fail else ("PASS" if inf and t >= GREEDY_T else "NOT RUN"),
                    "greedy_draws": greedy, "draws": drawn, "prompts": len(inf),
                    "log10_p_all_greedy": log10_p if greedy == drawn else None, "alpha": greedy_alpha}
    settings_check = {"verdict": "UNPROVEN" if unmodelled else "PASS", "unmodelled": unmodelled,
                      "unsent": unsent, "sampling": cfg, "orders": list(_resolve_orders(kw["order"]))}

    fails = []
    if tv_v == "FAIL":
        fails.append(f"the draws disagree with the distribution the server's own logprobs imply: {tv_why}")
        diag = _tempered_reading(inf, margin, resamples, seed)
        if diag is not None:
            tv_check["excess_if_logprobs_were_tempered"] = diag
            if diag["fits"]:
                fails.append(f"read as temperature-scaled already, the same logprobs do fit the draws (excess "
                             f"{diag['excess']:+.4f}, 95% CI {diag['ci95'][0]:+.4f} to {diag['ci95'][1]:+.4f}): "
                             "the server probably reports logprobs after temperature, and this check needs raw ones")
    if greedy_fail:
        fails.append(f"temperature {t:g} ignored: all {drawn} draws over {len(inf)} prompts were the top token, "
                     f"probability 10^{log10_p:.1f} if the server sampled as its log-probabilities imply")
    if oos_fail:
        fails.append(f"{oos}/{of} draws ({oos / of:.2%}, "
                     + (f"{oos_decision[1]}" if oos_decision else f"95% CI {wl:.2%} to {wh:.2%}")
                     + f") fall outside the set these settings keep (at most {oos_max:.1%} allowed)"
                     + (f"; {outside} of them lie beyond the whole listed top" if outside else ""))
    notes = []
    if unsent:
        notes.append(f"{', '.join(unsent)} not sent: read as off, but an engine that applies its own default "
                     "(llama.cpp: top_k 40, top_p 0.95, min_p 0.05; vLLM: generation_config.json) then draws "
                     "from another distribution; send every sampling field")
    if fails and unsent:
        fails.append(f"unsent {', '.join(unsent)} were taken as off; an engine that fills in its own defaults for "
                     "them would produce this too")
    problems = []
    if oos_short:
        problems.append(f"{oos} of {of} draws outside the kept tokens: too few draws to bound that share below "
                        f"{oos_max:.1%} " + (f"({oos_decision[1]})" if oos_decision else
                                             f"(95% Wilson upper bound {wh:.2%})"))
    incomplete = dropped.get("incomplete", 0)
    if incomplete:
        problems.append(f"{incomplete} prompt(s) incomplete: failed requests or missing logprobs or draws"
                        + (f" (e.g. {errors[0]})" if errors else ""))
    verdict, reason = _precedence(unmodelled=unmodelled, fails=fails, problems=problems, tv=(tv_v, tv_why),
                                  tail=f"{oos} of {of} draws outside the kept tokens")
    no_repeats = {"status": "not checked", "repeats": 0, "same": 0, "expected_same_if_ignored": None, "prompts": 0}
    return {"verdict": verdict, "reason": reason,
            "checks": {"excess_tv": tv_check, "out_of_support": oos_check, "greedy_only": greedy_check,
                       "settings": settings_check},
            "dropped": dict(sorted(dropped.items())),
            "dropped_why": {k: DROPPED_WHY.get(k, k) for k in sorted(dropped)},
            "n_prompts": len(rows), "n_informative": len(inf), "n_support_checked": len(sup),
            "problems": problems, "notes": notes,
            "seed_check": combine_seed_checks(seed_rows) if seed_rows else no_repeats, "rows": rows}
