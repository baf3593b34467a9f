"""Run-dir gates (unique_prompts, output_length) on small run dirs in the real layout.

Request bodies are made by bench serve's own planner (``bench/plan.py``) and written where its journal
writes them (``RunDir.input_path`` / ``output_path``); replies are real recorded reply files
(tests/fixtures/replies: llama-server streaming 16 token ids at max_tokens 16, its HTTP 400 reply),
with the length fields edited where a test needs another length.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from inferencekit.bench.plan import SALT_PATTERN, PlannedRequest, Planner, new_salt, request_body
from inferencekit.data.prompts import Prompt
from inferencekit.gates.check import load_requests, output_lengths, read_run_rows
from inferencekit.gates.judges.output_length import judge_run
from inferencekit.gates.judges.unique_prompts import gate_unique_prompts, salt_of, salted_split
from inferencekit.gates.result import Gate
from inferencekit.rundir import RunDir, write_json
from tests.paths import FIXTURES

FIX = FIXTURES / "replies"
COUNTED = json.loads((FIX / "llama-server" / "chat_stream_counted.json").read_text())  # 16 token ids, length
FAILED = json.loads((FIX / "llama-server" / "chat_bad_request.json").read_text())  # HTTP 400
POOL = [Prompt(f"p{i}", "short", ({"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}))
        for i in range(3)]


def unique_prompts(run_dir: Path) -> Gate:
    """unique_prompts on a run dir: its load requests read by ``gates check``'s reader, then judged."""
    run = RunDir(run_dir)
    rows, bad, _ = load_requests(run)
    return gate_unique_prompts(rows, [p.relative_to(run.path).as_posix() for p in run.journals()], bad)


def output_length(run_dir: Path, engine: str, *, reference: Path | None = None,
                  ignored_options: tuple[str, ...] = ()) -> Gate:
    """output_length's run-dir part on a run dir, read by ``gates check``'s reader, then judged."""
    rows, _ = read_run_rows(run_dir, engine, reference=reference, ignored_options=ignored_options)
    return judge_run(rows)


def _run(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path / "run")
    run.update_run(operation="bench serve")
    return run


def _reply(req: PlannedRequest, engine: str, level: str | None, n: int | None = 16, *, usage_only: bool = False,
           template: dict[str, Any] = COUNTED) -> dict[str, Any]:
    """A real reply file re-labelled for ``req``, with ``n`` generated tokens."""
    r = copy.deepcopy(template)
    r.pop("_provenance", None)
    r.update(id=req.prompt.id, engine=engine, bucket=req.prompt.bucket)
    if level is not None:
        r["level"] = level
    if req.salt:
        r["salt"] = req.salt
    if n is not None and "error" not in r:
        r["token_ids"] = None if usage_only else (r["token_ids"] * (n // len(r["token_ids"]) + 1))[:n]
        r["usage"] = {**r["usage"], "completion_tokens": n}
    return r


def _send(run: RunDir, engine: str, level: str | None, req: PlannedRequest, reply: dict[str, Any] | None,
          **fixed: Any) -> dict[str, Any]:
    body = request_body(req, model="m", max_tokens=16, fixed=fixed)
    write_json(run.input_path(engine, level, req.prompt.bucket, req.key), body)
    if reply is not None:
        write_json(run.output_path(engine, level, req.prompt.bucket, req.key), reply)
    return body


# ---- unique_prompts

def test_unique_prompts_pass_same_prompt_in_two_levels_is_allowed(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for level in ("1", "4"):  # both levels send p0..p2 unsalted: allowed, a level is its own cache test
        for p in POOL:
            _send(run, "e", level, PlannedRequest(p.id, p, None), None)
    g = unique_prompts(run.path)
    assert (g.gate, g.verdict) == ("unique_prompts", "PASS")
    assert g.metrics == {"requests": 6, "levels": 2, "repeated_prompts": 0, "repeat_requests": 0, "salted_reuses": 0,
                         "prefix_requests": 0, "prefix_groups": 0, "later_turns": 0, "sessions": 0, "weak_salts": 0}
    assert list(g.details) == [] and list(g.limitations) == []
    assert g.reason == "6 load requests over 2 level(s): no prompt repeats inside a level"


def test_unique_prompts_fail_same_messages_twice_in_one_level(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for p in POOL:
        _send(run, "e", "2", PlannedRequest(p.id, p, None), None)
    _send(run, "e", "2", PlannedRequest("p1~1", POOL[1], None), None)  # reused without its tag
    _send(run, "e", "1", PlannedRequest("p1", POOL[1], None), None)  # another level: not a repeat
    g = unique_prompts(run.path)
    assert g.verdict == "FAIL"
    assert g.metrics == {"requests": 5, "levels": 2, "repeated_prompts": 1, "repeat_requests": 1, "salted_reuses": 0,
                         "prefix_requests": 0, "prefix_groups": 0, "later_turns": 0, "sessions": 0, "weak_salts": 0}
    assert list(g.details) == [{"source": "inputs/e/load-2/short/p1~1.json", "first": "inputs/e/load-2/short/p1.json",
                          "engine": "e", "level": "2", "prompt": "p1", "salt": None}]
    assert g.reason.startswith("1 prompt(s) sent more than once inside a load level (1 repeat request(s) of 5)")


def test_unique_prompts_salted_reuse_is_distinct_and_noted(tmp_path: Path) -> None:
    run = _run(tmp_path)
    planner = Planner(POOL, seed=5)
    reqs = [planner.take() for _ in range(5)]  # 3 first uses, then 2 reuses: every one salted
    bodies = [_send(run, "e", "8", r, None) for r in reqs]
    assert all(r.salt is not None for r in reqs) and [r.key.count("~") for r in reqs] == [0, 0, 0, 1, 1]
    rows, _, _ = load_requests(run)
    assert sorted(r["salt"] for r in rows) == sorted(r.salt for r in reqs)
    assert sorted(Path(r["source"]).stem for r in rows if r["reuse"]) == sorted(r.key for r in reqs[3:])
    assert {r["prompt"] for r in rows} == {"p0", "p1", "p2"}
    assert len({r["key"] for r in rows}) == 5
    for r, b in zip(reqs, bodies):
        assert salt_of(b) == r.salt
    g = unique_prompts(run.path)
    assert g.verdict == "PASS"
    assert g.metrics["salted_reuses"] == 2 and g.metrics["repeated_prompts"] == 0
    assert len(g.limitations) == 1 and "near-duplicate cache could" in g.limitations[0]
    assert g.reason.endswith("(2 salted reuse(s))")


def test_intended_reuse_is_named_and_uniqueness_is_judged_on_the_salted_part(tmp_path: Path) -> None:
    # two shared-prefix groups (the tag after the prefix) and one two-turn session (turn 2 resends turn 1 and the
    # model's reply): all distinct behind their salts, the reuse named; the same salted part twice is a repeat
    run = _run(tmp_path)
    head = "You are a careful assistant. Answer briefly. "
    group = [Prompt(f"sp{i}", "random", ({"role": "user", "content": f"{head if i < 3 else head.upper()}q{i}"},),
                    shared_prefix_id="g0" if i < 3 else "g1", shared_prefix_chars=len(head)) for i in range(5)]
    for p in group:
        _send(run, "e", "4", PlannedRequest(p.id, p, new_salt()), None)
    t1 = Prompt("conv-0", "conv", ({"role": "user", "content": "first question"},))
    t2 = Prompt("conv-0", "conv", ({"role": "user", "content": "first question"},
                                   {"role": "assistant", "content": "a reply"}, {"role": "user", "content": "more"}))
    salt = new_salt()
    _send(run, "e", "4", PlannedRequest("conv-0.t1", t1, salt), None)
    _send(run, "e", "4", PlannedRequest("conv-0.t2", t2, salt), None)
    rows, _, _ = load_requests(run)
    by = {Path(r["source"]).stem: r for r in rows}
    assert [by[f"sp{i}"]["prefix"] is not None for i in range(5)] == [True] * 5
    assert len({by[f"sp{i}"]["prefix"] for i in range(5)}) == 2
    assert (by["conv-0.t2"]["session"], by["conv-0.t2"]["turn"], by["conv-0.t1"]["prefix"]) == ("conv-0", 2, None)
    g = unique_prompts(run.path)
    assert g.verdict == "PASS", g.reason
    assert (g.metrics["prefix_requests"], g.metrics["prefix_groups"]) == (5, 2)
    assert (g.metrics["later_turns"], g.metrics["sessions"], g.metrics["weak_salts"]) == (1, 1, 0)
    assert "intended reuse, not repeats: 1 later turn(s) of 1 session(s) resend their own history, 5 request(s) " \
        "share one of 2 prefix(es) in front of their salt" in g.reason
    # a request of another group that carries sp0's salt and suffix: its salted part repeats sp0's
    other = Prompt("sp9", "random", ({"role": "user", "content": f"{head.upper()}q0"},), shared_prefix_id="g1",
                   shared_prefix_chars=len(head))
    _send(run, "e", "4", PlannedRequest("sp9", other, by["sp0"]["salt"]), None)
    g = unique_prompts(run.path)
    assert g.verdict == "FAIL" and g.details[0]["source"].endswith("sp9.json") and g.details[0]["prompt"] == "sp9"


def test_a_salt_under_64_bits_is_a_limitation(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _send(run, "e", "1", PlannedRequest("p0", POOL[0], "ik-00112233aabb"), None)  # 48 bits, as older runs wrote
    _send(run, "e", "1", PlannedRequest("p1", POOL[1], new_salt()), None)
    g = unique_prompts(run.path)
    assert g.verdict == "PASS" and g.metrics["weak_salts"] == 1
    assert any("fewer than 64 bits" in x and "p0.json" in x for x in g.limitations)


def test_salt_of_finds_the_tag_after_an_intended_prefix_only_once() -> None:
    p = Prompt("sp", "random", ({"role": "user", "content": "PREFIX. [ik-ffffffffffffffff] not this one"},),
               shared_prefix_chars=8)
    body = request_body(PlannedRequest("sp", p, "ik-0123456789abcdef"), model="m", max_tokens=4)
    assert body["messages"][0]["content"].startswith("PREFIX. [ik-0123456789abcdef] ")
    assert salt_of(body) == "ik-0123456789abcdef" and salted_split(body) == (8, "ik-0123456789abcdef")


def test_salt_of_reads_the_tag_bench_serve_writes() -> None:
    text = Prompt("t", "short", prompt="Once upon")
    parts = Prompt("c", "short", ({"role": "user", "content": [{"type": "text", "text": "hi"}]},))
    for p in (text, parts, POOL[0]):
        req = PlannedRequest(f"{p.id}~1", p, "ik-00112233aabb")
        body = request_body(req, model="m", max_tokens=4)
        assert salt_of(body) == "ik-00112233aabb"
        assert salt_of(request_body(PlannedRequest(p.id, p, None), model="m", max_tokens=4)) is None
    assert SALT_PATTERN.match("[ik-00112233aabb] x") and salt_of({"prompt": "[ik-zz] x"}) is None


def test_unique_prompts_falls_back_to_reply_files(tmp_path: Path) -> None:
    run = _run(tmp_path)
    a, b = PlannedRequest("p0", POOL[0], None), PlannedRequest("p0~1", POOL[0], "ik-0123456789ab")
    write_json(run.output_path("e", "1", "short", a.key), _reply(a, "e", "1"))
    write_json(run.output_path("e", "1", "short", b.key), _reply(b, "e", "1"))
    rows, _, _ = load_requests(run)
    assert [(r["source"], r["key"], r["salt"]) for r in rows] == [
        ("outputs/e/load-1/short/p0.json", "p0|", None),
        ("outputs/e/load-1/short/p0~1.json", "p0|ik-0123456789ab", "ik-0123456789ab")]
    assert unique_prompts(run.path).verdict == "PASS"
    write_json(run.output_path("e", "1", "short", "p0~2"), _reply(a, "e", "1"))  # a reuse with no tag
    g = unique_prompts(run.path)
    assert g.verdict == "FAIL" and g.details[0]["source"] == "outputs/e/load-1/short/p0~2.json"


def test_unique_prompts_not_run_without_load_requests(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _send(run, "e", None, PlannedRequest("p0", POOL[0], None), None)  # a top-level bucket: not a load level
    g = unique_prompts(run.path)
    assert (g.verdict, g.applicable, g.metrics) == ("NOT RUN", False, {})
    assert load_requests(run) == ([], 0, [])


def test_unique_prompts_reads_another_harness_schedule_when_no_load_level_is_there(tmp_path: Path) -> None:
    run = _run(tmp_path)
    msgs = [{"role": "user", "content": "q0"}]
    lines = [{"level": 4, "messages": msgs}, {"concurrency": 4, "prompt_id": "a"}, {"level": 8, "messages": msgs},
             {"rate_rps": 2, "prompt_sha256": "f" * 64, "engine": "vllm"}]
    (run.path / "sweep").mkdir()
    (run.path / "sweep" / "load_schedule.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows, bad, files = load_requests(run)
    assert (bad, files) == (0, ["sweep/load_schedule.jsonl"])
    assert [(r["engine"], r["level"], r["source"]) for r in rows] == [
        ("sweep", "4", "sweep/load_schedule.jsonl:1"), ("sweep", "4", "sweep/load_schedule.jsonl:2"),
        ("sweep", "8", "sweep/load_schedule.jsonl:3"), ("vllm", "2", "sweep/load_schedule.jsonl:4")]
    g = unique_prompts(run.path)
    assert g.verdict == "PASS" and g.metrics["requests"] == 4  # q0 repeats, but in two different levels
    with (run.path / "sweep" / "load_schedule.jsonl").open("a") as f:
        f.write(json.dumps({"level": 4, "messages": msgs}) + "\nnot json\n" + json.dumps({"level": 4}) + "\n")
    g = unique_prompts(run.path)
    assert g.verdict == "FAIL" and g.details[0] == {
        "source": "sweep/load_schedule.jsonl:5", "first": "sweep/load_schedule.jsonl:1", "engine": "sweep",
        "level": "4", "prompt": g.details[0]["prompt"], "salt": None}
    assert any("2 line(s) of the load schedule(s)" in x for x in g.limitations)


def test_a_schedule_with_no_readable_line_is_unproven_not_a_missing_load(tmp_path: Path) -> None:
    run = _run(tmp_path)
    (run.path / "requests.jsonl").write_text('{"prompt_id": "a"}\n[1, 2]\n')  # no level; not an object
    g = unique_prompts(run.path)
    assert g.verdict == "UNPROVEN" and "none of its 2 line(s)" in g.reason
    (run.path / "probes").mkdir()
    (run.path / "requests.jsonl").unlink()
    (run.path / "probes" / "requests.jsonl").write_text('{"level": 1, "prompt_id": "a"}\n')  # probes/: not a schedule
    assert unique_prompts(run.path).verdict == "NOT RUN"


# ---- output_length: exact-length requests

def test_output_length_pass_in_load_levels_and_buckets(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for level in ("1", "4"):  # the same id in two levels: two keys
        req = PlannedRequest("p0", POOL[0], None)
        _send(run, "e", level, req, _reply(req, "e", level, 16), ignore_eos=True)
    req = PlannedRequest("p1", POOL[1], None)  # top-level bucket, min_tokens == max_tokens, length from usage
    _send(run, "e", None, req, _reply(req, "e", None, 16, usage_only=True), min_tokens=16)
    req = PlannedRequest("p2", POOL[2], None)  # not exact-length: any length will do
    _send(run, "e", "4", req, _reply(req, "e", "4", 3))
    write_json(run.special_path("e", "warmup", "p0"), _reply(req, "e", None, 1))  # not read
    lengths = output_lengths(run.path / "outputs" / "e")
    assert {k: (v["length"], v["method"], v["level"]) for k, v in lengths.items()} == {
        "p1": (16, "usage", None), "load-1/p0": (16, "token_ids", "1"), "load-4/p0": (16, "token_ids", "4"),
        "load-4/p2": (3, "token_ids", "4")}
    g = output_length(run.path, "e")
    assert (g.gate, g.verdict) == ("output_length", "PASS")
    assert g.metrics == {"exact_length_outputs": 3, "exact_length_wrong": 0, "exact_length_missing": 0,
                         "exact_length_unenforced": 0}
    assert g.reason == "PASS: exact length: 3/3 outputs exactly max_tokens long, 0 wrong, 0 missing or failed"
    assert list(g.details) == []


def test_output_length_fail_one_short_in_one_level(tmp_path: Path) -> None:
    run = _run(tmp_path)
    req = PlannedRequest("p0", POOL[0], None)
    _send(run, "e", "1", req, _reply(req, "e", "1", 15), ignore_eos=True)
    _send(run, "e", "4", req, _reply(req, "e", "4", 16), ignore_eos=True)
    g = output_length(run.path, "e")
    assert g.verdict == "FAIL"
    assert (g.metrics["exact_length_outputs"], g.metrics["exact_length_wrong"]) == (2, 1)
    assert list(g.details) == [{"id": "load-1/p0", "source": "inputs/e/load-1/short/p0.json", "max_tokens": 16,
                          "length": 15, "method": "token_ids"}]


def test_output_length_unproven_on_a_failed_or_missing_reply(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ok, bad, lost = (PlannedRequest(p.id, p, None) for p in POOL)
    _send(run, "e", "2", ok, _reply(ok, "e", "2", 16), ignore_eos=True)
    _send(run, "e", "2", bad, _reply(bad, "e", "2", template=FAILED), ignore_eos=True)
    _send(run, "e", "2", lost, None, ignore_eos=True)
    g = output_length(run.path, "e")
    assert g.verdict == "UNPROVEN"
    assert (g.metrics["exact_length_wrong"], g.metrics["exact_length_missing"]) == (0, 2)
    assert [d["id"] for d in g.details] == ["load-2/p1", "load-2/p2"]
    assert g.details[0]["problem"].startswith("request failed: HTTP 400")
    assert g.details[1]["problem"] == "no reply file"


def test_output_length_unproven_when_the_engine_drops_ignore_eos(tmp_path: Path) -> None:
    run = _run(tmp_path)
    short = PlannedRequest("p0", POOL[0], None)
    _send(run, "e", "1", short, _reply(short, "e", "1", 9), ignore_eos=True)  # stopped at EOS: ignore_eos dropped
    assert output_length(run.path, "e").verdict == "FAIL"
    g = output_length(run.path, "e", ignored_options=("ignore_eos", "stream_options"))
    assert g.verdict == "UNPROVEN"
    assert "the engine is known to ignore ignore_eos" in g.reason
    assert g.metrics == {"exact_length_outputs": 1, "exact_length_wrong": 0, "exact_length_missing": 0,
                         "exact_length_unenforced": 1}
    assert g.details[0]["length"] == 9 and g.limitations
    # min_tokens == max_tokens still binds an engine that drops only ignore_eos
    both = PlannedRequest("p1", POOL[1], None)
    _send(run, "e", "1", both, _reply(both, "e", "1", 12), ignore_eos=True, min_tokens=16)
    g = output_length(run.path, "e", ignored_options=("ignore_eos",))
    assert g.verdict == "FAIL" and g.metrics["exact_length_wrong"] == 1
    assert g.reason.startswith("FAIL: exact length: 0/1 outputs")


# ---- output_length: reference

def _lengths(run: RunDir, engine: str, lengths: dict[str, int | None]) -> None:
    for i, (pid, n) in enumerate(lengths.items()):
        req = PlannedRequest(pid, Prompt(pid, "medium", prompt=f"text {i}"), None)
        if n is not None:
            write_json(run.output_path(engine, None, "medium", pid), _reply(req, engine, None, n))


def test_output_length_reference_pass_and_fail(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ids = [f"q{i}" for i in range(10)]
    _lengths(run, "ref", dict.fromkeys(ids, 100))
    _lengths(run, "good", {k: 95 + i for i, k in enumerate(ids)})  # 95..104: all within 10%
    _lengths(run, "bad", {k: 50 if i < 3 else 100 for i, k in enumerate(ids)})  # 3/10 at half length
    ref = run.path / "outputs" / "ref"
    g = output_length(run.path, "good", reference=ref)
    assert g.verdict == "PASS"
    assert (g.metrics["reference_outputs"], g.metrics["outside_tolerance"], g.metrics["missing_outputs"]) == (10, 0, 0)
    assert g.metrics["coverage"] == 1.0 and g.metrics["length_ratio_median"] == pytest.approx(0.995)
    assert g.metrics["exact_length_outputs"] == 0
    g = output_length(run.path, "bad", reference=ref)
    assert g.verdict == "FAIL"
    assert g.metrics["outside_tolerance"] == 3 and g.metrics["length_ratio_mean"] == pytest.approx(0.85)
    assert [d["ratio"] for d in g.details] == [0.5, 0.5, 0.5]
    assert "3/10 prompts outside +/-10% of the reference length" in g.reason


def test_output_length_reference_missing_outputs_count(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ids = [f"q{i}" for i in range(20)]
    _lengths(run, "ref", dict.fromkeys(ids, 40))
    _lengths(run, "one_lost", {k: (None if i == 0 else 40) for i, k in enumerate(ids)})  # 5% missing
    _lengths(run, "many_lost", {k: (None if i < 4 else 40) for i, k in enumerate(ids)})  # 20% missing
    ref = run.path / "outputs" / "ref"
    g = output_length(run.path, "one_lost", reference=ref)
    assert g.verdict == "UNPROVEN" and g.metrics["coverage"] == 0.95 and g.metrics["missing_outputs"] == 1
    assert list(g.details) == [{"id": "q0", "reference_length": 40, "problem": "no candidate reply file"}]
    g = output_length(run.path, "many_lost", reference=ref)
    assert g.verdict == "FAIL" and g.metrics["length_ratio_mean"] == pytest.approx(0.8)


def test_output_length_not_run(tmp_path: Path) -> None:
    run = _run(tmp_path)
    g = output_length(run.path, "e")
    assert (g.verdict, g.applicable, g.reason) == ("NOT RUN", False, "no replies under outputs/e/")
    req = PlannedRequest("p0", POOL[0], None)
    _send(run, "e", "1", req, _reply(req, "e", "1", 5))  # no ignore_eos, no min_tokens
    g = output_length(run.path, "e")
    assert (g.verdict, g.applicable) == ("NOT RUN", False)
    assert g.reason == "no exact-length requests and no reference outputs given"
    # a reference with no lengths in it: that part does not run either, but it was asked for
    write_json(run.output_path("ref", "1", "short", "p0"), _reply(req, "ref", "1", template=FAILED))
    g = output_length(run.path, "e", reference=run.path / "outputs" / "ref")
    assert (g.verdict, g.applicable, g.metrics["reference_outputs"]) == ("NOT RUN", True, 0)


def test_output_lengths_reads_gzipped_and_unreadable_replies(tmp_path: Path) -> None:
    run = _run(tmp_path)
    req = PlannedRequest("p0", POOL[0], None)
    path = run.output_path("e", "3", "short", "p0")
    path.parent.mkdir(parents=True)
    path.with_name("p0.json.gz").write_bytes(gzip.compress(json.dumps(_reply(req, "e", "3", 7)).encode()))
    path.with_name("p1.json").write_text("{torn")
    got = output_lengths(run.path / "outputs" / "e")
    assert got["load-3/p0"]["length"] == 7 and got["load-3/p0"]["source"] == "load-3/short/p0.json.gz"
    assert got["load-3/p1"]["problem"] == "unreadable reply file"


def test_token_count_reads_gzipped_load_replies_with_their_bodies(tmp_path: Path) -> None:
    from inferencekit.gates.check import token_rows

    run = _run(tmp_path)
    plain, packed = PlannedRequest("p0", POOL[0], None), PlannedRequest("p1", POOL[1], None)
    _send(run, "e", "2", plain, _reply(plain, "e", "2", 16))
    _send(run, "e", "2", packed, None)
    out = run.output_path("e", "2", "short", "p1")
    out.with_name("p1.json.gz").write_bytes(gzip.compress(json.dumps(_reply(packed, "e", "2", 16)).encode()))
    body = run.input_path("e", "2", "short", "p1")
    body.with_name("p1.json.gz").write_bytes(gzip.compress(body.read_bytes()))  # the body archived too
    body.unlink()
    rows, _, files = token_rows(run.path, "e")
    assert files == ["outputs/e/load-2/short/p0.json", "outputs/e/load-2/short/p1.json.gz"]
    assert [r["key"] for r in rows] == ["load-2/short/p0", "load-2/short/p1"]
    assert [r["max_tokens"] for r in rows] == [16, 16]  # the gzipped body was found beside the gzipped reply


# ---- token_count reads every reply of the run, not only the load levels' (issue 18 audit)

def test_token_count_reads_the_warmup_probes_and_known_answers_gzipped_or_not(tmp_path: Path) -> None:
    from inferencekit.gates.check import token_rows
    from inferencekit.gates.judges.token_count import judge_run as token_count_run

    run = _run(tmp_path)
    run.update_run(bench_config={"max_tokens": 16})
    req = PlannedRequest("p0", POOL[0], None)
    _send(run, "e", "2", req, _reply(req, "e", "2", 16))
    honest = _reply(req, "e", None, 16)
    write_json(run.special_path("e", "warmup", "w0"), honest)  # a warm-up is written without its body
    write_json(run.special_path("e", "kat/alone", "k0"), honest)
    lying = {**honest, "usage": {**honest["usage"], "completion_tokens": 21}}  # 16 ids streamed, usage 21
    probe = run.special_path("e", "probes", "s0.greedy")
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.with_name("s0.greedy.json.gz").write_bytes(gzip.compress(json.dumps(lying).encode()))
    rows, _, files = token_rows(run.path, "e")
    assert [r["key"] for r in rows] == ["load-2/short/p0", "warmup/w0", "probes/s0.greedy", "kat/alone/k0"]
    assert files[1:] == ["outputs/e/warmup/w0.json", "outputs/e/probes/s0.greedy.json.gz",
                         "outputs/e/kat/alone/k0.json"]
    assert rows[1]["max_tokens"] == 16  # the warm-up's limit is the load's (run.json bench_config)
    read, _ = read_run_rows(run.path, "e")
    assert read.has_load
    gate = token_count_run(read)
    # before: only load-*/ was read, so the probe's usage 21 against 16 streamed ids went unjudged (PASS)
    assert gate.verdict == "FAIL" and gate.metrics["replies_checked"] == 4
    assert gate.details[0]["key"] == "probes/s0.greedy"


def test_token_count_states_the_load_texts_the_tokenizer_refused(tmp_path: Path) -> None:
    from inferencekit.gates.judges.token_count import judge_run as token_count_run

    run = _run(tmp_path)
    reqs = [PlannedRequest(f"p{i}", POOL[i], None) for i in range(2)]
    for r in reqs:
        _send(run, "e", "2", r, _reply(r, "e", "2", 16))
    write_json(run.level_dir("outputs", "e", "2") / "retokenized.json",
               {"tokenizer": "engine:llama-server/tokenize", "counts": {"p0": 16},
                "errors": {"p1": "HTTP 422: Unprocessable Entity"}})
    rows, _ = read_run_rows(run.path, "e")
    assert rows.retokenize_refused == {"load-2/p1": "HTTP 422: Unprocessable Entity"}
    gate = token_count_run(rows)
    assert gate.verdict == "PASS" and len(gate.fallbacks) == 1
    assert "refused 1 load reply text(s) (requests: load-2/p1; first error: HTTP 422" in gate.fallbacks[0]


def test_token_count_reads_the_side_replies_retokenized_counts(tmp_path: Path) -> None:
    # issue 42: bench serve re-tokenizes the replies outside the levels too (outputs/<engine>/retokenized.json, keyed
    # "<folder>/<file key>"), so a hidden probe's logprob stream short at the cut can be settled by its text; a run
    # recorded before has no such file and its side rows have no re-tokenized count
    from inferencekit.gates.check import token_rows
    from inferencekit.rundir import RETOKENIZED_FILE

    run = _run(tmp_path)
    req = PlannedRequest("p0", POOL[0], None)
    write_json(run.special_path("e", "probes", "p1.logprobs"), _reply(req, "e", None, 16))
    write_json(run.special_path("e", "kat/alone", "k0"), _reply(req, "e", None, 16))
    rows, _, _ = token_rows(run.path, "e")
    assert [(r["key"], r["retokenized"]) for r in rows] == [("probes/p1.logprobs", None), ("kat/alone/k0", None)]
    assert run.side_retokenized("e") == run.path / "outputs" / "e" / RETOKENIZED_FILE
    write_json(run.side_retokenized("e"), {"tokenizer": "t", "counts": {
        "probes/p1.logprobs": 17, "kat/alone/k0": 16}})
    rows, _, files = token_rows(run.path, "e")
    assert [(r["key"], r["retokenized"]) for r in rows] == [("probes/p1.logprobs", 17), ("kat/alone/k0", 16)]
    assert "outputs/e/retokenized.json" not in files and run.sent_keys("e").count("retokenized") == 0
