"""Stamp a streamed reply where its bytes arrive, without waking the request's task per chunk.

Reading a stream with aiohttp's ``readany()`` costs, per network read, a future resolved, the
request's task woken, the reader's buffer walked chunk by chunk and flow control re-checked: about
half of the client's CPU per streamed chunk (py-spy on the synthetic server, c=64). ``StreamTap``
takes that away: for the length of one reply it sits between the socket transport and aiohttp's
protocol (``transport.set_protocol``, public asyncio API), stamps each read with
``time.perf_counter_ns()`` as the loop hands it over, passes it on to aiohttp unchanged, and notes
how many body bytes aiohttp had parsed after it (``StreamReader.total_bytes``). The task only waits
for the end (``wait_eof``); the body is then read once and cut at the noted offsets into the same
``(t_ns, bytes)`` chunks a ``readany()`` loop would have produced, stamped earlier (at arrival, not
when the task got to run). HTTP chunked framing and any Content-Encoding stay aiohttp's to decode.

aiohttp's reader pauses the socket once it holds ``2 × read_bufsize`` bytes; the tap's client sets
``read_bufsize`` far above any reply (``Client``), so nothing is read late.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from typing import Any

__all__ = ["StreamTap", "cut"]


class StreamTap(asyncio.Protocol):
    """Installed on ``transport`` in front of ``protocol`` (aiohttp's); ``remove()`` puts it back."""

    def __init__(self, transport: Any, protocol: Any, stream: Any, clock: Callable[[], int]) -> None:
        self.transport, self.protocol, self.stream, self.clock = transport, protocol, stream, clock
        self.times = array("q")
        self.offsets = array("q")
        self._forward = protocol.data_received
        transport.set_protocol(self)

    def data_received(self, data: bytes) -> None:
        t = self.clock()
        self._forward(data)
        self.times.append(t)
        self.offsets.append(self.stream.total_bytes)

    def eof_received(self) -> bool | None:
        keep_open: bool | None = self.protocol.eof_received()
        return keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()

    def remove(self) -> None:
        if self.transport.get_protocol() is self:
            self.transport.set_protocol(self.protocol)


def cut(body: bytes, start: int, times: array[int], offsets: array[int]) -> list[tuple[int, bytes]]:
    """The body bytes parsed after offset ``start``, cut at ``offsets`` and stamped with ``times``.

    Args:
        body: the body bytes from ``start`` on (what the reader held after the tap was installed).
        start: ``total_bytes`` when the tap was installed.
        times, offsets: per network read, its arrival time and ``total_bytes`` after it (non-decreasing).

    Returns:
        ``[(t_ns, bytes), ...]`` for the reads that delivered body bytes (a read holding only framing, or an
        incomplete chunk header, delivers none and is skipped; its bytes count for the next one).
    """
    out: list[tuple[int, bytes]] = []
    prev = start
    for t, off in zip(times, offsets):
        if off > prev:
            out.append((t, body[prev - start:off - start]))
            prev = off
    if start + len(body) > prev:  # bytes past the last read's offset: cannot happen with aiohttp; kept, not lost
        out.append((out[-1][0] if out else (times[-1] if len(times) else 0), body[prev - start:]))
    return out
