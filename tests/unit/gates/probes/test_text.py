"""Probe text material: nonces, perturbation, echo prompts, tags, the rare pool, stagger and interleave."""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter

import pytest

import inferencekit.gates.probes.text as pt


def test_nonce_alphabet_has_no_look_alikes_and_nonces_use_it():
    assert not set("0Oo1Il") & set(pt.NONCE_ALPHABET)
    assert len(pt.NONCE_ALPHABET) == 26 + 26 + 10 - 6
    word = pt.nonce(random.Random(3), 16)
    assert len(word) == 16 and set(word) <= set(pt.NONCE_ALPHABET)
    assert pt.nonce(random.Random(3), 16) == word  # the seed decides


def test_perturb_changes_exactly_one_character():
    for seed in range(200):
        rng = random.Random(seed)
        s = pt.nonce(rng, rng.randint(1, 20))
        p = pt.perturb(s, rng)
        assert len(p) == len(s)
        assert sum(a != b for a, b in zip(s, p)) == 1, (s, p)
    assert pt.perturb("東京", random.Random(0)) != "東京"  # any string, not only nonces


def test_perturb_refuses_an_empty_string():
    with pytest.raises(ValueError, match="empty"):
        pt.perturb("", random.Random(0))


def test_echo_prompt_holds_the_string_between_its_delimiters_and_the_padding():
    style = pt.EchoStyle("Copy {o}{s}{c} now", "[[", "]]", "Ref: K7", True)
    assert pt.echo_prompt("abc", style) == "Ref: K7\nCopy [[abc]] now"
    after = pt.EchoStyle("Copy {o}{s}{c} now", "«", "»", "Ref: K7", False)
    assert pt.echo_prompt("abc", after) == "Copy «abc» now\nRef: K7"
    bare = pt.EchoStyle("Copy {o}{s}{c}", "<<", ">>", "", True)
    assert pt.echo_prompt("abc", bare) == "Copy <<abc>>"


def test_echo_style_draws_every_part_from_the_tables():
    for seed in range(50):
        st = pt.echo_style(random.Random(seed))
        assert st.template in pt.ECHO_TEMPLATES
        assert (st.opening, st.closing) in pt.ECHO_DELIMITERS
        assert "{n}" not in st.padding
        prompt = pt.echo_prompt("QzX9", st)
        assert f"{st.opening}QzX9{st.closing}" in prompt


def test_a_pair_sharing_a_style_differs_in_the_changed_character_only():
    rng = random.Random(11)
    word, style = pt.nonce(rng, 16), pt.echo_style(rng)
    other = pt.perturb(word, rng)
    a, b = pt.echo_prompt(word, style), pt.echo_prompt(other, style)
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


def test_tag_prompt_keeps_the_text_and_adds_an_eight_character_tag():
    seen_forms = set()
    for seed in range(60):
        out = pt.tag_prompt("What is 2+2?", random.Random(seed))
        assert "What is 2+2?" in out and out != "What is 2+2?"
        rest = out.replace("What is 2+2?", "")
        tags = re.findall(f"[{pt.NONCE_ALPHABET}]{{8}}", rest)
        assert tags, out
        seen_forms.add(rest.replace(tags[0], "T"))
    assert len(seen_forms) >= 4  # several forms, not one template


def test_rare_pool_has_every_class_with_three_or_more_nfc_strings():
    assert set(pt.RARE_POOL) >= {"cjk", "hangul", "emoji", "emoji_zwj", "devanagari", "arabic", "script", "math"}
    for cls, strings in pt.RARE_POOL.items():
        assert len(strings) >= 3, cls
        assert len(set(strings)) == len(strings), cls
        for s in strings:
            assert unicodedata.normalize("NFC", s) == s, (cls, s)
            assert " " not in (s[0], s[-1])
    assert all("\u200d" in s for s in pt.RARE_POOL["emoji_zwj"])


def test_rare_targets_cover_every_class_wrapped_in_nonces():
    targets = pt.rare_targets(random.Random(5))
    classes = Counter(cls for cls, _ in targets)
    assert set(classes) == set(pt.RARE_POOL) | {"code", "number"}
    assert classes["number"] == 2 and classes["code"] == 1
    assert all(n == 1 for cls, n in classes.items() if cls in pt.RARE_POOL)
    for cls, target in targets:
        head, _, rest = target.partition(" ")
        core, _, tail = rest.rpartition(" ")
        assert len(head) == 4 and len(tail) == 4
        assert set(head + tail) <= set(pt.NONCE_ALPHABET)
        assert pt.rare_core(target) == core
        if cls in pt.RARE_POOL:
            assert core in pt.RARE_POOL[cls]
    numbers = [pt.rare_core(t) for cls, t in targets if cls == "number"]
    assert any(re.fullmatch(r"[1-9][0-9]{29,44}", n) for n in numbers)
    assert any(re.fullmatch(r"0x[0-9A-F]{16} [1-9]\.[0-9]{9}e-[0-9]{2}", n) for n in numbers)


def test_rare_targets_per_class_draws_distinct_strings():
    targets = pt.rare_targets(random.Random(9), per_class=3)
    by_class = Counter(cls for cls, _ in targets)
    assert by_class["cjk"] == 3 and by_class["code"] == 3 and by_class["number"] == 6
    cjk = [pt.rare_core(t) for cls, t in targets if cls == "cjk"]
    assert len(set(cjk)) == 3


def test_rare_targets_past_a_class_size_repeat_its_strings_in_turn_with_fresh_nonces():
    # verify sends six per class; the pool holds four or five strings: every string once, then again in turn
    targets = pt.rare_targets(random.Random(9), per_class=6)
    for cls, pool in pt.RARE_POOL.items():
        mine = [t for c, t in targets if c == cls]
        cores = Counter(pt.rare_core(t) for t in mine)
        assert len(mine) == 6 and set(cores) == set(pool), cls
        assert max(cores.values()) - min(cores.values()) <= 1, cls
        assert len(set(mine)) == 6, cls  # a repeated string is a new attempt: its nonces differ


def test_rare_targets_are_fresh_per_seed():
    a = pt.rare_targets(random.Random(1))
    assert a == pt.rare_targets(random.Random(1))
    assert a != pt.rare_targets(random.Random(2))


def test_rare_core_of_an_unwrapped_string_is_the_string():
    assert pt.rare_core("plain") == "plain"
    assert pt.rare_core("two words") == "two words"
    assert pt.rare_core("ab12 한국 어 cd34") == "한국 어"


def test_reproduced_verbatim_or_nfc_equal():
    assert pt.reproduced("東京", "answer: 東京.")
    composed = "한국"  # precomposed syllables
    decomposed = unicodedata.normalize("NFD", composed)  # conjoining jamo
    assert decomposed != composed
    assert pt.reproduced(composed, f"<<{decomposed}>>")
    assert pt.reproduced(decomposed, f"{composed}")
    assert pt.reproduced("caf\u00e9", "cafe\u0301!")
    assert not pt.reproduced("한국", "한 국")


def test_stagger_puts_each_follow_up_after_the_next_first():
    assert pt.stagger(["f0", "f1", "f2"], ["t0", "t1", "t2"]) == ["f0", "f1", "t0", "f2", "t1", "t2"]
    assert pt.stagger(["f0"], ["t0"]) == ["f0", "t0"]
    assert pt.stagger([], []) == []
    assert pt.stagger(["f0", "f1", "f2"], ["t0"]) == ["f0", "f1", "t0", "f2"]
    assert pt.stagger(["f0"], ["t0", "t1"]) == ["f0", "t0", "t1"]


def test_interleave_is_a_permutation_keeping_each_chain_in_order():
    chains = [["a1", "a2", "a3"], ["b1", "b2"], [], ["c1"]]
    for seed in range(100):
        out = pt.interleave(chains, random.Random(seed))
        assert sorted(out) == sorted(x for c in chains for x in c)
        for chain in chains:
            assert [x for x in out if x in chain] == chain


def test_interleave_picks_each_merge_about_equally_often():
    # [a1, a2] with [b]: three merges (b first, middle, last), each 1/3 under a uniform merge.
    runs = 3000
    where = Counter(pt.interleave([["a1", "a2"], ["b"]], random.Random(seed)).index("b") for seed in range(runs))
    assert set(where) == {0, 1, 2}
    for pos in range(3):
        assert 0.29 < where[pos] / runs < 0.38, where


def test_the_uncommon_scripts_class_of_the_seed_is_in_the_pool():
    # issue 18: the seed's pool had a class of scripts a pruned vocabulary drops first; it had gone missing
    scripts = {unicodedata.name(c).split()[0] for s in pt.RARE_POOL["script"] for c in s if not c.isspace()}
    assert scripts == {"RUNIC", "CHEROKEE", "GLAGOLITIC", "LISU"}
    assert len(pt.RARE_POOL["script"]) >= 3
    drawn = {cls for cls, _ in pt.rare_targets(random.Random(0))}
    assert "script" in drawn
