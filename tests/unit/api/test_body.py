"""The request-body policy (``api/body.py``): what --extra-body adds, what an operation refuses, and how it is said."""

import pytest

from inferencekit.api.body import BodyPolicy, body_policy, parse_json_object
from inferencekit.errors import OpError
from inferencekit.gates.probes.order import ORDER_FIXED


def test_fields_the_operation_sets_are_refused_and_the_rest_is_sent():
    p = body_policy('{"tools": [], "top_k": 1, "temperature": 2}', None, fixed=ORDER_FIXED, operation="gates order")
    assert p.extra == {"top_k": 1}
    assert p.refused == ("temperature", "tools")
    assert p.limitations() == ["--extra-body fields temperature, tools were not sent: gates order sets them itself"]
    one = body_policy({"seed": 3}, None, fixed={"seed"}, operation="quality gsm8k")
    assert one.limitations() == ["--extra-body fields seed were not sent: quality gsm8k sets it itself"]
    assert body_policy('{"top_k": 1}', None, fixed=ORDER_FIXED, operation="x").limitations() == []


def test_template_kwargs_layer_the_flag_over_extra_body_per_key():
    p = body_policy('{"chat_template_kwargs": {"enable_thinking": true, "a": 1}}', '{"enable_thinking": false}',
                    fixed=set(), operation="probe")
    assert p.chat_template_kwargs == {"enable_thinking": False, "a": 1}
    assert "chat_template_kwargs" not in p.extra  # sent as its own field, never twice


def test_the_policy_round_trips_through_its_record_form():
    p = body_policy('{"max_tokens": 5, "top_k": 1}', '{"x": 1}', fixed={"max_tokens"}, operation="bench serve")
    d = p.to_json()
    assert d == {"operation": "bench serve", "extra_body": {"top_k": 1}, "chat_template_kwargs": {"x": 1},
                 "refused_fields": ["max_tokens"]}
    assert BodyPolicy.from_json(d) == p and BodyPolicy.from_json(None).limitations() == []


@pytest.mark.parametrize(("extra", "ctk", "msg"), [
    ("{", None, "--extra-body is not valid JSON"),
    ("[1]", None, "--extra-body must be a JSON object, got list"),
    (None, '"x"', "--chat-template-kwargs must be a JSON object, got str"),
    ('{"chat_template_kwargs": 3}', None, "--extra-body: chat_template_kwargs must be a JSON object, got int"),
])
def test_bad_flags_name_the_flag(extra, ctk, msg):
    with pytest.raises(OpError, match=msg):
        body_policy(extra, ctk, fixed=set(), operation="probe")


def test_empty_flags_are_empty_objects():
    assert parse_json_object(None, "--x") == {} and parse_json_object("", "--x") == {}
