"""One level's schedule split over N client processes (``bench serve --workers N`` / ``--ray``). Pure.

- Closed loop, concurrency c: ``k = min(N, c)`` processes, each keeping its share of the c streams busy
  (shares differ by at most one); the level's request count is split in proportion to the shares
  (largest remainder), so every stream sends about as many requests as in one process.
- Open loop, rate λ: every one of the N processes runs its own arrival process at λ/N with its own
  seed. Independent Poisson processes superpose to a Poisson process at the summed rate (Kingman,
  *Poisson Processes*, 1993, §2.2), so the server sees the arrivals it would see from one client at
  λ. (For gamma arrivals with burstiness ≠ 1 the superposition is not a gamma process: it is
  smoother than one client's; ``split_note`` says so.) A ``--max-concurrency`` cap is split like a
  closed loop's streams, and never below one per process (fewer processes are used instead).
- The prompt draw stays the run's single seeded sequence. With a request count the parent draws the
  level's n requests as one client would and deals them out in blocks of each share's size
  (``ListPlanner``); in duration mode process i of k takes draws i, i+k, i+2k, … (``StridedPlanner``)
  and the parent then continues after the furthest draw any process took, so keys never repeat.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from inferencekit.bench.plan import LevelSpec, PlannedRequest, Planner

__all__ = ["Share", "split_level", "split_counts", "StridedPlanner", "ListPlanner", "split_note"]


@dataclass(frozen=True, slots=True)
class Share:
    """What one process sends in one level: its ``spec`` (its concurrency or rate), its request count
    (None in duration mode), the seed of its arrival process, and its place in the prompt draw."""

    worker: int
    of: int
    spec: LevelSpec
    num_requests: int | None
    arrival_seed: int


def split_counts(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` by largest remainder (sums to ``total`` exactly).

    Raises:
        ValueError: empty or non-positive weights, or a negative total.
    """
    if not weights or any(w <= 0 for w in weights) or total < 0:
        raise ValueError("weights must be positive and total ≥ 0")
    s = sum(weights)
    exact = [total * w / s for w in weights]
    base = [math.floor(x) for x in exact]
    left = total - sum(base)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:left]:
        base[i] += 1
    return base


def _even(total: int, k: int) -> list[int]:
    return [total // k + (i < total % k) for i in range(k)]


def split_level(spec: LevelSpec, workers: int, *, num_requests: int | None, seed: int) -> list[Share]:
    """The shares of one level over ``workers`` processes (fewer when the level has fewer streams).

    Args:
        spec: the level as asked (closed: ``concurrency``; open: ``rate``, ``concurrency`` = cap or 0).
        workers: processes available (≥ 1).
        num_requests: the level's request count, None in duration mode.
        seed: the level's arrival seed; each process's is derived from it and its index.

    Raises:
        ValueError: workers < 1.
    """
    if workers < 1:
        raise ValueError("workers must be ≥ 1")
    if spec.mode == "closed":
        k = min(workers, spec.concurrency)
        conc = _even(spec.concurrency, k)
        specs = [replace(spec, concurrency=c) for c in conc]
        weights = conc
    else:
        k = min(workers, spec.concurrency) if spec.concurrency else workers
        caps = _even(spec.concurrency, k) if spec.concurrency else [0] * k
        specs = [replace(spec, rate=spec.rate / k, concurrency=cap) for cap in caps]
        weights = [1] * k
    counts: list[int | None] = list(split_counts(num_requests, weights)) if num_requests is not None else [None] * k
    return [Share(i, k, specs[i], counts[i], random.Random(f"{seed}:worker:{i}:{k}").getrandbits(32))
            for i in range(k)]


def split_note(spec: LevelSpec, shares: list[Share]) -> str | None:
    """A caveat on how the split changes what the server sees, or None."""
    if spec.mode == "open" and spec.arrival == "gamma" and spec.burstiness != 1.0 and len(shares) > 1:
        return (f"level {spec.label}: {len(shares)} gamma arrival processes (burstiness {spec.burstiness:g}) superpose "
                "to a smoother process than one client's; the split is exact only for Poisson arrivals")
    return None


class StridedPlanner:
    """Every ``stride``-th draw of a run's planner, starting at ``index``: process i of k takes draws i, i+k, …"""

    def __init__(self, planner: Planner, index: int, stride: int) -> None:
        if not 0 <= index < stride:
            raise ValueError("index must be in [0, stride)")
        self.planner, self.index, self.stride = planner, index, stride

        self.draws = 0  # draws taken from the run's sequence (the parent advances past the furthest process's)

    def take(self) -> PlannedRequest:
        drawn = [self.planner.take() for _ in range(self.stride)]
        self.draws += self.stride
        return drawn[self.index]


class ListPlanner:
    """A share's requests drawn by the parent, handed out in order (count mode: no gaps in the run's draw)."""

    def __init__(self, requests: list[PlannedRequest]) -> None:
        self._left = list(reversed(requests))

    def take(self) -> PlannedRequest:
        if not self._left:
            raise IndexError("the share's requests are all sent")
        return self._left.pop()
