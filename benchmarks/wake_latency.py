"""How late this machine wakes an idle reader: the floor under any client's timestamps after a quiet spell.

    .venv/bin/python benchmarks/wake_latency.py [--gaps-ms 50,5,1] [-n 200] [--reader-cpu 0] [--writer-cpu 1]

A writer process pinned to one core sleeps ``gap`` and then sends its ``perf_counter_ns`` through a socket pair;
a reader pinned to the other core waits in ``epoll`` and stamps the moment it returns. The difference is the
wake-up latency: the kernel's wake-up of the reader, and on a virtual machine the host's rescheduling of a vCPU
that halted while it had nothing to do. It bounds what an event-loop client can stamp right after an idle spell:
a wave of requests whose first tokens come after a 50 ms TTFT (``shared/perf``'s accuracy phase) is read that
late, whatever the client does in user space, and so is the server's reading of a request that arrives after its
own quiet spell.

Prints one line a gap and, with ``--json FILE``, writes ``{"gaps": [{"gap_ms", "n", "p50_us", "p90_us", "p99_us",
"max_us"}, ...]}``. Percentiles are nearest-rank (sorted sample at ``floor(q·n)``). Linux only (``sched_setaffinity``,
``epoll``, ``fork``).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any


def measure(gap_s: float, n: int, reader_cpu: int = 0, writer_cpu: int = 1) -> dict[str, Any]:
    """``n`` wake-ups after ``gap_s`` of quiet each; returns the gap (ms), n and the latency percentiles (µs), None
    when no wake-up was measured (the writer could not run, e.g. ``writer_cpu`` does not exist: its end closes the
    socket, so the reader never waits for it)."""
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the writer
        code = 1
        try:
            os.sched_setaffinity(0, {writer_cpu})
            a.close()
            for _ in range(n):
                time.sleep(gap_s)
                b.send(struct.pack("q", time.perf_counter_ns()))
            code = 0
        finally:
            os._exit(code)
    b.close()
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {reader_cpu})
    lat: list[float] = []
    try:
        ep = select.epoll()
        ep.register(a.fileno(), select.EPOLLIN)
        while len(lat) < n:
            ep.poll()
            t = time.perf_counter_ns()
            data = a.recv(8 * n)
            if not data:
                break
            lat.extend((t - v) / 1e3 for (v,) in struct.iter_unpack("q", data))
        ep.close()
    finally:
        os.sched_setaffinity(0, before)
        a.close()
        os.waitpid(pid, 0)
    lat.sort()

    def q(x: float) -> float | None:
        return lat[min(len(lat) - 1, int(x * len(lat)))] if lat else None

    return {"gap_ms": gap_s * 1e3, "n": len(lat), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
            "max_us": q(1.0)}


def describe(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return f"after {r['gap_ms']:g} ms idle: no wake-up measured (the writer process could not run)"
    return (f"after {r['gap_ms']:g} ms idle: wake-up latency p50 {r['p50_us']:.0f} µs, p90 {r['p90_us']:.0f}, "
            f"p99 {r['p99_us']:.0f}, max {r['max_us']:.0f} (n={r['n']})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaps-ms", default="50,5,1", help="quiet spells before each wake-up, comma list (ms)")
    ap.add_argument("-n", type=int, default=200, help="wake-ups per gap")
    ap.add_argument("--reader-cpu", type=int, default=0)
    ap.add_argument("--writer-cpu", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        print("wake_latency.py: Linux only (sched_setaffinity, epoll)", file=sys.stderr)
        return 2
    try:
        gaps = [float(g) / 1e3 for g in args.gaps_ms.split(",") if g.strip()]
    except ValueError:
        print(f"--gaps-ms: not a comma list of numbers: {args.gaps_ms!r}", file=sys.stderr)
        return 2
    out = []
    for g in gaps:
        r = measure(g, args.n, args.reader_cpu, args.writer_cpu)
        print(describe(r), flush=True)
        out.append(r)
    if args.json:
        args.json.write_text(json.dumps({"gaps": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
