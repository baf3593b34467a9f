"""Server-sent events: raw timed chunks → timed ``data:`` payloads. Pure; runs after the stream.

The stream loop keeps each network chunk with the ``perf_counter_ns`` time it arrived and does
nothing else (docs/design.md principle 5). This module splits those chunks into SSE events following
the WHATWG EventSource rules that matter here: lines end in LF, CRLF or CR; a line starting with
``:`` is a comment; ``data:`` lines of one event are joined with LF; a blank line dispatches the
event. An event's time is the arrival time of the chunk that completed it (its blank line), so a
line split across chunks gets the later time. A payload left without its blank line at the end of
the stream is still returned (servers that close early), flagged by ``unterminated``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["split_events"]


_FIELDS = (b"data", b"event", b"id", b"retry")  # the SSE fields; any other line is not SSE at all


def split_events(chunks: Iterable[tuple[int, bytes]], foreign: list[bytes] | None = None
                 ) -> tuple[list[tuple[int, str]], bool]:
    """Timed chunks → timed event payloads.

    Args:
        chunks: ``(t_ns, raw bytes)`` in arrival order; ``t_ns`` in any consistent unit.
        foreign: when given, every non-empty line that is neither a comment nor an SSE field (``data``,
            ``event``, ``id``, ``retry``) is appended to it: EventSource ignores such lines, a client must not
            (a server writing bare JSON lines would otherwise look like one that sent nothing).

    Returns:
        ``(events, unterminated)``: ``events`` is a list of ``(t_ns, payload)`` where payload is
        the event's data (``[DONE]`` included, comments and non-data fields dropped);
        ``unterminated`` is True when the stream ended inside an event or a line.
    """
    events: list[tuple[int, str]] = []
    data: list[bytes] = []
    pending = b""
    last_t = 0
    for t, chunk in chunks:
        last_t = t
        buf = pending + chunk if pending else chunk
        if b"\r" in buf:
            # CRLF → LF, then a lone CR (old Mac line end) → LF; a CR at the very end may be half
            # of a CRLF split across chunks, so keep it pending.
            tail_cr = buf.endswith(b"\r")
            body = buf[:-1] if tail_cr else buf
            body = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = body.split(b"\n")
            pending = lines.pop() + (b"\r" if tail_cr else b"")
        else:
            lines = buf.split(b"\n")
            pending = lines.pop()
        for line in lines:
            if not line:
                if data:
                    events.append((t, b"\n".join(data).decode("utf-8", "replace")))
                    data = []
            elif line[0] == 58:  # ":" comment / keep-alive
                continue
            else:
                name, sep, value = line.partition(b":")
                if name == b"data":
                    data.append(value[1:] if value[:1] == b" " else value)
                elif foreign is not None and name not in _FIELDS:
                    foreign.append(line)
    unterminated = bool(pending.strip(b"\r")) or bool(data)
    rest = pending.rstrip(b"\r")
    if rest and rest[0] != 58:
        name, sep, value = rest.partition(b":")
        if name == b"data":
            data.append(value[1:] if value[:1] == b" " else value)
        elif foreign is not None and name not in _FIELDS:
            foreign.append(rest)
    if data:
        events.append((last_t, b"\n".join(data).decode("utf-8", "replace")))
    return events, unterminated
