"""A shared-prefix run's figures: TTFT of each prefix group's first request against its later ones, and the
tokens the server says it served from its cache (pure; ``data/shared_prefix.py`` builds the prompts).

The first request of a group finds its prefix cold; later ones may find it in a prefix cache, which is the reuse
the workload intends. "First" is the earliest send of the group over the whole run (``sent_ns``, the sending
process's ``perf_counter_ns``: one client process; with ``--workers`` the processes' clocks differ and the order is
per process, stated in the block), so a prefix already warm from an earlier level counts as later there.

Cached tokens, per reply: ``usage.prompt_tokens_details.cached_tokens`` (the OpenAI field; vLLM and llama-server
fill it), else llama-server's ``timings.cache_n``. Neither is proof of anything on its own (a server's usage is
untrusted); TTFT is the measured effect, the counts say why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inferencekit.stats import summarize

__all__ = ["cached_tokens", "shared_prefix_block"]


def cached_tokens(reply: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The prompt tokens the server reports as served from its cache, and the field that said so; (None, None)
    when the reply reports none (or reports them with a wrong type)."""
    usage = reply.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    v = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v, "usage.prompt_tokens_details.cached_tokens"
    timings = reply.get("server_timings")
    v = timings.get("cache_n") if isinstance(timings, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v, "timings.cache_n"
    return None, None


def shared_prefix_block(replies: Iterable[Mapping[str, Any]], *, tokens: int, groups: int,
                        warmup: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
    """The record's ``shared_prefix`` block from every load reply of the run; None when no reply names a group.

    Args:
        replies: the load replies of every level (each with ``shared_prefix_id``, ``sent_ns``, ``status``,
            ``ttft_ms``, ``usage``, ``server_timings``).
        tokens, groups: ``--shared-prefix-tokens`` and ``--prefix-groups``, recorded beside the figures.
        warmup: the run's warm-up replies: a group a warm-up request opened is warm before the load, so its load
            requests are all "later" (counted in ``groups_warmed_up``); warm-up figures are in no side.

    Returns:
        ``{"tokens", "groups", "groups_seen", "groups_warmed_up", "first": {"n", "ttft_ms", "cached_tokens"},
        "later": {...},
        "ttft_p50_ratio_later_over_first", "cached_source", "order"}``: ``ttft_ms`` and ``cached_tokens`` are
        ``stats.summarize`` of the completed replies (status 200 with a TTFT); the ratio is None unless both sides
        have a median.
    """
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for r in replies:
        g = r.get("shared_prefix_id")
        if isinstance(g, str) and isinstance(r.get("sent_ns"), int):
            by_group.setdefault(g, []).append(r)
    if not by_group:
        return None
    warm = {r.get("shared_prefix_id"): r["sent_ns"] for r in warmup if isinstance(r.get("sent_ns"), int)}
    sides: dict[str, list[Mapping[str, Any]]] = {"first": [], "later": []}
    warmed = 0
    for g, rs in by_group.items():
        rs = sorted(rs, key=lambda r: r["sent_ns"])
        if g in warm and warm[g] < rs[0]["sent_ns"]:
            warmed += 1
            sides["later"].extend(rs)
            continue
        sides["first"].append(rs[0])
        sides["later"].extend(rs[1:])
    sources: set[str] = set()
    out: dict[str, Any] = {"tokens": tokens, "groups": groups, "groups_seen": len(by_group),
                           "groups_warmed_up": warmed}
    for side, rs in sides.items():
        done = [r for r in rs if r.get("status") == 200 and isinstance(r.get("ttft_ms"), (int, float))]
        cached = []
        for r in done:
            n, src = cached_tokens(r)
            if n is not None and src is not None:
                cached.append(float(n))
                sources.add(src)
        out[side] = {"n": len(rs), "completed": len(done), "ttft_ms": summarize([float(r["ttft_ms"]) for r in done]),
                     "cached_tokens": summarize(cached)}
    first, later = out["first"]["ttft_ms"]["p50"], out["later"]["ttft_ms"]["p50"]
    out["ttft_p50_ratio_later_over_first"] = later / first if first and later is not None else None
    out["cached_source"] = sorted(sources)
    out["order"] = ("first = each group's earliest send over the run (sent_ns of the sending process); a group a "
                    "warm-up request opened has no first request in the load")
    return out
