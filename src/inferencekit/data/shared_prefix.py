"""Shared-prefix workloads: G system-prompt-like prefixes of exactly L tokens, each request one of them plus a
unique suffix (``bench serve --dataset random --shared-prefix-tokens L --prefix-groups G``).

An agent or a chat product resends one long instruction block in front of every request; a prefix cache (vLLM's
automatic prefix caching, llama-server's slot prompt cache, SGLang's radix cache) serves it after the first time.
That reuse is intended, so the prefixes are shared on purpose and everything after them is unique: request ``i``'s
user content is ``prefix[g] + " " + suffix[i]`` with ``g = i mod G`` and ``suffix[i]`` the ``i``-th token-exact
random prompt (``random_prompts``: no two start with the same token, so nothing past the prefix is shared). vLLM's
``prefix_repetition`` dataset and inference-perf's shared-prefix workload have the same shape; both decode random
token ids, which need not re-encode to the stated length, where here each prompt is counted.

Token-exactness: the prefixes are themselves random prompts of exactly L tokens; each joined prompt is encoded once
and must count ``L + input_len`` tokens, the space joining the suffix's first word. BPE is not compositional: a
merge across the joint is refused, never sent silently with another length. The intended-shared part,
``shared_prefix_chars`` characters of the user content, is where a reuse tag is *not* put: a later use of the prompt
carries its salt after the prefix (``bench/plan.py``), so the prefix stays shareable and the rest is new.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.data.random_prompts import random_prompts
from inferencekit.errors import OpError

__all__ = ["SEPARATOR", "shared_prefix_prompts"]

# between the shared prefix and the request's own text: a space, which joins the next word as one token (every word
# of the random prompts was tested as " word" = one token). "\n\n" was tried: alone one token, between two words two
# (SmolLM2: "apple\n\nbread" = apple, \n, \n, bread), so a prompt's count would not be the sum of its parts.
SEPARATOR = " "
_CONCURRENCY = 8  # tokenizer requests in flight


async def shared_prefix_prompts(prompts: Sequence[Prompt], *, tokens: int, groups: int, seed: int,
                                tokenizer: Tokenizer) -> list[Prompt]:
    """``prompts`` (one user message each, e.g. ``random_prompts``) behind ``groups`` shared prefixes of exactly
    ``tokens`` tokens.

    Args:
        prompts: the requests' own texts (the suffixes), in order; prompt ``i`` goes to group ``i mod groups``.
        tokens: L, tokens of each prefix (≥ 1), counted by ``tokenizer`` without special tokens.
        groups: G, the number of distinct prefixes (1 ≤ G ≤ len(prompts)).
        seed: draws the prefixes (with the run's nonce for ``--dataset random``, so a second run's prefixes are new).
        tokenizer: the server's tokenizer.

    Returns:
        The prompts with the prefix joined in front of their user content, ``shared_prefix_id`` ``"g<g>"`` and
        ``shared_prefix_chars`` (the prefix and separator, in characters) set; ids and buckets kept.

    Raises:
        OpError: bad arguments, a prompt that is not one user message, or a joined prompt whose token count is not
            the sum of its parts (the tokenizer merges across the joint).
        TokenizeError: the tokenizer failed.
    """
    for name, v in (("--shared-prefix-tokens", tokens), ("--prefix-groups", groups)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise OpError(f"{name} must be a positive integer, got {v!r}")
    if groups > len(prompts):
        raise OpError(f"--prefix-groups {groups} is more than the {len(prompts)} prompts to share them")
    for p in prompts:
        if p.messages is None or len(p.messages) != 1 or not isinstance(p.messages[0].get("content"), str):
            raise OpError(f"shared prefixes need prompts of one user message with text content; {p.id!r} is not")
    heads = await random_prompts(groups, tokens, seed=seed, tokenizer=tokenizer, bucket="prefix")
    texts = [str((h.messages or ({},))[0]["content"]) for h in heads]
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def count(text: str) -> int:
        async with gate:
            return len(await tokenizer.encode(text))

    own = await asyncio.gather(*(count(str((p.messages or ({},))[0]["content"])) for p in prompts))
    out: list[Prompt] = []
    joined: list[str] = []
    for i, p in enumerate(prompts):
        g = i % groups
        head = texts[g] + SEPARATOR
        msg = dict((p.messages or ({},))[0])
        msg["content"] = head + str(msg["content"])
        joined.append(msg["content"])
        out.append(replace(p, messages=(msg,), shared_prefix_id=f"g{g}", shared_prefix_chars=len(head)))
    got = await asyncio.gather(*(count(t) for t in joined))
    bad = [(p.id, n, tokens + k) for p, n, k in zip(out, got, own) if n != tokens + k]
    if bad:
        pid, n, want = bad[0]
        raise OpError(f"tokenizer {tokenizer.source}: {len(bad)} prompt(s) with a shared prefix do not count as the "
                      f"sum of their parts (e.g. {pid}: {n} tokens, not {want}); the prefix and the text merge "
                      "across the joint")
    return out
