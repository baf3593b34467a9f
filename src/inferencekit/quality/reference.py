"""References that teacher-force a token sequence: one interface, chosen by ``quality score --reference``.

A reference answers three questions about the model it holds: the prompt ids of a chat under its own
template, the ids of a text, and — the point of it — for a sequence of ids, the top-k logprobs of the
distribution at every position from ``start`` on, with the actual token's own logprob added (the
shape of vLLM's ``prompt_logprobs``).

- ``vllm`` (HTTP): ``/v1/completions`` with the ids as the prompt, ``max_tokens`` 1 and
  ``prompt_logprobs`` k; ``/tokenize`` with ``messages`` or ``prompt``. vLLM caps k at
  ``--max-logprobs`` (20 by default) and says so in a 400: k is lowered once, for every later request.
- ``local``: ``LocalModel``, float32 transformers in this process.
- ``llama-cpp-python`` (``echo`` + ``logprobs`` on ``/v1/completions``): checked on a predictable prompt
  first; its top-k lists are one position late (docs/engines.md), so it is refused with the check's numbers
  instead of being used.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from inferencekit.api.client import Client
from inferencekit.api.dialects import dialect
from inferencekit.errors import OpError
from inferencekit.quality.logprobs import echo_alignment, parse_prompt_logprobs
from inferencekit.quality.trajectory import cap_from_error

__all__ = ["Reference", "VllmReference", "LocalReference", "check_echo_reference", "REFERENCE_KINDS"]

REFERENCE_KINDS = ("local", "vllm", "llama-cpp-python")
# A sentence said twice: from its second saying on, a model predicts every token almost surely.
ECHO_CHECK_TEXT = ("The quick brown fox jumps over the lazy dog near the old river bank. "
                   "The quick brown fox jumps over the lazy dog near the old river bank.")


class Reference(Protocol):
    """What ``quality score`` needs from a reference model."""

    k: int

    def describe(self) -> dict[str, Any]: ...

    async def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any]) -> list[int]: ...

    async def encode(self, text: str) -> list[int]: ...

    async def score(self, ids: list[int], start: int) -> list[dict[int, float]]: ...


class VllmReference:
    """vLLM over HTTP (``Client`` already entered), serving the reference model as ``model``."""

    def __init__(self, client: Client, model: str, k: int = 20) -> None:
        self.client, self.model, self.k = client, model, k
        self.cap_errors: list[str] = []
        self._lock = asyncio.Lock()

    def describe(self) -> dict[str, Any]:
        return {"engine": "vllm", "url": self.client.endpoint.root, "model": self.model, "k": self.k}

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        val, err = await self.client.post_json(path, body)
        if err is not None:
            raise OpError(f"reference {path}: {err}")
        return val

    async def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any]) -> list[int]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True,
                                "add_special_tokens": False}
        if ctk:
            body["chat_template_kwargs"] = ctk
        return _tokens(await self._post("/tokenize", body))

    async def encode(self, text: str) -> list[int]:
        return _tokens(await self._post("/tokenize", {"model": self.model, "prompt": text,
                                                      "add_special_tokens": False}))

    async def score(self, ids: list[int], start: int) -> list[dict[int, float]]:
        while True:
            k = self.k
            body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
            ex = await self.client.post("/v1/completions", body)
            if ex.ok:
                break
            if ex.status in (400, 422) and "logprob" in (ex.error or "").lower():
                async with self._lock:
                    new = cap_from_error(ex.error or "", k)
                    if new < 1:
                        raise OpError(f"reference refuses prompt_logprobs: {ex.error}")
                    self.k = min(self.k, new)
                    self.cap_errors.append((ex.error or "")[:200])
                continue
            raise OpError(f"reference /v1/completions: {ex.error or ex.status}")
        try:
            rows = parse_prompt_logprobs(ex.json() or {})
        except ValueError as e:
            raise OpError(f"reference reply: {e}") from None
        if len(rows) != len(ids):
            raise OpError(f"reference returned {len(rows)} prompt_logprobs for {len(ids)} tokens")
        out = []
        for t in range(start, len(ids)):
            row = rows[t]
            if not row or ids[t] not in row:
                raise OpError(f"reference prompt_logprobs lack the token at position {t}")
            out.append(row)
        return out


def _tokens(val: Any) -> list[int]:
    toks = dialect("vllm").parse_tokens(val)
    if toks is None:
        raise OpError("reference /tokenize reply has no token list")
    return toks


class LocalReference:
    """``LocalModel`` behind the async interface (its work is CPU-bound: calls run one at a time). A sequence it
    scored once is answered from memory when asked again (the model is deterministic for one file: ``verify``'s
    quality looks re-score every earlier prompt)."""

    def __init__(self, model: Any, k: int = 20) -> None:
        self.m, self.k = model, k
        self._scored: dict[tuple[tuple[int, ...], int], list[dict[int, float]]] = {}

    def describe(self) -> dict[str, Any]:
        return {**self.m.describe(), "k": self.k}

    async def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any]) -> list[int]:
        ids: list[int] = self.m.chat_prompt_ids(messages, ctk)
        return ids

    async def encode(self, text: str) -> list[int]:
        ids: list[int] = self.m.encode(text)
        return ids

    async def score(self, ids: list[int], start: int) -> list[dict[int, float]]:
        key = (tuple(ids), start)
        if key not in self._scored:
            self._scored[key] = self.m.score(ids, start, self.k)
        return [dict(row) for row in self._scored[key]]  # copies: a caller may change its rows


async def check_echo_reference(client: Client, model: str) -> dict[str, Any]:
    """Ask llama-cpp-python to echo ``ECHO_CHECK_TEXT`` with top-5 logprobs and read which position each list
    describes (``echo_alignment``, from the second sentence on).

    Raises:
        OpError: always, with the result — shifted or unclear lists cannot be used; aligned ones could
            be, but inferencekit has no scorer for this path (use ``--reference local`` or ``vllm``).
    """
    body = {"model": model, "prompt": ECHO_CHECK_TEXT, "max_tokens": 1, "temperature": 0.0, "echo": True,
            "logprobs": 5}
    val, err = await client.post_json("/v1/completions", body)
    if err is not None:
        raise OpError(f"llama-cpp-python echo check: {err}")
    lp = ((val or {}).get("choices") or [{}])[0].get("logprobs") or {}
    tokens, top = lp.get("tokens") or [], lp.get("top_logprobs") or []
    half = len(tokens) // 2 + 1
    res = echo_alignment(tokens, top, start=half)
    if res["verdict"] == "shifted":
        why = (f"its echo top-k lists are one position late: at {res['shifted']} of {res['checked']} predictable "
               "positions the list beside a token names the next token as most likely (the logprob printed for a "
               "token is read from the wrong list too)")
    elif res["verdict"] == "unclear":
        why = (f"its echo top-k lists could not be placed: of {res['checked']} predictable positions "
               f"{res['aligned']} name their own token and {res['shifted']} the next one first")
    else:
        why = "its echo lists line up, but inferencekit has no scorer for the echo path"
    raise OpError(f"llama-cpp-python cannot be a teacher-forcing reference: {why}. Use --reference local (float32 "
                  "transformers in this process) or --reference vllm.")
