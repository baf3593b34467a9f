"""Read token ids and top-k logprobs out of engine replies — the input of teacher-forced scoring.

Three reply shapes, as the engines send them (docs/engines.md):

- chat completions, not streamed: ``choices[0].logprobs.content[i] = {token, logprob, bytes,
  top_logprobs: [{token, logprob, bytes}, …]}``. Where the token id lives differs:
  llama-server adds ``"id"`` to every entry and alternative; vLLM spells the token as
  ``"token_id:<n>"`` when asked with ``return_tokens_as_token_ids`` and lists the generated ids in
  ``choices[0].token_ids`` when asked with ``return_token_ids``; llama-cpp-python gives strings only.
- vLLM ``/v1/completions`` with ``prompt_logprobs: k``: ``choices[0].prompt_logprobs`` has one entry
  per prompt token, the first ``null``, each ``{"<id>": {logprob, rank, decoded_token}}`` holding the
  actual token and the top k (vLLM ``CompletionResponseChoice.prompt_logprobs``).
- legacy completions logprobs (llama-cpp-python ``echo``): ``{tokens, token_logprobs, top_logprobs:
  [{token: logprob}]}`` — see ``echo_alignment``.

Pure functions; nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChatLogprobs", "parse_chat_logprobs", "parse_prompt_logprobs", "echo_alignment", "token_id_of"]

_ID_STRING = re.compile(r"^token_id:(\d+)$")


def token_id_of(entry: dict[str, Any]) -> int | None:
    """The token id an entry states: an integer ``id`` field (llama-server) or a ``token_id:<n>`` string
    (vLLM ``return_tokens_as_token_ids``); None when it states none."""
    v = entry.get("id")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    m = _ID_STRING.match(str(entry.get("token", "")))
    return int(m.group(1)) if m else None


def _finite_lp(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


@dataclass(slots=True)
class ChatLogprobs:
    """One greedy chat reply, read for scoring.

    Attributes:
        method: how token ids were obtained — ``"token_ids"`` (a list of generated ids beside the
            logprobs, vLLM ``return_token_ids``), ``"ids"`` (an id on every entry), ``"strings"`` (token
            strings only: ids unknown), ``"none"`` (no logprobs in the reply).
        text: the visible content.
        finish_reason: as the engine reported it.
        token_ids: generated ids (None unless the method gives them).
        tokens: token strings, one per entry.
        logprobs: the chosen token's logprob per entry (None where missing or not finite).
        top: per position, ``[[key, logprob], …]`` most likely first, where key is the token id (int)
            when the method gives ids, else the token string.
        top_k_returned: the fewest alternatives any position listed (0 without logprobs).
        id_mismatch_positions: positions where two sources of ids disagree (vLLM's id strings and its
            ``token_ids`` list).
    """

    method: str
    text: str
    finish_reason: str | None
    token_ids: list[int] | None = None
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top: list[list[list[Any]]] = field(default_factory=list)
    top_k_returned: int = 0
    id_mismatch_positions: list[int] = field(default_factory=list)


def _sorted_top(pairs: list[list[Any]]) -> list[list[Any]]:
    return sorted(pairs, key=lambda kv: -kv[1] if kv[1] is not None else math.inf)


def parse_chat_logprobs(resp: dict[str, Any]) -> ChatLogprobs:
    """Read a non-streamed chat completion (``resp`` is its JSON) for scoring.

    The generated ids come from, in order: ``choices[0].token_ids`` when it has one id per logprob
    entry (or one more: vLLM lists the EOS id of a natural stop there); else an id on every entry.

    Raises:
        ValueError: ``resp`` has no ``choices[0]``.
    """
    choices = resp.get("choices") if isinstance(resp, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("reply has no choices[0]")
    ch = choices[0]
    msg = ch.get("message") or {}
    text = msg.get("content") or ch.get("text") or ""
    out = ChatLogprobs(method="none", text=text, finish_reason=ch.get("finish_reason"))
    lp = ch.get("logprobs")
    entries = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(entries, list) or not entries:
        return out
    entries = [e for e in entries if isinstance(e, dict)]
    ids = [token_id_of(e) for e in entries]
    listed = ch.get("token_ids")
    have_list = (isinstance(listed, list) and all(isinstance(t, int) for t in listed)
                 and len(listed) in (len(entries), len(entries) + 1))
    if have_list and isinstance(listed, list):
        out.method, out.token_ids = "token_ids", [int(t) for t in listed[:len(entries)]]
        out.id_mismatch_positions = [i for i, (a, b) in enumerate(zip(ids, out.token_ids)) if a is not None and a != b]
    elif all(i is not None for i in ids):
        out.method, out.token_ids = "ids", [int(i) for i in ids]  # type: ignore[arg-type]
    else:
        out.method = "strings"
    by_id = out.token_ids is not None
    for e in entries:
        out.tokens.append(str(e.get("token", "")))
        out.logprobs.append(_finite_lp(e.get("logprob")))
        alts = []
        for a in e.get("top_logprobs") or []:
            if not isinstance(a, dict):
                continue
            key: Any = token_id_of(a) if by_id else str(a.get("token", ""))
            if key is None:  # ids for the chosen tokens but not for this alternative: keep it out
                continue
            alts.append([key, _finite_lp(a.get("logprob"))])
        out.top.append(_sorted_top(alts))
    out.top_k_returned = min((len(t) for t in out.top), default=0)
    return out


def parse_prompt_logprobs(resp: dict[str, Any]) -> list[dict[int, float] | None]:
    """vLLM ``choices[0].prompt_logprobs`` as ``[{token id: logprob} | None, …]``, one per prompt token.

    Raises:
        ValueError: the reply has no ``prompt_logprobs`` list, or an entry's key is not an integer.
    """
    choices = resp.get("choices") if isinstance(resp, dict) else None
    plp = choices[0].get("prompt_logprobs") if isinstance(choices, list) and choices else None
    if not isinstance(plp, list):
        raise ValueError("reply has no choices[0].prompt_logprobs (not a vLLM completions reply with prompt_logprobs?)")
    out: list[dict[int, float] | None] = []
    for pos in plp:
        if not isinstance(pos, dict):
            out.append(None)
            continue
        row = {}
        for k, v in pos.items():
            try:
                tid = int(k)
            except (TypeError, ValueError):
                raise ValueError(f"prompt_logprobs key {k!r} is not a token id") from None
            val = _finite_lp(v.get("logprob") if isinstance(v, dict) else v)
            if val is not None:
                row[tid] = val
        out.append(row)
    return out


def echo_alignment(tokens: Sequence[str], top_logprobs: Sequence[dict[str, float] | None],
                   start: int = 1) -> dict[str, Any]:
    """Which position each top-k list of an ``echo`` completion describes, read off a predictable prompt.

    Run on a prompt whose later part the model can predict almost surely (a sentence said twice): at a
    position i ≥ ``start`` of that part, a list that describes token i has token i as its most likely
    entry; a list one position late (the distribution of token i + 1 printed beside token i, as observed
    on llama-cpp-python 0.3.36, whose ``token_logprobs`` are then read from the wrong list too) has token
    i + 1 there instead.

    Returns:
        ``{"checked", "aligned", "shifted", "verdict"}``: positions checked, lists whose best entry is
        their own token, lists whose best entry is the next token; verdict ``"aligned"`` or ``"shifted"``
        when at least 80% of the checked positions say so, else ``"unclear"``.
    """
    checked = aligned = shifted = 0
    for i in range(max(start, 0), len(tokens) - 1):
        top = top_logprobs[i] if i < len(top_logprobs) else None
        if not isinstance(top, dict) or not top:
            continue
        best = max(top.items(), key=lambda kv: kv[1])[0]
        checked += 1
        aligned += best == tokens[i]
        shifted += best == tokens[i + 1]
    verdict = ("aligned" if checked and aligned >= 0.8 * checked else
               "shifted" if checked and shifted >= 0.8 * checked else "unclear")
    return {"checked": checked, "aligned": aligned, "shifted": shifted, "verdict": verdict}
