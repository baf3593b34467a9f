"""The cheat proxy's state: recorded replies, the caches, the simulated prefix cache, and ``CheatSet``.

Pure like ``transforms.py`` (no I/O, no clock): the proxy records replies, sleeps and counts the
requests in flight; this module decides what to store, what a request may be answered with, how long
to wait and which JSON replies to break. ``CheatSet`` holds the chosen cheats in ``transforms.ORDER``
together with everything they remember between requests (the caches, order-dependent's previous
prompt hash, json-broken-under-load's seeded draws and counts).
"""

from __future__ import annotations

import difflib
import hashlib
import random
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from inferencekit.cheats.transforms import (
    CORRUPT_SHARE,
    DROPPED_FIELDS,
    JSON,
    MASK_BLOCKS,
    TRUNCATE_CHARS,
    UNDER_LOAD,
    AlterPiece,
    BreakJson,
    ClaimFixedLength,
    CutAtStop,
    PadPromptTokens,
    ReplyRewriter,
    ReplyTransform,
    ShiftLogprobs,
    UsageScale,
    VocabMask,
    _choices,
    _content_slot,
    _entries,
    _legacy,
    _rest_key,
    breaks_json,
    cache_key,
    deflate_tokens,
    drop_fields,
    inflate_tokens,
    is_greedy,
    length_limit,
    parse_cheats,
    prompt_sha256,
    prompt_text,
    spec_position,
    stop_strings,
    truncate_prompt,
    wants_json,
)

__all__ = ["CACHE_MAX_ENTRIES", "JSON_STATS", "NEAR_CACHE_MAX_ENTRIES", "NEAR_DUPLICATE_RATIO", "PREFILL_BASE_MS",
           "PREFILL_MS_PER_100_CHARS", "CheatSet", "NearDuplicateCache", "OutputCache", "PrefixCacheSim",
           "RecordedReply", "body_to_payloads", "payloads_to_body", "successful_stream"]

PREFILL_BASE_MS = 150.0          # prefix-cache-only: fixed cost of a prompt not seen before
PREFILL_MS_PER_100_CHARS = 2.0   # … plus this per 100 characters of prompt text
NEAR_DUPLICATE_RATIO = 0.9       # near-duplicate-cache: difflib.SequenceMatcher ratio that counts as a hit
CACHE_MAX_ENTRIES = 4096         # output-cache: oldest entries dropped past this
NEAR_CACHE_MAX_ENTRIES = 1024    # near-duplicate-cache: linear scan, so kept smaller
# json-broken-under-load's counts in ``CheatSet.stats``: JSON requests seen, those that arrived under load, and
# those whose reply is broken
JSON_STATS = ("json replies", "json replies under load", "json corrupted")


# --------------------------------------------------------------------------------------------------
# Stored replies and the caches


def _first_meta(obj: JSON) -> JSON:
    return {k: obj[k] for k in ("id", "created", "model", "system_fingerprint") if k in obj}


def payloads_to_body(kind: str, payloads: Sequence[bytes]) -> bytes:
    """A recorded stream → the equivalent non-streamed JSON body (for a cache hit in the other mode).

    Per choice: text (``message.content`` for chat, ``text`` for completions), reasoning, chat-shaped
    logprob entries or legacy lists concatenated, the last finish_reason; usage and timings from the
    stream; id, created, model from its first chunk.
    """
    meta: JSON = {}
    per: dict[int, JSON] = {}
    usage = timings = None
    for raw in payloads:
        if raw == b"[DONE]":
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        meta = meta or _first_meta(obj)
        usage = obj.get("usage") or usage
        timings = obj.get("timings") or timings
        for ch in _choices(obj):
            acc = per.setdefault(ch.get("index", 0), {"text": [], "reasoning": [], "entries": None, "legacy": None,
                                                      "finish": None})
            delta = ch.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            piece = delta.get("content") if kind == "chat" else ch.get("text")
            if isinstance(piece, str):
                acc["text"].append(piece)
            if isinstance(delta.get("reasoning_content"), str):
                acc["reasoning"].append(delta["reasoning_content"])
            entries = _entries(ch)
            if entries is not None:
                acc["entries"] = (acc["entries"] or []) + entries
            legacy = _legacy(ch)
            if legacy is not None:
                merged = acc["legacy"] or {}
                for k, v in legacy.items():
                    if isinstance(v, list):
                        merged[k] = merged.get(k, []) + v
                acc["legacy"] = merged
            if ch.get("finish_reason") is not None:
                acc["finish"] = ch["finish_reason"]
    choices = []
    for i in sorted(per):
        acc = per[i]
        lp = {"content": acc["entries"]} if acc["entries"] is not None else acc["legacy"]
        if kind == "chat":
            message: JSON = {"role": "assistant", "content": "".join(acc["text"])}
            if acc["reasoning"]:
                message["reasoning_content"] = "".join(acc["reasoning"])
            choice: JSON = {"finish_reason": acc["finish"], "index": i, "message": message}
            if lp is not None:
                choice["logprobs"] = lp
        else:
            choice = {"text": "".join(acc["text"]), "index": i, "logprobs": lp, "finish_reason": acc["finish"]}
        choices.append(choice)
    out: JSON = {"choices": choices, **meta, "object": "chat.completion" if kind == "chat" else "text_completion"}
    if usage is not None:
        out["usage"] = usage
    if timings is not None:
        out["timings"] = timings
    return orjson.dumps(out)


def body_to_payloads(kind: str, body: bytes) -> list[bytes]:
    """A recorded non-streamed JSON body → an equivalent stream of SSE payloads ending in ``[DONE]``.

    Chat: a role chunk, one content chunk per logprob entry (when the entries' tokens make up the
    content; else one chunk for the whole content), a finish chunk, then a usage chunk when the body
    had usage. Completions: text chunks likewise, the finish_reason and usage on the last chunk.
    """
    obj = orjson.loads(body)
    meta = _first_meta(obj)
    obj_name = "chat.completion.chunk" if kind == "chat" else "text_completion"
    out: list[bytes] = []

    def emit(choices: list[JSON], **extra: Any) -> None:
        out.append(orjson.dumps({"choices": choices, **meta, "object": obj_name, **extra}))

    for ch in _choices(obj):
        i = ch.get("index", 0)
        slot = _content_slot(ch)
        text = slot[0][slot[1]] if slot else ""
        entries = _entries(ch)
        pieces: list[tuple[str, JSON | None]]
        if entries and "".join(str(e.get("token", "")) for e in entries) == text:
            pieces = [(str(e.get("token", "")), {"content": [e]}) for e in entries]
        else:
            pieces = [(text, ch.get("logprobs") if isinstance(ch.get("logprobs"), dict) else None)] if text else []
        if kind == "chat":
            emit([{"finish_reason": None, "index": i, "delta": {"role": "assistant", "content": None}}])
            msg = ch.get("message")
            msg = msg if isinstance(msg, dict) else {}
            if isinstance(msg.get("reasoning_content"), str) and msg["reasoning_content"]:
                emit([{"finish_reason": None, "index": i, "delta": {"reasoning_content": msg["reasoning_content"]}}])
            for piece, lp in pieces:
                c: JSON = {"finish_reason": None, "index": i, "delta": {"content": piece}}
                if lp is not None:
                    c["logprobs"] = lp
                emit([c])
            emit([{"finish_reason": ch.get("finish_reason"), "index": i, "delta": {}}])
        else:
            for piece, lp in pieces:
                emit([{"text": piece, "index": i, "logprobs": lp, "finish_reason": None}])
            emit([{"text": "", "index": i, "logprobs": None, "finish_reason": ch.get("finish_reason")}])
    extra = {k: obj[k] for k in ("usage", "timings") if obj.get(k) is not None}
    if extra:
        emit([], **extra)
    out.append(b"[DONE]")
    return out


@dataclass(frozen=True, slots=True)
class RecordedReply:
    """A successful upstream reply, as received: SSE payloads (``[DONE]`` included) or a JSON body."""

    kind: str
    payloads: tuple[bytes, ...] | None = None
    body: bytes | None = None

    def as_payloads(self) -> list[bytes]:
        """The reply as SSE payloads (converted when it was recorded as a JSON body)."""
        return list(self.payloads) if self.payloads is not None else body_to_payloads(self.kind, self.body or b"{}")

    def as_body(self) -> bytes:
        """The reply as a JSON body (converted when it was recorded as a stream)."""
        return self.body if self.body is not None else payloads_to_body(self.kind, self.payloads or ())


def successful_stream(payloads: Sequence[bytes]) -> bool:
    """True when a recorded stream ended with ``[DONE]`` and no payload carried an ``error``."""
    if not payloads or payloads[-1] != b"[DONE]":
        return False
    for p in payloads:
        if b'"error"' in p:
            try:
                obj = orjson.loads(p)
            except orjson.JSONDecodeError:
                return False
            if isinstance(obj, dict) and obj.get("error") is not None:
                return False
    return True


class OutputCache:
    """output-cache: whole replies keyed by ``cache_key`` (the request without its stream fields).

    Imitates a response cache in front of the engine: an identical request is answered instantly
    from memory, all events in one write, with the first reply's ids and server timings. The caching
    gate must FAIL (a repeat costs nothing and carries the first reply's identity).
    Holds at most ``CACHE_MAX_ENTRIES`` replies (oldest dropped).
    """

    name: ClassVar[str] = "output-cache"

    def __init__(self, max_entries: int = CACHE_MAX_ENTRIES) -> None:
        self._store: OrderedDict[bytes, RecordedReply] = OrderedDict()
        self._max = max_entries

    def get(self, body: JSON) -> RecordedReply | None:
        """The stored reply for an identical request, else None."""
        return self._store.get(cache_key(body))

    def put(self, body: JSON, reply: RecordedReply) -> None:
        """Store ``reply`` (call only for successful replies)."""
        key = cache_key(body)
        self._store[key] = reply
        self._store.move_to_end(key)
        while len(self._store) > self._max:
            self._store.popitem(last=False)


class NearDuplicateCache:
    """near-duplicate-cache: the reply of the most similar earlier prompt, when similar enough.

    Two requests match when every field but the prompt and the stream fields is equal and
    ``difflib.SequenceMatcher(None, a, b).ratio() >= NEAR_DUPLICATE_RATIO`` on their
    ``prompt_text``; the best ratio wins (the earliest stored on a tie). Imitates a semantic /
    fuzzy cache: a prompt with a salt tag or one changed word gets an earlier prompt's answer. The
    caching gate must FAIL (salted repeats come back instantly and identical). Holds at most
    ``NEAR_CACHE_MAX_ENTRIES`` prompts (oldest dropped).
    """

    name: ClassVar[str] = "near-duplicate-cache"

    def __init__(self, threshold: float = NEAR_DUPLICATE_RATIO, max_entries: int = NEAR_CACHE_MAX_ENTRIES) -> None:
        self.threshold = threshold
        self._max = max_entries
        self._entries: OrderedDict[tuple[bytes, str], RecordedReply] = OrderedDict()

    def get(self, body: JSON) -> tuple[RecordedReply, float] | None:
        """``(reply, ratio)`` of the most similar stored prompt with ratio ≥ threshold, else None."""
        rest, text = _rest_key(body), prompt_text(body)
        best: tuple[RecordedReply, float] | None = None
        sm = difflib.SequenceMatcher(None)
        sm.set_seq2(text)
        for (r, old), reply in self._entries.items():
            if r != rest:
                continue
            if old == text:
                return reply, 1.0
            sm.set_seq1(old)
            floor = best[1] if best else self.threshold
            if sm.real_quick_ratio() < floor or sm.quick_ratio() < floor:
                continue
            ratio = sm.ratio()
            if ratio >= floor and (best is None or ratio > best[1]):
                best = (reply, ratio)
        return best

    def put(self, body: JSON, reply: RecordedReply) -> None:
        """Store ``reply`` under this request's prompt text and other fields."""
        key = (_rest_key(body), prompt_text(body))
        self._entries[key] = reply
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


class PrefixCacheSim:
    """prefix-cache-only: the honest baseline of a prefix cache, with a simulated prefill cost.

    Always real generation. A prompt text not seen before waits ``PREFILL_BASE_MS +
    PREFILL_MS_PER_100_CHARS · len(prompt_text) / 100`` ms before it is forwarded; a repeated prompt
    (same ``prompt_text``) is forwarded at once. So a repeat reaches its first token sooner while its
    output and decode speed are unchanged — what a KV prefix cache legitimately does. The caching gate
    must FAIL it with the prefix-cache reason (repeats start faster, nothing else differs), telling it
    apart from an output cache.
    """

    name: ClassVar[str] = "prefix-cache-only"

    def __init__(self, base_ms: float = PREFILL_BASE_MS) -> None:
        self._seen: set[bytes] = set()
        self.base_ms = base_ms  # the fixed part of the simulated saving (``--prefill-ms``)

    def delay_s(self, body: JSON) -> float:
        """Seconds to wait before forwarding this request (0 for a repeat); marks the prompt as seen."""
        text = prompt_text(body)
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        if key in self._seen:
            return 0.0
        self._seen.add(key)
        return (self.base_ms + PREFILL_MS_PER_100_CHARS * len(text) / 100) / 1000


# --------------------------------------------------------------------------------------------------
# The set of cheats one proxy runs


class CheatSet:
    """The chosen cheats with their state (caches, the previous prompt hash, seeded draws), in ``ORDER``.

    Args:
        names: cheat names as given to ``parse_cheats`` (comma lists allowed; empty or ``none``:
            pass-through).
        mask_block: vocab-mask's block, a key of ``MASK_BLOCKS`` (default hangul).
        truncate_chars: silent-truncate's N, in characters (≥ 2; default ``TRUNCATE_CHARS``, 2000).
        corrupt_share: json-broken-under-load's probability of breaking a JSON reply under load, in (0, 1]
            (default ``CORRUPT_SHARE``, 0.05).
        corrupt_seed: seeds json-broken-under-load's draws (``random.Random``), so a run can be repeated.
        prefill_ms: prefix-cache-only's fixed simulated prefill of a prompt not seen before, in ms (default
            ``PREFILL_BASE_MS``, 150; plus ``PREFILL_MS_PER_100_CHARS`` a hundred characters).
        rng: seed-ignored's source of fresh seeds (default: ``random.SystemRandom``).

    ``stats`` counts what json-broken-under-load decided (``JSON_STATS``, each from 0 when it is on; empty
    otherwise); the proxy reports them with its own.

    Raises:
        ValueError: as ``parse_cheats``, an unknown ``mask_block``, ``truncate_chars < 2``, a
            ``corrupt_share`` outside (0, 1] or a ``prefill_ms`` outside 0-60,000.
    """

    def __init__(self, names: Iterable[str], *, mask_block: str = "hangul", truncate_chars: int = TRUNCATE_CHARS,
                 corrupt_share: float = CORRUPT_SHARE, corrupt_seed: int = 0, prefill_ms: float = PREFILL_BASE_MS,
                 rng: random.Random | None = None) -> None:
        self.names = parse_cheats(names)
        if mask_block not in MASK_BLOCKS:
            raise ValueError(f"unknown mask block {mask_block!r}; known: {', '.join(MASK_BLOCKS)}")
        if truncate_chars < 2:
            raise ValueError(f"the truncation length must be ≥ 2 characters (half is kept at each end), "
                             f"got {truncate_chars}")
        if not 0.0 < corrupt_share <= 1.0:
            raise ValueError(f"the corrupt share must be in (0, 1], got {corrupt_share!r}")
        if not 0.0 <= prefill_ms <= 60_000.0:
            raise ValueError(f"the simulated prefill must be 0-60000 ms, got {prefill_ms!r}")
        self.mask_block = mask_block
        self.prefill_ms = prefill_ms
        self.truncate_chars = truncate_chars
        self.corrupt_share, self.corrupt_seed = corrupt_share, corrupt_seed
        self._rng = rng or random.SystemRandom()
        self._corrupt_rng = random.Random(corrupt_seed)
        on = set(self.names)
        self.output_cache = OutputCache() if "output-cache" in on else None
        self.near_cache = NearDuplicateCache() if "near-duplicate-cache" in on else None
        self.prefix_cache = PrefixCacheSim(prefill_ms) if "prefix-cache-only" in on else None
        self._mask = VocabMask(*MASK_BLOCKS[mask_block]) if "vocab-mask" in on else None
        self._prev_digest: bytes | None = None
        self.records = self.output_cache is not None or self.near_cache is not None
        self.stats: Counter[str] = Counter(dict.fromkeys(JSON_STATS, 0) if "json-broken-under-load" in on else {})

    def rewrite_request(self, body: JSON) -> JSON:
        """The body to forward: temperature-ignored (``temperature`` → 0), seed-ignored (any ``seed`` →
        a fresh random one), the dropping cheats (``DROPPED_FIELDS``: top-p-dropped ``top_p``,
        logit-bias-dropped ``logit_bias``, penalty-dropped the penalties, stop-ignored ``stop``,
        ignore-eos-dropped ``ignore_eos`` and ``min_tokens`` removed), silent-truncate
        (``truncate_prompt``), in that order.

        Returns ``body`` itself when nothing changes, else a new dict (``body`` is never modified).

        temperature-ignored imitates an engine that decodes greedily whatever it is asked (cheaper
        sampling, or a cache keyed without the sampling fields): the hidden_probes gate must FAIL
        (T=1 replies are all identical and equal the greedy one). seed-ignored imitates an engine
        that drops ``seed``: same-seed requests stop reproducing; hidden_probes reports that as a
        limitation, not a FAIL. The dropping cheats imitate an engine that accepts a field and
        silently samples with its default: the contract item of that field must FAIL (top_p,
        logit_bias, penalties, stop).
        """
        on = self.names
        out = body
        if "temperature-ignored" in on and body.get("temperature") != 0:
            out = {**out, "temperature": 0}
        if "seed-ignored" in on and "seed" in body:
            out = {**out, "seed": self._rng.randrange(2 ** 31)}
        for name, fields in DROPPED_FIELDS.items():
            if name in on:
                out = drop_fields(out, fields)
        if "silent-truncate" in on:
            out = truncate_prompt(out, self.truncate_chars)
        return out

    def _breaks_json(self, body: JSON, in_flight: int) -> bool:
        """json-broken-under-load's decision for a request as it arrives (``breaks_json``), counted in ``stats``."""
        if not wants_json(body):
            return False
        self.stats["json replies"] += 1
        if in_flight >= UNDER_LOAD:
            self.stats["json replies under load"] += 1
        broken = breaks_json(in_flight, self._corrupt_rng.random, self.corrupt_share)
        if broken:
            self.stats["json corrupted"] += 1
        return broken

    def reply_rewriter(self, original: JSON, forwarded: JSON, in_flight: int = 1) -> ReplyRewriter | None:
        """The reply rewrites for one request, or None when no reply cheat applies to it.

        Call once per request, in arrival order: order-dependent remembers this request's prompt hash
        for the next one, and json-broken-under-load draws from its seeded source.

        stop-ignored cuts the reply at the client's stop strings (``CutAtStop``), when it had any.
        spec-inexact imitates inexact speculative decoding (a draft token accepted without exact
        verification): on a greedy request (``is_greedy``) whose ``prompt_sha256`` has an even first
        byte, the piece at ``spec_position`` is altered (``AlterPiece``), streamed or not. The spec_exact
        gate must FAIL when it compares the proxy with the engine alone (greedy outputs must be equal).
        order-dependent imitates state carried between requests (batch composition, a cache, a
        mutable sampler): when the previous request's prompt hash has its low bit set (the digest read
        as a big-endian integer, i.e. the last byte's low bit), this reply's first content piece is
        altered, so the same request answers differently depending on what came before. The order
        gate must FAIL. json-broken-under-load breaks the reply (``BreakJson``) of a JSON request
        (``wants_json``) when ``breaks_json`` says so; prompt-tokens-inflated pads usage (``PadPromptTokens``).

        Args:
            original: the body as the client sent it (ignore-eos-dropped reads ``ignore_eos`` here,
                stop-ignored ``stop``, json-broken-under-load ``response_format``).
            forwarded: the body as forwarded (``rewrite_request``); spec-inexact reads its temperature.
            in_flight: generation requests forwarded upstream and not yet finished, this one included
                (the proxy counts them); json-broken-under-load breaks replies only from ``UNDER_LOAD`` on.
        """
        on = self.names
        ts: list[ReplyTransform] = []
        stops = stop_strings(original) if "stop-ignored" in on else ()
        if stops:
            ts.append(CutAtStop(stops))
        digest = prompt_sha256(forwarded) if ("spec-inexact" in on or "order-dependent" in on) else b""
        if "spec-inexact" in on and is_greedy(forwarded):
            k = spec_position(digest)
            if k is not None:
                ts.append(AlterPiece(k))
        if "order-dependent" in on:
            prev, self._prev_digest = self._prev_digest, digest
            if prev is not None and prev[-1] & 1:
                ts.append(AlterPiece(1))
        if self._mask is not None:
            ts.append(self._mask)
        if "logprobs-unnormalised" in on:
            ts.append(ShiftLogprobs())
        if "ignore-eos-dropped" in on and original.get("ignore_eos") is True:
            ts.append(ClaimFixedLength(length_limit(original)))
        if "json-broken-under-load" in on and self._breaks_json(original, in_flight):
            ts.append(BreakJson())
        if "usage-inflate" in on:
            ts.append(UsageScale(inflate_tokens))
        if "usage-deflate" in on:
            ts.append(UsageScale(deflate_tokens))
        if "prompt-tokens-inflated" in on:
            ts.append(PadPromptTokens())
        return ReplyRewriter(ts) if ts else None

    def lookup(self, body: JSON) -> tuple[str, RecordedReply] | None:
        """``(cheat name, stored reply)`` when output-cache or near-duplicate-cache can answer ``body``
        (the client's body), else None."""
        if self.output_cache is not None:
            hit = self.output_cache.get(body)
            if hit is not None:
                return self.output_cache.name, hit
        if self.near_cache is not None:
            near = self.near_cache.get(body)
            if near is not None:
                return self.near_cache.name, near[0]
        return None

    def record(self, body: JSON, reply: RecordedReply) -> None:
        """Store a successful upstream reply for ``body`` (the client's body) in the caches that are on."""
        if self.output_cache is not None:
            self.output_cache.put(body, reply)
        if self.near_cache is not None:
            self.near_cache.put(body, reply)

    def prefill_delay_s(self, body: JSON) -> float:
        """prefix-cache-only's wait before forwarding ``body``, in seconds (0 when it is off)."""
        return self.prefix_cache.delay_s(body) if self.prefix_cache is not None else 0.0
