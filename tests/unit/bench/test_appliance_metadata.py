"""The appliance metadata file (docs/appliance.md, "Metadata") and `inferencekit bench configure`."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from inferencekit.bench.appliance_metadata import (
    PLACEHOLDER,
    REQUIRED_FIELDS,
    check_metadata,
    check_prefill_depths,
    load_metadata,
)
from inferencekit.errors import OpError
from inferencekit.registry import Call
from tests.cli_run import run_cli

GOOD = {
    "hardware": "1x NVIDIA H200 141GB, 16 vCPU",
    "topology": "single GPU, one host, TP=1 PP=1",
    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "model_revision": "12fd25f77366fa6b3b4b768ec3050bf629380bac",
    "quantisation": "GGUF Q4_1",
    "kv_cache_dtype": "fp16",
    "serving_engine": "llama.cpp b4100 llama-server -np 4",
    "context_limit": 8192,
    "competing_traffic": "none: dedicated",
}

FLAGS = ["--hardware", GOOD["hardware"], "--topology", GOOD["topology"], "--model", GOOD["model"],
         "--model-revision", GOOD["model_revision"], "--quantisation", GOOD["quantisation"],
         "--kv-cache-dtype", GOOD["kv_cache_dtype"], "--serving-engine", GOOD["serving_engine"],
         "--context-limit", "8192", "--competing-traffic", GOOD["competing_traffic"]]


@pytest.fixture(scope="module")
def configure() -> ModuleType:
    """The module that declares ``bench configure`` (registered, as the command line has it)."""
    return importlib.import_module("inferencekit.commands.appliance")


def _write(tmp_path: Path, value: object, name: str = "m.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(value))
    return p


def _error(value: object, where: str = "metadata") -> str:
    with pytest.raises(OpError) as e:
        check_metadata(value, where)
    return str(e.value)


# ---- the file


def test_required_fields_in_order_with_explanations():
    assert list(REQUIRED_FIELDS) == ["hardware", "topology", "model", "model_revision", "quantisation",
                                     "kv_cache_dtype", "serving_engine", "context_limit", "competing_traffic"]
    assert all(len(text) > 30 and text.endswith(".") for text in REQUIRED_FIELDS.values())
    assert "fp8_e4m3" in REQUIRED_FIELDS["kv_cache_dtype"] and "none: dedicated" in REQUIRED_FIELDS["competing_traffic"]
    assert PLACEHOLDER == "CHANGE ME"


def test_a_valid_file_loads_with_its_extra_fields(tmp_path):
    value = {**GOOD, "driver": "560.35.03", "notes": ["power cap 700 W", {"bios": "1.2"}]}
    assert load_metadata(_write(tmp_path, value)) == value
    assert load_metadata(str(_write(tmp_path, GOOD, "s.json"))) == GOOD


@pytest.mark.parametrize("field", list(REQUIRED_FIELDS))
def test_each_missing_field_is_named(tmp_path, field):
    p = _write(tmp_path, {k: v for k, v in GOOD.items() if k != field})
    with pytest.raises(OpError) as e:
        load_metadata(p)
    assert str(e.value).startswith(f"{p}: missing required fields: {field}")


def test_missing_fields_are_listed_together():
    msg = _error({"hardware": "x", "model": "y"})
    assert msg.startswith("metadata: missing required fields: topology, model_revision, quantisation, "
                          "kv_cache_dtype, serving_engine, context_limit, competing_traffic")


@pytest.mark.parametrize("value,got", [([GOOD], "list"), ({}, "an empty object"), ("x", "str"), (None, "NoneType")])
def test_not_a_non_empty_object(value, got):
    assert _error(value, "a.json") == f"a.json: appliance metadata must be a non-empty JSON object, got {got}"


def test_placeholders_anywhere_are_named_by_path():
    value = {**GOOD, "hardware": "change me", "model": "Llama (Change Me)",
             "extra": [{"note": "ok"}, {"note": "fill in: CHANGE ME"}], "nested": {"a b": {"c": "chAnge mE"}},
             "CHANGE ME key": "kept: keys are not values"}
    msg = _error(value)
    assert "placeholder 'CHANGE ME' still at $.hardware, $.model, $.extra[1].note, $.nested[\"a b\"].c" in msg
    assert "key" not in msg.split("still at")[1]


def test_every_problem_at_once():
    msg = _error({**{k: v for k, v in GOOD.items() if k != "topology"}, "hardware": "  ", "model": 7,
                  "context_limit": 0, "serving_engine": "CHANGE ME"})
    for part in ("missing required fields: topology", "hardware is empty", "model must be a string, got 7",
                 "context_limit must be a whole number of tokens from 1 to 2,147,483,647, got 0",
                 "still at $.serving_engine"):
        assert part in msg


@pytest.mark.parametrize("limit,shown", [(True, "true"), ("8192", '"8192"'), (0, "0"), (-5, "-5"), (8192.0, "8192.0")])
def test_context_limit_must_be_a_positive_int(limit, shown):
    assert _error({**GOOD, "context_limit": limit}) == (
        f"metadata: context_limit must be a whole number of tokens from 1 to 2,147,483,647, got {shown} "
        "(write the file with `inferencekit bench configure`)")


def test_missing_and_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(OpError, match="metadata file not found"):
        load_metadata(tmp_path / "none.json")
    with pytest.raises(OpError, match="cannot read the metadata file"):
        load_metadata(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "hardware": "x",\n  "model": \n}\n')
    with pytest.raises(OpError) as e:
        load_metadata(bad)
    assert str(e.value).startswith(f"{bad}: not valid JSON at line 4 column 1")


# ---- prefill depths


def test_prefill_depth_exactly_at_the_limit_passes():
    check_prefill_depths([1, 512, 8184], 8192)
    check_prefill_depths([4], 10, generated=6)


def test_prefill_depth_one_over_the_limit_is_refused():
    with pytest.raises(OpError) as e:
        check_prefill_depths([512, 8185], 8192)
    assert str(e.value) == ("prefill depth 8185 + 8 generated tokens = 8193 exceeds the declared context_limit 8192; "
                            "use depths ≤ 8184")


@pytest.mark.parametrize("depth", [0, -1, True])
def test_prefill_depth_must_be_positive(depth):
    with pytest.raises(OpError, match=f"prefill depth {depth!r} must be a whole number"):
        check_prefill_depths([depth], 8192)


# ---- bench configure


def _call() -> Call:
    return Call(operation="bench.configure", argv=("inferencekit", "bench", "configure"), settings={})


def test_configure_from_flags_writes_a_loadable_file(configure, tmp_path):
    out = tmp_path / "sub" / "appliance.json"
    code, doc = run_cli(["bench", "configure", *FLAGS, "--extra", '{"driver": "560.35"}', "--output", str(out)])
    assert code == 0
    assert doc == {"path": str(out), "metadata": {**GOOD, "driver": "560.35"}}
    assert load_metadata(out) == {**GOOD, "driver": "560.35"}
    assert list(json.loads(out.read_text())) == [*REQUIRED_FIELDS, "driver"]


def test_configure_without_a_tty_names_every_missing_flag(configure, tmp_path, capsys):
    out = tmp_path / "appliance.json"
    code, doc = run_cli(["bench", "configure", "--hardware", "h", "--model", "m", "--output", str(out)])
    assert code == 2
    assert doc["error"] == ("missing --topology, --model-revision, --quantisation, --kv-cache-dtype, --serving-engine, "
                            "--context-limit, --competing-traffic (stdin is not a terminal, so they cannot be asked "
                            "for; give them as flags)")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(OpError, match="missing --hardware, --topology"):
        configure.bench_configure(_call(), output=str(out), tty=False)
    assert not out.exists()


def test_configure_asks_on_a_tty_and_re_asks_invalid_answers(configure, tmp_path):
    answers = iter(["", GOOD["topology"], "Change me later", "GGUF Q4_1", "8k", "0", " 8192 ", "none: dedicated"])
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    out = tmp_path / "appliance.json"
    given = {k: GOOD[k] for k in ("hardware", "model", "model_revision", "kv_cache_dtype", "serving_engine")}
    outcome = configure.bench_configure(_call(), output=str(out), ask=ask, tty=True, **given)
    assert prompts == ["topology> ", "topology> ", "quantisation> ", "quantisation> ", "context_limit> ",
                       "context_limit> ", "context_limit> ", "competing_traffic> "]
    assert next(answers, None) is None
    assert load_metadata(out) == GOOD
    assert outcome.payload == {"path": str(out), "metadata": GOOD}


def test_configure_explains_each_asked_field_and_why_an_answer_was_refused(configure):
    said: list[str] = []
    answers = iter(["CHANGE ME", "none: dedicated"])
    fields = configure.ask_missing({k: v for k, v in GOOD.items() if k != "competing_traffic"}, tty=True,
                                   ask=lambda _p: next(answers), say=said.append)
    assert fields == GOOD
    assert said == [f"competing_traffic: {REQUIRED_FIELDS['competing_traffic']}",
                    "  refused: competing_traffic still holds the placeholder 'CHANGE ME'; try again"]


def test_configure_end_of_input_writes_nothing(configure, tmp_path):
    def ask(_prompt: str) -> str:
        raise EOFError

    out = tmp_path / "appliance.json"
    with pytest.raises(OpError, match="no answer for hardware; nothing was written"):
        configure.bench_configure(_call(), output=str(out), ask=ask, tty=True)
    assert not out.exists()


def test_configure_refuses_an_existing_file_without_force(configure, tmp_path):
    out = tmp_path / "appliance.json"
    out.write_text("{}")
    code, doc = run_cli(["bench", "configure", *FLAGS, "--output", str(out)])
    assert code == 2 and doc["error"] == f"{str(out)!r} already exists; pass --force to overwrite it"
    assert out.read_text() == "{}"
    code, doc = run_cli(["bench", "configure", *FLAGS, "--output", str(out), "--force"])
    assert code == 0 and load_metadata(out) == GOOD


@pytest.mark.parametrize("flags,msg", [
    (["--context-limit", "0"], "context_limit must be a whole number of tokens from 1 to 2,147,483,647, got 0"),
    (["--hardware", "CHANGE ME"], "hardware still holds the placeholder 'CHANGE ME'"),
    (["--extra", '{"note": "change me"}'], "metadata: placeholder 'CHANGE ME' still at $.note"),
    (["--extra", '{"model": "other"}'], "--extra cannot set required fields (model); give them as --model"),
    (["--extra", "[1]"], "--extra must be a JSON object, got list"),
])
def test_configure_refuses_bad_flag_values(configure, tmp_path, flags, msg):
    out = tmp_path / "appliance.json"
    code, doc = run_cli(["bench", "configure", *FLAGS, *flags, "--output", str(out)])
    assert code == 2 and msg in doc["error"]
    assert not out.exists()
