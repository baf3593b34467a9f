"""BFCL single-turn data: the tool conversion rules, the fixed draw, the cap, and the data lookup.

``tests/fixtures/bfcl`` holds real BFCL lines (bfcl-eval 2026.3.23, Apache-2.0; see its NOTICE),
a few per subset, in file order. The files the exact-id tests rely on:

- simple_python (10 lines): ids 0, 1, 13, 83 (tuple of float), 89 (dict in dict), 94,
  96 (dict in array items, dotted name), 109 (any, dotted name), 200, 399;
- simple_java (6 lines): ids 0, 1 (any, HashMap), 2, 22 (ArrayList of long), 61, 72;
- simple_javascript (3 lines): ids 0, 5, 23 (String, and ``""`` nested in a dict);
- live_simple: 58-27-0 has a system message; live_irrelevance: 120-9-0 has no functions.

Sizes per subset: 10, 6, 3, 4, 3, 3, 3, 5, 4, 3, 3, 4, 3 (SINGLE_TURN order).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import re
from pathlib import Path

import pytest

from inferencekit.data import bfcl
from inferencekit.data.bfcl import (
    INSTALL_HINT,
    SINGLE_TURN,
    Sample,
    bfcl_data_dir,
    cap_draw,
    draw,
    load_answers,
    load_subset,
    to_openai_tools,
)
from inferencekit.errors import OpError
from tests.conftest import _missing
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "bfcl"
SIZES = dict(zip(SINGLE_TURN, (10, 6, 3, 4, 3, 3, 3, 5, 4, 3, 3, 4, 3), strict=True))
STANDARD = {"string", "integer", "number", "boolean", "array", "object", "null"}


def _entry(subset: str, sample_id: str) -> dict:
    return next(e for e in load_subset(FIXTURES, subset) if e["id"] == sample_id)


def _params(subset: str, sample_id: str) -> dict:
    tools, _ = to_openai_tools(_entry(subset, sample_id)["function"])
    return tools[0]["function"]["parameters"]


def _fn(params: dict, name: str = "f") -> dict:
    return {"name": name, "description": "d", "parameters": params}


def _types(schema: object) -> list[object]:
    """Every ``type`` value in a converted schema, through properties, items, additionalProperties."""
    if not isinstance(schema, dict):
        return []
    found = [schema["type"]] if "type" in schema else []
    for sub in schema.get("properties", {}).values():
        found += _types(sub)
    for key in ("items", "additionalProperties"):
        found += _types(schema.get(key))
    return found


# --------------------------------------------------------------------------- conversion

def test_fixtures_cover_every_subset_with_the_stated_sizes() -> None:
    assert {s: len(load_subset(FIXTURES, s)) for s in SINGLE_TURN} == SIZES
    assert "Apache" in (FIXTURES / "NOTICE").read_text() and "2026.3.23" in (FIXTURES / "NOTICE").read_text()


def test_dict_becomes_object_in_properties_and_in_items() -> None:
    nested = _params("simple_python", "simple_python_89")["properties"]["conditions"]
    assert nested["type"] == "object"
    assert nested["properties"]["school"] == {"type": "string",
                                              "description": "The name of the school students are enrolled in."}
    items = _params("simple_python", "simple_python_96")["properties"]["conditions"]["items"]
    assert items["type"] == "object"
    assert items["required"] == ["field", "operation", "value"]
    assert items["properties"]["operation"]["enum"] == ["<", ">", "=", ">=", "<="]


def test_tuple_becomes_array_and_float_number() -> None:
    coord = _params("simple_python", "simple_python_83")["properties"]["coord1"]
    assert coord == {"type": "array", "description": "The first coordinate as (latitude, longitude).",
                     "items": {"type": "number"}}


def test_any_and_empty_type_drop_the_type_key() -> None:
    data = _params("simple_python", "simple_python_109")["properties"]["data"]
    assert data == {"description": "The training data for the model."}
    issuer = _params("simple_javascript", "simple_javascript_23")["properties"]["options"]["properties"]["issuer"]
    assert issuer == {"description": "The entity that issued the token."}


def test_java_and_javascript_type_names() -> None:
    java = _params("simple_java", "simple_java_1")["properties"]
    assert java["params"]["type"] == "object"
    assert "type" not in java["object"]
    ids = _params("simple_java", "simple_java_22")["properties"]["ids"]
    assert (ids["type"], ids["items"]) == ("array", {"type": "integer"})
    js = _params("simple_javascript", "simple_javascript_23")["properties"]
    assert js["username"]["type"] == "string"
    assert js["options"]["properties"]["role"]["type"] == "string"
    synthetic = {"type": "dict", "properties": {
        "a": {"type": "Boolean"}, "b": {"type": "Array", "items": {"type": "char"}}, "c": {"type": "double"},
        "d": {"type": "long"}, "e": {"type": "HashMap"}, "f": {"type": "String"}, "g": {"type": "ArrayList"}}}
    props = to_openai_tools([_fn(synthetic)])[0][0]["function"]["parameters"]["properties"]
    assert {k: v["type"] for k, v in props.items()} == {
        "a": "boolean", "b": "array", "c": "number", "d": "integer", "e": "object", "f": "string", "g": "array"}
    assert props["b"]["items"] == {"type": "string"}


def test_standard_names_stay_and_additional_properties_converts() -> None:
    params = {"type": "object", "properties": {
        t: {"type": t} for t in sorted(STANDARD)} | {
        "m": {"type": "dict", "additionalProperties": {"type": "float"}},
        "open": {"type": "dict", "additionalProperties": True}}}
    props = to_openai_tools([_fn(params)])[0][0]["function"]["parameters"]["properties"]
    assert {t: props[t]["type"] for t in STANDARD} == {t: t for t in STANDARD}
    assert props["m"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["open"] == {"type": "object", "additionalProperties": True}


def test_a_property_named_type_is_a_property_not_a_type() -> None:
    params = {"type": "dict", "properties": {"type": {"type": "float", "description": "kind"}},
              "required": ["type"]}
    out = to_openai_tools([_fn(params)])[0][0]["function"]["parameters"]
    assert out == {"type": "object", "properties": {"type": {"type": "number", "description": "kind"}},
                   "required": ["type"]}


def test_top_level_object_extra_keys_kept_and_tool_shape() -> None:
    fn = {"name": "g", "description": "does g", "parameters": {
        "type": "dict", "required": ["x"], "optional": ["y"],
        "properties": {"x": {"type": "string", "format": "date", "default": None, "enum": ["a", "b"]},
                       "y": {"type": "array", "minItems": 5, "maxItems": 100, "items": {"type": "integer"},
                             "optional": True}}}}
    tools, renamed = to_openai_tools([fn])
    assert renamed == {}
    assert tools == [{"type": "function", "function": {"name": "g", "description": "does g", "parameters": {
        "type": "object", "required": ["x"], "optional": ["y"],
        "properties": {"x": {"type": "string", "format": "date", "default": None, "enum": ["a", "b"]},
                       "y": {"type": "array", "minItems": 5, "maxItems": 100, "items": {"type": "integer"},
                             "optional": True}}}}}]
    untyped = to_openai_tools([{"name": "h", "parameters": {"properties": {}}}])[0][0]["function"]
    assert untyped == {"name": "h", "parameters": {"type": "object", "properties": {}}}


def test_the_input_is_not_modified_and_the_output_shares_nothing() -> None:
    functions = _entry("simple_python", "simple_python_96")["function"]
    before = copy.deepcopy(functions)
    tools, _ = to_openai_tools(functions)
    assert functions == before
    tools[0]["function"]["parameters"]["properties"]["conditions"]["items"]["required"].append("x")
    tools[0]["function"]["description"] += "!"
    assert functions == before


def test_names_are_renamed_and_the_map_lists_only_renames() -> None:
    fns = [_fn({"type": "dict", "properties": {}}, n) for n in ("math.factorial", "a.b.c", "ok_name-1", "sp ace/x")]
    tools, renamed = to_openai_tools(fns)
    assert [t["function"]["name"] for t in tools] == ["math_factorial", "a_b_c", "ok_name-1", "sp_ace_x"]
    assert renamed == {"math_factorial": "math.factorial", "a_b_c": "a.b.c", "sp_ace_x": "sp ace/x"}
    assert to_openai_tools(_entry("simple_python", "simple_python_109")["function"])[1] == {
        "random_forest_train": "random_forest.train"}


def test_unknown_type_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'Integer'.*f\.parameters\.x\.items"):
        to_openai_tools([_fn({"type": "dict", "properties": {"x": {"type": "array", "items": {"type": "Integer"}}}})])
    with pytest.raises(ValueError, match=r"\['string', 'null'\]"):
        to_openai_tools([_fn({"type": "dict", "properties": {"x": {"type": ["string", "null"]}}})])


def test_colliding_or_unusable_names_are_value_errors() -> None:
    empty = {"type": "dict", "properties": {}}
    with pytest.raises(ValueError, match=r"'a\.b' and 'a_b' both become 'a_b'"):
        to_openai_tools([_fn(empty, "a.b"), _fn(empty, "a_b")])
    with pytest.raises(ValueError, match="both become"):
        to_openai_tools([_fn(empty, "same"), _fn(empty, "same")])
    with pytest.raises(ValueError, match="64"):
        to_openai_tools([_fn(empty, "x" * 65)])
    with pytest.raises(ValueError, match="non-empty string"):
        to_openai_tools([_fn(empty, "")])
    with pytest.raises(TypeError, match="parameters of 'f' is not an object"):
        to_openai_tools([_fn([])])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- samples and loading

def test_sample_body_fields_are_fresh_copies_and_keep_a_system_message() -> None:
    d = draw(FIXTURES, per_subset=10)
    s = next(x for x in d.samples if x.sample_id == "live_simple_58-27-0")
    body = s.body_fields()
    assert set(body) == {"messages", "tools", "tool_choice"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1] == {"role": "user", "content": "list movies in Mumbai?"}
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "get_movies"
    body["messages"].clear()
    body["tools"][0]["function"]["name"] = "changed"
    assert len(s.messages) == 2 and s.tools[0]["function"]["name"] == "get_movies"
    assert s.body_fields() == s.body_fields() and s.body_fields() is not s.body_fields()


def test_a_sample_without_functions_sends_messages_only() -> None:
    s = next(x for x in draw(FIXTURES, per_subset=10).samples if x.sample_id == "live_irrelevance_120-9-0")
    assert s.tools == [] and s.tool_choice == "auto"
    assert list(s.body_fields()) == ["messages"]


def _write(tmp_path: Path, subset: str, lines: list[str]) -> Path:
    (tmp_path / f"BFCL_v4_{subset}.json").write_text("\n".join(lines) + "\n")
    return tmp_path / f"BFCL_v4_{subset}.json"


GOOD = '{"id": "parallel_0", "question": [[{"role": "user", "content": "hi"}]], "function": []}'


@pytest.mark.parametrize(("bad", "why"), [
    ('{"id": "x", "question": [[{"role": "user"', "not valid JSON"),
    ('[1, 2]', "not a JSON object but list"),
    ('{"id": "x", "question": [[{"role": "user", "content": "hi"}]]}', "missing function"),
    ('{"question": [], "function": []}', "missing id"),
    (('{"id": "x", "question": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]], '
      '"function": []}'), "exactly 1 turn, has 2"),
    ('{"id": "x", "question": [[]], "function": []}', "not a non-empty list of messages"),
    ('{"id": "x", "question": [[{"role": "user", "content": "a"}]], "function": {}}', "function is not a list"),
    (GOOD, "already on line 1"),
])
def test_a_malformed_line_names_path_and_line(tmp_path: Path, bad: str, why: str) -> None:
    path = _write(tmp_path, "parallel", [GOOD, "", bad])
    with pytest.raises(OpError) as e:
        load_subset(tmp_path, "parallel")
    assert f"{path}:3: " in str(e.value) and why in str(e.value)


def test_load_subset_skips_blank_lines_and_refuses_unknown_subsets(tmp_path: Path) -> None:
    _write(tmp_path, "parallel", ["", GOOD, "  "])
    assert [e["id"] for e in load_subset(tmp_path, "parallel")] == ["parallel_0"]
    with pytest.raises(OpError, match="unknown BFCL subset 'multi_turn_base'"):
        load_subset(tmp_path, "multi_turn_base")
    with pytest.raises(OpError, match="cannot read .*BFCL_v4_simple_python.json"):
        load_subset(tmp_path, "simple_python")


def test_load_answers_reads_the_possible_answer_file_and_names_a_bad_line(tmp_path: Path) -> None:
    (tmp_path / "possible_answer").mkdir()
    answers = tmp_path / "possible_answer" / "BFCL_v4_simple_python.json"
    answers.write_text('{"id": "simple_python_1", "ground_truth": [{"math.factorial": {"number": [5]}}]}\n\n'
                       '{"id": "simple_python_2", "ground_truth": {}}\n')
    with pytest.raises(OpError, match=f"{re.escape(str(answers))}:3: not an object with an id and a ground_truth"):
        load_answers(tmp_path, "simple_python")
    answers.write_text('{"id": "simple_python_1", "ground_truth": [{"math.factorial": {"number": [5]}}]}\n')
    assert load_answers(tmp_path, "simple_python") == {"simple_python_1": [{"math.factorial": {"number": [5]}}]}
    with pytest.raises(OpError, match="cannot read BFCL's possible answers .*BFCL_v4_live_simple.json"):
        load_answers(tmp_path, "live_simple")
    with pytest.raises(OpError, match="unknown BFCL subset"):
        load_answers(tmp_path, "memory")


# --------------------------------------------------------------------------- the draw

def test_draw_is_deterministic() -> None:
    a, b = draw(FIXTURES, per_subset=3), draw(FIXTURES, per_subset=3)
    assert a.samples == b.samples and a.draw_id == b.draw_id
    assert a.draw_id == hashlib.sha256("\n".join(s.sample_id for s in a.samples).encode()).hexdigest()
    assert a.draw_id != draw(FIXTURES, per_subset=2).draw_id


def test_positions_are_evenly_spaced() -> None:
    def ids(d: bfcl.Draw, subset: str) -> list[str]:
        return [s.sample_id for s in d.samples if s.subset == subset]

    # n = 10, k = 3: floor(5/3), floor(5), floor(25/3) = 1, 5, 8
    assert ids(draw(FIXTURES, per_subset=3), "simple_python") == [
        "simple_python_1", "simple_python_94", "simple_python_200"]
    d4 = draw(FIXTURES, per_subset=4)
    # n = 10, k = 4: 1.25, 3.75, 6.25, 8.75 → 1, 3, 6, 8;  n = 6, k = 4: 0.75, 2.25, 3.75, 5.25 → 0, 2, 3, 5
    assert ids(d4, "simple_python") == ["simple_python_1", "simple_python_83", "simple_python_96", "simple_python_200"]
    assert ids(d4, "simple_java") == ["simple_java_0", "simple_java_2", "simple_java_22", "simple_java_72"]
    # n = 10, k = 1: the middle, position 5
    assert ids(draw(FIXTURES, per_subset=1), "simple_python") == ["simple_python_94"]


def test_draw_order_is_round_robin_and_skips_exhausted_subsets() -> None:
    d = draw(FIXTURES, per_subset=4)
    order = [s.subset for s in d.samples]
    assert order[:13] == list(SINGLE_TURN)
    assert order[:14] == [*SINGLE_TURN, "simple_python"]
    assert order[26:39] == list(SINGLE_TURN)
    four = [s for s in SINGLE_TURN if SIZES[s] >= 4]
    assert order[39:] == four == ["simple_python", "simple_java", "multiple", "live_simple", "live_multiple",
                                  "live_irrelevance"]
    assert len(d.samples) == sum(min(4, n) for n in SIZES.values()) == 45


def test_per_subset_larger_than_a_file_takes_the_whole_file() -> None:
    d = draw(FIXTURES, per_subset=50)
    assert d.counts() == SIZES and len(d.samples) == sum(SIZES.values())
    assert [s.sample_id for s in d.samples if s.subset == "live_relevance"] == [
        e["id"] for e in load_subset(FIXTURES, "live_relevance")]
    assert len({s.sample_id for s in d.samples}) == len(d.samples)


@pytest.mark.parametrize("per_subset", [0, -1])
def test_per_subset_below_one_is_an_op_error(per_subset: int) -> None:
    with pytest.raises(OpError, match="per_subset must be at least 1"):
        draw(FIXTURES, per_subset=per_subset)


def test_describe_states_the_source_and_the_draw() -> None:
    d = draw(FIXTURES, per_subset=2)
    desc = json.loads(json.dumps(d.describe()))
    assert desc["source"] == {"package": "bfcl-eval", "pinned_version": "2026.3.23", "version": None,
                              "license": "Apache-2.0", "install": INSTALL_HINT}
    assert desc["data_dir"] == str(FIXTURES) and desc["per_subset"] == 2 and desc["n"] == 26
    assert desc["counts"] == dict.fromkeys(SINGLE_TURN, 2) and desc["subset_sizes"] == SIZES
    assert desc["files_sha256"] == {s: hashlib.sha256((FIXTURES / f"BFCL_v4_{s}.json").read_bytes()).hexdigest()
                                    for s in SINGLE_TURN}
    assert desc["files_match_pinned"] is False
    assert desc["draw_id"] == d.draw_id
    assert "floor((j + 0.5) * n / k)" in desc["selection"] and "round-robin" in desc["selection"]
    assert any("tuple->array" in r for r in desc["conversion"])


def test_a_selected_sample_outside_the_rules_is_an_op_error(tmp_path: Path) -> None:
    for s in SINGLE_TURN:
        (tmp_path / f"BFCL_v4_{s}.json").write_bytes((FIXTURES / f"BFCL_v4_{s}.json").read_bytes())
    line = ('{"id": "parallel_9", "question": [[{"role": "user", "content": "hi"}]], '
            '"function": [{"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "Queue"}}}}]}')
    _write(tmp_path, "parallel", [line])
    with pytest.raises(OpError, match=r"parallel_9 in parallel: unknown BFCL type 'Queue'.*2026\.3\.23"):
        draw(tmp_path)


# --------------------------------------------------------------------------- the cap

def test_cap_keeps_the_prefix_and_says_what_it_keeps() -> None:
    d = draw(FIXTURES, per_subset=2)
    kept, warning = cap_draw(d, 15)
    assert kept == d.samples[:15]
    assert [s.subset for s in kept] == [*SINGLE_TURN, "simple_python", "simple_java"]
    assert warning is not None
    assert warning.startswith("capped at 15 of the 26-sample draw: the first 15 in draw order")
    assert "keeps simple_python 2, simple_java 2, simple_javascript 1, multiple 1," in warning
    assert "live_relevance 1 and drops 11 (simple_javascript 1, multiple 1," in warning
    assert "a result at one cap does not describe another" in warning


@pytest.mark.parametrize("cap", [0, 26, 100])
def test_no_cap_or_a_cap_past_the_end_keeps_everything(cap: int) -> None:
    d = draw(FIXTURES, per_subset=2)
    kept, warning = cap_draw(d, cap)
    assert kept == d.samples and kept is not d.samples and warning is None


def test_a_negative_cap_is_an_op_error() -> None:
    with pytest.raises(OpError, match="got -1"):
        cap_draw(draw(FIXTURES, per_subset=1), -1)


# --------------------------------------------------------------------------- finding the data

def test_a_given_folder_is_checked_for_every_file(tmp_path: Path) -> None:
    assert bfcl_data_dir(str(FIXTURES)) == FIXTURES
    (tmp_path / "BFCL_v4_simple_python.json").write_text(GOOD)
    with pytest.raises(OpError) as e:
        bfcl_data_dir(str(tmp_path))
    assert "lacks 12 of the 13" in str(e.value) and "BFCL_v4_live_relevance.json" in str(e.value)
    assert "BFCL_v4_simple_python.json" not in str(e.value)
    with pytest.raises(OpError, match="not a folder"):
        bfcl_data_dir(str(tmp_path / "nowhere"))


def test_the_package_missing_is_an_op_error_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(OpError) as e:
        bfcl_data_dir()
    assert "pip install --no-deps bfcl-eval==2026.3.23 (--no-deps: only its data files are read; make venv does it)" \
        in str(e.value)
    assert "not installed" in str(e.value) and "--bfcl-data DIR" in str(e.value)
    assert bfcl.installed_version() is None


def test_the_installed_package_converts_and_draws() -> None:
    if bfcl.installed_version() is None:
        _missing("bfcl-eval", "not installed (pip install --no-deps bfcl-eval==2026.3.23; the Makefile does)")
    data = bfcl_data_dir()
    name_ok = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
    for subset in SINGLE_TURN:
        for entry in load_subset(data, subset):
            tools, renamed = to_openai_tools(entry["function"])
            assert all(name_ok.match(t["function"]["name"]) for t in tools), entry["id"]
            assert all(t["function"]["parameters"]["type"] == "object" for t in tools)
            assert {ty for t in tools for ty in _types(t["function"]["parameters"])} <= STANDARD, entry["id"]
            assert set(renamed.values()) <= {f["name"] for f in entry["function"]}
    d = draw(data)
    assert len(d.samples) == 8 * 13 == len({s.sample_id for s in d.samples})
    assert d.counts() == dict.fromkeys(SINGLE_TURN, 8)
    assert all(isinstance(s, Sample) and s.sample_id.startswith(s.subset + "_") for s in d.samples)
    desc = d.describe()
    assert desc["source"]["version"] == bfcl.installed_version()
    if desc["source"]["version"] == bfcl.BFCL_VERSION:
        assert desc["files_match_pinned"] is True
