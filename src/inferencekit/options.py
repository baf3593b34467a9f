"""Options every request-sending operation takes (DESIGN.md), declared once and parsed once."""

from __future__ import annotations

from typing import Any

import orjson

from inferencekit.errors import OpError
from inferencekit.registry import Arg

__all__ = ["CLIENT_ARGS", "parse_json_object", "template_kwargs", "split_extra_body", "check_client_args"]

CLIENT_ARGS: tuple[Arg, ...] = (
    Arg("base_url", "string", "Server URL, with or without /v1 (e.g. http://127.0.0.1:8000). Without it the embedded "
        "engine (llama.cpp serving SmolLM2-135M-Instruct) is started and stopped. Credentials in the URL are refused."),
    Arg("model", "string", "Model name to send (default: the first id from /v1/models)."),
    Arg("api_key_env", "string", "NAME of the environment variable that holds the API key; the name is recorded, "
        "the value never is."),
    Arg("timeout", "number", "Per-request limit in seconds, stream included.", default=600.0),
    Arg("extra_body", "string", "JSON object merged into every request body, e.g. '{\"top_k\": 1}'. It cannot "
        "override the fields the operation sets itself (those are refused with a note)."),
    Arg("chat_template_kwargs", "string", "JSON object sent as chat_template_kwargs, e.g. "
        "'{\"enable_thinking\": false}'; merged per key over --extra-body's, under a prompt record's own."),
)


def parse_json_object(text: str | None, flag: str) -> dict[str, Any]:
    """``{}`` for None/empty, the parsed object otherwise.

    Raises:
        OpError: not JSON or not an object.
    """
    if not text:
        return {}
    try:
        val = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise OpError(f"{flag} is not valid JSON: {e}") from None
    if not isinstance(val, dict):
        raise OpError(f"{flag} must be a JSON object, got {type(val).__name__}")
    return val


def template_kwargs(extra: dict[str, Any], flag_text: str | None) -> dict[str, Any]:
    """chat_template_kwargs layered per key: --extra-body's, then --chat-template-kwargs."""
    out = dict(extra.get("chat_template_kwargs") or {}) if isinstance(extra.get("chat_template_kwargs"), dict) else {}
    out.update(parse_json_object(flag_text, "--chat-template-kwargs"))
    return out


def split_extra_body(extra: dict[str, Any], fixed: set[str]) -> tuple[dict[str, Any], list[str]]:
    """(fields kept, names refused): ``extra`` minus the fields the operation fixes itself."""
    refused = sorted(k for k in extra if k in fixed)
    kept = {k: v for k, v in extra.items() if k not in fixed and k != "chat_template_kwargs"}
    return kept, refused


def check_client_args(timeout: float) -> None:
    """Refuse client settings that cannot work (before anything is sent).

    Raises:
        OpError: a timeout that is not a positive number of seconds.
    """
    if not timeout > 0:
        raise OpError(f"--timeout must be > 0 seconds, got {timeout}")
