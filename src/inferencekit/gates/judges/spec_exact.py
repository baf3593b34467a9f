"""The spec_exact gate (judgement only): is a speculative-decoding engine as exact as plain decoding?

Speculative decoding must not change greedy output: the draft only proposes, the target verifies. For
each prompt the collector sends a greedy request to engine A (speculative), to B (the reference,
plain), then to B again (B2). B vs B2 is the A/A floor: how often the reference disagrees with itself
(batching, reordered float sums). A diverging from B early and more often than the floor is a real
change of output; late divergences a little beyond the floor can be float reordering in the verify
pass and are not proven either way.

Rules and thresholds are the seed's ``spec_exact``; this module holds the pure half (rows and verdict);
the sending lives with the collectors (``gates/probes/spec.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import inferencekit.gates.records as pr
from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, ReplyFile, generated_text, is_ok
from inferencekit.stats import rules_out

__all__ = ["SPEC_KINDS", "SpecRow", "judge_probes", "judge_spec_exact", "spec_row", "spec_rows"]

SPEC_KINDS = ("spec_b", "spec_a", "spec_b2")  # per prompt, in send order: B, then A (speculative), then B again

_DETAILS_CAP = 50


@dataclass(frozen=True, slots=True)
class SpecRow:
    """One prompt's comparison; positions in the unit of ``method`` (tokens, or characters)."""

    id: str
    method: str
    ab_first_divergence: int | None  # A vs B; None: identical
    aa_first_divergence: int | None  # B vs B2 (the A/A floor); None: identical
    len_a: int
    len_b: int


def _reply_error(tag: str, reply: ReplyFile | None) -> str | None:
    if reply is None:
        return f"{tag}: not sent"
    if is_ok(reply):
        return None
    return f"{tag}: HTTP {reply.get('status')}" + (f": {reply['error']}" if reply.get("error") else "")


def spec_row(prompt_id: str, reply_a: ReplyFile | None, reply_b: ReplyFile | None,
             reply_b2: ReplyFile | None) -> dict[str, Any]:
    """One row for ``judge_spec_exact`` from a prompt's three greedy replies (reply-file dicts).

    Returns:
        ``{"id", "error"}`` when a reply is missing or failed (the first error, ``"A: HTTP 500: …"``);
        else ``SpecRow`` as a dict. Like is compared with like: token ids when all three carry them
        (else logprob tokens when all three carry those), otherwise the characters of the text.
    """
    errors = [e for e in (_reply_error(t, r) for t, r in (("A", reply_a), ("B", reply_b), ("B2", reply_b2))) if e]
    if errors or reply_a is None or reply_b is None or reply_b2 is None:
        return {"id": prompt_id, "error": errors[0][:300] if errors else "a reply is missing"}
    seqs = [pr.sequence(r) for r in (reply_a, reply_b, reply_b2)]
    methods = {m for _, m in seqs}
    if len(methods) == 1:
        (a, method), (b, _), (b2, _) = seqs
    else:
        method = "characters"
        a, b, b2 = (list(generated_text(r)) for r in (reply_a, reply_b, reply_b2))
    return asdict(SpecRow(prompt_id, method, pr.first_divergence(a, b), pr.first_divergence(b, b2), len(a), len(b)))


def _early(rows: Sequence[dict[str, Any]], field: str, early_tokens: int) -> int:
    return sum(1 for r in rows if r[field] is not None and r[field] < early_tokens)


def judge_spec_exact(rows: Sequence[dict[str, Any]], early_tokens: int = 32, tolerance: int = 0) -> Gate:
    """The spec_exact verdict from ``spec_row`` rows.

    Args:
        rows: one per prompt (error rows included).
        early_tokens: a divergence before this position (tokens, or characters when compared so) is early.
        tolerance: early divergences allowed beyond the A/A floor.

    Verdicts, in order:

    - NOT RUN: no rows; UNPROVEN: rows but none without an error;
    - FAIL: A/B early divergences > A/A early divergences + ``tolerance``;
    - UNPROVEN: A/B divergences at any position > A/A divergences + ``tolerance`` + max(1, n // 8)
      (one prompt in eight beyond the floor is allowed for reordered float sums, the seed's allowance);
    - UNPROVEN: some prompts failed;
    - PASS otherwise.

    Metrics: ``prompts``, ``errors``, ``ab_identical``, ``aa_identical``, ``ab_early_divergences``,
    ``aa_early_divergences``, ``early_tokens``, ``tolerance``, ``ab_first_divergence_median``,
    ``aa_first_divergence_median``, ``methods``, ``late_allowed``.
    """
    good = [r for r in rows if "error" not in r]
    errors = [r for r in rows if "error" in r]
    if not rows:
        return Gate("spec_exact", "NOT RUN", "no prompt was compared")
    err_note = f"{len(errors)} prompt(s) failed (first error: {str(errors[0]['error'])[:160]})" if errors else ""
    if not good:
        return Gate("spec_exact", "UNPROVEN", f"no prompt got three successful replies; {err_note}",
                    {"prompts": 0, "errors": len(errors)}, list(errors))
    ab = [r["ab_first_divergence"] for r in good if r["ab_first_divergence"] is not None]
    aa = [r["aa_first_divergence"] for r in good if r["aa_first_divergence"] is not None]
    ab_early = _early(good, "ab_first_divergence", early_tokens)
    aa_early = _early(good, "aa_first_divergence", early_tokens)
    n = len(good)
    metrics: dict[str, Any] = {
        "prompts": n, "errors": len(errors), "ab_identical": n - len(ab), "aa_identical": n - len(aa),
        "ab_early_divergences": ab_early, "aa_early_divergences": aa_early, "early_tokens": early_tokens,
        "tolerance": tolerance, "ab_first_divergence_median": pr.median(ab),
        "aa_first_divergence_median": pr.median(aa),
        "methods": sorted({r["method"] for r in good})}
    late_allowed = tolerance + max(1, n // 8)
    metrics["late_allowed"] = late_allowed
    notes = (["some replies carried no token ids or logprobs: those were compared by characters, and their "
              "divergence positions (and the early cut-off) are in characters"]
             if "characters" in metrics["methods"] else [])
    shown = [r for r in good if r["ab_first_divergence"] is not None][:_DETAILS_CAP] + errors
    floor = f"the A/A floor is {aa_early} (+{tolerance} allowed)"
    # first rule that holds decides; early divergences are the cheat's symptom, late ones only doubt
    rules = [
        (ab_early > aa_early + tolerance, "FAIL",
         f"{ab_early}/{n} prompts diverge from the reference engine before token {early_tokens}; {floor}"),
        (len(ab) > len(aa) + late_allowed, "UNPROVEN",
         f"{len(ab)}/{n} prompts diverge from the reference engine, all at or after token {early_tokens}, against an "
         f"A/A floor of {len(aa)} (+{late_allowed} allowed): exactness is not established; compare output quality "
         "before publishing its numbers"),
        (bool(errors), "UNPROVEN", f"{err_note}; of the other {n}: {n - len(ab)} identical to the reference"),
    ]
    for holds, verdict, reason in rules:
        if holds:
            return Gate("spec_exact", verdict, reason, metrics, shown, notes)
    return Gate("spec_exact", "PASS", f"{n - len(ab)}/{n} identical to the reference engine; early divergences "
                f"{ab_early} <= A/A floor {aa_early} + {tolerance}; any divergence {len(ab)} <= A/A {len(aa)} + "
                f"{late_allowed}", metrics, shown, notes, judged=n,
                rules_out=rules_out(ab_early, n, "prompts diverging early", "early-divergence rate"))


def spec_rows(records: Sequence[ProbeRecord]) -> list[dict[str, Any]]:
    """One ``spec_row`` per prompt key that has spec probes (A = the engine under test, B and B2 the reference)."""
    by_key: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("kind") in SPEC_KINDS:
            by_key.setdefault(rec["key"], {})[rec["kind"]] = rec.get("reply")
    return [spec_row(key, g.get("spec_a"), g.get("spec_b"), g.get("spec_b2")) for key, g in by_key.items()]


def judge_probes(run: ProbeRun) -> Gate:
    """spec_exact on one gate run's spec probes, with its ``early_tokens`` (32) and ``spec_tolerance`` (0)."""
    return judge_spec_exact(spec_rows(run.records), early_tokens=int(run.settings.get("early_tokens", 32)),
                            tolerance=int(run.settings.get("spec_tolerance", 0)))
