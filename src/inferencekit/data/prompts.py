"""Prompt sets: the packaged ``dev`` set and any ``.jsonl`` / ``.jsonl.gz`` file, validated line by line.

One JSON object per line::

    {"id": "md-code-003", "bucket": "medium", "messages": [{"role": "user", "content": "..."}]}
    {"id": "p2", "prompt": "Once upon a time", "max_tokens": 64}

- ``id``: unique, a safe file name (letters, digits, ``_ . -``; ``~`` is reserved for reuse suffixes);
- exactly one of ``messages`` (chat; non-empty list of ``{role, content}``) or ``prompt`` (text);
- optional ``bucket`` (default ``default``), ``max_tokens`` (positive int), ``chat_template_kwargs``
  (object), ``task`` (string). Unknown keys are kept but ignored.

Any error names ``path:line`` and is raised before anything is sent.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from inferencekit.errors import OpError

__all__ = ["Prompt", "PromptSet", "load_prompt_set", "parse_prompt_lines", "NAMED_SETS"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_ROLES = {"system", "user", "assistant", "tool", "developer"}
NAMED_SETS = ("dev",)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt. Exactly one of ``messages`` / ``prompt`` is set."""

    id: str
    bucket: str = "default"
    messages: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None
    max_tokens: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    task: str | None = None
    # a shared-prefix workload (data/shared_prefix.py): the group whose prefix this prompt's first user message opens
    # with, and that prefix's length in characters (the intended reuse: a reuse tag goes after it, bench/plan.py)
    shared_prefix_id: str | None = None
    shared_prefix_chars: int = 0
    # a multi-turn session (data/conversations.py): the user messages of its turns after the first, sent one by one
    # with the model's own replies as history (bench/runner.py)
    followups: tuple[str, ...] = ()
    session_id: str | None = None  # set on each turn sent: the session it belongs to, its turn (1-based) and the
    turn: int = 0  # session's number of turns (its first user message and its followups)
    session_turns: int = 0

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def text(self) -> str:
        """All message contents joined (for length estimates and hashing)."""
        if self.prompt is not None:
            return self.prompt
        parts = []
        for m in self.messages or ():
            c = m.get("content")
            parts.append(c if isinstance(c, str) else orjson.dumps(c).decode())
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class PromptSet:
    """Prompts plus where they came from (recorded in run.json and evidence)."""

    name: str
    source: str
    sha256: str
    prompts: tuple[Prompt, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, Any]:
        buckets: dict[str, int] = {}
        for p in self.prompts:
            buckets[p.bucket] = buckets.get(p.bucket, 0) + 1
        return {"name": self.name, "source": self.source, "sha256": self.sha256, "count": len(self.prompts),
                "buckets": buckets}


def _fail(where: str, msg: str) -> OpError:
    return OpError(f"{where}: {msg}")


def _check_messages(where: str, msgs: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(msgs, list) or not msgs:
        raise _fail(where, "'messages' must be a non-empty list of {role, content} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _fail(where, f"messages[{i}] is not an object")
        if not isinstance(m.get("role"), str) or m["role"] not in _ROLES:
            raise _fail(where, f"messages[{i}].role {m.get('role')!r} is not one of {', '.join(sorted(_ROLES))}")
        c = m.get("content")
        if not (isinstance(c, str) or isinstance(c, list) or (c is None and m.get("tool_calls"))):
            raise _fail(where, f"messages[{i}].content must be a string or a list of parts")
    return tuple(msgs)


def parse_prompt_lines(lines: list[bytes], source: str) -> list[Prompt]:
    """Validate JSONL lines into prompts.

    Raises:
        OpError: the first bad line, as ``source:line: what is wrong``.
    """
    out: list[Prompt] = []
    first_seen: dict[str, int] = {}
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{source}:{n}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise _fail(where, f"not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise _fail(where, "each line must be a JSON object")
        pid = obj.get("id")
        if not isinstance(pid, str) or not _ID.match(pid):
            raise _fail(where, f"'id' {pid!r} must be a string of letters, digits, _ . - (at most 100, "
                               "starting with a letter or digit)")
        if pid in first_seen:
            raise _fail(where, f"duplicate id {pid!r} (first at line {first_seen[pid]})")
        first_seen[pid] = n
        has_m, has_p = "messages" in obj, "prompt" in obj
        if has_m == has_p:
            raise _fail(where, "give exactly one of 'messages' (chat) or 'prompt' (text)")
        msgs = _check_messages(where, obj["messages"]) if has_m else None
        text = obj.get("prompt")
        if has_p and (not isinstance(text, str) or not text):
            raise _fail(where, "'prompt' must be a non-empty string")
        bucket = obj.get("bucket", "default")
        if not isinstance(bucket, str) or not _ID.match(bucket):
            raise _fail(where, f"'bucket' {bucket!r} must be a safe name (letters, digits, _ . -)")
        mt = obj.get("max_tokens")
        if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
            raise _fail(where, f"'max_tokens' must be a positive integer, got {mt!r}")
        ctk = obj.get("chat_template_kwargs")
        if ctk is not None and not isinstance(ctk, dict):
            raise _fail(where, "'chat_template_kwargs' must be an object")
        task = obj.get("task")
        out.append(Prompt(pid, bucket, msgs, text if has_p else None, mt, ctk,
                          task if isinstance(task, str) else None))
    return out


def _read_lines(path: Path) -> tuple[list[bytes], str]:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:  # zlib.error: a damaged deflate stream
        raise OpError(f"cannot read prompt file {str(path)!r}: {e}") from None
    return raw.split(b"\n"), hashlib.sha256(raw).hexdigest()


def load_prompt_set(name_or_path: str) -> PromptSet:
    """The named set (``dev``) or a ``.jsonl`` / ``.jsonl.gz`` file.

    Raises:
        OpError: unknown name, unreadable file, any invalid line (``path:line``), or an empty set.
    """
    if name_or_path in NAMED_SETS:
        ref = resources.files("inferencekit.data").joinpath(f"{name_or_path}.jsonl.gz")
        with resources.as_file(ref) as p:
            lines, digest = _read_lines(Path(p))
        source = f"inferencekit:{name_or_path}.jsonl.gz"
        name = name_or_path
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise OpError(f"prompt set {name_or_path!r} is neither a named set ({', '.join(NAMED_SETS)}) nor a file")
        if not (path.name.endswith(".jsonl") or path.name.endswith(".jsonl.gz")):
            raise OpError(f"prompt file {name_or_path!r} must end in .jsonl or .jsonl.gz")
        lines, digest = _read_lines(path)
        source = str(path)
        name = path.name
    prompts = parse_prompt_lines(lines, source)
    if not prompts:
        raise OpError(f"prompt set {source!r} holds no prompts")
    return PromptSet(name, source, digest, tuple(prompts))
