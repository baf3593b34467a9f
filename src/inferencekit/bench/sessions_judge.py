"""A multi-turn run's figures: TTFT by turn index and by history length, and per-session totals (pure;
``data/conversations.py`` builds the sessions, ``bench/runner.py`` sends them).

Turn k carries the conversation so far (its k − 1 earlier user messages and the model's replies), so its prompt
grows with k and a prefix cache may serve the history: the figures by turn show whether it does (TTFT, and the
prompt tokens the server reports as cached: ``shared_prefix_judge.cached_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inferencekit.bench.shared_prefix_judge import cached_tokens
from inferencekit.stats import summarize

__all__ = ["HISTORY_BINS", "conversation_block"]

HISTORY_BINS = (0, 256, 512, 1024, 2048, 4096)  # prompt tokens: the lower edges of the by-history bins


def _ok(r: Mapping[str, Any]) -> bool:
    return r.get("status") == 200 and isinstance(r.get("ttft_ms"), (int, float))


def _prompt_tokens(r: Mapping[str, Any]) -> int | None:
    u = r.get("usage")
    v = u.get("prompt_tokens") if isinstance(u, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _planned(rows: Iterable[Mapping[str, Any]], turns: int) -> int:
    """A session's number of turns as its replies name it (``session_turns``), else ``turns``."""
    named = [r["session_turns"] for r in rows if isinstance(r.get("session_turns"), int)
             and not isinstance(r.get("session_turns"), bool) and r["session_turns"] > 0]
    return max(named) if named else turns


def conversation_block(replies: Iterable[Mapping[str, Any]], *, turns: int, think_time_s: float,
                       source: str = "synthetic") -> dict[str, Any] | None:
    """The record's ``conversations`` block from every load reply of the run; None when no reply names a session.

    Args:
        turns: ``--turns``: every synthetic session's turns; the cap on a ShareGPT session's (``source``
            ``sharegpt``), whose own number each reply names as ``session_turns`` (``bench/runner.py``).

    Returns:
        ``{"turns", "source", "think_time_s", "sessions": {"started", "completed", "turns_sent", "turns_planned"},
        "by_turn": {k: {"n", "completed", "ttft_ms", "prompt_tokens", "cached_tokens"}},
        "by_history": [{"prompt_tokens_from", "n", "ttft_ms"}]}``: ``ttft_ms`` and the token figures are
        ``stats.summarize`` of the completed replies; a session is completed when all its turns came back
        (status 200 with a TTFT; ``turns_planned`` sums the sessions' turns). ``by_history`` bins the completed
        replies by server-reported prompt tokens (``HISTORY_BINS``), non-empty bins only.
    """
    rows = [r for r in replies if isinstance(r.get("session_id"), str) and isinstance(r.get("turn"), int)]
    if not rows:
        return None
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_session.setdefault(str(r["session_id"]), []).append(r)
        by_turn.setdefault(int(r["turn"]), []).append(r)
    planned = {sid: _planned(rs, turns) for sid, rs in by_session.items()}
    done = sum(1 for sid, rs in by_session.items() if sum(map(_ok, rs)) == planned[sid])
    turn_block: dict[str, Any] = {}
    for k in sorted(by_turn):
        rs = by_turn[k]
        ok = [r for r in rs if _ok(r)]
        cached = [float(n) for r in ok if (n := cached_tokens(r)[0]) is not None]
        pts = [float(n) for r in ok if (n := _prompt_tokens(r)) is not None]
        turn_block[str(k)] = {"n": len(rs), "completed": len(ok),
                              "ttft_ms": summarize([float(r["ttft_ms"]) for r in ok]),
                              "prompt_tokens": summarize(pts), "cached_tokens": summarize(cached)}
    bins: list[dict[str, Any]] = []
    ok_all = [(n, float(r["ttft_ms"])) for r in rows if _ok(r) and (n := _prompt_tokens(r)) is not None]
    for i, lo in enumerate(HISTORY_BINS):
        hi = HISTORY_BINS[i + 1] if i + 1 < len(HISTORY_BINS) else None
        vals = [t for n, t in ok_all if n >= lo and (hi is None or n < hi)]
        if vals:
            bins.append({"prompt_tokens_from": lo, "prompt_tokens_below": hi, "n": len(vals),
                         "ttft_ms": summarize(vals)})
    return {"turns": turns, "source": source, "think_time_s": think_time_s,
            "sessions": {"started": len(by_session), "completed": done, "turns_sent": len(rows),
                         "turns_planned": sum(planned.values())},
            "by_turn": turn_block, "by_history": bins}
