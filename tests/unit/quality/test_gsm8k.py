"""GSM8K's pure layer: the packaged split, user files, answer extraction, scoring and pairing.

Expected values were read off the data file by hand or worked out on paper; the statistics are
checked against scipy's own binomial test.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import resources
from pathlib import Path

import pytest
from scipy.stats import binomtest

from inferencekit.data.gsm8k import GsmItem, load_gsm8k, normalize_number
from inferencekit.errors import OpError
from inferencekit.quality.gsm8k import (
    PAIR_FIELDS,
    PROMPT_TEMPLATE,
    extract_answer,
    mcnemar,
    numbers_equal,
    pair_problem,
    prompt_messages,
    prompt_sha256,
    score_items,
)

PACKAGED_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"


# --------------------------------------------------------------------------- data

def test_packaged_split_loads_all_problems_with_its_hash():
    data = load_gsm8k(None)
    raw = resources.files("inferencekit.data").joinpath("gsm8k", "test.jsonl").read_bytes()
    assert data.count == 1319
    assert data.sha256 == hashlib.sha256(raw).hexdigest() == PACKAGED_SHA256
    assert data.describe() == {"name": "gsm8k-test", "source": "package:inferencekit.data/gsm8k/test.jsonl",
                               "sha256": PACKAGED_SHA256, "count": 1319}
    assert len({it.id for it in data.items}) == 1319


def test_packaged_items_match_the_file_by_hand():
    items = load_gsm8k(None).items
    first = items[0]
    # Line 1 of test.jsonl: Janet's ducks; its answer ends "#### 18".
    assert first.id == "gsm8k-test-0000"
    assert first.question.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.answer_text.endswith("#### 18")
    assert first.target == "18"
    # Line 147 ends "#### 2,125" (comma removed), line 490 "#### -10", line 612 "#### 1,450,000".
    assert (items[146].id, items[146].target) == ("gsm8k-test-0146", "2125")
    assert items[489].target == "-10"
    assert items[611].target == "1450000"
    assert items[-1].id == "gsm8k-test-1318"


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_user_jsonl_loads_with_its_own_hash_and_ids(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [
        {"question": "Two plus two?", "answer": "2+2=4\n#### 4", "extra": 1},
        "",
        {"question": "How many cents?", "answer": "It is 1,250 cents.\n#### 1,250"},
    ])
    data = load_gsm8k(str(path))
    assert data.name == "gsm8k-data"
    assert data.source == str(path.resolve())
    assert data.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [(it.id, it.target) for it in data.items] == [("gsm8k-data-0000", "4"), ("gsm8k-data-0001", "1250")]


def test_malformed_jsonl_names_path_and_line(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [
        {"question": "ok?", "answer": "#### 1"},
        '{"question": "broken", "answer": ',
        "also not json",
    ])
    with pytest.raises(OpError) as e:
        load_gsm8k(str(path))
    assert f"{path}:2:" in str(e.value)
    assert ":3" not in str(e.value)


@pytest.mark.parametrize("row, needle", [
    ({"question": "q", "answer": "no final line"}, "#### <number>"),
    ({"question": "q", "answer": "#### three"}, "#### <number>"),
    ({"question": "", "answer": "#### 3"}, "'question'"),
    ({"question": "q"}, "'answer'"),
    (["q", "#### 3"], "JSON object"),
])
def test_rows_without_a_gsm8k_answer_are_refused_at_their_line(tmp_path, row, needle):
    path = _write_jsonl(tmp_path / "rows.jsonl", [{"question": "fine", "answer": "#### 2"}, row])
    with pytest.raises(OpError) as e:
        load_gsm8k(path)
    assert f"{path}:2:" in str(e.value) and needle in str(e.value)


def test_missing_and_empty_files_are_user_errors(tmp_path):
    with pytest.raises(OpError, match="cannot read"):
        load_gsm8k(str(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(OpError, match="no problems"):
        load_gsm8k(str(tmp_path / "empty.jsonl"))


def test_parquet_without_a_reader_says_how_to_install(tmp_path, monkeypatch):
    path = tmp_path / "test.parquet"
    path.write_bytes(b"PAR1 not really")
    for name in ("pyarrow", "pyarrow.parquet", "pandas"):
        monkeypatch.setitem(sys.modules, name, None)  # import of a None entry raises ImportError
    with pytest.raises(OpError) as e:
        load_gsm8k(str(path))
    assert str(e.value) == (f"{path}: reading Parquet needs pandas and pyarrow (missing: pyarrow, pandas): "
                            "pip install 'inferencekit[parquet]' (or make venv)")


def test_parquet_with_pandas_but_no_engine_names_pyarrow(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    path = tmp_path / "test.parquet"
    path.write_bytes(b"PAR1 not really")
    for name in ("pyarrow", "pyarrow.parquet", "fastparquet"):
        monkeypatch.setitem(sys.modules, name, None)  # pandas.read_parquet then finds no engine: ImportError
    with pytest.raises(OpError) as e:
        load_gsm8k(str(path))
    assert str(e.value) == (f"{path}: reading Parquet needs pyarrow (missing: pyarrow): pip install "
                            "'inferencekit[parquet]' (or make venv); or convert the file to JSONL")


# --------------------------------------------------------------------------- prompt

def test_prompt_is_one_user_turn_and_its_hash_is_the_template_hash():
    msgs = prompt_messages("A farmer has {3} cows. How many legs?")
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    assert "A farmer has {3} cows. How many legs?" in msgs[0]["content"]
    assert "####" in msgs[0]["content"] and "step" in msgs[0]["content"]
    assert prompt_sha256() == hashlib.sha256(PROMPT_TEMPLATE.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- extraction

@pytest.mark.parametrize("reply, expected", [
    ("#### 1,234", ("1234", "hash")),
    ("The answer is $18.", ("18", "last_number")),
    ("\\boxed{-3}", ("-3", "boxed")),
    ("so \u22123 apples", ("-3", "last_number")),
    ("#### 2.50", ("2.5", "hash")),
    ("50%", ("50", "last_number")),
    ("\\boxed{\\$12}", ("12", "boxed")),
    ("\\boxed{12\\%}", ("12", "boxed")),
    ("I think it is \\boxed{\\frac{1}{2}}", ("1/2", "boxed")),
    ("There is no number in this reply.", (None, "none")),
    # precedence: hash over an earlier box and a later number; box over a later plain number
    ("So \\boxed{7}.\n#### 8\nCheck: 3 + 5 = 8, 9 left over", ("8", "hash")),
    ("The total is \\boxed{7}. Then 3 more makes 10", ("7", "boxed")),
    # the last of several
    ("#### 5\nWait, I was wrong.\n#### 6", ("6", "hash")),
    ("\\boxed{4} no, \\boxed{5}", ("5", "boxed")),
    # nested braces, words inside the box, a box cut off by max_tokens
    ("\\boxed{\\text{\\$}1{,}250}", ("1250", "boxed")),
    ("\\boxed{18 \\text{ apples}}", ("18", "boxed")),
    ("\\boxed{2+3=5}", ("2+3=5", "boxed")),
    ("first \\boxed{8}, then \\boxed{9", ("8", "boxed")),
    ("the answer is \\boxed{12", ("12", "last_number")),
    # a minus between operands is not a sign; a sign after "$"
    ("pages 3-4", ("4", "last_number")),
    ("he owes $-3.", ("-3", "last_number")),
    ("#### **42**", ("42", "hash")),
    ("#### The answer is 7", ("7", "last_number")),
    ("She keeps 3/4 of them", ("3/4", "last_number")),
])
def test_extract_answer_on_tricky_replies(reply, expected):
    assert extract_answer(reply) == expected


def test_decimal_reply_equals_integer_like_target():
    value, method = extract_answer("#### 2.50")
    assert method == "hash" and numbers_equal(value, "2.5")
    assert numbers_equal(extract_answer("#### 18.0")[0], "18")


@pytest.mark.parametrize("a, b, equal", [
    ("18.0", "18", True),
    ("1,000", "1000", True),
    ("$18.", "18", True),
    ("-0", "0", True),
    ("\u22123", "-3", True),
    ("2.5", "2.50", True),
    ("18", "19", False),
    ("3/4", "0.75", False),
    ("3/4", "3/4", False),
    ("1/2", "1", False),
    (None, "18", False),
    ("18", None, False),
    ("NaN", "NaN", False),
])
def test_numbers_equal(a, b, equal):
    assert numbers_equal(a, b) is equal


def test_normalize_number_normal_form():
    assert normalize_number(" $1,234.50. ") == "1234.5"
    assert normalize_number("\u22120.0") == "0"
    assert normalize_number("007") == "7"
    assert normalize_number("12%") == "12"
    assert normalize_number("3/4") is None
    assert normalize_number("about 3") is None
    assert normalize_number("1e3") is None


# --------------------------------------------------------------------------- scoring

def _items(*targets: str) -> list[GsmItem]:
    return [GsmItem(id=f"t-{i}", question=f"q{i}", answer_text=f"#### {t}", target=t) for i, t in enumerate(targets)]


def test_score_items_counts_failures_as_wrong_and_gives_wilson_bounds():
    items = _items("18", "1234", "5", "-3", "7", "2.5")
    replies = {
        "t-0": "She makes 9 * 2 = 18 dollars.\n#### 18",   # right, hash
        "t-1": "\\boxed{1,234}",                             # right, boxed
        "t-2": None,                                         # request failed
        "t-3": "so \u22123 apples",                          # right, last number
        "t-4": "no idea",                                    # wrong, none
        "t-5": "#### 5/2",                                   # fraction: wrong, hash
        "unrelated": "#### 1",                               # not an item: ignored
    }
    out = score_items(items, replies)
    assert (out["n"], out["correct"], out["failed"]) == (6, 3, 1)
    assert out["accuracy"] == pytest.approx(0.5)
    assert out["methods"] == {"hash": 2, "boxed": 1, "last_number": 1, "none": 1}
    assert [r["correct"] for r in out["rows"]] == [True, True, False, True, False, False]
    assert out["rows"][2] == {"id": "t-2", "target": "5", "extracted": None, "method": "none", "correct": False,
                              "failed": True}
    assert out["rows"][5]["extracted"] == "5/2"
    ci = binomtest(3, 6).proportion_ci(method="wilson")
    assert out["ci95"] == pytest.approx([ci.low, ci.high], abs=1e-12)
    # Wilson 1927 by hand for 3/6, z = 1.959964: centre 0.5, half-width z*sqrt(0.25/6 + z^2/144)/(1 + z^2/6).
    assert out["ci95"] == pytest.approx([0.187616, 0.812384], abs=1e-6)


def test_score_items_refuses_an_item_without_a_reply_entry_and_handles_none():
    with pytest.raises(ValueError, match="t-1"):
        score_items(_items("1", "2"), {"t-0": "#### 1"})
    empty = score_items([], {})
    assert (empty["n"], empty["accuracy"], empty["ci95"]) == (0, None, None)


# --------------------------------------------------------------------------- pairing

def _settings(**over):
    base = {"dataset_sha256": PACKAGED_SHA256, "prompt_sha256": prompt_sha256(), "max_tokens": 1024,
            "temperature": 0, "chat_template_kwargs": None, "backend": "builtin", "label": "a"}
    return {**base, **over}


def test_pair_problem_accepts_the_same_evaluation():
    assert pair_problem(_settings(), _settings(label="b", temperature=0.0, chat_template_kwargs={})) is None


def test_pair_problem_names_every_differing_field_with_both_values():
    msg = pair_problem(_settings(), _settings(max_tokens=512, chat_template_kwargs={"enable_thinking": False},
                                              label="other"))
    assert msg is not None
    assert "max_tokens (run A: 1024, run B: 512)" in msg
    assert 'chat_template_kwargs (run A: null, run B: {"enable_thinking": false})' in msg
    for same in ("dataset_sha256", "prompt_sha256", "temperature", "backend", "label"):
        assert same not in msg


def test_pair_problem_refuses_a_field_one_run_did_not_record():
    b = _settings()
    del b["backend"]
    msg = pair_problem(_settings(), b)
    assert msg is not None and "backend (not recorded in run B)" in msg
    assert set(PAIR_FIELDS) == {"dataset_sha256", "prompt_sha256", "max_tokens", "temperature",
                                "chat_template_kwargs", "backend"}


def _rows(marks: dict[str, bool]) -> list[dict]:
    return [{"id": k, "correct": v} for k, v in marks.items()]


def test_mcnemar_on_a_hand_made_pair():
    # Common ids 0..8: A right & B wrong on 0-3 (b = 4), A wrong & B right on 4 (c = 1),
    # both right on 5-7, both wrong on 8. Run A alone has 9; run B alone has 10 and 11.
    a = {str(i): ok for i, ok in enumerate([1, 1, 1, 1, 0, 1, 1, 1, 0, 1])}
    b = {str(i): ok for i, ok in enumerate([0, 0, 0, 0, 1, 1, 1, 1, 0])} | {"10": True, "11": False}
    out = mcnemar(_rows({k: bool(v) for k, v in a.items()}), _rows({k: bool(v) for k, v in b.items()}))
    assert (out["n_common"], out["b"], out["c"], out["both_correct"], out["both_wrong"]) == (9, 4, 1, 3, 1)
    assert (out["only_in_a"], out["only_in_b"]) == (1, 2)
    assert out["accuracy_a"] == pytest.approx(7 / 9) and out["accuracy_b"] == pytest.approx(4 / 9)
    # Exact two-sided: 2 * P(X >= 4 | n = 5, 1/2) = 2 * 6/32.
    assert out["p_value"] == pytest.approx(binomtest(4, 5, 0.5).pvalue) == pytest.approx(0.375)


def test_mcnemar_edge_cases():
    same = _rows({"x": True, "y": False})
    assert mcnemar(same, same)["p_value"] == 1.0
    apart = mcnemar(_rows({"x": True}), _rows({"y": True}))
    assert (apart["n_common"], apart["p_value"], apart["accuracy_a"], apart["only_in_a"]) == (0, None, None, 1)
    with pytest.raises(ValueError, match="twice"):
        mcnemar(same + same, same)


def test_line_numbers_count_newlines_only(tmp_path):
    # U+2028 is legal inside a JSON string and must not shift the line count; CRLF files load too.
    path = tmp_path / "crlf.jsonl"
    good = json.dumps({"question": "a\u2028b", "answer": "#### 3"}, ensure_ascii=False)
    path.write_bytes((good + "\r\n" + good + "\r\n" + "{oops\r\n").encode("utf-8"))
    with pytest.raises(OpError) as e:
        load_gsm8k(path)
    assert f"{path}:3:" in str(e.value)
    path.write_bytes((good + "\r\n").encode("utf-8"))
    assert load_gsm8k(path).items[0].question == "a\u2028b"
