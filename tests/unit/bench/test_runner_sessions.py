"""Open-loop session starts (``bench serve --dataset conversations --request-rate R [--rate-of turns]``): the
runner schedules session starts, each session runs its turns closed-loop, only a start carries a schedule, and
``--max-concurrency`` caps the sessions in flight (``bench/runner.py``); the level's rates (``bench/plan.py``).

The server is a stub that answers each POST with one streamed word after 20 ms and records when each turn was in
flight; its replies are materialised from the level's journal into reply files as in a real run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inferencekit.api.client import Exchange
from inferencekit.bench.pace_judge import judge_client_pace
from inferencekit.bench.plan import LevelSpec, Planner, heaviest_level, parse_levels, session_levels
from inferencekit.bench.runner import LoadRunner
from inferencekit.bench.steady import over_saturation, steady_window
from inferencekit.data.prompts import Prompt
from inferencekit.rundir import RunDir, read_json
from tests.unit.bench.test_runner_extras import _sse


class SlowStub:
    """Answers every POST after ``delay_s`` with one streamed word; ``spans`` holds ``(session, turn, start ns,
    end ns)`` of each request (the body names its session and turn: ``body_for`` below)."""

    def __init__(self, delay_s: float = 0.02) -> None:
        self.delay_s = delay_s
        self.spans: list[tuple[str, int, int, int]] = []

    async def post(self, path: str, body: dict[str, Any], optional: Any = (), sink: Any = None) -> Exchange:
        t0 = time.perf_counter_ns()
        await asyncio.sleep(self.delay_s)
        t1 = time.perf_counter_ns()
        self.spans.append((body["session"], body["turn"], t0, t1))
        chunks = [(t1, _sse({"choices": [{"index": 0, "delta": {"content": f"reply{body['turn']}"}}]})),
                  (t1 + 1000, _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 5 * body["turn"], "completion_tokens": 1}})),
                  (t1 + 2000, b"data: [DONE]\n\n")]
        return Exchange(request_id=f"r{len(self.spans)}", path=path, body=body, sent_ns=t0, call_ns=t0, status=200,
                        chunks=chunks, content_type="text/event-stream")


def _sessions(turns: tuple[int, ...]) -> list[Prompt]:
    return [Prompt(id=f"conv-{i:04d}", bucket="conv", messages=({"role": "user", "content": f"s{i} turn 1"},),
                   followups=tuple(f"s{i} turn {k}" for k in range(2, n + 1))) for i, n in enumerate(turns)]


def _run(tmp_path: Path, spec: LevelSpec, prompts: list[Prompt], n: int, think_s: float = 0.0
         ) -> tuple[SlowStub, dict[str, dict[str, Any]]]:
    run = RunDir.create(tmp_path / "run")
    stub = SlowStub()
    runner = LoadRunner(stub, run, "eng", lambda req: {"session": req.prompt.session_id or req.prompt.id,  # type: ignore[arg-type]
                                                       "turn": req.prompt.turn or 1,
                                                       "messages": list(req.prompt.messages or ())})
    runner.think_time_s = think_s
    asyncio.run(runner.run_level(spec, Planner(prompts, seed=1), num_requests=n, duration_s=None, seed=5))
    replies = {p.stem: read_json(p) for p in run.replies("eng", spec.label)}
    return stub, replies


def test_an_open_loop_level_starts_sessions_and_only_their_first_turns_are_scheduled(tmp_path):
    spec = session_levels([replace(parse_levels(None, [50.0])[0], rate_of="sessions")], 3.0)[0]
    stub, replies = _run(tmp_path, spec, _sessions((3, 3, 3, 3)), n=4, think_s=0.01)
    assert sorted(replies) == sorted(f"conv-{i:04d}.t{k}" for i in range(4) for k in (1, 2, 3))
    for key, r in replies.items():
        session, turn = key.rsplit(".t", 1)
        assert (r["session_id"], r["turn"], r["session_turns"]) == (session, int(turn), 3)
        assert isinstance(r.get("scheduled_ns"), int) is (turn == "1")  # later turns follow a reply, not the schedule
        assert isinstance(r.get("dispatched_ns"), int) is (turn == "1")
    for s in range(4):  # within a session, turn k + 1 is sent after turn k's reply and the think time
        spans = sorted((t, a, b) for sid, t, a, b in stub.spans if sid == f"conv-{s:04d}")
        assert all(nxt[1] - prev[2] >= 10_000_000 for prev, nxt in zip(spans, spans[1:]))
    firsts = sorted(r["scheduled_ns"] for r in replies.values() if r["turn"] == 1)
    assert firsts[-1] - firsts[0] < 200_000_000  # 4 starts at 50/s: none waited for a session to end
    # the client's lateness is judged on the 4 session starts only, against the start rate
    pace = judge_client_pace([], list(replies.values()), rate=spec.start_rate)
    assert pace["send_late_ms"]["n"] == 4 and pace["late_limit_ms"] == 5.0


def test_max_concurrency_caps_the_sessions_in_flight(tmp_path):
    spec = replace(parse_levels(None, [200.0], max_concurrency=1)[0], rate_of="sessions", turns_per_session=2.0)
    stub, replies = _run(tmp_path, spec, _sessions((2, 2, 2)), n=3)
    assert len(replies) == 6
    by_session: dict[str, list[tuple[int, int]]] = {}
    for sid, _, a, b in stub.spans:
        by_session.setdefault(sid, []).append((a, b))
    bounds = sorted((min(a for a, _ in v), max(b for _, b in v)) for v in by_session.values())
    # one slot: a session starts only after the previous one's last turn ended, not after its first
    assert all(nxt[0] >= prev[1] for prev, nxt in zip(bounds, bounds[1:]))


def test_a_rate_of_turns_starts_sessions_at_the_rate_over_the_mean_turns():
    [lv] = session_levels([replace(parse_levels(None, [6.0])[0], rate_of="turns")], 2.5)
    assert lv.start_rate == pytest.approx(2.4) and lv.rate == 6.0
    d = lv.describe()
    assert (d["rate_of"], d["rate_req_s"], d["turns_per_session_mean"]) == ("turns", 6.0, 2.5)
    assert d["session_start_rate_req_s"] == pytest.approx(2.4) and d["offered_turn_rate_req_s"] == pytest.approx(6.0)
    assert "session starts" in d["arrivals"]
    sessions = replace(lv, rate_of="sessions")
    assert sessions.start_rate == 6.0 and sessions.describe()["offered_turn_rate_req_s"] == 15.0
    closed = parse_levels([2], None)[0]
    assert session_levels([closed], 3.0) == [closed] and closed.start_rate == 0.0  # a closed level is left alone
    assert heaviest_level([lv, replace(lv, label="r9", rate=9.0)]) == "r9"
    with pytest.raises(ValueError, match="needs the mean turns per session"):
        _ = replace(lv, turns_per_session=0.0).start_rate
    with pytest.raises(ValueError, match="at least one turn"):
        session_levels([lv], 0.5)


def _reply(t_s: float, turn: int, ttft_ms: float, scheduled: bool) -> dict[str, Any]:
    sent = int(t_s * 1e9)
    r: dict[str, Any] = {"status": 200, "sent_ns": sent, "ttft_ms": ttft_ms, "e2el_ms": ttft_ms + 10,
                         "session_id": f"s{int(t_s)}", "turn": turn,
                         "events": [[int(ttft_ms * 1e6), 1], [int((ttft_ms + 10) * 1e6), 1]]}  # ns after the send
    if scheduled:
        r.update(scheduled_ns=sent, dispatched_ns=sent)
    return r


def test_a_session_levels_window_ends_at_the_last_start_and_later_turns_do_not_make_a_trend():
    # 12 session starts, 1 s apart, TTFT 100..104 ms with no trend; each session's turn 2 comes 0.5 s later with a
    # TTFT that grows with its history (and the level's time): judged alone they would read as a queue building up
    starts = [_reply(float(i), 1, 100.0 + (7 * i) % 5, True) for i in range(12)]
    later = [_reply(i + 0.5, 2, 100.0 + 80 * i, False) for i in range(12)]
    window = steady_window(starts + later, open_loop=True)
    assert window.end_s == pytest.approx(11.0)  # the last session start, not the last turn (11.5 s)
    sat = over_saturation(starts + later, window, open_loop=True)
    assert (sat["flag"], sat["over"], sat["n"]) == (False, "window", 11)  # the starts sent in [0.1 s, 11 s]: 1..11
    assert over_saturation(later, steady_window(later, open_loop=True), open_loop=True)["flag"] is True
