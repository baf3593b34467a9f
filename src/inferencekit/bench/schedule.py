"""Open-loop arrival processes: when is the next send? Pure and seeded.

- ``constant``: every 1/rate seconds;
- ``poisson``: exponential gaps with mean 1/rate (a Poisson process);
- ``gamma``: gamma gaps with shape = burstiness and scale = 1/(rate·burstiness), so the mean gap is
  still 1/rate; burstiness < 1 is burstier than Poisson, > 1 more regular (vLLM ``bench serve``'s
  ``--burstiness``; burstiness 1 is Poisson).
"""

from __future__ import annotations

import numpy as np

__all__ = ["arrival_offsets_s"]


def arrival_offsets_s(n: int, rate: float, arrival: str, *, burstiness: float = 1.0, seed: int = 0,
                      part: tuple[int, int] | None = None) -> np.ndarray:
    """Send times in seconds after the level starts, shape [n], first at 0.

    ``part=(i, k)``: this is process i of k sending one k-th of a level (``bench serve --workers``; ``rate`` is
    then already the process's own, rate/k). Its first send is not at 0, which would make k sends at once:
    constant arrivals are phase-shifted by i gaps of the whole level, i/(k·rate), so the k processes interleave
    into one constant stream; random arrivals start one gap of their own after 0 (a Poisson process seen from
    any instant: memoryless), so the k processes superpose to one process at the summed rate.

    Raises:
        ValueError: unknown arrival process, rate ≤ 0 or burstiness ≤ 0.
    """
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be > 0")
    if n <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    m = n if part is not None else n - 1  # a part draws a gap before its first send too
    if arrival == "constant":
        gaps = np.full(m, 1.0 / rate)
    elif arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, m)
    elif arrival == "gamma":
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), m)
    else:
        raise ValueError(f"unknown arrival process {arrival!r}")
    if part is None:
        return np.concatenate([[0.0], np.cumsum(gaps)])
    i, k = part
    if arrival == "constant":
        return i / (k * rate) + np.arange(n) / rate
    return np.cumsum(gaps)
