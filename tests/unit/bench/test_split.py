"""``bench/split.py``: one level's schedule over N client processes (pure)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from inferencekit.bench.plan import LevelSpec, Planner
from inferencekit.bench.schedule import arrival_offsets_s
from inferencekit.bench.split import ListPlanner, StridedPlanner, split_counts, split_level, split_note
from inferencekit.data.prompts import Prompt

CLOSED5 = LevelSpec("c5", "closed", concurrency=5)


# ------------------------------------------------------------------------------------------------ split_counts

@pytest.mark.parametrize("total,weights", [(24, [3, 2]), (10, [1, 1, 1]), (0, [4, 1]), (7, [1]), (100, [5, 3, 2, 7])])
def test_split_counts_sum_to_the_total(total, weights):
    out = split_counts(total, weights)
    assert sum(out) == total and len(out) == len(weights)
    assert all(c >= 0 for c in out)


def test_split_counts_in_proportion():
    assert split_counts(100, [3, 1]) == [75, 25]
    assert split_counts(24, [2, 2]) == [12, 12]
    # exact shares 14.4 and 9.6: floors 14 + 9, the one left goes to the larger remainder (0.6)
    assert split_counts(24, [3, 2]) == [14, 10]
    # every share within one of its exact proportion
    w = [5, 3, 2, 7]
    for total, share in zip([w_ * 101 / sum(w) for w_ in w], split_counts(101, w)):
        assert abs(share - total) < 1


def test_split_counts_ties_go_to_the_earlier_index():
    assert split_counts(10, [1, 1, 1]) == [4, 3, 3]  # three remainders of 1/3: the first takes the extra one
    assert split_counts(5, [1, 1, 1, 1]) == [2, 1, 1, 1]
    assert split_counts(2, [1, 1, 1]) == [1, 1, 0]


@pytest.mark.parametrize("total,weights", [(5, []), (5, [1, 0]), (5, [2, -1]), (-1, [1, 1])])
def test_split_counts_rejects_bad_input(total, weights):
    with pytest.raises(ValueError, match="weights must be positive"):
        split_counts(total, weights)


# ------------------------------------------------------------------------------------------ closed-loop split

def test_closed_c5_over_two_is_three_plus_two_with_requests_in_proportion():
    shares = split_level(CLOSED5, 2, num_requests=25, seed=1)
    assert [s.spec.concurrency for s in shares] == [3, 2]
    assert [s.num_requests for s in shares] == [15, 10]  # 25 × 3/5 and 25 × 2/5: 5 requests per stream each
    assert [(s.worker, s.of) for s in shares] == [(0, 2), (1, 2)]
    assert all(s.spec.mode == "closed" and s.spec.label == "c5" for s in shares)


def test_closed_c1_with_four_workers_is_one_process():
    (share,) = split_level(LevelSpec("c1", "closed", concurrency=1), 4, num_requests=9, seed=1)
    assert share.of == 1 and share.spec.concurrency == 1 and share.num_requests == 9


def test_closed_duration_mode_has_no_counts():
    shares = split_level(CLOSED5, 2, num_requests=None, seed=1)
    assert [s.num_requests for s in shares] == [None, None]
    assert sum(s.spec.concurrency for s in shares) == 5


def test_workers_below_one_is_an_error():
    with pytest.raises(ValueError, match="workers must be"):
        split_level(CLOSED5, 0, num_requests=5, seed=1)


# -------------------------------------------------------------------------------------------- open-loop split

def test_open_each_process_runs_rate_over_n():
    spec = LevelSpec("r40", "open", rate=40.0)
    shares = split_level(spec, 4, num_requests=24, seed=7)
    assert len(shares) == 4
    assert [s.spec.rate for s in shares] == [10.0] * 4
    assert [s.spec.concurrency for s in shares] == [0] * 4  # no cap stays no cap
    assert [s.num_requests for s in shares] == [6] * 4
    assert sum(s.spec.rate for s in shares) == pytest.approx(40.0)


def test_open_cap_is_split_like_streams():
    spec = LevelSpec("r40c5", "open", rate=40.0, concurrency=5)
    shares = split_level(spec, 2, num_requests=11, seed=7)
    assert [s.spec.concurrency for s in shares] == [3, 2]
    assert [s.spec.rate for s in shares] == [20.0, 20.0]
    assert [s.num_requests for s in shares] == [6, 5]  # equal weights: the first takes the odd one


def test_open_cap_smaller_than_workers_uses_fewer_processes():
    spec = LevelSpec("r9c2", "open", rate=9.0, concurrency=2)
    shares = split_level(spec, 4, num_requests=10, seed=7)
    assert len(shares) == 2 and all(s.of == 2 for s in shares)
    assert [s.spec.concurrency for s in shares] == [1, 1]  # never below one slot per process
    assert [s.spec.rate for s in shares] == [4.5, 4.5]


def test_open_arrival_seeds_distinct_and_deterministic():
    spec = LevelSpec("r40", "open", rate=40.0)
    a = split_level(spec, 8, num_requests=80, seed=123)
    b = split_level(spec, 8, num_requests=80, seed=123)
    c = split_level(spec, 8, num_requests=80, seed=124)
    assert [s.arrival_seed for s in a] == [s.arrival_seed for s in b]
    assert len({s.arrival_seed for s in a}) == 8
    assert not {s.arrival_seed for s in a} & {s.arrival_seed for s in c}
    assert a == b  # the whole share (frozen dataclass) is reproducible


def test_superposed_poisson_shares_are_poisson_at_the_full_rate():
    rate, workers, n = 40.0, 4, 20000
    shares = split_level(LevelSpec("r40", "open", rate=rate), workers, num_requests=n, seed=2024)
    per = [arrival_offsets_s(s.num_requests, s.spec.rate, "poisson", seed=s.arrival_seed, part=(s.worker, s.of))
           for s in shares]
    # a part's first send is one of its own gaps after 0 (no k simultaneous first sends); compare the superposition
    # over the window every process covers, from 0
    assert all(p[0] > 0 for p in per)
    horizon = min(p[-1] for p in per)
    merged = np.sort(np.concatenate([[0.0]] + [p[p <= horizon] for p in per]))
    assert merged.size > 0.9 * n
    gaps = np.diff(merged)
    ks = stats.kstest(gaps, stats.expon(scale=1 / rate).cdf)
    assert ks.pvalue > 0.01, ks
    # the merged rate: arrivals per second over the common window, within 3% of the asked 40 req/s
    # (≈ 19,000 arrivals: Poisson relative s.d. ≈ 0.7%)
    assert merged.size / horizon == pytest.approx(rate, rel=0.03)
    # a single share's gaps are at rate/N, not the full rate: the test can tell the two apart
    assert stats.kstest(np.diff(per[0]), stats.expon(scale=1 / rate).cdf).pvalue < 1e-6


def test_split_note_only_for_gamma_with_burstiness_and_several_processes():
    gamma = LevelSpec("r8", "open", rate=8.0, arrival="gamma", burstiness=0.5)
    note = split_note(gamma, split_level(gamma, 2, num_requests=10, seed=1))
    assert note is not None and "2 gamma arrival processes" in note and "burstiness 0.5" in note
    assert "exact only for Poisson" in note
    assert split_note(gamma, split_level(gamma, 1, num_requests=10, seed=1)) is None
    poisson = LevelSpec("r8", "open", rate=8.0)
    assert split_note(poisson, split_level(poisson, 2, num_requests=10, seed=1)) is None
    gamma1 = LevelSpec("r8", "open", rate=8.0, arrival="gamma", burstiness=1.0)
    assert split_note(gamma1, split_level(gamma1, 2, num_requests=10, seed=1)) is None
    assert split_note(CLOSED5, split_level(CLOSED5, 2, num_requests=10, seed=1)) is None


# -------------------------------------------------------------------------------------------- StridedPlanner

POOL = [Prompt(f"p{i}", "short" if i % 2 else "long", prompt=f"question {i}") for i in range(5)]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_strided_planners_interleave_to_the_single_planners_sequence(k):
    rounds = 6
    used_before = ["p0", "p3", "p3~1"]  # a resumed run / earlier level: the draw continues after these
    single = Planner(POOL, seed=11)
    single.restore(used_before)
    expected = [single.take() for _ in range(rounds * k)]

    strided = []
    for i in range(k):
        pl = Planner(POOL, seed=11)
        pl.restore(used_before)
        strided.append(StridedPlanner(pl, i, k))
    got = [[sp.take() for _ in range(rounds)] for sp in strided]
    interleaved = [got[j % k][j // k] for j in range(rounds * k)]

    assert [r.key for r in interleaved] == [r.key for r in expected]
    assert [r.prompt.id for r in interleaved] == [r.prompt.id for r in expected]
    keys = [r.key for r in interleaved]
    assert len(set(keys)) == len(keys)
    salts = [r.salt for r in interleaved + expected]  # fresh per request (CSPRNG), never shared by two
    assert all(salts) and len(set(salts)) == len(salts)
    # process i of k takes draws i, i+k, i+2k, ...
    assert [r.key for r in got[k - 1]] == [expected[k - 1 + j * k].key for j in range(rounds)]


def test_strided_planner_index_must_be_inside_the_stride():
    for index, stride in ((2, 2), (-1, 3)):
        with pytest.raises(ValueError, match="index must be in"):
            StridedPlanner(Planner(POOL, seed=1), index, stride)


def test_split_level_shares_drive_strided_planners_to_unique_keys():
    """The shares' counts and places in the draw, as ``--workers`` uses them: one level's keys are unique."""
    spec = LevelSpec("r40", "open", rate=40.0)
    shares = split_level(spec, 3, num_requests=25, seed=5)
    keys = []
    for s in shares:
        sp = StridedPlanner(Planner(POOL, seed=3), s.worker, s.of)
        keys += [sp.take().key for _ in range(s.num_requests)]
    single = Planner(POOL, seed=3)
    assert Counter(keys) == Counter(single.take().key for _ in range(25))  # equal counts: the same 25 draws


def test_count_mode_deals_the_single_planners_draws_so_later_levels_never_repeat_a_key():
    """Count mode (what ``--workers`` does with --num-prompts): the parent draws each level's requests as one client
    would and deals them in blocks of the shares' sizes, so an uneven split (c5 over 2 → 3+2 streams, 7+5 requests)
    leaves no gap in the run's draw and three levels in a row never reuse a key."""
    parent, single = Planner(POOL, seed=9), Planner(POOL, seed=9)
    sent: list[str] = []
    for level in range(3):
        shares = split_level(CLOSED5, 2, num_requests=12, seed=level)
        assert [s.num_requests for s in shares] == [7, 5]
        for s in shares:
            lp = ListPlanner([parent.take() for _ in range(s.num_requests)])
            sent += [lp.take().key for _ in range(s.num_requests)]
            with pytest.raises(IndexError):
                lp.take()
    assert sent == [single.take().key for _ in range(36)]
    assert len(set(sent)) == len(sent)


def test_duration_mode_parent_continues_after_the_furthest_draw():
    """Duration mode: processes take different numbers of strided draws; the parent then takes as many draws as the
    furthest one did, and its next draws never repeat a key a process sent."""
    parent = Planner(POOL, seed=4)
    procs = [StridedPlanner(Planner(POOL, seed=4), i, 3) for i in range(3)]
    sent = [p.take().key for p, n in zip(procs, (5, 2, 4)) for _ in range(n)]
    for _ in range(max(p.draws for p in procs)):
        parent.take()
    later = [parent.take().key for _ in range(20)]
    assert not set(later) & set(sent) and len(set(sent)) == len(sent)


def test_constant_parts_interleave_into_one_constant_stream():
    """Constant arrivals at 30 req/s from 3 processes: each sends every 100 ms, phase-shifted by 33.3 ms, so the
    server sees one send every 33.3 ms (the trial run before the phase shift saw 0, 10.5, 35.4, 100 … ms)."""
    shares = split_level(LevelSpec("r30", "open", rate=30.0, arrival="constant"), 3, num_requests=18, seed=1)
    merged = np.sort(np.concatenate([arrival_offsets_s(s.num_requests, s.spec.rate, "constant", part=(s.worker, s.of))
                                     for s in shares]))
    assert np.allclose(np.diff(merged), 1 / 30) and merged[0] == 0.0 and merged.size == 18
