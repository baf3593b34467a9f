"""The rare_tokens gate: can the engine still produce the rare parts of the vocabulary?

An engine that prunes its vocabulary or masks logits to save work loses rare tokens first: CJK,
Hangul, emoji and ZWJ sequences, Devanagari, Arabic, math symbols, long numbers, odd identifiers. Each
``rare`` probe asks the model to copy ``"<nonce> <string> <nonce>"`` (meta ``{"class", "target",
"core"}``, ``gates/probes/text.py``); an optional ``rare_reference`` probe (same key) sent the same request
to a reference engine.

A probe is judged on its core string: a slip in a random ASCII nonce is a model's copy error, which a
pruned vocabulary cannot cause (a limitation, not a miss). A refused rare probe is a miss (refusing is
what an engine hiding a pruned vocabulary would do) unless the reference refused it too; a miss the
reference also missed is not counted. These rules are the seed's ``gate_rare``.

One addition (inferencekit's): a string the reference engine also failed to copy verbatim still counts
when the reference's reply holds rare characters of it (non-ASCII) that the engine's reply lacks
entirely — greedy replies of one model agree, and a small model that copies a string imperfectly
still writes most of its characters, so an engine that masks a Unicode block shows here even on the
copies the model gets wrong (measured: SmolLM2-135M copies a rare string verbatim on about 40% of
probes).

docs/design.md departure: without a reference engine a counted miss is UNPROVEN, not FAIL. A small model
(SmolLM2-135M) misses some copies on its own, and nothing tells that from a pruned vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import inferencekit.gates.records as pr
from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.probes.text import rare_core, reproduced
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, generated_text
from inferencekit.stats import rules_out

__all__ = ["RareRow", "gate_rare_tokens", "judge_probes", "rare_rows"]


@dataclass(frozen=True, slots=True)
class RareRow:
    """One rare probe and what its reply (and the reference's) showed.

    ``reference``: ``"hit"``, ``"miss"``, ``"refused"`` (its reply failed) or None (no reference reply).
    ``counted``: a miss that counts against the engine.
    """

    key: str
    cls: str
    target: str
    refused: bool
    core_reproduced: bool
    nonces_intact: bool
    reference: str | None
    counted: bool
    status: int | None = None
    error: str | None = None
    got: str | None = None
    lost_characters: str | None = None


def _reference_outcome(record: ProbeRecord | None, core: str) -> str | None:
    if record is None or record.get("reply") is None:
        return None
    reply = pr.ok_reply(record)
    if reply is None:
        return "refused"
    return "hit" if reproduced(core, generated_text(reply)) else "miss"


def _row(record: ProbeRecord, reference: ProbeRecord | None) -> RareRow:
    meta = record.get("meta") or {}
    target = str(meta.get("target", ""))
    core = str(meta.get("core") or rare_core(target))
    ref = _reference_outcome(reference, core)
    key, cls = str(record.get("key")), str(meta.get("class", "?"))
    reply = pr.ok_reply(record)
    if reply is None:
        raw = record.get("reply")
        status = raw.get("status") if isinstance(raw, dict) else None
        error = (raw.get("error") if isinstance(raw, dict) else "not sent") or f"HTTP {status}"
        return RareRow(key, cls, target, refused=True, core_reproduced=False, nonces_intact=False, reference=ref,
                       counted=ref != "refused", status=status, error=str(error)[:200])
    text = generated_text(reply)
    whole = reproduced(target, text)
    hit = whole or reproduced(core, text)
    lost = _lost_characters(core, reference, text) if not hit and ref == "miss" else ""
    return RareRow(key, cls, target, refused=False, core_reproduced=hit, nonces_intact=whole, reference=ref,
                   counted=not hit and (ref != "miss" or bool(lost)), got=text[:200], lost_characters=lost or None)


def _lost_characters(core: str, reference: ProbeRecord | None, text: str) -> str:
    """The core's non-ASCII characters that the reference reply wrote and ``text`` does not hold at all."""
    ref_reply = pr.ok_reply(reference) if reference is not None else None
    if ref_reply is None:
        return ""
    ref_text, have = generated_text(ref_reply), set(text)
    return "".join(sorted({c for c in core if ord(c) > 127 and c in ref_text and c not in have}))


def rare_rows(records: Sequence[ProbeRecord]) -> list[RareRow]:
    """A ``RareRow`` per ``rare`` record, each matched with its ``rare_reference`` by key."""
    references = {rec.get("key"): rec for rec in records if rec.get("kind") == "rare_reference"}
    return [_row(rec, references.get(rec.get("key"))) for rec in records if rec.get("kind") == "rare"]


def gate_rare_tokens(records: Sequence[ProbeRecord], reference_given: bool) -> Gate:
    """The rare_tokens gate from ``rare`` (and ``rare_reference``) probe records.

    Args:
        records: probe records.
        reference_given: a reference engine was asked (``--reference-url``); its replies are the
            ``rare_reference`` records.

    Verdicts, in order:

    - NOT RUN: no rare probe in the records;
    - FAIL (with a reference only): counted misses, naming the classes, e.g. ``"2/9 rare strings not
      reproduced verbatim (hangul)"``;
    - UNPROVEN: counted misses without a reference (docs/design.md departure); or probes refused by both engines;
    - PASS: every core string reproduced (or missed by the reference too).

    Metrics: ``probes``, ``answered``, ``refused``, ``reproduced``, ``nonce_slips``, ``counted_misses``,
    ``missed_by_reference_too``, ``reference_failed``.
    """
    rows = rare_rows(records)
    if not rows:
        return Gate("rare_tokens", "NOT RUN", "no rare-string probe was sent")
    misses = [r for r in rows if r.counted]
    slips = [r for r in rows if r.core_reproduced and not r.nonces_intact]
    shared_misses = [r for r in rows if not r.refused and not r.core_reproduced and r.reference == "miss"]
    both_refused = [r for r in rows if r.refused and not r.counted]
    ref_failed = pr.failed([rec for rec in records if rec.get("kind") == "rare_reference"])
    answered = sum(not r.refused for r in rows)
    hits = sum(r.core_reproduced for r in rows)
    metrics = {"probes": len(rows), "answered": answered, "refused": len(rows) - answered, "reproduced": hits,
               "nonce_slips": len(slips), "counted_misses": len(misses), "missed_by_reference_too": len(shared_misses),
               "reference_failed": len(ref_failed)}
    limitations = []
    if not reference_given:
        limitations.append("no reference engine: a missed rare string may be the model's own copying error (a small "
                           "model misses some copies), so a miss is UNPROVEN, not FAIL (pass --reference-url to judge "
                           "misses against the same model on a trusted engine)")
    if slips:
        limitations.append(f"{len(slips)} rare string(s) were copied intact while a random ASCII nonce around them "
                           "was not; the nonces are plain ASCII, which no vocabulary pruning removes, so these are the "
                           "model's copying slips and are not counted as misses")
    if ref_failed:
        limitations.append(pr.fail_note(ref_failed, "reference probe") + ": those strings were judged without the "
                           "reference")
    if misses:
        classes = ", ".join(sorted({r.cls for r in misses}))
        refused = sum(r.refused for r in misses)
        said = f"{len(misses)}/{len(rows)} rare strings not reproduced verbatim ({classes})"
        lost = "".join(sorted({c for r in misses for c in (r.lost_characters or "")}))
        said += (f"; characters the reference engine wrote are missing from the engine's replies altogether: "
                 f"{lost[:24]}" if lost else "")
        said += f"; {refused} of them refused with an error" if refused else ""
        bad = [asdict(r) for r in misses]
        if reference_given:
            return Gate("rare_tokens", "FAIL", said, metrics, bad, limitations)
        return Gate("rare_tokens", "UNPROVEN", f"{said}; without a reference engine a miss cannot be told from the "
                    "model's own copying error", metrics, bad, limitations)
    said = f"{hits}/{len(rows)} rare strings reproduced verbatim"
    said += f" ({len(slips)} inside a slipped ASCII nonce)" if slips else ""
    said += f"; {len(shared_misses)} missed by the reference engine too (not counted)" if shared_misses else ""
    if both_refused:
        return Gate("rare_tokens", "UNPROVEN", f"{said}; {len(both_refused)} refused by both engines (not judged)",
                    metrics, [asdict(r) for r in both_refused + slips], limitations)
    judged = len(rows) - len(shared_misses)
    return Gate("rare_tokens", "PASS", said, metrics, [asdict(r) for r in slips], limitations, judged=judged,
                rules_out=rules_out(0, judged, "rare strings the engine could not write", "share of unwritable "
                                    "strings") if judged else "")


def judge_probes(run: ProbeRun) -> Gate:
    """rare_tokens on one gate run's rare probes; a miss can FAIL only when the run asked a reference engine."""
    return gate_rare_tokens(run.records, reference_given=bool(run.settings.get("reference_url")))
