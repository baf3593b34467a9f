"""The client watching itself during a level: event-loop lag and CPU. Collect only.

``LoopLagMonitor`` arms a timer every ``interval_ms`` and records how late it fires (perf_counter
ns); a timer fires late by as long as the loop was busy with other work, and every chunk timestamp
and send of that moment was late by as much (the method of Node's ``monitorEventLoopDelay``). A
long stall also counts the timers that would have fired inside it, so a lag percentile is a share of
the level's time, not of the timers that happened to fire.
asyncio's timers round their wait up to whole milliseconds, so an idle loop shows up to ~1 ms.
The judgement is ``bench/pace_judge.py``; open-loop send lateness comes from the reply files
(``dispatched_ns − scheduled_ns``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from array import array
from typing import Any

import numpy as np

from inferencekit.stats import summarize

__all__ = ["LoopLagMonitor", "LAG_INTERVAL_MS", "process_identity"]

LAG_INTERVAL_MS = 5.0


def process_identity() -> dict[str, Any]:
    """This process: host, pid, and a clock anchor read back to back (wall ns, perf_counter ns), which maps
    its perf_counter stamps to wall-clock time: ``wall = perf + (anchor_wall_ns − anchor_perf_ns)``."""
    perf0 = time.perf_counter_ns()
    wall = time.time_ns()
    perf1 = time.perf_counter_ns()
    try:
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    except RuntimeError:
        loop = None
    return {"host": socket.gethostname(), "pid": os.getpid(), "event_loop": loop,
            "anchor": {"wall_ns": wall, "perf_ns": (perf0 + perf1) // 2, "read_ns": perf1 - perf0}}


RSS_EVERY = 20  # resident memory read every 20 ticks (100 ms)


def _rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class LoopLagMonitor:
    """Records timer lateness on the running loop between ``start()`` and ``stop()``.

    Cost: one timer callback per interval (200/s at 5 ms), a few µs each.
    """

    def __init__(self, interval_ms: float = LAG_INTERVAL_MS) -> None:
        self.interval_ns = int(interval_ms * 1e6)
        self.lags_ns = array("q")
        self._handle: asyncio.TimerHandle | None = None
        self._due_ns = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cpu0 = self._wall0 = 0.0
        self.cpu_s = self.wall_s = 0.0
        self.rss_start = self.rss_peak = 0
        self._ticks = 0

    def start(self) -> None:
        self.rss_start = self.rss_peak = _rss_bytes()
        self._ticks = 0
        self._loop = asyncio.get_running_loop()
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._arm()

    def _arm(self) -> None:
        assert self._loop is not None
        self._due_ns = time.perf_counter_ns() + self.interval_ns
        self._handle = self._loop.call_later(self.interval_ns / 1e9, self._fired)

    def _fired(self) -> None:
        lag = max(0, time.perf_counter_ns() - self._due_ns)
        self.lags_ns.append(lag)
        self._ticks += 1
        if self._ticks % RSS_EVERY == 0:
            self.rss_peak = max(self.rss_peak, _rss_bytes())
        # A stall of L shows as one late timer, but timers due every interval inside it would have been late by
        # L − interval, L − 2·interval, …: record those too, so the percentiles weigh the stall by its length
        # (HdrHistogram's correction for coordinated omission, recordValueWithExpectedInterval).
        missed = lag - self.interval_ns
        while missed > 0:
            self.lags_ns.append(missed)
            missed -= self.interval_ns
        self._arm()

    def stop(self) -> dict[str, Any]:
        """Stop and return the figures: ``{"interval_ms", "rss_start_mb", "rss_peak_mb", "loop_lag_ms": summary,
        "cpu_s", "wall_s", "busy"}`` (resident memory sampled every 100 ms)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.cpu_s = time.process_time() - self._cpu0
        self.wall_s = time.perf_counter() - self._wall0
        self.rss_peak = max(self.rss_peak, _rss_bytes())
        return {"interval_ms": self.interval_ns / 1e6,
                "rss_start_mb": round(self.rss_start / 2**20, 1), "rss_peak_mb": round(self.rss_peak / 2**20, 1),
                "loop_lag_ms": summarize(np.frombuffer(self.lags_ns, dtype=np.int64) / 1e6),
                "cpu_s": round(self.cpu_s, 4), "wall_s": round(self.wall_s, 4),
                "busy": round(self.cpu_s / self.wall_s, 4) if self.wall_s > 0 else None}
