"""The structured-output and tool-call requests of ``bench serve --structured N`` (the API contract under load).

N requests, alternating (request 0, 2, 4, … JSON; 1, 3, 5, … a tool call: ⌈N/2⌉ and ⌊N/2⌋), each greedy (T=0),
streamed with usage, sent alone after the warm-up and again inside every load level (``gates/probes/load.py``
deals them; ``gates/judges/structured_load.py`` judges them). Every request's ``meta`` carries what the judge needs,
so a run dir is judged from its own files:

- kind ``structured_json``: a prompt asking for a JSON object (the contract probe's ``JSON_PROMPTS``, then 96 more
  of the same form) with ``response_format`` ``json_schema`` and the contract's ``SCHEMA`` (name, age) where the
  engine takes it (``Dialect.json_schema``), else ``json_object``; ``meta``: ``format``, ``schema`` (None for
  ``json_object``: the reply must then be a JSON object, nothing more);
- kind ``tool_call``: one BFCL sample of a single-call subset (``TOOL_SUBSETS``: one function, one expected call,
  so the path below is well defined), its call asked for through one of two paths, recorded as ``meta.path``:

  * ``tool_choice``: ``tools`` and a ``tool_choice`` naming the ground truth's function, where the engine is
    known to honour a named tool_choice (``Dialect.named_tool_choice``: llama-cpp-python, vLLM);
  * ``response_format``: elsewhere (llama-server builds no tool-call grammar for SmolLM2's template and answers a
    named tool_choice with plain text), a ``json_schema`` that constrains the reply to ``{"name": <one of the
    sample's function names>, "arguments": <that function's parameters, converted to JSON Schema>}``, the
    functions listed in a system message (no ``tools`` field: the template would render them its own way);

  ``meta``: ``sample``, ``subset``, ``functions`` (BFCL's docs, as the AST checker reads them), ``ground_truth``
  (BFCL's possible answer), ``renamed`` (OpenAI name → BFCL name) and ``path``.

The BFCL draw takes evenly spaced entries of each subset (``floor((j + 0.5) * n / k)``, as ``data/bfcl.py``
``draw``), alternating the subsets; nothing is random, so a resumed run plans the same requests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from inferencekit.data.bfcl import bfcl_data_dir, load_answers, load_subset, to_openai_tools
from inferencekit.gates.judges.structured_load import JSON_KIND, TOOL_KIND
from inferencekit.gates.probes.contract import JSON_PROMPTS, SCHEMA
from inferencekit.gates.probes.order import order_body
from inferencekit.shapes import ProbeRecord

__all__ = ["TOOL_SUBSETS", "json_prompts", "structured_pool_size", "structured_requests", "tool_samples"]

TOOL_SUBSETS = ("simple_python", "live_simple")
CHAT = "/v1/chat/completions"
_ROLES = ("teacher", "pilot", "chef", "nurse", "farmer", "painter", "doctor", "student", "baker", "sailor", "poet",
          "engineer")
_PLACES = ("Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Delhi", "Quebec")
_TOOL_SYSTEM = ("You call functions. Reply with the one call the user's request needs, as a JSON object "
                '{"name": <function name>, "arguments": {<argument>: <value>, ...}} and nothing else. '
                "The functions: ")


def json_prompts() -> tuple[str, ...]:
    """The structured-output prompts, in order: the contract probe's ``JSON_PROMPTS``, then one person per role and
    place (distinct prompts, so greedy replies alone are not copies of one another)."""
    return (*JSON_PROMPTS, *(f"Describe a {role} from {place} as JSON with name and age."
                             for place in _PLACES for role in _ROLES))


@cache
def _tool_pool(data_dir: str) -> tuple[tuple[dict[str, Any], list[dict[str, Any]], str], ...]:
    """``(entry, ground truth, subset)`` of every single-function, single-call entry of ``TOOL_SUBSETS``, the subsets
    alternating in draw order (``tool_samples`` picks from it)."""
    groups = []
    for subset in TOOL_SUBSETS:
        answers = load_answers(Path(data_dir), subset)
        fit = []
        for e in load_subset(Path(data_dir), subset):
            truth = answers.get(e["id"])
            fns = e["function"]
            if len(fns) == 1 and isinstance(truth, list) and len(truth) == 1 and isinstance(truth[0], dict) \
                    and list(truth[0]) == [fns[0].get("name")]:
                fit.append((e, truth, subset))
        groups.append(fit)
    return tuple(x for group in groups for x in group)


def _positions(n: int, k: int) -> list[int]:
    return [(2 * j + 1) * n // (2 * k) for j in range(k)]


def tool_samples(k: int, data_dir: str | None = None) -> list[tuple[dict[str, Any], list[dict[str, Any]], str]]:
    """``k`` BFCL samples ``(entry, ground truth, subset)``: ⌈k/2⌉ evenly spaced from the first subset, ⌊k/2⌋ from
    the second, alternating.

    Raises:
        OpError: bfcl-eval is not installed and no ``data_dir`` given, or its files are unreadable.
        ValueError: ``k`` exceeds a subset's fit entries.
    """
    pool = _tool_pool(str(bfcl_data_dir(data_dir)))
    by_subset = [[x for x in pool if x[2] == s] for s in TOOL_SUBSETS]
    want = [(k + 1) // 2, k // 2]
    for (subset, group), n in zip(zip(TOOL_SUBSETS, by_subset), want):
        if n > len(group):
            raise ValueError(f"BFCL {subset} has {len(group)} single-call entries, {n} asked")
    picked = [[g[i] for i in _positions(len(g), n)] if n else [] for g, n in zip(by_subset, want)]
    return [g[i] for i in range(max(want)) for g in picked if i < len(g)]


def structured_pool_size() -> int:
    """The largest N ``--structured`` takes: twice the JSON prompts (the tool calls never run out first: BFCL's
    single-call subsets hold hundreds)."""
    return 2 * len(json_prompts())


def _json_request(j: int, prompt: str, *, json_schema: bool, model: str, max_tokens: int, extra: Mapping[str, Any],
                  ctk: Mapping[str, Any]) -> ProbeRecord:
    rf: dict[str, Any] = ({"type": "json_schema", "json_schema": {"name": "record", "schema": SCHEMA}}
                          if json_schema else {"type": "json_object"})
    rid = f"json-{j:03d}"
    return {"id": rid, "kind": JSON_KIND, "key": rid, "endpoint": CHAT,
            "meta": {"format": rf["type"], "schema": SCHEMA if json_schema else None, "prompt": j},
            "body": order_body({"messages": [{"role": "user", "content": prompt}], "response_format": rf},
                               model=model, max_tokens=max_tokens, extra=extra, ctk=ctk)}


def _call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call to the (single) function of ``tools``: ``{"name": enum, "arguments": its
    parameters}``, both required, nothing else."""
    fn = tools[0]["function"]
    return {"type": "object", "properties": {"name": {"type": "string", "enum": [t["function"]["name"] for t in tools]},
                                             "arguments": fn["parameters"]},
            "required": ["name", "arguments"], "additionalProperties": False}


def _with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` as the system message (before the sample's own system text, when it has one)."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system":
        msgs[0]["content"] = f"{text}\n\n{msgs[0].get('content') or ''}"
        return msgs
    return [{"role": "system", "content": text}, *msgs]


def _tool_request(entry: dict[str, Any], truth: list[dict[str, Any]], subset: str, *, named: bool, model: str,
                  max_tokens: int, extra: Mapping[str, Any], ctk: Mapping[str, Any]) -> ProbeRecord:
    tools, renamed = to_openai_tools(entry["function"])
    messages = entry["question"][0]
    fields: dict[str, Any]
    if named:
        fields = {"messages": [dict(m) for m in messages], "tools": tools,
                  "tool_choice": {"type": "function", "function": {"name": tools[0]["function"]["name"]}}}
    else:
        listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
        fields = {"messages": _with_system(messages, _TOOL_SYSTEM + listed),
                  "response_format": {"type": "json_schema",
                                      "json_schema": {"name": "function_call", "schema": _call_schema(tools)}}}
    rid = f"tool-{entry['id']}"
    return {"id": rid, "kind": TOOL_KIND, "key": rid, "endpoint": CHAT,
            "meta": {"path": "tool_choice" if named else "response_format", "sample": entry["id"], "subset": subset,
                     "functions": entry["function"], "ground_truth": truth, "renamed": renamed},
            "body": order_body(fields, model=model, max_tokens=max_tokens, extra=extra, ctk=ctk)}


def structured_requests(n: int, *, model: str, max_tokens: int, extra: Mapping[str, Any], ctk: Mapping[str, Any],
                        named_tool_choice: bool, json_schema: bool, bfcl_data: str | None = None) -> list[ProbeRecord]:
    """The ``n`` requests (module docstring), in order: JSON, tool call, JSON, …

    Args:
        named_tool_choice, json_schema: what the engine is known to take (``api/dialects.py`` ``Dialect``).
        bfcl_data: a folder of BFCL files (None: the installed bfcl-eval's).

    Raises:
        ValueError: ``n`` above ``structured_pool_size``.
        OpError: tool calls asked (``n`` ≥ 2) and no BFCL data (bfcl-eval not installed).
    """
    prompts = json_prompts()
    n_json, n_tool = (n + 1) // 2, n // 2
    if n_json > len(prompts):
        raise ValueError(f"--structured {n}: at most {structured_pool_size()} ({len(prompts)} JSON prompts)")
    jsons = [_json_request(j, prompts[j], json_schema=json_schema, model=model, max_tokens=max_tokens, extra=extra,
                           ctk=ctk) for j in range(n_json)]
    tools = [_tool_request(e, truth, subset, named=named_tool_choice, model=model, max_tokens=max_tokens, extra=extra,
                           ctk=ctk) for e, truth, subset in (tool_samples(n_tool, bfcl_data) if n_tool else [])]
    return [r for i in range(n_json) for r in (jsons[i], *(tools[i:i + 1]))]
