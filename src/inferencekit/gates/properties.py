"""The closed list of properties an honest engine may lack (docs/properties.md holds the same list).

A property is not cheating: an engine that lacks it still did the work it claims and returned the model's
output. A gate that sees one reports it on its own line (``Gate.properties``), shown by its effect in that
run, and it neither FAILs the gate nor makes it UNPROVEN. No property excuses a *claim*: a count in
``usage``, a ``finish_reason`` or a length the stream does not support stays an integrity check.

``--strict`` (``verify --strict``, and ``gates order``, which always judges byte for byte) gives each property
back the verdict the seed gave it: ``strict`` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PROPERTIES", "Property", "shown"]


@dataclass(frozen=True, slots=True)
class Property:
    """One listed property.

    Attributes:
        name: its name on the record and the card.
        lacks: what the engine does not do, in a few words.
        effect: what in the run shows it.
        strict: the verdict ``--strict`` gives a gate that shows it (the seed's rule).
        seen_on: engines it was seen on, with the run that showed it.
    """

    name: str
    lacks: str
    effect: str
    strict: str
    seen_on: tuple[str, ...]


PROPERTIES: dict[str, Property] = {p.name: p for p in (
    Property("not-batch-invariant",
             "the same greedy request gets the same reply alone and inside a batch",
             "a known-answer reply under load first differs from its reply alone at a near-tie: the alone copy's "
             "margin between the two tokens is one the run's own margin changes reach (gates/judges/order_noise.py)",
             "FAIL",
             ("llama-server --parallel 4 (llama.cpp vendored in llama-cpp-python 0.3.36, CPU, F32 logits): "
              "verify quick, 7 Dec 2026",)),
    Property("ignores-ignore-eos",
             "generate exactly max_tokens tokens when asked with ignore_eos",
             "an ignore_eos reply ended at EOS (finish_reason 'stop') before max_tokens, its counts consistent, on an "
             "engine not known to honour ignore_eos (gates/judges/output_length.py); on one known to honour it "
             "(llama-server, vLLM) the same reply FAILs",
             "UNPROVEN",
             ("llama-cpp-python 0.3.36 (the embedded engine): verify quick, 6-7 Dec 2026",)),
    Property("drops-n",
             "return n choices when asked for n > 1",
             "the contract's n item (n 2) came back with one choice on an engine documented to drop n "
             "(api/dialects.py ignores; gates/judges/contract.py); on any other engine the same reply FAILs the item",
             "UNPROVEN",
             ("llama-cpp-python 0.3.36 (the embedded engine): verify quick, 6-7 Dec 2026",)),
    Property("template-without-tools",
             "call tools: the served chat template shows the model no tools",
             "the contract's accounting item counted the same messages alike with and without tools (the template "
             "renders none), and no forcing tool_choice (named, required) returned a call "
             "(gates/judges/contract_structured.py); a call of the wrong function, or one with tool_choice none, "
             "still FAILs",
             "UNPROVEN",
             ("llama-server (llama.cpp vendored in llama-cpp-python 0.3.36) serving SmolLM2-135M-Instruct: verify "
              "quick, 7 Dec 2026",)),
    Property("no-json-schema",
             "constrain a reply to a JSON schema (response_format json_schema)",
             "every contract request with response_format json_schema was refused: a 4xx, or a 5xx whose error names "
             "the field (gates/judges/contract_structured.py); a reply that came back outside the schema still FAILs",
             "UNPROVEN",
             ("llama-cpp-python 0.3.36 (the embedded engine; HTTP 500, a pydantic literal_error on "
              "response_format.type): verify quick, 6-7 Dec 2026",)),
    Property("ignores-tool-choice-required",
             "force a tool call when asked with tool_choice 'required'",
             "tool_choice required returned text and no call while tool_choice named on the same prompt returned a "
             "call, on an engine documented to force only a named function (api/dialects.py ignores "
             "'tool_choice=required'; gates/judges/contract_structured.py); on any other engine the same reply stays "
             "UNPROVEN, and a call with tool_choice none still FAILs",
             "UNPROVEN",
             ("llama-cpp-python 0.3.36 (the embedded engine: its template chat handler builds a grammar for a dict "
              "tool_choice only, llama_chat_format.py): verify quick, 6-7 Dec 2026",)),
)}


def shown(name: str, effect: str, **counts: Any) -> dict[str, Any]:
    """A property as a gate reports it: ``{"property", "lacks", "shown_by", "strict", **counts}``.

    Raises:
        KeyError: ``name`` is not on the closed list.
    """
    p = PROPERTIES[name]
    return {"property": p.name, "lacks": p.lacks, "shown_by": effect, "strict": p.strict, **counts}
