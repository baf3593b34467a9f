"""BFCL's AST rules for a model's function call(s), checked against BFCL "possible answer" ground truth.

An own implementation of the rules in ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` (package
``bfcl-eval==2026.3.23``), Python language only; that module cannot be imported here (it imports every model
handler), so the rules are re-written, each function below naming the BFCL function it follows.

Shapes (BFCL's own data formats):

- function doc: ``{"name": "math.factorial", "description": str, "parameters": {"type": "dict",
  "properties": {param: {"type": str, "items": {"type": str}?, ...}}, "required": [param, ...]}}``;
- call: ``{"name": str, "arguments": dict}``, an OpenAI tool call with its ``arguments`` JSON-decoded
  (``parse_tool_calls`` makes these from a chat reply);
- possible answer: ``{func_name: {param: [allowed value, ...]}}``; ``""`` among the allowed values means the
  parameter may be left out; a ground truth is a list of these, one per expected call.

Function names: BFCL's FC handlers send ``math.factorial`` as ``math_factorial`` (OpenAI tool names must match
``^[a-zA-Z0-9_-]{1,64}$``): ``bfcl_eval/model_handler/utils.py, convert_to_tool`` replaces ``.`` with ``_``,
and ``ast_checker.py, convert_func_name`` expects the underscored name for such models. A call here may use
either spelling.

Failure buckets (``AstResult.bucket``) from BFCL's ``error_type`` values (``BUCKET_OF``):

- ``unparsable``: ``ast_decoder:decoder_failed``, ``ast_decoder:decoder_wrong_output_format``
  (``bfcl_eval/eval_checker/eval_runner.py, _evaluate_single_ast_entry``);
- ``wrong_function``: ``simple_function_checker:wrong_func_name``;
- ``missing_argument``: ``simple_function_checker:missing_required``, ``simple_function_checker:missing_optional``;
- ``unexpected_argument``: ``simple_function_checker:unexpected_param``;
- ``wrong_type``: ``type_error:simple``, ``type_error:nested``;
- ``wrong_value``: ``value_error:string``, ``value_error:list/tuple``, ``value_error:dict_key``,
  ``value_error:dict_value``, ``value_error:list_dict_count``, ``value_error:others``, ``dict_checker:unclear``,
  ``list_dict_checker:unclear``;
- ``extra_call`` / ``missing_call``: ``*:wrong_count`` (simple, multiple, parallel checkers), split by whether
  the model sent more or fewer calls than expected;
- ``parallel_function_checker_no_order:cannot_find_match``: the bucket of the closest call (``check_calls``).

``missing_optional`` is a parameter the schema calls optional but the ground truth requires (no ``""``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["BUCKETS", "BUCKET_OF", "AstResult", "check_call", "check_calls", "parse_tool_calls", "standardize"]

BUCKETS: Final = ("unparsable", "wrong_function", "missing_argument", "wrong_type", "wrong_value", "extra_call",
                  "unexpected_argument", "missing_call")

_ERRORS_BY_BUCKET: Final = {
    "unparsable": ("ast_decoder:decoder_failed", "ast_decoder:decoder_wrong_output_format"),
    "wrong_function": ("simple_function_checker:wrong_func_name",),
    "missing_argument": ("simple_function_checker:missing_required", "simple_function_checker:missing_optional"),
    "unexpected_argument": ("simple_function_checker:unexpected_param",),
    "wrong_type": ("type_error:simple", "type_error:nested"),
    "wrong_value": ("value_error:string", "value_error:list/tuple", "value_error:dict_key", "value_error:dict_value",
                    "value_error:list_dict_count", "value_error:others", "dict_checker:unclear",
                    "list_dict_checker:unclear"),
}
BUCKET_OF: Final[Mapping[str, str]] = {error: bucket for bucket, errors in _ERRORS_BY_BUCKET.items()
                                        for error in errors}
"""BFCL ``error_type`` → bucket; ``*:wrong_count`` and ``cannot_find_match`` are resolved in ``check_calls``."""

# ast_checker.py, PYTHON_TYPE_MAPPING; "number" (absent there, a KeyError in BFCL) is read as float the way
# bfcl_eval/constants/type_mappings.py, GORILLA_TO_PYTHON reads it (an int is accepted for it too).
_PY_TYPES: Final[Mapping[str, type]] = {"string": str, "integer": int, "float": float, "number": float,
                                        "boolean": bool, "array": list, "tuple": list, "dict": dict, "any": str}
_NESTED: Final = ("array", "tuple")  # ast_checker.py, PYTHON_NESTED_TYPE_CHECK_LIST
_DROPPED: Final = str.maketrans("", "", " ,./-_*^")
_CAP = 200


@dataclass(frozen=True, slots=True)
class AstResult:
    """A verdict: ``valid``; else ``bucket`` (one of ``BUCKETS``), ``detail`` (function, parameter, expected vs
    got) and ``bfcl_error_type`` (the BFCL ``error_type`` it stands for, see ``BUCKET_OF``)."""

    valid: bool
    bucket: str | None
    detail: str
    bfcl_error_type: str | None = None


_OK: Final = AstResult(True, None, "")


def _fail(error_type: str, detail: str, bucket: str | None = None) -> AstResult:
    return AstResult(False, bucket or BUCKET_OF[error_type], detail, error_type)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _CAP else text[:_CAP] + "…"


def standardize(text: str) -> str:
    """The form strings are compared in: ``" ,./-_*^"`` removed, lowercased, ``'`` turned into ``"``.

    ast_checker.py, standardize_string (so ``"April 1, 2024"`` matches ``"april 1 2024"``).
    """
    return text.translate(_DROPPED).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if type(value) is str else value


def _answer_type(allowed: Sequence[Any]) -> type | None:
    """ast_checker.py, get_possible_answer_type: the type of the first allowed value other than ``""``."""
    return next((type(a) for a in allowed if a != ""), None)


def _items_fit(value: Any, option: Any, inner: type) -> bool:
    """ast_checker.py, type_checker's nested branch: each item has the item type, or the type of the option's
    first value (BFCL's "variable"); an option that is not a list imposes nothing."""
    if type(option) is not list:
        return True
    option_type = _answer_type(option)
    return all(type(v) is inner or (option_type is not None and type(v) is option_type) for v in value)


def _check_type(where: str, value: Any, allowed: Sequence[Any], type_name: str, expected: type,
                inner: type | None) -> tuple[AstResult | None, bool]:
    """ast_checker.py, type_checker: ``(failure or None, is_variable)``.

    The exact Python type must match (``bool`` is no ``int``). A ground truth whose values are of another type
    than the schema's (e.g. a string for an array) marks a "variable": a value of that type then passes and is
    compared as is, without the string/list/dict rules. Arrays and tuples check their items one level deep.
    """
    answer_type = _answer_type(allowed)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if inner is None or any(_items_fit(value, option, inner) for option in allowed):
            return None, is_variable
        error = "type_error:nested" if type(value) is answer_type else "type_error:simple"
        return _fail(error, f"{where}: expected {type_name} of {inner.__name__}, got {_show(value)}"), is_variable
    if answer_type is not None and type(value) is answer_type:
        return None, True
    detail = f"{where}: expected {type_name}, got {type(value).__name__} {_show(value)}"
    return _fail("type_error:simple", detail), False


def _check_string(where: str, value: str, allowed: Sequence[Any]) -> AstResult | None:
    """ast_checker.py, string_checker: the standardized value among the standardized string answers."""
    if standardize(value) in [standardize(a) for a in allowed if type(a) is str]:
        return None
    return _fail("value_error:string", f"{where}: got {_show(value)}, expected one of {_show(allowed)}")


def _check_list(where: str, value: list[Any], allowed: Sequence[Any]) -> AstResult | None:
    """ast_checker.py, list_checker: equal to an allowed list, order kept, string items standardized (BFCL
    iterates every option, so ``""`` reads as the empty list)."""
    options = [[_std(x) for x in option] for option in allowed if type(option) in (list, str)]
    if [_std(x) for x in value] in options:
        return None
    return _fail("value_error:list/tuple", f"{where}: got {_show(value)}, expected one of {_show(allowed)}")


def _dict_mismatch(where: str, value: Mapping[str, Any], option: Mapping[str, Any]) -> AstResult | None:
    for key, item in value.items():
        if key not in option:
            return _fail("value_error:dict_key", f"{where}: unexpected key {key!r}, expected keys {list(option)}")
        if _std(item) not in [_std(a) for a in option[key]]:
            return _fail("value_error:dict_value",
                         f"{where}[{key!r}]: got {_show(item)}, expected one of {_show(option[key])}")
    for key, allowed in option.items():
        if key not in value and "" not in allowed:
            return _fail("value_error:dict_key", f"{where}: missing key {key!r}")
    return None


def _check_dict(where: str, value: Mapping[str, Any], allowed: Sequence[Any]) -> AstResult | None:
    """ast_checker.py, dict_checker: one allowed dict fits: no key outside it, each value (standardized if a
    string) among that key's answers, every key without ``""`` present. One level deep, as BFCL."""
    failure = _fail("dict_checker:unclear", f"{where}: got {_show(value)}, no dict answer in {_show(allowed)}")
    for option in allowed:
        if type(option) is dict:
            mismatch = _dict_mismatch(where, value, option)
            if mismatch is None:
                return None
            failure = mismatch
    return failure


def _check_dict_list(where: str, value: list[Any], allowed: Sequence[Any]) -> AstResult | None:
    """ast_checker.py, list_dict_checker: same length as an allowed list, item k fitting its dict k (order
    kept); ``""`` counts as the empty list, as BFCL's ``len("")`` does."""
    failure = _fail("list_dict_checker:unclear", f"{where}: got {_show(value)}, expected one of {_show(allowed)}")
    for option in allowed:
        items = option if type(option) is list else [] if option == "" else None
        if items is None:
            continue
        if len(items) != len(value):
            failure = _fail("value_error:list_dict_count", f"{where}: got {len(value)} dicts, expected {len(items)}")
            continue
        mismatches = (_check_dict(f"{where}[{k}]", got, [want]) if type(got) is dict
                      else _fail("value_error:dict_value", f"{where}[{k}]: got {_show(got)}, expected a dict")
                      for k, (got, want) in enumerate(zip(value, items)))
        mismatch = next((m for m in mismatches if m is not None), None)
        if mismatch is None:
            return None
        failure = mismatch
    return failure


def _schema_types(where: str, schema: Mapping[str, Any]) -> tuple[str, type, type | None]:
    type_name = schema.get("type")
    expected = _PY_TYPES.get(type_name) if isinstance(type_name, str) else None
    if type_name is None or expected is None:
        raise ValueError(f"{where}: parameter type {type_name!r} is not one of {sorted(_PY_TYPES)}")
    if type_name not in _NESTED:
        return type_name, expected, None
    inner_name = schema.get("items", {}).get("type")
    inner = _PY_TYPES.get(inner_name) if isinstance(inner_name, str) else None
    if inner is None:
        raise ValueError(f"{where}: {type_name} item type {inner_name!r} is not one of {sorted(_PY_TYPES)}")
    return type_name, expected, inner


def _check_value(where: str, value: Any, allowed: Sequence[Any], schema: Mapping[str, Any]) -> AstResult | None:
    """ast_checker.py, simple_function_checker's per-parameter part (Language.PYTHON)."""
    type_name, expected, inner = _schema_types(where, schema)
    if expected is float and type(value) is int:  # simple_function_checker: an int is accepted as a float
        try:
            value = float(value)
        except OverflowError:  # an int too large for a float stays an int (and fails the type check)
            pass
    failure, is_variable = _check_type(where, value, allowed, type_name, expected, inner)
    if failure is not None:
        return failure
    if not is_variable:
        if expected is dict:
            return _check_dict(where, value, allowed)
        if expected is list and inner is dict:
            return _check_dict_list(where, value, allowed)
        if expected is str:
            return _check_string(where, value, allowed)
        if expected is list:
            return _check_list(where, value, allowed)
    if value in allowed:  # numbers, booleans, and "variables": plain equality
        return None
    return _fail("value_error:others", f"{where}: got {_show(value)}, expected one of {_show(allowed)}")


def check_call(func_doc: Mapping[str, Any], call: Mapping[str, Any], possible: Mapping[str, Any]) -> AstResult:
    """One call against one possible answer; ast_checker.py, simple_function_checker, in its order:

    1. the name is the doc's (``.`` may be sent as ``_``; convert_func_name) → else ``wrong_function``;
    2. every ``required`` parameter present → else ``missing_argument``;
    3. every argument in the schema and in the possible answer → else ``unexpected_argument``;
    4. each argument's type (``wrong_type``) then value (``wrong_value``), see ``_check_value``;
    5. every ground-truth parameter without ``""`` present → else ``missing_argument``.

    ``call`` is ``{"name": str, "arguments": dict}`` (not that shape: ``unparsable``). ``possible`` is
    ``{func_name: {param: [allowed, ...]}}``; its single value is used, the name comes from ``func_doc``.

    Raises:
        ValueError: ``possible`` is not a one-key dict, or the doc has a parameter type BFCL's Python checker
            does not know (or an array/tuple without ``items.type``).
        KeyError: ``func_doc`` lacks ``name`` or ``parameters.properties``.
    """
    if len(possible) != 1:
        raise ValueError(f"a possible answer has exactly one function, got {list(possible)}")
    allowed_by_param: Mapping[str, Sequence[Any]] = next(iter(possible.values()))
    name: str = func_doc["name"]
    properties: Mapping[str, Any] = func_doc["parameters"]["properties"]
    required: Sequence[str] = func_doc["parameters"].get("required", [])
    got_name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(got_name, str) or not isinstance(arguments, dict):
        return _fail("ast_decoder:decoder_wrong_output_format", f"call is not {{name: str, arguments: dict}}: "
                     f"{_show(call)}")
    if got_name not in (name, name.replace(".", "_")):
        return _fail("simple_function_checker:wrong_func_name", f"expected function {name!r}, got {got_name!r}")
    for param in required:
        if param not in arguments:
            return _fail("simple_function_checker:missing_required", f"{name}: required argument {param!r} missing")
    for param, value in arguments.items():
        if param not in properties or param not in allowed_by_param:
            why = "not in the function's schema" if param not in properties else "not in the ground truth"
            return _fail("simple_function_checker:unexpected_param", f"{name}: unexpected argument {param!r} ({why})")
        failure = _check_value(f"{name}.{param}", value, allowed_by_param[param], properties[param])
        if failure is not None:
            return failure
    for param, allowed in allowed_by_param.items():
        if param not in arguments and "" not in allowed:
            return _fail("simple_function_checker:missing_optional",
                         f"{name}: argument {param!r} missing (the ground truth requires one of {_show(allowed)})")
    return _OK


def check_calls(func_docs: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]],
                ground_truth: Sequence[Mapping[str, Any]]) -> AstResult:
    """A reply's calls against a ground truth (simple, multiple, parallel and parallel_multiple categories).

    ast_checker.py, parallel_function_checker_no_order: the counts must be equal (``*:wrong_count``: more calls
    is ``extra_call``, fewer ``missing_call``); then each expected call, in ground-truth order, takes the first
    unused call that passes ``check_call`` against the doc of the expected function (greedy, as BFCL). For one
    expected call this is exactly simple_function_checker and multiple_function_checker (the doc found by
    name, the model choosing among several functions), and its own failure is returned. With several, an
    expected call nothing matches (``cannot_find_match``) gets the bucket of the first unused call that has
    the expected name (else ``wrong_function``).

    Raises:
        ValueError: a ground-truth function has no doc in ``func_docs``; see also ``check_call``.
    """
    if len(calls) != len(ground_truth):
        error = "parallel_function_checker_no_order:wrong_count" if len(ground_truth) > 1 \
            else "simple_function_checker:wrong_count"
        bucket = "extra_call" if len(calls) > len(ground_truth) else "missing_call"
        wanted = [name for answer in ground_truth for name in answer]
        sent = [call.get("name") for call in calls]
        return _fail(error, f"expected {len(wanted)} call(s) {wanted}, got {len(sent)} {_show(sent)}", bucket)
    docs = {doc["name"]: doc for doc in func_docs}
    used: set[int] = set()
    for index, answer in enumerate(ground_truth):
        names = list(answer)
        if len(names) != 1 or names[0] not in docs:
            raise ValueError(f"ground truth {index}: {names} is not one function with a doc")
        expected = names[0]
        failures: list[AstResult] = []
        for k, call in enumerate(calls):
            if k in used:
                continue
            result = check_call(docs[expected], call, answer)
            if result.valid:
                used.add(k)
                break
            failures.append(result)
        else:
            if len(ground_truth) == 1:
                return failures[0]
            closest = next((f for f in failures if f.bucket != "wrong_function"), failures[0])
            return _fail("parallel_function_checker_no_order:cannot_find_match",
                         f"no call matches expected call {index} ({expected}): {closest.detail}", closest.bucket)
    return _OK


def parse_tool_calls(message: object) -> tuple[list[dict[str, Any]] | None, str | None]:
    """An OpenAI chat reply ``message``'s tool calls as ``[{"name": str, "arguments": dict}, ...]``.

    Reads ``message["tool_calls"] = [{"type": "function", "function": {"name": str, "arguments": str}}, ...]``
    the way BFCL's FC handlers do (``bfcl_eval/model_handler/api_inference/openai_completion.py, decode_ast``:
    ``json.loads`` of each ``arguments``; ``bfcl_eval/utils.py, is_function_calling_format_output``: each call's
    arguments a dict). Every byte is untrusted: nothing raises.

    Returns:
        ``(calls, None)``; ``([], None)`` when ``tool_calls`` is absent or null (no call: ``check_calls`` says
        ``missing_call``, where BFCL's handler fails to decode the text reply); ``(None, reason)`` when the reply
        is unparsable (BFCL's ``ast_decoder:*``): the message or ``tool_calls`` of the wrong type, a call not an
        object, ``type`` other than ``"function"``, no ``function`` object, a name not a non-empty string,
        ``arguments`` not a string, not JSON, or not a JSON object.
    """
    if not isinstance(message, dict):
        return None, f"message is a {type(message).__name__}, not an object"
    raw = message.get("tool_calls")
    if raw is None:
        return [], None
    if not isinstance(raw, list):
        return None, f"tool_calls is a {type(raw).__name__}, not a list"
    calls: list[dict[str, Any]] = []
    for k, item in enumerate(raw):
        where = f"tool_calls[{k}]"
        if not isinstance(item, dict):
            return None, f"{where} is a {type(item).__name__}, not an object"
        kind = item.get("type")
        if kind is not None and kind != "function":
            return None, f"{where}.type is {_show(kind)}, not 'function'"
        function = item.get("function")
        if not isinstance(function, dict):
            return None, f"{where}.function is a {type(function).__name__}, not an object"
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            return None, f"{where}.function.name is {_show(name)}, not a function name"
        if not isinstance(arguments, str):
            return None, f"{where} ({_show(name)}): arguments is a {type(arguments).__name__}, not a JSON string"
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            return None, f"{where} ({_show(name)}): arguments are not JSON ({type(exc).__name__}: {_show(str(exc))})"
        if not isinstance(decoded, dict):
            return None, f"{where} ({_show(name)}): arguments are a JSON {type(decoded).__name__}, not an object"
        calls.append({"name": name, "arguments": decoded})
    return calls, None
