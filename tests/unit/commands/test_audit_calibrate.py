"""``audit calibrate``'s checks before anything is sent: endpoint names, the run plan, refusals (issue 20)."""

from __future__ import annotations

import pytest

from inferencekit.cli import main
from inferencekit.commands.audit_calibrate import parse_named_urls, plan_runs
from inferencekit.errors import OpError


def test_named_urls():
    assert parse_named_urls("a=http://h:1, http://h:2", "honest") == [("a", "http://h:1"), ("honest-2", "http://h:2")]
    assert parse_named_urls(None, "substitute") == []
    with pytest.raises(OpError, match="given twice"):
        parse_named_urls("a=http://h:1,a=http://h:2", "honest")
    with pytest.raises(OpError, match="expected name=http"):
        parse_named_urls("a=h:1", "honest")
    with pytest.raises(OpError):
        parse_named_urls("../x=http://h:1", "honest")  # not a file name


def test_honest_replicas_take_disjoint_runs_and_substitutes_share_the_first():
    plan = plan_runs([("a", "u"), ("b", "u")], [("s", "u")], 40, "logprob", 300, 8000)
    assert plan == {"a": range(0, 40), "b": range(40, 80), "s": range(0, 40)}
    with pytest.raises(OpError, match="need 8005 calibration prompts; the pool's calibration region holds 8000"):
        plan_runs([("a", "u")], [], 1601, "logprob", 300, 8000)  # 5 prompts per run
    with pytest.raises(OpError, match="6162 short ones"):
        plan_runs([("a", "u"), ("b", "u")], [], 62, "first_token", 300, 6162)  # 50 prompts per run


@pytest.mark.parametrize(("args", "message"), [
    (["--honest", "http://127.0.0.1:9"], "--claim is required"),
    (["--claim", "F16", "--honest", "http://127.0.0.1:9"], "--reference local is required"),
    (["--claim", "F16", "--reference", "local"], "--honest is required"),
    (["--claim", "F16", "--reference", "local", "--honest", "a=http://127.0.0.1:9", "--substitute",
      "a=http://127.0.0.1:8"], "both --honest and --substitute"),
    (["--claim", "F16", "--reference", "local", "--honest", "http://127.0.0.1:9", "--runs", "1"], "--runs must be"),
])
def test_refusals_exit_2_before_anything_is_sent(args, message, tmp_path, capsys):
    code = main(["audit", "calibrate", *args, "--run-dir", str(tmp_path / "r"), "--json"])
    assert code == 2
    err = capsys.readouterr()
    assert message in err.err + err.out
    assert not (tmp_path / "r").exists()


def test_a_half_written_record_is_skipped_so_the_run_is_made_again(tmp_path):
    from inferencekit.quality.equivalence_calibrate import done_runs

    f = tmp_path / "a.jsonl"
    f.write_text('{"run": 0, "x": 1}\n{"run": 1, "x"')
    assert done_runs(f) == {0}
