"""Token-exact random prompts built with the server's tokenizer, and the chat template's overhead.

Like vLLM's ``--dataset-name random`` (``vllm/benchmarks/datasets.py::RandomDataset``, which decodes
random token ids and re-encodes, accepting a mismatch), but exact: every prompt's user content
encodes to exactly ``input_len`` tokens with the given tokenizer, checked by encoding it.

Method:

1. vocabulary — the words of the built-in list ``WORDS`` (common lowercase English) for which
   ``" " + word`` is one token. Words are tested 64 at a time: ``" w1 w2 ... wk"`` must encode to
   ``k`` tokens; a failing group is halved until single words decide (12 requests for SmolLM2);
2. first words — the vocabulary in a seeded order, each tested alone (``encode(word)`` is one
   token) until there is one per prompt. Each prompt starts with a different one, so no two prompts
   share their first token and a prefix cache gets nothing (beyond the chat template). With more
   prompts than such words, the first *two* tokens form a distinct pair instead;
3. prompt ``i`` = its first word + ``" word"`` × (``input_len`` - 1), drawn with an RNG seeded from
   ``(seed, input_len, bucket)`` — sets of different lengths do not share long prefixes either;
4. each prompt is encoded; words are removed from / added at the end until the count is exact
   (at most ``_ROUNDS`` rounds, else ``OpError``); first tokens are checked distinct afterwards.

Tokenizer calls go out ``_CONCURRENCY`` at a time (it is HTTP for an engine tokenizer). The same
seed and tokenizer give the same prompts.
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from inferencekit.api.client import Client
from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError

__all__ = ["random_prompts", "chat_template_overhead", "word_vocabulary", "WORDS", "MIN_WORDS"]

_T = TypeVar("_T")
_CONCURRENCY = 8  # tokenizer requests in flight
_ROUNDS = 12  # repair rounds per prompt
MIN_WORDS = 32  # fewer single-token words than this: the tokenizer is not suited
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$")
_PROBE_LEN = 16  # tokens of user content in the overhead probe

WORDS: tuple[str, ...] = tuple(dict.fromkeys("""
able about above across act add after again against age ago agree air all almost alone along already
also always among and animal answer any appear apple area arm army around art ask away baby back bad
ball bank base bear beat bed before began begin behind being bell below best better between big bird
black blood blue board boat body bone book born both bottom box boy break bring brother brown build
burn busy buy call came camp can capital car card care carry case cat catch cause cell center certain
chair chance change charge check child choose church circle city class clean clear climb clock close
cloud coast coat cold color come common cook cool copy corn corner cost could count country course
cover cow cross crowd cry cup current cut dance dark day dead deal dear death decide deep degree
design desk did die differ direct do doctor does dog dollar door double down draw dream dress drink
drive drop dry during duck each ear early earth east easy eat edge effect egg eight either else end
enemy energy enough enter equal even evening event ever every exact example except eye face fact fair
fall family famous far farm fast father fear feel feet few field fight figure fill final find fine
finger finish fire first fish fit five floor flow flower fly follow food foot for force forest form
forward found four free fresh friend from front fruit full fun game garden gas gate gave general get
girl give glad glass gold gone good got govern grass gray great green ground group grow guess guide
gun had hair half hall hand happen happy hard has hat have head hear heard heart heat heavy held help
her here high hill him his history hit hold hole home hope horse hot hour house how huge human hunt
hurry ice idea inch include iron island join joy judge just keep kept key kill kind king kitchen
knew know lady lake land language large last late laugh law lay lead learn least leave left leg less
let letter level lie life lift light like line list listen little live long look lost lot loud love low
machine made main major make man many map mark market mass master match matter may mean meat meet
member men metal middle might mile milk mind mine minute miss modern moment money month moon more
morning most mother mountain mouth move much music must name nation nature near neck need never new
next night nine noise none noon nor north nose note nothing notice now number ocean off offer office
often oil old once one only open order other our out over own page paint pair paper park part party
pass past path pay people perhaps person pick picture piece place plan plant play please point poor
position power press pretty price print problem product program pull push put question quick quiet
race radio rain raise reach read ready real reason record red region remember repeat reply rest
result rich ride right ring rise river road rock roll room root rope rose round row rule run safe
said sail salt same sand save saw say school science sea season seat second see seed seem self sell
send sense serve set seven several shall shape share sharp she ship shoe shop short should shoulder
show side sign silver simple since sing single sister sit six size skin sky sleep slow small smell
smile snow soft soil soldier some son song soon sound south space speak special speed spell spend
spring square stand star start state station stay steel step stick still stone stood stop store
story straight strange stream street strong student study subject success such sudden sugar suit
summer sun supply sure surface sweet swim system table tail take talk tall teach team tell ten term
test than thank that the their them then there these they thick thin thing think third this those
though thought three through throw tie time tiny tire today together told tone too took tool top
total touch toward town track trade train travel tree trip trouble true try turn twenty two type
under unit until upon use usual valley value very view village visit voice wait walk wall want war
warm wash watch water wave way wear weather week weight well went were west what wheel when where
which while white who whole why wide wife wild will win wind window wing winter wire wish with woman
wonder wood word work world would write wrong yard year yellow yes yet you young
""".split()))


async def _bounded(calls: Sequence[Callable[[], Awaitable[_T]]], limit: int = _CONCURRENCY) -> list[_T]:
    sem = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[_T]]) -> _T:
        async with sem:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def _passing(tokenizer: Tokenizer, words: list[str], render: Callable[[list[str]], str],
                   expected: Callable[[int], int]) -> list[str]:
    """The words of ``words`` that pass a one-token test, found by testing groups and halving failures."""
    ok: set[str] = set()
    pending = [words[i:i + 64] for i in range(0, len(words), 64)]
    while pending:
        groups = pending
        counts = await _bounded([functools.partial(tokenizer.encode, render(g)) for g in groups])
        pending = []
        for g, ids in zip(groups, counts):
            if len(ids) == expected(len(g)):
                ok.update(g)
            elif len(g) > 1:
                pending += [g[:len(g) // 2], g[len(g) // 2:]]
    return [w for w in words if w in ok]


async def word_vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The words of ``WORDS`` that are one token after a space (``" word"``), in ``WORDS`` order.

    Raises:
        OpError: fewer than ``MIN_WORDS`` words qualify (the tokenizer does not split on spaces).
        TokenizeError: the tokenizer failed.
    """
    rest = await _passing(tokenizer, list(WORDS), lambda g: "".join(" " + w for w in g), lambda k: k)
    if len(rest) < MIN_WORDS:
        raise OpError(f"tokenizer {tokenizer.source}: only {len(rest)} of {len(WORDS)} common English words are "
                      f"single tokens after a space (at least {MIN_WORDS} are needed to build exact random prompts)")
    return rest


async def _first_words(tokenizer: Tokenizer, candidates: list[str], need: int) -> list[str]:
    """Up to ``need`` words of ``candidates`` (in order) that are one token at the very start of a text."""
    found: list[str] = []
    pos = 0
    while len(found) < need and pos < len(candidates):
        batch = candidates[pos:pos + max(16, (need - len(found)) * 5 // 4)]
        pos += len(batch)
        ids = await _bounded([functools.partial(tokenizer.encode, w) for w in batch])
        found += [w for w, t in zip(batch, ids) if len(t) == 1]
    return found[:need]


def _text(words: list[str]) -> str:
    return words[0] + "".join(" " + w for w in words[1:])


async def _exact(tokenizer: Tokenizer, words: list[str], keep: int, target: int, rest: list[str],
                 rng: random.Random) -> tuple[str, list[int]]:
    """Trim or extend ``words`` (never its first ``keep``) until its text encodes to ``target`` tokens."""
    for _ in range(_ROUNDS):
        text = _text(words)
        ids = await tokenizer.encode(text)
        diff = len(ids) - target
        if diff == 0:
            return text, ids
        if diff > 0:
            cut = min(diff, len(words) - keep)
            if cut == 0:
                break
            del words[len(words) - cut:]
        else:
            words.extend(rng.choices(rest, k=-diff))
    raise OpError(f"tokenizer {tokenizer.source}: could not build a prompt of exactly {target} tokens in "
                  f"{_ROUNDS} rounds (the last attempt had {len(ids)}); its word tokens do not add up")


async def random_prompts(n: int, input_len: int, *, seed: int, tokenizer: Tokenizer, bucket: str = "random",
                         max_tokens: int | None = None) -> list[Prompt]:
    """``n`` chat prompts whose user content is exactly ``input_len`` tokens for ``tokenizer``.

    Args:
        n: prompts (≥ 1).
        input_len: tokens of user content per prompt (≥ 1), counted without special tokens; the chat
            template adds ``chat_template_overhead`` more on the server.
        seed: RNG seed; the same seed and tokenizer give the same prompts.
        tokenizer: the server's tokenizer (``EngineTokenizer``) or the same one loaded locally.
        bucket: bucket name (a safe name); ids are ``<bucket>-<input_len>-<i>``.
        max_tokens: set on every prompt (None: the caller decides).

    Returns:
        Prompts with one user message each, in order ``i = 0 .. n-1``. No two share their first token
        (their first two when ``n`` exceeds the single-token first words: 680 of ``WORDS`` for SmolLM2).

    Raises:
        OpError: bad arguments; a tokenizer without enough single-token words; ``n`` too large for
            distinct prefixes at this ``input_len``; a prompt that cannot be made exact.
        TokenizeError: the tokenizer failed.
    """
    for name, v in (("number of prompts", n), ("input length", input_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise OpError(f"random prompts: the {name} must be a positive integer, got {v!r}")
    if not isinstance(bucket, str) or not _SAFE.match(bucket):
        raise OpError(f"random prompts: bucket {bucket!r} must be a safe name (letters, digits, _ . -)")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise OpError(f"random prompts: max_tokens must be a positive integer, got {max_tokens!r}")
    rest = await word_vocabulary(tokenizer)
    rng = random.Random(f"{seed}:{input_len}:{bucket}")
    order = rng.sample(rest, len(rest))
    first = await _first_words(tokenizer, order, n)
    if len(first) == n:
        prefixes = [[w] for w in first]
    elif input_len >= 2 and n <= len(first) * len(rest):
        picks = rng.sample(range(len(first) * len(rest)), n)
        prefixes = [[first[p // len(rest)], rest[p % len(rest)]] for p in picks]
    else:
        most = len(first) if input_len < 2 else len(first) * len(rest)
        raise OpError(f"random prompts: at most {most} prompts of {input_len} tokens can start differently "
                      f"with tokenizer {tokenizer.source}; asked for {n}")
    seeds = [rng.getrandbits(64) for _ in range(n)]

    def build(i: int) -> Callable[[], Awaitable[tuple[str, list[int]]]]:
        async def go() -> tuple[str, list[int]]:
            r = random.Random(seeds[i])
            words = prefixes[i] + r.choices(rest, k=max(0, input_len - len(prefixes[i])))
            return await _exact(tokenizer, words, len(prefixes[i]), input_len, rest, r)
        return go

    built = await _bounded([build(i) for i in range(n)])
    width = len(prefixes[0])
    heads = {tuple(ids[:width]) for _, ids in built}
    if len(heads) != n:
        raise OpError(f"tokenizer {tokenizer.source}: {n - len(heads)} random prompts share their first "
                      f"{width} token(s) although their first words differ; its tokens do not add up")
    return [Prompt(id=f"{bucket}-{input_len}-{i}", bucket=bucket,
                   messages=({"role": "user", "content": text},), max_tokens=max_tokens)
            for i, (text, _ids) in enumerate(built)]


async def chat_template_overhead(client: Client, model: str, tokenizer: Tokenizer) -> int:
    """Prompt tokens the server's chat template adds around one user message (≥ 0).

    Sends one non-streamed ``/v1/chat/completions`` request (``max_tokens: 1``) whose user content is
    a random prompt of exactly 16 tokens and returns ``usage.prompt_tokens - 16``. The count includes
    any default system prompt and BOS the template adds.

    Raises:
        OpError: the request failed, the reply has no integer ``usage.prompt_tokens``, or it is below 16.
        TokenizeError: the tokenizer failed.
    """
    probe = (await random_prompts(1, _PROBE_LEN, seed=0, tokenizer=tokenizer, bucket="overhead"))[0]
    body: dict[str, Any] = {"model": model, "messages": list(probe.messages or ()), "max_tokens": 1, "stream": False}
    reply, err = await client.post_json("/v1/chat/completions", body, timeout_s=120)
    if err is not None:
        raise OpError(f"measuring the chat template overhead: the chat request failed: {err}")
    usage = reply.get("usage") if isinstance(reply, dict) else None
    used = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(used, int) or isinstance(used, bool):
        raise OpError("measuring the chat template overhead: the server's non-streamed chat reply has no "
                      f"usage.prompt_tokens (usage = {str(usage)[:200]}); prompt token counts cannot be checked "
                      "on this server")
    if used < _PROBE_LEN:
        raise OpError(f"measuring the chat template overhead: the server counted {used} prompt tokens for a "
                      f"message of {_PROBE_LEN} tokens by tokenizer {tokenizer.source}; is it the same model?")
    return used - _PROBE_LEN
