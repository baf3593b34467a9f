"""The cheats of ``inferencekit cheat-proxy``: pure transformations of requests and replies.

Each cheat imitates one way a serving stack can do less (or other) work than it claims, so that the
gates can be seen to FAIL on a known-bad engine. Nothing here does I/O: the proxy (``proxy.py``)
reads and writes, and calls these functions on request bodies (dicts), on SSE ``data:`` payloads
(bytes, one event each) and on non-streamed JSON bodies. The cheats that keep state between requests
(the caches, the simulated prefix cache, json-broken-under-load's draws) and ``CheatSet``, which holds
the chosen cheats, are in ``state.py``.

Several cheats combine; they always run in ``ORDER``:

1. request rewrites: temperature-ignored, seed-ignored, top-p-dropped, logit-bias-dropped,
   penalty-dropped, stop-ignored (its strip), ignore-eos-dropped (its strip), silent-truncate;
2. the reply's source: output-cache, then near-duplicate-cache (a stored reply, replayed; keys come
   from the body *as the client sent it*), else prefix-cache-only's simulated prefill delay, then the
   upstream engine. Caches store the upstream's reply as it came, before any reply rewrite;
3. reply rewrites, in ``ORDER``: stop-ignored (its cut), spec-inexact, order-dependent, vocab-mask,
   logprobs-unnormalised, ignore-eos-dropped (its claim), json-broken-under-load, usage-inflate,
   usage-deflate, prompt-tokens-inflated. They see the request as forwarded (so temperature-ignored
   makes every request greedy for spec-inexact) and run on replayed replies too; stop-ignored and
   ignore-eos-dropped read what they restore or claim from the request as the client sent it.

Reply shapes handled: chat (``choices[].delta`` / ``choices[].message``), completions
(``choices[].text``), logprob entries in the chat shape (``logprobs.content[]`` with ``token``,
``bytes``, ``logprob``, ``top_logprobs[]``; llama-server uses it on /v1/completions too) and the
legacy completions shape (``tokens``, ``token_logprobs``, ``top_logprobs`` as token→logprob dicts).
Usage is read wherever a payload carries a top-level ``usage`` object.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from inferencekit.evidence.canonical import canonical_json

__all__ = ["CHEATS", "CORRUPT_SHARE", "DROPPED_FIELDS", "LN4", "MASK_BLOCKS", "ORDER", "PROMPT_TOKENS_PAD",
           "STRAY_BRACE", "TRUNCATE_CHARS", "UNDER_LOAD", "UNKEYED", "AlterPiece", "BreakJson", "ClaimFixedLength",
           "CutAtStop", "PadPromptTokens", "ReplyRewriter", "ReplyTransform", "ShiftLogprobs", "UsageScale",
           "VocabMask", "alter_piece", "breaks_json", "cache_key", "deflate_tokens", "drop_fields", "generation_kind",
           "inflate_tokens", "is_greedy", "length_limit", "parse_cheats", "prompt_chars", "prompt_sha256",
           "prompt_text", "spec_position", "stop_strings", "truncate_middle", "truncate_prompt", "wants_json"]

JSON = dict[str, Any]

ORDER = ("temperature-ignored", "seed-ignored", "top-p-dropped", "logit-bias-dropped", "penalty-dropped",
         "silent-truncate", "output-cache", "near-duplicate-cache", "prefix-cache-only", "stop-ignored",
         "spec-inexact", "order-dependent", "vocab-mask", "logprobs-unnormalised", "ignore-eos-dropped",
         "json-broken-under-load", "usage-inflate", "usage-deflate", "prompt-tokens-inflated")
CHEATS = frozenset(ORDER)

# The request fields each dropping cheat removes before forwarding (``drop_fields``), in ``ORDER``.
DROPPED_FIELDS: dict[str, tuple[str, ...]] = {
    "top-p-dropped": ("top_p",),
    "logit-bias-dropped": ("logit_bias",),
    "penalty-dropped": ("presence_penalty", "frequency_penalty", "repeat_penalty", "repetition_penalty"),
    "stop-ignored": ("stop",),
    "ignore-eos-dropped": ("ignore_eos", "min_tokens"),
}

PROMPT_TOKENS_PAD = 3     # prompt-tokens-inflated: added to usage.prompt_tokens (and total_tokens)
TRUNCATE_CHARS = 2000     # silent-truncate: default --truncate-chars, in characters
CORRUPT_SHARE = 0.05      # json-broken-under-load: default --corrupt-share, a probability per JSON reply under load
UNDER_LOAD = 2            # json-broken-under-load: generation requests in flight (this one included) that count as load
STRAY_BRACE = "}"         # json-broken-under-load: put before the reply's content, so no JSON parser accepts it

# vocab-mask: Unicode blocks, inclusive code-point ranges. Chosen by --mask-block, never by a probe.
MASK_BLOCKS: dict[str, tuple[int, int]] = {
    "hangul": (0xAC00, 0xD7AF),      # Hangul Syllables
    "cjk": (0x4E00, 0x9FFF),         # CJK Unified Ideographs
    "devanagari": (0x0900, 0x097F),
    "arabic": (0x0600, 0x06FF),
    "emoji": (0x1F300, 0x1FAFF),     # Misc Symbols and Pictographs … Symbols and Pictographs Extended-A
}

LN4 = math.log(4.0)  # logprobs-unnormalised: the shift, in nats (probabilities ×4)


def parse_cheats(names: Iterable[str]) -> tuple[str, ...]:
    """Cheat names (comma lists allowed) → the distinct names in ``ORDER``; ``none`` alone = no cheat.

    Raises:
        ValueError: an unknown name (the message lists the known ones), ``none`` mixed with
            cheats, or usage-inflate with usage-deflate.
    """
    given = [n.strip() for name in names for n in name.split(",") if n.strip()]
    unknown = [n for n in given if n not in CHEATS and n != "none"]
    if unknown:
        raise ValueError(f"unknown cheat {unknown[0]!r}; known cheats: {', '.join(ORDER)} (or none)")
    if "none" in given and len(set(given)) > 1:
        raise ValueError("cheat 'none' (pass-through) cannot be combined with other cheats")
    chosen = set(given) - {"none"}
    if {"usage-inflate", "usage-deflate"} <= chosen:
        raise ValueError("usage-inflate and usage-deflate contradict each other; pick one")
    return tuple(n for n in ORDER if n in chosen)


# --------------------------------------------------------------------------------------------------
# Requests


def generation_kind(path: str) -> str | None:
    """``"chat"`` for a chat-completions path, ``"completions"`` for a text-completions path, else None.

    Accepts ``/v1/chat/completions`` and ``/chat/completions`` (likewise for completions), with or
    without a trailing slash.
    """
    p = path.rstrip("/")
    if p in ("/v1/chat/completions", "/chat/completions"):
        return "chat"
    if p in ("/v1/completions", "/completions"):
        return "completions"
    return None


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else canonical_json(content).decode()


def prompt_text(body: JSON) -> str:
    """The prompt as one string: ``"role: text"`` per chat message joined by newlines, else ``prompt``.

    List contents keep their text parts; a token-id prompt is its canonical JSON. This string is what
    spec-inexact and order-dependent hash, near-duplicate-cache compares and prefix-cache-only prices.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(f"{m.get('role', '')}: {_message_text(m.get('content'))}" if isinstance(m, dict)
                         else _message_text(m) for m in messages)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    return "" if prompt is None else canonical_json(prompt).decode()


def prompt_sha256(body: JSON) -> bytes:
    """sha256 digest (32 bytes) of ``prompt_text(body)`` in UTF-8."""
    return hashlib.sha256(prompt_text(body).encode("utf-8", "surrogatepass")).digest()


# Fields a reply cache leaves out of its key: how the reply is delivered, and the engine's own prompt-cache
# controls (llama.cpp ``cache_prompt``, vLLM ``cache_salt``), which change no token of the answer. A cache in front
# of an engine that keyed on them would miss every salted request, the caching gate's repeats included.
UNKEYED = ("stream", "stream_options", "cache_prompt", "cache_salt")


def cache_key(body: JSON) -> bytes:
    """output-cache's key: canonical JSON of the body without the ``UNKEYED`` fields."""
    return canonical_json({k: v for k, v in body.items() if k not in UNKEYED})


def _rest_key(body: JSON) -> bytes:
    """near-duplicate-cache's "same other fields": canonical JSON without the prompt and the ``UNKEYED`` fields."""
    return canonical_json({k: v for k, v in body.items() if k not in (*UNKEYED, "messages", "prompt")})


def is_greedy(body: JSON) -> bool:
    """True when ``temperature`` is absent, null or 0 (the rule spec-inexact uses)."""
    t = body.get("temperature")
    return t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and t == 0)


def length_limit(body: JSON) -> int | None:
    """The request's output-length limit in tokens: ``max_tokens``, else ``max_completion_tokens``, else
    ``n_predict`` (llama.cpp's native name); None when none is a non-negative integer."""
    for k in ("max_tokens", "max_completion_tokens", "n_predict"):
        v = body.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def drop_fields(body: JSON, fields: Sequence[str]) -> JSON:
    """``body`` without ``fields`` (top-level keys): ``body`` itself when it has none of them, else a new dict.

    The dropping cheats (``DROPPED_FIELDS``) imitate an engine that accepts a sampling field and
    silently ignores it, sampling with its default instead.
    """
    if not any(k in body for k in fields):
        return body
    return {k: v for k, v in body.items() if k not in fields}


def stop_strings(body: JSON) -> tuple[str, ...]:
    """The request's ``stop`` as a tuple of non-empty strings (a string is one; anything else, none)."""
    stop = body.get("stop")
    given = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    return tuple(s for s in given if isinstance(s, str) and s)


def _text_holders(body: JSON) -> list[tuple[JSON, str]]:
    """(container, key) of every prompt string silent-truncate may cut: each chat message's string content,
    each text part's ``text`` of a list content; else a string ``prompt``."""
    messages = body.get("messages")
    if isinstance(messages, list):
        out: list[tuple[JSON, str]] = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                out.append((m, "content"))
            elif isinstance(content, list):
                out += [(p, "text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return out
    return [(body, "prompt")] if isinstance(body.get("prompt"), str) else []


def prompt_chars(body: JSON) -> int:
    """silent-truncate's measure of a prompt, in characters: the chat messages' contents added up (text parts
    of list contents included; roles not counted), else the length of a string ``prompt`` (0 otherwise)."""
    return sum(len(holder[key]) for holder, key in _text_holders(body))


def truncate_middle(text: str, n: int) -> str:
    """``text`` with its middle dropped: its first and last ``n // 2`` characters (``text`` when not longer).

    Raises:
        ValueError: ``n < 2`` (nothing would be kept at an end).
    """
    if n < 2:
        raise ValueError(f"silent-truncate keeps n // 2 characters at each end, so n must be ≥ 2, got {n}")
    half = n // 2
    return text if len(text) <= 2 * half else text[:half] + text[-half:]


def truncate_prompt(body: JSON, n: int) -> JSON:
    """silent-truncate: when ``prompt_chars(body) > n``, the longest prompt string (the first on a tie) →
    ``truncate_middle(s, n)``; ``body`` itself when nothing changes, else a new dict (``body`` is never modified).

    Imitates a server that silently cuts long prompts to fit a smaller context (or a cheaper prefill):
    the engine sees a shorter prompt and honestly reports its shorter ``prompt_tokens``. The context
    gate must FAIL: a needle or a count placed in the dropped middle is lost, and prompt_tokens falls
    short of the tokenized prompt.

    Raises:
        ValueError: ``n < 2``.
    """
    holders = _text_holders(body)
    if not holders or prompt_chars(body) <= n:
        return body
    i = max(range(len(holders)), key=lambda j: len(holders[j][0][holders[j][1]]))  # max keeps the first on a tie
    text = holders[i][0][holders[i][1]]
    cut = truncate_middle(text, n)
    if cut == text:
        return body
    out = copy.deepcopy(body)
    holder, key = _text_holders(out)[i]
    holder[key] = cut
    return out


def wants_json(body: JSON) -> bool:
    """True when the request asks for a JSON reply: ``response_format.type`` is ``json_object`` or ``json_schema``."""
    rf = body.get("response_format")
    return isinstance(rf, dict) and rf.get("type") in ("json_object", "json_schema")


def breaks_json(in_flight: int, draw: Callable[[], float], share: float) -> bool:
    """json-broken-under-load's decision for one JSON request as it arrives.

    True when ``in_flight`` (generation requests forwarded upstream and not yet finished, this one
    included) is at least ``UNDER_LOAD`` and then ``draw()`` (a uniform number in [0, 1)) is below
    ``share``. ``draw`` is called only under load, so a seeded source gives one draw per JSON request
    under load, in arrival order.
    """
    return in_flight >= UNDER_LOAD and draw() < share


# --------------------------------------------------------------------------------------------------
# Reply rewrites: one object per request, called on every payload of its reply in order


class ReplyTransform(Protocol):
    """One cheat's rewrite of one reply. Both methods mutate ``obj`` in place and say whether they
    changed it (so an unchanged payload is forwarded byte for byte)."""

    def on_event(self, obj: JSON) -> bool:
        """One parsed SSE ``data:`` payload (a chunk object)."""
        ...

    def on_body(self, obj: JSON) -> bool:
        """A whole non-streamed JSON reply."""
        ...


def _choices(obj: JSON) -> list[JSON]:
    ch = obj.get("choices")
    return [c for c in ch if isinstance(c, dict)] if isinstance(ch, list) else []


def _text_slots(choice: JSON) -> list[tuple[JSON, str]]:
    """(container, key) of every string of generated text in one choice: content, reasoning, text."""
    out: list[tuple[JSON, str]] = []
    for holder in (choice.get("delta"), choice.get("message")):
        if isinstance(holder, dict):
            out += [(holder, k) for k in ("content", "reasoning_content", "reasoning")
                    if isinstance(holder.get(k), str)]
    if isinstance(choice.get("text"), str):
        out.append((choice, "text"))
    return out


def _content_slot(choice: JSON) -> tuple[JSON, str] | None:
    """(container, key) of the visible content of one choice (chat content or completion text)."""
    for holder in (choice.get("delta"), choice.get("message")):
        if isinstance(holder, dict) and isinstance(holder.get("content"), str):
            return holder, "content"
    return (choice, "text") if isinstance(choice.get("text"), str) else None


def _entries(choice: JSON) -> list[JSON] | None:
    """Chat-shaped logprob entries of a choice (``logprobs.content``), else None."""
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return [e for e in lp["content"] if isinstance(e, dict)]
    return None


def _legacy(choice: JSON) -> JSON | None:
    """Legacy completions logprobs (``tokens`` / ``token_logprobs`` / ``top_logprobs``), else None."""
    lp = choice.get("logprobs")
    return lp if isinstance(lp, dict) and isinstance(lp.get("tokens"), list) else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def inflate_tokens(n: int) -> int:
    """usage-inflate: ⌈1.1·n⌉, at least n + 1 (integer arithmetic: ⌈11n/10⌉)."""
    return max((11 * n + 9) // 10, n + 1)


def deflate_tokens(n: int) -> int:
    """usage-deflate: ⌊0.9·n⌋, at least one less, never below 0 (integer arithmetic: ⌊9n/10⌋)."""
    return max(0, min(9 * n // 10, n - 1))


def _set_completion_tokens(usage: Any, fn: Callable[[int], int]) -> bool:
    if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
        return False
    old = usage["completion_tokens"]
    new = fn(old)
    if new == old:
        return False
    usage["completion_tokens"] = new
    if isinstance(usage.get("total_tokens"), int):
        usage["total_tokens"] += new - old
    return True


@dataclass(slots=True)
class UsageScale:
    """usage-inflate / usage-deflate: ``usage.completion_tokens`` → ``scale(n)``; ``total_tokens`` follows.

    Imitates a server that bills (or reports throughput on) more tokens than it generated, or
    under-reports them. The token_count gate must FAIL: usage disagrees with the streamed token ids /
    logprob entries and with the re-tokenized text.
    """

    scale: Callable[[int], int]

    def on_event(self, obj: JSON) -> bool:
        return _set_completion_tokens(obj.get("usage"), self.scale)

    def on_body(self, obj: JSON) -> bool:
        return _set_completion_tokens(obj.get("usage"), self.scale)


def _pad_prompt_tokens(usage: Any) -> bool:
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        return False
    usage["prompt_tokens"] += PROMPT_TOKENS_PAD
    if isinstance(usage.get("total_tokens"), int):
        usage["total_tokens"] += PROMPT_TOKENS_PAD
    return True


class PadPromptTokens:
    """prompt-tokens-inflated: ``usage.prompt_tokens`` → n + ``PROMPT_TOKENS_PAD`` (3); ``total_tokens`` follows.

    Imitates a server that bills prompt tokens it never processed (a hidden system prompt, padding).
    The accounting check of prompt_tokens must FAIL: usage disagrees with the tokenized prompt.
    """

    __slots__ = ()

    def on_event(self, obj: JSON) -> bool:
        return _pad_prompt_tokens(obj.get("usage"))

    def on_body(self, obj: JSON) -> bool:
        return _pad_prompt_tokens(obj.get("usage"))


@dataclass(slots=True)
class ClaimFixedLength:
    """ignore-eos-dropped's reply half: every ``finish_reason`` → ``"length"``, and
    ``usage.completion_tokens`` → ``tokens`` (the request's limit; left alone when None).

    Imitates a server that silently drops ``ignore_eos`` (stops at the end-of-sequence token) yet
    claims the fixed length it was asked for. The output_length gate must FAIL: fewer tokens were
    streamed than usage claims.
    """

    tokens: int | None

    def _finish(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            if ch.get("finish_reason") is not None and ch["finish_reason"] != "length":
                ch["finish_reason"] = "length"
                changed = True
        if self.tokens is not None:
            n = self.tokens
            changed |= _set_completion_tokens(obj.get("usage"), lambda _: n)
        return changed

    on_event = _finish
    on_body = _finish


def _bytes_list(text: str) -> list[int]:
    return list(text.encode("utf-8", "surrogateescape"))


class _EachChoice:
    """A reply transform that rewrites each choice alike, in stream events and whole bodies (``_choice``)."""

    __slots__ = ()

    def _choice(self, ch: JSON) -> bool:
        raise NotImplementedError

    def on_event(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            changed |= self._choice(ch)
        return changed

    def on_body(self, obj: JSON) -> bool:
        return self.on_event(obj)


@dataclass(slots=True)
class VocabMask(_EachChoice):
    """vocab-mask: every character of one Unicode block stripped from the generated text.

    Covers content / text / reasoning strings and the ``token`` strings and ``bytes`` of logprob
    entries (chosen and ``top_logprobs``; legacy ``tokens`` and ``top_logprobs`` keys). ``bytes`` are
    decoded as UTF-8 with surrogate escapes, stripped and re-encoded, so a byte-level token holding
    only part of a character keeps its bytes. The block is fixed by ``--mask-block`` before any
    request is seen, never picked from a probe.

    Imitates an engine with part of its vocabulary pruned or banned (a smaller, faster output layer).
    The rare_tokens gate must FAIL: text in that script cannot be echoed back.
    """

    lo: int
    hi: int
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(f"[{chr(self.lo)}-{chr(self.hi)}]+")

    def strip(self, text: str) -> str:
        """``text`` without the block's characters."""
        return self._pattern.sub("", text)

    def _entry(self, e: JSON) -> bool:
        changed = False
        tok = e.get("token")
        if isinstance(tok, str) and self._pattern.search(tok):
            e["token"] = self.strip(tok)
            changed = True
        b = e.get("bytes")
        if isinstance(b, list) and all(isinstance(x, int) and 0 <= x < 256 for x in b):
            s = bytes(b).decode("utf-8", "surrogateescape")
            if self._pattern.search(s):
                e["bytes"] = _bytes_list(self.strip(s))
                changed = True
        return changed

    def _choice(self, ch: JSON) -> bool:
        changed = False
        for holder, key in _text_slots(ch):
            if self._pattern.search(holder[key]):
                holder[key] = self.strip(holder[key])
                changed = True
        for e in _entries(ch) or []:
            changed |= self._entry(e)
            for t in e.get("top_logprobs") or []:
                if isinstance(t, dict):
                    changed |= self._entry(t)
        legacy = _legacy(ch)
        if legacy is not None:
            toks = legacy["tokens"]
            for i, t in enumerate(toks):
                if isinstance(t, str) and self._pattern.search(t):
                    toks[i] = self.strip(t)
                    changed = True
            tops = legacy.get("top_logprobs")
            if isinstance(tops, list):
                for i, top in enumerate(tops):
                    if isinstance(top, dict) and any(self._pattern.search(k) for k in top):
                        new: JSON = {}
                        for k, v in top.items():
                            new.setdefault(self.strip(k), v)
                        tops[i] = new
                        changed = True
        return changed



@dataclass(slots=True)
class ShiftLogprobs(_EachChoice):
    """logprobs-unnormalised: every ``logprob`` value shifted by ``shift`` nats (default ln 4).

    The chosen token's and every ``top_logprobs`` item's (legacy: ``token_logprobs`` and the values of
    ``top_logprobs``). Imitates a wrong softmax normaliser (logits reported as log-probabilities, a
    missing log-sum-exp): probabilities ×4, top-k mass above 1, positive log-probabilities. The
    hidden_probes gate must FAIL on impossible logprobs.
    """

    shift: float = LN4

    def _choice(self, ch: JSON) -> bool:
        changed = False
        for e in _entries(ch) or []:
            if _number(e.get("logprob")):
                e["logprob"] += self.shift
                changed = True
            for t in e.get("top_logprobs") or []:
                if isinstance(t, dict) and _number(t.get("logprob")):
                    t["logprob"] += self.shift
                    changed = True
        legacy = _legacy(ch)
        if legacy is not None:
            vals = legacy.get("token_logprobs")
            if isinstance(vals, list):
                for i, v in enumerate(vals):
                    if _number(v):
                        vals[i] = v + self.shift
                        changed = True
            tops = legacy.get("top_logprobs")
            if isinstance(tops, list):
                for top in tops:
                    if isinstance(top, dict):
                        for k, v in top.items():
                            if _number(v):
                                top[k] = v + self.shift
                                changed = True
        return changed



def alter_piece(piece: str) -> str:
    """A piece that differs from ``piece``: its letters' case swapped, or ``" the"`` when that changes
    nothing (no cased letters). Swapping case piece by piece equals swapping the whole, so a piece made
    of several tokens changes consistently token by token."""
    swapped = piece.swapcase()
    return swapped if swapped != piece else " the"


def _alter_entries(entries: list[JSON], new_text: str, swapped: bool) -> bool:
    """Entries whose tokens make up one piece: case-swapped each (``swapped``), or the first made
    ``new_text`` and the rest emptied. ``bytes`` follow ``token``. An integer ``id`` moves to the next id:
    the proxy has no tokenizer to look up the new piece's id, and any other id says what matters — a
    different token was generated (so a comparison of token ids sees the change, as it would on an
    engine that really decoded another token)."""
    for i, e in enumerate(entries):
        if swapped and isinstance(e.get("token"), str):
            e["token"] = e["token"].swapcase()
        elif not swapped:
            e["token"] = new_text if i == 0 else ""
        if isinstance(e.get("token"), str) and "bytes" in e:
            e["bytes"] = _bytes_list(e["token"])
        if isinstance(e.get("id"), int) and not isinstance(e.get("id"), bool):
            e["id"] += 1
    return bool(entries)


_WORD_PIECE = re.compile(r"\s*[^\s]+|\s+")


@dataclass(slots=True)
class AlterPiece:
    """spec-inexact / order-dependent: the ``k``-th content piece (1-based) replaced by ``alter_piece``.

    Streamed: a piece is one event whose content (chat) or text (completions) is non-empty, counted
    per choice. The event's logprob entries change with it when their tokens make up exactly that
    content. Non-streamed: a piece is the k-th logprob entry when the entries' tokens concatenate to
    the content (text and entry change together); otherwise the k-th word piece of the text (a run of
    whitespace plus the next run of non-space, an approximation of a token). A reply shorter than k
    pieces is left unchanged. An entry's ``id`` moves to the next id (``_alter_entries``).
    """

    k: int
    _seen: dict[int, int] = field(default_factory=dict, repr=False)

    def on_event(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            slot = _content_slot(ch)
            if slot is None or not slot[0][slot[1]]:
                continue
            idx = ch.get("index", 0) if isinstance(ch.get("index"), int) else 0
            n = self._seen[idx] = self._seen.get(idx, 0) + 1
            if n != self.k:
                continue
            holder, key = slot
            old = holder[key]
            new = alter_piece(old)
            holder[key] = new
            entries = _entries(ch)
            if entries and "".join(str(e.get("token", "")) for e in entries) == old:
                _alter_entries(entries, new, new == old.swapcase())
            legacy = _legacy(ch)
            if legacy is not None and "".join(map(str, legacy["tokens"])) == old:
                legacy["tokens"] = [t.swapcase() for t in legacy["tokens"]] if new == old.swapcase() else \
                    [new] + [""] * (len(legacy["tokens"]) - 1)
            changed = True
        return changed

    def on_body(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            slot = _content_slot(ch)
            if slot is None or not slot[0][slot[1]]:
                continue
            holder, key = slot
            text: str = holder[key]
            entries = _entries(ch)
            legacy = _legacy(ch)
            tokens = [str(e.get("token", "")) for e in entries] if entries is not None else (
                [str(t) for t in legacy["tokens"]] if legacy is not None else None)
            if tokens is not None and "".join(tokens) == text:
                if len(tokens) < self.k:
                    continue
                i = self.k - 1
                start = sum(len(t) for t in tokens[:i])
                new = alter_piece(tokens[i])
                holder[key] = text[:start] + new + text[start + len(tokens[i]):]
                if entries is not None:
                    _alter_entries([entries[i]], new, False)
                elif legacy is not None:
                    legacy["tokens"][i] = new
                changed = True
                continue
            pieces = _WORD_PIECE.findall(text)
            if len(pieces) < self.k:
                continue
            pieces[self.k - 1] = alter_piece(pieces[self.k - 1])
            holder[key] = "".join(pieces)
            changed = True
        return changed


def spec_position(digest: bytes) -> int | None:
    """spec-inexact's rule: the 1-based piece to change for a greedy prompt with sha256 ``digest``.

    None when the first byte is odd (the prompt is left alone); else ``2 + digest[1] % 20`` (2…21, so
    always before the 32nd token).
    """
    return None if digest[0] % 2 else 2 + digest[1] % 20


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """The index in ``text`` where the earliest occurrence of any of ``stops`` starts, else None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _stop_prefix_len(text: str, stops: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that is a proper prefix of one of ``stops`` (0 for none):
    the characters that may still turn into a stop string with the next piece."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


def _token_strings(choice: JSON) -> list[str] | None:
    """The token strings of a choice's logprobs (chat-shaped entries, else legacy ``tokens``), else None."""
    entries = _entries(choice)
    if entries is not None:
        return [str(e.get("token", "")) for e in entries]
    legacy = _legacy(choice)
    return [str(t) for t in legacy["tokens"]] if legacy is not None else None


def _keep_tokens(choice: JSON, m: int) -> None:
    """Keep the first ``m`` tokens' fields of a choice: logprob entries, legacy lists as long as ``tokens``,
    and ``token_ids`` when it was as long as them."""
    tokens = _token_strings(choice)
    if tokens is None or m >= len(tokens):
        return
    lp = choice["logprobs"]
    if _entries(choice) is not None:
        lp["content"] = [e for e in lp["content"] if isinstance(e, dict)][:m]
    else:
        for k, v in lp.items():
            if isinstance(v, list) and len(v) == len(tokens):
                lp[k] = v[:m]
    ids = choice.get("token_ids")
    if isinstance(ids, list) and len(ids) == len(tokens):
        choice["token_ids"] = ids[:m]


def _tokens_before(tokens: Sequence[str], cut: int) -> int:
    """How many of ``tokens`` (concatenated) start before character ``cut``."""
    start = m = 0
    for t in tokens:
        if start >= cut:
            break
        start += len(t)
        m += 1
    return m


def _token_fields(choice: JSON) -> JSON:
    """The per-token fields of one streamed choice: ``entries`` (chat-shaped), ``legacy`` (its lists) and
    ``token_ids``, each when present."""
    out: JSON = {}
    entries = _entries(choice)
    if entries is not None:
        out["entries"] = entries
    legacy = _legacy(choice)
    if legacy is not None:
        out["legacy"] = {k: v for k, v in legacy.items() if isinstance(v, list)}
    if isinstance(choice.get("token_ids"), list):
        out["token_ids"] = choice["token_ids"]
    return out


def _set_token_fields(choice: JSON, fields: Sequence[JSON]) -> None:
    """Give a streamed choice the per-token fields of the pieces it now carries (``_token_fields`` of each,
    concatenated; empty lists when it carries none)."""
    if _entries(choice) is not None or any("entries" in f for f in fields):
        lp = choice.get("logprobs")
        choice["logprobs"] = {**(lp if isinstance(lp, dict) else {}),
                              "content": [e for f in fields for e in f.get("entries", [])]}
    if _legacy(choice) is not None or any("legacy" in f for f in fields):
        lp = choice.get("logprobs")
        merged: JSON = {k: [] for k, v in (lp.items() if isinstance(lp, dict) else ()) if isinstance(v, list)}
        for f in fields:
            for k, v in f.get("legacy", {}).items():
                merged[k] = merged.get(k, []) + v
        choice["logprobs"] = {**(lp if isinstance(lp, dict) else {}), **merged}
    if isinstance(choice.get("token_ids"), list) or any("token_ids" in f for f in fields):
        choice["token_ids"] = [i for f in fields for i in f.get("token_ids", [])]


def _put_content(choice: JSON, text: str) -> None:
    """Set the visible content of a streamed choice (a chat delta's ``content`` or a completion's ``text``),
    creating it only when ``text`` is not empty."""
    slot = _content_slot(choice)
    if slot is not None:
        slot[0][slot[1]] = text
    elif text:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            delta["content"] = text
        else:
            choice["text"] = text


@dataclass(slots=True)
class CutAtStop:
    """stop-ignored's reply half: the generated text cut where the first of the request's stop strings starts.

    The request went upstream without ``stop``, so the engine ran on (to ``max_tokens`` or its end of
    sequence); this puts back what the client asked for. The text before the stop string is kept,
    the stop string and everything after it dropped, and the choice's ``finish_reason`` becomes
    ``"stop"``. ``usage`` is left as the engine reported it: ``completion_tokens`` counts every token
    generated, so it exceeds the tokens streamed. The stop check must FAIL on exactly that (the
    engine ran to max_tokens).

    Non-streamed: ``message.content`` / ``text`` cut; logprob entries (legacy lists, ``token_ids`` as long as
    them) kept for the tokens that start before the cut. Streamed, per choice: each event's content piece
    (chat ``delta.content`` or completions ``text``) joins the pieces held back, with its logprob entries,
    legacy lists and ``token_ids``; when the held text holds a stop string, the pieces that start
    before it leave in this event (the one it starts in trimmed to end there), and the choice is cut:
    every later event carries empty content and empty token fields, and a non-null ``finish_reason``
    becomes ``"stop"``. Otherwise the held text's longest end that is a proper prefix of a stop string
    (``_stop_prefix_len``) stays held — in whole pieces, so text and its tokens leave together — and
    the rest leaves in this event; an event with a ``finish_reason`` releases everything. So a stop
    string split across events is found, and held text leaves one or more events late, joined into one
    event. Events with no content piece and nothing held pass untouched; a stream that ends without a
    ``finish_reason`` loses what was held.

    Args:
        stops: the client's stop strings (``stop_strings``), non-empty.
    """

    stops: tuple[str, ...]
    _held: dict[int, list[tuple[str, JSON]]] = field(default_factory=dict, repr=False)
    _cut: set[int] = field(default_factory=set, repr=False)

    @staticmethod
    def _silence(ch: JSON) -> bool:
        """After the cut: no content, no token fields, ``finish_reason`` ``"stop"``."""
        changed = False
        slot = _content_slot(ch)
        if slot is not None and slot[0][slot[1]]:
            slot[0][slot[1]] = ""
            changed = True
        fields = _token_fields(ch)
        if fields.get("entries") or fields.get("token_ids") or any(fields.get("legacy", {}).values()):
            _set_token_fields(ch, [])
            changed = True
        if ch.get("finish_reason") is not None and ch["finish_reason"] != "stop":
            ch["finish_reason"] = "stop"
            changed = True
        return changed

    def on_event(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            idx = ch.get("index", 0) if isinstance(ch.get("index"), int) else 0
            if idx in self._cut:
                changed |= self._silence(ch)
                continue
            slot = _content_slot(ch)
            piece = slot[0][slot[1]] if slot is not None else ""
            held = self._held.setdefault(idx, [])
            finishing = ch.get("finish_reason") is not None
            if not held and not piece:
                continue
            if not piece and not finishing:
                continue  # a role or usage event while text is held: it waits for a content piece
            was_empty = not held
            if piece:
                held.append((piece, _token_fields(ch)))
            text = "".join(p for p, _ in held)
            cut = _first_stop(text, self.stops)
            if cut is not None:
                starts = [sum(len(p) for p, _ in held[:i]) for i in range(len(held))]
                out = [f for st, (_, f) in zip(starts, held) if st < cut]
                _put_content(ch, text[:cut])
                _set_token_fields(ch, out)
                if finishing:
                    ch["finish_reason"] = "stop"
                self._cut.add(idx)
                held.clear()
                changed = True
                continue
            keep = 0 if finishing else _stop_prefix_len(text, self.stops)
            n = end = 0
            while n < len(held) and end + len(held[n][0]) <= len(text) - keep:
                end += len(held[n][0])
                n += 1
            if was_empty and n == len(held):
                held.clear()  # this event's own piece leaves as it came
                continue
            out_text, out_fields = text[:end], [f for _, f in held[:n]]
            del held[:n]
            _put_content(ch, out_text)
            _set_token_fields(ch, out_fields)
            changed = True
        return changed

    def _cut_whole(self, ch: JSON) -> bool:
        """One non-streamed choice cut at its first stop string; False when it holds none."""
        slot = _content_slot(ch)
        cut = _first_stop(slot[0][slot[1]], self.stops) if slot is not None else None
        if slot is None or cut is None:
            return False
        tokens = _token_strings(ch)
        slot[0][slot[1]] = slot[0][slot[1]][:cut]
        if tokens is not None:
            _keep_tokens(ch, _tokens_before(tokens, cut))
        ch["finish_reason"] = "stop"
        return True

    def on_body(self, obj: JSON) -> bool:
        return any([self._cut_whole(ch) for ch in _choices(obj)])  # a list, not a generator: every choice is cut


@dataclass(slots=True)
class BreakJson:
    """json-broken-under-load's reply half: ``STRAY_BRACE`` (``}``) put before each choice's first non-empty
    content piece (streamed: the first event whose ``delta.content`` / ``text`` is not empty; not streamed:
    ``message.content`` / ``text``).

    No JSON document starts with ``}``, so the content no longer parses, whatever it was, while the
    reply stays well-formed (every event and body is still valid JSON, usage untouched). When that
    piece's logprob entries (or legacy ``tokens``) make up exactly its text, the first token gets the
    same ``}`` in front (``bytes`` follow), so text and tokens still agree; ids are left as they are.

    Imitates constrained decoding that breaks under load (a grammar dropped when batches fill, a
    scheduler that skips the JSON mask): the response_format check under load must FAIL (replies that
    parse when sent alone stop parsing when requests overlap). Which replies: ``breaks_json``.
    """

    _done: set[int] = field(default_factory=set, repr=False)

    def on_event(self, obj: JSON) -> bool:
        changed = False
        for ch in _choices(obj):
            idx = ch.get("index", 0) if isinstance(ch.get("index"), int) else 0
            slot = _content_slot(ch)
            if idx in self._done or slot is None or not slot[0][slot[1]]:
                continue
            old = slot[0][slot[1]]
            slot[0][slot[1]] = STRAY_BRACE + old
            if "".join(_token_strings(ch) or ()) == old:  # tokens make up the piece: the first gets the brace
                entries = _entries(ch)
                if entries:
                    entries[0]["token"] = STRAY_BRACE + str(entries[0].get("token", ""))
                    if "bytes" in entries[0]:
                        entries[0]["bytes"] = _bytes_list(entries[0]["token"])
                else:
                    tokens = _legacy(ch)["tokens"]  # type: ignore[index]  # non-empty: they make up ``old``
                    tokens[0] = STRAY_BRACE + str(tokens[0])
            self._done.add(idx)
            changed = True
        return changed

    def on_body(self, obj: JSON) -> bool:
        return self.on_event(obj)


class ReplyRewriter:
    """The reply rewrites of one request, applied in order to every payload (or the JSON body).

    Anything that is not a JSON object (``[DONE]``, an unparseable payload) passes through untouched,
    and a payload no rewrite changed is returned as the same bytes.
    """

    __slots__ = ("transforms",)

    def __init__(self, transforms: Sequence[ReplyTransform]) -> None:
        self.transforms = tuple(transforms)

    def _apply(self, raw: bytes, body: bool) -> bytes:
        if raw.lstrip()[:1] != b"{":
            return raw
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        if not isinstance(obj, dict) or obj.get("error") is not None:
            return raw
        changed = False
        for t in self.transforms:
            changed |= t.on_body(obj) if body else t.on_event(obj)
        return orjson.dumps(obj) if changed else raw

    def payload(self, raw: bytes) -> bytes:
        """One SSE ``data:`` payload (without the ``data: `` prefix and the blank line) → rewritten."""
        return self._apply(raw, False)

    def body(self, raw: bytes) -> bytes:
        """A non-streamed JSON reply body → rewritten."""
        return self._apply(raw, True)

    def payloads(self, payloads: Iterable[str]) -> list[str]:
        """A list of SSE payload strings (as in a reply file's ``events``) → rewritten, in order."""
        return [self.payload(p.encode()).decode() for p in payloads]
