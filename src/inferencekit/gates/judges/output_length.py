"""The output_length gate: does a request that forbids stopping early get exactly max_tokens?

Fixed-length benchmarks send ``ignore_eos: true`` with ``max_tokens``; an engine that stops early, or
reports a length it did not generate, makes their throughput figures wrong. Two parts:

- live (``judge_probes``): the ``ignore_eos`` probes of a gate run, body ``{"ignore_eos": true,
  "max_tokens": N, ...}``. Per usable reply the length is the streamed count (token ids, else logprob
  entries), else usage alone. The rules follow the seed's live output_length rule; the pure form here
  takes no tokenizer, so a logprob stream short of usage stays unsettled (token_count can settle it
  by the text). An engine whose dialect is known to accept ``ignore_eos`` and drop it cannot show an
  exact length: its PASS becomes UNPROVEN; one known to honour it (llama-server, vLLM) that accepted it and
  still stopped at EOS FAILs (elsewhere a stop at EOS is UNPROVEN: ignore_eos may simply be unsupported).
- run dir (``judge_run``): every exact-length request of a recorded run (top-level buckets and
  ``load-<level>/``, docs/design.md's departure from the seed, which judged the buckets only) against its
  ``max_tokens``, and the lengths against a reference engine's outputs when given. The seed's rules
  and its 10% / 10% defaults.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeGuard

import inferencekit.gates.records as pr
from inferencekit.gates.inputs import LengthInputs, ProbeRun, RunRows
from inferencekit.gates.properties import shown
from inferencekit.gates.result import Gate
from inferencekit.shapes import ProbeRecord, generated_text
from inferencekit.stats import combine_claims, rules_out

__all__ = ["LengthRow", "exact_length_of", "forcing_options", "gate_output_length_live", "gate_output_length_static",
           "judge_probes", "judge_run", "length_row", "reply_length"]

_UNSTREAMED = "tokens counted but not streamed (special tokens after EOS?)"
# llama-server streams a token ending in a partial UTF-8 character inside the next token's entry (records.py,
# merged_entries): a stream short of usage by tokens the entries' bytes show were made.
_MERGED = "of later tokens at a multi-byte character (their bytes run past the token's own)"
_MAYBE_MERGED = ("tokens counted but not streamed; the text's multi-byte characters could hide them in merged "
                 "entries, but no entry's top_logprobs shows it")
_MAX_DETAILS = 50  # rows of each kind kept in the run-dir part's details (the metrics keep the full counts)


@dataclass(frozen=True, slots=True)
class LengthRow:
    """One ignore_eos reply judged against its ``max_tokens``.

    ``outcome``: ``"exact"``, ``"bad"`` (FAIL), ``"stopped"`` (ended at EOS, counts consistent),
    ``"unstreamed"`` (logprob stream short of usage = max_tokens at finish 'length'), ``"refused"``
    (the server dropped ``ignore_eos``), ``"uncounted"`` (no count at all), ``"merged"`` (cut at max_tokens, the
    stream short by tokens its entries' bytes prove were streamed merged: counts as exact, ``length`` = usage),
    ``"maybe_merged"`` (the same gap, which only the text's multi-byte characters could explain).
    """

    key: str
    max_tokens: int | None
    length: int | None
    method: str | None  # "token_ids" | "logprobs" | "usage" | None
    usage: int | None
    streamed: int | None
    finish_reason: str | None
    outcome: str
    problem: str | None = None


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_tokens", "max_completion_tokens"):
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _contradictions(usage: int | None, streamed: int | None, method: str | None, finish: str | None,
                    want: int | None) -> list[str]:
    """Statements a reply makes that cannot all be true, whatever the engine's handling of ignore_eos."""
    slack = 1 if finish == "stop" else 0  # an EOS token counted on one side only
    found = []
    if usage is not None and want is not None and usage > want:
        found.append(f"usage {usage} > max_tokens {want}")
    if usage is not None and want is not None and finish == "length" and usage < want:
        found.append(f"finish_reason 'length' with usage {usage} < max_tokens {want}")
    if usage is not None and streamed is not None:
        if streamed > usage + slack:
            found.append(f"streamed {streamed} > usage {usage}")
        elif usage - streamed > slack and not _may_be_unstreamed(usage, method, finish, want):
            found.append(f"usage {usage} > {streamed} streamed ({method})")
    return found


def _may_be_unstreamed(usage: int | None, method: str | None, finish: str | None, want: int | None) -> bool:
    """A logprob stream cut at max_tokens with usage exactly there: the tokens missing from the stream may be
    special tokens generated after EOS and never streamed. Token-id streams get no such allowance."""
    return method == "logprobs" and finish == "length" and want is not None and usage == want


def _merged_at_cut(reply: Mapping[str, Any], row: LengthRow) -> LengthRow | None:
    """A stream cut at max_tokens (finish 'length', usage = max_tokens) short of usage by tokens streamed
    merged into another token's entry at a multi-byte character: ``"merged"`` when the entries' own bytes
    prove it (``records.merged_entries``: at least one hidden token per merged entry, at most their extra
    bytes), ``"maybe_merged"`` when only the text's non-ASCII characters could explain the gap
    (``records.merge_slack``); else None (the other rules judge the row)."""
    u, s, want = row.usage, row.streamed, row.max_tokens
    if u is None or s is None or s >= u or row.finish_reason != "length" or u != want:
        return None
    gap = u - s
    how = _gap_by_merges(reply, gap)
    if how == "merged":
        return replace(row, length=u, outcome="merged", problem=f"{gap} token(s) streamed inside "
                       f"{pr.merged_entries(reply).entries} entr(ies) {_MERGED}")
    if how == "maybe_merged":
        return replace(row, outcome="maybe_merged", problem=f"{gap} {_MAYBE_MERGED}")
    return None


def _gap_by_merges(reply: Mapping[str, Any], gap: int) -> str | None:
    """What explains a stream ``gap`` > 0 tokens short of usage: ``"merged"`` (merged entries' bytes prove at least
    as many hidden tokens as entries and room for all of them, ``records.merged_entries``), ``"maybe_merged"`` (only
    the text's multi-byte characters could hide them, ``records.merge_slack``), or None (nothing does)."""
    m = pr.merged_entries(reply)
    if m.entries and m.entries <= gap <= m.room:
        return "merged"
    if gap <= pr.merge_slack(generated_text(reply)):
        return "maybe_merged"
    return None


def length_row(record: ProbeRecord) -> LengthRow | None:
    """The ``LengthRow`` of one ignore_eos record, None when its reply is not usable (a failed probe)."""
    reply = pr.ok_reply(record)
    if reply is None:
        return None
    want = _max_tokens(record.get("body") or {})
    usage = pr.usage_tokens(reply)
    streamed, method = pr.streamed_count(reply)
    length, how = (streamed, method) if streamed is not None else (usage, "usage" if usage is not None else None)
    finish = reply.get("finish_reason")
    exact = LengthRow(str(record.get("key")), want, length, how, usage, streamed, finish, "exact")
    merged = _merged_at_cut(reply, exact)
    if merged is not None:
        return merged
    problems = _contradictions(usage, streamed, method, finish, want)
    if problems:
        return replace(exact, outcome="bad", problem="; ".join(problems))
    if "ignore_eos" in (reply.get("dropped_fields") or []):
        return replace(exact, outcome="refused", problem="the server refused ignore_eos; the client dropped it")
    if length is None or want is None:
        return replace(exact, outcome="uncounted", problem="no usage, token ids or logprobs to count")
    if length == want:
        return exact
    if (streamed is not None and usage is not None and streamed < usage
            and _may_be_unstreamed(usage, method, finish, want)):
        return replace(exact, outcome="unstreamed", problem=f"{usage - streamed} {_UNSTREAMED}")
    if finish == "stop" and length < want:
        return replace(exact, outcome="stopped", problem=f"stopped at EOS after {length} of {want} tokens")
    return replace(exact, outcome="bad", problem=f"length {length} != max_tokens {want}")


def gate_output_length_live(records: Sequence[ProbeRecord], *, stopped_is_property: bool = False) -> Gate:
    """The output_length gate from live ``ignore_eos`` probe records.

    ``stopped_is_property``: replies that ended at EOS with consistent counts show the property
    ``ignores-ignore-eos`` (docs/properties.md) instead of making the gate UNPROVEN; the gate then PASSes on its
    length claims alone (each reply's finish_reason, usage and stream agree). ``judge_probes`` sets it for an
    engine not known to honour ``ignore_eos`` (one known to honour it that stops at EOS FAILs instead).

    Verdicts, in order:

    - NOT RUN: no ignore_eos probe in the records;
    - FAIL: a reply that is not ``max_tokens`` long although nothing excuses it: finish 'length' below
      max_tokens; usage above it; a stream longer than usage; a stream shorter than usage (one token of
      slack at 'stop'), except a logprob stream at the cut (below); or a length unequal to max_tokens
      that did not end at EOS;
    - UNPROVEN: ignore_eos refused (failed probes, or ``ignore_eos`` in a reply's ``dropped_fields``);
      replies that stopped at EOS ('stop', counts consistent: ignore_eos not honoured); a logprob stream
      shorter than usage = max_tokens at finish 'length' (tokens after EOS may be unstreamed); a reply
      without any count; every length known by usage only;
    - PASS: every reply exactly max_tokens long by its stream, counting the tokens a merged entry's bytes
      prove it holds (``records.merged_entries``: llama-server streams a token that ends in a partial UTF-8
      character inside the next token's entry); a stream short by no more than the text's multi-byte
      characters could hide, with no entry proving it, is UNPROVEN.

    Metrics: ``ignore_eos_requests`` (usable replies), ``exact``, ``stopped_at_eos``, ``unstreamed_at_limit``,
    ``refused_ignore_eos``, ``usage_only``, ``failed_probes``, ``merged_at_character``, ``maybe_merged``.
    Source: the seed's live output_length rule (``gate_output_length_live``).
    """
    probes = [rec for rec in records if rec.get("kind") == "ignore_eos"]
    if not probes:
        return Gate("output_length", "NOT RUN", "no ignore_eos probe was sent")
    fails = pr.failed(probes)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in (r for r in map(length_row, probes) if r is not None):
        grouped.setdefault(row.outcome, []).append(asdict(row))
    bad, stopped, unstreamed, dropped, uncounted, exact, merged, maybe_merged = (
        grouped.get(k, []) for k in ("bad", "stopped", "unstreamed", "refused", "uncounted", "exact", "merged",
                                     "maybe_merged"))
    by_usage = [r for r in exact if r["method"] == "usage"]
    exact = exact + merged
    n = sum(len(v) for v in grouped.values())
    metrics = {"ignore_eos_requests": n, "exact": len(exact), "stopped_at_eos": len(stopped),
               "unstreamed_at_limit": len(unstreamed), "refused_ignore_eos": len(dropped),
               "usage_only": len(by_usage), "failed_probes": len(fails), "merged_at_character": len(merged),
               "maybe_merged": len(maybe_merged)}
    limitations = []
    if by_usage:
        limitations.append(f"{len(by_usage)} length(s) known only from usage (the reply streamed no token ids or "
                           "logprobs)")
    compare = ("judge the lengths against a trusted engine's outputs instead (gates check RUN_DIR "
               "--reference-outputs)")
    if bad:
        return Gate("output_length", "FAIL", f"{len(bad)}/{n} ignore_eos replies are not max_tokens long "
                    "(finish_reason 'length' below max_tokens, usage above it, or usage disagrees with the stream)",
                    metrics, bad + unstreamed + fails, limitations)
    notes = []
    if fails or dropped:
        said = [pr.fail_note(fails, "ignore_eos request")] if fails else []
        if dropped:
            said.append(f"{len(dropped)} repl(ies) came back with ignore_eos dropped")
        notes.append(f"{'; '.join(said)}: exact-length requests are not accepted, so no live check of fixed-length "
                     f"runs is possible; {compare}")
    if stopped and not stopped_is_property:
        notes.append(f"{len(stopped)}/{n} ignore_eos replies ended at EOS (finish_reason 'stop', usage and stream "
                     f"agree): ignore_eos is not honoured here, and a 'fixed-length' run on this engine has replies "
                     f"of any length; {compare}")
    if unstreamed:
        gaps = sorted(r["usage"] - r["streamed"] for r in unstreamed)
        span = str(gaps[0]) if gaps[0] == gaps[-1] else f"{gaps[0]} to {gaps[-1]}"
        notes.append(f"{len(unstreamed)}/{n} ignore_eos replies were cut at max_tokens with usage equal to it, "
                     f"yet their logprob stream is shorter ({span} {_UNSTREAMED}); without token ids the stream "
                     f"cannot confirm the length; {compare}")
    if maybe_merged:
        notes.append(f"{len(maybe_merged)}/{n} ignore_eos replies were cut at max_tokens with usage equal to it, yet "
                     f"their stream is shorter by no more tokens than their multi-byte characters could hide in "
                     f"merged entries; no entry's top_logprobs proves a merge, so the stream cannot confirm the "
                     f"length; {compare}")
    if uncounted:
        notes.append(f"{len(uncounted)}/{n} ignore_eos replies carry no count (usage, token ids or logprobs) "
                     "or their request no max_tokens")
    if notes:
        return Gate("output_length", "UNPROVEN", "; ".join(notes), metrics,
                    fails + dropped + stopped + unstreamed + maybe_merged + uncounted, limitations)
    if len(by_usage) == n:
        return Gate("output_length", "UNPROVEN", f"{n} ignore_eos replies are exactly max_tokens long by usage only "
                    "(no stream to confirm the count)", metrics, exact, limitations)
    merge_note = (f"; {len(merged)} of them streamed a token inside a later token's entry at a multi-byte "
                  f"character, which that entry's bytes show" if merged else "")
    if stopped:  # stopped_is_property: the engine does not honour ignore_eos, and every count it gave agrees
        prop = shown("ignores-ignore-eos", f"{len(stopped)} of {n} ignore_eos replies ended at EOS (finish_reason "
                     "'stop') before max_tokens, their counts consistent", replies=n, stopped=len(stopped))
        return Gate("output_length", "PASS", f"{n} ignore_eos replies, every length claim consistent with the stream: "
                    f"{len(exact)} exactly max_tokens long, {len(stopped)} ended at EOS (ignores-ignore-eos: an "
                    f"exact-length run on this engine has replies of any length, counted as generated){merge_note}",
                    metrics, exact + stopped, limitations, judged=n,
                    rules_out=rules_out(0, n, "ignore_eos replies whose length claim the stream contradicts",
                                        "share of false length claims"), properties=[prop])
    return Gate("output_length", "PASS", f"{n} ignore_eos replies are exactly max_tokens long "
                f"({n - len(by_usage)} by their stream{merge_note})", metrics, exact, limitations, judged=n,
                rules_out=rules_out(0, n, "ignore_eos replies of another length", "share of wrong lengths"))


def _known_to_drop(gate: Gate, header: Mapping[str, Any]) -> Gate:
    """An engine known to accept ``ignore_eos`` and drop it (its dialect, e.g. llama-cpp-python) whose replies all
    reached max_tokens did not show the property ``ignores-ignore-eos`` in this run, nor that it honours exact
    lengths: that is luck. The PASS on its length claims stands with that said as a fallback (``--strict`` makes it
    UNPROVEN); a PASS that showed the property, and any other verdict, is returned as it is."""
    if ("ignore_eos" not in (header.get("known_ignored_options") or ()) or gate.verdict != "PASS"
            or gate.properties):
        return gate
    engine = (header.get("engine_info") or {}).get("engine") or header.get("engine")
    luck = (f"{engine} is known to accept ignore_eos and drop it silently: these replies reached max_tokens without "
            "showing that exact lengths are honoured (compare lengths against a reference engine: gates check "
            "RUN_DIR --reference-outputs)")
    return gate.replace(limitations=(*gate.limitations, luck), fallbacks=(*gate.fallbacks, luck))


def _known_to_honour(gate: Gate, header: Mapping[str, Any]) -> Gate:
    """An engine known to honour ``ignore_eos`` (its dialect, e.g. llama-server, vLLM) that accepted it and still
    stopped at EOS did not generate the exact length a fixed-length run claims: FAIL, not UNPROVEN."""
    stopped = int(gate.metrics.get("stopped_at_eos") or 0)
    if "ignore_eos" not in (header.get("known_honoured_options") or ()) or gate.verdict != "UNPROVEN" or not stopped:
        return gate
    engine = (header.get("engine_info") or {}).get("engine") or header.get("engine")
    return gate.replace(verdict="FAIL", reason=(
        f"{stopped}/{gate.metrics.get('ignore_eos_requests')} ignore_eos replies stopped at EOS on {engine}, an "
        f"engine known to honour ignore_eos: the exact lengths it is asked for are not what it generates "
        f"({gate.reason})"))


def judge_probes(run: ProbeRun) -> Gate:
    """The live part on one gate run's ``ignore_eos`` probes: on an engine known to honour ``ignore_eos``, replies
    that stopped at EOS FAIL; on any other, they show the property ``ignores-ignore-eos`` (docs/properties.md) and the
    gate judges the length claims; a known-dropped ``ignore_eos`` that happened to reach max_tokens is a fallback."""
    honours = "ignore_eos" in (run.header.get("known_honoured_options") or ())
    gate = gate_output_length_live(run.records, stopped_is_property=not honours)
    return _known_to_honour(_known_to_drop(gate, run.header), run.header)


# ---- the run-dir part


def exact_length_of(body: Mapping[str, Any]) -> int | None:
    """``max_tokens`` (else ``max_completion_tokens``) when the request forces its output to exactly that
    length -- ``ignore_eos`` true, or ``min_tokens`` equal to it -- else None (the seed's rule)."""
    mt = body.get("max_tokens")
    if not _is_int(mt):
        mt = body.get("max_completion_tokens")
    if not _is_int(mt):
        return None
    if body.get("ignore_eos") is True or (_is_int(body.get("min_tokens")) and body["min_tokens"] == mt):
        return int(mt)
    return None


def forcing_options(body: Mapping[str, Any]) -> frozenset[str]:
    """The options by which ``body`` forces its exact length (``ignore_eos``, ``min_tokens``)."""
    out = set()
    if body.get("ignore_eos") is True:
        out.add("ignore_eos")
    if _is_int(body.get("min_tokens")) and exact_length_of(body) == body["min_tokens"]:
        out.add("min_tokens")
    return frozenset(out)


def reply_length(reply: Any) -> tuple[int | None, str | None, str | None]:
    """``(length, method, problem)`` of one recorded reply for the run-dir part: ``len(token_ids)`` (method
    ``token_ids``), else ``usage.completion_tokens`` (``usage``); a length of None comes with the reason (an
    unreadable file, a failed request, neither field). Token ids short of usage by tokens that merged logprob
    entries prove were streamed (``records.merged_entries``) give usage (``token_ids+merged``); a gap only the
    text's multi-byte characters could explain gives None with that reason."""
    if not isinstance(reply, dict):
        return None, None, "unreadable reply file"
    if reply.get("error"):
        return None, None, f"request failed: {str(reply['error'])[:120]}"
    usage = reply.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(reply.get("token_ids"), list):
        streamed = len(reply["token_ids"])
        gap = n - streamed if _is_int(n) else 0
        how = _gap_by_merges(reply, gap) if gap > 0 else None
        if how == "merged":
            return n, "token_ids+merged", None
        if how == "maybe_merged":
            return None, None, f"{streamed} token ids streamed, usage {n}: {gap} {_MAYBE_MERGED}"
        return streamed, "token_ids", None
    if _is_int(n):
        return int(n), "usage", None
    return None, None, "reply has neither token_ids nor usage.completion_tokens"


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _exact_part(reqs: Mapping[str, tuple[int, frozenset[str], str]], cand: Mapping[str, Mapping[str, Any]],
                ignored: set[str], metrics: dict[str, Any], details: list[dict[str, Any]]) -> list[tuple[str, str]]:
    wrong: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    unenforced: list[dict[str, Any]] = []
    n_unenforced = 0
    for key, (want, how, source) in reqs.items():
        o = cand.get(key)
        n = o["length"] if o else None
        row = {"id": key, "source": source, "max_tokens": want}
        if how <= ignored:  # every option forcing this length is one the engine drops: nothing to hold it to
            n_unenforced += 1
            if n is not None and n != want:
                unenforced.append({**row, "length": n, "method": o["method"] if o else None})
        elif n is None:
            missing.append({**row, "problem": o["problem"] if o else "no reply file"})
        elif n != want:
            wrong.append({**row, "length": n, "method": o["method"] if o else None})
    metrics.update(exact_length_outputs=len(reqs), exact_length_wrong=len(wrong), exact_length_missing=len(missing),
                   exact_length_unenforced=n_unenforced)
    sub = []
    judged = len(reqs) - n_unenforced
    if judged:
        v = "FAIL" if wrong else ("UNPROVEN" if missing else "PASS")
        ok = judged - len(wrong) - len(missing)
        why = (f"exact length: {ok}/{judged} outputs exactly max_tokens long, {len(wrong)} wrong, "
               f"{len(missing)} missing or failed")
        sub.append((v, why))
        details += wrong[:_MAX_DETAILS] + missing[:_MAX_DETAILS]
    if n_unenforced:
        names = " and ".join(sorted({o for _, how, _ in reqs.values() if how <= ignored for o in how}))
        why = (f"the engine is known to ignore {names}: {n_unenforced} exact-length request(s) cannot be held to "
               f"max_tokens ({len(unenforced)} came back another length)")
        sub.append(("UNPROVEN", why))
        details += unenforced[:_MAX_DETAILS]
    return sub


def _length_ratio(n: int, m: int) -> float | None:
    """Candidate length over reference length; a reference of 0 tokens matches only 0 (else None: an outlier)."""
    if m:
        return n / m
    return 1.0 if n == 0 else None


def _reference_part(cand: Mapping[str, Mapping[str, Any]], reference: Mapping[str, Mapping[str, Any]], where: str,
                    tol: float, max_outliers: float, metrics: dict[str, Any], details: list[dict[str, Any]]
                    ) -> tuple[str, str]:
    ref = {key: r["length"] for key, r in reference.items() if r["length"] is not None}
    ref_n = len(ref)
    # a prompt the candidate did not answer counts against it (as an outlier of length 0), never as skipped
    missing = [{"id": key, "reference_length": m,
                "problem": f"candidate: {cand[key]['problem']}" if key in cand else "no candidate reply file"}
               for key, m in ref.items() if cand.get(key, {}).get("length") is None]
    pairs = {key: (cand[key]["length"], m) for key, m in ref.items() if cand.get(key, {}).get("length") is not None}
    ratio_of = {key: _length_ratio(n, m) for key, (n, m) in pairs.items()}
    outliers = [{"id": key, "length": pairs[key][0], "reference_length": pairs[key][1],
                 "ratio": None if r is None else round(r, 4)}
                for key, r in ratio_of.items() if r is None or abs(r - 1) > tol]
    scored = [0.0 if r is None else r for r in ratio_of.values()]
    coverage = len(pairs) / ref_n if ref_n else None
    metrics.update(reference_outputs=ref_n, reference_pairs=len(pairs), outside_tolerance=len(outliers),
                   missing_outputs=len(missing), coverage=coverage,
                   length_ratio_median=statistics.median(scored) if scored else None)
    if not ref_n:
        return "NOT RUN", f"the reference outputs under {where} carry no lengths"
    share = (len(outliers) + len(missing)) / ref_n
    mean = sum(scored) / ref_n  # missing outputs add 0 to the sum
    metrics["length_ratio_mean"] = mean
    if share > max_outliers or abs(mean - 1) > tol:
        verdict = "FAIL"
    else:
        verdict = "UNPROVEN" if missing else "PASS"
    details += outliers[:_MAX_DETAILS] + missing[:_MAX_DETAILS]
    return verdict, (f"{len(outliers)}/{ref_n} prompts outside +/-{tol:.0%} of the reference length and "
                     f"{len(missing)} without a candidate output (together {share:.0%}, allowed {max_outliers:.0%}); "
                     f"coverage {coverage:.0%}; mean ratio {mean:.3f}")


def gate_output_length_static(engine: str, inputs: LengthInputs) -> Gate:
    """Output lengths of a recorded run: the engine generated as many tokens as it was asked and says.

    Two parts, each a verdict, combined by ``combine_claims``:

    - **Exact length.** Every request whose body forces an exact length (``ignore_eos`` true, or
      ``min_tokens == max_tokens``; ``exact_length_of``), in the top-level buckets and in every
      ``load-<level>/`` (docs/design.md departure), must come back exactly ``max_tokens`` long (length from
      ``token_ids``, else ``usage.completion_tokens``; ``reply_length``). A wrong length is FAIL; a missing,
      unreadable or failed reply (or one with no length) is UNPROVEN. Requests forced only by options in
      ``inputs.ignored_options`` (e.g. ``("ignore_eos",)`` for llama-cpp-python, ``api.dialects.Dialect.ignores``)
      are not judged: that part is UNPROVEN, "the engine is known to ignore ignore_eos".
    - **Reference** (``inputs.reference``: another engine's lengths by the same keys). For each reply with a
      length there, the candidate's length / the reference's must lie within ``1 +/- tolerance``; a prompt
      with no candidate length is counted as an outlier (and as 0 in the mean). FAIL when the outlier share
      exceeds ``max_outliers`` or the mean ratio is off 1 by more than the tolerance; else UNPROVEN when some
      candidate outputs are missing; else PASS. Defaults 10% / 10% are the seed's. NOT RUN (that part)
      when the reference carries no lengths.

    NOT RUN (not applicable) when ``outputs/<engine>/`` holds no replies, or there are no exact-length
    requests and no reference. Metrics: ``exact_length_outputs``, ``exact_length_wrong``,
    ``exact_length_missing``, ``exact_length_unenforced``; with a reference also ``reference_outputs``,
    ``reference_pairs``, ``outside_tolerance``, ``missing_outputs``, ``coverage``, ``length_ratio_median``,
    ``length_ratio_mean``. Details: wrong, missing, then unenforced rows of each part (at most 50 a kind).
    The seed's rules (``gate_output_length_static``).
    """
    cand = inputs.lengths
    ignored_options = inputs.ignored_options
    if not cand:
        return Gate("output_length", "NOT RUN", f"no replies under outputs/{engine}/", applicable=False)
    metrics: dict[str, Any] = {}
    details: list[dict[str, Any]] = []
    lim: list[str] = []
    sub = _exact_part(inputs.exact, cand, set(ignored_options), metrics, details)
    if metrics["exact_length_unenforced"]:
        lim.append("the engine drops " + ", ".join(sorted(set(ignored_options) & {"ignore_eos", "min_tokens"})) +
                   ": its exact-length requests show nothing about its output lengths")
    if inputs.reference is not None:
        sub.append(_reference_part(cand, inputs.reference, inputs.reference_name, inputs.tolerance,
                                   inputs.max_outliers, metrics, details))
    if not sub:
        return Gate("output_length", "NOT RUN", "no exact-length requests and no reference outputs given", metrics,
                    applicable=False)
    judged = metrics["exact_length_outputs"] - metrics["exact_length_unenforced"] + metrics.get("reference_pairs", 0)
    wrong = metrics["exact_length_wrong"] + metrics.get("outside_tolerance", 0)
    return Gate("output_length", combine_claims(v for v, _ in sub), "; ".join(f"{v}: {w}" for v, w in sub), metrics,
                details, lim, judged=judged,
                rules_out=rules_out(wrong, judged, "outputs off their asked or reference length",
                                    "share of wrong lengths") if judged else "")


def judge_run(rows: RunRows) -> Gate:
    """The run-dir part on one engine's recorded requests and replies (``rows.lengths``)."""
    if rows.lengths is None:
        return Gate("output_length", "NOT RUN", f"no replies under outputs/{rows.engine}/", applicable=False)
    return gate_output_length_static(rows.engine, rows.lengths)
