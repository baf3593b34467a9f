#!/usr/bin/env python3
"""Build the packaged sample traces: ``src/inferencekit/data/traces/{mooncake_sample.jsonl,azure_sample.csv,
burstgpt_sample.csv}``.

Made up here, seeded (``SEED``), so two runs give byte-identical files; none is cut from a published
trace. Each has the shape of its public format (``inferencekit/data/traces.py`` names the sources):

- ``mooncake_sample.jsonl``: 200 requests, ``{"timestamp", "input_length", "output_length", "hash_ids"}``
  with ``timestamp`` in ms (exponential gaps, some ties) and hash ids numbered in order of first use as
  in the real trace. Like the real conversation trace, it has a few long shared prefixes (three
  "system prompts" of 16, 8 and 4 blocks) followed by tails of new blocks, follow-up turns that repeat
  an earlier request's full blocks and add new ones, and requests that share nothing;
- ``azure_sample.csv``: 50 rows, ``TIMESTAMP,ContextTokens,GeneratedTokens``, times with 7 fractional
  digits as in the 2023 files;
- ``burstgpt_sample.csv``: 50 rows, ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``,
  three of them failed requests (``Response tokens`` 0), as the real trace has.

Lengths are small: every request fits a 2,048-token context (input + output ≤ 2,048), and the Mooncake
sample's hash ids are cut at **64 tokens per block** (``--trace-block-size 64``; the real trace's 512
would refuse it). Each file is under 60 KB. Before writing, every file is read back with
``inferencekit.data.traces.parse_trace`` at that block size and context, and nothing may be skipped
but BurstGPT's three failures.

Usage::

    python scripts/make_sample_traces.py          # write the three files
    python scripts/make_sample_traces.py --check  # compare with the files on disk (exit 1 on a difference)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "inferencekit" / "data" / "traces"
SEED = 23
BLOCK = 64
CONTEXT = 2048
MAX_BYTES = 60_000


def _output_len(rng: random.Random, input_len: int) -> int:
    return min(rng.randint(8, 256), CONTEXT - input_len)


def mooncake_lines() -> list[str]:
    """200 JSON lines with shared hash-id prefixes (see the module docstring)."""
    rng = random.Random(f"{SEED}:mooncake")
    next_id = 0

    def new(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    prefixes: dict[int, list[int]] = {}  # blocks -> its ids, made on first use

    def prefix(n: int) -> list[int]:
        if n not in prefixes:
            prefixes[n] = new(n)
        return list(prefixes[n])

    history: list[list[int]] = []  # full-block ids of earlier requests (follow-ups extend them)
    t_ms, lines = 0, []
    for _ in range(200):
        t_ms += 0 if not lines or rng.random() < 0.15 else int(rng.expovariate(1 / 600))
        pick = rng.random()
        if pick < 0.75:
            head = prefix(16 if pick < 0.45 else 8 if pick < 0.65 else 4)
        elif pick < 0.88 and history:
            head = list(rng.choice(history))
        else:
            head = []
        head = head[:(CONTEXT - 300) // BLOCK - 1]  # room for a tail and the output
        room = (CONTEXT - 300) - len(head) * BLOCK
        tail_tokens = rng.randint(1, max(1, min(room, 6 * BLOCK)))
        input_len = len(head) * BLOCK + tail_tokens
        ids = head + new(-(-tail_tokens // BLOCK))
        output_len = _output_len(rng, input_len)
        full = ids if input_len % BLOCK == 0 else ids[:-1]
        if full:
            history.append(full)
        lines.append(json.dumps({"timestamp": t_ms, "input_length": input_len, "output_length": output_len,
                                 "hash_ids": ids}))
    return lines


def azure_lines() -> list[str]:
    """A header and 50 rows in the 2023 AzureLLMInferenceTrace shape."""
    rng = random.Random(f"{SEED}:azure")
    t = 0  # 100 ns units after 2023-11-16 18:17:03
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for _ in range(50):
        t += rng.randint(0, 6_000_000)  # up to 0.6 s
        secs, frac = divmod(9_799_600 + t, 10_000_000)
        hh, rem = divmod(18 * 3600 + 17 * 60 + 3 + secs, 3600)
        mm, ss = divmod(rem, 60)
        input_len = min(int(rng.lognormvariate(6.0, 1.0)) + 8, 1800)
        lines.append(f"2023-11-16 {hh:02d}:{mm:02d}:{ss:02d}.{frac:07d},{input_len},"
                     f"{min(rng.randint(5, 200), CONTEXT - input_len)}")
    return lines


def burstgpt_lines() -> list[str]:
    """A header and 50 rows in the BurstGPT shape, three of them failed (0 response tokens)."""
    rng = random.Random(f"{SEED}:burstgpt")
    failed = set(rng.sample(range(50), 3))
    t = 5
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for i in range(50):
        t += rng.randint(0, 20)
        model = "GPT-4" if rng.random() < 0.2 else "ChatGPT"
        kind = "API log" if rng.random() < 0.3 else "Conversation log"
        req = min(int(rng.lognormvariate(5.5, 1.0)) + 4, 1500)
        resp = 0 if i in failed else min(int(rng.lognormvariate(5.0, 0.8)) + 2, CONTEXT - req)
        lines.append(f"{t},{model},{req},{resp},{req + resp},{kind}")
    return lines


SAMPLES = {"mooncake_sample.jsonl": ("mooncake", mooncake_lines), "azure_sample.csv": ("azure", azure_lines),
           "burstgpt_sample.csv": ("burstgpt", burstgpt_lines)}


def build() -> dict[str, bytes]:
    """Every sample file's bytes, checked (raises AssertionError on a broken rule)."""
    sys.path.insert(0, str(ROOT / "src"))
    from inferencekit.data.traces import parse_trace

    out = {}
    for name, (fmt, make) in SAMPLES.items():
        data = ("\n".join(make()) + "\n").encode()
        assert len(data) < MAX_BYTES, f"{name}: {len(data)} bytes"
        trace = parse_trace(data, fmt, name, block_size=BLOCK, max_context=CONTEXT)
        failed = 3 if fmt == "burstgpt" else 0
        assert trace.skipped == {"over_context": 0, "no_output": failed, "no_input": 0}, (name, trace.skipped)
        assert trace.reordered == 0, name
        out[name] = data
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = ap.parse_args(argv)
    files = build()
    if args.check:
        stale = [n for n, data in files.items() if not (OUT / n).is_file() or (OUT / n).read_bytes() != data]
        for n in stale:
            print(f"{OUT / n}: differs from what this script builds", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for n, data in files.items():
        (OUT / n).write_bytes(data)
        print(f"{OUT / n}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
