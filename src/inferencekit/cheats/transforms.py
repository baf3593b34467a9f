"""The cheats of ``inferencekit cheat-proxy``: pure transformations of requests and replies.

Each cheat imitates one way a serving stack can do less (or other) work than it claims, so that the
gates can be seen to FAIL on a known-bad engine. Nothing here does I/O: the proxy (``proxy.py``)
reads and writes, and calls these functions on request bodies (dicts), on SSE ``data:`` payloads
(bytes, one event each) and on non-streamed JSON bodies. The cheats that keep state between requests
(the caches, the simulated prefix cache) and ``CheatSet``, which holds the chosen cheats, are in
``state.py``.

Several cheats combine; they always run in ``ORDER``:

1. request rewrites, in ``ORDER``: temperature-ignored, seed-ignored, ignore-eos-dropped (its strip);
2. the reply's source: output-cache, then near-duplicate-cache (a stored reply, replayed; keys come
   from the body *as the client sent it*), else prefix-cache-only's simulated prefill delay, then the
   upstream engine. Caches store the upstream's reply as it came, before any reply rewrite;
3. reply rewrites, in ``ORDER``: spec-inexact, order-dependent, vocab-mask, logprobs-unnormalised,
   ignore-eos-dropped (its claim), usage-inflate, usage-deflate. They see the request as forwarded
   (so temperature-ignored makes every request greedy for spec-inexact) and run on replayed replies
   too.

Reply shapes handled: chat (``choices[].delta`` / ``choices[].message``), completions
(``choices[].text``), logprob entries in the chat shape (``logprobs.content[]`` with ``token``,
``bytes``, ``logprob``, ``top_logprobs[]``; llama-server uses it on /v1/completions too) and the
legacy completions shape (``tokens``, ``token_logprobs``, ``top_logprobs`` as token→logprob dicts).
Usage is read wherever a payload carries a top-level ``usage`` object.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from inferencekit.evidence.canonical import canonical_json

__all__ = ["CHEATS", "LN4", "MASK_BLOCKS", "ORDER", "AlterPiece", "ClaimFixedLength", "ReplyRewriter",
           "ReplyTransform", "ShiftLogprobs", "UsageScale", "VocabMask", "alter_piece", "cache_key", "deflate_tokens",
           "generation_kind", "inflate_tokens", "is_greedy", "length_limit", "parse_cheats", "prompt_sha256",
           "prompt_text", "spec_position"]

JSON = dict[str, Any]

ORDER = ("temperature-ignored", "seed-ignored", "output-cache", "near-duplicate-cache", "prefix-cache-only",
         "spec-inexact", "order-dependent", "vocab-mask", "logprobs-unnormalised", "ignore-eos-dropped",
         "usage-inflate", "usage-deflate")
CHEATS = frozenset(ORDER)

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


def cache_key(body: JSON) -> bytes:
    """output-cache's key: canonical JSON of the body without ``stream`` and ``stream_options``."""
    return canonical_json({k: v for k, v in body.items() if k not in ("stream", "stream_options")})


def _rest_key(body: JSON) -> bytes:
    """near-duplicate-cache's "same other fields": canonical JSON without the prompt and the stream fields."""
    return canonical_json({k: v for k, v in body.items()
                           if k not in ("stream", "stream_options", "messages", "prompt")})


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
