"""What the live gates send: the probe plan (pure; no request is sent here).

A probe is a ``shapes.ProbeRecord``: ``id``, ``kind``, ``key`` (members of a pair or group share it),
``meta``, ``endpoint`` and ``body``; the collector adds ``reply`` (``gates/probes/collect.py``) and the
judges read the result (``gates/judges/<gate>.py``). Kinds and what each gate uses (each gate's row in
``gates.GATES`` lists its kinds):

==================  ========================================================================
caching             ``cache_first`` → ``cache_repeat`` (same prompt, same key); ``cache_control_a`` →
                    ``cache_control_b`` (a pair's text under two more tags: both first-seen); ``echo_orig`` →
                    ``echo_perturbed`` (the string to echo changed in one character)
token_count         ``count`` (greedy, token ids / logprob entries asked, so three counts exist)
output_length       ``ignore_eos`` (exactly ``max_tokens`` asked)
hidden_probes       ``greedy``, ``sample_a``, ``sample_a2`` (same seed), ``sample_b`` per key;
                    ``logprobs`` (top-5 logprobs, greedy)
rare_tokens         ``rare`` (echo a rare string between random nonces), ``rare_reference``
==================  ========================================================================

Probe keys start with a letter per family, so ids never clash across gates: ``w`` warm-up, ``c`` cache
pairs, ``k`` control pairs, ``e`` echo pairs, ``n`` count, ``l`` exact length, ``s`` sampling groups, ``p``
logprobs, ``r`` rare strings (a new gate's probes take a letter not in this list).

Every prompt is drawn from the prompt set's short/medium prompts without replacement and carries a
random tag, so no probe repeats a prompt the engine saw before (except the repeats the caching gate
sends on purpose). Ordered pairs keep their order and are randomly interleaved with all other probes,
so nothing marks a request as a probe. Each caching timing pair goes out with its *control pair* (the pair's text
under two other tags that come first: two first-seen requests) as one unit of four of the interleaving, the pairs
crossed (``first, control a, repeat, control b``, or the control first): each second request follows its first
after one other request, so the repeats and the controls are sent the same way (issue 42, item 5), and none
follows a request that shares its prompt (a one-slot engine reusing the previous prompt's prefix reuses nothing).
The judge compares the repeats' speedups with the controls' (``gates/judges/caching.py``), so the engine's own drift
(the embedded engine decoded the first probes after a load at about half the rate of the later ones) and a busy
host touch both alike; until 8 Dec 2026 the timing pairs went out as one staggered block instead, which kept drift
off a pair but set the caching probes apart from the rest. The plan follows the seed's probe plan otherwise; the
random seed is fresh per run and recorded.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import inferencekit.gates.probes.text as pt
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.gates import PLANNED_GATES
from inferencekit.gates.judges.hidden_probes import SAMPLING_MIN_FAIL
from inferencekit.shapes import ProbeRecord

__all__ = ["CHAT", "ProbeSettings", "probe_pool", "prompts_needed", "plan_probes", "SAMPLING_DEFAULT",
           "SAMPLING_FLOOR", "OPTIONAL_FIELDS", "PROBE_FIXED"]

CHAT = "/v1/chat/completions"
SAMPLING_DEFAULT = 8  # hidden_probes sampling prompts (the seed's default)
SAMPLING_FLOOR = SAMPLING_MIN_FAIL  # fewer cannot FAIL an engine that ignores temperature
# Fields every probe sets itself: --extra-body may not override them.
PROBE_FIXED = frozenset({"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream",
                         "stream_options", "temperature", "top_p", "top_k", "seed", "ignore_eos", "min_tokens",
                         "logprobs", "top_logprobs", "return_token_ids", "n", "n_predict", "stop"})


@dataclass(slots=True)
class ProbeSettings:
    """How many probes of each kind, and their lengths (recorded with every gate run).

    Attributes:
        gates: the gates to plan probes for (subset of ``gates.PLANNED_GATES``).
        seed: the probe seed (drawn fresh per run by the caller and recorded).
        max_tokens: output tokens of the ordinary probes.
        echo_tokens: output tokens of the echo and rare-string probes (room for a preamble).
        cache_prompts: first/repeat pairs of the caching gate, and as many control pairs (two first-seen requests
            sent back to back the same way).
        echo_pairs: original/perturbed echo pairs of the caching gate.
        sampling_prompts: hidden_probes prompts sent greedy and sampled three times at T=1.
        count_probes, ignore_eos_probes, logprob_probes: probes of those kinds.
        rare_per_class: rare strings per class of the pool.
        top_k_off: the value that turns top-k off on this engine (``api.dialects.Dialect.top_k_off``).
        sealed_prompts: the prompt set is the user's (``--prompts FILE``), not the packaged public one: the
            ignore_eos probes then draw from it too (its short prompts first), so an engine cannot single them out
            by their fixed public questions (``SHORT_ANSWERS``).
        sampling_shrunk_from: the sampling prompts asked for (the default) when the prompt set held too few
            and fewer were planned (``gates.run.size_probes``); None when none were cut.
        sequential: send the caching gate's pairs under its sequential rules (``gates/judges/caching.py``
            ``timing_rule``/``echo_rule``) and stop a family once decided; False (``--fixed``) sends every one.
        cache_controls: plan the caching gate's control pairs (False: the timing pairs alone, judged against the
            A/A floor as before 8 Dec 2026; kept to replay runs recorded then).
        cache_bypass: the request fields of the engine's per-request prompt-cache bypass that every caching probe
            carries (``api.dialects.Dialect.cache_bypass``: llama-server ``cache_prompt``, vLLM ``cache_salt``);
            None when the engine has none (its prefix cache, if any, then serves the repeats).
    """

    gates: tuple[str, ...] = PLANNED_GATES
    seed: int = 0
    max_tokens: int = 64
    echo_tokens: int = 64
    cache_prompts: int = 6
    echo_pairs: int = 4
    sampling_prompts: int = SAMPLING_DEFAULT
    count_probes: int = 4
    ignore_eos_probes: int = 3
    logprob_probes: int = 3
    rare_per_class: int = 1
    top_k_off: int = 0
    sealed_prompts: bool = False
    sampling_shrunk_from: int | None = None
    cache_bypass: list[str] | None = None
    sequential: bool = True
    cache_controls: bool = True
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def probe_pool(prompts: Sequence[Prompt]) -> list[Prompt]:
    """The chat prompts fit for probes: short and medium buckets (all chat prompts when none are)."""
    chat = [p for p in prompts if p.is_chat]
    return [p for p in chat if p.bucket in ("short", "medium")] or chat


def prompts_needed(s: ProbeSettings) -> int:
    """Distinct prompts the plan draws: two warm-ups plus each planned gate's share."""
    g = set(s.gates)
    return (2 + (s.cache_prompts if "caching" in g else 0) + (s.count_probes if "token_count" in g else 0)
            + (s.sampling_prompts + s.logprob_probes if "hidden_probes" in g else 0)
            + (s.ignore_eos_probes if "output_length" in g and s.sealed_prompts else 0))


def _user_text(p: Prompt) -> str:
    return next((m["content"] for m in reversed(p.messages or ()) if m.get("role") == "user"
                 and isinstance(m.get("content"), str)), p.text())


# ignore_eos probes ask questions a model answers in a few tokens and then ends: an exact length is then
# only reached by generating past EOS, so an engine that drops ignore_eos (and claims the length anyway)
# shows a short stream. Written for inferencekit.
SHORT_ANSWERS = (
    "Reply with just the number: what is 7 + 5?",
    "Answer yes or no, nothing else: is ice colder than steam?",
    "One word only: what colour is a ripe banana?",
    "Give only the capital city of Italy.",
    "Reply with a single digit: how many legs does a tripod have?",
    "One word: the opposite of 'up'?",
    "Answer with one letter: which vowel comes first in the alphabet?",
    "Name just the planet we live on.",
)


class _Bodies:
    """Request bodies: the caller's extra fields, then the engine's neutral sampling fields, then what each
    probe fixes itself."""

    def __init__(self, model: str, extra: dict[str, Any], ctk: dict[str, Any], count_fields: dict[str, Any],
                 neutral: dict[str, Any]):
        self.model, self.extra, self.ctk, self.count_fields = model, {**extra, **neutral}, ctk, count_fields

    def chat(self, text: str, max_tokens: int, **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = dict(self.extra)
        body.update(model=self.model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens,
                    stream=True, stream_options={"include_usage": True}, temperature=0.0)
        if self.ctk:
            body["chat_template_kwargs"] = dict(self.ctk)
        body.update(fields)
        return body

    def counted(self, text: str, max_tokens: int, **fields: Any) -> dict[str, Any]:
        """A greedy body asking for a per-token stream (token ids or logprob entries)."""
        return self.chat(text, max_tokens, **{"logprobs": True, **self.count_fields, **fields})


# Past EOS (ignore_eos) the suppressed end token is often the top candidate. Three candidates per position keep
# the chosen token among them, so a llama-server entry that merges two tokens at a split UTF-8 character shows
# its own token's bytes (gates/records.py, merged_entries) and the output_length gate can count the merge.
MERGE_PROOF_TOP = 3


def _merge_proof(b: _Bodies) -> dict[str, Any]:
    """``top_logprobs`` raised to ``MERGE_PROOF_TOP`` where the dialect streams per-token entries with candidates
    (``top_logprobs`` ≥ 1 in its count fields); nothing otherwise."""
    top = b.count_fields.get("top_logprobs")
    return {"top_logprobs": max(top, MERGE_PROOF_TOP)} if isinstance(top, int) and top >= 1 else {}


def _probe(kind: str, key: str, body: dict[str, Any], **meta: Any) -> ProbeRecord:
    return {"id": f"{key}.{kind}", "kind": kind, "key": key, "meta": meta, "endpoint": CHAT, "body": body}


def plan_probes(prompts: Sequence[Prompt], s: ProbeSettings, *, model: str, extra: dict[str, Any] | None = None,
                ctk: dict[str, Any] | None = None, count_fields: dict[str, Any] | None = None,
                neutral: dict[str, Any] | None = None, cache_bypass: Callable[[], dict[str, Any]] | None = None
                ) -> list[ProbeRecord]:
    """Every probe of one gate run, in send order (warm-ups first, then one random interleaving).

    Args:
        prompts: the prompt set (chat prompts; short/medium ones are used).
        s: counts and lengths; ``s.seed`` decides every random choice.
        model: the model name sent.
        extra: ``--extra-body`` fields (already stripped of the fields probes fix themselves).
        ctk: chat_template_kwargs for every probe.
        count_fields: the engine dialect's fields that make the stream carry token ids / logprob entries.
        neutral: the dialect's fields that undo a distribution-changing server default (``neutral_sampling``).
        cache_bypass: the dialect's per-request prompt-cache bypass (``Dialect.cache_bypass``), called once per
            caching and rare-string probe (vLLM's salt is fresh each call) and set last in its body, over
            ``extra``: the caching gate asks whether a repeat is served from a cache the engine was told not to
            use (``gates/judges/caching.py``), so an honest engine's prompt cache left on is not a FAIL; a rare
            copy is compared with the reference engine's greedy copy, which a partial cache hit can change.

    Raises:
        OpError: the prompt set has fewer usable prompts than the plan needs.
    """
    rng = random.Random(s.seed)
    pool = probe_pool(prompts)
    need = prompts_needed(s)
    if len(pool) < need:
        raise OpError(f"the prompt set has {len(pool)} usable chat prompts (short/medium); the probes need {need} "
                      "distinct ones (use a larger --prompts set, or fewer --cache-prompts / --sampling-prompts)")
    rng.shuffle(pool)
    draw = iter(pool)
    b = _Bodies(model, dict(extra or {}), dict(ctk or {}), dict(count_fields or {}), dict(neutral or {}))

    def fresh() -> str:
        return pt.tag_prompt(_user_text(next(draw)), rng)

    gates = set(s.gates)
    warm = [_probe("warmup", f"w{i}", b.chat(fresh(), s.max_tokens)) for i in range(2)]
    chains: list[list[list[ProbeRecord]]] = []  # chains of units; a unit goes out as one contiguous run
    singles: list[ProbeRecord] = []
    echo_max = max(s.max_tokens, s.echo_tokens)
    def bypass() -> dict[str, Any]:
        return dict(cache_bypass()) if cache_bypass else {}

    if "caching" in gates:
        for i in range(s.cache_prompts):
            base = _user_text(next(draw))
            t = pt.tag_prompt(base, rng)
            pair = [_probe("cache_first", f"c{i}", b.chat(t, s.max_tokens, **bypass())),
                    _probe("cache_repeat", f"c{i}", b.chat(t, s.max_tokens, **bypass()))]
            if not s.cache_controls:
                chains.append([pair])
                continue
            # its control, sent the same way: the same text under two more tags up front, two first-seen requests
            # as alike as the pair's (no extra prompt drawn); one unit, the pairs crossed so that each second request
            # follows its first after one other request (which shares no prefix with it: a one-slot engine that
            # reuses the previous prompt's prefix, llama-cpp-python, reuses nothing), in a random order of the two
            ctl = [_probe(kind, f"k{i}", b.chat(pt.lead_tag(base, rng), s.max_tokens, **bypass()))
                   for kind in ("cache_control_a", "cache_control_b")]
            x, y = (pair, ctl) if rng.random() < 0.5 else (ctl, pair)
            chains.append([[x[0], y[0], x[1], y[1]]])
        origs, changed = [], []
        for i in range(s.echo_pairs):
            word, style = pt.nonce(rng, 16), pt.echo_style(rng)  # one style per pair: one character differs
            other = pt.perturb(word, rng)
            origs.append(_probe("echo_orig", f"e{i}", b.chat(pt.echo_prompt(word, style), echo_max, **bypass()),
                                nonce=word))
            changed.append(_probe("echo_perturbed", f"e{i}", b.chat(pt.echo_prompt(other, style), echo_max,
                                                                    **bypass()), nonce=other, orig=word))
        chains.append([[x] for x in pt.stagger(origs, changed)])  # compared by content: spread out
    if "token_count" in gates:
        singles += [_probe("count", f"n{i}", b.counted(fresh(), s.max_tokens)) for i in range(s.count_probes)]
    if "output_length" in gates:
        if s.sealed_prompts:
            questions = [fresh() for _ in range(s.ignore_eos_probes)]
        else:
            questions = [pt.tag_prompt(q, rng)
                         for q in rng.sample(SHORT_ANSWERS, min(s.ignore_eos_probes, len(SHORT_ANSWERS)))]
        singles += [_probe("ignore_eos", f"l{i}", b.counted(q, s.max_tokens, ignore_eos=True, **_merge_proof(b)))
                    for i, q in enumerate(questions)]
    if "hidden_probes" in gates:
        singles += _hidden(b, fresh, rng, s)
    if "rare_tokens" in gates:
        for i, (cls, target) in enumerate(pt.rare_targets(rng, s.rare_per_class)):
            # cold like the caching probes: the copy and its reference copy must not depend on what the prompt
            # cache held (llama-server's greedy replies differ after partial hits: docs/gates.md, rare_tokens)
            singles.append(_probe("rare", f"r{i}", b.chat(pt.echo_prompt(target, pt.echo_style(rng)), echo_max,
                                                          **bypass()),
                                  **{"class": cls, "target": target, "core": pt.rare_core(target)}))
    units = pt.interleave([*chains, *([[p]] for p in singles)], rng)
    return warm + [p for unit in units for p in unit]


def _hidden(b: _Bodies, fresh: Any, rng: random.Random, s: ProbeSettings) -> list[ProbeRecord]:
    """The hidden-probe group per sampling prompt (greedy; T=1 twice with one seed, once with another;
    top_p 1 and top-k off ask for the whole distribution) and the top-5 logprob probes."""
    out = []
    for i in range(s.sampling_prompts):
        text = fresh()
        seed_a, seed_b = rng.randrange(1, 2**31), rng.randrange(1, 2**31)
        full = {"temperature": 1.0, "top_p": 1.0, "top_k": s.top_k_off}
        out += [_probe("greedy", f"s{i}", b.chat(text, s.max_tokens)),
                _probe("sample_a", f"s{i}", b.chat(text, s.max_tokens, seed=seed_a, **full)),
                _probe("sample_a2", f"s{i}", b.chat(text, s.max_tokens, seed=seed_a, **full)),
                _probe("sample_b", f"s{i}", b.chat(text, s.max_tokens, seed=seed_b, **full))]
    out += [_probe("logprobs", f"p{i}", b.chat(fresh(), s.max_tokens, logprobs=True, top_logprobs=5))
            for i in range(s.logprob_probes)]
    return out


# Fields a server may refuse with HTTP 400 that a probe can live without (dropped, resent, recorded).
OPTIONAL_FIELDS = ("stream_options", "top_k", "top_p", "seed", "return_token_ids", "top_logprobs",
                   "chat_template_kwargs", "repeat_penalty")
