"""A trace's requests as prompts (``bench serve --trace``): the block plan's texts, counted with the server's
tokenizer, and the trace's exact repeats made unique unless they are to be kept.

``data/traces.py`` reads the rows, ``data/trace_blocks.py`` plans their words block by block (Mooncake ``hash_ids``
honoured: requests sharing an id share that block byte for byte, nothing else is shared). Here each text is
encoded once: it must count its row's ``input_len`` tokens, or the replay is refused before anything is sent (BPE is
not compositional in general, so the word plan is a construction to check, not a guarantee). The plan is seeded
from the run's seed and a per-run CSPRNG nonce (``bench/serve.py``), so a second replay of the same trace shares
nothing with the first. A row whose text equals an earlier row's (the same ids and length: an exact repeat in the
trace) would be a cache hit the trace did not intend beyond its shared blocks; unless ``keep_repeats``, its last word
is swapped for another vocabulary word drawn from ``secrets`` (one token for another, the count checked again), and
the number swapped is recorded.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.data.random_prompts import word_vocabulary
from inferencekit.data.trace_blocks import plan_blocks
from inferencekit.data.traces import Trace
from inferencekit.errors import OpError

__all__ = ["trace_prompts"]

_CONCURRENCY = 8  # tokenizer requests in flight


async def trace_prompts(trace: Trace, *, seed: int, tokenizer: Tokenizer, keep_repeats: bool = False
                        ) -> tuple[list[Prompt], dict[str, Any]]:
    """One chat prompt per kept row, in trace order, ids ``trace-<i>``, ``max_tokens`` the row's ``output_len``.

    Returns:
        ``(prompts, description)``: the description holds the trace's (``Trace.describe``), the block plan's, and
        ``repeats_made_unique`` / ``repeats_kept``.

    Raises:
        OpError: a tokenizer without enough single-token words, or a text whose count is not its row's length.
        TokenizeError: the tokenizer failed.
    """
    vocabulary = await word_vocabulary(tokenizer)
    block_size = trace.block_size or 512
    plan = plan_blocks(trace.rows, block_size=block_size, vocabulary=vocabulary, seed=seed)
    texts = list(plan.texts())
    seen: set[str] = set()
    swapped = kept = 0
    for i, text in enumerate(texts):
        if text in seen:
            if keep_repeats:
                kept += 1
            else:
                words = text.split(" ")
                while text in seen:
                    words[-1] = secrets.choice(vocabulary)
                    text = " ".join(words)
                texts[i] = text
                swapped += 1
        seen.add(text)
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def count(text: str) -> int:
        async with gate:
            return len(await tokenizer.encode(text))

    got = await asyncio.gather(*(count(t) for t in texts))
    bad = [(i, n, row.input_len) for i, (n, row) in enumerate(zip(got, trace.rows)) if n != row.input_len]
    if bad:
        i, n, want = bad[0]
        raise OpError(f"tokenizer {tokenizer.source}: {len(bad)} of {len(texts)} trace prompts do not count as their "
                      f"rows' input lengths (e.g. line {trace.rows[i].line}: {n} tokens, not {want}); this tokenizer's "
                      "words do not add up, so the trace cannot be replayed token-exact")
    prompts = [Prompt(id=f"trace-{i:05d}", bucket="trace", messages=({"role": "user", "content": t},),
                      max_tokens=row.output_len) for i, (t, row) in enumerate(zip(texts, trace.rows))]
    return prompts, {"name": f"trace:{trace.format}", **trace.describe(), "blocks": plan.describe(),
                     "repeats_made_unique": swapped, "repeats_kept": kept, "tokenizer": tokenizer.source}
