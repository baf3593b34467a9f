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


def arrival_offsets_s(n: int, rate: float, arrival: str, *, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Send times in seconds after the level starts, shape [n], first at 0.

    Raises:
        ValueError: unknown arrival process, rate ≤ 0 or burstiness ≤ 0.
    """
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be > 0")
    if n <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    if arrival == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n - 1)
    elif arrival == "gamma":
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), n - 1)
    else:
        raise ValueError(f"unknown arrival process {arrival!r}")
    return np.concatenate([[0.0], np.cumsum(gaps)])
