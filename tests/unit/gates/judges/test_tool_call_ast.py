"""BFCL's AST rules (gates/judges/tool_call_ast.py) against BFCL's own data and possible answers.

The data is that of the installed ``bfcl-eval==2026.3.23`` (``make venv`` installs it with ``--no-deps``); the
package is located, never imported. Every failure case below mutates a real BFCL entry.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferencekit.gates.judges.tool_call_ast import (
    BUCKET_OF,
    BUCKETS,
    AstResult,
    check_call,
    check_calls,
    parse_tool_calls,
    standardize,
)

CATEGORIES = {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200}  # entries, 2026.3.23

Entry = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (function docs, ground truth)


def _data_dir() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or spec.origin is None:
        pytest.skip("bfcl-eval is not installed (`make venv` installs bfcl-eval==2026.3.23 with --no-deps)")
    return Path(spec.origin).parent / "data"


def _json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.cache
def _load(category: str) -> dict[str, Entry]:
    data = _data_dir()
    prompts = _json_lines(data / f"BFCL_v4_{category}.json")
    answers = _json_lines(data / "possible_answer" / f"BFCL_v4_{category}.json")
    assert [p["id"] for p in prompts] == [a["id"] for a in answers]
    return {p["id"]: (p["function"], a["ground_truth"]) for p, a in zip(prompts, answers)}


def entry(entry_id: str) -> Entry:
    category = entry_id.rsplit("_", 1)[0]
    docs, truth = _load(category)[entry_id]
    return copy.deepcopy(docs), copy.deepcopy(truth)


def _first(allowed: list[Any]) -> Any:
    return next(v for v in allowed if v != "")


def _ideal_value(schema: dict[str, Any], value: Any, omit_optional: bool) -> Any:
    """A dict answer is ``{key: [allowed, ...]}`` (a list of dicts for arrays of dicts): pick within it."""
    def pick(answer: dict[str, list[Any]]) -> dict[str, Any]:
        return {k: _first(vs) for k, vs in answer.items() if vs != [""] and not (omit_optional and "" in vs)}
    if schema["type"] == "dict" and isinstance(value, dict):
        return pick(value)
    if schema.get("items", {}).get("type") == "dict" and isinstance(value, list):
        return [pick(d) for d in value]
    return value


def ideal_call(doc: dict[str, Any], answer: dict[str, Any], omit_optional: bool) -> dict[str, Any]:
    """The first allowed value of each parameter. A parameter whose answers include ``""`` is left out when it
    is not ``required`` (BFCL checks ``required`` first) and ``omit_optional`` is set, or it has no other
    answer, or it is not in the function's schema (BFCL would call it unexpected: parallel_multiple_12
    ``permeability``, parallel_multiple_26 ``type``)."""
    (name, allowed_by_param), = answer.items()
    properties, required = doc["parameters"]["properties"], doc["parameters"].get("required", [])
    arguments = {}
    for param, allowed in allowed_by_param.items():
        if "" in allowed and param not in required and (omit_optional or allowed == [""] or param not in properties):
            continue
        arguments[param] = _ideal_value(properties[param], _first(allowed), omit_optional)
    return {"name": name, "arguments": arguments}


def ideal_calls(docs: list[dict[str, Any]], truth: list[dict[str, Any]], omit_optional: bool = False
                ) -> list[dict[str, Any]]:
    by_name = {d["name"]: d for d in docs}
    return [ideal_call(by_name[next(iter(answer))], answer, omit_optional) for answer in truth]


def assert_fails(result: AstResult, bucket: str, *named: str) -> None:
    assert not result.valid
    assert result.bucket == bucket, result
    for text in named:
        assert text in result.detail, (text, result.detail)


# --- the whole of BFCL's data: the ideal calls are valid ---------------------------------------------------------

@pytest.mark.parametrize("category", list(CATEGORIES))
def test_every_ideal_call_of_the_category_is_valid(category: str) -> None:
    """No entry excluded: each is checked with every optional parameter sent, with every omittable one left
    out, and with ``.`` sent as ``_`` in names. Parallel entries are also checked with their calls in reverse
    order: valid for all but parallel_178 (see test_parallel_matching_is_greedy_as_bfcl)."""
    entries = _load(category)
    lines = (_data_dir() / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").strip().count("\n") + 1
    assert len(entries) == lines == CATEGORIES[category]
    checked = underscored = reversed_ = 0
    reverse_fails = set()
    for entry_id, (docs, truth) in entries.items():
        for omit in (False, True):
            calls = ideal_calls(docs, truth, omit)
            assert check_calls(docs, calls, truth) == AstResult(True, None, ""), (entry_id, omit, calls)
            renamed = [dict(c, name=c["name"].replace(".", "_")) for c in calls]
            if renamed != calls:
                underscored += 1
                assert check_calls(docs, renamed, truth).valid, (entry_id, renamed)
            if len(calls) > 1:
                reversed_ += 1
                if not check_calls(docs, calls[::-1], truth).valid:
                    reverse_fails.add(entry_id)
        checked += 1
    assert checked == CATEGORIES[category]
    assert underscored > 0
    assert (reversed_ > 0) == category.startswith("parallel")
    assert reverse_fails == ({"parallel_178"} if category == "parallel" else set())


# --- one bucket each, from real entries --------------------------------------------------------------------------

def test_wrong_function_in_multiple() -> None:
    docs, truth = entry("multiple_0")  # triangle_properties.get expected, circle_properties.get offered too
    call = {"name": "circle_properties.get", "arguments": {"radius": 5.0}}
    result = check_calls(docs, [call], truth)
    assert_fails(result, "wrong_function", "triangle_properties.get", "circle_properties.get")
    assert result.bfcl_error_type == "simple_function_checker:wrong_func_name"


def test_required_argument_dropped() -> None:
    docs, truth = entry("simple_python_0")
    call = ideal_calls(docs, truth)[0]
    del call["arguments"]["base"]
    result = check_calls(docs, [call], truth)
    assert_fails(result, "missing_argument", "calculate_triangle_area", "'base'")
    assert result.bfcl_error_type == "simple_function_checker:missing_required"


def test_required_argument_whose_answers_include_empty_must_still_be_sent() -> None:
    docs, truth = entry("simple_python_200")  # fuel_efficiency: ["", 25.0], but listed in `required`
    call = ideal_calls(docs, truth, omit_optional=True)[0]
    assert check_call(docs[0], call, truth[0]).valid
    del call["arguments"]["fuel_efficiency"]
    assert_fails(check_call(docs[0], call, truth[0]), "missing_argument", "'fuel_efficiency'")


def test_optional_argument_the_ground_truth_requires() -> None:
    docs, truth = entry("simple_python_5")  # root_type is optional in the schema, ["all"] in the answer
    call = ideal_calls(docs, truth)[0]
    del call["arguments"]["root_type"]
    result = check_call(docs[0], call, truth[0])
    assert_fails(result, "missing_argument", "'root_type'", "all")
    assert result.bfcl_error_type == "simple_function_checker:missing_optional"


def test_optional_argument_with_empty_answer_may_be_omitted() -> None:
    docs, truth = entry("simple_python_0")  # unit: ["units", ""]
    assert check_call(docs[0], {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}},
                      truth[0]).valid


def test_wrong_type_string_for_integer() -> None:
    docs, truth = entry("simple_python_0")
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["base"] = "10"
    result = check_calls(docs, [call], truth)
    assert_fails(result, "wrong_type", "calculate_triangle_area.base", "integer", "'10'")
    assert result.bfcl_error_type == "type_error:simple"


def test_wrong_type_bool_is_no_integer_and_float_is_no_integer() -> None:
    docs, truth = entry("simple_python_0")
    for value in (True, 10.0):
        call = ideal_calls(docs, truth)[0]
        call["arguments"]["base"] = value
        assert_fails(check_call(docs[0], call, truth[0]), "wrong_type", "base")


def test_wrong_type_of_array_items() -> None:
    docs, truth = entry("parallel_multiple_0")  # multiples: array of integer, [[3, 5]]
    calls = ideal_calls(docs, truth)
    calls[0]["arguments"]["multiples"] = ["3", "5"]
    result = check_call(docs[0], calls[0], truth[0])
    assert_fails(result, "wrong_type", "multiples", "array of int")
    assert result.bfcl_error_type == "type_error:nested"


def test_int_accepted_where_float_expected() -> None:
    docs, truth = entry("parallel_multiple_1")  # area_rectangle.calculate: length [7.0], breadth [3.0] (float)
    calls = ideal_calls(docs, truth)
    assert calls[0]["arguments"] == {"length": 7.0, "breadth": 3.0}
    calls[0]["arguments"] = {"length": 7, "breadth": 3}
    assert check_calls(docs, calls, truth).valid
    calls[0]["arguments"]["length"] = "7"
    assert_fails(check_calls(docs, calls, truth), "wrong_type", "length")


def test_value_not_among_the_allowed() -> None:
    docs, truth = entry("simple_python_0")
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["base"] = 11
    result = check_calls(docs, [call], truth)
    assert_fails(result, "wrong_value", "calculate_triangle_area.base", "11", "[10]")
    assert result.bfcl_error_type == "value_error:others"
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["unit"] = "meters"
    assert_fails(check_calls(docs, [call], truth), "wrong_value", "unit", "'meters'", "units")


def test_string_normalisation_exactly_where_bfcl_applies_it() -> None:
    docs, truth = entry("simple_python_0")  # unit: ["units", ""]
    for same in ("UNITS", "Units.", " u-n_i/t*s^", "u,nits"):  # BFCL drops " ,./-_*^" and lowercases
        call = {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5, "unit": same}}
        assert check_call(docs[0], call, truth[0]).valid, same
    for other in ("units\t", "units!", "unit", "units:"):  # nothing else is dropped
        call = {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5, "unit": other}}
        assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "unit")
    docs, truth = entry("simple_python_199")  # location: ["San Jose", "'San Jose'"]; ' and " compare equal
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["location"] = '"SAN JOSE"'
    assert check_call(docs[0], call, truth[0]).valid
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"


def test_string_normalisation_inside_dicts_and_lists_but_not_for_variables() -> None:
    docs, truth = entry("simple_python_89")  # conditions: dict, school ["Bluebird High School", "Bluebird HS"]
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["conditions"] = {"department": "science", "school": "bluebird-high school"}
    assert check_call(docs[0], call, truth[0]).valid
    call["arguments"]["conditions"] = {"department": "science", "school": "Bluebird Elementary"}
    assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "school", "Bluebird Elementary")
    call["arguments"]["conditions"] = {"department": "Science"}  # a key without "" is missing
    assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "conditions", "'school'")
    docs, truth = entry("parallel_multiple_21")  # x: array, answered by the "variable" "data['sales']"
    calls = ideal_calls(docs, truth)
    index = next(i for i, c in enumerate(calls) if c["arguments"].get("x") == "data['sales']")
    assert check_calls(docs, calls, truth).valid
    calls[index]["arguments"]["x"] = 'DATA["sales"]'  # standardize() would make these equal; variables are exact
    assert_fails(check_calls(docs, calls, truth), "wrong_value", "x")


def test_lists_keep_order_and_normalise_string_items() -> None:
    docs, truth = entry("simple_python_90")  # data_field: [["Personal Info", "Job History"]]
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["data_field"] = ["personal-info", "JOB HISTORY"]
    assert check_call(docs[0], call, truth[0]).valid
    for wrong in (["Job History", "Personal Info"], ["Personal Info"], ["Personal Info", "Job History", "Salary"]):
        call["arguments"]["data_field"] = wrong
        result = check_call(docs[0], call, truth[0])
        assert_fails(result, "wrong_value", "employee.fetch_data.data_field")
        assert result.bfcl_error_type == "value_error:list/tuple"


def test_variable_answers_compare_exactly() -> None:
    docs, truth = entry("simple_python_307")  # venue is a string parameter answered by ["", True]
    call = ideal_calls(docs, truth)[0]
    for accepted in (True, ""):
        call["arguments"]["venue"] = accepted
        assert check_call(docs[0], call, truth[0]).valid, accepted
    for refused in (" ", "-", "home", "True"):  # " " and "-" would standardize to "", but are not "" itself
        call["arguments"]["venue"] = refused
        assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "venue", repr(refused))


def test_list_of_dicts_keeps_order_and_normalises_strings() -> None:
    docs, truth = entry("simple_python_96")  # conditions: [{age > 25}, {job = engineer}]
    call = ideal_calls(docs, truth)[0]
    conditions = call["arguments"]["conditions"]
    call["arguments"]["conditions"] = [conditions[0], dict(conditions[1], value="Engineer")]
    assert check_call(docs[0], call, truth[0]).valid
    call["arguments"]["conditions"] = conditions[::-1]
    assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "conditions")
    call["arguments"]["conditions"] = conditions[:1]
    assert_fails(check_call(docs[0], call, truth[0]), "wrong_value", "conditions", "1 dicts")


def test_extra_call_in_a_simple_case() -> None:
    docs, truth = entry("simple_python_1")
    call = ideal_calls(docs, truth)[0]
    result = check_calls(docs, [call, call], truth)
    assert_fails(result, "extra_call", "expected 1 call", "math.factorial", "got 2")


def test_argument_not_in_the_schema() -> None:
    docs, truth = entry("simple_python_0")
    call = ideal_calls(docs, truth)[0]
    call["arguments"]["color"] = "red"
    result = check_calls(docs, [call], truth)
    assert_fails(result, "unexpected_argument", "calculate_triangle_area", "'color'", "schema")
    assert result.bfcl_error_type == "simple_function_checker:unexpected_param"
    docs, truth = entry("parallel_multiple_26")  # `type` is in the possible answer but not in the schema
    calls = ideal_calls(docs, truth)
    index = next(i for i, a in enumerate(truth) if "type" in next(iter(a.values())))
    calls[index]["arguments"]["type"] = "credit"
    assert_fails(check_calls(docs, calls, truth), "unexpected_argument", "'type'")


def test_parallel_any_order_and_a_missing_call() -> None:
    docs, truth = entry("parallel_0")  # spotify.play twice: Taylor Swift 20, Maroon 5 15
    calls = ideal_calls(docs, truth)
    assert check_calls(docs, calls[::-1], truth).valid
    result = check_calls(docs, calls[1:], truth)
    assert_fails(result, "missing_call", "expected 2 call", "got 1")
    assert result.bfcl_error_type == "parallel_function_checker_no_order:wrong_count"


def test_parallel_unmatched_call_takes_the_closest_bucket() -> None:
    docs, truth = entry("parallel_0")
    calls = ideal_calls(docs, truth)
    calls[1]["arguments"]["duration"] = 16
    result = check_calls(docs, calls[::-1], truth)
    assert_fails(result, "wrong_value", "expected call 1", "duration", "16")
    assert result.bfcl_error_type == "parallel_function_checker_no_order:cannot_find_match"
    docs, truth = entry("parallel_multiple_0")
    calls = ideal_calls(docs, truth)
    calls[1]["name"] = "math_toolkit.sum_of_primes"
    assert_fails(check_calls(docs, calls, truth), "wrong_function", "math_toolkit.product_of_primes")


def test_parallel_matching_is_greedy_as_bfcl() -> None:
    """parallel_function_checker_no_order pairs each expected call, in order, with the first unused call that
    passes. parallel_178 expects Microsoft/Jan 1, Microsoft/Feb 1, Apple/Jan 1, Apple/Feb 1, but its first answer
    accepts company "Microsoft" or "Apple": in reverse order it takes the Apple/Jan 1 call, and the third answer
    (Apple/Jan 1) is left without one. BFCL scores this reply invalid too."""
    docs, truth = entry("parallel_178")
    calls = ideal_calls(docs, truth)
    assert check_calls(docs, calls, truth).valid
    assert truth[0]["get_stock_price"]["company_name"] == ["Microsoft", "Apple"]
    assert check_call(docs[0], calls[2], truth[0]).valid  # the first answer also accepts the third call
    result = check_calls(docs, calls[::-1], truth)
    assert_fails(result, "wrong_value", "expected call 2")
    assert result.bfcl_error_type == "parallel_function_checker_no_order:cannot_find_match"


def test_dotted_name_sent_with_underscores() -> None:
    docs, truth = entry("simple_python_1")  # math.factorial
    assert check_calls(docs, [{"name": "math_factorial", "arguments": {"number": 5}}], truth).valid
    assert check_calls(docs, [{"name": "math.factorial", "arguments": {"number": 5}}], truth).valid
    assert_fails(check_calls(docs, [{"name": "math-factorial", "arguments": {"number": 5}}], truth),
                 "wrong_function", "math.factorial")


def test_bucket_table_is_closed() -> None:
    assert set(BUCKET_OF.values()) | {"extra_call", "missing_call"} == set(BUCKETS)
    assert len(BUCKETS) == 8


def test_malformed_ground_truth_raises() -> None:
    docs, truth = entry("simple_python_0")
    with pytest.raises(ValueError, match="no_such"):
        check_calls(docs, ideal_calls(docs, truth), [{"no_such": {}}])
    with pytest.raises(ValueError, match="exactly one"):
        check_call(docs[0], ideal_calls(docs, truth)[0], {})


# --- parse_tool_calls ----------------------------------------------------------------------------------------------

def message(*calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def tool_call(name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_parse_then_check_a_real_entry() -> None:
    docs, truth = entry("parallel_0")
    reply = message(tool_call("spotify_play", '{"artist": "Maroon 5", "duration": 15}'),
                    tool_call("spotify_play", '{"artist": "taylor swift", "duration": 20}'))
    calls, reason = parse_tool_calls(reply)
    assert reason is None
    assert calls == [{"name": "spotify_play", "arguments": {"artist": "Maroon 5", "duration": 15}},
                     {"name": "spotify_play", "arguments": {"artist": "taylor swift", "duration": 20}}]
    assert check_calls(docs, calls, truth).valid


def test_parse_no_tool_calls_is_no_call() -> None:
    docs, truth = entry("simple_python_1")
    calls, reason = parse_tool_calls({"role": "assistant", "content": "120"})
    assert (calls, reason) == ([], None)
    assert_fails(check_calls(docs, calls, truth), "missing_call", "expected 1 call", "got 0")


@pytest.mark.parametrize(("reply", "named"), [
    (message(tool_call("math_factorial", "{number: 5}")), "not JSON"),
    (message(tool_call("math_factorial", "")), "not JSON"),
    (message(tool_call("math_factorial", "[5]")), "JSON list"),
    (message(tool_call("math_factorial", '"5"')), "JSON str"),
    (message(tool_call("math_factorial", {"number": 5})), "arguments is a dict"),
    (message(tool_call(None, '{"number": 5}')), "name"),
    (message(tool_call("", '{"number": 5}')), "name"),
    (message({"type": "function", "function": {"arguments": '{"number": 5}'}}), "name"),
    (message({"type": "function"}), "function is a NoneType"),
    (message({"type": "code", "function": {"name": "math_factorial", "arguments": "{}"}}), "type"),
    (message("math_factorial(5)"), "tool_calls[0] is a str"),
    ({"role": "assistant", "tool_calls": {"0": tool_call("math_factorial", "{}")}}, "tool_calls is a dict"),
    ({"role": "assistant", "tool_calls": "math_factorial"}, "not a list"),
    (["not", "a", "message"], "message is a list"),
])
def test_parse_unparsable(reply: Any, named: str) -> None:
    calls, reason = parse_tool_calls(reply)
    assert calls is None and reason is not None and named in reason, reason


json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                     max_size=4),
                         max_leaves=20)
arguments_like = json_like | json_like.map(json.dumps) | st.dictionaries(
    st.sampled_from(["base", "height", "unit", "conditions", "table", "x"]), json_like, max_size=4).map(json.dumps)
names_like = st.sampled_from(["calculate_triangle_area", "database_query"]) | json_like
call_like = st.fixed_dictionaries({
    "type": st.sampled_from(["function", None]) | json_like,
    "function": json_like | st.fixed_dictionaries({"name": names_like, "arguments": arguments_like})})
reply_like = json_like | st.fixed_dictionaries({"tool_calls": st.lists(call_like, max_size=3) | json_like})


@settings(max_examples=300, deadline=None)
@given(reply_like)
def test_parse_tool_calls_never_raises(reply: Any) -> None:
    """Arbitrary JSON-like replies: a result or a reason, never both, never an exception; and whatever parses
    can be checked against real entries (with dict and list-of-dict parameters) without raising either."""
    calls, reason = parse_tool_calls(reply)
    assert (calls is None) != (reason is None)
    if calls is None:
        return
    assert all(type(c["name"]) is str and c["name"] and type(c["arguments"]) is dict for c in calls)
    for entry_id in ("simple_python_0", "simple_python_96", "simple_python_89"):
        docs, truth = entry(entry_id)
        result = check_calls(docs, calls, truth)
        assert result.valid or result.bucket in BUCKETS
