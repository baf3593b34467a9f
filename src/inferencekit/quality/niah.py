"""Needle in a haystack without a server: haystacks, the grid and scoring.

Everything here is a pure function of its arguments; the job that measures chars per token, sends
the requests and writes ``quality/niah/`` is ``quality/niah_run.py``, the heat-map page
``report/niah_heatmap.py``.

**Haystack.** Filler prose (``data/niah_filler.py``) is generated from small word lists with a
``random.Random`` keyed by ``(seed, length_tokens, trial)``: no external text, no digits, and none of
the needle's words, so the needle is the only number and the only mention of a code. The filler is the same for every
depth of one (length, trial): cells in a column differ only in where the needle sits.

**Size.** A haystack is sized in characters: ``round(length_tokens * chars_per_token)``, needle
included. ``chars_per_token`` is measured by the caller on ``calibration_text()`` with the engine's
tokenizer, or assumed (``ASSUMED_CHARS_PER_TOKEN``) and said so. Whole sentences are added while
they fit; a last list sentence of adjustable length closes the gap, so the haystack lands within
about 15 characters of the target. The instruction and question around it (``PROMPT_OVERHEAD_CHARS``)
and the chat template come on top: the server's ``usage.prompt_tokens`` is the real context length,
and ``score_grid`` reports it per cell.

**Needle.** ``NEEDLE_TEMPLATE`` with a 7-digit code (first digit 1-9). Within one (seed, length)
the codes of trials 0, 1, 2, ... step through the 9,000,000 codes by a stride coprime with
9,000,000, so different trials always get different codes. The needle goes in at the sentence
boundary nearest ``depth`` × (filler length in characters): depth 0 puts it first, 1 last.

**Scoring** (``found``): the code counts when it stands as a whole number — its 7 digits not
touching another digit, nor a ``.``/``,`` followed by a digit (``4821937.5``, ``14,821,937`` and
``48219371`` are other numbers). Punctuation, markdown and letters around it are fine. Digit groups
joined by one space, hyphen, en dash or comma (``482-1937``, ``4,821,937``, ``482 1937``) also count
when the whole group run spells exactly the code. The reply is NFKC-normalised first (full-width
digits, no-break spaces).
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from inferencekit.data.niah_filler import filler
from inferencekit.stats import wilson_interval

__all__ = [
    "ASSUMED_CHARS_PER_TOKEN",
    "MIN_LENGTH_TOKENS",
    "NEEDLE_TEMPLATE",
    "PROMPT_OVERHEAD_CHARS",
    "QUESTION",
    "TEXT_BEGIN",
    "TEXT_END",
    "Message",
    "NiahCase",
    "NiahCaseDict",
    "NiahCell",
    "NiahRow",
    "build_case",
    "case_id",
    "found",
    "plan_grid",
    "score_grid",
]

ASSUMED_CHARS_PER_TOKEN = 4.0
MIN_LENGTH_TOKENS = 64
NEEDLE_TEMPLATE = "Remember that the vault access code is {code}."
TEXT_BEGIN = "--- BEGIN TEXT ---"
TEXT_END = "--- END TEXT ---"
QUESTION = ("Question: what is the vault access code given in the text? "
            "Answer with the seven-digit code only.")
_INTRO = "Below is a long text. One question about it follows the text."
_CODE_SPACE = 9_000_000  # 1000000 ... 9999999
_CODE_STRIDE = 2_718_281  # odd, digit sum 29, ends in 1: coprime with 9,000,000 = 2^6 * 3^2 * 5^6

# --------------------------------------------------------------------------- filler words
# Plain village prose, written for this module. No digits and none of the needle's words
# ("remember", "vault", "access", "code").


# --------------------------------------------------------------------------- cases

class Message(TypedDict):
    """One chat message as sent."""

    role: str
    content: str


class NiahCaseDict(TypedDict):
    """``NiahCase`` as JSON."""

    id: str
    length_tokens: int
    depth: float
    trial: int
    code: str
    needle: str
    messages: list[Message]
    needle_char_offset: int
    haystack_chars: int
    chars_per_token: float


@dataclass(frozen=True, slots=True)
class NiahCase:
    """One haystack with its needle, ready to send.

    Fields: ``id`` (``L1024-D0.50-T2``); ``length_tokens``, the target haystack length in tokens;
    ``depth`` in [0, 1]; ``trial``; ``code``, the 7-digit answer; ``needle``, the planted sentence;
    ``messages``, one user message (instruction, the haystack between ``TEXT_BEGIN`` and
    ``TEXT_END``, ``QUESTION``); ``needle_char_offset``, where the needle starts in the haystack
    (characters from its first); ``haystack_chars``, the haystack's length in characters;
    ``chars_per_token``, the ratio it was sized with.
    """

    id: str
    length_tokens: int
    depth: float
    trial: int
    code: str
    needle: str
    messages: tuple[Message, ...]
    needle_char_offset: int
    haystack_chars: int
    chars_per_token: float

    def to_dict(self) -> NiahCaseDict:
        return NiahCaseDict(id=self.id, length_tokens=self.length_tokens, depth=self.depth, trial=self.trial,
                            code=self.code, needle=self.needle, messages=[Message(**m) for m in self.messages],
                            needle_char_offset=self.needle_char_offset, haystack_chars=self.haystack_chars,
                            chars_per_token=self.chars_per_token)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NiahCase:
        """Read a case back; unknown keys are ignored."""
        return cls(id=str(d["id"]), length_tokens=int(d["length_tokens"]), depth=float(d["depth"]),
                   trial=int(d["trial"]), code=str(d["code"]), needle=str(d["needle"]),
                   messages=tuple(Message(role=str(m["role"]), content=str(m["content"])) for m in d["messages"]),
                   needle_char_offset=int(d["needle_char_offset"]), haystack_chars=int(d["haystack_chars"]),
                   chars_per_token=float(d["chars_per_token"]))


PROMPT_OVERHEAD_CHARS = len(f"{_INTRO}\n\n{TEXT_BEGIN}\n\n{TEXT_END}\n\n{QUESTION}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_length(length_tokens: Any) -> None:
    if not _is_int(length_tokens) or length_tokens < MIN_LENGTH_TOKENS:
        raise ValueError(f"NIAH length {length_tokens!r} is not allowed: lengths are whole numbers of tokens, "
                         f"at least {MIN_LENGTH_TOKENS} (a shorter haystack is little more than the needle)")


def _check_depth(depth: Any) -> None:
    if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0.0 <= depth <= 1.0:
        raise ValueError(f"NIAH depth {depth!r} is outside [0, 1]: 0 puts the needle at the start of the "
                         "haystack, 1 at the end")


def _check_trial(trial: Any, name: str = "trial", low: int = 0) -> None:
    if not _is_int(trial) or trial < low:
        raise ValueError(f"NIAH {name} {trial!r} is not allowed: use a whole number >= {low}")


def _check_ratio(chars_per_token: Any) -> None:
    if isinstance(chars_per_token, bool) or not isinstance(chars_per_token, (int, float)) \
            or not math.isfinite(chars_per_token) or chars_per_token <= 0:
        raise ValueError(f"chars_per_token {chars_per_token!r} must be a positive finite number (measure it on "
                         f"calibration_text() with the engine's tokenizer, or assume {ASSUMED_CHARS_PER_TOKEN})")


def case_id(length_tokens: int, depth: float, trial: int) -> str:
    """``L<length>-D<depth>-T<trial>``; depth with two decimals, or as many as it needs."""
    d = f"{depth:.2f}"
    if float(d) != depth:
        d = repr(float(depth))
    return f"L{length_tokens}-D{d}-T{trial}"


def _code(seed: int, length_tokens: int, trial: int) -> str:
    base = random.Random(f"inferencekit-niah-code/{seed}/{length_tokens}").randrange(_CODE_SPACE)
    return str(1_000_000 + (base + trial * _CODE_STRIDE) % _CODE_SPACE)


def build_case(length_tokens: int, depth: float, trial: int, seed: int, chars_per_token: float) -> NiahCase:
    """Build one haystack with its needle and the chat that asks for the code.

    Args:
        length_tokens: target haystack length in tokens (>= ``MIN_LENGTH_TOKENS``); the instruction,
            question and chat template come on top.
        depth: where the needle goes, as a fraction of the filler: 0.0 start ... 1.0 end.
        trial: which haystack of its cell (>= 0); each trial has its own code and filler.
        seed: seed of the whole grid; the same arguments always give the same case.
        chars_per_token: characters per token of filler text on the target's tokenizer.

    Returns:
        The case (see ``NiahCase``).

    Raises:
        ValueError: an argument is out of range (the message names it and the allowed range).
    """
    _check_length(length_tokens)
    _check_depth(depth)
    _check_trial(trial)
    if not _is_int(seed):
        raise ValueError(f"NIAH seed {seed!r} is not a whole number")
    _check_ratio(chars_per_token)
    depth = float(depth)
    code = _code(seed, length_tokens, trial)
    needle = NEEDLE_TEMPLATE.format(code=code)
    target_chars = round(length_tokens * chars_per_token)
    rng = random.Random(f"inferencekit-niah-filler/{seed}/{length_tokens}/{trial}")
    sentences = filler(rng, target_chars - len(needle) - 1) if target_chars > len(needle) + 1 else []
    # boundary i is the start of filler sentence i (i == len(sentences): after the last one)
    starts = [0]
    for s in sentences:
        starts.append(starts[-1] + len(s) + 1)
    aim = depth * max(starts[-1] - 1, 0)
    index = min(range(len(starts)), key=lambda i: (abs(starts[i] - aim), i))
    haystack = " ".join([*sentences[:index], needle, *sentences[index:]])
    content = f"{_INTRO}\n\n{TEXT_BEGIN}\n{haystack}\n{TEXT_END}\n\n{QUESTION}"
    return NiahCase(id=case_id(length_tokens, depth, trial), length_tokens=length_tokens, depth=depth,
                    trial=trial, code=code, needle=needle, messages=(Message(role="user", content=content),),
                    needle_char_offset=starts[index], haystack_chars=len(haystack),
                    chars_per_token=float(chars_per_token))


def plan_grid(lengths: Sequence[int], depths: Sequence[float], trials: int, seed: int,
              chars_per_token: float) -> list[NiahCase]:
    """Every (length, depth, trial) case, ordered by length, then depth, then trial.

    Raises:
        ValueError: no lengths or depths, a length below ``MIN_LENGTH_TOKENS``, a depth outside
            [0, 1], a value listed twice, ``trials`` < 1, or a bad ``chars_per_token``.
    """
    if not lengths or not depths:
        raise ValueError("NIAH grid needs at least one length and one depth")
    for n in lengths:
        _check_length(n)
    for d in depths:
        _check_depth(d)
    _check_trial(trials, "trials", low=1)
    _check_ratio(chars_per_token)
    if len(set(lengths)) != len(lengths) or len({case_id(0, float(d), 0) for d in depths}) != len(depths):
        raise ValueError(f"NIAH lengths {list(lengths)!r} / depths {list(depths)!r} list a value twice; "
                         "each (length, depth) cell must be unique")
    return [build_case(n, float(d), t, seed, chars_per_token)
            for n in lengths for d in depths for t in range(trials)]


# --------------------------------------------------------------------------- scoring

_SEPARATORS = " \u2010\u2011\u2013,-"
_GROUPED = re.compile(rf"(?<![0-9])(?<![0-9]\.)[0-9]+(?:[{_SEPARATORS}][0-9]+)+(?![0-9])(?!\.[0-9])")


def found(reply: str, code: str) -> bool:
    """Whether ``reply`` gives ``code`` as a whole number (rules in the module docstring).

    Raises:
        ValueError: ``code`` is not a string of ASCII digits.
    """
    if not (code.isascii() and code.isdigit()):
        raise ValueError(f"code {code!r} is not a string of digits")
    text = unicodedata.normalize("NFKC", reply)
    if re.search(rf"(?<![0-9])(?<![0-9][.,]){code}(?![0-9])(?![.,][0-9])", text):
        return True
    return any(re.sub(f"[{_SEPARATORS}]", "", m.group()) == code for m in _GROUPED.finditer(text))


class NiahRow(TypedDict):
    """One case's outcome."""

    id: str
    length_tokens: int
    depth: float
    trial: int
    code: str
    found: bool
    failed: bool
    prompt_tokens: int | None


class NiahCell(TypedDict):
    """One (length, depth) cell. ``accuracy`` and ``ci95`` are proportions in [0, 1]."""

    length_tokens: int
    depth: float
    trials: int
    hits: int
    failed: int
    accuracy: float
    ci95: list[float]
    prompt_tokens_known: int
    prompt_tokens_mean: float | None
    prompt_tokens_min: int | None
    prompt_tokens_max: int | None


def _tokens_summary(rows: Sequence[NiahRow]) -> tuple[int, float | None, int | None, int | None]:
    """Known count, mean, min and max of the rows' prompt tokens (None where none is known)."""
    values = [r["prompt_tokens"] for r in rows if r["prompt_tokens"] is not None]
    if not values:
        return 0, None, None, None
    return len(values), sum(values) / len(values), min(values), max(values)


def score_grid(cases: Sequence[NiahCase], replies: Mapping[str, str | None],
               prompt_tokens: Mapping[str, int | None]) -> dict[str, Any]:
    """Score every case and summarise per (length, depth) cell.

    Args:
        cases: the cases that were asked.
        replies: case id → the reply's text, or None when the request failed. Every case needs an
            entry; other ids are ignored.
        prompt_tokens: case id → the server's ``usage.prompt_tokens``; None or absent when unknown.

    Returns:
        ``{"rows": [NiahRow...], "cells": [NiahCell...] (by length, then depth), "lengths", "depths"
        (sorted), "by_length": [{"length_tokens", "prompt_tokens_known", "prompt_tokens_mean",
        "prompt_tokens_min", "prompt_tokens_max"}...], "n", "hits", "failed", "accuracy", "ci95"}``. A
        failed request is a miss (it stays in the trials) and is also counted in ``failed``.
        ``accuracy``/``ci95`` are None when there are no cases; prompt-token figures are None where
        no case of the group has one.

    Raises:
        ValueError: a case id twice, a case without a ``replies`` entry, or a prompt-token count that
            is not a whole number >= 0.

    Source: 95% intervals are Wilson score intervals (Wilson 1927), ``stats.wilson_interval``.
    """
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError("NIAH cases repeat an id; each case must be scored once")
    absent = [i for i in ids if i not in replies]
    if absent:
        raise ValueError(f"no reply entry for {len(absent)} case(s), e.g. {absent[:3]}; use None for a failed request")
    rows: list[NiahRow] = []
    for c in cases:
        tokens = prompt_tokens.get(c.id)
        if tokens is not None and (not _is_int(tokens) or tokens < 0):
            raise ValueError(f"prompt_tokens for {c.id} is {tokens!r}, not a whole number >= 0 (use None if unknown)")
        text = replies[c.id]
        rows.append(NiahRow(id=c.id, length_tokens=c.length_tokens, depth=c.depth, trial=c.trial, code=c.code,
                            found=text is not None and found(text, c.code), failed=text is None,
                            prompt_tokens=tokens))
    lengths = sorted({r["length_tokens"] for r in rows})
    depths = sorted({r["depth"] for r in rows})
    cells: list[NiahCell] = []
    by_length: list[dict[str, Any]] = []
    for n in lengths:
        column = [r for r in rows if r["length_tokens"] == n]
        known, mean, low, high = _tokens_summary(column)
        by_length.append({"length_tokens": n, "prompt_tokens_known": known, "prompt_tokens_mean": mean,
                          "prompt_tokens_min": low, "prompt_tokens_max": high})
        for d in depths:
            cell = [r for r in column if r["depth"] == d]
            if not cell:
                continue
            hits = sum(r["found"] for r in cell)
            known, mean, low, high = _tokens_summary(cell)
            cells.append(NiahCell(length_tokens=n, depth=d, trials=len(cell), hits=hits,
                                  failed=sum(r["failed"] for r in cell), accuracy=hits / len(cell),
                                  ci95=list(wilson_interval(hits, len(cell))), prompt_tokens_known=known,
                                  prompt_tokens_mean=mean, prompt_tokens_min=low, prompt_tokens_max=high))
    total = len(rows)
    hits = sum(r["found"] for r in rows)
    return {"rows": rows, "cells": cells, "lengths": lengths, "depths": depths, "by_length": by_length,
            "n": total, "hits": hits, "failed": sum(r["failed"] for r in rows),
            "accuracy": hits / total if total else None,
            "ci95": list(wilson_interval(hits, total)) if total else None}


# --------------------------------------------------------------------------- heat-map


