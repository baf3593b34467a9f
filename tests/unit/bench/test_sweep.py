"""The sweep's walk and boundary (bench/sweep.py): bracketing, bisection, a grid, a non-monotone point, the
boundary's interval; each walk is replayed against a made-up server whose SLO holds up to a known load."""

from __future__ import annotations

import pytest

from inferencekit.bench.sweep import SearchSpace, Target, boundary, next_point, parse_targets
from inferencekit.errors import OpError


def walk(space: SearchSpace, meets) -> list[float]:
    """The points a search runs against a server where ``meets(value)`` says whether the SLO holds."""
    tested: dict[float, bool] = {}
    while (v := next_point(space, tested)) is not None:
        assert v not in tested and len(tested) < 40
        tested[v] = meets(v)
    return list(tested)


def test_rate_search_brackets_up_then_bisects_to_the_resolution():
    space = SearchSpace("rate", start=1, minimum=1 / 16, maximum=64, resolution=0.1)
    seen = walk(space, lambda r: r <= 5.3)
    assert seen[:4] == [1, 2, 4, 8]  # doubling while the SLO holds
    # bisection: (4+8)/2, (4+6)/2, (5+6)/2; then [5, 5.5] is within 10% of 5 and the search stops
    assert seen[4:] == [6, 5, 5.5]
    pts = [{"value": v, "meets": v <= 5.3, "certain": "uncertain", "label": f"r{v:g}"} for v in seen]
    b = boundary(space, pts)
    assert b["found"] and b["value"] == 5 and b["label"] == "r5" and b["monotone"]
    assert "meets the SLO at 5 requests/s, misses it at 5.5" in b["reason"]
    assert b["ci95"] == [None, None]  # no point was sure either way


def test_rate_search_halves_when_the_start_misses():
    space = SearchSpace("rate", start=4, minimum=0.25, maximum=64, resolution=0.1)
    seen = walk(space, lambda r: r <= 0.7)
    assert seen[:5] == [4, 2, 1, 0.5, 0.75]
    b = boundary(space, [{"value": v, "meets": v <= 0.7, "certain": "pass" if v <= 0.5 else "fail", "label": str(v)}
                         for v in seen])
    assert b["value"] == max(v for v in seen if v <= 0.7)
    assert b["ci95"][0] == 0.5 and b["ci95"][1] == min(v for v in seen if v > 0.7)


def test_concurrency_search_stops_at_one_stream():
    space = SearchSpace("concurrency", start=1, minimum=1, maximum=64, resolution=1)
    seen = walk(space, lambda c: c <= 11)
    assert seen == [1, 2, 4, 8, 16, 12, 10, 11]
    assert all(float(v).is_integer() for v in seen)


def test_search_ends_at_the_limits_without_a_boundary():
    up = SearchSpace("rate", start=1, minimum=0.5, maximum=6, resolution=0.1)
    assert walk(up, lambda r: True) == [1, 2, 4, 6]
    b = boundary(up, [{"value": v, "meets": True, "certain": "pass", "label": str(v)} for v in (1, 2, 4, 6)])
    assert not b["found"] and b["value"] == 6 and "lies above it" in b["reason"]
    down = SearchSpace("rate", start=1, minimum=0.3, maximum=6, resolution=0.1)
    assert walk(down, lambda r: False) == [1, 0.5, 0.3]
    b = boundary(down, [{"value": v, "meets": False, "certain": "fail", "label": str(v)} for v in (1, 0.5, 0.3)])
    assert not b["found"] and b["value"] is None and "no point met the SLO" in b["reason"]


def test_a_grid_runs_every_point_and_names_a_non_monotone_one():
    space = SearchSpace("concurrency", start=1, minimum=1, maximum=64, resolution=1, grid=(8.0, 1.0, 2.0, 4.0))
    results = {1.0: True, 2.0: False, 4.0: True, 8.0: False}  # c4 meets the SLO above the miss at c2
    assert walk(space, results.__getitem__) == [1.0, 2.0, 4.0, 8.0]
    pts = [{"value": v, "meets": ok, "certain": "uncertain", "label": f"c{int(v)}"} for v, ok in results.items()]
    b = boundary(space, pts)
    assert b["value"] == 1.0 and not b["monotone"] and b["out_of_order"] == ["c4"]
    assert "not monotone: c4 met the SLO above the first miss at 2 streams" in b["reason"]


def test_a_boundary_that_misses_when_run_again_is_not_held():
    space = SearchSpace("rate", start=1, minimum=0.1, maximum=8, resolution=0.1)
    pts = [{"value": 1, "meets": True, "certain": "pass", "label": "r1"},
           {"value": 2, "meets": True, "certain": "uncertain", "label": "r2", "held": False},
           {"value": 4, "meets": False, "certain": "fail", "label": "r4"}]
    b = boundary(space, pts)
    assert b["found"] and b["value"] == 2 and b["held"] is False and "not held" in b["reason"]
    assert b["ci95"] == [1.0, 4.0]


def test_targets_parse_and_refuse_clearly():
    assert parse_targets("ttft_p99=500, tpot_p90=50,e2el_mean=9000") == [
        Target("ttft_ms", "p99", 500.0), Target("tpot_ms", "p90", 50.0), Target("e2el_ms", "mean", 9000.0)]
    assert Target("ttft_ms", "p99", 1).quantile == 0.99 and Target("ttft_ms", "mean", 1).quantile is None
    for bad, msg in (("ttft=500", "use <metric>_<stat>"), ("ttft_p98=5", "use <metric>_<stat>"),
                     ("ttft_p99=abc", "not a number"), ("ttft_p99=-1", "finite number > 0"),
                     ("ttft_p99=1,ttft_p99=2", "twice")):
        with pytest.raises(OpError, match=msg):
            parse_targets(bad)
