"""Order differences judged against the run's own logprob noise (pure; ``judges/order.py`` uses it).

An engine whose kernels are not batch-invariant (llama.cpp with several slots, vLLM and SGLang on GPUs by
default) computes a request's logits with slightly different rounding alone and inside a batch. At a
position where the greedy top-1 and top-2 tokens are nearly tied, that rounding can pick the other token,
and the replies differ from there on. That is a *property* of the engine (``gates/properties.py``:
``not-batch-invariant``), not evidence that it did other work. Evidence of other work is a divergence at a
position whose margin the rounding could not have bridged.

For one sample, the reference reply ``a`` (alone, or the canonical order) and another reply ``b`` of the same
greedy request are compared token by token on their streamed logprob entries (``logprobs: true,
top_logprobs: 2`` on both; ``gates/probes/load.py``):

- at each position where both chose the same token, the run's own noise is one sample: the change of the
  top-1 vs top-2 margin, ``|(lp_a(t1) - lp_a(t2)) - (lp_b(t1) - lp_b(t2))|`` when both list the same
  runner-up ``t2``, else ``2·|lp_a(t1) - lp_b(t1)|`` (a margin is the difference of two logprobs, each moved
  by about that much);
- at the first position where they chose differently, ``a`` chose ``X`` and ``b`` chose ``Y``: the *swing*
  is ``(lp_a(X) - lp_a(Y)) + (lp_b(Y) - lp_b(X))``, how far the margin between the two moved. When a reply's
  two candidates do not list the other token, its lowest listed logprob bounds the term from below, so the
  swing is a lower bound (``exact`` False).

A divergence's p-value is the rank of the reference copy's margin there, ``lp_a(X) - lp_a(Y)`` (``margin_a``:
how far the run's noise had to move the margin for the other token to win), among the noise samples pooled over
the compared pairs of the run (positions before each pair's first divergence) that were not computed
identically (a pair whose every margin change is exactly 0 ran the same kernels alone and loaded, and says
nothing of the noise of a pair that did not: llama-server ``--parallel 4`` showed both kinds in one run, 7 Dec
2026, and pooling the zeros FAILed an honest divergence): ``p = (1 + #{noise ≥ margin}) / (n + 1)``, the share
of the run's margin changes that would have bridged it (Phipson & Smyth 2010, "Permutation p-values should
never be zero"). The margin, not the swing: a flip happens where the change was large, so honest swings rank
high among the changes (llama-server ``--parallel 4``, ``kat-md-chat-001`` at token 2: swing 0.43 above all 66
changes of its run, margin 0.23 within them). A lower-bound margin gives an upper bound on p, so a small p stays
valid. With ``m`` divergences judged in one part each is held to ``alpha / m`` (Bonferroni 1936): a divergence
below it is *confident* (FAIL evidence); one at or above it is a near-tie within the run's noise (disclosed,
counted, with the widest margin).

A divergence where a copy's chosen token is not the top of its own listed candidates is confident whatever its
margin: at T=0 the chosen token is the argmax (``GREEDY_SLACK`` for the printed value's rounding), so such a
reply was not decoded greedily from the distribution it reports (cheat-proxy's ``order-dependent`` rewrites the
chosen token and leaves the candidates).

Undecided (UNPROVEN evidence, never PASS): a reply with no logprob entries, a divergence where one reply
ended (the end token's logprob is not streamed), or too few noise samples for any p below ``alpha / m``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferencekit.api.reply import rederive

__all__ = ["NEAR_TIE", "CONFIDENT", "UNDECIDED", "Divergence", "TokenStep", "judge_divergences", "pair_noise",
           "steps_of"]

NEAR_TIE, CONFIDENT, UNDECIDED = "near-tie", "confident", "undecided"


@dataclass(frozen=True, slots=True)
class TokenStep:
    """One streamed token: its key (token id when the server sent one, else the token text), its text (the key
    as a string when the entry has none), its logprob and its listed candidates ``{key: logprob}`` (empty when none
    were listed)."""

    key: Any
    text: str
    logprob: float | None
    top: Mapping[Any, float]


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first token two greedy replies chose differently.

    Attributes:
        position: token index (0-based) of the first different choice, in streamed logprob entries.
        a_token, b_token: the two tokens' texts (None where a reply ended there).
        swing: how far the margin between the two tokens moved between the replies (nats; a lower bound when
            ``exact`` is False); None when it cannot be computed (a reply ended, or listed no logprobs).
        exact: the swing used both tokens' logprobs in both replies.
        margin_a: the reference reply's top-1 minus the other reply's token at that position (nats; a lower
            bound when that token was not listed); None as for ``swing``.
        not_greedy: which copy (``"a"``, ``"b"``) chose a token that is not the top of its own listed candidates
            (absent from them, or below one of them): no greedy decode does that, so it is no near-tie; None when
            both chose their own top.
    """

    position: int
    a_token: str | None
    b_token: str | None
    swing: float | None
    exact: bool
    margin_a: float | None
    not_greedy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "a_token": self.a_token, "b_token": self.b_token,
                "swing": _round(self.swing), "exact": self.exact, "margin_a": _round(self.margin_a),
                "not_greedy": self.not_greedy}


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _key(entry: Mapping[str, Any]) -> Any:
    tid = entry.get("id")
    if isinstance(tid, int) and not isinstance(tid, bool):
        return tid
    tok = entry.get("token")
    return tok if isinstance(tok, str) else None


def steps_of(reply: Mapping[str, Any] | None) -> list[TokenStep] | None:
    """A reply's streamed logprob entries as ``TokenStep``s, or None when it carried none (a reply must be the
    re-derived form: ``api.reply.rederive``). Entries of an unknown shape end the list there (nothing past a
    malformed entry is compared)."""
    raw = (reply or {}).get("logprobs")
    if not isinstance(raw, list) or not raw:
        return None
    out: list[TokenStep] = []
    for e in raw:
        if not isinstance(e, dict) or _key(e) is None:
            break
        top: dict[Any, float] = {}
        for c in e.get("top_logprobs") or ():
            lp = _num(c.get("logprob")) if isinstance(c, dict) else None
            k = _key(c) if isinstance(c, dict) else None
            if k is not None and lp is not None and k not in top:
                top[k] = lp
        tok = e.get("token")
        out.append(TokenStep(_key(e), tok if isinstance(tok, str) else str(_key(e)), _num(e.get("logprob")), top))
    return out or None


def _noise(a: TokenStep, b: TokenStep) -> float | None:
    """One noise sample at a position where both chose the same token (module docstring)."""
    ra = [k for k in sorted(a.top, key=lambda k: -a.top[k]) if k != a.key]
    rb = [k for k in sorted(b.top, key=lambda k: -b.top[k]) if k != b.key]
    if ra and rb and ra[0] == rb[0] and a.logprob is not None and b.logprob is not None:
        return abs((a.logprob - a.top[ra[0]]) - (b.logprob - b.top[rb[0]]))
    if a.logprob is not None and b.logprob is not None:
        return 2.0 * abs(a.logprob - b.logprob)
    return None


# a chosen token's logprob may sit this far below a listed candidate's and still be the greedy choice: the two are
# printed from one distribution, so only rounding of the printed value separates them (nats)
GREEDY_SLACK = 1e-6


def _is_own_top(s: TokenStep) -> bool:
    """The chosen token is the top of its own listed candidates, listed with its own logprob (True when none are
    listed: nothing to check)."""
    if not s.top:
        return True
    if s.key not in s.top or s.logprob is None:
        return False
    own = s.top[s.key]  # its listed value: the entry's own logprob must say the same
    return abs(own - s.logprob) <= GREEDY_SLACK and own >= max(s.top.values()) - GREEDY_SLACK


def _margin(s: TokenStep, other: Any) -> tuple[float | None, bool]:
    """``lp(chosen) - lp(other)`` in one reply: exact when ``other`` is listed, else a lower bound from the lowest
    listed candidate (the unlisted token is no more likely); None without the chosen token's logprob."""
    if s.logprob is None:
        return None, False
    if other in s.top:
        return max(0.0, s.logprob - s.top[other]), True
    if s.top:
        return max(0.0, s.logprob - min(s.top.values())), False
    return 0.0, False


def pair_noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[float], Divergence | None, bool]:
    """Compare two greedy replies of one request token by token (a reply with events and no derived fields is
    re-derived first: ``api.reply.rederive``).

    Returns:
        ``(noise, divergence, has_logprobs)``: the noise samples at the positions before the first different
        choice (nats, ≥ 0), that divergence (None when every position of the shorter reply agrees and both
        have the same length), and whether both replies carried logprob entries (False: nothing compared).
    """
    a, b = (rederive(dict(x)) if "logprobs" not in x and x.get("events") else x for x in (a, b))
    sa, sb = steps_of(a), steps_of(b)
    if sa is None or sb is None:
        return [], None, False
    noise: list[float] = []
    for i, (x, y) in enumerate(zip(sa, sb)):
        if x.key != y.key:
            ga, ea = _margin(x, y.key)
            gb, eb = _margin(y, x.key)
            swing = None if ga is None or gb is None else ga + gb
            off = "a" if not _is_own_top(x) else "b" if not _is_own_top(y) else None
            return noise, Divergence(i, x.text, y.text, swing, ea and eb, ga, off), True
        n = _noise(x, y)
        if n is not None:
            noise.append(n)
    if len(sa) != len(sb):
        i = min(len(sa), len(sb))
        return noise, Divergence(i, sa[i].text if i < len(sa) else None, sb[i].text if i < len(sb) else None,
                                 None, False, None), True
    return noise, None, True


def p_value(margin: float, noise: Sequence[float]) -> float:
    """``(1 + #{noise ≥ margin}) / (n + 1)`` (module docstring)."""
    return (1 + sum(1 for x in noise if x >= margin)) / (len(noise) + 1)


def judge_divergences(divergences: Sequence[Divergence], noise: Sequence[float], alpha: float
                      ) -> list[dict[str, Any]]:
    """Each divergence classed NEAR_TIE, CONFIDENT or UNDECIDED against the pooled ``noise`` (module docstring).

    Args:
        divergences: the run's divergences (one per differing sample).
        noise: the noise samples pooled over every compared pair of the part (nats).
        alpha: the part's false-FAIL share; each of the ``m`` divergences with a margin is held to ``alpha / m``.

    Returns:
        one dict per divergence: ``Divergence.to_json()`` plus ``class``, ``p`` (None when undecided) and
        ``why`` (undecided only).
    """
    m = sum(1 for d in divergences if d.margin_a is not None and not d.not_greedy)
    each = alpha / m if m else alpha
    out = []
    for d in divergences:
        row = d.to_json()
        if d.not_greedy:
            out.append({**row, "class": CONFIDENT, "p": None,
                        "why": f"the {'reference' if d.not_greedy == 'a' else 'other'} copy's token is not the top of "
                               "its own listed candidates: no greedy decode chose it"})
            continue
        if d.margin_a is None:
            why = ("one reply ended there: the end token's logprob is not streamed" if d.a_token is None
                   or d.b_token is None else "a reply listed no logprob for the tokens")
            out.append({**row, "class": UNDECIDED, "p": None, "why": why})
            continue
        p = p_value(d.margin_a, noise)
        if p < each:
            out.append({**row, "class": CONFIDENT, "p": _round(p)})
        elif 1.0 / (len(noise) + 1) >= each and d.margin_a > max(noise, default=0.0):
            out.append({**row, "class": UNDECIDED, "p": _round(p),
                        "why": f"the margin exceeds all {len(noise)} noise samples, too few for p < {each:.3g}"})
        else:
            out.append({**row, "class": NEAR_TIE, "p": _round(p)})
    return out
