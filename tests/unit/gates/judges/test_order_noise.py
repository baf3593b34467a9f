"""The known-answer order rule judged against the run's own logprob noise (gates/judges/order_noise.py).

Replies are llama-server-shaped SSE streams (the events of tests/fixtures/replies/llama-server/chat_stream_counted.json,
with two candidates per token as ``top_logprobs: 2`` gives), built token by token so each test sets the margins it
needs; ``test_recorded_*`` use replies recorded from llama-server ``--parallel 4`` (tests/fixtures/order_noise/).
"""

import copy
import gzip
import json

import orjson
import pytest

from inferencekit.gates.check import read_kat
from inferencekit.gates.judges.order import compare_sample, judge_kat, judge_noise, judge_order
from inferencekit.gates.judges.order_noise import (
    CONFIDENT,
    NEAR_TIE,
    UNDECIDED,
    Divergence,
    judge_divergences,
    p_value,
    pair_noise,
)
from inferencekit.gates.properties import PROPERTIES
from inferencekit.gates.result import strict_gate
from inferencekit.rundir import KAT_ALONE, KAT_LOAD, RunDir, write_json
from tests.paths import FIXTURES

VOCAB = {i: f"w{i} " for i in range(100)}


def reply(steps: list[tuple[int, float, int, float]], *, finish: str = "length", logprobs: bool = True) -> dict:
    """A finished streamed reply: one event per ``(token id, logprob, runner-up id, runner-up logprob)``."""
    events = [[1000, orjson.dumps({"choices": [{"index": 0, "finish_reason": None,
                                                "delta": {"role": "assistant", "content": None}}]}).decode()]]
    for k, (tid, lp, rid, rlp) in enumerate(steps):
        choice: dict = {"index": 0, "finish_reason": finish if k == len(steps) - 1 else None,
                        "delta": {"content": VOCAB[tid]}}
        if logprobs:
            choice["logprobs"] = {"content": [{"id": tid, "token": VOCAB[tid], "logprob": lp, "top_logprobs": [
                {"id": tid, "token": VOCAB[tid], "logprob": lp}, {"id": rid, "token": VOCAB[rid], "logprob": rlp}]}]}
        events.append([2000 + k, orjson.dumps({"choices": [choice]}).decode()])
    events.append([9000, orjson.dumps({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(steps),
                                                                "total_tokens": 9 + len(steps)}}).decode()])
    events.append([9001, "[DONE]"])
    return {"status": 200, "events": events}


def chain(seed: int, n: int = 32) -> list[tuple[int, float, int, float]]:
    """A greedy reply of ``n`` tokens with comfortable margins (~1 nat)."""
    return [((seed + 7 * i) % 90, -0.3, (seed + 7 * i) % 90 + 1, -1.3 - 0.01 * i) for i in range(n)]


def jitter(steps, eps: float):
    """The same choices with every logprob moved by ±``eps`` (batch-size rounding)."""
    return [(t, lp + (eps if i % 2 else -eps), r, rlp - (eps if i % 3 else -eps / 2))
            for i, (t, lp, r, rlp) in enumerate(steps)]


def diverge(steps, at: int, *, margin: float, swap_to_runner_up: bool = True):
    """``steps`` with position ``at`` onwards changed: at ``at`` the runner-up wins, the margin having moved by
    ``margin`` nats in all; the rest is another continuation."""
    out = list(steps[:at])
    t, lp, r, _ = steps[at]
    half = margin / 2
    if swap_to_runner_up:
        out.append((r, lp + 1e-9, t, lp + 1e-9 - max(half, 0.0)))
    else:
        out.append((95, lp, t, lp - half))
    out += [((x + 3) % 90, a, (x + 3) % 90 + 1, b) for x, a, _, b in steps[at + 1:]]
    return out


def run_rows(pairs: list[tuple[dict, dict]]) -> list[dict]:
    return [compare_sample(f"kat-{i}", [("alone", a), ("inside c4", b)], tokens=True) for i, (a, b) in
            enumerate(pairs)]


def honest_run(eps: float = 1e-3, n: int = 4) -> list[tuple[dict, dict]]:
    return [(reply(chain(i)), reply(jitter(chain(i), eps))) for i in range(n)]


def test_pair_noise_counts_margin_changes_before_the_first_different_choice():
    a = chain(0)
    noise, div, both = pair_noise(reply(a), reply(jitter(a, 1e-3)))
    assert both and div is None and len(noise) == 32
    # the margin moved by 2·eps, 1.5·eps, eps/2 or not at all, by how jitter moved the two logprobs
    assert sorted({round(x / 1e-3, 6) for x in noise}) == [0.0, 0.5, 1.5, 2.0]
    noise, div, _ = pair_noise(reply(a), reply(diverge(jitter(a, 1e-3), 10, margin=4e-4)))
    assert len(noise) == 10 and div is not None and div.position == 10 and div.exact
    # the alone copy's margin at 10 was 1.1 nats, so the swing is that nat and the loaded copy's own margin
    assert div.swing == pytest.approx(1.1 + 2e-4, abs=1e-6) and div.margin_a == pytest.approx(1.1, abs=1e-6)


def test_a_near_tie_divergence_is_disclosed_as_a_property_not_failed():
    pairs = honest_run(eps=0.2)  # noise up to ~0.4 nats of margin change
    a = chain(7)
    near = [(t, lp, r, lp - 0.05) if i == 12 else (t, lp, r, rlp) for i, (t, lp, r, rlp) in enumerate(a)]
    pairs.append((reply(near), reply(diverge(near, 12, margin=0.05))))
    rows = run_rows(pairs)
    gate = judge_noise(rows, what="5 known answers", alpha=0.01)
    assert gate.verdict == "PASS", gate.reason
    assert gate.metrics["near_ties"] == 1 and gate.metrics["confident"] == 0 and gate.metrics["differ"] == 1
    assert [p["property"] for p in gate.properties] == ["not-batch-invariant"]
    assert "kat-4 at token 12" in gate.properties[0]["shown_by"]
    # the near-tie pair's own 12 positions were computed identically (every change 0): no noise scale, left out
    assert gate.metrics["noise_samples"] == 4 * 32
    # the byte rule of seed 004 FAILs the same rows; --strict restores it through the property
    assert judge_order(rows, what="x").verdict == "FAIL"
    strict = strict_gate(gate)
    assert strict.verdict == "FAIL" and strict.reason.startswith("--strict: not-batch-invariant is FAIL")


def test_a_confident_divergence_fails_with_its_alpha():
    pairs = honest_run(eps=1e-3)
    a = chain(9)
    pairs.append((reply(a), reply(diverge(jitter(a, 1e-3), 5, margin=2.0))))
    gate = judge_noise(run_rows(pairs), what="5 known answers", alpha=0.01)
    assert gate.verdict == "FAIL" and gate.metrics["confident"] == 1 and gate.properties == ()
    assert "kat-4 at token 5" in gate.reason and "α = 0.01" in gate.reason and "p = " in gate.reason
    d = next(x for r in gate.details if r.get("status") == "DIFFER" for x in r["divergences"])
    assert d["class"] == CONFIDENT and d["p"] == pytest.approx(1 / (4 * 32 + 5 + 1), rel=1e-3)
    # a margin's rank is statistical evidence: its p (one divergence judged) goes to verify's error budget
    assert gate.metrics["fail_kind"] == "statistical"
    (test,) = gate.metrics["null_tests"]
    assert test["fired"] and test["p"] == pytest.approx(d["p"]) and test["alpha"] == 0.01


def test_the_order_dependent_cheat_is_unexplained_and_fails():
    # cheat-proxy's order-dependent cheat rewrites the first content piece's case and leaves the logprob entries:
    # the texts differ while the token streams agree
    a = reply(chain(3))
    b = copy.deepcopy(a)
    payload = orjson.loads(b["events"][1][1])
    payload["choices"][0]["delta"]["content"] = payload["choices"][0]["delta"]["content"].upper()
    b["events"][1][1] = orjson.dumps(payload).decode()
    rows = run_rows([*honest_run(), (a, b)])
    gate = judge_noise(rows, what="5 known answers")
    assert gate.verdict == "FAIL" and gate.metrics["unexplained"] == 1
    assert "the generated tokens agree but text at 0" in gate.reason
    assert gate.metrics["fail_kind"] == "deterministic"  # no noise explains other text on the same tokens: no α


def test_the_order_dependent_cheat_rewriting_a_token_and_its_entry_fails():
    # cheat-proxy's order-dependent cheat as docs/cheat-proxy.md says: the k-th content piece's case swapped, its
    # logprob entry's token with it and its id moved to the next id; the listed candidates are left as they were,
    # so the "chosen" token is not among its own candidates: no greedy decode chose it, whatever the margin
    a = reply(chain(3))
    b = copy.deepcopy(a)
    k = 6
    payload = orjson.loads(b["events"][1 + k][1])
    ch = payload["choices"][0]
    ch["delta"]["content"] = ch["delta"]["content"].swapcase()
    entry = ch["logprobs"]["content"][0]
    entry["token"], entry["id"] = entry["token"].swapcase(), entry["id"] + 1
    b["events"][1 + k][1] = orjson.dumps(payload).decode()
    gate = judge_noise(run_rows([*honest_run(), (a, b)]), what="5 known answers")
    assert gate.verdict == "FAIL" and gate.metrics["confident"] == 1
    assert f"kat-4 at token {k}" in gate.reason and "not the top of its own listed candidates" in gate.reason
    assert gate.metrics["fail_kind"] == "deterministic"  # a non-greedy choice at T=0: no α


def test_a_finish_reason_that_differs_on_the_same_tokens_fails():
    a = chain(6)
    rows = run_rows([*honest_run(), (reply(a, finish="length"), reply(a, finish="stop"))])
    gate = judge_noise(rows, what="5 known answers")
    assert gate.verdict == "FAIL" and gate.metrics["unexplained"] == 1 and "finish_reason" in gate.reason


def test_a_reply_without_logprobs_is_unproven_when_it_differs():
    a = chain(2)
    rows = run_rows([*honest_run(), (reply(a, logprobs=False), reply(diverge(a, 4, margin=0.0), logprobs=False))])
    gate = judge_noise(rows, what="5 known answers")
    assert gate.verdict == "UNPROVEN" and gate.metrics["undecided"] == 1 and "no logprob entries" in gate.reason
    # identical replies without logprobs still PASS: nothing differed
    same = run_rows([(reply(a, logprobs=False), reply(a, logprobs=False))])
    assert judge_noise(same, what="1 known answer").verdict == "PASS"


def test_a_copy_that_ended_early_is_undecided():
    a = chain(4)
    rows = run_rows([*honest_run(), (reply(a), reply(a[:20], finish="stop"))])
    gate = judge_noise(rows, what="5 known answers")
    assert gate.verdict == "UNPROVEN" and "one reply ended there" in gate.reason


def test_pairs_computed_identically_do_not_dilute_the_noise_of_one_that_was_not():
    # llama-server --parallel 4, 7 Dec (benchmarks/order_noise.py seed 1): three known answers ran the same kernels
    # alone and loaded (every margin change 0), the fourth did not (0.166, 0.059) and first differed at token 2 with a
    # swing of 0.43 (margin 0.23). Pooled with the zeros the swing's rank gave p = 1/195 and FAILed an honest engine;
    # without them it is 2 samples: too few to judge
    same = [(reply(chain(i)), reply(chain(i))) for i in range(3)]
    a = [(1, -0.5, 2, -1.0), (3, -0.4, 4, -0.9), (5, -0.7, 6, -0.93)] + chain(9)[3:]
    b = [(1, -0.5 + 0.083, 2, -1.0 - 0.083), (3, -0.4 - 0.0295, 4, -0.9 + 0.0295), (6, -0.72, 5, -0.92)] + [
        ((t + 3) % 90, lp, (t + 3) % 90 + 1, rlp) for t, lp, _, rlp in chain(9)[3:]]
    gate = judge_noise(run_rows([*same, (reply(a), reply(b))]), what="4 known answers")
    assert gate.metrics["noise_samples"] == 2 and gate.metrics["confident"] == 0
    assert gate.verdict == "UNPROVEN" and "too few" in gate.reason


def test_too_few_noise_samples_cannot_fail_and_say_so():
    a = chain(5, n=8)
    rows = run_rows([(reply(a), reply(diverge(a, 3, margin=3.0)))])
    gate = judge_noise(rows, what="1 known answer")
    assert gate.verdict == "UNPROVEN" and "too few" in gate.reason


def test_p_value_and_bonferroni_by_hand():
    noise = [0.001 * k for k in range(1, 200)]  # 199 samples, max 0.199
    assert p_value(0.5, noise) == pytest.approx(1 / 200)
    assert p_value(0.0, noise) == 1.0
    assert p_value(0.1995, noise) == pytest.approx(1 / 200) and p_value(0.199, noise) == pytest.approx(2 / 200)
    # one divergence: 1/200 < 0.01 → confident; two: each held to 0.005, and 1/200 is not below it → undecided
    d = Divergence(3, "x", "y", 0.5, True, 0.4)
    assert [j["class"] for j in judge_divergences([d], noise, 0.01)] == [CONFIDENT]
    assert [j["class"] for j in judge_divergences([d, d], noise, 0.01)] == [UNDECIDED, UNDECIDED]
    small = Divergence(3, "x", "y", 0.05, True, 0.04)
    assert judge_divergences([small], noise, 0.01)[0]["class"] == NEAR_TIE


def test_kat_rows_read_from_a_run_dir_are_compared_token_by_token(tmp_path):
    base = tmp_path / "outputs" / "e"
    for i, (a, b) in enumerate(honest_run(eps=0.2)):
        write_json(base / KAT_ALONE / f"kat-{i}.json", a)
        write_json(base / KAT_LOAD / f"kat-{i}.json", {**b, "level": "c4"})
    rows, _, level = read_kat(RunDir(tmp_path), "e")
    assert all("divergences" in r and r["logprobs"] for r in rows)
    gate = judge_kat(rows, level)
    assert gate.verdict == "PASS" and gate.metrics["noise_samples"] == 128 and "inside load level c4" in gate.reason


def test_rows_without_the_token_comparison_keep_the_byte_rule():
    a = chain(1)
    rows = [compare_sample("k", [("alone", reply(a)), ("under load", reply(diverge(a, 3, margin=0.0)))])]
    assert "divergences" not in rows[0] and judge_kat(rows, None).verdict == "FAIL"


def test_every_reported_property_is_on_the_closed_list_and_in_the_docs():
    from tests.paths import ROOT

    page = (ROOT / "docs" / "properties.md").read_text()
    for name, prop in PROPERTIES.items():
        assert f"`{name}`" in page and prop.strict in ("FAIL", "UNPROVEN")


RECORDED = sorted(p.name for p in (FIXTURES / "order_noise").glob("llama-server-p4-*.json.gz"))


def test_the_recorded_runs_are_there():
    assert len(RECORDED) >= 4, RECORDED  # a parametrised test over none would only be skipped


def _recorded(name: str):
    rec = json.loads(gzip.decompress((FIXTURES / "order_noise" / name).read_bytes()))
    rows = [compare_sample(k, [("alone", v["alone"]), ("inside c4", v["load"])], tokens=True)
            for k, v in rec["samples"].items()]
    return rec, judge_kat(rows, "c4")


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_known_answers(name):
    """Known answers recorded by benchmarks/order_noise.py on 7 Dec 2026 (verify quick's load and known answers on
    llama-server --parallel 4): each file holds the alone and loaded copies and the verdict and counts this rule gave
    them (``--rejudge`` after the last rule change); none is a FAIL."""
    rec, gate = _recorded(name)
    assert gate.verdict != "FAIL"
    assert gate.verdict == rec["expected"]["verdict"]
    assert gate.metrics["near_ties"] == rec["expected"]["near_ties"]
    assert gate.metrics["confident"] == rec["expected"]["confident"]


@pytest.mark.xfail(strict=True, reason="issue 42, not built yet: the quantised-under-load cheat (the zoo's Q4_0 "
                   "answering every request sent inside the load) first differs at near-ties of its own, larger "
                   "noise (margin changes median 0.26-0.43 nats against the honest 0.07-0.17), so the rule that ranks "
                   "a margin among the run's own noise calls it not-batch-invariant; what would catch it, the noise "
                   "level or the near-tie rate against an honest calibration, is not there. A rate rule cannot "
                   "separate it at verify's 4 known answers: the honest llama-server --parallel 4 diverged at "
                   "near-ties in 3 of 4 "
                   "in a run whose batches were computed differently (order_noise-20261207.json seed 0), the cheat "
                   "in 3-4 of 4")
def test_the_quantised_under_load_cheat_fails():
    rec, gate = _recorded("quantised-under-load-seed1.json.gz")
    assert rec["expected"]["verdict"] == "PASS" and gate.metrics["near_ties"] == 4  # as recorded: a miss
    assert gate.verdict == "FAIL"
