"""GSM8K grading without a server: the prompt, answer extraction, accuracy, pairing.

Everything here is a pure function of its arguments; the problems are read by ``data/gsm8k.py``
(the packaged test split, whose target is the number after the answer's last ``####``) and the job
that sends the requests and writes ``quality/gsm8k/`` is ``quality/gsm8k_run.py``.

**Extraction** (``extract_answer``), first rule that finds something wins:

1. ``hash``: the last ``#### <number>`` in the reply (the format the prompt asks for, the GSM8K
   paper's own);
2. ``boxed``: the content of the last closed ``\\boxed{...}`` (nested braces matched), the habit of
   models tuned on competition maths;
3. ``last_number``: the last number anywhere in the reply (lm-evaluation-harness's
   "flexible-extract" idea);
4. ``none``: nothing that looks like a number.

**Numbers.** ``1,234`` (comma groups of exactly three digits), a ``$`` or ``\\$`` before the digits,
a ``%`` or ``\\%`` after them, a sign ``-`` or U+2212 ``−``, decimals. A full stop that ends a
sentence is not a decimal point. The normal form drops the commas, signs of zero, leading zeros and
trailing decimal zeros: ``$1,234.50`` → ``1234.5``, ``−0`` → ``0``. Equality is decimal equality
(``numbers_equal``), so ``18.0`` equals ``18``.

**Fractions are not evaluated.** ``3/4`` (or ``\\frac{3}{4}``) is kept as the string ``"3/4"``,
which is not a number to ``numbers_equal`` and so never equals a target. GSM8K targets are all
integers; a model that ends on a fraction has not given one, and crediting ``6/2`` as 3 would grade
arithmetic the model did not finish. A ``\\boxed{}`` holding no number or more than one
(``\\boxed{x}``, ``\\boxed{2+3=5}``) is returned as its cleaned text, likewise never correct;
words around a single number are dropped (``\\boxed{18 \\text{ apples}}`` → ``18``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, TypedDict

from inferencekit.data.gsm8k import NUMBER_PATTERN, GsmItem, normalize_number, number_of
from inferencekit.stats import mcnemar_exact, wilson_interval

__all__ = [
    "METHODS",
    "PAIR_FIELDS",
    "PROMPT_TEMPLATE",
    "GsmRow",
    "extract_answer",
    "mcnemar",
    "numbers_equal",
    "pair_problem",
    "prompt_messages",
    "prompt_sha256",
    "score_items",
]


METHODS = ("hash", "boxed", "last_number", "none")

PROMPT_TEMPLATE = (
    "Work out the answer to this grade-school maths problem. Reason through it one step at a time, "
    "showing each calculation. When you are done, write the final answer alone on the last line as "
    "\"#### <number>\": digits only, with no units or words.\n\n"
    "Problem: {question}"
)

# Settings that must be equal for two runs' per-item results to be compared item by item.
PAIR_FIELDS = ("dataset_sha256", "prompt_sha256", "max_tokens", "temperature", "chat_template_kwargs",
               "backend")

_HASH = re.compile(r"####[ \t*]*(?=\S)")
_BOXED = "\\boxed{"
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_SPACING = re.compile(r"\\[,;:! ]|~")


# --------------------------------------------------------------------------- data


# --------------------------------------------------------------------------- prompt

def prompt_messages(question: str) -> list[dict[str, str]]:
    """The chat messages for one problem: a single user turn, ``PROMPT_TEMPLATE`` filled in
    (zero-shot chain of thought ending in the GSM8K ``#### <number>`` line)."""
    return [{"role": "user", "content": PROMPT_TEMPLATE.format(question=question)}]


def prompt_sha256() -> str:
    """sha256 (hex) of ``PROMPT_TEMPLATE`` as UTF-8; paired runs must have the same one."""
    return hashlib.sha256(PROMPT_TEMPLATE.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- numbers and extraction


def _last_closed_boxed(reply: str) -> str | None:
    """Content of the last ``\\boxed{...}`` whose braces close (an answer cut off mid-box is skipped)."""
    start = reply.rfind(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(reply) and depth:
            depth += {"{": 1, "}": -1}.get(reply[i], 0)
            i += 1
        if depth == 0:
            return reply[start + len(_BOXED):i - 1]
        start = reply.rfind(_BOXED, 0, start)
    return None


def _boxed_value(content: str) -> str:
    s = _LATEX_TEXT.sub(r" \1 ", content)
    s = _LATEX_FRAC.sub(r"\1/\2", s)
    s = _LATEX_SPACING.sub("", s.replace("{,}", ","))
    s = s.replace("\u2212", "-").strip()
    found = list(NUMBER_PATTERN.finditer(s))
    if len(found) == 1:
        return number_of(found[0])
    return " ".join(s.split())


def extract_answer(reply: str) -> tuple[str | None, str]:
    """The final answer a reply gives, and the rule that found it.

    Args:
        reply: the reply's visible text.

    Returns:
        ``(value, method)``. ``method`` is ``"hash"`` (last ``#### <number>``), ``"boxed"`` (last
        closed ``\\boxed{}``), ``"last_number"`` or ``"none"`` (value None), tried in that order.
        ``value`` is in ``normalize_number``'s normal form, or a fraction kept as ``"a/b"``, or a
        box's non-numeric content as text; the latter two never equal a target.

    Source: ``#### n`` is the GSM8K answer format (Cobbe et al. 2021); the boxed and last-number
    fallbacks follow common grading practice (lm-evaluation-harness flexible-extract).
    """
    hashed = None
    for m in _HASH.finditer(reply):
        number = NUMBER_PATTERN.match(reply, m.end())
        if number is not None:
            hashed = number
    if hashed is not None:
        return number_of(hashed), "hash"
    boxed = _last_closed_boxed(reply)
    if boxed is not None and boxed.strip():
        return _boxed_value(boxed), "boxed"
    numbers = list(NUMBER_PATTERN.finditer(reply))
    if numbers:
        return number_of(numbers[-1]), "last_number"
    return None, "none"


def numbers_equal(a: str | None, b: str | None) -> bool:
    """True when both are numbers (``normalize_number`` accepts them) with equal decimal values.

    ``"18.0"`` equals ``"18"``, ``"1,000"`` equals ``"1000"``; None, fractions and other text are
    equal to nothing (not even to themselves). Comparison is exact (``decimal.Decimal``), no
    floating point.
    """
    if a is None or b is None:
        return False
    na, nb = normalize_number(a), normalize_number(b)
    if na is None or nb is None:
        return False
    try:
        return Decimal(na) == Decimal(nb)
    except InvalidOperation:
        return False


# --------------------------------------------------------------------------- scoring

class GsmRow(TypedDict):
    """One graded problem, as written to the results file."""

    id: str
    target: str
    extracted: str | None
    method: str
    correct: bool
    failed: bool


def score_items(items: Sequence[GsmItem], replies: Mapping[str, str | None]) -> dict[str, Any]:
    """Grade replies against their problems.

    Args:
        items: the problems that were asked, in order.
        replies: item id → the reply's text, or None when the request failed. Every item must have
            an entry; ids not among ``items`` are ignored.

    Returns:
        ``{"rows": [GsmRow...], "n", "correct", "failed", "accuracy", "ci95": [lo, hi],
        "methods": {hash, boxed, last_number, none: count}}``. A failed request is wrong (it stays in
        ``n``) and is counted in ``failed``; ``methods`` counts only replies that came back, so
        ``sum(methods) + failed == n``. ``accuracy`` and ``ci95`` are proportions in [0, 1]; both None
        when ``n`` is 0.

    Raises:
        ValueError: an item has no entry in ``replies``.

    Source: the 95% interval is the Wilson score interval (Wilson 1927).
    """
    absent = [it.id for it in items if it.id not in replies]
    if absent:
        raise ValueError(f"no reply entry for {len(absent)} item(s), e.g. {absent[:3]}; use None for a failed request")
    rows: list[GsmRow] = []
    methods = dict.fromkeys(METHODS, 0)
    for it in items:
        text = replies[it.id]
        if text is None:
            rows.append(GsmRow(id=it.id, target=it.target, extracted=None, method="none", correct=False,
                               failed=True))
            continue
        value, method = extract_answer(text)
        methods[method] += 1
        rows.append(GsmRow(id=it.id, target=it.target, extracted=value, method=method,
                           correct=numbers_equal(value, it.target), failed=False))
    n = len(rows)
    correct = sum(r["correct"] for r in rows)
    ci = list(wilson_interval(correct, n)) if n else None
    return {"rows": rows, "n": n, "correct": correct, "failed": sum(r["failed"] for r in rows),
            "accuracy": correct / n if n else None, "ci95": ci, "methods": methods}


# --------------------------------------------------------------------------- pairing

def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)[:120]


def _pair_value(key: str, value: Any) -> Any:
    # An empty chat_template_kwargs object and none at all send the same request.
    return None if key == "chat_template_kwargs" and value == {} else value


def pair_problem(a_settings: Mapping[str, Any], b_settings: Mapping[str, Any]) -> str | None:
    """Why two runs cannot be compared item by item, or None when they can.

    Args:
        a_settings, b_settings: each run's recorded settings; every key of ``PAIR_FIELDS`` must be
            present (a value of None, e.g. no chat_template_kwargs sent, is a recorded value; an
            absent key is not, and refuses the pair). Values compare with ``==`` (so ``0 == 0.0``);
            an empty chat_template_kwargs object counts as None.

    Returns:
        None, or one sentence naming every field that is absent or differs, with both values.

    Source: McNemar's test (McNemar 1947) compares two classifiers on the same items; a different
    dataset, prompt, generation budget, temperature, chat template or backend makes them different
    items.
    """
    problems = []
    for key in PAIR_FIELDS:
        has_a, has_b = key in a_settings, key in b_settings
        if not (has_a and has_b):
            where = " and ".join(s for s, has in (("run A", has_a), ("run B", has_b)) if not has)
            problems.append(f"{key} (not recorded in {where})")
        elif _pair_value(key, a_settings[key]) != _pair_value(key, b_settings[key]):
            problems.append(f"{key} (run A: {_shown(a_settings[key])}, run B: {_shown(b_settings[key])})")
    if not problems:
        return None
    return ("the runs are not the same evaluation, so McNemar's test would compare different items; "
            "they differ in " + "; ".join(problems))


def _by_id(rows: Sequence[Mapping[str, Any]], label: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for r in rows:
        rid = r["id"]
        if rid in out:
            raise ValueError(f"run {label} has item {rid!r} twice")
        out[rid] = bool(r["correct"])
    return out


def mcnemar(a_rows: Sequence[Mapping[str, Any]], b_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """McNemar's exact test between two runs over the items both have.

    Args:
        a_rows, b_rows: per-item rows with at least ``id`` and ``correct`` (``GsmRow``).

    Returns:
        ``{"n_common", "b", "c", "both_correct", "both_wrong", "accuracy_a", "accuracy_b",
        "p_value", "only_in_a", "only_in_b"}``: ``b`` = items run A got right and run B wrong, ``c``
        = the reverse; accuracies are proportions on the common items; ``only_in_*`` count ids
        left out because one run lacks them. With no common item the accuracies and ``p_value``
        are None; with no discordant item ``p_value`` is 1.0.

    Raises:
        ValueError: an id appears twice in one run.

    Source: McNemar (1947), exact form: ``inferencekit.stats.mcnemar_exact(b, c)``, the two-sided
    binomial test of b in b + c trials at 1/2.
    """
    a, b_map = _by_id(a_rows, "A"), _by_id(b_rows, "B")
    common = [i for i in a if i in b_map]
    b = sum(1 for i in common if a[i] and not b_map[i])
    c = sum(1 for i in common if not a[i] and b_map[i])
    both = sum(1 for i in common if a[i] and b_map[i])
    m = len(common)
    return {"n_common": m, "b": b, "c": c, "both_correct": both, "both_wrong": m - b - c - both,
            "accuracy_a": (b + both) / m if m else None, "accuracy_b": (c + both) / m if m else None,
            "p_value": mcnemar_exact(b, c) if m else None,
            "only_in_a": len(a) - m, "only_in_b": len(b_map) - m}
