import gzip

import pytest

from inferencekit.data.prompts import load_prompt_set
from inferencekit.errors import OpError


def write(tmp_path, text, name="p.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("line,msg", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"prompt": "x"}', "'id'"),
    ('{"id": "../etc", "prompt": "x"}', "'id'"),
    ('{"id": "a b", "prompt": "x"}', "'id'"),
    ('{"id": "x", "prompt": "x", "messages": [{"role": "user", "content": "y"}]}', "exactly one"),
    ('{"id": "x"}', "exactly one"),
    ('{"id": "x", "messages": [{"role": "robot", "content": "y"}]}', "role"),
    ('{"id": "x", "messages": [{"role": ["user"], "content": "y"}]}', "role"),  # failed before 19: a TypeError
    ('{"id": "x", "messages": [{"role": {"a": 1}, "content": "y"}]}', "role"),
    ('{"id": "x", "prompt": "y", "bucket": ".."}', "bucket"),
    ('{"id": "x", "messages": [{"role": "user", "content": 5}]}', "content"),
    ('{"id": "x", "prompt": ""}', "non-empty"),
    ('{"id": "x", "prompt": "y", "max_tokens": 0}', "max_tokens"),
    ('{"id": "x", "prompt": "y", "bucket": "a/b"}', "bucket"),
])
def test_bad_lines_name_path_and_line(tmp_path, line, msg):
    p = write(tmp_path, '{"id": "ok1", "prompt": "fine"}\n\n' + line + "\n")
    with pytest.raises(OpError) as e:
        load_prompt_set(str(p))
    assert str(e.value).startswith(f"{p}:3: ")
    assert msg in str(e.value)


def test_duplicate_ids_name_both_lines(tmp_path):
    p = write(tmp_path, '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(OpError, match=r":2: duplicate id 'a' \(first at line 1\)"):
        load_prompt_set(str(p))


def test_gzip_file_and_fields(tmp_path):
    p = tmp_path / "s.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"id": "c1", "bucket": "short", "max_tokens": 9, "messages": '
                                b'[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}\n'))
    ps = load_prompt_set(str(p))
    (pr,) = ps.prompts
    assert (pr.id, pr.bucket, pr.max_tokens, pr.is_chat, pr.text()) == ("c1", "short", 9, True, "s\nu")
    assert ps.describe()["buckets"] == {"short": 1} and len(ps.sha256) == 64


def test_a_damaged_gzip_file_names_its_path_and_the_reason(tmp_path):
    raw = bytearray(gzip.compress(b'{"id": "a", "prompt": "x"}\n' * 50))
    raw[len(raw) // 2] ^= 0xFF
    p = tmp_path / "s.jsonl.gz"
    p.write_bytes(bytes(raw))
    with pytest.raises(OpError) as e:
        load_prompt_set(str(p))
    assert str(p) in str(e.value) and "cannot read prompt file" in str(e.value)


def test_empty_and_wrong_suffix_and_missing(tmp_path):
    with pytest.raises(OpError, match="holds no prompts"):
        load_prompt_set(str(write(tmp_path, "\n\n")))
    with pytest.raises(OpError, match="must end in .jsonl"):
        load_prompt_set(str(write(tmp_path, "{}", "p.txt")))
    with pytest.raises(OpError, match="neither a named set"):
        load_prompt_set(str(tmp_path / "nope.jsonl"))


def test_packaged_dev_set_meets_its_contract():
    ps = load_prompt_set("dev")
    assert len(ps.prompts) >= 200
    buckets = ps.describe()["buckets"]
    assert set(buckets) == {"very_short", "short", "medium", "long"}
    assert min(buckets.values()) >= 40
    starts = [p.text()[:200] for p in ps.prompts]
    assert len(set(starts)) == len(starts)  # no shared 200-character prefix between prompts
