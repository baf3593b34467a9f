"""The declared-sharing check a load runs before sending (data/sharing.py), on hand-built prompt sets."""

from __future__ import annotations

import pytest

from inferencekit.data.prompts import Prompt
from inferencekit.data.sharing import check_declared_sharing
from inferencekit.errors import OpError

HEAD = {"g0": "alpha beta gamma. ", "g1": "delta epsilon zeta. "}


def user(pid: str, text: str, **kw) -> Prompt:
    return Prompt(pid, "random", ({"role": "user", "content": text},), **kw)


def member(pid: str, group: str, own: str) -> Prompt:
    return user(pid, HEAD[group] + own, shared_prefix_id=group, shared_prefix_chars=len(HEAD[group]))


def test_groups_that_share_only_their_prefixes_pass_and_are_counted():
    prompts = [member("a", "g0", "one two"), member("b", "g0", "three"), member("c", "g1", "one more")]
    assert check_declared_sharing(prompts, salted=False) == {"prompts": 3, "groups": 2, "sessions": 0,
                                                             "compared_unsalted": 0}


def test_a_member_whose_prefix_differs_from_its_groups_is_refused():
    bad = user("b", "alpha beta GAMMA. three", shared_prefix_id="g0", shared_prefix_chars=len(HEAD["g0"]))
    with pytest.raises(OpError, match="prompts a and b declare the shared prefix 'g0' but open with different text"):
        check_declared_sharing([member("a", "g0", "one"), bad], salted=True)
    short = user("s", "tiny", shared_prefix_id="g0", shared_prefix_chars=40)
    with pytest.raises(OpError, match="40-character prefix but its first user message holds 4"):
        check_declared_sharing([short], salted=True)


def test_two_groups_or_two_unsalted_prompts_opening_alike_are_refused():
    twin = user("c", "alpha beta words. x", shared_prefix_id="g9", shared_prefix_chars=18)
    with pytest.raises(OpError, match="group g0 and group g9 both open with 'alpha beta'"):
        check_declared_sharing([member("a", "g0", "one"), twin], salted=True)
    with pytest.raises(OpError, match="prompt p1 and prompt p2 both open with 'same old'"):
        check_declared_sharing([user("p1", "same old start"), user("p2", "same old other")], salted=False)
    # with a salt at every request's start the two cannot share a token: not compared
    got = check_declared_sharing([user("p1", "same old start"), user("p2", "same old other")], salted=True)
    assert got["compared_unsalted"] == 0


def test_unsalted_members_must_differ_right_after_the_prefix():
    with pytest.raises(OpError, match="prompts a and b of group 'g0' both go on with 'one two' after the shared "):
        check_declared_sharing([member("a", "g0", "one two x"), member("b", "g0", "one two y")], salted=False)
    assert check_declared_sharing([member("a", "g0", "one two x"), member("b", "g0", "one two y")],
                                  salted=True)["groups"] == 1


def test_sessions_are_counted_and_their_openings_compared():
    s = [user("conv-0", "w1 w2", followups=("next",)), user("conv-1", "w3 w4", followups=("more",))]
    assert check_declared_sharing(s, salted=False) == {"prompts": 2, "groups": 0, "sessions": 2,
                                                       "compared_unsalted": 2}


def test_a_drawn_set_larger_than_the_single_token_words_passes_with_distinct_word_pairs():
    # random_prompts past its single-token words (680 here): the first two words form a distinct pair, so prompts
    # share at most their first token, by design; 2,048 prompts (bench-peers' c=1024 level) must not be refused
    words = [f"w{i}" for i in range(680)]
    prompts = [user(f"r{i}", f"{words[i // 680]} {words[i % 680]} rest of it") for i in range(2048)]
    assert check_declared_sharing(prompts, salted=False)["compared_unsalted"] == 2048
