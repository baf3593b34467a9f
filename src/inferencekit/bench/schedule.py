"""Open-loop arrival processes: when is the next send? Pure and seeded.

- ``constant``: every 1/rate seconds;
- ``poisson``: exponential gaps with mean 1/rate (a Poisson process);
- ``gamma``: gamma gaps with shape = burstiness and scale = 1/(rate·burstiness), so the mean gap is
  still 1/rate; burstiness < 1 is burstier than Poisson, > 1 more regular (vLLM ``bench serve``'s
  ``--burstiness``; burstiness 1 is Poisson).
"""

from __future__ import annotations

import numpy as np

__all__ = ["arrival_offsets_s", "ramp_offsets_s", "ramp_rates"]


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


def ramp_rates(n: int, strategy: str, start_rps: float, end_rps: float) -> np.ndarray:
    """The request rate (requests/s) each of ``n`` requests is sent at under a ramp-up, shape [n]: vLLM ``bench
    serve``'s ``get_current_request_rate`` (vllm/benchmarks/serve.py), progress i/(n-1) from ``start_rps`` to
    ``end_rps``, linear or exponential (geometric).

    Raises:
        ValueError: an unknown strategy, or a rate ≤ 0.
    """
    if start_rps <= 0 or end_rps <= 0:
        raise ValueError("ramp-up rates must be > 0")
    progress = np.arange(n) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    if strategy == "exponential":
        return start_rps * (end_rps / start_rps) ** progress
    raise ValueError(f"unknown ramp-up strategy {strategy!r}")


def ramp_offsets_s(n: int, strategy: str, start_rps: float, end_rps: float, arrival: str, *,
                   burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """Send times in seconds after the level starts under a ramp-up, shape [n], first at 0: the gap before request
    i (i ≥ 1) is drawn by ``arrival`` at request i's own rate (``ramp_rates``), as vLLM draws each delay at the
    current rate. vLLM also delays the first request by one gap; here, as for every open-loop level, the first is
    sent at 0.

    Raises:
        ValueError: an unknown strategy or arrival process, a rate ≤ 0 or burstiness ≤ 0.
    """
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    if n <= 0:
        return np.zeros(0)
    rates = ramp_rates(n, strategy, start_rps, end_rps)[1:]
    rng = np.random.default_rng(seed)
    if arrival == "constant":
        gaps = 1.0 / rates
    elif arrival == "poisson":
        gaps = rng.exponential(1.0, n - 1) / rates
    elif arrival == "gamma":
        gaps = rng.gamma(burstiness, 1.0, n - 1) / (rates * burstiness)
    else:
        raise ValueError(f"unknown arrival process {arrival!r}")
    return np.concatenate([[0.0], np.cumsum(gaps)])
