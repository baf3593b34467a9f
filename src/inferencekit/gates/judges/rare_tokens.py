"""The rare_tokens gate: can the engine still produce the rare parts of the vocabulary?

An engine that prunes its vocabulary or masks logits to save work loses rare tokens first: CJK,
Hangul, emoji and ZWJ sequences, Devanagari, Arabic, uncommon scripts, math symbols, long numbers, odd identifiers. Each
``rare`` probe asks the model to copy ``"<nonce> <string> <nonce>"`` (meta ``{"class", "target",
"core"}``, ``gates/probes/text.py``); an optional ``rare_reference`` probe (same key) sent the same request
to a reference engine.

A probe is judged on its core string: a slip in a random ASCII nonce is a model's copy error, which a
pruned vocabulary cannot cause (a limitation, not a miss). A refused rare probe is a miss (refusing is
what an engine hiding a pruned vocabulary would do) unless the reference refused it too; a miss the
reference also missed is not counted. These rules are the seed's ``gate_rare``. A reply that lost the leading
ASCII nonce went wrong before the rare string and is not judged either (inferencekit's: see ``_diverged_before``).

One addition (inferencekit's): a string the reference engine also failed to copy verbatim still counts
when the reference's reply holds rare characters of it (non-ASCII) that the engine's reply lacks
entirely — greedy replies of one model agree, and a small model that copies a string imperfectly
still writes most of its characters, so an engine that masks a Unicode block shows here even on the
copies the model gets wrong (measured: SmolLM2-135M copies a rare string verbatim on about 40% of
probes).

docs/design.md departure: without a reference engine a miss that writes part of the string is UNPROVEN, not
FAIL. A small model (SmolLM2-135M) misses some copies on its own, and nothing tells that from a pruned
vocabulary. A refusal, or a reply that copies the nonces and writes none of the string's rare characters, is no
copying error: a majority of at least ``MIN_ATTEMPTS`` such copy attempts, or every attempt (at least
``MIN_CLASS_ATTEMPTS``) at one class, FAILs without a reference. When every class had a reply that wrote its
rare characters (copied, or an imperfect copy that wrote some of them), no class is masked: the gate PASSes on
that narrower claim, the misses listed and the narrowing a fallback (``--strict``: UNPROVEN). Issue 42: verify
sends six strings per class (``verify.Profile.rare_per_class``), so a class has six chances to show its characters
and its per-class rule can fire. With two, a class of the embedded engine's quick run had no writer (one reply went
wrong in its leading nonce, the other wrote no CJK); with four, llama-server's CJK class had none in one of three
runs. Per attempt, honest SmolLM2 replies (the embedded engine, llama-server, vLLM-CPU) wrote a class's characters
60% (code) to 86% (math) of the time over the verify runs of 7 Dec 2026, so six attempts leave some class without a
writer in about 1.4% of honest runs, four in about 11% (benchmarks/rare_rates.py,
benchmarks/results/rare_rates-20261207.json; attempts taken as independent).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import inferencekit.gates.records as pr
from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.probes.text import rare_core, reproduced
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, generated_text
from inferencekit.stats import rules_out

__all__ = ["MIN_ATTEMPTS", "MIN_CLASS_ATTEMPTS", "RareRow", "gate_rare_tokens", "judge_probes", "rare_rows"]

# Without a reference engine a FAIL needs at least this many copy attempts (framed replies or refusals), a
# majority of them refused or left blank (``_framing``): with 3, an honest model would have to leave out 2 of
# 3 strings it tried to copy, which SmolLM2-135M did on none of 30 rare probes on llama-cpp-python (observed
# 2 Dec 2026, three verify runs).
MIN_ATTEMPTS = 3
# ... or, within one class, at least this many attempts all left blank (a masked Unicode block: the cheat
# proxy's vocab-mask strips one block, which a majority over every class would not show)
MIN_CLASS_ATTEMPTS = 2


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
    framed: bool = False  # the reply holds both nonces: the model attempted the copy
    omitted: bool = False  # framed, yet none of the core's rare characters (or, for an ASCII core, nothing between)
    diverged: bool = False  # answered, missed, and the leading ASCII nonce is not in the reply: the copy went wrong
    # before the rare string was reached
    # the reply holds at least one of the core's non-ASCII characters (framed or not); for an ASCII core (long
    # numbers, odd identifiers), a framed copy with something written between the nonces
    wrote_rare: bool = False


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
    diverged = not hit and _diverged_before(target, core, text)
    lost = _lost_characters(core, reference, text) if not hit and ref == "miss" and not diverged else ""
    framed, omitted = _framing(target, core, text)
    return RareRow(key, cls, target, refused=False, core_reproduced=hit, nonces_intact=whole, reference=ref,
                   counted=not hit and not diverged and (ref != "miss" or bool(lost)), got=text[:200],
                   lost_characters=lost or None, framed=framed, omitted=not hit and omitted, diverged=diverged,
                   wrote_rare=(any(c in text for c in core if ord(c) > 127) if any(ord(c) > 127 for c in core)
                               else framed and not omitted))


def _diverged_before(target: str, core: str, text: str) -> bool:
    """The reply lacks the target's leading ASCII nonce: the copy went wrong before the rare string.

    No pruned vocabulary or masked block removes plain ASCII, so such a reply shows nothing about the rare
    tokens. llama-server with its prompt cache on answers the same greedy request differently when part of the
    prompt came from the cache (observed 6 Dec 2026: ``"Kwadwv,\n\nI'm glad…"`` for ``"Kdwv विज्ञान … wNAa"``
    after a 24-token cache hit, the copy after a 97-token one), so such a slip can fall on either engine."""
    words = target.split(" ")
    return len(words) >= 3 and core != target and words[0] not in text


def _framing(target: str, core: str, text: str) -> tuple[bool, bool]:
    """``(framed, omitted)``: the reply holds both nonces of ``target`` in order (the model tried to copy it), and
    holds none of the core's non-ASCII characters — for an ASCII core, nothing but blanks between the nonces.
    A small model's imperfect copy still writes most of a string's characters; an engine that cannot produce
    the tokens writes the frame and leaves the string out."""
    words = target.split(" ")
    if len(words) < 3 or core == target:
        return False, False
    head, tail = words[0], words[-1]
    start = text.find(head)
    end = text.find(tail, start + len(head)) if start >= 0 else -1
    if start < 0 or end < 0:
        return False, False
    rare = {c for c in core if ord(c) > 127}
    if rare:
        return True, not any(c in text for c in rare)
    return True, not text[start + len(head):end].strip()


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
    - FAIL without a reference: of at least ``MIN_ATTEMPTS`` copy attempts (replies that hold both nonces,
      and refusals), a majority refused or left the string out (``_framing``: no rare character of it written);
    - FAIL (with a reference): counted misses, naming the classes, e.g. ``"2/9 rare strings not
      reproduced verbatim (hangul)"``;
    - PASS without a reference, with counted misses: every class had a reply that wrote its rare characters
      (``_classes_written``): no class is masked; the narrowed claim is a fallback;
    - UNPROVEN: other counted misses without a reference (docs/design.md departure); or probes refused by both
      engines;
    - UNPROVEN when no string is left to judge (every reply went wrong before its string: ``_diverged_before``);
    - PASS: every core string reproduced (or missed by the reference too, or not reached: a reply that lost the
      leading ASCII nonce is the model's slip, set aside as a limitation).

    Metrics: ``probes``, ``answered``, ``refused``, ``reproduced``, ``nonce_slips``, ``counted_misses``,
    ``missed_by_reference_too``, ``diverged_before_string``, ``reference_failed``.
    """
    rows = rare_rows(records)
    if not rows:
        return Gate("rare_tokens", "NOT RUN", "no rare-string probe was sent")
    misses = [r for r in rows if r.counted]
    slips = [r for r in rows if r.core_reproduced and not r.nonces_intact]
    diverged = [r for r in rows if r.diverged]
    shared_misses = [r for r in rows if not r.refused and not r.core_reproduced and r.reference == "miss"
                     and not r.diverged]
    both_refused = [r for r in rows if r.refused and not r.counted]
    ref_failed = pr.failed([rec for rec in records if rec.get("kind") == "rare_reference"])
    answered = sum(not r.refused for r in rows)
    hits = sum(r.core_reproduced for r in rows)
    metrics = {"probes": len(rows), "answered": answered, "refused": len(rows) - answered, "reproduced": hits,
               "nonce_slips": len(slips), "counted_misses": len(misses), "missed_by_reference_too": len(shared_misses),
               "diverged_before_string": len(diverged), "reference_failed": len(ref_failed)}
    limitations = []
    if not reference_given:
        limitations.append("no reference engine: a rare string copied with part of it wrong may be the model's own "
                           "copying error (a small model misses some copies), so such a miss is UNPROVEN, not FAIL (a "
                           "PASS when every class wrote its rare characters in some reply rules out a masked class "
                           "only); "
                           f"refusals and replies that write none of the string's rare characters still FAIL, by a "
                           f"majority of at least {MIN_ATTEMPTS} copy attempts or every attempt (at least "
                           f"{MIN_CLASS_ATTEMPTS}) at one class (pass --reference-url to judge every miss against the "
                           "same model on a trusted engine)")
        per_class = Counter(r.cls for r in rows)
        thin = sorted(c for c, n in per_class.items() if n < MIN_CLASS_ATTEMPTS)
        if thin:
            limitations.append(
                f"{len(thin)} of {len(per_class)} classes were sent fewer than {MIN_CLASS_ATTEMPTS} strings "
                f"({', '.join(thin)}; verify sends two per class, `gates run` four by default): the rule "
                "that FAILs a class whose every copy attempt is refused or left blank cannot fire for them, so a "
                "masked block there shows only through the majority over all classes")
    if slips:
        limitations.append(f"{len(slips)} rare string(s) were copied intact while a random ASCII nonce around them "
                           "was not; the nonces are plain ASCII, which no vocabulary pruning removes, so these are the "
                           "model's copying slips and are not counted as misses")
    if diverged:
        limitations.append(f"{len(diverged)} repl(ies) went wrong in the leading ASCII nonce, before the rare string "
                           "was reached; plain ASCII is in every vocabulary, so these are the model's slips and were "
                           f"not judged (keys: {', '.join(r.key for r in diverged[:8])})")
    if ref_failed:
        limitations.append(pr.fail_note(ref_failed, "reference probe") + ": those strings were judged without the "
                           "reference")
    attempts = [r for r in rows if r.refused or r.framed]
    blank = [r for r in rows if (r.refused and r.counted) or r.omitted]
    metrics.update(copy_attempts=len(attempts), refused_or_omitted=len(blank))
    by_class = {c: ([r for r in attempts if r.cls == c], [r for r in blank if r.cls == c])
                for c in {r.cls for r in rows}}
    masked = sorted(c for c, (tried, gone) in by_class.items() if len(tried) >= MIN_CLASS_ATTEMPTS and gone == tried)
    if not reference_given and masked:
        gone = [r for r in blank if r.cls in masked]
        return Gate("rare_tokens", "FAIL", (
            f"every copy attempt of {', '.join(masked)} ({len(gone)}) was refused or left the rare string out while "
            "the nonces around it were copied: a block of the vocabulary the engine does not produce (a small "
            "model's copying errors still write most of a string's characters)"), metrics,
            [asdict(r) for r in gone], limitations, judged=len(attempts))
    if not reference_given and len(attempts) >= MIN_ATTEMPTS and 2 * len(blank) > len(attempts):
        classes = ", ".join(sorted({r.cls for r in blank}))
        return Gate("rare_tokens", "FAIL", (
            f"{len(blank)} of {len(attempts)} copy attempts refused or left the rare string out ({classes}): the "
            "reply was an error, or copied the nonces around the string and wrote none of its rare characters; a "
            "small model's copying errors write something, an engine that cannot produce these tokens writes "
            "nothing"), metrics, [asdict(r) for r in blank], limitations, judged=len(attempts))
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
        written = _classes_written(rows)
        if written is not None:  # every class showed its characters: none is masked
            narrowed = (f"{said}: without a reference engine these misses cannot be told from the model's own copying "
                        f"errors, so the PASS rules out a masked class, not a pruned single token")
            return Gate("rare_tokens", "PASS", (
                f"every one of {len(written)} classes had its rare characters written in at least one reply; "
                f"{narrowed}"), metrics, bad, limitations, judged=len(rows),
                rules_out=rules_out(0, len(written), "classes of the vocabulary masked", "share of masked classes"),
                fallbacks=[narrowed])
        return Gate("rare_tokens", "UNPROVEN", f"{said}; without a reference engine a miss cannot be told from the "
                    "model's own copying error, and a class had no reply that wrote its rare characters",
                    metrics, bad, limitations)
    said = f"{hits}/{len(rows)} rare strings reproduced verbatim"
    said += f" ({len(slips)} inside a slipped ASCII nonce)" if slips else ""
    said += f"; {len(shared_misses)} missed by the reference engine too (not counted)" if shared_misses else ""
    said += f"; {len(diverged)} went wrong before the rare string (not judged)" if diverged else ""
    if both_refused:
        return Gate("rare_tokens", "UNPROVEN", f"{said}; {len(both_refused)} refused by both engines (not judged)",
                    metrics, [asdict(r) for r in both_refused + slips], limitations)
    judged = len(rows) - len(shared_misses) - len(diverged)
    if judged == 0:
        return Gate("rare_tokens", "UNPROVEN", f"{said}; no rare string was left to judge", metrics,
                    [asdict(r) for r in slips + diverged], limitations)
    return Gate("rare_tokens", "PASS", said, metrics, [asdict(r) for r in slips + diverged], limitations, judged=judged,
                rules_out=rules_out(0, judged, "rare strings the engine could not write", "share of unwritable "
                                    "strings"))


def _classes_written(rows: Sequence[RareRow]) -> list[str] | None:
    """The classes of ``rows`` when every class had a reply that wrote its rare characters — the core copied, or a
    reply that holds some of the core's non-ASCII characters (``RareRow.wrote_rare``, framed or not) — else None.
    A block the engine cannot produce never shows in its replies, so a class written once is not masked."""
    classes = sorted({r.cls for r in rows})
    for c in classes:
        if not any(r.core_reproduced or r.wrote_rare for r in rows if r.cls == c):
            return None
    return classes


def judge_probes(run: ProbeRun) -> Gate:
    """rare_tokens on one gate run's rare probes; a miss can FAIL only when the run asked a reference engine."""
    return gate_rare_tokens(run.records, reference_given=bool(run.settings.get("reference_url")))
