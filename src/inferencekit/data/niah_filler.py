"""The needle-in-a-haystack filler: village prose from small word lists, sized to a number of characters.

No external text, no digits, and none of the needle's words (``quality/niah.py`` plants the needle and
asks for it), so the needle is the only number and the only mention of a code. ``calibration_text``
is the sample a tokenizer measures chars per token on.
"""

from __future__ import annotations

import random

__all__ = ["calibration_text", "filler"]

_ADJECTIVES = ("quiet", "patient", "tired", "cheerful", "old", "young", "careful", "curious", "busy",
               "gentle", "stubborn", "clever", "sleepy", "proud")
_PEOPLE = ("baker", "gardener", "fisherman", "librarian", "carpenter", "shepherd", "painter", "traveller",
           "miller", "weaver", "potter", "sailor", "farmer", "teacher", "blacksmith", "innkeeper")
_ACTIONS = ("repaired the wooden fence", "counted the empty baskets", "painted a small boat",
            "carried water up the hill", "swept the front steps", "mended an old fishing net",
            "planted a row of beans", "read a letter twice", "fed the noisy geese", "stacked the firewood",
            "washed the blue curtains", "tuned a battered fiddle", "sharpened the kitchen knives",
            "tied up the restless goat", "polished the brass lantern", "baked a loaf of dark bread")
_PLACES = ("near the river", "behind the old market", "on the northern hill", "beside the stone bridge",
           "at the edge of the forest", "in the narrow lane", "under the tall elms", "by the harbour wall",
           "outside the chapel", "in the walled garden")
_TIMES = ("before the rain began", "early in the morning", "after the long winter", "while the bells rang",
          "late in the afternoon", "as the fog lifted", "on a windy evening", "during the harvest")
_ENDINGS = ("and then went home", "without saying a word", "while the neighbours watched",
            "humming an old tune", "and felt rather pleased", "as the cat looked on")
_GOODS = ("apples", "pears", "bread", "rope", "nails", "candles", "cheese", "salt", "wool", "honey", "ink",
          "soap", "flour", "beans", "lamps", "thread", "buttons", "onions", "plums", "string", "paper",
          "jam", "eggs", "tea")


def _filler_sentence(rng: random.Random) -> str:
    """One sentence of filler: who, what, and optionally where, when and how."""
    who = f"{rng.choice(('The', 'A'))} {rng.choice(_ADJECTIVES)} {rng.choice(_PEOPLE)}"
    parts = [rng.choice(_ACTIONS)]
    if rng.random() < 0.7:
        parts.append(rng.choice(_PLACES))
    when = rng.choice(_TIMES) if rng.random() < 0.6 else None
    if rng.random() < 0.35:
        parts.append(rng.choice(_ENDINGS))
    body = " ".join(parts)
    if when is not None and rng.random() < 0.5:
        return f"{when[0].upper()}{when[1:]}, {who[0].lower()}{who[1:]} {body}."
    return f"{who} {body}" + (f" {when}." if when else ".")


def _list_sentence(rng: random.Random, room: int) -> str | None:
    """A sentence whose length can be tuned item by item, the one closest to ``room`` characters
    (None when leaving the room empty is closer)."""
    person = rng.choice(_PEOPLE)
    goods = rng.sample(_GOODS, len(_GOODS))
    best: str | None = None
    best_gap = room
    for k in range(1, len(goods) + 1):
        items = goods[0] if k == 1 else ", ".join(goods[:k - 1]) + " and " + goods[k - 1]
        s = f"The {person} also bought {items}."
        if abs(room - len(s)) < best_gap:
            best, best_gap = s, abs(room - len(s))
        if len(s) > room:
            break
    return best


def calibration_text(sentences: int = 60, seed: int = 0) -> str:
    """Filler of the kind the haystacks are made of, for measuring chars per token.

    Args:
        sentences: how many filler sentences, joined by single spaces.
        seed: seed of the word choices.

    Returns:
        The text. The caller tokenizes it (no special tokens) and divides its length in characters
        by the token count to get the ``chars_per_token`` that ``build_case`` takes.
    """
    rng = random.Random(f"inferencekit-niah-calibration/{seed}")
    return " ".join(_filler_sentence(rng) for _ in range(sentences))


def filler(rng: random.Random, room: int) -> list[str]:
    """Sentences that, joined by single spaces, take close to ``room`` characters: whole filler
    sentences while they fit, then the list sentence that comes closest (off by at most half of one
    list item, or half the shortest list sentence when none is closer than leaving the room empty)."""
    out: list[str] = []
    used = -1  # the join adds one space fewer than sentences
    while True:
        s = _filler_sentence(rng)
        if used + 1 + len(s) > room:
            break
        out.append(s)
        used += 1 + len(s)
    last = _list_sentence(rng, room - used - 1)
    if last is not None:
        out.append(last)
    return out
