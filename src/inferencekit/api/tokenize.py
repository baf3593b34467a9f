"""Tokenizers: the engine's own tokenize endpoint (through its dialect) or a local Hugging Face one.

Preference (docs/design.md, N_out): ``--tokenizer PATH`` (a local Hugging Face directory or a GGUF
file, loaded with transformers), else the engine's tokenize endpoint. Every tokenizer says what it
is (``source``), which is recorded beside every re-tokenized count. Texts are encoded without
special tokens (no BOS): counts are of the text itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from inferencekit.api.client import Client
from inferencekit.api.dialects import Dialect
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["Tokenizer", "EngineTokenizer", "LocalTokenizer", "TokenizeError", "check_tokenizer", "choose_tokenizer",
           "engine_chat_ids", "refused_texts_note"]


class TokenizeError(RuntimeError):
    """The tokenizer could not answer (server error, unknown reply shape)."""


class Tokenizer(Protocol):
    source: str

    async def encode(self, text: str) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


class EngineTokenizer:
    """The server's own tokenizer over HTTP (``/tokenize``, ``/extras/tokenize``, ...)."""

    def __init__(self, client: Client, dialect: Dialect) -> None:
        if not dialect.tokenize_path or dialect.tokenize_body is None:
            raise ValueError(f"engine {dialect.name} has no known tokenize endpoint")
        self.client = client
        self.dialect = dialect
        self.source = f"engine:{dialect.name}{dialect.tokenize_path}"
        self._added: list[int] | None = None  # what the endpoint adds to every text (its tokens for "")

    async def _raw(self, text: str) -> list[int]:
        assert self.dialect.tokenize_path and self.dialect.tokenize_body
        val, err = await self.client.post_json(self.dialect.tokenize_path, self.dialect.tokenize_body(text),
                                               timeout_s=60)
        ids = self.dialect.parse_tokens(val) if err is None else None
        if ids is None:
            raise TokenizeError(err or f"{self.dialect.tokenize_path}: unexpected reply {str(val)[:200]}")
        return ids

    async def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without the special tokens the endpoint adds on its own: llama-cpp-python's
        ``/extras/tokenize`` prepends BOS and has no switch for it (observed: re-tokenized 3 vs usage 2), so
        the endpoint's tokens for the empty string, asked once, are cut from the front of every result.

        Raises:
            TokenizeError: HTTP error or an unknown reply shape.
        """
        if self._added is None:
            try:
                self._added = await self._raw("")
            except TokenizeError:  # an endpoint that refuses an empty text adds nothing we could cut
                self._added = []
        ids = await self._raw(text)
        k = len(self._added)
        return ids[k:] if k and ids[:k] == self._added else ids

    async def decode(self, ids: list[int]) -> str:
        """Text of ``ids``.

        Raises:
            TokenizeError: no detokenize endpoint, HTTP error or an unknown reply shape.
        """
        if not self.dialect.detokenize_path or self.dialect.detokenize_body is None:
            raise TokenizeError(f"engine {self.dialect.name} has no detokenize endpoint")
        val, err = await self.client.post_json(self.dialect.detokenize_path, self.dialect.detokenize_body(ids),
                                               timeout_s=60)
        text = self.dialect.parse_text(val) if err is None else None
        if text is None:
            raise TokenizeError(err or f"{self.dialect.detokenize_path}: unexpected reply {str(val)[:200]}")
        return text


def check_tokenizer(path: str | None, need: str = "--tokenizer") -> None:
    """Refuse a local tokenizer ``path`` (a Hugging Face folder, or a ``.gguf`` file) when the ``tokenizers`` extra is
    not installed: transformers and tokenizers; for a GGUF file also gguf and torch (transformers' GGUF reader,
    ``transformers/integrations/gguf/reader.py``, imports torch). Nothing when ``path`` is None. Called with the
    flag checks: nothing is imported.

    Raises:
        OpError: a module missing (``extras.require_extra``: ``pip install 'inferencekit[tokenizers]' (or make
            demo)``).
    """
    if path:
        gguf = ("gguf", "torch") if str(path).endswith(".gguf") else ()
        require_extra("tokenizers", need, ("transformers", "tokenizers", *gguf))


class LocalTokenizer:
    """A Hugging Face tokenizer from a local directory or a GGUF file (the ``tokenizers`` extra: ``transformers``;
    ``gguf`` and ``torch`` for GGUF).

    Raises:
        OpError: the ``tokenizers`` extra missing (``check_tokenizer``), or the path cannot be loaded.
    """

    def __init__(self, path: str) -> None:
        check_tokenizer(path)
        from transformers import AutoTokenizer

        p = Path(path)
        try:
            if p.is_file() and p.suffix == ".gguf":
                self._tok: Any = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
            elif p.is_dir():
                self._tok = AutoTokenizer.from_pretrained(str(p))
            else:
                raise OpError(f"--tokenizer {path!r} is neither a Hugging Face directory nor a .gguf file")
        except OpError:
            raise
        except Exception as e:  # transformers raises many types for a bad folder
            raise OpError(f"--tokenizer {path!r} could not be loaded: {type(e).__name__}: {e}") from None
        self.source = f"local:{p}"

    async def encode(self, text: str) -> list[int]:
        return list(await asyncio.to_thread(self._tok.encode, text, add_special_tokens=False))

    async def decode(self, ids: list[int]) -> str:
        return str(await asyncio.to_thread(self._tok.decode, ids))

    async def chat_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       ctk: Mapping[str, Any] | None = None) -> list[int]:
        """The ids of ``messages`` rendered with the tokenizer's own chat template (transformers
        ``apply_chat_template``, generation prompt added; ``tools`` passed to the template).

        Raises:
            TokenizeError: the tokenizer has no chat template, or the template refused the messages.
        """
        def render() -> list[int]:
            out = self._tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                                **dict(ctk or {}))
            ids = out.get("input_ids") if hasattr(out, "get") else out
            return [int(t) for t in ids]
        try:
            return await asyncio.to_thread(render)
        except Exception as e:  # transformers and jinja2 raise many types for a template that cannot render
            raise TokenizeError(f"{self.source}: chat template: {type(e).__name__}: {e}") from None


async def engine_chat_ids(client: Client, dialect: Dialect, model: str | None, messages: list[dict[str, Any]],
                          ctk: Mapping[str, Any] | None = None, tools: list[dict[str, Any]] | None = None
                          ) -> tuple[list[int] | None, str | None, str | None]:
    """``(ids, source, error)``: the prompt of ``messages`` as the engine's own chat template renders it, counted by
    its own tokenizer: vLLM's ``/tokenize`` with messages (``engine_tokenize_chat``), or llama-server's
    ``/apply-template`` then ``/tokenize`` with special tokens parsed (``engine_apply_template``). ``(None, None,
    why)`` when the dialect has no such route or the engine refused it (llama-cpp-python renders internally)."""
    d = dialect
    if d.chat_tokenize_body and d.tokenize_path:
        body = {"model": model, **d.chat_tokenize_body(messages, dict(ctk or {}))}
        if tools:
            body["tools"] = tools
        val, err = await client.post_json(d.tokenize_path, body)
        ids = d.parse_tokens(val) if err is None else None
        return (ids, "engine_tokenize_chat", None) if ids else (None, None, err or "no ids in the tokenize reply")
    if d.template_path and d.special_tokenize_body and d.tokenize_path:
        tb: dict[str, Any] = {"messages": messages}
        if ctk:
            tb["chat_template_kwargs"] = dict(ctk)
        if tools:
            tb["tools"] = tools
        val, err = await client.post_json(d.template_path, tb)
        text = val.get("prompt") if isinstance(val, dict) else None
        if err is not None or not isinstance(text, str):
            return None, None, err or f"{d.template_path}: no prompt in the reply"
        tok, err = await client.post_json(d.tokenize_path, d.special_tokenize_body(text))
        ids = d.parse_tokens(tok) if err is None else None
        return (ids, "engine_apply_template", None) if ids else (None, None, err or "no ids in the tokenize reply")
    return None, None, f"{d.name} has no route that renders and counts a chat prompt"


def choose_tokenizer(path: str | None, client: Client, dialect: Dialect) -> Tokenizer | None:
    """``--tokenizer`` when given, else the engine's endpoint when its dialect has one, else None."""
    if path:
        return LocalTokenizer(path)
    if dialect.tokenize_path:
        return EngineTokenizer(client, dialect)
    return None


def refused_texts_note(tokenizer: str, errors: Mapping[str, str], cap: int = 8) -> str | None:
    """The limitation of texts the tokenizer refused (``{request: error}``, e.g. a 422 from ``/tokenize``): their
    re-tokenized counts are missing, and the line names the requests (at most ``cap``, then how many more) and the
    first error. None when it refused none."""
    if not errors:
        return None
    keys = sorted(errors)
    more = f" and {len(keys) - cap} more" if len(keys) > cap else ""
    return (f"the tokenizer ({tokenizer}) refused {len(keys)} reply text(s), so their re-tokenized counts are missing "
            f"(requests: {', '.join(keys[:cap])}{more}; first error: {errors[keys[0]]})")
