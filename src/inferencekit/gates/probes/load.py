"""The gates' requests for a load: hidden probes and known answers, planned here and sent by ``bench serve``.

The load generator sends what it is handed (``shapes.ExtraRequests``) and judges none of it; the
gates judge the replies from the run dir (``gates/check.py``):

- hidden probes (``bench serve --probes``): the hidden_probes gate's groups (greedy, T=1 twice with one
  seed, once with another; top-5 logprob probes) from the packaged dev prompts, tagged at random with a
  seed derived from the run's, dealt to the load levels round robin, one group at a time, into
  ``outputs/<engine>/probes/``;
- known answers (``bench serve --kat N``): N greedy requests from the dev set's short and medium chat
  prompts (in file order), sent alone after the warm-up into ``kat/alone/`` and again inside the
  heaviest level into ``kat/load/``; the order gate asks whether each reply under load is byte-identical
  to its reply alone.
- structured requests (``bench serve --structured N``): N greedy JSON-mode and tool-call requests
  (``gates/probes/structured.py``), sent alone after the warm-up into ``structured/alone/`` and again inside
  every level into ``structured/load-<level>/`` (``rundir.structured_folder``); the contract gate's run-dir part
  compares each level's schema-valid and AST-correct rates with the rates alone.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.gates.probes.order import order_body
from inferencekit.gates.probes.plan import OPTIONAL_FIELDS, ProbeSettings, plan_probes, probe_pool
from inferencekit.gates.probes.structured import structured_requests
from inferencekit.rundir import KAT_ALONE, KAT_LOAD, PROBES_FOLDER, structured_folder
from inferencekit.shapes import ExtraRequests, ProbeRecord

__all__ = ["HIDDEN_SAMPLING_PROMPTS", "KAT_LOGPROBS", "hidden_probe_bodies", "kat_load_fields", "kat_pool_size",
           "kat_probes", "load_extras"]

HIDDEN_SAMPLING_PROMPTS = 4  # sampling groups a load carries (the gate's floor: enough to FAIL an ignored temperature)
# what a known-answer request asks besides the greedy reply: the chosen token's logprob and its runner-up at every
# position, so a reply that differs under load is judged against the run's own noise (gates/judges/order_noise.py);
# the load around it asks the same (``kat_load_fields``)
KAT_LOGPROBS: dict[str, Any] = {"logprobs": True, "top_logprobs": 2}


def _dev_pool() -> list[Prompt]:
    return probe_pool(load_prompt_set("dev").prompts)


def kat_pool_size() -> int:
    """How many known-answer prompts the dev set offers (its short and medium chat prompts)."""
    return len(_dev_pool())


def kat_probes(n: int, *, model: str, max_tokens: int, extra: Mapping[str, Any], ctk: Mapping[str, Any]
               ) -> list[ProbeRecord]:
    """The ``n`` known-answer requests (kind ``kat``), one greedy streamed body each.

    Raises:
        ValueError: the dev set has fewer than ``n`` chat prompts fit for probes.
    """
    pool = _dev_pool()
    if n > len(pool):
        raise ValueError(f"--kat {n}: the dev set has {len(pool)} short/medium chat prompts")
    return [{"id": f"kat-{p.id}", "kind": "kat", "key": p.id, "meta": {}, "endpoint": "/v1/chat/completions",
             "body": {**order_body({"messages": [dict(m) for m in p.messages or ()]}, model=model,
                                   max_tokens=max_tokens, extra=extra, ctk=ctk), **KAT_LOGPROBS}} for p in pool[:n]]


def kat_load_fields(count_fields: Mapping[str, Any]) -> dict[str, Any]:
    """The logprob fields every load request carries when known answers ride in it: ``KAT_LOGPROBS`` merged with
    the dialect's ``count_fields`` (the larger ``top_logprobs``), so a known-answer request looks like the load
    around it and the load's own count fields stay."""
    out: dict[str, Any] = {**count_fields, **KAT_LOGPROBS}
    top = count_fields.get("top_logprobs")
    if isinstance(top, int) and top > KAT_LOGPROBS["top_logprobs"]:
        out["top_logprobs"] = top
    return out


def hidden_probe_bodies(prompts: Sequence[Prompt], *, seed: int, model: str, max_tokens: int,
                        sampling_prompts: int = HIDDEN_SAMPLING_PROMPTS, logprob_probes: int = 3, top_k_off: int = 0,
                        extra: dict[str, Any] | None = None, ctk: dict[str, Any] | None = None,
                        neutral: dict[str, Any] | None = None) -> list[ProbeRecord]:
    """The hidden probes of a load: the hidden_probes gate's groups, without the warm-ups.

    Raises:
        OpError: the prompt set is too small for the groups.
    """
    s = ProbeSettings(gates=("hidden_probes",), seed=seed, max_tokens=max_tokens, sampling_prompts=sampling_prompts,
                      logprob_probes=logprob_probes, top_k_off=top_k_off)
    return [p for p in plan_probes(prompts, s, model=model, extra=extra, ctk=ctk, neutral=neutral)
            if p["kind"] != "warmup"]


def _hidden_pool(prompts: Sequence[Prompt] | None, dataset: str) -> tuple[Sequence[Prompt], str]:
    """The prompts the hidden probes draw from, and ``meta.prompt_source``: the load's own set when it is a user's
    file or ShareGPT (not the packaged dev set, nor random tokens) and holds enough chat prompts (``"load"``: an
    engine cannot tell the probes from the load), else the dev set (``"dev"`` when the load is the dev set too,
    ``"dev-fallback"`` when the load's set was too small: a fallback the hidden_probes gate states)."""
    if prompts is not None and dataset not in ("dev", "random"):  # random token text makes no sampling prompt
        need = HIDDEN_SAMPLING_PROMPTS + 3
        if len(probe_pool(prompts)) >= need:
            return prompts, "load"
        return load_prompt_set("dev").prompts, "dev-fallback"
    return load_prompt_set("dev").prompts, "dev"


def load_extras(*, levels: Sequence[str], heaviest: str, probes: bool, kat: int, kat_max_tokens: int, seed: int,
                model: str, max_tokens: int | None, extra: dict[str, Any], ctk: dict[str, Any],
                neutral: Mapping[str, Any], top_k_off: int, prompts: Sequence[Prompt] | None = None,
                dataset: str = "dev", structured: int = 0, structured_max_tokens: int = 128,
                named_tool_choice: bool = False, json_schema: bool = True,
                count_fields: Mapping[str, Any] | None = None) -> ExtraRequests:
    """The requests the gates mix into one ``bench serve`` run.

    Args:
        levels: the run's level labels, in run order; ``heaviest``: the one the known answers go into under load
            (``bench.plan.heaviest_level``).
        probes: mix the hidden probes in; ``kat``: known-answer requests (0: none), ``kat_max_tokens`` each.
        seed: the run's seed (the probes' tags derive from it, so a resumed run plans the same probes).
        model, max_tokens, extra, ctk: what every request carries (``max_tokens`` None: 64 for the probes).
        neutral, top_k_off: the engine dialect's neutral sampling fields and its top-k-off value.
        prompts, dataset: the load's own prompts and the name of their set: a user's set (``--prompts``, sealed)
            feeds the hidden probes too when it is large enough (``_hidden_pool``).
        structured: structured-output and tool-call requests (0: none), ``structured_max_tokens`` each, sent alone
            and inside every level; ``named_tool_choice``, ``json_schema``: what the engine's dialect is known to take
            (``gates/probes/structured.py`` picks each request's path by them).
        count_fields: the dialect's per-token count fields the load sends (``kat_load_fields`` merges them into the
            known answers' logprob fields, returned as ``load_fields``).

    Raises:
        OpError: the dev set is too small for the probes; structured tool calls asked and bfcl-eval not installed.
        ValueError: ``kat`` exceeds the dev set's known-answer prompts, or ``structured`` the structured prompts.
    """
    out: ExtraRequests = {"alone": [], "by_level": {label: [] for label in levels}, "optional": list(OPTIONAL_FIELDS)}
    if probes:
        pool, source = _hidden_pool(prompts, dataset)
        planned = hidden_probe_bodies(pool, seed=random.Random(f"{seed}:probes").getrandbits(62), model=model,
                                      max_tokens=max_tokens or 64, top_k_off=top_k_off, extra=extra, ctk=ctk,
                                      neutral=dict(neutral))
        groups: dict[str, list[ProbeRecord]] = {}
        for p in planned:
            groups.setdefault(p["key"], []).append({**p, "folder": PROBES_FOLDER,
                                                    "meta": {**(p.get("meta") or {}), "prompt_source": source}})
        for i, group in enumerate(groups.values()):
            out["by_level"][levels[i % len(levels)]].extend(group)
    if kat:
        fields = out["load_fields"] = kat_load_fields(count_fields or {})
        # the known answers carry the load's own fields too (vLLM's return_token_ids), so nothing marks them
        known = kat_probes(kat, model=model, max_tokens=kat_max_tokens, extra=extra, ctk=ctk)
        for p in known:
            p["body"] = {**p["body"], **fields}
        out["alone"] = [{**p, "folder": KAT_ALONE} for p in known]
        out["by_level"][heaviest].extend({**p, "folder": KAT_LOAD} for p in known)
    if structured:
        asked = structured_requests(structured, model=model, max_tokens=structured_max_tokens, extra=extra, ctk=ctk,
                                    named_tool_choice=named_tool_choice, json_schema=json_schema)
        out["alone"] += [{**p, "folder": structured_folder(None)} for p in asked]
        for label in levels:
            out["by_level"][label].extend({**p, "folder": structured_folder(label)} for p in asked)
    return out
