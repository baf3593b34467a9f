"""How each engine spells what the OpenAI API leaves out — the one place that says so.

Per engine: where tokenize lives and how its body and reply look, how to get generated token ids,
how to bypass or reset the prompt/prefix cache, where the parallel capacity is reported, and which
options it is known to drop silently, the value that turns top-k off, and how a cold prefill misses
the cache. The replies each engine was observed to send are recorded in ``tests/fixtures/replies/<engine>/``;
SGLang's native API follows its docs (``/tokenize``, ``/flush_cache``, ``/get_server_info``).

``detect.py`` decides which dialect a URL speaks; everything else asks the dialect.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Dialect", "DIALECTS", "dialect", "ENGINE_NAMES", "PrefillIsolation"]


def _tokens_list(reply: Any) -> list[int] | None:
    """``{"tokens": [...]}`` with ints, or with ``{"id": ...}`` objects (llama-server with_pieces)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("tokens"), list):
        return None
    out = []
    for t in reply["tokens"]:
        if isinstance(t, dict):
            t = t.get("id")
        if not isinstance(t, int) or isinstance(t, bool):
            return None
        out.append(t)
    return out


def _text_of(reply: Any) -> str | None:
    if isinstance(reply, dict):
        for k in ("content", "prompt", "text"):
            v = reply.get(k)
            if isinstance(v, str):
                return v
    return None


@dataclass(frozen=True, slots=True)
class PrefillIsolation:
    """How one engine's cold prefill misses the cache (the appliance receipt, ``bench/appliance_collect.py``).

    ``form``: prompts as ``"token ids"`` or ``"text"``; ``cold_fields`` / ``warm_fields``: request fields
    given the pair's random salt; ``reset_path``: POST before each cold request; ``random_prefix``: the
    text form starts with a random tag (changes the model input; the only isolation some engines allow).
    ``bypass`` / ``bypass_description``: fields that make one decode or concurrency request compute its
    whole prompt without changing the model input (so a re-run of one comparison id, whose prompts are
    byte-identical, is not served from the previous run's cache); empty where the engine has none."""

    name: str
    description: str
    form: str
    cold_fields: Callable[[str], dict[str, Any]] = lambda salt: {}
    warm_fields: Callable[[str], dict[str, Any]] = lambda salt: {}
    reset_path: str | None = None
    random_prefix: bool = False
    bypass: Callable[[], dict[str, Any]] = lambda: {}
    bypass_description: str = ("none: the engine offers no per-request cache bypass; prompt-cache hits show as "
                               "cached_prompt_tokens where the server reports them")


RANDOM_PREFIX = PrefillIsolation(
    "random-prefix", "a random text prefix per pair: the engine offers no cache control and reports no cached tokens, "
    "so coldness is not server-verified", "text", random_prefix=True)


@dataclass(frozen=True, slots=True)
class Dialect:
    """One engine's spelling of the non-standard parts.

    Attributes:
        name: engine name as recorded (``vllm``, ``sglang``, ``llama-server``, ``llama-cpp-python``,
            ``openai``).
        tokenize_path: POST path of the tokenizer endpoint, or None.
        tokenize_body: text → request body for ``tokenize_path``.
        detokenize_path, detokenize_body: the inverse, or None.
        count_fields: request fields that make every streamed event say how many tokens it carried (token
            ids, else one logprob entry per token); {} when the engine has no such option.
        cache_bypass: returns request fields that make one request miss the prompt cache, or None.
        cache_reset_path: POST path that empties the prefix cache, or None.
        capacity_path: GET path whose JSON reports parallel capacity; ``capacity_of`` reads it.
        fixed_capacity: capacity known without asking (llama-cpp-python serialises: 1).
        ignores: option names this engine is known to accept and drop without effect (``option=value`` for one
            value of it: ``tool_choice=required``).
        honours: option names this engine is known to honour (docs/engines.md: llama-server and vLLM generate
            past EOS with ``ignore_eos``): a reply that shows otherwise is the engine's fault, not a missing
            feature.
        neutral_sampling: request fields that undo a server default which changes the model's distribution
            (llama-cpp-python applies ``repeat_penalty`` 1.1 unless told otherwise, so its greedy token is not
            the argmax of the logprobs it reports); probes that judge sampling send them.
        id_fields: request fields that make a non-streamed chat reply name the generated token ids (vLLM:
            ``return_tokens_as_token_ids`` spells each logprob entry ``token_id:<n>``, ``return_token_ids``
            lists them and the prompt's ids); {} when the reply names them anyway or never does.
        verbose_ids: request fields that make a non-streamed chat reply list every generated token id, also one its
            logprob entries leave out (llama-server ``"return_tokens": true, "verbose": true``: ``__verbose.tokens``;
            it sends no entry for a token that leaves an incomplete UTF-8 character).
        chat_tokenize_body: (messages, chat_template_kwargs) → a ``tokenize_path`` body that renders the
            engine's own chat template and returns the prompt's ids (vLLM), or None.
        template_path: POST path that renders the chat template to text (llama-server ``/apply-template``,
            reply ``{"prompt": …}``); its text is then tokenized with ``special_tokenize_body``.
        special_tokenize_body: text → a ``tokenize_path`` body that reads special tokens (``<|im_start|>``) as
            the server does when it tokenizes a rendered chat prompt.
        top_k_off: the ``top_k`` value that turns top-k sampling off (-1 on vLLM and SGLang; 0 on llama.cpp,
            where k ≤ 0 is off).
        prefill_isolation: how a cold prefill request misses the prompt cache (``PrefillIsolation``).
        keeps_connections: False when the engine closes a connection after a streamed reply although it announced
            keep-alive (llama-server: the FIN comes 96–281 ms after the stream's end, measured on build b1-0c1e570
            with SmolLM2-135M; a request written on that connection in the meantime is lost). The client then opens
            a connection per request (``Client.fresh_connections``): it never re-sends a request whose bytes were
            written (api/client.py), so reusing such a connection would lose requests.
        named_tool_choice: a ``tool_choice`` naming one function is known to make the engine return a call to it (a
            grammar or guided decoding: llama-cpp-python; vLLM when started with a tool-call parser, else it refuses
            the request with HTTP 400). False where it is not known to: llama-server builds no tool-call grammar for a
            template without tool support (SmolLM2's) and answers plain text (docs/engines.md). ``bench serve
            --structured`` then asks for the call through ``response_format``.
        json_schema: ``response_format`` ``json_schema`` is known to be taken (enforced); False where the engine
            refuses it (llama-cpp-python answers it with HTTP 500: it knows only ``json_object``).
    """

    name: str
    tokenize_path: str | None = None
    tokenize_body: Callable[[str], dict[str, Any]] | None = None
    detokenize_path: str | None = None
    detokenize_body: Callable[[list[int]], dict[str, Any]] | None = None
    count_fields: dict[str, Any] = field(default_factory=dict)
    cache_bypass: Callable[[], dict[str, Any]] | None = None
    cache_reset_path: str | None = None
    capacity_path: str | None = None
    capacity_of: Callable[[Any], int | None] | None = None
    fixed_capacity: int | None = None
    ignores: tuple[str, ...] = ()
    honours: tuple[str, ...] = ()
    neutral_sampling: dict[str, Any] = field(default_factory=dict)
    id_fields: dict[str, Any] = field(default_factory=dict)
    verbose_ids: dict[str, Any] = field(default_factory=dict)
    chat_tokenize_body: Callable[[list[dict[str, Any]], dict[str, Any]], dict[str, Any]] | None = None
    template_path: str | None = None
    special_tokenize_body: Callable[[str], dict[str, Any]] | None = None
    top_k_off: int = 0
    prefill_isolation: PrefillIsolation = RANDOM_PREFIX
    keeps_connections: bool = True
    named_tool_choice: bool = False
    json_schema: bool = True

    def parse_tokens(self, reply: Any) -> list[int] | None:
        """Token ids from a tokenize reply, or None when the shape is not understood."""
        return _tokens_list(reply)

    def parse_text(self, reply: Any) -> str | None:
        """Text from a detokenize reply, or None."""
        return _text_of(reply)

    def full_distribution(self) -> dict[str, Any]:
        """Request fields that make temperature-1 sampling draw from the model's whole distribution: the neutral
        fields, ``top_p`` 1, and, on an engine known to take them, ``top_k`` off and ``min_p`` 0 (llama-server
        and llama-cpp-python default to top_k 40, top_p 0.95 and min_p 0.05: their samples would come from a
        truncated distribution). A plain OpenAI endpoint gets no ``top_k``/``min_p``: it may reject them."""
        out: dict[str, Any] = {**self.neutral_sampling, "top_p": 1.0}
        if self.name != "openai":
            out.update(top_k=self.top_k_off, min_p=0.0)
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-able summary for run.json and the probe report."""
        return {"name": self.name, "tokenize": self.tokenize_path, "detokenize": self.detokenize_path,
                "stream_count_fields": self.count_fields or None,
                "cache_bypass": sorted(self.cache_bypass()) if self.cache_bypass else None,
                "cache_reset": self.cache_reset_path, "capacity": self.capacity_path or self.fixed_capacity,
                "known_ignored_options": list(self.ignores), "known_honoured_options": list(self.honours),
                "neutral_sampling": self.neutral_sampling or None, "named_tool_choice": self.named_tool_choice,
                "json_schema": self.json_schema}


def _slots(props: Any) -> int | None:
    v = props.get("total_slots") if isinstance(props, dict) else None
    return v if isinstance(v, int) and v > 0 else None


def _sglang_capacity(info: Any) -> int | None:
    v = info.get("max_running_requests") if isinstance(info, dict) else None
    return v if isinstance(v, int) and v > 0 else None


def _vllm_chat_tokenize(messages: list[dict[str, Any]], ctk: dict[str, Any]) -> dict[str, Any]:
    """vLLM ``TokenizeChatRequest``: the chat rendered with the served template, generation prompt added."""
    body: dict[str, Any] = {"messages": messages, "add_generation_prompt": True, "add_special_tokens": False}
    if ctk:
        body["chat_template_kwargs"] = ctk
    return body


DIALECTS: dict[str, Dialect] = {
    "vllm": Dialect(
        "vllm", tokenize_path="/tokenize", tokenize_body=lambda t: {"prompt": t, "add_special_tokens": False},
        detokenize_path="/detokenize", detokenize_body=lambda ids: {"tokens": ids},
        count_fields={"return_token_ids": True},
        cache_bypass=lambda: {"cache_salt": uuid.uuid4().hex},
        cache_reset_path="/reset_prefix_cache",
        id_fields={"return_tokens_as_token_ids": True, "return_token_ids": True},
        chat_tokenize_body=_vllm_chat_tokenize, top_k_off=-1, honours=("ignore_eos", "min_tokens"),
        named_tool_choice=True,
        prefill_isolation=PrefillIsolation(
            "cache_salt", "cache_salt: a random salt per cold/warm pair (vLLM prefix-cache isolation)", "token ids",
            cold_fields=lambda s: {"cache_salt": s}, warm_fields=lambda s: {"cache_salt": s},
            bypass=lambda: {"cache_salt": secrets.token_urlsafe(24)},
            bypass_description="cache_salt: a random salt per request")),
    "sglang": Dialect(
        "sglang", tokenize_path="/tokenize", tokenize_body=lambda t: {"prompt": t, "add_special_tokens": False},
        detokenize_path="/detokenize", detokenize_body=lambda ids: {"tokens": ids},
        cache_reset_path="/flush_cache", capacity_path="/get_server_info", capacity_of=_sglang_capacity,
        top_k_off=-1,
        prefill_isolation=PrefillIsolation("flush_cache", "POST /flush_cache before each cold request (SGLang radix "
                                           "cache)", "token ids", reset_path="/flush_cache")),
    "llama-server": Dialect(
        "llama-server", tokenize_path="/tokenize", tokenize_body=lambda t: {"content": t, "add_special": False},
        detokenize_path="/detokenize", detokenize_body=lambda ids: {"tokens": ids},
        # top_logprobs 0 makes llama-server stream no logprob entries at all; 1 gives one per token, with its id
        count_fields={"logprobs": True, "top_logprobs": 1},
        verbose_ids={"return_tokens": True, "verbose": True},
        cache_bypass=lambda: {"cache_prompt": False},
        capacity_path="/props", capacity_of=_slots, honours=("ignore_eos",),
        template_path="/apply-template",
        special_tokenize_body=lambda t: {"content": t, "add_special": True, "parse_special": True},
        prefill_isolation=PrefillIsolation(
            "cache_prompt:false", "cache_prompt: false on the cold request (llama.cpp skips its prompt cache); the "
            "warm replay uses the cache", "token ids", cold_fields=lambda s: {"cache_prompt": False},
            bypass=lambda: {"cache_prompt": False}, bypass_description="cache_prompt: false on every request"),
        keeps_connections=False),
    "llama-cpp-python": Dialect(
        "llama-cpp-python", tokenize_path="/extras/tokenize", tokenize_body=lambda t: {"input": t},
        detokenize_path="/extras/detokenize", detokenize_body=lambda ids: {"tokens": ids},
        count_fields={"logprobs": True, "top_logprobs": 0},
        fixed_capacity=1, ignores=("ignore_eos", "stream_options", "n", "tool_choice=required"),
        neutral_sampling={"repeat_penalty": 1.0},
        named_tool_choice=True, json_schema=False),
    "openai": Dialect("openai"),
}

ENGINE_NAMES = tuple(DIALECTS)


def dialect(name: str) -> Dialect:
    """The dialect called ``name`` (unknown names get the generic OpenAI dialect)."""
    return DIALECTS.get(name, DIALECTS["openai"])
