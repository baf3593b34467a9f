"""The randomised-mix route of the cheat proxy: a seeded Bernoulli draw per generation request (issue 20)."""

from __future__ import annotations

import random

import pytest

from inferencekit.cheats.proxy import Mix, listening_line


def test_draws_are_seeded_bernoulli_at_the_share():
    mix = Mix("http://b", 0.1, seed=7)
    got = [mix.draw() for _ in range(5000)]
    rng = random.Random(7)
    assert got == [rng.random() < 0.1 for _ in range(5000)]
    assert 0.08 < sum(got) / len(got) < 0.12  # 5000 draws at 0.1: sd 0.0042, so ±4.7 sd
    assert all(Mix("http://b", 1.0).draw() for _ in range(100))


@pytest.mark.parametrize("share", [0.0, -0.1, 1.01])
def test_a_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        Mix("http://b", share)


def test_the_listening_line_names_the_mix():
    line = listening_line("http://127.0.0.1:9", "http://a", [], Mix("http://b", 0.3, seed=2))
    assert line == ("cheat-proxy: listening on http://127.0.0.1:9 (upstream http://a; cheats none; 0.3 of generation "
                    "requests to http://b, seed 2)")


def test_under_load_routes_only_requests_that_arrive_with_another_in_flight():
    # the quantised-under-load cheat (issue 42): alone the claimed engine answers, under load the second one
    mix = Mix("http://b", 1.0, seed=3, under_load=True)
    assert [mix.draw(n) for n in (1, 2, 1, 5)] == [False, True, False, True]
    half = Mix("http://b", 0.5, seed=3, under_load=True)
    rng = random.Random(3)
    # no draw is spent alone: the loaded requests see the seeded sequence as it is
    assert [half.draw(n) for n in (1, 2, 2, 1, 3)] == [False, *(rng.random() < 0.5 for _ in range(2)), False,
                                                      rng.random() < 0.5]
    line = listening_line("http://127.0.0.1:9", "http://a", [], mix)
    assert "1 of generation requests under load to http://b, seed 3" in line
