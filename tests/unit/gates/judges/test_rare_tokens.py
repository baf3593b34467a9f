"""The rare_tokens gate on hand-built rare / rare_reference probe records."""

from __future__ import annotations

import unicodedata
from typing import Any

from inferencekit.gates.judges.rare_tokens import gate_rare_tokens, rare_rows

STRINGS = {"cjk": "饂飩と蕎麦の老舗", "hangul": "햇살 가득한 골목길", "emoji_zwj": "🧑\u200d🍳 👩🏾\u200d🎤"}


def reply(text: str, status: int = 200, error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "text": text, "reasoning": "", "finish_reason": "stop",
                           "usage": {"completion_tokens": 12}}
    if error is not None:
        out["error"] = error
    return out


def target(core: str) -> str:
    return f"Ab3x {core} Qz9k"


def rare(key: str, cls: str, core: str, rep: dict[str, Any] | None, kind: str = "rare") -> dict[str, Any]:
    return {"id": f"{key}.{kind}", "kind": kind, "key": key, "endpoint": "/v1/chat/completions", "body": {},
            "meta": {"class": cls, "target": target(core), "core": core}, "reply": rep}


def copied(key: str, cls: str, kind: str = "rare") -> dict[str, Any]:
    core = STRINGS[cls]
    return rare(key, cls, core, reply(f"Sure: {target(core)}"), kind)


def missed(key: str, cls: str, kind: str = "rare") -> dict[str, Any]:
    return rare(key, cls, STRINGS[cls], reply("Ab3x ??? Qz9k"), kind)


ALL_COPIED = [copied("r0", "cjk"), copied("r1", "hangul"), copied("r2", "emoji_zwj")]


def test_pass_without_reference_says_a_miss_would_be_unproven():
    g = gate_rare_tokens(ALL_COPIED, reference_given=False)
    assert g.verdict == "PASS" and g.reason == "3/3 rare strings reproduced verbatim"
    assert g.metrics["reproduced"] == 3 and g.metrics["counted_misses"] == 0
    assert any(x.startswith("no reference engine") for x in g.limitations)


def test_pass_with_reference_has_no_reference_limitation():
    recs = ALL_COPIED + [copied(f"r{i}", cls, "rare_reference") for i, cls in enumerate(STRINGS)]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "PASS" and list(g.limitations) == []


def test_a_slipped_nonce_is_a_limitation_not_a_miss():
    core = STRINGS["hangul"]
    slip = rare("r1", "hangul", core, reply(f"Ab3x {core} Qz9"))  # trailing nonce cut short
    g = gate_rare_tokens([copied("r0", "cjk"), slip], reference_given=True)
    assert g.verdict == "PASS" and g.metrics["nonce_slips"] == 1
    assert g.reason == "2/2 rare strings reproduced verbatim (1 inside a slipped ASCII nonce)"
    assert any("copying slips and are not counted as misses" in x for x in g.limitations)


def test_nfc_equal_text_counts_as_reproduced():
    core = STRINGS["hangul"]
    g = gate_rare_tokens([rare("r0", "hangul", core, reply(unicodedata.normalize("NFD", target(core))))],
                         reference_given=True)
    assert g.verdict == "PASS" and g.metrics["nonce_slips"] == 0


def test_fail_with_reference_names_the_classes_missed():
    # 9 probes: 2 hangul misses, the reference copied both
    recs = [copied(f"r{i}", "cjk") for i in range(7)] + [missed("r7", "hangul"), missed("r8", "hangul")]
    recs += [copied(f"r{i}", "cjk", "rare_reference") for i in range(7)]
    recs += [copied("r7", "hangul", "rare_reference"), copied("r8", "hangul", "rare_reference")]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "FAIL" and g.reason == "2/9 rare strings not reproduced verbatim (hangul)"
    assert g.metrics["counted_misses"] == 2 and [d["key"] for d in g.details] == ["r7", "r8"]


def garbled(key: str, cls: str) -> dict[str, Any]:
    """An imperfect copy: the frame and part of the string, as a small model writes it."""
    core = STRINGS[cls]
    return rare(key, cls, core, reply(f"Ab3x {core[:2]}?? Qz9k"))


def test_without_reference_the_same_misses_pass_only_on_the_narrower_claim():
    # before issue 42 UNPROVEN: the imperfect copies wrote their classes' characters, so no class is masked; whether
    # a single token was pruned stays unknown, and that narrowing is a fallback (--strict: UNPROVEN)
    recs = [copied("r0", "cjk"), garbled("r1", "hangul"), garbled("r2", "emoji_zwj")]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "PASS" and g.fallbacks
    assert "2/3 rare strings not reproduced verbatim (emoji_zwj, hangul)" in g.reason
    assert "without a reference engine" in g.reason
    assert any("UNPROVEN, not FAIL" in x for x in g.limitations)


def test_every_class_writing_its_characters_passes_on_the_narrower_claim():
    # verify sends two strings per class (issue 42): every class wrote its rare characters in some reply, so no class
    # is masked, and the imperfect copies are the model's errors as far as masking goes: PASS, the narrowing a fallback
    recs = [copied("r0", "cjk"), garbled("r1", "cjk"), garbled("r2", "hangul"), copied("r3", "hangul"),
            garbled("r4", "emoji_zwj"), garbled("r5", "emoji_zwj")]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "PASS" and g.judged == 6
    assert g.reason.startswith("every one of 3 classes had its rare characters written in at least one reply")
    assert "4/6 rare strings not reproduced verbatim" in g.reason and "not a pruned single token" in g.fallbacks[0]
    assert "3 classes" in g.rules_out
    # a reply that never framed a copy but wrote the class's characters shows them too (llama-server, 7 Dec:
    # "Jdzi ᏣᎳᎩ ᏣᎳᎩ ᏣᎳᎩ …" for "Jdzi ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ pini", a loop that never reached the closing nonce)
    loop = rare("r6", "hangul", STRINGS["hangul"], reply(f"Ab3x {STRINGS['hangul'][:2] * 5}"))
    assert gate_rare_tokens([*recs[:2], loop, *recs[4:]], reference_given=False).verdict == "PASS"
    # an ASCII class (odd identifiers) is written by a framed copy with something between the nonces
    ident = "nbcfgd_Wg3YY.__nbc_cache__"
    garbled_ident = rare("r7", "code", ident, reply("Ab3x nbcfgd_Wg3.__nbc_cach Qz9k"))
    assert gate_rare_tokens([*recs, garbled_ident], reference_given=False).verdict == "PASS"
    blank_ident = rare("r8", "code", ident, reply("Ab3x  Qz9k"))
    assert gate_rare_tokens([*recs, blank_ident], reference_given=False).verdict == "UNPROVEN"
    # a class whose only replies wrote none of its characters (one blank attempt, one that never tried): UNPROVEN
    recs = [copied("r0", "cjk"), garbled("r1", "emoji_zwj"), missed("r2", "hangul"),
            rare("r3", "hangul", STRINGS["hangul"], reply("Hello!"))]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "UNPROVEN" and "a class had no reply that wrote its rare characters" in g.reason
    # with a reference every counted miss still FAILs
    assert gate_rare_tokens(recs, reference_given=True).verdict == "FAIL"


def test_a_miss_the_reference_also_missed_is_not_counted():
    recs = [copied("r0", "cjk"), missed("r1", "hangul"), copied("r0", "cjk", "rare_reference"),
            missed("r1", "hangul", "rare_reference")]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "PASS"
    assert g.reason == "1/2 rare strings reproduced verbatim; 1 missed by the reference engine too (not counted)"
    assert g.metrics["missed_by_reference_too"] == 1


def test_a_refused_probe_is_a_miss_when_the_reference_answered():
    recs = [copied("r0", "cjk"), rare("r1", "hangul", STRINGS["hangul"], reply("", 400, "token out of vocabulary")),
            copied("r1", "hangul", "rare_reference")]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "FAIL"
    assert g.reason == "1/2 rare strings not reproduced verbatim (hangul); 1 of them refused with an error"
    assert g.details[0]["error"] == "token out of vocabulary" and g.details[0]["status"] == 400


def test_refused_by_both_engines_is_unproven():
    refused = reply("", 400, "bad request")
    recs = [copied("r0", "cjk"), rare("r1", "hangul", STRINGS["hangul"], refused),
            rare("r1", "hangul", STRINGS["hangul"], refused, "rare_reference")]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "UNPROVEN"
    assert g.reason == "1/2 rare strings reproduced verbatim; 1 refused by both engines (not judged)"
    assert any("1 reference probe(s) failed (HTTP 400 ×1" in x for x in g.limitations)


def test_a_probe_never_sent_counts_as_a_miss():
    g = gate_rare_tokens([copied("r0", "cjk"), rare("r1", "math", "ℤ ⊂ ℚ", None)], reference_given=False)
    assert g.verdict == "UNPROVEN" and "(math)" in g.reason
    assert g.details[0]["error"] == "not sent"


def test_not_run_without_rare_probes():
    g = gate_rare_tokens([], reference_given=True)
    assert g.verdict == "NOT RUN" and g.reason == "no rare-string probe was sent"


def test_rare_rows_fall_back_on_the_target_core_when_meta_has_none():
    rec = rare("r0", "cjk", STRINGS["cjk"], reply(f"xx {STRINGS['cjk']} yy"))
    del rec["meta"]["core"]
    (row,) = rare_rows([rec])
    assert row.core_reproduced and not row.nonces_intact and not row.counted


def test_characters_the_reference_wrote_but_the_engine_lost_count_even_when_both_copies_are_wrong():
    core = STRINGS["hangul"]  # "햇살 가득한 골목길"
    ref_text = "Ab3x 햇살 가득 골목 Qz9k"  # the model's own imperfect copy: not verbatim
    recs = [rare("r1", "hangul", core, reply("Ab3x   Qz9k")),  # the same copy with every Hangul syllable gone
            rare("r1", "hangul", core, reply(ref_text), "rare_reference")]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "FAIL" and g.metrics["counted_misses"] == 1
    assert "missing from the engine's replies altogether" in g.reason and "햇" in g.reason
    assert g.details[0]["lost_characters"] == "가골득목살햇"
    # the same imperfect copy on both engines is the model's error, not the engine's: not counted
    same = [rare("r1", "hangul", core, reply(ref_text)), rare("r1", "hangul", core, reply(ref_text), "rare_reference")]
    g = gate_rare_tokens(same, reference_given=True)
    # ...and with that the only string, nothing was judged: no PASS (a PASS is a bounded claim, issue 18)
    assert g.verdict == "UNPROVEN" and g.metrics["missed_by_reference_too"] == 1 and g.judged == 0


# --- issue 18: a refusal or an omission is no copying error ----------------------------------------------------------

def test_a_majority_of_copy_attempts_that_leave_the_string_out_fails_without_a_reference():
    # failed before 18: UNPROVEN without a reference, whatever the replies
    recs = [copied("r0", "cjk"), missed("r1", "hangul"), missed("r2", "emoji_zwj")]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "FAIL" and g.metrics["copy_attempts"] == 3 and g.metrics["refused_or_omitted"] == 2
    assert g.reason.startswith("2 of 3 copy attempts refused or left the rare string out (emoji_zwj, hangul)")
    refused = [copied("r0", "cjk"), rare("r1", "hangul", STRINGS["hangul"], reply("", 500, "boom")),
               rare("r2", "emoji_zwj", STRINGS["emoji_zwj"], reply("", 500, "boom"))]
    assert gate_rare_tokens(refused, reference_given=False).verdict == "FAIL"


def test_one_masked_block_fails_when_every_attempt_at_it_came_back_blank():
    # the cheat proxy's vocab-mask: one block stripped, the frame kept; the other classes copied or garbled
    recs = [copied("r0", "cjk"), garbled("r1", "emoji_zwj"), missed("r2", "hangul"), missed("r3", "hangul"),
            copied("r4", "cjk"), garbled("r5", "cjk")]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "FAIL" and g.reason.startswith("every copy attempt of hangul (2) was refused or left")
    # one blank attempt of a block is not enough, and a reply that never tried to copy is no attempt at all
    recs = [copied("r0", "cjk"), missed("r2", "hangul"), rare("r3", "hangul", STRINGS["hangul"], reply("Hello!")),
            garbled("r4", "emoji_zwj")]
    g = gate_rare_tokens(recs, reference_given=False)
    assert g.verdict == "UNPROVEN" and g.metrics["copy_attempts"] == 3


def test_without_a_reference_the_limitation_says_which_misses_still_fail():
    g = gate_rare_tokens(ALL_COPIED, reference_given=False)
    [line] = [x for x in g.limitations if x.startswith("no reference engine")]
    # before 18's audit it still said every miss was UNPROVEN, though refusals and blank copies FAIL by majority
    assert "such a miss is UNPROVEN, not FAIL" in line
    assert "still FAIL, by a majority of at least 3 copy attempts or every attempt (at least 2) at one class" in line


def test_one_string_per_class_says_the_per_class_rule_cannot_fire():
    # one string per class (gates run --rare-per-class 1): a class holds one attempt, and the masked-block rule needs 2
    one = gate_rare_tokens(ALL_COPIED, reference_given=False)
    [line] = [x for x in one.limitations if "classes were sent fewer than 2 strings" in x]
    assert line.startswith("3 of 3 classes") and "(cjk, emoji_zwj, hangul;" in line
    two = gate_rare_tokens(ALL_COPIED + [copied(f"s{i}", cls) for i, cls in enumerate(STRINGS)],
                           reference_given=False)
    assert not any("classes were sent fewer" in x for x in two.limitations)
    # with a reference every miss is judged against it: no such limitation
    with_ref = gate_rare_tokens(ALL_COPIED, reference_given=True)
    assert not any("classes were sent fewer" in x for x in with_ref.limitations)


def test_a_reply_that_went_wrong_before_the_string_is_not_judged():
    # recorded on llama-server, prompt cache on (6 Dec 2026): the engine's greedy reply lost the leading nonce
    # after a partial cache hit while the reference copy (same server, longer cache hit) got the string
    core = "विज्ञान और प्रौद्योगिकी"
    t = f"Kdwv {core} wNAa"
    eng = rare("r16", "devanagari", core, reply("Kwadwv,\n\nI'm glad to see that you're enjoying the world"))
    eng["meta"]["target"] = t
    ref = rare("r16", "devanagari", core, reply(f"|>KwDv {core} wNaA."), "rare_reference")
    ref["meta"]["target"] = t
    recs = [copied("r0", "cjk"), copied("r0", "cjk", "rare_reference"), eng, ref]
    g = gate_rare_tokens(recs, reference_given=True)
    assert g.verdict == "PASS", g.reason
    assert g.reason == "1/2 rare strings reproduced verbatim; 1 went wrong before the rare string (not judged)"
    assert g.metrics["diverged_before_string"] == 1 and g.metrics["counted_misses"] == 0
    assert g.judged == 1 and any("leading ASCII nonce" in x and "r16" in x for x in g.limitations)
    # the same reply with the nonce copied and the string lost still FAILs
    eng["reply"] = reply("Kdwv and then nothing wNAa")
    assert gate_rare_tokens(recs, reference_given=True).verdict == "FAIL"


def test_nothing_reached_is_unproven_not_pass():
    eng = rare("r1", "hangul", STRINGS["hangul"], reply("Sure, here is a poem about spring."))
    g = gate_rare_tokens([eng], reference_given=True)
    assert g.verdict == "UNPROVEN" and g.metrics["diverged_before_string"] == 1
