"""Cut a streamed body at its network reads: the ``(t_ns, bytes)`` chunks a ``readany()`` loop would keep.

The streaming path (api/h1.py) stamps each read as it arrives and keeps the reply's bytes whole; what each read
contributed to the body is known afterwards (``h1.unframe``: per read, the body length once it was taken in).
``cut`` turns that into the chunk list of the reply file, off the event loop (``Exchange.settle``).
"""

from __future__ import annotations

from array import array

__all__ = ["cut"]


def cut(body: bytes, start: int, times: array[int], offsets: array[int]) -> list[tuple[int, bytes]]:
    """The body bytes parsed after offset ``start``, cut at ``offsets`` and stamped with ``times``.

    Args:
        body: the body bytes from offset ``start`` on.
        start: the body offset ``body`` starts at (0 for a whole body).
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
