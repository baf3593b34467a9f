import json
import re

import numpy as np
import pytest

from inferencekit.bench.plan import (
    SALT_PATTERN,
    Planner,
    parse_levels,
    parse_slo,
    ramp_level,
    repeat_levels,
    request_body,
)
from inferencekit.bench.schedule import arrival_offsets_s, ramp_offsets_s, ramp_rates
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError

POOL = [Prompt(f"p{i}", "short", ({"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}))
        for i in range(3)]


def test_every_request_is_salted_afresh_and_reuses_are_suffixed():
    pl = Planner(POOL, seed=7)
    reqs = [pl.take() for _ in range(7)]
    assert sorted(r.key for r in reqs[:3]) == ["p0", "p1", "p2"]
    assert all(r.key.endswith(("~1", "~2")) for r in reqs[3:])
    assert reqs[6].key == reqs[0].key + "~2"
    # a 64-bit salt on every request, the first use too, all distinct
    assert all(r.salt and re.fullmatch(r"ik-[0-9a-f]{16}", r.salt) for r in reqs)
    assert len({r.salt for r in reqs}) == 7
    # the same seed draws the same prompts in the same order, but never the same salts: a second run cannot be
    # served from a prompt cache the first one filled
    again = [Planner(POOL, seed=7).take()]
    assert again[0].key == reqs[0].key and again[0].salt != reqs[0].salt


def test_salt_tag_goes_to_the_first_user_message_only():
    pl = Planner(POOL, seed=1)
    for _ in range(3):
        pl.take()
    req = pl.take()
    body = request_body(req, model="m", max_tokens=5)
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    m = SALT_PATTERN.match(body["messages"][1]["content"])
    assert m and f"ik-{m.group(1)}" == req.salt
    assert POOL[int(req.prompt.id[1:])].messages[1]["content"] == f"q{req.prompt.id[1:]}"  # pool untouched


def test_restore_continues_the_same_draw():
    a = Planner(POOL, seed=3)
    first = [a.take().key for _ in range(5)]
    b = Planner(POOL, seed=3)
    b.restore(first)
    a_next = a.take()
    b_next = b.take()
    assert a_next.key == b_next.key


def test_draw_count_survives_restore_and_a_given_used_past_one_round():
    # the draw position is kept as a running count (Planner._taken); it must equal the uses however they came
    n = len(POOL)
    a = Planner(POOL, seed=5)
    keys = [a.take().key for _ in range(n + 1)]  # one round and one more: later uses are "~k" keys
    assert sum(k.count("~") for k in keys) == 1
    b = Planner(POOL, seed=5)
    b.restore(keys)
    c = Planner(POOL, seed=5, used=b.used.copy())
    nxt = [a.take().key for _ in range(n)]
    assert [b.take().key for _ in range(n)] == nxt
    assert [c.take().key for _ in range(n)] == nxt


def test_body_fixed_fields_win_over_extra_and_template_kwargs_layer():
    req = Planner([Prompt("x", messages=({"role": "user", "content": "hi"},), chat_template_kwargs={"b": 2})],
                  seed=0).take()
    body = request_body(req, model="m", max_tokens=None, extra={"temperature": 9, "top_k": 3},
                        fixed={"temperature": 0.0}, chat_template_kwargs={"a": 1, "b": 1})
    assert body["temperature"] == 0.0 and body["top_k"] == 3
    assert body["max_tokens"] == 128 and body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"a": 1, "b": 2}


def test_levels_and_labels():
    lv = parse_levels([1, 4], [2.5], arrival="gamma", burstiness=0.5, max_concurrency=8)
    assert [x.label for x in lv] == ["c1", "c4", "r2.5c8"]
    assert lv[2].describe() == {"label": "r2.5c8", "mode": "open", "point": "r2.5c8", "rate_req_s": 2.5,
                                "arrival": "gamma", "burstiness": 0.5, "max_concurrency": 8}
    for bad in (dict(concurrency=[0], rates=None), dict(concurrency=None, rates=[0]),
                dict(concurrency=None, rates=None), dict(concurrency=[2, 2], rates=None)):
        with pytest.raises(OpError):
            parse_levels(bad["concurrency"], bad["rates"])
    with pytest.raises(OpError, match="only to --arrival gamma"):
        parse_levels(None, [1.0], burstiness=2.0)


def test_slo_parsing():
    assert parse_slo("ttft=500, tpot_ms=50") == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    for bad in ("latency=5", "ttft=-1", "ttft", "ttft=abc"):
        with pytest.raises(OpError):
            parse_slo(bad)


def test_constant_arrivals_are_exact_and_random_ones_keep_the_mean_rate():
    assert arrival_offsets_s(4, 2.0, "constant").tolist() == [0.0, 0.5, 1.0, 1.5]
    for kind, b in (("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)):
        off = arrival_offsets_s(20001, 10.0, kind, burstiness=b, seed=5)
        assert off[0] == 0 and np.all(np.diff(off) >= 0)
        assert off[-1] / 20000 == pytest.approx(0.1, rel=0.05)  # mean gap 1/rate

    def cv(b):
        return np.std(np.diff(arrival_offsets_s(20001, 10.0, "gamma", burstiness=b, seed=5))) / 0.1

    assert cv(0.25) == pytest.approx(2.0, rel=0.1)  # CV of a gamma(k) gap is 1/sqrt(k)
    assert cv(4.0) == pytest.approx(0.5, rel=0.1)
    assert np.array_equal(arrival_offsets_s(5, 1.0, "poisson", seed=9), arrival_offsets_s(5, 1.0, "poisson", seed=9))


def test_planner_never_sends_the_same_body_twice_inside_a_long_run():
    pl = Planner(POOL, seed=11)
    bodies = [request_body(pl.take(), model="m", max_tokens=4) for _ in range(30)]
    assert len({json.dumps(b["messages"]) for b in bodies}) == 30
    assert all(SALT_PATTERN.match(b["messages"][1]["content"]) for b in bodies)


def test_consecutive_draws_rotate_through_the_buckets():
    pool = [Prompt(f"{b}{i}", b, prompt="x") for b in ("long", "short", "medium") for i in range(5)]
    pool += [Prompt("tiny0", "tiny", prompt="x")]
    pl = Planner(pool, seed=4)
    first = [pl.take().prompt.bucket for _ in range(8)]
    assert first == ["long", "medium", "short", "tiny", "long", "medium", "short", "long"]


def test_repeats_interleave_points_and_label_each_run():
    lv = repeat_levels(parse_levels([1, 4], [2.5]), 3)
    assert [x.label for x in lv] == ["c1_rep1", "c4_rep1", "r2.5_rep1", "c1_rep2", "c4_rep2", "r2.5_rep2",
                                     "c1_rep3", "c4_rep3", "r2.5_rep3"]
    assert [x.point_label for x in lv[:3]] == ["c1", "c4", "r2.5"] and lv[5].repeat == 2
    assert lv[4].describe() == {"label": "c4_rep2", "mode": "closed", "point": "c4", "repeat": 2, "concurrency": 4}
    assert repeat_levels(lv[:1], 1) == lv[:1]
    with pytest.raises(OpError, match="--repeats must be ≥ 1"):
        repeat_levels(lv, 0)


def test_ramp_level_as_vllm_names_it():
    lv = ramp_level("exponential", 1, 8, arrival="constant", max_concurrency=4)
    assert lv.label == "ramp-exp-1-8c4" and lv.mode == "open" and lv.rate == 8.0 and lv.concurrency == 4
    assert lv.describe() == {"label": "ramp-exp-1-8c4", "mode": "open", "point": "ramp-exp-1-8c4", "rate_req_s": 8.0,
                             "arrival": "constant", "burstiness": 1.0, "max_concurrency": 4,
                             "ramp_up_strategy": "exponential", "ramp_up_start_rps": 1.0, "ramp_up_end_rps": 8.0}
    with pytest.raises(OpError, match="linear or exponential"):
        ramp_level("step", 1, 2)
    with pytest.raises(OpError, match="within"):
        ramp_level("linear", 0, 2)


def test_ramp_rates_follow_vllm_linear_and_exponential():
    # vLLM get_current_request_rate: progress i/(n-1); linear 1 + 7·i/4, exponential 1·8^(i/4)
    assert ramp_rates(5, "linear", 1, 8).tolist() == [1.0, 2.75, 4.5, 6.25, 8.0]
    assert np.allclose(ramp_rates(5, "exponential", 1, 8), [1.0, 8 ** 0.25, 8 ** 0.5, 8 ** 0.75, 8.0])
    assert ramp_rates(1, "linear", 2, 4).tolist() == [2.0]
    with pytest.raises(ValueError):
        ramp_rates(3, "step", 1, 2)


def test_ramp_offsets_draw_each_gap_at_its_request_rate():
    # constant arrivals: gaps 1/2.75, 1/4.5, 1/6.25, 1/8 after a first send at 0
    off = ramp_offsets_s(5, "linear", 1, 8, "constant")
    assert np.allclose(off, np.cumsum([0, 1 / 2.75, 1 / 4.5, 1 / 6.25, 1 / 8]))
    # Poisson: seeded, and the gaps shrink as the rate grows (mean gap 1/r_i)
    many = ramp_offsets_s(4001, "linear", 1, 100, "poisson", seed=3)
    gaps = np.diff(many)
    assert many[0] == 0 and np.array_equal(many, ramp_offsets_s(4001, "linear", 1, 100, "poisson", seed=3))
    assert gaps[:400].mean() > 5 * gaps[-400:].mean()
    g = ramp_offsets_s(2001, "exponential", 2, 2, "gamma", burstiness=0.5, seed=1)  # a flat ramp: rate 2
    assert abs(np.diff(g).mean() - 0.5) < 0.05


def test_a_set_drawn_afresh_per_run_keeps_its_first_uses_untagged():
    """``--dataset random`` (token-exact lengths, drawn with a per-run nonce): a tag would change its lengths, so only
    its later uses are salted."""
    pl = Planner(POOL, seed=7, salt_first_use=False)
    reqs = [pl.take() for _ in range(5)]
    assert [r.salt is None for r in reqs] == [True, True, True, False, False]
    assert request_body(reqs[0], model="m", max_tokens=4)["messages"] == list(reqs[0].prompt.messages)
