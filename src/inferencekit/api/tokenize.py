"""Tokenizers: the engine's own tokenize endpoint (through its dialect) or a local Hugging Face one.

Preference (docs/design.md, N_out): ``--tokenizer PATH`` (a local Hugging Face directory or a GGUF file: read by
the ``tokenizers`` library where it counts as transformers would, else by transformers), else the engine's tokenize
endpoint. Every tokenizer says what it is (``source``), which is recorded beside every re-tokenized count. Texts are
encoded without special tokens (no BOS): counts are of the text itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from inferencekit.api.client import Client
from inferencekit.api.dialects import Dialect
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["Tokenizer", "EngineTokenizer", "LocalTokenizer", "TokenizeError", "check_tokenizer", "choose_tokenizer",
           "direct_file", "engine_chat_ids", "refused_texts_note"]


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


# tokenizer_config.json classes that transformers builds from tokenizer.json as it is (transformers 5.19,
# tokenization_utils_tokenizers.py TokenizersBackend.__init__: ``TokenizerFast.from_file``); any other class may rebuild
# the backend from a vocabulary, and then only transformers is trusted to count as the model does
DIRECT_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
# settings with which transformers' encode or decode differs from the tokenizers library's on the same file
DIRECT_BLOCKERS = ("add_prefix_space", "clean_up_tokenization_spaces", "split_special_tokens")


def direct_file(path: str | Path) -> Path | None:
    """The ``tokenizer.json`` of a Hugging Face folder when the ``tokenizers`` library alone counts as transformers'
    AutoTokenizer would: the folder's ``tokenizer_config.json`` names a class in ``DIRECT_CLASSES``, sets none of
    ``DIRECT_BLOCKERS`` to a true value, and every special token it names is in the file's added tokens (transformers
    adds a missing one to the vocabulary). None otherwise (a GGUF file, no such file, another class, a config that
    cannot be read): then transformers loads it. Reads two small JSON files; imports nothing."""
    p = Path(path)
    if not p.is_dir() or not (p / "tokenizer.json").is_file():
        return None
    try:
        cfg = json.loads((p / "tokenizer_config.json").read_text(encoding="utf-8"))
        added = json.loads((p / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens") or []
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(cfg, dict) or cfg.get("tokenizer_class") not in DIRECT_CLASSES:
        return None
    if any(cfg.get(k) for k in DIRECT_BLOCKERS):
        return None
    known = {t.get("content") for t in added if isinstance(t, dict)}
    named = [cfg.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")]
    for k in ("additional_special_tokens", "extra_special_tokens"):  # transformers adds these too when missing
        extra = cfg.get(k)
        if isinstance(extra, dict):
            named += list(extra.values())
        elif isinstance(extra, list):
            named += extra
    named = [t.get("content") if isinstance(t, dict) else t for t in named if t is not None]
    if any(t not in known for t in named):
        return None
    return p / "tokenizer.json"


def check_tokenizer(path: str | None, need: str = "--tokenizer") -> Path | None:
    """Refuse a local tokenizer ``path`` (a Hugging Face folder, or a ``.gguf`` file) when what loads it is not
    installed: the ``tokenizers`` library for a folder it reads alone (``direct_file``), transformers and tokenizers
    for another folder, and also gguf and torch for a GGUF file (transformers' GGUF reader,
    ``transformers/integrations/gguf/reader.py``, imports torch). Nothing when ``path`` is None. Called with the flag
    checks: nothing is imported. Returns ``direct_file(path)``.

    Raises:
        OpError: a module missing (``extras.require_extra``: ``pip install 'inferencekit[tokenizers]' (or make
            demo)``).
    """
    if not path:
        return None
    direct = direct_file(path)
    if direct is not None:
        require_extra("tokenizers", need, ("tokenizers",))
        return direct
    gguf = ("gguf", "torch") if str(path).endswith(".gguf") else ()
    require_extra("tokenizers", need, ("transformers", "tokenizers", *gguf))
    return None


class LocalTokenizer:
    """A Hugging Face tokenizer from a local directory or a GGUF file. A folder whose ``tokenizer.json`` counts alike
    in both libraries (``direct_file``) is read by the ``tokenizers`` library alone: no transformers, no torch
    (importing transformers 5.19 imports torch: 6.8 s and ~480 MB resident on this project's 2-core VM, against
    0.13 s and ~50 MB). Anything else, and every chat template, goes through transformers' AutoTokenizer (the
    ``tokenizers`` extra: ``transformers``; ``gguf`` and ``torch`` for GGUF).

    Raises:
        OpError: the ``tokenizers`` extra missing (``check_tokenizer``), or the path cannot be loaded.
    """

    def __init__(self, path: str) -> None:
        direct = check_tokenizer(path)
        p = Path(path)
        self._path = p
        self._hf: Any = None  # transformers' tokenizer, loaded on first need
        self._direct: Any = None  # tokenizers.Tokenizer when direct_file says it counts alike
        self.source = f"local:{p}"
        if direct is not None:
            import tokenizers

            try:
                tok = tokenizers.Tokenizer.from_file(str(direct))
            except Exception as e:  # the Rust side raises its own Exception type for a bad file
                raise OpError(f"--tokenizer {path!r} could not be loaded: {type(e).__name__}: {e}") from None
            tok.no_truncation()  # transformers' encode without truncation=True does not truncate either
            tok.no_padding()
            self._direct = tok
        else:
            self._hf = self._transformers()

    def _transformers(self) -> Any:
        """transformers' AutoTokenizer for this path.

        Raises:
            OpError: transformers missing, or the path cannot be loaded.
        """
        require_extra("tokenizers", "a chat template of --tokenizer", ("transformers", "tokenizers"))
        from transformers import AutoTokenizer

        p = self._path
        try:
            if p.is_file() and p.suffix == ".gguf":
                return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
            if p.is_dir():
                return AutoTokenizer.from_pretrained(str(p))
        except Exception as e:  # transformers raises many types for a bad folder
            raise OpError(f"--tokenizer {str(p)!r} could not be loaded: {type(e).__name__}: {e}") from None
        raise OpError(f"--tokenizer {str(p)!r} is neither a Hugging Face directory nor a .gguf file")

    async def encode(self, text: str) -> list[int]:
        if self._direct is not None:
            enc = await asyncio.to_thread(self._direct.encode, text, add_special_tokens=False)
            return list(enc.ids)
        return list(await asyncio.to_thread(self._hf.encode, text, add_special_tokens=False))

    async def decode(self, ids: list[int]) -> str:
        if self._direct is not None:
            return str(await asyncio.to_thread(self._direct.decode, ids, skip_special_tokens=False))
        return str(await asyncio.to_thread(self._hf.decode, ids))

    async def chat_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       ctk: Mapping[str, Any] | None = None) -> list[int]:
        """The ids of ``messages`` rendered with the tokenizer's own chat template (transformers
        ``apply_chat_template``, generation prompt added; ``tools`` passed to the template). transformers is loaded
        here on first use when the folder was read by the ``tokenizers`` library alone.

        Raises:
            TokenizeError: the tokenizer has no chat template, the template refused the messages, or transformers
                cannot be loaded.
        """
        if self._hf is None:
            try:
                self._hf = await asyncio.to_thread(self._transformers)
            except OpError as e:
                raise TokenizeError(f"{self.source}: chat template: {e}") from None
        hf = self._hf

        def render() -> list[int]:
            out = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
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
