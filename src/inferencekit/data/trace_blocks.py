"""Prompt text for a trace replay: Mooncake's ``hash_ids`` honoured block by block, from single-token words.

A trace gives each request's prompt as a count of tokens and (Mooncake) one block id per
``block_size`` tokens; requests that share a block id share that block's tokens (the trace's prefix
reuse). ``plan_blocks`` turns rows into a plan whose ``text(i)`` is request ``i``'s prompt:

- block id ``b`` → ``block_size`` words drawn from ``random.Random`` seeded by ``(seed, b)``, so every
  request holding ``b`` gets byte-identical text for it, and blocks with different ids differ (the first
  word may be swapped for another, once for the whole trace: below); a request's last block is cut to
  the remainder of its ``input_len`` (a prefix of the full block);
- a row without ``hash_ids`` gets blocks of its own (keys ``(row index, k)``), which no other row shares;
- the text is ``" w1 w2 … wn"``: every word with one space before it, so a block's text is the same
  wherever it stands, and a request's text is its blocks' texts joined.

Sibling blocks (different ids after the same leading ids, e.g. two tails after one shared system
prompt) get different *first* words: a block keeps its RNG's own first word unless a sibling coloured
before it has that word, then it takes the first word of a seeded shuffle of the vocabulary that no
sibling has (greedy, in first-seen order; blocks some other request shares go first). So two requests'
texts share exactly the words their common leading block ids imply, no word more, wherever a node has
fewer children than the vocabulary has words. Where it has more (the real Mooncake conversation trace
puts thousands of tails after its block 0), a block's first word may repeat a sibling's: a token or more
of accidental sharing. That is harmless after the salt: a block no other request shares always lies at
or after its request's ``salt_block``, so the per-request salt put there ends such sharing. Only blocks
that other requests share (before any salt) are counted in ``clashes`` when they repeat a sibling's
first word.

Token-exactness: the text of ``n`` words is ``n`` tokens **if** every word is one token after a space
and ``" w1 w2 … wk"`` encodes to ``k`` tokens. That is what ``random_prompts.word_vocabulary`` checks
against the server's tokenizer (groups of 64, in exactly this ``" w1 … wk"`` shape), and the vocabulary
passed here must be one it returned. BPE is not compositional in general (merges across a space, a
chat template that trims the leading space, as Llama 3's does), so the caller must still count each
prompt with the server's tokenizer before sending; nothing here calls a tokenizer.

Per request the plan also says how much of it is *intended* reuse: ``shared`` (leading words it shares
with some earlier request, in row order, i.e. send order) and ``salt_block`` / ``salt_word``: the first
block that no other request of the trace shares (same ids up to and including it: a server's prefix
cache can reuse a block only after a common prefix), where a per-run salt can go without cutting any
sharing the trace meant (a salt of its own tokens changes the request's length: the caller replaces as
many words there, or counts them). Peers build trace prompts by decoding random token ids per block
(ai-dynamo/aiperf ``src/aiperf/dataset/generator/prompt.py``, ``_build_token_sequence``; vllm-project/guidellm
``src/guidellm/data/deserializers/trace_mooncake.py``, which also keeps sibling blocks distinct): the
decoded text is not guaranteed to re-encode to the same count, which is why words are used here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferencekit.data.traces import TraceRow
from inferencekit.errors import OpError

__all__ = ["BlockKey", "RequestBlocks", "TraceBlocks", "plan_blocks"]

BlockKey = int | tuple[int, int]  # a trace's block id, or (row index, k) for a row without hash_ids


@dataclass(frozen=True, slots=True)
class RequestBlocks:
    """One request's prompt as blocks.

    Attributes:
        line: the trace line of its row.
        input_len: words (tokens) of its text.
        blocks: its block keys, in order.
        lengths: words per block: ``block_size`` each, the last the remainder (1..block_size).
        shared: leading words it shares with some earlier request (its intended-reuse prefix; 0..input_len).
        salt_block: index of its first block that no other request shares; ``len(blocks)`` when all are shared.
        salt_word: the word offset where ``salt_block`` starts (``input_len`` when all blocks are shared).
    """

    line: int
    input_len: int
    blocks: tuple[BlockKey, ...]
    lengths: tuple[int, ...]
    shared: int
    salt_block: int
    salt_word: int


@dataclass(frozen=True)
class TraceBlocks:
    """The block plan of a trace; texts are built on demand (a whole real trace is gigabytes of text).

    Attributes:
        block_size: words (tokens) per block.
        seed: the seed every block's RNG is derived from.
        vocabulary: the single-token words, in the order given.
        requests: one per row, in the rows' order.
        clashes: shared blocks (before the salt) whose first word repeats a sibling's: more siblings than words.
    """

    block_size: int
    seed: int
    vocabulary: tuple[str, ...]
    requests: tuple[RequestBlocks, ...]
    clashes: int
    _first: dict[BlockKey, str] = field(default_factory=dict, repr=False)

    def block_words(self, key: BlockKey, n: int | None = None) -> list[str]:
        """The first ``n`` (default ``block_size``) words of block ``key``."""
        words = _rng(self.seed, key).choices(self.vocabulary, k=self.block_size)
        if key in self._first:
            words[0] = self._first[key]
        return words if n is None else words[:n]

    def words(self, i: int) -> list[str]:
        """Request ``i``'s words (exactly ``input_len`` of them)."""
        req = self.requests[i]
        out: list[str] = []
        for key, n in zip(req.blocks, req.lengths):
            out += self.block_words(key, n)
        return out

    def text(self, i: int) -> str:
        """Request ``i``'s prompt text: ``" w1 w2 … wn"`` with ``n = input_len``."""
        return "".join(" " + w for w in self.words(i))

    def texts(self) -> Iterator[str]:
        """Every request's text, in order, one at a time."""
        return (self.text(i) for i in range(len(self.requests)))

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary: sizes, intended reuse, clashes."""
        return {"block_size": self.block_size, "seed": self.seed, "vocabulary": len(self.vocabulary),
                "requests": len(self.requests),
                "distinct_blocks": len({k for r in self.requests for k in r.blocks}),
                "input_words": sum(r.input_len for r in self.requests),
                "shared_words": sum(r.shared for r in self.requests), "clashes": self.clashes}


def _rng(seed: int, key: BlockKey, salt: str = "") -> random.Random:
    name = f"b{key}" if isinstance(key, int) else f"r{key[0]}.{key[1]}"
    return random.Random(f"{seed}:{name}{salt}")  # a str seed is hashed with SHA-512: stable across runs


def _check(rows: Sequence[TraceRow], block_size: int, vocabulary: Sequence[str], seed: int) -> tuple[str, ...]:
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise OpError(f"trace blocks: the block size must be a positive integer (tokens), got {block_size!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise OpError(f"trace blocks: the seed must be an integer, got {seed!r}")
    vocab = tuple(vocabulary)
    if len(set(vocab)) != len(vocab) or len(vocab) < 2:
        raise OpError(f"trace blocks: the vocabulary must hold at least 2 distinct words, got {len(vocab)} "
                      f"({len(set(vocab))} distinct)")
    for w in vocab:
        if not isinstance(w, str) or not w or any(c.isspace() for c in w):
            raise OpError(f"trace blocks: vocabulary word {w!r} must be a non-empty string without spaces")
    for r in rows:
        if r.input_len < 0:
            raise OpError(f"trace line {r.line}: input length {r.input_len} is negative")
        if r.hash_ids is not None and len(r.hash_ids) != math.ceil(r.input_len / block_size):
            raise OpError(f"trace line {r.line}: {len(r.hash_ids)} hash_ids for {r.input_len} input tokens at "
                          f"{block_size} tokens per block (it needs {math.ceil(r.input_len / block_size)})")
    return vocab


def plan_blocks(rows: Sequence[TraceRow], *, block_size: int, vocabulary: Sequence[str], seed: int) -> TraceBlocks:
    """The block plan of ``rows`` (in send order): keys, lengths, intended reuse and salt positions.

    Args:
        rows: the trace's rows, in the order they will be sent (``Trace.rows``).
        block_size: tokens per block: the trace's (Mooncake: ``--trace-block-size``, 512 by default).
        vocabulary: single-token words (``random_prompts.word_vocabulary`` for the server's tokenizer).
        seed: derives every block's RNG; the same rows, block size, vocabulary and seed give the same texts.

    Returns:
        ``TraceBlocks``; ``text(i)`` builds request ``i``'s prompt.

    Raises:
        OpError: a bad block size, seed or vocabulary; a row whose ``hash_ids`` do not number
            ⌈input_len/block_size⌉.
    """
    vocab = _check(rows, block_size, vocabulary, seed)
    # The trie of block-key paths: node 0 is the root; child[(parent, key)] -> node.
    child: dict[tuple[int, BlockKey], int] = {}
    count = [0]  # requests through each node (the whole trace)
    seen = [0]  # the longest this node's block was in an earlier request (0: no earlier request)
    kids = [0]  # children of each node
    hangs: dict[BlockKey, list[tuple[int, int]]] = {}  # key -> its (parent, node) pairs, in first-seen order
    paths: list[list[int]] = []
    shares: list[int] = []
    plans: list[tuple[tuple[BlockKey, ...], tuple[int, ...]]] = []
    for i, r in enumerate(rows):
        nb = math.ceil(r.input_len / block_size)
        keys: tuple[BlockKey, ...] = tuple(r.hash_ids) if r.hash_ids is not None else tuple((i, k) for k in range(nb))
        lengths = tuple(block_size if k < nb - 1 else r.input_len - block_size * (nb - 1) for k in range(nb))
        node, shared, sharing, path = 0, 0, True, []
        for key, n in zip(keys, lengths):
            nxt = child.get((node, key))
            if nxt is None:
                nxt = child[(node, key)] = len(count)
                count.append(0)
                seen.append(0)
                kids.append(0)
                kids[node] += 1
                hangs.setdefault(key, []).append((node, nxt))
            if sharing:
                s = min(n, seen[nxt])
                shared += s
                sharing = s == block_size  # a partial block is the last of its request: sharing ends there
            count[nxt] += 1
            seen[nxt] = max(seen[nxt], n)
            path.append(nxt)
            node = nxt
        paths.append(path)
        shares.append(shared)
        plans.append((keys, lengths))
    first, clashes = _colour(hangs, count, kids, vocab, seed)
    requests = []
    for r, (keys, lengths), path, shared in zip(rows, plans, paths, shares):
        salt = next((j for j, nd in enumerate(path) if count[nd] == 1), len(path))
        requests.append(RequestBlocks(r.line, r.input_len, keys, lengths, shared, salt, sum(lengths[:salt])))
    return TraceBlocks(block_size, seed, vocab, tuple(requests), clashes, first)


def _colour(hangs: dict[BlockKey, list[tuple[int, int]]], count: list[int], kids: list[int], vocab: tuple[str, ...],
            seed: int) -> tuple[dict[BlockKey, str], int]:
    """First words such that sibling blocks (under one node) differ in their first word, where the vocabulary
    allows. Greedy, in two rounds, each in first-seen order: blocks some other request shares first (the
    ones before a salt), then the rest (after it). Returns the first words that differ from the block's own
    RNG's, and the count of shared blocks that could not avoid a sibling's first word."""
    used: dict[int, set[str]] = {}
    overrides: dict[BlockKey, str] = {}
    clashes = 0
    shared = [k for k, hs in hangs.items() if any(count[nd] > 1 for _, nd in hs)]
    rest = [k for k, hs in hangs.items() if all(count[nd] == 1 for _, nd in hs)]
    for counted, keys in ((True, shared), (False, rest)):
        for key in keys:
            hs = hangs[key]
            if all(kids[p] == 1 for p, _ in hs):
                continue  # an only child wherever it stands: nothing to differ from
            sets = [used.setdefault(p, set()) for p, _ in hs]
            taken = sets[0] if len(sets) == 1 else set[str]().union(*sets)
            full = len(taken) >= len(vocab)
            if full and len(sets) == 1:
                clashes += counted
                continue
            own = _rng(seed, key).choices(vocab, k=1)[0]  # block_words' first draw: the block's own first word
            word = own
            if own in taken:
                if full:
                    clashes += counted
                else:
                    word = next(w for w in _rng(seed, key, ":first").sample(vocab, len(vocab)) if w not in taken)
                    overrides[key] = word
            for st in sets:
                st.add(word)
    return overrides, clashes
