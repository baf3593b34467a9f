"""Options every request-sending operation takes (docs/design.md), declared once and checked once.

CLI vocabulary only: ``commands/`` imports it, nothing below does. The request-body policy that
``--extra-body`` and ``--chat-template-kwargs`` feed lives in ``api/body.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from inferencekit.api.endpoint import normalize_base_url, read_api_key
from inferencekit.data.traces import DEFAULT_BLOCK_SIZE, FORMATS
from inferencekit.errors import OpError
from inferencekit.registry import Arg

__all__ = ["CLIENT_ARGS", "FIXED_ARG", "check_client_args", "check_urls", "trace_args"]

CLIENT_ARGS: tuple[Arg, ...] = (
    Arg("base_url", "string", "Server URL, with or without /v1 (e.g. http://127.0.0.1:8000). Without it the embedded "
        "engine (llama.cpp serving SmolLM2-135M-Instruct) is started and stopped. Credentials in the URL are refused."),
    Arg("model", "string", "Model name to send (default: the first id from /v1/models)."),
    Arg("api_key_env", "string", "NAME of the environment variable that holds the API key; the name is recorded, "
        "the value never is."),
    Arg("timeout", "number", "Per-request limit in seconds: the whole exchange, from sending to the last byte of the "
        "stream. A request that passes it is recorded as a timeout and never sent again.", default=600.0),
    Arg("read_timeout", "number", "Read-idle limit in seconds: the longest wait for the next byte of a reply, the "
        "first one included (so it also bounds TTFT). 0: off (only --timeout applies).", default=0.0),
    Arg("extra_body", "string", "JSON object merged into every request body, e.g. '{\"top_k\": 1}'. It cannot "
        "override the fields the operation sets itself (those are not sent, and the record and the card say so)."),
    Arg("chat_template_kwargs", "string", "JSON object sent as chat_template_kwargs, e.g. "
        "'{\"enable_thinking\": false}'; merged per key over --extra-body's, under a prompt record's own."),
)


def trace_args(scope: str) -> tuple[Arg, ...]:
    """The flags that shape a trace replay (``bench serve --trace``, ``verify --workload trace:FILE``); ``scope`` names
    the flag they belong to in their help ("--trace")."""
    return (Arg("trace_format", "string", f"{scope}: the file's format.", default="mooncake", choices=FORMATS),
            Arg("time_scale", "number", f"{scope}: multiply the trace's times by this (0.5 = twice as fast).",
                default=1.0),
            Arg("trace_block_size", "integer", f"{scope} (mooncake): prompt tokens per hash id.",
                default=DEFAULT_BLOCK_SIZE))


# --fixed: every command that runs a sequential check takes it (gates run, quality sampling, verify)
FIXED_ARG = Arg("fixed", "boolean", "Send every trial the plan holds (today's counts). By default a check that decides "
                "from repeated trials (the caching gate's pairs, the sampler check's draws) stops sending once its "
                "sequential rule has decided (docs/gates.md, 'Sequential verdicts').", default=False)


def check_urls(urls: Iterable[str | None]) -> None:
    """Refuse each given URL that is not usable (before anything is sent).

    Raises:
        OpError: a URL with credentials, or one that is not http(s) (``api.endpoint.normalize_base_url``).
    """
    for url in urls:
        if url:
            normalize_base_url(url)


def check_client_args(base_url: str | None, api_key_env: str | None, timeout: float) -> None:
    """Refuse client settings that cannot work (before anything is sent).

    Raises:
        OpError: a bad ``--base-url``, an ``--api-key-env`` variable that is not set, or a timeout that is not
            a positive number of seconds.
    """
    check_urls([base_url])
    read_api_key(api_key_env)
    if not timeout > 0:
        raise OpError(f"--timeout must be > 0 seconds, got {timeout}")
