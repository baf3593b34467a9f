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


def test_a_closed_level_sends_at_most_a_turns_worth_between_two_looks_at_the_network():
    from collections import Counter

    from inferencekit.bench.runner import SendTurns

    async def program() -> list[int]:
        turns = SendTurns(per_turn=4)
        loop = asyncio.get_running_loop()
        tick = [0]

        def ticker() -> None:  # runs once a turn of the loop (call_soon: the next turn, after the network)
            tick[0] += 1
            if tick[0] < 100:
                loop.call_soon(ticker)

        loop.call_soon(ticker)
        sent: list[int] = []

        async def stream() -> None:
            await turns.wait()
            sent.append(tick[0])

        await asyncio.gather(*(stream() for _ in range(10)))
        return sent

    sent = asyncio.run(program())
    per_turn = Counter(sent)
    assert len(sent) == 10 and max(per_turn.values()) == 4 and len(per_turn) == 3  # 4 + 4 + 2, in three turns


def test_a_cancelled_wait_for_a_turn_is_passed_over_and_the_rest_all_go():
    from inferencekit.bench.runner import SendTurns

    async def program() -> list[int]:
        turns = SendTurns(per_turn=2)
        sent: list[int] = []

        async def stream(i: int) -> None:
            await turns.wait()
            sent.append(i)

        tasks = [asyncio.create_task(stream(i)) for i in range(6)]
        await asyncio.sleep(0)  # 0 and 1 go in the first turn; 2-5 wait
        tasks[2].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return sent

    assert asyncio.run(program()) == [0, 1, 3, 4, 5]
