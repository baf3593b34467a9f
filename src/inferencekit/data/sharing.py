"""The sharing a workload declares against what its prompts really share, checked before anything is sent.

A load may reuse text on purpose: a shared-prefix group's system prompt (``Prompt.shared_prefix_id``, its first
``shared_prefix_chars`` characters), a session's own history (``Prompt.followups``: later turns are built from the
replies, ``bench/runner.py``). Any other reuse would let a prefix cache serve what the benchmark says is new work
(issue 23: "a workload whose declared sharing differs from what the prompts actually share is refused before
sending"; MLPerf Endpoints allows prefix reuse only behind a per-query salt). The rules here, on the texts as they
will be sent less the per-request salt (``bench/plan.py`` puts it at a prompt's start, or right after its prefix):

- every prompt of a group opens with the same ``shared_prefix_chars`` characters, and holds that many; sent without
  a salt, the members' own texts after the prefix differ within their first ``OPENING_WORDS`` words;
- two groups' prefixes, and two prompts outside any group that are sent without a salt (a set drawn afresh per run:
  ``--dataset random`` / ``conversations``), differ within their first ``OPENING_WORDS`` words: more shared leading
  text is reuse a prefix cache could serve that nobody declared. Two words, not one: a drawn set larger than the
  tokenizer's single-token words cannot start every prompt differently, so ``random_prompts`` makes the first *two*
  words distinct there (one shared leading token at most, by design);
- a salted prompt shares nothing past its salt, so it is not compared (the salt is unique per request).

A trace replay's sharing is Mooncake's ``hash_ids``, planned block by block and made exact by construction
(``data/trace_blocks.py``, whose tests check shared blocks byte-identical and others disjoint); its prompts carry no
group here and are left to that plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError

__all__ = ["OPENING_WORDS", "check_declared_sharing", "first_user_text"]

OPENING_WORDS = 2  # leading words two undeclared prompts may not both start with (see the module docstring)


def first_user_text(p: Prompt) -> str:
    """The text a prompt's salt and prefix go into: its first user message's string content, else its text prompt
    ('' for neither)."""
    if p.messages is None:
        return p.prompt or ""
    c = next((m.get("content") for m in p.messages if m.get("role") == "user"), None)
    return c if isinstance(c, str) else ""


def _opening(text: str) -> str:
    """The first ``OPENING_WORDS`` words, space-joined."""
    return " ".join(text.split(None, OPENING_WORDS)[:OPENING_WORDS])


def check_declared_sharing(prompts: Sequence[Prompt], *, salted: bool) -> dict[str, Any]:
    """Refuse a prompt set whose shared text differs from what it declares.

    Args:
        prompts: the load's prompts, as planned (before salts).
        salted: every request gets a salt at its start (outside its prefix), so ungrouped prompts cannot share.

    Returns:
        What was checked, for run.json: ``{"prompts", "groups", "sessions", "compared_unsalted"}``.

    Raises:
        OpError: a group member without its group's prefix, two groups or two unsalted ungrouped prompts opening
            with the same ``OPENING_WORDS`` words (named, with the words).
    """
    groups: dict[str, tuple[str, str]] = {}  # group -> (prefix, first prompt id)
    opening: dict[str, str] = {}  # first word -> who opened with it (a group, or a prompt id)
    tails: dict[tuple[str, str], str] = {}  # (group, first word after the prefix) -> prompt id
    unsalted = 0
    for p in prompts:
        text = first_user_text(p)
        if p.shared_prefix_id is not None:
            if not 0 < p.shared_prefix_chars <= len(text):
                raise OpError(f"prompt {p.id} declares group {p.shared_prefix_id!r} with a {p.shared_prefix_chars}-"
                              f"character prefix but its first user message holds {len(text)} characters")
            head = text[:p.shared_prefix_chars]
            if not salted:  # nothing but the prefix may be shared: the text after it opens differently per member
                after = (p.shared_prefix_id, _opening(text[p.shared_prefix_chars:]))
                if after in tails:
                    raise OpError(f"prompts {tails[after]} and {p.id} of group {p.shared_prefix_id!r} both go on "
                                  f"with {after[1]!r} after the shared prefix: they would share more than it")
                tails[after] = p.id
            known = groups.get(p.shared_prefix_id)
            if known is None:
                groups[p.shared_prefix_id] = (head, p.id)
                owner = f"group {p.shared_prefix_id}"
            elif known[0] != head:
                raise OpError(f"prompts {known[1]} and {p.id} declare the shared prefix {p.shared_prefix_id!r} but "
                              "open with different text: the workload would not share what it says it does")
            else:
                continue
        elif salted:
            continue
        else:
            unsalted += 1
            owner = f"prompt {p.id}"
        word = _opening(text)
        if word in opening:
            raise OpError(f"{opening[word]} and {owner} both open with {word!r} without declaring a shared prefix: a "
                          "prefix cache could reuse that leading text, which the workload does not intend")
        opening[word] = owner
    return {"prompts": len(prompts), "groups": len(groups),
            "sessions": sum(1 for p in prompts if p.followups), "compared_unsalted": unsalted}
