"""The hidden_probes gate: does the engine really sample, and are its logprobs a distribution?

Two checks, each giving a sub-verdict, combined by ``combine_claims`` (docs/design.md, "Verdicts"):

- sampling: per prompt (one ``key``) a ``greedy`` reply (T=0), two T=1 samples with different seeds
  (``sample_a``, ``sample_b``) and ``sample_a2`` (the seed of ``sample_a`` again). An engine that ignores
  temperature (serving greedy output, e.g. from a cache or a cheaper path) returns the greedy text for
  every sample. ``sample_a`` vs ``sample_a2`` says whether ``seed`` is honoured: a limitation, never a
  FAIL (many honest engines sample nondeterministically under batching).
- logprobs: ``logprobs`` probes (greedy, ``top_logprobs: 5``); every position must be a valid slice of
  a distribution (``check_logprob_entry``).

Rules, thresholds and the sampling rule's reasoning follow the seed's ``gate_hidden_probes`` and
``sampling_verdict``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import inferencekit.gates.records as pr
from inferencekit.gates.budget import binomial_tail, null_test
from inferencekit.gates.inputs import ProbeRun, RunRows, dropped_note
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, generated_text
from inferencekit.stats import combine_claims, rules_out

__all__ = ["LIVE_LIMITATION", "SAMPLING_KINDS", "SAMPLING_MIN_FAIL", "SamplingRow", "check_logprob_entry",
           "gate_hidden_probes", "judge_probes", "judge_run", "sampling_rows", "sampling_verdict"]

# The sampling rule (the seed's reasoning, restated). A confident model can return its greedy answer
# at T=1 by chance: short extraction answers from stock engines came back equal to greedy on 2/3, 0/3
# and 1/3 prompts on three hosts (observed, seed), so the chance p that both samples of one prompt
# equal greedy is taken as about 1/3 (inferred). Failing when every one of n >= 4 prompts matches
# wrongly fails an honest engine with P = p^n: 1/81 at n = 4, 1/6561 at n = 8 (derived); >= 3/4
# matching is UNPROVEN. An engine that ignores temperature matches on every prompt and still fails.
SAMPLING_MIN_FAIL = 4
SAMPLING_NULL_RATE = 1 / 3  # the chance both T=1 samples of one prompt equal greedy on an honest engine (above)
SAMPLING_RULE = "hidden_probes: T=1 samples equal to greedy on every prompt (temperature ignored)"
SAMPLING_CALIBRATION = ("the seed's stock engines on three hosts: short extraction answers equal to greedy on 2/3, 0/3 "
                        "and 1/3 prompts, so about 1/3 per prompt (inferred, not measured here); 0 FAIL in the "
                        "verify runs of 7 Dec 2026 (benchmarks/results/verdict_matrix.jsonl)")
SAMPLING_KINDS = ("greedy", "sample_a", "sample_a2", "sample_b")
LIVE_LIMITATION = ("the live probes ran on their own, one at a time (concurrency 1), not inside the benchmark load: an "
                   "engine that behaves only when idle is not caught here (mix the probes into a bench serve load "
                   "and check their replies from the run dir)")

_TINY = 1e-6  # slack on "logprob <= 0" and on sorting
_MASS_SLACK = 1e-3  # slack on the top-k probability mass and on the greedy argmax
_DETAILS_CAP = 50
_UNSORTED = "top_logprobs are not sorted (descending)"


@dataclass(frozen=True, slots=True)
class SamplingRow:
    """One sampling prompt: do its T=1 samples equal greedy, and did its seed reproduce?"""

    key: str
    samples_equal_greedy: bool
    seed_reproduced: bool | None  # None: sample_a2 missing or failed
    seeds_differ: bool


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _valid_logprob(x: Any) -> bool:
    return _is_number(x) and x <= _TINY


def _top_value(x: Any) -> float | None:
    """A top logprob as a float: ``null`` and ``-inf`` mean probability 0 (servers send both for a token the
    sampler masked: a legitimate value, not a protocol error); None for anything that is no logprob."""
    if x is None:
        return -math.inf
    if isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) and x <= _TINY:
        return float(x)
    return None


def check_logprob_entry(entry: dict[str, Any], greedy: bool) -> list[str]:
    """The ways one logprob entry is not a slice of a probability distribution; empty when it is.

    Args:
        entry: ``{"token": str, "logprob": float, "top_logprobs": [{"token", "logprob"}, ...]}``, natural log.
        greedy: the reply was decoded greedily, so its token must be the argmax of ``top_logprobs``.

    Checks: the chosen logprob finite and <= 0, every top logprob <= 0 (1e-6 slack; a top logprob of ``null``
    or ``-inf`` is probability 0, ``_top_value``); top logprobs sorted
    descending (1e-6 slack); their probability mass sum(exp) <= 1 + 1e-3; when greedy, the chosen
    logprob within 1e-3 of the top one and the chosen token the top-1 token (unless tied within 1e-3).
    Source: the seed's ``check_logprob_entry``.
    """
    chosen = entry.get("logprob")
    top = [t for t in (entry.get("top_logprobs") or []) if isinstance(t, dict)]
    problems = []
    if not _valid_logprob(chosen):
        problems.append(f"chosen logprob {chosen!r} is not a finite number <= 0")
    tops = [_top_value(t.get("logprob")) for t in top]
    if any(v is None for v in tops):
        problems.append("a top logprob is not a number <= 0 (nor null / -inf: probability 0)")
        return problems
    if not top:
        return problems
    values = [v for v in tops if v is not None]
    if any(later > earlier + _TINY for earlier, later in itertools.pairwise(values)):
        problems.append(_UNSORTED)
    mass = math.fsum(math.exp(v) for v in values)
    if mass > 1 + _MASS_SLACK:
        problems.append(f"top-k probability mass {mass:.4g} > 1 (not normalised)")
    if greedy and _is_number(chosen):
        chosen, best = float(entry["logprob"]), max(values)
        if chosen < best - _MASS_SLACK:
            problems.append(f"greedy token logprob {chosen:.4f} < top logprob {best:.4f} (the greedy token is not "
                            "the argmax)")
        elif top[0].get("token") != entry.get("token") and abs(chosen - values[0]) > _MASS_SLACK:
            problems.append(f"greedy token {entry.get('token')!r} is not the top-1 token {top[0].get('token')!r}")
    return problems


def sampling_verdict(equal: int, n: int) -> tuple[str, str]:
    """``(verdict, reason)`` when ``equal`` of ``n`` prompts had both T=1 samples equal to the greedy output.

    FAIL only when ``n >= SAMPLING_MIN_FAIL`` and every prompt matched (temperature ignored); UNPROVEN
    when at least 3/4 matched (or n is 0); else PASS. See the module's note for the probabilities.
    """
    if n <= 0:
        return "UNPROVEN", "no sampling prompt came back complete"
    if equal == n and n >= SAMPLING_MIN_FAIL:
        return "FAIL", f"T=1 samples equal the greedy output on all {n}/{n} prompts (temperature ignored?)"
    if 4 * equal >= 3 * n:
        if n < SAMPLING_MIN_FAIL:
            why = f"with fewer than {SAMPLING_MIN_FAIL} prompts this can be chance"
        else:
            why = ("a confident model seldom matches greedy this often by chance, but some prompts did vary, so "
                   "an ignored temperature is suspected, not shown")
        return "UNPROVEN", (f"T=1 samples equal the greedy output on {equal}/{n} prompts: {why}; more sampling "
                            "prompts would settle it")
    return "PASS", f"T=1 samples differ from greedy on {n - equal}/{n} prompts"


def sampling_rows(records: Sequence[ProbeRecord]) -> list[SamplingRow]:
    """A ``SamplingRow`` per key whose greedy, sample_a and sample_b replies are all usable."""
    texts: dict[str, dict[str, str | None]] = {}
    for rec in records:
        if rec.get("kind") in SAMPLING_KINDS:
            reply = pr.ok_reply(rec)
            texts.setdefault(str(rec.get("key")), {})[rec["kind"]] = None if reply is None else generated_text(reply)
    rows = []
    for key, group in texts.items():
        greedy, a, b = group.get("greedy"), group.get("sample_a"), group.get("sample_b")
        if greedy is None or a is None or b is None:
            continue
        a2 = group.get("sample_a2")
        rows.append(SamplingRow(key, a == greedy and b == greedy, None if a2 is None else a == a2, a != b))
    return rows


def _refused_knobs(records: Sequence[ProbeRecord]) -> list[str]:
    """``top_p`` / ``top_k`` when a sampling reply says the server refused them (``dropped_fields``)."""
    dropped = {field for rec in records
               if rec.get("kind") in SAMPLING_KINDS and isinstance(reply := rec.get("reply"), dict)
               for field in (reply.get("dropped_fields") or [])}
    return sorted(dropped & {"top_p", "top_k"})


def _sampling_part(records: Sequence[ProbeRecord], metrics: dict[str, Any], details: list[dict[str, Any]],
                   limitations: list[str]) -> list[tuple[str, str]]:
    probes = [rec for rec in records if rec.get("kind") in SAMPLING_KINDS]
    fails = pr.failed(probes)
    rows = sampling_rows(probes)
    equal = sum(r.samples_equal_greedy for r in rows)
    seeded = [r for r in rows if r.seed_reproduced is not None]
    kept = sum(bool(r.seed_reproduced) for r in seeded)
    metrics.update(sampling_prompts=len(rows), samples_equal_greedy=equal,
                   seed_reproduced=f"{kept}/{len(seeded)}", sampling_failed=len(fails))
    details += [asdict(r) for r in rows]
    parts = []
    if rows:
        parts.append(sampling_verdict(equal, len(rows)))
        if len(rows) < SAMPLING_MIN_FAIL:
            limitations.append(f"only {len(rows)} sampling prompt(s) came back complete: too few to FAIL an engine "
                               f"that ignores temperature (at least {SAMPLING_MIN_FAIL} are needed)")
    if kept < len(seeded):
        limitations.append(f"the same seed reproduced the T=1 sample on {kept}/{len(seeded)} prompts: the engine "
                           "ignores `seed` or samples nondeterministically, so seeded comparisons are not possible")
    knobs = _refused_knobs(probes)
    if knobs:
        said = " and ".join(knobs)
        limitations.append(f"the server refused {said} on the T=1 samples (sent to ask for the whole distribution), "
                           f"so its default {said} applied: a default that narrows the distribution makes samples "
                           "equal to greedy more likely")
    if fails:
        parts.append(("UNPROVEN", pr.fail_note(fails, "sampling probe")))
        details += fails
    elif not rows and probes:
        parts.append(("UNPROVEN", "no sampling prompt came back complete (greedy, sample_a and sample_b)"))
    elif not probes:
        parts.append(("UNPROVEN", "no sampling probe"))
    return parts


def _logprob_part(records: Sequence[ProbeRecord], metrics: dict[str, Any],
                  details: list[dict[str, Any]]) -> list[tuple[str, str]]:
    probes = [rec for rec in records if rec.get("kind") == "logprobs"]
    fails = pr.failed(probes)
    violations: list[dict[str, Any]] = []
    positions = answered = unsorted = 0
    missing = []
    no_top: list[str] = []  # replies whose positions carry no top_logprobs (refused and dropped, or not sent)
    for rec in probes:
        reply = pr.ok_reply(rec)
        if reply is None:
            continue
        entries = reply.get("logprobs")
        if not isinstance(entries, list) or not entries:
            missing.append(rec.get("key"))
            continue
        answered += 1
        tops = [e for e in entries if isinstance(e, dict) and e.get("top_logprobs")]
        if "top_logprobs" in (reply.get("dropped_fields") or ()) or not tops:
            no_top.append(str(rec.get("key")))
            # the chosen logprobs alone are still checked for range, but they prove no distribution
            for pos, entry in enumerate(entries):
                bare = (check_logprob_entry(entry, greedy=True) if isinstance(entry, dict)
                        else ["entry is not an object"])
                violations += [{"key": rec.get("key"), "position": pos, "problem": p} for p in bare]
            continue
        positions += len(entries)
        for pos, entry in enumerate(entries):
            found = check_logprob_entry(entry, greedy=True) if isinstance(entry, dict) else ["entry is not an object"]
            unsorted += sum(p == _UNSORTED for p in found)
            violations += [{"key": rec.get("key"), "position": pos, "problem": p} for p in found if p != _UNSORTED]
    metrics.update(logprob_replies=answered, logprob_positions=positions, logprob_violations=len(violations),
                   logprob_failed=len(fails), logprob_missing=len(missing), logprob_unsorted=unsorted,
                   logprob_without_top=len(no_top))
    parts = []
    if violations:
        first = violations[0]
        parts.append(("FAIL", (f"{len(violations)} logprob violation(s) in {positions} positions (first: "
                               f"{first['problem']} at {first['key']}:{first['position']})")))
        details += violations[:_DETAILS_CAP]
    elif positions:
        order = (f" (top_logprobs listed out of order at {unsorted} position(s): the order is presentation, not a "
                 "probability, so it is noted, not failed; llama-cpp-python under load, observed)" if unsorted
                 else ", sorted")
        parts.append(("PASS", f"{positions} positions: logprobs finite, normalised, greedy token = argmax{order}"))
    if fails:
        parts.append(("UNPROVEN", pr.fail_note(fails, "logprob probe")))
        details += fails
    if no_top and not violations:
        parts.append(("UNPROVEN", (f"{len(no_top)}/{len(probes)} logprob probes came back without top_logprobs (the "
                                   "server refused the field and the client dropped it, or sent none): their "
                                   "positions show no distribution, so normalisation and the greedy argmax were not "
                                   f"checked on them (first: {no_top[0]})")))
    if missing:
        parts.append(("UNPROVEN", (f"{len(missing)}/{len(probes)} logprob probes came back without logprobs "
                                   "(they were requested): the logprob check could not run on them")))
    if not probes:
        parts.append(("UNPROVEN", "no logprob probe"))
    return parts


def gate_hidden_probes(records: Sequence[ProbeRecord], where: str = "live") -> Gate:
    """The hidden_probes gate: the sampling and logprob sub-verdicts, combined by ``combine_claims``.

    Args:
        records: probe records (``SAMPLING_KINDS`` and ``logprobs`` are read).
        where: ``"live"`` (the probes ran on their own, at concurrency 1: ``LIVE_LIMITATION`` is added) or
            ``"load"`` (mixed into a bench serve load).

    The reason lists each sub-verdict as ``"VERDICT: why"``. NOT RUN when no sampling or logprob probe is
    in the records; a missing half alone is UNPROVEN. Metrics: ``sampling_prompts``,
    ``samples_equal_greedy``, ``seed_reproduced`` ("k/n"), ``sampling_failed``, ``logprob_replies``,
    ``logprob_positions``, ``logprob_violations``, ``logprob_failed``, ``logprob_missing``.

    Raises:
        ValueError: ``where`` is neither "live" nor "load".
    """
    if where not in ("live", "load"):
        raise ValueError(f"where must be 'live' or 'load', not {where!r}")
    if not any(rec.get("kind") in (*SAMPLING_KINDS, "logprobs") for rec in records):
        return Gate("hidden_probes", "NOT RUN", "no sampling or logprob probe was sent")
    metrics: dict[str, Any] = {}
    details: list[dict[str, Any]] = []
    limitations = [LIVE_LIMITATION] if where == "live" else []
    sampling = _sampling_part(records, metrics, details, limitations)
    logprob = _logprob_part(records, metrics, details)
    parts = sampling + logprob
    n_prompts, positions = metrics["sampling_prompts"], metrics["logprob_positions"]
    fired = any(v == "FAIL" for v, _ in sampling)
    if n_prompts:
        # the budget's null test (gates/budget.py): k of n prompts matched greedy, each at most 1/3 likely for an
        # honest engine, pooled with the other hidden-probe run of the verification as one binomial count
        equal = metrics["samples_equal_greedy"]
        metrics["null_tests"] = [null_test(SAMPLING_RULE, binomial_tail(equal, n_prompts, SAMPLING_NULL_RATE)
                                           if fired else None, SAMPLING_NULL_RATE ** SAMPLING_MIN_FAIL,
                                           SAMPLING_CALIBRATION, fired=fired,
                                           binomial=(equal, n_prompts, SAMPLING_NULL_RATE))]
    if any(v == "FAIL" for v, _ in logprob):
        metrics["fail_kind"] = "deterministic"  # a logprob entry off a distribution: no honest engine sends one
    elif fired:
        metrics["fail_kind"] = "statistical"
    bounds = []
    if n_prompts:
        bounds.append(f"T=1 samples equal greedy on {metrics['samples_equal_greedy']}/{n_prompts} prompts: an engine "
                      f"ignoring temperature matches on all {n_prompts}, an honest one with chance about "
                      f"(1/3)^{n_prompts} = {(1 / 3) ** n_prompts:.2g} (the seed's estimate)")
    if positions:
        bounds.append(rules_out(metrics["logprob_violations"], positions, "logprob positions off a distribution",
                                "violation rate"))
    return Gate("hidden_probes", combine_claims(v for v, _ in parts), "; ".join(f"{v}: {why}" for v, why in parts),
                metrics, details, limitations, judged=n_prompts + positions, rules_out="; ".join(bounds))


def shrunk_note(asked: int, planned: int) -> str:
    """The fallback line of a sampling check cut from ``asked`` to ``planned`` prompts: the chance an honest engine
    FAILs (every prompt's samples equal greedy, p ≈ 1/3 each: the module's note) at both sizes."""
    return (f"the sampling check ran on {planned} prompts instead of {asked} (the prompt set held too few): an honest "
            f"engine FAILs it by chance with P ≈ (1/3)^{planned} = {(1 / 3) ** planned:.2%}, against "
            f"{(1 / 3) ** asked:.3%} at {asked}, and an engine ignoring temperature is caught as surely")


def judge_probes(run: ProbeRun) -> Gate:
    """hidden_probes on a gate run's sampling and logprob probes (``run.where``: live, or mixed into a load); a
    sampling check cut short by a small prompt set says so (``shrunk_note``) as a fallback."""
    gate = gate_hidden_probes(run.records, where=run.where)
    probes = run.settings.get("probes") or {}
    asked = probes.get("sampling_shrunk_from")
    if isinstance(asked, int) and gate.verdict != "NOT RUN":
        gate = gate.replace(fallbacks=(*gate.fallbacks, shrunk_note(asked, int(probes.get("sampling_prompts") or 0))))
    return gate


def judge_run(rows: RunRows) -> Gate | None:
    """hidden_probes on the probes a load mixed in (``bench serve --probes``), None when it mixed in none. Probes
    drawn from the public dev set say so: a limitation when the load ran on it too, a fallback when the load's own
    (sealed) set was too small to feed them (``meta.prompt_source``, ``gates/probes/load.py``). Fields the client
    dropped from them on an HTTP 400 (a seed, ``chat_template_kwargs``) are a fallback too (``dropped_note``)."""
    if not rows.mixed_probes:
        return None
    gate = gate_hidden_probes(rows.mixed_probes, where="load")
    drop = dropped_note(rows.mixed_probes)
    if drop and gate.verdict != "NOT RUN":
        gate = gate.replace(fallbacks=(*gate.fallbacks, drop))
    sources = {(r.get("meta") or {}).get("prompt_source") for r in rows.mixed_probes}
    public = ("the hidden probes came from the packaged public dev prompts, which an engine could recognise and "
              "treat apart from the load")
    if "dev-fallback" in sources:
        return gate.replace(fallbacks=(*gate.fallbacks, f"{public}: the load's own prompt set held too few chat "
                                                        "prompts to feed them"))
    if "dev" in sources:
        return gate.with_limitations([f"{public} (the load ran on them too; a sealed --prompts set feeds them "
                                      "instead)"])
    return gate
