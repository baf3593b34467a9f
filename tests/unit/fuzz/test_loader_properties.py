"""Any prompt file gives prompts or the documented one-line error naming path:line (issue 19), never another
exception: JSONL lines of any content, any bytes, and gzip files damaged anywhere."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from inferencekit.data.datasets import load_static
from inferencekit.data.prompts import Prompt, parse_prompt_lines
from inferencekit.errors import OpError
from tests.unit.fuzz.strategies import JSON, field, maybe_dict

MESSAGE = maybe_dict({"role": field(st.sampled_from(["system", "user", "assistant", "tool"])),
                      "content": field(st.text(max_size=12)), "tool_calls": JSON})
RECORD = maybe_dict({"id": field(st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,8}", fullmatch=True)),
                     "messages": field(st.lists(MESSAGE, max_size=3)), "prompt": field(st.text(max_size=12)),
                     "bucket": field(st.sampled_from(["short", "medium", "../x", ""])),
                     "max_tokens": field(st.integers(-2, 2**70)), "chat_template_kwargs": JSON,
                     "task": JSON})
LINE = st.one_of(RECORD.map(lambda r: json.dumps(r, allow_nan=True).encode()),
                 JSON.map(lambda v: json.dumps(v, allow_nan=True).encode()), st.binary(max_size=40))
_DIR = Path(tempfile.mkdtemp(prefix="ik-fuzz-prompts-"))


def _check(prompts: list[Prompt]) -> None:
    ids = [p.id for p in prompts]
    assert len(set(ids)) == len(ids)
    for p in prompts:
        assert (p.messages is None) != (p.prompt is None)
        assert "/" not in p.bucket and ".." != p.bucket
        assert p.max_tokens is None or (isinstance(p.max_tokens, int) and p.max_tokens >= 1)


@given(st.lists(LINE, max_size=6))
def test_any_lines_give_prompts_or_path_line(lines: list[bytes]) -> None:
    try:
        prompts = parse_prompt_lines(lines, "f.jsonl")
    except OpError as e:
        event("refused with path:line")
        assert str(e).startswith("f.jsonl:"), str(e)
        line = int(str(e).split(":")[1])
        assert 1 <= line <= len(lines)
        return
    event("parsed")
    _check(prompts)


@given(st.lists(LINE, max_size=6), st.booleans(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                            max_size=3), st.integers(0, 10**6))
def test_any_file_gives_prompts_or_one_error(lines: list[bytes], gz: bool, flips: list[tuple[int, int]],
                                             cut: int) -> None:
    raw = b"\n".join(lines)
    if gz:
        raw = gzip.compress(raw)
    data = bytearray(raw)
    for pos, val in flips:  # damage anywhere: a flipped byte, a truncated file
        if data:
            data[pos % len(data)] = val
    if cut and data and cut % 3 == 0:
        del data[cut % len(data):]
    path = _DIR / ("p.jsonl.gz" if gz else "p.jsonl")
    path.write_bytes(bytes(data))
    try:
        loaded = load_static(str(path))
    except OpError as e:
        event("refused")
        msg = str(e)
        assert "\n" not in msg and str(path) in msg, msg
        return
    assert loaded is not None
    event("loaded")
    _check(loaded[0])
