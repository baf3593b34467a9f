"""The quality tasks' request loop: item order, the concurrency bound, the time budget, per-item resume files."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferencekit.quality.task_run import ItemStore, parallelism, send_in_order


class FakeClock:
    """Seconds that pass only when an item's work says so (no wall clock in the assertions)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_results_come_back_in_item_order_and_the_bound_holds():
    in_flight, peak = 0, 0

    async def one(i: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (5 - i % 5))  # later items finish first
        in_flight -= 1
        return i * 10

    got, info = asyncio.run(send_in_order(list(range(12)), one, concurrency=3))
    assert got == [i * 10 for i in range(12)]
    assert peak == 3
    assert info["sent"] == 12 and info["of"] == 12 and info["stopped_early"] is False


def test_the_budget_holds_back_the_next_item_once_it_is_projected_past_the_deadline():
    clock = FakeClock()

    async def one(i: int) -> int:
        clock.now += 10.0  # every item takes 10 s, one at a time
        return i

    done: list[int] = []
    got, info = asyncio.run(send_in_order(list(range(10)), one, concurrency=1, deadline=35.0, clock=clock,
                                          on_done=done.append))
    # item 0 is always sent; after three items (t=30) the fourth is projected to end at 40 > 35
    assert got == [0, 1, 2] and done == [0, 1, 2]
    assert info["stopped_early"] is True and info["sent"] == 3
    assert info["mean_latency_s"] == 10.0 and info["projected_full_s"] == 100.0


def test_no_deadline_sends_everything_and_projects_by_littles_law():
    clock = FakeClock()

    async def one(i: int) -> int:
        clock.now += 2.0
        return i

    got, info = asyncio.run(send_in_order(list(range(4)), one, concurrency=2, clock=clock))
    assert got == [0, 1, 2, 3]
    assert info["projected_full_s"] == pytest.approx(4 * 2.0 / 2)


def test_a_bug_in_the_item_function_is_raised_not_swallowed():
    async def one(i: int) -> int:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        asyncio.run(send_in_order([1], one, concurrency=1))


@pytest.mark.parametrize(("size", "alone", "wall", "expected"), [(8, 1.0, 1.0, 8.0), (8, 1.0, 8.0, 1.0),
                                                                  (32, 0.5, 4.0, 4.0)])
def test_parallelism_is_size_times_alone_over_burst_wall(size, alone, wall, expected):
    assert parallelism(size, alone, wall) == pytest.approx(expected)


def test_item_store_reuses_only_the_same_request_and_never_a_failure(tmp_path):
    store = ItemStore(tmp_path / "items")
    req = {"model": "m", "max_tokens": 8}
    store.put("a", {"id": "a", "request": req, "text": "4"})
    store.put("b", {"id": "b", "request": req, "error": "HTTP 500"})
    assert store.get("a", req)["text"] == "4"
    assert store.get("a", {**req, "max_tokens": 9}) is None
    assert store.get("b", req) is None and store.get("c", req) is None
    assert store.reused == 1
    assert sorted(p.name for p in (tmp_path / "items").iterdir()) == ["a.json", "b.json"]


def test_write_new_never_replaces_a_file_with_other_bytes(tmp_path):
    from inferencekit.quality.task_run import write_new

    p = tmp_path / "r.jsonl"
    assert write_new(p, b"a\n") == p
    assert write_new(p, b"a\n") == p  # the same bytes: the same file
    second = write_new(p, b"b\n")
    assert second.name == "r-2.jsonl" and p.read_bytes() == b"a\n" and second.read_bytes() == b"b\n"
    assert write_new(p, b"c\n").name == "r-3.jsonl"


def test_a_folder_claimed_by_other_settings_is_refused(tmp_path):
    from inferencekit.errors import OpError

    store = ItemStore(tmp_path / "items")
    store.claim({"max_tokens": 64, "seed": 0}, "gsm8k")
    store.claim({"max_tokens": 64, "seed": 0}, "gsm8k")  # the same settings resume
    with pytest.raises(OpError, match=r"already holds a gsm8k run with other settings \(differs in max_tokens\)"):
        ItemStore(tmp_path / "items").claim({"max_tokens": 32, "seed": 0}, "gsm8k")


def test_the_index_lists_each_item_file_by_sha256(tmp_path):
    from inferencekit.evidence import sha256_file

    store = ItemStore(tmp_path / "items")
    store.put("a", {"id": "a", "request": {}, "text": "1"})
    index = json.loads(store.write_index(["a", "missing"]).read_text())
    assert index == {"items": {"a": {"file": "a.json", "sha256": sha256_file(tmp_path / "items" / "a.json")}}}


def test_a_quality_command_uses_or_checks_the_run_dirs_pinned_chat_template_kwargs(tmp_path):
    # before 18 the quality commands ignored the pin: two parts of one run dir could render different templates
    import pytest

    from inferencekit.errors import OpError
    from inferencekit.quality.task_run import pinned_template_kwargs
    from inferencekit.rundir import RunDir

    run = RunDir.create(str(tmp_path / "r"))
    assert pinned_template_kwargs(str(run.path), None) is None  # nothing pinned yet
    run.pin("chat_template_kwargs", {"enable_thinking": False})
    assert pinned_template_kwargs(str(run.path), None) == '{"enable_thinking":false}'  # applied when not given
    assert pinned_template_kwargs(str(run.path), '{"enable_thinking": false}') == '{"enable_thinking": false}'
    with pytest.raises(OpError, match="pins chat_template_kwargs"):
        pinned_template_kwargs(str(run.path), '{"enable_thinking": true}')
    assert pinned_template_kwargs(str(tmp_path / "new"), '{"a": 1}') == '{"a": 1}'  # a new run dir


@pytest.mark.parametrize("command", ["trajectory", "gsm8k", "niah", "sampling"])
def test_every_quality_command_refuses_another_template_than_the_run_dir_pins_before_any_request(
        command, tmp_path, capsys):
    # before 18 (9f2aa65) a quality command added to a run dir rendered its prompts with whatever template its
    # flag gave, beside a bench part that used the pinned one; now the command stops (exit 2) before sending
    from inferencekit.cli import main
    from inferencekit.rundir import RunDir
    from tests.fault_server import fault_server

    run = RunDir.create(str(tmp_path / "r"))
    run.pin("chat_template_kwargs", {"enable_thinking": False})
    hits: list = []  # every request the server got, engine detection's GETs included
    with fault_server(hits=hits) as (url, _):
        code = main(["quality", command, "--base-url", url, "--run-dir", str(run.path),
                     "--chat-template-kwargs", '{"enable_thinking": true}'])
    err = capsys.readouterr().err
    assert code == 2, err
    assert 'pins chat_template_kwargs = {"enable_thinking":false}' in err and '{"enable_thinking": true}' in err
    assert hits == []
    assert RunDir.open(run.path).read_run()["pins"]["chat_template_kwargs"] == {"enable_thinking": False}
