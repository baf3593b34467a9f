"""The open-loop send waits until its scheduled moment, even when the loop's timer fires early."""

from __future__ import annotations

import asyncio
import time

from inferencekit.bench.runner import sleep_until_ns


def test_an_early_timer_does_not_send_before_the_schedule():
    woke: list[int] = []

    async def early_sleep(delay_s: float) -> None:
        # a timer with millisecond granularity: it fires up to 2 ms before the delay asked for
        await asyncio.sleep(max(0.0, delay_s - 0.002))
        woke.append(time.perf_counter_ns())

    async def go() -> list[int]:
        late = []
        for _ in range(5):
            due = time.perf_counter_ns() + 5_000_000
            await sleep_until_ns(due, early_sleep)
            late.append(time.perf_counter_ns() - due)
        return late

    late = asyncio.run(go())
    assert all(d >= 0 for d in late), late
    assert len(woke) > 5  # the early wake-ups were slept again, not taken as the moment


def test_a_moment_already_past_returns_at_once_without_sleeping():
    calls: list[float] = []

    async def sleep(delay_s: float) -> None:
        calls.append(delay_s)

    asyncio.run(sleep_until_ns(time.perf_counter_ns() - 1_000_000, sleep))
    assert calls == []
