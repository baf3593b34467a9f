"""Capture reply files from a real engine for the unit tests (judgement code is tested on them).

    .venv/bin/python tests/capture_replies.py --base-url http://127.0.0.1:8080 --engine llama-server

Writes ``tests/fixtures/replies/<engine>/<name>.json``: the reply file exactly as ``bench serve``
writes it, plus ``_provenance`` (engine, version, model, date, the request body). No API key is
used or stored.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.rundir import write_json

HERE = Path(__file__).parent / "fixtures" / "replies"
TRIANGLE_TOOL = {"type": "function", "function": {
    "name": "calculate_triangle_area", "description": "Calculate the area of a triangle given its base and height.",
    "parameters": {"type": "object", "properties": {
        "base": {"type": "integer", "description": "The base of the triangle."},
        "height": {"type": "integer", "description": "The height of the triangle."},
        "unit": {"type": "string", "description": "The unit of measure (defaults to 'units' if not specified)"}},
        "required": ["base", "height"]}}}


def _bodies(model: str, count: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    chat = "/v1/chat/completions"
    msg = [{"role": "user", "content": "Name three colours."}]
    return {
        "chat_stream": (chat, {"model": model, "messages": msg, "max_tokens": 16, "temperature": 0, "stream": True,
                               "stream_options": {"include_usage": True}}),
        "chat_stream_counted": (chat, {"model": model, "messages": msg, "max_tokens": 16, "temperature": 0,
                                       "stream": True, "stream_options": {"include_usage": True}, **count}),
        "chat_stream_natural_stop": (chat, {"model": model, "max_tokens": 64, "temperature": 0, "stream": True,
                                            "messages": [{"role": "user", "content": "Reply with just the word OK."}],
                                            "stream_options": {"include_usage": True}, **count}),
        "chat_nostream": (chat, {"model": model, "messages": msg, "max_tokens": 16, "temperature": 0}),
        "chat_bad_request": (chat, {"model": model, "messages": "not a list", "max_tokens": 4, "stream": True}),
        # BFCL's simple_python_0 (bfcl-eval 2026.3.23, Apache-2.0) with its tool, the call forced by name: SmolLM2's
        # template has no tools, and a named tool_choice makes the engine constrain the output to the call's JSON
        "chat_stream_tool_call": (chat, {"model": model, "max_tokens": 48, "temperature": 0, "stream": True,
                                         "stream_options": {"include_usage": True}, "messages": [
                                             {"role": "user", "content": "Find the area of a triangle with a base of "
                                                                         "10 units and height of 5 units."}],
                                         "tools": [TRIANGLE_TOOL],
                                         "tool_choice": {"type": "function",
                                                         "function": {"name": "calculate_triangle_area"}}}),
        "completion_stream": ("/v1/completions", {"model": model, "prompt": "The capital of France is",
                                                  "max_tokens": 8, "temperature": 0, "stream": True,
                                                  "stream_options": {"include_usage": True}}),
    }


async def capture(base_url: str, engine: str, only: list[str] | None = None) -> None:
    async with Client(Endpoint.parse(base_url), timeout_s=120) as c:
        info = await detect_engine(c)
        out = HERE / engine
        for name, (path, body) in _bodies(str(info.model), dict(info.dialect.count_fields)).items():
            if only and name not in only:
                continue
            ex = await c.post(path, body)
            reply = ex.to_reply(id=name, engine=engine)
            reply["_provenance"] = {"engine": info.engine, "version": info.version, "model": info.model,
                                    "captured": dt.date.today().isoformat(), "path": path, "request": body}
            write_json(out / f"{name}.json", reply, indent=True)
            print(name, reply["status"], repr(reply.get("text", ""))[:60], reply.get("error", "")[:80])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--engine", required=True, help="folder name under tests/fixtures/replies/")
    ap.add_argument("--only", action="append", help="capture only this reply (repeatable; default: all)")
    a = ap.parse_args()
    asyncio.run(capture(a.base_url, a.engine, a.only))


if __name__ == "__main__":
    main()
