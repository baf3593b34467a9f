"""The gates' requests for a load: hidden-probe groups dealt to the levels, known answers alone and in the
heaviest level (``gates/probes/load.py``), on the packaged dev prompts."""

from collections import Counter

from inferencekit.data.prompts import load_prompt_set
from inferencekit.gates.probes.load import hidden_probe_bodies, kat_pool_size, load_extras
from inferencekit.gates.probes.plan import OPTIONAL_FIELDS

DEV = list(load_prompt_set("dev").prompts)


def test_hidden_probe_bodies_are_hidden_probe_groups_only():
    bodies = hidden_probe_bodies(DEV, seed=1, model="m", max_tokens=16, sampling_prompts=4, top_k_off=-1)
    kinds = Counter(p["kind"] for p in bodies)
    assert kinds == {"greedy": 4, "sample_a": 4, "sample_a2": 4, "sample_b": 4, "logprobs": 3}
    assert all(p["body"]["max_tokens"] == 16 for p in bodies)
    assert {p["body"]["top_k"] for p in bodies if p["kind"] == "sample_b"} == {-1}


def test_load_extras_deal_probe_groups_round_robin_and_known_answers_to_the_heaviest_level():
    x = load_extras(levels=["c1", "c2", "c4"], heaviest="c4", probes=True, kat=3, kat_max_tokens=24, seed=7, model="m",
                    max_tokens=None, extra={"top_k": 1}, ctk={"enable_thinking": False}, neutral={}, top_k_off=0)
    groups = {lv: sorted({p["key"] for p in ps if p["folder"] == "probes"}) for lv, ps in x["by_level"].items()}
    # 4 sampling groups and 3 logprob probes (each its own key): 7 keys dealt c1, c2, c4, c1, c2, c4, c1
    assert [len(groups[lv]) for lv in ("c1", "c2", "c4")] == [3, 2, 2]
    assert all(p["body"]["max_tokens"] == 64 for ps in x["by_level"].values() for p in ps if p["kind"] != "kat")
    alone = x["alone"]
    assert [p["folder"] for p in alone] == ["kat/alone"] * 3 and [p["kind"] for p in alone] == ["kat"] * 3
    under_load = [p for p in x["by_level"]["c4"] if p["folder"] == "kat/load"]
    assert [p["body"] for p in under_load] == [p["body"] for p in alone]  # the same bodies, alone and under load
    assert all(p["body"]["temperature"] == 0.0 and p["body"]["max_tokens"] == 24 and p["body"]["top_k"] == 1
               and p["body"]["chat_template_kwargs"] == {"enable_thinking": False} for p in alone)
    assert x["optional"] == list(OPTIONAL_FIELDS)


def test_load_extras_without_probes_or_known_answers_carry_nothing():
    x = load_extras(levels=["c1"], heaviest="c1", probes=False, kat=0, kat_max_tokens=24, seed=1, model="m",
                    max_tokens=16, extra={}, ctk={}, neutral={}, top_k_off=0)
    assert x["alone"] == [] and x["by_level"] == {"c1": []}
    assert kat_pool_size() == len([p for p in DEV if p.is_chat and p.bucket in ("short", "medium")])


def test_a_sealed_prompt_set_feeds_the_hidden_probes_and_a_small_one_falls_back_to_dev_and_says_so():
    # before 18 the hidden probes always came from the public dev set, which an engine can recognise
    import dataclasses

    sealed = [dataclasses.replace(p, id=f"sealed-{i}", messages=({"role": "user", "content": f"SEALED {i}: what is "
                                                                  f"{i} + {i}?"},), bucket="short")
              for i, p in enumerate(DEV[:20])]
    kw = dict(levels=["c1"], heaviest="c1", probes=True, kat=0, kat_max_tokens=24, seed=7, model="m", max_tokens=16,
              extra={}, ctk={}, neutral={}, top_k_off=0)
    x = load_extras(**kw, prompts=sealed, dataset="my.jsonl")  # type: ignore[arg-type]
    assert {(p["meta"] or {})["prompt_source"] for p in x["by_level"]["c1"]} == {"load"}
    texts = [m["content"] for p in x["by_level"]["c1"] for m in p["body"]["messages"] if m["role"] == "user"]
    assert texts and all("SEALED " in t for t in texts)
    small = load_extras(**kw, prompts=sealed[:3], dataset="my.jsonl")  # type: ignore[arg-type]
    assert {p["meta"]["prompt_source"] for p in small["by_level"]["c1"]} == {"dev-fallback"}
    assert {p["meta"]["prompt_source"] for p in load_extras(**kw)["by_level"]["c1"]} == {"dev"}  # type: ignore[arg-type]


def test_known_answers_and_the_load_around_them_carry_the_same_logprob_and_count_fields():
    # issue 42: the known answers ask for top-2 logprobs (the order rule's margins); the load asks the same, merged with
    # the dialect's count fields (vLLM's return_token_ids), and the known answers carry those too: nothing marks them
    x = load_extras(levels=["c1", "c4"], heaviest="c4", probes=False, kat=2, kat_max_tokens=64, seed=1, model="m",
                    max_tokens=None, extra={}, ctk={}, neutral={}, top_k_off=0,
                    count_fields={"return_token_ids": True})
    assert x["load_fields"] == {"return_token_ids": True, "logprobs": True, "top_logprobs": 2}
    for p in x["alone"] + x["by_level"]["c4"]:
        assert {k: p["body"][k] for k in x["load_fields"]} == x["load_fields"]
    # a dialect that asks more candidates keeps its larger top_logprobs
    more = load_extras(levels=["c1"], heaviest="c1", probes=False, kat=1, kat_max_tokens=8, seed=1, model="m",
                       max_tokens=None, extra={}, ctk={}, neutral={}, top_k_off=0,
                       count_fields={"logprobs": True, "top_logprobs": 5})
    assert more["load_fields"]["top_logprobs"] == 5 and more["alone"][0]["body"]["top_logprobs"] == 5
