"""The live probe plan: what each gate sends, in which order, with which fields (pure; no server)."""

from __future__ import annotations

from collections import Counter

import pytest

from inferencekit.data.prompts import load_prompt_set
from inferencekit.errors import OpError
from inferencekit.gates.probes.plan import ProbeSettings, plan_probes, probe_pool, prompts_needed

DEV = list(load_prompt_set("dev").prompts)


def _plan(**kw):
    s = ProbeSettings(seed=kw.pop("seed", 7), **kw)
    return s, plan_probes(DEV, s, model="m", extra={"cache_prompt": False}, ctk={"enable_thinking": False},
                          count_fields={"logprobs": True, "top_logprobs": 1})


def test_counts_per_kind_follow_the_settings():
    s, plan = _plan(cache_prompts=5, echo_pairs=3, sampling_prompts=6, count_probes=4, ignore_eos_probes=2)
    kinds = Counter(p["kind"] for p in plan)
    assert kinds["warmup"] == 2 and kinds["cache_first"] == kinds["cache_repeat"] == 5
    assert kinds["echo_orig"] == kinds["echo_perturbed"] == 3
    assert kinds["count"] == 4 and kinds["ignore_eos"] == 2
    assert kinds["greedy"] == kinds["sample_a"] == kinds["sample_a2"] == kinds["sample_b"] == 6
    assert kinds["logprobs"] == 3
    assert kinds["rare"] >= 8  # every rare class plus code and numbers
    assert len({p["id"] for p in plan}) == len(plan)


def test_pairs_keep_their_order_and_prompts_are_fresh_except_the_repeats():
    _, plan = _plan()
    pos = {p["id"]: i for i, p in enumerate(plan)}
    texts = Counter(p["body"]["messages"][0]["content"] for p in plan)
    for p in plan:
        if p["kind"] == "cache_repeat":
            first = plan[pos[f"{p['key']}.cache_first"]]
            assert pos[first["id"]] < pos[p["id"]]
            assert first["body"]["messages"] == p["body"]["messages"]
        if p["kind"] == "echo_perturbed":
            orig = plan[pos[f"{p['key']}.echo_orig"]]
            assert pos[orig["id"]] < pos[p["id"]]
            a, b = orig["meta"]["nonce"], p["meta"]["nonce"]
            assert sum(x != y for x, y in zip(a, b)) == 1 and p["meta"]["orig"] == a
    repeated = {t for t, n in texts.items() if n > 1}
    by_kind = {p["kind"] for p in plan if p["body"]["messages"][0]["content"] in repeated}
    assert by_kind <= {"cache_first", "cache_repeat", "greedy", "sample_a", "sample_a2", "sample_b"}
    assert plan[0]["kind"] == plan[1]["kind"] == "warmup"


def test_each_timing_repeat_and_each_control_goes_out_two_after_its_first_amid_the_other_probes():
    # the caching gate compares a repeat's speedup over its first with a control's (two first-seen requests) sent the
    # same way: each pair and its control are one unit of the one random interleaving (issue 42, item 5), not a block
    spread = []
    for seed in range(5):
        _, plan = _plan(seed=seed)
        pos = {p["id"]: i for i, p in enumerate(plan)}
        gaps = [pos[f"{p['key']}.cache_repeat"] - pos[p["id"]] for p in plan if p["kind"] == "cache_first"]
        gaps += [pos[f"{p['key']}.cache_control_b"] - pos[p["id"]] for p in plan if p["kind"] == "cache_control_a"]
        assert gaps == [2] * 12  # crossed: first, control a, repeat, control b (or the control pair first)
        for p in plan:
            if p["kind"] == "cache_first":
                unit = [q["kind"] for q in plan[pos[p["id"]] - 1:pos[p["id"]] + 3]]
                assert unit[1:] == ["cache_first", "cache_control_a", "cache_repeat"] or \
                    unit == ["cache_control_a", "cache_first", "cache_control_b", "cache_repeat"]
        firsts = sorted(pos[p["id"]] for p in plan if p["kind"] in ("cache_first", "cache_control_a"))
        spread.append(firsts[-1] - firsts[0])
        texts = {p["key"]: p["body"]["messages"][0]["content"] for p in plan if p["kind"].startswith("cache_")}
        for i in range(6):  # a control is its pair's text under two other tags that lead
            a = next(p for p in plan if p["id"] == f"k{i}.cache_control_a")["body"]["messages"][0]["content"]
            b = next(p for p in plan if p["id"] == f"k{i}.cache_control_b")["body"]["messages"][0]["content"]
            assert a != b != texts[f"c{i}"] and a[:1] in "(#T" and b[:1] in "(#T"
            core = a.split(" ", 1)[1] if a.startswith("(") else a.split("\n", 1)[1]
            assert core in texts[f"c{i}"] and core in b
    # the 24 caching requests are spread among the others, not sent as one run
    assert min(spread) > 30
    _, plain = _plan(seed=0, cache_controls=False)
    assert not any(p["kind"].startswith("cache_control") for p in plain)


def test_bodies_carry_what_each_gate_needs():
    _, plan = _plan()
    for p in plan:
        b = p["body"]
        assert b["model"] == "m" and b["stream"] is True and b["cache_prompt"] is False
        assert b["chat_template_kwargs"] == {"enable_thinking": False}
        if p["kind"] in ("sample_a", "sample_a2", "sample_b"):
            assert b["temperature"] == 1.0 and b["top_p"] == 1.0 and b["top_k"] == 0 and isinstance(b["seed"], int)
        else:
            assert b["temperature"] == 0.0 and "seed" not in b
        if p["kind"] in ("count", "ignore_eos"):
            # ignore_eos asks for 3 candidates: past EOS the end token is often first (merged_entries needs the
            # chosen token among them)
            assert b["logprobs"] is True and b["top_logprobs"] == (3 if p["kind"] == "ignore_eos" else 1)
        assert (b.get("ignore_eos") is True) == (p["kind"] == "ignore_eos")
        if p["kind"] == "logprobs":
            assert b["top_logprobs"] == 5
    seeds = {}
    for p in plan:
        if p["kind"].startswith("sample_"):
            seeds.setdefault(p["key"], {})[p["kind"]] = p["body"]["seed"]
    assert all(s["sample_a"] == s["sample_a2"] != s["sample_b"] for s in seeds.values())


def test_the_seed_decides_the_plan():
    assert _plan(seed=3)[1] == _plan(seed=3)[1]
    assert _plan(seed=3)[1] != _plan(seed=4)[1]


def test_only_the_asked_gates_are_planned():
    _, plan = _plan(gates=("token_count",))
    assert {p["kind"] for p in plan} == {"warmup", "count"}


def test_a_small_prompt_set_is_refused_before_anything_is_sent():
    s = ProbeSettings(sampling_prompts=500)
    assert prompts_needed(s) > len(probe_pool(DEV))
    with pytest.raises(OpError, match="the probes need"):
        plan_probes(DEV, s, model="m")


def test_a_sealed_prompt_set_feeds_the_ignore_eos_probes_too():
    # before 18 they were always the fixed public SHORT_ANSWERS questions, which an engine can recognise
    from inferencekit.gates.probes.plan import SHORT_ANSWERS

    def eos_texts(sealed: bool) -> list[str]:
        s = ProbeSettings(gates=("output_length",), seed=3, sealed_prompts=sealed)
        plan = plan_probes(DEV, s, model="m")
        return [p["body"]["messages"][-1]["content"] for p in plan if p["kind"] == "ignore_eos"]

    public, sealed = eos_texts(False), eos_texts(True)
    assert len(public) == len(sealed) == 3
    assert all(any(q in t for q in SHORT_ANSWERS) for t in public)
    assert not any(any(q in t for q in SHORT_ANSWERS) for t in sealed)
    users = {m["content"] for p in probe_pool(DEV) for m in p.messages or () if m["role"] == "user"}
    assert all(any(u in t for u in users) for t in sealed)


@pytest.mark.parametrize(("count_fields", "want"), [({"logprobs": True, "top_logprobs": 0}, 0),
                                                    ({"return_token_ids": True}, None),
                                                    ({"logprobs": True, "top_logprobs": 5}, 5)])
def test_ignore_eos_candidates_are_raised_only_where_the_dialect_streams_some(count_fields, want):
    s = ProbeSettings(seed=7, ignore_eos_probes=2)
    plan = plan_probes(DEV, s, model="m", count_fields=count_fields)
    tops = {p["body"].get("top_logprobs") for p in plan if p["kind"] == "ignore_eos"}
    assert tops == {want}


def test_caching_and_rare_probes_carry_the_dialects_bypass_over_extra_body_and_nothing_else_does():
    from inferencekit.api.dialects import DIALECTS

    s = ProbeSettings(seed=5)
    plan = plan_probes(DEV, s, model="m", extra={"cache_prompt": True},
                       cache_bypass=DIALECTS["llama-server"].cache_bypass)
    caching = [p for p in plan if p["kind"] in ("cache_first", "cache_repeat", "cache_control_a", "cache_control_b",
                                                "echo_orig", "echo_perturbed", "rare")]
    assert len(caching) == 2 * (2 * s.cache_prompts + s.echo_pairs) + sum(1 for p in plan if p["kind"] == "rare") > 20
    assert all(p["body"]["cache_prompt"] is False for p in caching)  # the bypass wins over --extra-body
    assert all(p["body"]["cache_prompt"] is True for p in plan if p not in caching)
    # vLLM's bypass: a fresh salt for every caching probe, the repeat's differing from its first's
    plan = plan_probes(DEV, ProbeSettings(seed=5), model="m", cache_bypass=DIALECTS["vllm"].cache_bypass)
    salts = [p["body"].get("cache_salt") for p in plan if p["kind"].startswith(("cache_", "echo_", "rare"))]
    assert len(salts) == len(set(salts)) > 20 and all(isinstance(x, str) and len(x) == 32 for x in salts)
    assert not any("cache_salt" in p["body"] for p in plan if not p["kind"].startswith(("cache_", "echo_", "rare")))
