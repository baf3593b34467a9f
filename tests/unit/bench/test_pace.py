"""The client's self-check: judge_client_pace on recorded figures, clock_skew, and LoopLagMonitor for real."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferencekit.bench.pace import LoopLagMonitor, process_identity
from inferencekit.bench.pace_judge import LAG_FLOOR_MS, LATE_FLOOR_MS, judge_client_pace
from inferencekit.bench.workers import clock_skew
from inferencekit.stats import summarize


def proc(p99: float | None, *, worker: int | None = None, host: str = "hostA", pid: int = 4242,
         mx: float | None = None) -> dict:
    """One process as ``client.json`` lists it (figures in ms)."""
    lag = summarize([]) if p99 is None else {**summarize([0.5, 1.0]), "n": 200, "p99": p99,
                                              "max": mx if mx is not None else p99}
    out = {"host": host, "pid": pid, "event_loop": "uvloop",
           "anchor": {"wall_ns": 1_700_000_000_000_000_000, "perf_ns": 5_000_000, "read_ns": 300},
           "loop": {"interval_ms": 5.0, "loop_lag_ms": lag, "cpu_s": 0.2, "wall_s": 1.0, "busy": 0.2}}
    if worker is not None:
        out["worker"] = worker
    return out


def reply(ttft: float, itl: list[float], *, sched_ns: int | None = None, late_ms: float = 0.0, status: int = 200,
          error: str | None = None) -> dict:
    r = {"status": status, "ttft_ms": ttft, "itl_ms": itl}
    if error:
        r["error"] = error
    if sched_ns is not None:
        r["scheduled_ns"] = sched_ns
        r["dispatched_ns"] = sched_ns + int(late_ms * 1e6)
    return r


REPLIES = [reply(100.0, [20.0, 20.0, 20.0]), reply(120.0, [20.0, 20.0])]  # median TTFT 110 ms, median ITL 20 ms


# ------------------------------------------------------------------------------------------ judge_client_pace

def test_valid_when_lag_p99_is_under_the_limit():
    v = judge_client_pace([proc(1.2)], REPLIES)
    assert v["valid"] is True and v["reasons"] == []
    assert v["reference"] == "median ITL" and v["reference_ms"] == 20.0
    assert v["lag_limit_ms"] == LAG_FLOOR_MS  # max(5, 0.25 × 20) = 5
    assert v["loop_lag_p99_ms"] == 1.2 and v["processes"] == 1


def test_invalid_over_the_limit_names_the_process_and_the_figures():
    v = judge_client_pace([proc(12.5, worker=1, host="node7", pid=99, mx=30.0)], REPLIES)
    assert v["valid"] is False
    (reason,) = v["reasons"]
    assert reason.startswith("worker 1 (node7 pid 99): event-loop lag p99 12.5 ms (max 30.0 ms) > 5.0 ms")
    assert "median ITL 20.0 ms" in reason


def test_limit_is_the_larger_of_the_floor_and_a_fraction_of_the_finer_median():
    slow = [reply(400.0, [100.0, 100.0]), reply(600.0, [100.0])]  # median TTFT 500, median ITL 100 → ref 100
    v = judge_client_pace([proc(24.0)], slow)
    assert v["reference"] == "median ITL" and v["lag_limit_ms"] == 25.0 and v["valid"] is True
    assert judge_client_pace([proc(26.0)], slow)["valid"] is False
    ttft_finer = [reply(40.0, [200.0]), reply(40.0, [200.0])]  # TTFT 40 < ITL 200: limit max(5, 10) = 10
    v = judge_client_pace([proc(9.0)], ttft_finer)
    assert v["reference"] == "median TTFT" and v["reference_ms"] == 40.0 and v["lag_limit_ms"] == 10.0
    assert v["valid"] is True
    assert judge_client_pace([proc(11.0)], ttft_finer)["valid"] is False


def test_failed_replies_are_not_the_reference():
    rs = [*REPLIES, reply(1.0, [0.1], status=0, error="connection failed: refused"), reply(1.0, [0.1], status=500)]
    assert judge_client_pace([proc(1.0)], rs)["reference_ms"] == 20.0
    none_ok = judge_client_pace([proc(4.0)], [reply(1.0, [0.1], status=0, error="x")])
    assert none_ok["reference"] == "no completed reply" and none_ok["lag_limit_ms"] == LAG_FLOOR_MS
    assert none_ok["valid"] is True


def test_open_loop_lateness_under_and_over_the_limit():
    rate = 40.0  # mean gap 25 ms: the late limit is max(5, 10% of 25) = 5 ms
    base = 10_000_000_000
    on_time = [reply(100.0, [20.0], sched_ns=base + i * 25_000_000, late_ms=0.3) for i in range(50)]
    v = judge_client_pace([proc(1.0)], on_time, rate=rate)
    assert v["valid"] is True and v["late_limit_ms"] == LATE_FLOOR_MS
    assert v["send_late_ms"]["n"] == 50 and v["send_late_ms"]["p99"] == pytest.approx(0.3)

    late = on_time[:45] + [reply(100.0, [20.0], sched_ns=base, late_ms=40.0) for _ in range(5)]
    v = judge_client_pace([proc(1.0)], late, rate=rate)
    assert v["valid"] is False
    (reason,) = v["reasons"]
    assert reason.startswith("sends were late against the schedule: p99 40.0 ms (max 40.0 ms) > 5.0 ms")
    assert "mean gap 25.0 ms at 40 req/s" in reason

    slow_rate = 0.5  # mean gap 2000 ms: limit 200 ms, so 40 ms late is fine
    v = judge_client_pace([proc(1.0)], late, rate=slow_rate)
    assert v["late_limit_ms"] == 200.0 and v["valid"] is True


def test_open_loop_lateness_alone_is_enough_to_judge():
    rs = [reply(100.0, [20.0], sched_ns=1_000_000, late_ms=1.0)]
    v = judge_client_pace([], rs, rate=10.0)  # no client.json (no lag figures), but send times were recorded
    assert v["valid"] is True and v["loop_lag_p99_ms"] is None and v["processes"] == 0


def test_nothing_recorded_is_valid_none():
    v = judge_client_pace([], REPLIES)
    assert v["valid"] is None and v["reasons"] == [] and v["loop_lag_p99_ms"] is None
    # a process without lag figures, open loop without send stamps: still nothing to judge by
    v = judge_client_pace([proc(None)], REPLIES, rate=8.0)
    assert v["valid"] is None and v["send_late_ms"]["n"] == 0


def test_several_processes_one_bad_makes_the_level_invalid():
    procs = [proc(0.8, worker=0, pid=1), proc(9.0, worker=1, pid=2), proc(1.1, worker=2, pid=3)]
    v = judge_client_pace(procs, REPLIES)
    assert v["valid"] is False and v["processes"] == 3 and v["loop_lag_p99_ms"] == 9.0
    (reason,) = v["reasons"]
    assert reason.startswith("worker 1 (hostA pid 2): event-loop lag p99 9.0 ms")
    two_bad = judge_client_pace([proc(7.0, worker=0), proc(8.0, worker=1)], REPLIES)
    assert [r.split(":")[0] for r in two_bad["reasons"]] == ["worker 0 (hostA pid 4242)", "worker 1 (hostA pid 4242)"]


# ---------------------------------------------------------------------------------------------------- clock_skew

def test_clock_skew_single_round_trip():
    s = clock_skew([(1_000, 5_600, 1_200)])  # parent asks at 1000, answer back at 1200, worker read 5600
    assert s["offsets_ns"] == [5_600 - 1_100]
    assert s["bounds_ns"] == [100]
    assert s["skew_bound_ms"] == pytest.approx(100 / 1e6)  # one process: its own bound


def test_clock_skew_pairs_take_the_worst_pair():
    rounds = [(0, 150, 100),       # offset 150 − 50 = 100, bound 50
              (200, 220, 260),     # offset 220 − 230 = −10, bound 30
              (300, 2_320, 340)]   # offset 2320 − 320 = 2000, bound 20
    s = clock_skew(rounds)
    assert s["offsets_ns"] == [100, -10, 2_000]
    assert s["bounds_ns"] == [50, 30, 20]
    # pairs: |100+10|+80 = 190, |100−2000|+70 = 1970, |−10−2000|+50 = 2060
    assert s["skew_bound_ms"] == pytest.approx(2_060 / 1e6)
    assert "round trip" in s["method"]


def test_clock_skew_of_nothing_is_zero():
    assert clock_skew([])["skew_bound_ms"] == 0


# ------------------------------------------------------------------------------------- LoopLagMonitor, for real

def test_loop_lag_monitor_sees_an_injected_block_and_the_level_is_judged_invalid():
    async def program() -> dict:
        monitor = LoopLagMonitor()
        monitor.start()
        await asyncio.sleep(0.03)  # a few ordinary timer rounds
        blocked = asyncio.get_running_loop().create_future()

        def block() -> None:
            time.sleep(0.2)  # the injected lag: the loop can run nothing else for 200 ms
            blocked.set_result(None)

        asyncio.get_running_loop().call_soon(block)
        await blocked
        await asyncio.sleep(0.03)  # the late timer fires and the monitor re-arms
        return {**process_identity(), "loop": monitor.stop()}

    figures = asyncio.run(program())
    lag = figures["loop"]["loop_lag_ms"]
    assert lag["n"] >= 3
    assert lag["max"] >= 150.0, lag  # a 200 ms block shows as at least 150 ms of lag
    assert figures["loop"]["interval_ms"] == 5.0 and figures["loop"]["wall_s"] >= 0.2
    assert figures["anchor"]["read_ns"] >= 0 and isinstance(figures["pid"], int)

    replies = [reply(30.0, [20.0, 20.0, 20.0]) for _ in range(4)]  # median ITL 20 ms: lag limit 5 ms
    v = judge_client_pace([figures], replies)
    assert v["valid"] is False and v["lag_limit_ms"] == 5.0
    assert v["loop_lag_p99_ms"] > 5.0
    assert "event-loop lag p99" in v["reasons"][0]


def test_memory_per_stream_is_the_processes_growth_over_the_streams():
    a, b = proc(1.0, worker=0), proc(1.0, worker=1, pid=4243)
    a["loop"].update(rss_start_mb=100.0, rss_peak_mb=130.0)
    b["loop"].update(rss_start_mb=90.0, rss_peak_mb=100.0)
    got = judge_client_pace([a, b], REPLIES, streams=512)
    assert got["rss_growth_mb"] == 40.0 and got["kib_per_stream"] == 80.0
    assert "kib_per_stream" not in judge_client_pace([a, b], REPLIES)  # no stream count, no figure


def test_a_level_too_short_for_the_timer_is_not_judged():
    short = proc(50.0)
    short["loop"]["loop_lag_ms"]["n"] = 3  # ~15 ms of level: three timer samples
    got = judge_client_pace([short], REPLIES)
    assert got["valid"] is None and got["reasons"] == []


def test_the_gc_is_off_for_the_level_and_the_valve_collects_garbage_that_piles_up():
    import gc
    import weakref

    class Node:
        pass

    async def program() -> tuple[dict, bool, bool, bool]:
        monitor = LoopLagMonitor(gc_valve=2_000)
        monitor.start()
        off = not gc.isenabled()
        first = Node()
        first.me = first  # a cycle: only the cyclic GC frees it
        dead = weakref.ref(first)
        del first
        for _ in range(10_000):  # cyclic garbage, as a failure path's exception and traceback leave it
            n = Node()
            n.me = n
        del n
        await asyncio.sleep(0.05)  # ticks: the count is past the valve, so the next tick collects
        gone = dead() is None
        return monitor.stop(), off, gone, gc.isenabled()

    was = gc.isenabled()
    gc.enable()
    try:
        loop, off, gone, on_after = asyncio.run(program())
    finally:
        gc.enable() if was else gc.disable()
    assert off and on_after  # automatic collections stop for the level and come back after it
    assert gone and loop["gc"]["collections"] >= 1 and loop["gc"]["collection_ms"] > 0
    assert loop["gc"]["automatic"] is False and loop["gc"]["valve"] == 2_000
    assert gc.get_freeze_count() == 0  # what was frozen for the level is back in the GC's reach


def test_a_level_that_makes_no_garbage_runs_no_collection():
    async def program() -> dict:
        monitor = LoopLagMonitor()
        monitor.start()
        for _ in range(5_000):  # short-lived objects, freed by their reference counts
            [object() for _ in range(3)]
        await asyncio.sleep(0.03)
        return monitor.stop()

    assert asyncio.run(program())["gc"]["collections"] == 0
