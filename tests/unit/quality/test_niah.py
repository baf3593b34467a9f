"""Needle in a haystack's pure layer: haystacks, the grid, scoring and the heat-map page.

Positions and lengths are checked against the text itself (where the needle really is, how long
the haystack really is); intervals against scipy's binomial test; the page by parsing it.
"""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from scipy.stats import binomtest

from inferencekit.data.niah_filler import calibration_text
from inferencekit.quality.niah import (
    MIN_LENGTH_TOKENS,
    TEXT_BEGIN,
    TEXT_END,
    NiahCase,
    build_case,
    found,
    plan_grid,
    score_grid,
)
from inferencekit.report.niah_heatmap import write_heatmap


def haystack_of(case: NiahCase) -> str:
    content = case.messages[-1]["content"]
    return content.split(TEXT_BEGIN + "\n", 1)[1].split("\n" + TEXT_END, 1)[0]


def filler_sentences(case: NiahCase) -> list[str]:
    """The haystack's sentences without the needle (every sentence ends in '. ' or at the end)."""
    hay = haystack_of(case)
    return [s for s in re.split(r"(?<=\.) ", hay) if s != case.needle]


# --------------------------------------------------------------------------- haystack

@pytest.mark.parametrize("cpt", [2.5, 4.0, 4.7])
@pytest.mark.parametrize("length", [64, 100, 512, 1024, 4096])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.33, 0.5, 0.9, 1.0])
def test_needle_lands_at_the_requested_depth_within_one_sentence(length, depth, cpt):
    case = build_case(length, depth, 1, 7, cpt)
    hay = haystack_of(case)
    assert hay.count(case.needle) == 1
    assert hay.index(case.needle) == case.needle_char_offset
    assert case.haystack_chars == len(hay)
    filler = filler_sentences(case)
    filler_chars = len(" ".join(filler))
    # Where the needle would sit if it could go anywhere, against where it went: never off by more
    # than one sentence (plus the joining space).
    wanted = depth * filler_chars
    assert abs(case.needle_char_offset - wanted) <= max(len(s) for s in filler) + 1
    # It went in at a sentence boundary: right at the start, or after a full stop and a space.
    assert case.needle_char_offset == 0 or hay[case.needle_char_offset - 2:case.needle_char_offset] == ". "


def test_depth_ends_and_middle_by_hand():
    first = build_case(1024, 0.0, 0, 3, 4.0)
    last = build_case(1024, 1.0, 0, 3, 4.0)
    middle = build_case(1024, 0.5, 0, 3, 4.0)
    assert haystack_of(first).startswith(first.needle)
    assert haystack_of(last).endswith(last.needle)
    # the middle one: the filler before it and after it differ by less than one sentence
    hay = haystack_of(middle)
    before = hay[:middle.needle_char_offset]
    after = hay[middle.needle_char_offset + len(middle.needle):]
    assert abs(len(before) - len(after)) <= max(len(s) for s in filler_sentences(middle)) + 2


@pytest.mark.parametrize("cpt", [2.0, 3.1, 4.0, 4.7, 6.0])
@pytest.mark.parametrize("length", [64, 65, 200, 512, 1536, 8192])
def test_haystack_is_within_ten_percent_of_the_target_characters(length, cpt):
    for trial in range(3):
        case = build_case(length, 0.5, trial, 11, cpt)
        target = length * cpt
        assert abs(len(haystack_of(case)) - target) <= 0.10 * target, (case.id, len(haystack_of(case)), target)


def test_the_code_is_the_only_number_and_a_seven_digit_one():
    for case in plan_grid([64, 700], [0.0, 0.6, 1.0], 4, 5, 4.0):
        content = case.messages[-1]["content"]
        assert re.findall(r"[0-9]+", content) == [case.code]
        assert re.fullmatch(r"[1-9][0-9]{6}", case.code)
        assert case.needle.endswith(f"{case.code}.")
        assert [m["role"] for m in case.messages] == ["user"]
        assert content.rstrip().endswith("Answer with the seven-digit code only.")


def test_same_seed_same_cases_and_each_trial_its_own_code():
    a = plan_grid([128, 1024], [0.25, 0.75], 3, 42, 3.8)
    b = plan_grid([128, 1024], [0.25, 0.75], 3, 42, 3.8)
    assert a == b
    assert [c.to_dict() for c in a] == [c.to_dict() for c in b]
    assert NiahCase.from_dict({**a[0].to_dict(), "unknown": 1}) == a[0]
    # different trials of a cell: different codes and different filler
    cell = [build_case(512, 0.5, t, 42, 4.0) for t in range(60)]
    assert len({c.code for c in cell}) == 60
    assert haystack_of(cell[0]) != haystack_of(cell[1])
    # another seed: another haystack
    assert haystack_of(build_case(512, 0.5, 0, 43, 4.0)) != haystack_of(cell[0])


def test_depths_of_one_length_and_trial_share_filler_and_code():
    shallow, deep = build_case(512, 0.1, 2, 9, 4.0), build_case(512, 0.9, 2, 9, 4.0)
    assert shallow.code == deep.code
    assert filler_sentences(shallow) == filler_sentences(deep)
    assert shallow.needle_char_offset < deep.needle_char_offset


def test_grid_ids_and_order():
    cases = plan_grid([1024, 512], [0.5, 0.1], 3, 0, 4.0)
    assert [c.id for c in cases[:4]] == ["L1024-D0.50-T0", "L1024-D0.50-T1", "L1024-D0.50-T2", "L1024-D0.10-T0"]
    assert len(cases) == 12
    assert build_case(1024, 0.125, 2, 0, 4.0).id == "L1024-D0.125-T2"
    assert (cases[2].length_tokens, cases[2].depth, cases[2].trial) == (1024, 0.5, 2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lengths": [63]}, "at least 64"),
    ({"lengths": [512.0]}, "whole numbers of tokens"),
    ({"lengths": [True]}, "whole numbers of tokens"),
    ({"lengths": []}, "at least one length"),
    ({"depths": [1.5]}, "outside [0, 1]"),
    ({"depths": [-0.1]}, "outside [0, 1]"),
    ({"depths": [math.nan]}, "outside [0, 1]"),
    ({"depths": [0.5, 0.5]}, "twice"),
    ({"lengths": [512, 512]}, "twice"),
    ({"trials": 0}, "trials 0"),
    ({"trials": 2.0}, "trials 2.0"),
    ({"chars_per_token": 0.0}, "positive finite"),
    ({"chars_per_token": math.inf}, "positive finite"),
])
def test_plan_grid_refuses_bad_input_with_a_clear_message(kwargs, message):
    args = {"lengths": [512], "depths": [0.5], "trials": 2, "seed": 0, "chars_per_token": 4.0, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        plan_grid(**args)
    assert MIN_LENGTH_TOKENS == 64


def test_calibration_text_is_filler_and_repeatable():
    text = calibration_text()
    assert text == calibration_text()
    assert len(text) > 3000 and not re.search(r"[0-9]", text)
    assert text.count(". ") == 59 and text.endswith(".")


# --------------------------------------------------------------------------- found

CODE = "4821937"


@pytest.mark.parametrize("reply", [
    "4821937",
    "The code is 4821937.",
    "The vault access code is **4821937**.",
    "(4821937)",
    "Code: \"4821937\"!",
    "`4821937`, as stated.",
    "code4821937",
    "The answer is 4821937 4821937 4821937",          # a looping reply still gave it
    "482-1937",
    "482\u20131937",                                  # en dash
    "4,821,937",
    "482 1937",
    "4\u00a0821\u00a0937",                            # no-break spaces
    "\uff14\uff18\uff12\uff11\uff19\uff13\uff17",    # full-width digits
    "It is 1 4821937",                                # a separate number before it
    "4821937, I think.",
])
def test_found_counts_the_code_as_a_whole_number(reply):
    assert found(reply, CODE)


@pytest.mark.parametrize("reply", [
    "",
    "I could not find a code.",
    "14821937",           # inside a longer number
    "48219370",
    "code 14821937!",
    "4821937.5",          # a decimal
    "0.4821937",
    "14,821,937",         # thousands groups of a longer number
    "4821937,5",
    "482193",             # one digit short
    "4821936",
    "482-19370",
    "4 821 9371",
    "482 1937 12",        # the grouped run spells another number
])
def test_found_rejects_other_numbers(reply):
    assert not found(reply, CODE)


def test_found_refuses_a_code_that_is_not_digits():
    with pytest.raises(ValueError, match="not a string of digits"):
        found("4821937", "48a1937")


# --------------------------------------------------------------------------- score_grid

def wilson(k, n):
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return [float(ci.low), float(ci.high)]


def test_score_grid_counts_hits_failures_and_prompt_tokens():
    cases = plan_grid([128, 256], [0.25, 0.75], 3, 1, 4.0)
    by = {(c.length_tokens, c.depth, c.trial): c for c in cases}
    replies: dict[str, str | None] = {}
    tokens: dict[str, int | None] = {}
    # (128, 0.25): 3 hits; tokens 150, 152, 157
    for t, tok in zip(range(3), (150, 152, 157), strict=True):
        replies[by[128, 0.25, t].id] = f"The code is {by[128, 0.25, t].code}."
        tokens[by[128, 0.25, t].id] = tok
    # (128, 0.75): 1 hit, 1 failed request, 1 wrong number; tokens only for the hit
    replies[by[128, 0.75, 0].id] = by[128, 0.75, 0].code
    tokens[by[128, 0.75, 0].id] = 151
    replies[by[128, 0.75, 1].id] = None
    replies[by[128, 0.75, 2].id] = "1234567"
    # (256, 0.25): 0 hits (the code inside a longer number); tokens unknown
    for t in range(3):
        replies[by[256, 0.25, t].id] = f"9{by[256, 0.25, t].code}"
    # (256, 0.75): 2 hits, 1 failed; one token count given as None
    replies[by[256, 0.75, 0].id] = by[256, 0.75, 0].code
    replies[by[256, 0.75, 1].id] = f"**{by[256, 0.75, 1].code}**"
    replies[by[256, 0.75, 2].id] = None
    tokens[by[256, 0.75, 0].id] = 290
    tokens[by[256, 0.75, 1].id] = 300
    tokens[by[256, 0.75, 2].id] = None

    result = score_grid(cases, replies, tokens)
    cells = {(c["length_tokens"], c["depth"]): c for c in result["cells"]}
    assert [(c["length_tokens"], c["depth"]) for c in result["cells"]] == [(128, 0.25), (128, 0.75), (256, 0.25),
                                                                            (256, 0.75)]
    expected = {(128, 0.25): (3, 3, 0), (128, 0.75): (3, 1, 1), (256, 0.25): (3, 0, 0), (256, 0.75): (3, 2, 1)}
    for key, (trials, hits, failed) in expected.items():
        c = cells[key]
        assert (c["trials"], c["hits"], c["failed"]) == (trials, hits, failed)
        assert c["accuracy"] == hits / trials
        assert c["ci95"] == wilson(hits, trials)
    assert cells[128, 0.25]["ci95"][1] == 1.0 and cells[256, 0.25]["ci95"][0] == 0.0
    # prompt tokens: (150 + 152 + 157) / 3 = 153; unknown stays None
    assert (cells[128, 0.25]["prompt_tokens_mean"], cells[128, 0.25]["prompt_tokens_min"],
            cells[128, 0.25]["prompt_tokens_max"], cells[128, 0.25]["prompt_tokens_known"]) == (153.0, 150, 157, 3)
    assert (cells[128, 0.75]["prompt_tokens_mean"], cells[128, 0.75]["prompt_tokens_known"]) == (151.0, 1)
    assert (cells[256, 0.25]["prompt_tokens_mean"], cells[256, 0.25]["prompt_tokens_min"],
            cells[256, 0.25]["prompt_tokens_max"], cells[256, 0.25]["prompt_tokens_known"]) == (None, None, None, 0)
    assert (cells[256, 0.75]["prompt_tokens_mean"], cells[256, 0.75]["prompt_tokens_known"]) == (295.0, 2)
    # per length: 128 → 150, 152, 157, 151 (mean 152.5); 256 → 290, 300
    assert [(b["length_tokens"], b["prompt_tokens_mean"], b["prompt_tokens_min"], b["prompt_tokens_max"])
            for b in result["by_length"]] == [(128, 152.5, 150, 157), (256, 295.0, 290, 300)]
    # overall: 6 hits of 12, 2 failed
    assert (result["n"], result["hits"], result["failed"], result["accuracy"]) == (12, 6, 2, 0.5)
    assert result["ci95"] == wilson(6, 12)
    assert result["lengths"] == [128, 256] and result["depths"] == [0.25, 0.75]
    failed_rows = [r["id"] for r in result["rows"] if r["failed"]]
    assert failed_rows == [by[128, 0.75, 1].id, by[256, 0.75, 2].id]
    assert not any(r["found"] for r in result["rows"] if r["failed"])


def test_score_grid_refuses_missing_replies_and_bad_token_counts():
    cases = plan_grid([128], [0.5], 2, 0, 4.0)
    with pytest.raises(ValueError, match="no reply entry for 1 case"):
        score_grid(cases, {cases[0].id: "x"}, {})
    with pytest.raises(ValueError, match="not a whole number >= 0"):
        score_grid(cases, {c.id: None for c in cases}, {cases[0].id: -3})
    with pytest.raises(ValueError, match="repeat an id"):
        score_grid([cases[0], cases[0]], {cases[0].id: None}, {})
    empty = score_grid([], {}, {})
    assert (empty["n"], empty["accuracy"], empty["ci95"], empty["cells"]) == (0, None, None, [])


# --------------------------------------------------------------------------- heat-map

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Balanced(HTMLParser):
    """Fails on a closing tag that does not match the open one; records every tag and attribute."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def _grid_result():
    cases = plan_grid([512, 1024, 1536], [0.1, 0.5, 0.9], 3, 0, 4.0)
    pattern = {0.1: 3, 0.5: 2, 0.9: 1}  # hits per cell by depth, less one more at 1536
    replies: dict[str, str | None] = {}
    for c in cases:
        want = pattern[c.depth] - (1 if c.length_tokens == 1536 and pattern[c.depth] > 0 else 0)
        replies[c.id] = c.code if c.trial < want else ("no idea" if c.trial != 2 else None)
    tokens = {c.id: c.length_tokens + 60 for c in cases}
    return score_grid(cases, replies, tokens)


def test_heatmap_is_one_valid_self_contained_page_with_every_cell(tmp_path: Path):
    result = _grid_result()
    out = write_heatmap(result, tmp_path / "quality" / "niah", label="llama.cpp / SmolLM2-135M $Q4",
                        measurement="measured with the engine's /tokenize: 4.00 chars/token")
    assert out == tmp_path / "quality" / "niah" / "heatmap.html"
    page = out.read_text(encoding="utf-8")
    parser = _Balanced()
    parser.feed(page)
    parser.close()
    assert parser.doctype.lower() == "doctype html"
    assert parser.stack == []
    assert "svg" in parser.tags and "script" not in parser.tags and "img" not in parser.tags
    # nothing fetched from outside: no src at all, every href points inside the page
    assert not [v for k, v in parser.attrs if k == "src"]
    assert all((v or "").startswith("#") for k, v in parser.attrs if k in ("href", "xlink:href"))
    svg = page[page.index("<svg"):page.index("</svg>")]
    for c in result["cells"]:
        assert f">{c['hits']}/{c['trials']}<" in svg, (c["length_tokens"], c["depth"])
    assert ">2/3<" in svg and ">0/3<" in svg and ">3/3<" in svg
    assert "1 failed" in svg
    assert "llama.cpp / SmolLM2-135M" in page and "$Q4" in page
    assert "measured with the engine&#x27;s /tokenize: 4.00 chars/token" in page
    assert "prompt_tokens" in page
    assert "sent ≈ 572" in svg  # 512 + 60 reported tokens, under the 512 column


def test_heatmap_to_a_named_file_replaces_it_atomically(tmp_path: Path):
    target = tmp_path / "grid.html"
    target.write_text("old")
    result = _grid_result()
    out = write_heatmap(result, target, label="engine", measurement="assumed 4.0 chars/token")
    assert out == target
    page = target.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "assumed 4.0 chars/token" in page
    assert [p.name for p in tmp_path.iterdir()] == ["grid.html"]
