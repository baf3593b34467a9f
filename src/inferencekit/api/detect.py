"""Which engine is behind a URL, told from what it answers (not from what it is called).

Signals, in order: llama.cpp's ``/props`` (``total_slots``, ``build_info``); SGLang's
``/get_server_info``; vLLM's ``/version`` with ``owned_by: vllm`` in ``/v1/models``;
llama-cpp-python's OpenAPI title; ``owned_by`` alone; else generic OpenAI. The result is the
engine identity pinned in run.json — it leaves out the URL, which changes when an engine restarts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.dialects import Dialect, dialect
from inferencekit.errors import OpError

__all__ = ["EngineInfo", "detect_engine", "list_models"]


@dataclass(slots=True)
class EngineInfo:
    """What a server is: engine name, version, models, capacity, and how it was told."""

    engine: str
    version: str | None
    models: list[str]
    model: str | None
    capacity: int | None = None
    capacity_source: str | None = None
    signals: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def dialect(self) -> Dialect:
        return dialect(self.engine)

    def identity(self) -> dict[str, Any]:
        """The pinned engine identity: no URL, no port — stable across restarts of one engine build."""
        return {"engine": self.engine, "version": self.version, "model": self.model}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def context_tokens(self) -> int | None:
        """The context length one request may use, as the server reports it (llama-server ``n_ctx`` per slot,
        SGLang ``context_length``, vLLM ``max_model_len``), else None."""
        for key in ("n_ctx", "context_length", "max_model_len"):
            v = self.details.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None


async def list_models(client: Client) -> tuple[list[dict[str, Any]], str | None]:
    """``/v1/models`` entries, or ``([], error)``."""
    val, err = await client.get_json("/v1/models")
    if err:
        return [], err
    data = val.get("data") if isinstance(val, dict) else None
    if not isinstance(data, list):
        return [], "/v1/models: no data list"
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)], None


async def detect_engine(client: Client, model: str | None = None) -> EngineInfo:
    """Identify the engine and pick the model (``model`` or the first ``/v1/models`` id). An engine whose dialect
    says it closes kept-alive connections after a stream (``Dialect.keeps_connections``) makes ``client`` open a
    connection per request from then on (``Client.fresh_connections``): every command detects before it sends.

    Raises:
        OpError: the server does not answer ``/v1/models`` (unreachable, wrong URL, auth), or
            ``model`` is not one it serves.
    """
    info = await _detect(client, model)
    if not info.dialect.keeps_connections:
        client.fresh_connections = True
    return info


async def _detect(client: Client, model: str | None) -> EngineInfo:
    models, err = await list_models(client)
    if err:
        where = client.endpoint.root
        hint = " (check --api-key-env)" if "HTTP 401" in err or "HTTP 403" in err else ""
        short = err if len(err) <= 200 else err[:200] + "…"
        raise OpError(f"{where} does not answer as an OpenAI-compatible server: GET /v1/models → {short}{hint}")
    ids = [m["id"] for m in models]
    if model is None:
        if not ids:
            raise OpError(f"{client.endpoint.root}/v1/models lists no model; pass --model")
        model = ids[0]
    elif ids and model not in ids:
        raise OpError(f"--model {model!r} is not served by {client.endpoint.root} (it lists: {', '.join(ids[:5])})")
    owned = {str(m.get("owned_by", "")).lower() for m in models}
    signals: list[str] = []
    details: dict[str, Any] = {}

    props, _ = await client.get_json("/props")
    if isinstance(props, dict) and ("total_slots" in props or "build_info" in props):
        signals.append("/props has total_slots/build_info")
        details = {k: props.get(k) for k in ("total_slots", "model_path", "build_info", "n_ctx") if k in props}
        gen = props.get("default_generation_settings") or {}
        if isinstance(gen, dict) and "n_ctx" in gen:
            details["n_ctx"] = gen["n_ctx"]
        return EngineInfo("llama-server", props.get("build_info"), ids, model, props.get("total_slots"),
                          "/props total_slots", signals, details)

    info, _ = await client.get_json("/get_server_info")
    if isinstance(info, dict) and ("max_running_requests" in info or "max_total_num_tokens" in info):
        signals.append("/get_server_info answers")
        d = dialect("sglang")
        cap = d.capacity_of(info) if d.capacity_of else None
        details = {k: info.get(k) for k in ("max_running_requests", "max_total_num_tokens", "context_length")
                   if k in info}
        return EngineInfo("sglang", info.get("version"), ids, model, cap,
                          "/get_server_info max_running_requests" if cap else None, signals, details)

    ver, _ = await client.get_json("/version")
    if isinstance(ver, dict) and isinstance(ver.get("version"), str) and ("vllm" in owned or not owned - {""}):
        signals.append("/version answers" + (", owned_by vllm" if "vllm" in owned else ""))
        entry = next((m for m in models if m["id"] == model), {})
        if isinstance(entry.get("max_model_len"), int):
            details["max_model_len"] = entry["max_model_len"]
        return EngineInfo("vllm", ver["version"], ids, model, None, None, signals, details)

    spec, _ = await client.get_json("/openapi.json")
    title = ((spec or {}).get("info") or {}).get("title", "") if isinstance(spec, dict) else ""
    if "llama.cpp python" in title.lower() or "llama-cpp-python" in title.lower():
        signals.append(f"OpenAPI title {title!r}")
        version = ((spec or {}).get("info") or {}).get("version")
        return EngineInfo("llama-cpp-python", version, ids, model, 1,
                          "llama-cpp-python runs one request at a time (not measured)", signals, details)

    for name in ("vllm", "sglang"):
        if name in owned:
            signals.append(f"owned_by {name}")
            return EngineInfo(name, None, ids, model, None, None, signals, details)
    signals.append("no engine-specific endpoint answered")
    return EngineInfo("openai", None, ids, model, None, None, signals, details)
