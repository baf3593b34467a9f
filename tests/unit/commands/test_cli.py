import json

import pytest

from inferencekit.cli import build_parser, main
from inferencekit.registry import exit_code, schema


def test_ops_json_is_one_document_with_every_operation(capsys):
    assert main(["ops", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    commands = {o["command"] for o in doc["operations"]}
    assert {"inferencekit verify", "inferencekit bench serve", "inferencekit probe", "inferencekit engine up",
            "inferencekit evidence verify"} <= commands
    serve = next(o for o in doc["operations"] if o["command"] == "inferencekit bench serve")
    props = serve["parameters"]["properties"]
    assert props["concurrency"] == {"type": "array", "items": {"type": "integer"},
                                    "description": props["concurrency"]["description"]}
    assert props["num_prompts"]["default"] == 32
    assert serve["parameters"]["additionalProperties"] is False


def test_every_flag_has_help_and_every_command_an_example():
    for op in schema()["operations"]:
        assert op["example"].startswith("inferencekit "), op["name"]
        for name, p in op["parameters"]["properties"].items():
            assert len(p["description"]) > 15, (op["name"], name)


def test_every_command_help_renders(capsys):
    parser, ops = build_parser()
    for op in ops.values():
        with pytest.raises(SystemExit) as e:
            main([*op.path, "--help"])
        assert e.value.code == 0
        assert op.example in capsys.readouterr().out
    for group in sorted({op.path[0] for op in ops.values() if len(op.path) > 1}):  # each group's own page
        with pytest.raises(SystemExit) as e:  # failed before: "95% CI" in a summary made `quality --help` a traceback
            main([group, "--help"])
        assert e.value.code == 0, group
        assert "Traceback" not in capsys.readouterr().err


def test_user_error_is_one_line_exit_2_no_traceback(capsys, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "messages": []}\n')
    code = main(["bench", "serve", "--base-url", "http://127.0.0.1:9", "--dataset", str(bad),
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert f"{bad}:2:" in err


def test_argparse_type_errors_exit_2(capsys):
    assert main(["bench", "serve", "--concurrency", "1,x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--concurrency: expected a comma-separated list of integers, got '1,x'" in err
    assert main(["bench", "configure", "--context-limit", "abc", "--json"]) == 2
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["exit_code"] == 2 and "--context-limit: expected an integer, got 'abc'" in doc["error"]


def test_exit_codes_follow_the_verdict():
    assert [exit_code(v) for v in (None, "PASS", "FAIL", "UNPROVEN", "NOT RUN")] == [0, 0, 1, 3, 3]
