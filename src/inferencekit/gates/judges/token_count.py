"""The token_count gate: does the count an engine reports match the tokens it actually produced?

An engine is paid (and benchmarked) by the tokens it says it generated. This gate sets up to three
independent counts of each reply side by side and asks that they agree:

- ``usage``: ``usage.completion_tokens`` as the engine reports it;
- ``streamed``: the tokens the stream itself carried — token ids where the engine sent them, else
  logprob entries (one per generated token);
- ``retokenized``: the generated text (reasoning, then the answer) run through the model's tokenizer
  by the caller (``--tokenizer``); None without one.

The rules, allowances and verdicts follow the token_count gate of the seed
(its ``ops/gates.py``); the code here is new. Everything is pure: the caller
reads the reply files (run dir ``outputs/…``, ``load-*/`` and ``probes/``, or live probe replies),
counts the text and passes the numbers in.

Row shape (``count_row``)::

    {"key": str, "usage": int | None, "streamed": int | None, "streamed_method": "token_ids" |
     "logprobs" | None, "retokenized": int | None, "finish_reason": str | None, "max_tokens": int | None}

Keys name the reply; live probes prefix them with their kind (``"count:…"``, ``"ignore_eos:…"``,
``"rare:…"``, ``"echo_orig:…"``, ``"echo_perturbed:…"``), and the prefixes in ``RETOK_EXEMPT``
change how the re-tokenized count is judged (see ``judge_counts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

import inferencekit.gates.records as pr
from inferencekit.gates.inputs import ProbeRun, RunRows
from inferencekit.gates.result import Gate
from inferencekit.shapes import CountRow, ProbeRecord, ReplyFile, generated_text, is_ok
from inferencekit.stats import rules_out

__all__ = ["COPY_PROBES", "COUNTED_KINDS", "READ_KINDS", "CUT_SLACK", "RETOK_EXEMPT", "RETOK_TOL", "TEXT_ONLY_MIN_OVER",
           "count_row",
           "gate_token_count", "usage_conflict", "judge_counts", "judge_probes", "judge_run", "lossy_text",
           "merged_explained", "named_requests", "split_slack", "SPLIT_SLACK", "SPLIT_MIN",
           "probe_count_part", "text_covers", "unstreamed_at_cut", "CountProblem", "JudgedCounts"]

# Probe kinds whose text is not a fair re-tokenization target. After EOS (ignore_eos) an engine may
# generate special tokens and strip them from the text; a string the model copies (rare tokens, echo
# probes) can be produced as a non-canonical split that re-tokenizes to a different length.
RETOK_EXEMPT = ("ignore_eos:", "rare:", "echo_orig:", "echo_perturbed:")
# The copy probes among them ask for no logprobs: with usage and the text as their only counts, the gap
# is set aside and the row does not count as checked (the count probes are what check usage).
COPY_PROBES = ("rare:", "echo_orig:", "echo_perturbed:")

_AFTER_EOS = "tokens counted but not streamed (special tokens after EOS?)"
_AT_CUT = "tokens counted but not streamed (a partial character held back at the cut?)"
# llama-server streams the byte-fallback tokens of one multi-byte character (e.g. "À" as two byte tokens)
# as one event with one logprob entry: the stream is short of usage while the text re-tokenizes to usage
# (observed 30 Nov 2026: usage 16, 15 streamed ids, re-tokenized 16, on French text).
_MERGED = "tokens counted but streamed as one entry (byte tokens of a multi-byte character?)"
# At a max_tokens cut an engine may hold back the byte tokens of a partial UTF-8 character (at most 3 of a
# 4-byte character) from the stream while counting them; a larger gap means tokens counted that were never
# delivered, which no cut explains (a short reply with usage at max_tokens and half its entries streamed).
CUT_SLACK = 3
_DETAILS_CAP = 50
_SIDE_CAP = 20
_MERGE_SLACK_UNKNOWN = 2  # a row recorded before merge_slack existed: the allowance it had then (2 tokens)
RETOK_TOL = 0.02  # re-tokenized count tolerance (relative, at least 2 tokens): the seed's value
# A greedy model can generate a split of its text other than the tokenizer's own (a repeated "\n\n" as two "\n";
# observed 6 Dec 2026 on llama-server: "Gemeinschaften:\n\nGemeinschaften:\n\nGemeins", usage 24, re-tokenized
# 21; a load reply with 10 multi-byte characters, usage 128 = 128 streamed token ids, re-tokenized 124; on 8 Dec a
# code reply with none, "\n", "\n" twice and ":", "`": 128 streamed ids, re-tokenized 125), so a
# reply whose usage (and a stream agreeing with it) is above its text can be honest. Such gaps are set aside (a
# limitation) while they are a minority of the replies judged against their text; a count inflated on most of them
# (at least this many) is a miscount (inferencekit's rule; the seed FAILed any single gap).
TEXT_ONLY_MIN_OVER = 3
# How far a stream of exactly usage's length may sit above its text's own split and still be set aside as a generated
# split: the byte tokens of its multi-byte characters (merge_slack), plus SPLIT_SLACK of the stream, at least
# SPLIT_MIN tokens (the code reply above: 3 of 128). A larger gap on one reply is a miscount (inferencekit's rule).
SPLIT_SLACK, SPLIT_MIN = 0.05, 3
# Probe kinds whose counts the gate checks: the count probes, and the exact-length and copy probes with their
# allowances (RETOK_EXEMPT). Sampled (T=1) text is left out: a sampled token sequence need not be the tokenizer's
# own split of its text.
COUNTED_KINDS = ("count", "ignore_eos", "rare", "echo_orig", "echo_perturbed")
# ...and every other greedy probe of a gate run, as the seed reads them (before 18 they were left out): the
# warm-ups, the caching pairs, the greedy half of the sampling groups and the logprob probes. Other gates own
# these kinds (``GATES``); token_count reads their counts too.
READ_KINDS = (*COUNTED_KINDS, "warmup", "cache_first", "cache_repeat", "cache_control_a", "cache_control_b", "greedy",
              "logprobs")


class CountProblem(CountRow):
    """A count row ``judge_counts`` set aside or found wrong, with what it showed (``problem``)."""

    problem: str


class JudgedCounts(TypedDict):
    """What ``judge_counts`` returns: the rows by what their counts show, and how many were checked."""

    bad: list[CountProblem]
    unsettled: list[CountProblem]
    by_text: list[CountProblem]
    retok_only: list[CountProblem]
    lossy: list[CountProblem]
    checked: int


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _streamed(reply: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """Tokens the stream carried: token ids if any came, else logprob entries, else None.

    Reads the ``token_ids`` / ``logprobs`` arrays of a reply file; a summary without them (a probe line)
    falls back on its recorded ``n_streamed`` / ``streamed_method``. An empty stream counts as none.
    """
    ids, lps = reply.get("token_ids"), reply.get("logprobs")
    if isinstance(ids, list) and ids:
        return len(ids), "token_ids"
    if isinstance(lps, list) and lps:
        return len(lps), "logprobs"
    if ids is None and lps is None:
        n, how = _int(reply.get("n_streamed")), reply.get("streamed_method")
        if n and how in ("token_ids", "logprobs"):
            return n, how
    return None, None


def lossy_text(reply: Mapping[str, Any]) -> bool:
    """The streamed text lost bytes: a logprob entry whose token piece is empty (a partial UTF-8 character
    the server dropped instead of holding back — llama-cpp-python 0.3.36 does this with CJK output), or a
    U+FFFD replacement character in the text. Such a text re-tokenizes to fewer tokens than were made."""
    lps = reply.get("logprobs")
    if isinstance(lps, list) and any(isinstance(e, dict) and e.get("token") == "" for e in lps):
        return True
    return "\ufffd" in generated_text(reply)


def usage_conflict(usage: Any) -> str | None:
    """Usage fields that contradict each other, or None: ``completion_tokens_details.reasoning_tokens`` above
    ``completion_tokens``, ``prompt_tokens_details.cached_tokens`` above ``prompt_tokens``, or a negative count.
    A usage object that disagrees with itself is a miscount whatever the stream shows."""
    if not isinstance(usage, dict):
        return None
    found = []
    for total_key, details_key, part_key in (("completion_tokens", "completion_tokens_details", "reasoning_tokens"),
                                             ("prompt_tokens", "prompt_tokens_details", "cached_tokens")):
        total = _int(usage.get(total_key))
        details = usage.get(details_key)
        part = _int(details.get(part_key)) if isinstance(details, dict) else None
        if total is not None and total < 0:
            found.append(f"usage.{total_key} {total} < 0")
        if total is not None and part is not None and part > total:
            found.append(f"usage.{details_key}.{part_key} {part} > {total_key} {total}")
    return "; ".join(found) or None


def count_row(key: str, reply: ReplyFile, *, max_tokens: int | None,
              retokenized: int | None) -> CountRow | None:
    """One count row from a reply file (docs/design.md, "Reply file"), or None for a failed reply.

    Args:
        key: names the reply in the gate's details (file path or ``"<kind>:<probe key>"``).
        reply: the reply-file dict; a reply that is not HTTP 200 or carries ``error`` gives None
            (the caller reports it among the failed probes).
        max_tokens: the request's ``max_tokens`` (None when it set none): a reply cut there may hold
            back tokens from its stream.
        retokenized: the tokenizer's count of ``generated_text(reply)``, None without a tokenizer.

    Returns:
        ``{"key", "usage", "streamed", "streamed_method", "retokenized", "finish_reason", "max_tokens",
        "lossy_text", "multibyte"}``: ``usage`` is ``usage.completion_tokens`` (None when absent),
        ``streamed`` the number of token ids the stream carried, else of logprob entries, else None;
        ``lossy_text`` see ``lossy_text``; ``multibyte``: the text holds a non-ASCII character;
        ``merge_slack`` (``records.merge_slack``), ``multibyte_chars`` (how many non-ASCII characters the text
        holds) and ``usage_conflict`` (``usage_conflict``).
    """
    if not is_ok(reply):
        return None
    n, how = _streamed(reply)
    usage = reply.get("usage")
    text = generated_text(reply)
    return {"key": key, "usage": _int(usage.get("completion_tokens")) if isinstance(usage, dict) else None,
            "streamed": n, "streamed_method": how, "retokenized": _int(retokenized),
            "finish_reason": reply.get("finish_reason"), "max_tokens": _int(max_tokens),
            "lossy_text": lossy_text(reply), "multibyte": any(ord(c) > 127 for c in text),
            "merge_slack": pr.merge_slack(text), "multibyte_chars": sum(1 for c in text if ord(c) > 127),
            "usage_conflict": usage_conflict(usage)}


def unstreamed_at_cut(row: CountRow) -> bool:
    """A logprob stream shorter than usage on a reply stopped by ``max_tokens`` with usage exactly there.

    Tokens generated and counted but never streamed (an end-of-turn or padding token, a partial UTF-8
    character held back at the cut) look, in a logprob stream, just like an engine that stopped early
    and over-reports; the stream alone cannot tell them apart. Token-id streams get no such allowance.
    """
    u, s = row.get("usage"), row.get("streamed")
    return (u is not None and s is not None and s < u and row.get("streamed_method") == "logprobs"
            and row.get("finish_reason") == "length" and row.get("max_tokens") is not None
            and u == row["max_tokens"])


def _tolerance(ref: int, retok_tol: float) -> float:
    return max(2, retok_tol * ref)


def text_covers(retokenized: int | None, usage: int | None, retok_tol: float) -> bool:
    """The re-tokenized text holds at least the usage count and not much more: ``u <= t <= u + max(2, tol*u)``.

    Over-reporting is the one cheat a short stream could hide, and a text this long refutes it.
    """
    if retokenized is None or usage is None:
        return False
    return usage <= retokenized <= usage + _tolerance(usage, retok_tol)


def merged_explained(row: CountRow, retok_tol: float = RETOK_TOL) -> bool:
    """A stream short of usage that the text's merged multi-byte characters explain (``_MERGED``).

    With ``u`` usage, ``s`` streamed and ``t`` re-tokenized tokens, all three known and ``s < u``:

    1. ``u − s ≤ merge_slack``: no more tokens hidden than merging each non-ASCII character's byte tokens
       into one entry can hide (Σ UTF-8 bytes − 1 over them);
    2. ``u − t ≤ min(t − s, multibyte_chars, max(2, retok_tol·u))``: usage is above the text by no more than
       the characters the text shows split. ``t − s`` is how many tokens the text's own split holds beyond the
       stream's entries: each character the stream merged and the tokenizer splits adds at least one, so at
       most ``t − s`` characters (and no more than the text holds) show a split; one token per such character
       is allowed for a generated split that differs from the tokenizer's (8 katakana, llama-server, observed:
       usage 16, 8 entries, re-tokenized 15), never beyond the seed's re-tokenizing tolerance. A text that
       re-tokenizes to no more tokens than were streamed (``t ≤ s``) shows no merge, so nothing explains the
       gap (two whole CJK characters with usage 2 above the stream and the text: a mismatch);
    3. ``t − u ≤ max(2, retok_tol·u)``: the text is not far longer than usage either.

    Source: llama-server streams the byte tokens of one character as one entry (docs/engines.md; observed
    30 Nov 2026: usage 16, 15 ids, re-tokenized 16); the bound is docs/design.md's "token_count's allowances".
    A row recorded without ``multibyte_chars`` takes ``merge_slack`` (never fewer than its characters)."""
    u, s, t = row.get("usage"), row.get("streamed"), row.get("retokenized")
    if u is None or s is None or t is None or s >= u:
        return False
    slack = row.get("merge_slack", _MERGE_SLACK_UNKNOWN if row.get("multibyte") else 0)
    tol = _tolerance(u, retok_tol)
    shown_split = min(t - s, row.get("multibyte_chars", slack))
    return u - s <= slack and u - t <= min(shown_split, tol) and t - u <= tol


def _usage_vs_stream(row: CountRow, retok_tol: float) -> str | None:
    """How usage compares with the stream: None (agree, or one of them missing), ``"bad"``, or — for a
    logprob stream short at the max_tokens cut — ``"by_text"`` (the text covers usage) / ``"unsettled"``.
    One token of slack at a natural stop: an EOS counted but not streamed (a rule, not an allowance: it is
    no fallback). A stream short of usage on a text with multi-byte characters is ``"by_text"`` when the text
    explains the gap (``merged_explained``), ``"unsettled"`` when the characters could hide it and no re-tokenized
    count can tell (missing evidence is never a FAIL, nor a PASS); a gap beyond what the characters explain is
    ``"bad"``. At the cut
    a gap over ``CUT_SLACK`` is ``"bad"``: no held-back character explains it (except past EOS on
    ``ignore_eos`` probes)."""
    u, s = row.get("usage"), row.get("streamed")
    if u is None or s is None or abs(u - s) <= (1 if row.get("finish_reason") == "stop" else 0):
        return None
    if merged_explained(row, retok_tol):
        # byte tokens of one character streamed as one entry (llama-server, observed)
        return "by_text"
    slack = row.get("merge_slack", _MERGE_SLACK_UNKNOWN if row.get("multibyte") else 0)
    if s < u and row.get("retokenized") is None and u - s <= slack:
        # the text's multi-byte characters could hide the gap, and no re-tokenized count can say (a warm-up reply
        # bench serve did not re-tokenize, a run dir judged offline without --tokenizer): missing evidence
        return "unsettled"
    if not unstreamed_at_cut(row):
        return "bad"
    if u - s > CUT_SLACK and not str(row.get("key", "")).startswith("ignore_eos:"):
        return "bad"  # after EOS (ignore_eos) an engine may generate any number of special tokens it does not stream
    return "by_text" if text_covers(row.get("retokenized"), u, retok_tol) else "unsettled"


def split_slack(row: CountRow) -> int:
    """Tokens a stream of usage's length may sit above its re-tokenized text as a generated split other than the
    tokenizer's: ``merge_slack`` + ``max(SPLIT_MIN, ⌊SPLIT_SLACK · streamed⌋)`` (constants above)."""
    s = int(row.get("streamed") or 0)
    return int(row.get("merge_slack") or 0) + max(SPLIT_MIN, int(SPLIT_SLACK * s))


def judge_counts(rows: Iterable[CountRow], retok_tol: float = 0.02) -> JudgedCounts:
    """Sort count rows by what their counts show.

    Rules, per row (a row with fewer than two counts is skipped):

    - usage and streamed must be equal; at ``finish_reason == "stop"`` they may differ by 1 (an EOS
      token counted but not streamed);
    - a logprob stream short of usage on a reply cut at ``max_tokens`` (``unstreamed_at_cut``) is
      *unsettled*, unless the re-tokenized text covers usage (``text_covers``): then it is settled
      *by text* (a limitation) and its re-tokenized count is not judged again;
    - the re-tokenized count must be within ``max(2, retok_tol * ref)`` of ``ref``, the streamed count
      (usage when nothing was streamed); beyond that it is a mismatch — except on ``RETOK_EXEMPT``
      keys that have usage and either a stream (already judged against usage) or a copy-probe prefix:
      the gap goes to ``retok_only`` (a limitation), and a copy probe with usage alone then counts
      as not checked;
    - a row whose usage — with no stream, or a stream of exactly as many tokens and a gap within ``split_slack``
      (its multi-byte characters' byte tokens, plus 5% of the stream, at least 3) — is above the re-tokenized count
      beyond the tolerance (a generated split other than the tokenizer's can do this honestly: byte tokens of
      multi-byte characters, or "\n\n" generated as two "\n", which a code reply without any multi-byte character
      did three times: usage = 128 streamed ids, re-tokenized 125, llama-server, verify standard, 8 Dec 2026) goes to
      ``retok_only`` (checked only as far as usage and the stream agreed), unless such rows are at least
      ``TEXT_ONLY_MIN_OVER`` and a majority of the rows so judged against their text: then each is a mismatch
      (a count inflated where the stream does not show it, or shows it padded alike);
    - a row whose streamed text lost bytes (``lossy_text``) cannot be counted by its text: a
      re-tokenized gap there goes to ``lossy`` (a limitation) and the row counts as checked only when
      usage and the stream were compared.

    Returns:
        ``{"bad": [...], "unsettled": [...], "by_text": [...], "retok_only": [...], "lossy": [...],
        "checked": int}``;
        the lists hold the rows with a ``"problem"`` string added; ``bad`` rows make the gate FAIL,
        ``unsettled`` ones UNPROVEN; ``checked`` counts the rows with at least two counts judged.
    """
    bad: list[CountProblem] = []
    unsettled: list[CountProblem] = []
    by_text: list[CountProblem] = []
    retok_only: list[CountProblem] = []
    lossy: list[CountProblem] = []
    over_text: list[CountProblem] = []  # usage above the text on a reply with no stream count
    text_only = 0  # replies judged by usage against the text alone
    checked = 0
    for row in rows:
        u, s, t = row.get("usage"), row.get("streamed"), row.get("retokenized")
        conflict = row.get("usage_conflict")
        if sum(x is not None for x in (u, s, t)) < 2:
            if conflict:
                bad.append({**row, "problem": conflict})
                checked += 1
            continue
        key = str(row.get("key", ""))
        problems: list[str] = [conflict] if conflict else []
        verdict = _usage_vs_stream(row, retok_tol)
        settled = verdict == "by_text"
        if verdict == "bad":
            problems.append(f"usage {u} != streamed {s}")
        elif verdict is not None:
            assert u is not None and s is not None  # _usage_vs_stream compares only rows with both
            gap = u - s
            what = (_MERGED if settled and row.get("multibyte") and not unstreamed_at_cut(row)
                    else _AFTER_EOS if key.startswith("ignore_eos:") else _AT_CUT)
            if settled:
                by_text.append({**row, "problem": f"{gap} {what}; the re-tokenized text ({t}) covers usage"})
            else:
                unsettled.append({**row, "problem": f"{gap} {what}"})
        counts_row = True
        if t is not None and not settled:
            ref, ref_name = (s, "streamed") if s is not None else (u, "usage")
            if ref is not None and abs(t - ref) > _tolerance(ref, retok_tol):
                retok_gap = f"re-tokenized {t} vs {ref_name} {ref}"
                if row.get("lossy_text"):
                    lossy.append({**row, "problem": f"{retok_gap}: the streamed text lost bytes"})
                    counts_row = u is not None and s is not None
                elif u is not None and key.startswith(RETOK_EXEMPT) and (s is not None or key.startswith(COPY_PROBES)):
                    retok_only.append({**row, "problem": retok_gap})
                    counts_row = s is not None  # usage against the text alone, set aside: nothing checked
                elif (s is None or (s == u and s - t <= split_slack(row))) and u is not None and not problems \
                        and t < ref and not key.startswith(RETOK_EXEMPT):
                    what = "usage" if s is None else "usage and the stream"
                    over_text.append({**row, "problem": f"{retok_gap}: {what} above the text's own split"})
                    counts_row = s is not None  # usage and the stream agreed: that much was checked
                else:
                    problems.append(retok_gap)
            if (s is None or s == u) and u is not None and not row.get("lossy_text") \
                    and not key.startswith(RETOK_EXEMPT):
                text_only += 1
        checked += counts_row
        if problems:
            bad.append({**row, "problem": "; ".join(problems)})
    if len(over_text) >= TEXT_ONLY_MIN_OVER and 2 * len(over_text) > text_only:
        bad += [{**r, "problem": f"{r['problem']}, on {len(over_text)} of {text_only} replies judged against their "
                 "text"} for r in over_text]
        checked += sum(1 for r in over_text if r.get("streamed") is None)
    else:
        retok_only += over_text
    return {"bad": bad, "unsettled": unsettled, "by_text": by_text, "retok_only": retok_only, "lossy": lossy,
            "checked": checked}


def _bad_note(bad: Sequence[Mapping[str, Any]]) -> str:
    """Which way the counts disagree (usage above / below the stream, re-tokenized text off) and the first case."""
    over = sum(1 for r in bad if _int(r.get("usage")) is not None and _int(r.get("streamed")) is not None
               and r["usage"] > r["streamed"])
    under = sum(1 for r in bad if _int(r.get("usage")) is not None and _int(r.get("streamed")) is not None
                and r["usage"] < r["streamed"])
    parts = [f"usage.completion_tokens above the streamed tokens on {over}" if over else "",
             f"below them on {under}" if under else "",
             f"re-tokenized text off on {len(bad) - over - under}" if len(bad) - over - under else ""]
    return ", ".join(p for p in parts if p) + f" (first: {bad[0].get('key')}: {bad[0].get('problem')})"


def _gaps_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """'a to b tokens counted but not streamed (…)', once for ignore_eos rows and once for the others."""
    parts = []
    for after_eos, what in ((True, _AFTER_EOS), (False, _AT_CUT)):
        gaps = sorted(r["usage"] - r["streamed"] for r in rows
                      if str(r.get("key", "")).startswith("ignore_eos:") == after_eos)
        if gaps:
            span = str(gaps[0]) if gaps[0] == gaps[-1] else f"{gaps[0]} to {gaps[-1]}"
            parts.append(f"{span} {what}")
    return "; ".join(parts)


def named_requests(rows: Sequence[Mapping[str, Any]], cap: int = 8) -> str:
    """The requests a fallback applies to, by key: ``"requests: a, b, c"``, with ``"… and N more"`` past ``cap``."""
    keys = [str(r.get("key")) for r in rows]
    more = f" and {len(keys) - cap} more" if len(keys) > cap else ""
    return "requests: " + ", ".join(keys[:cap]) + more


def _failed_note(failed: Sequence[Mapping[str, Any]]) -> str:
    """'N count probe(s) failed (HTTP 500 x2, no response x1; first error: …)'."""
    by: dict[str, int] = {}
    for f in failed:
        label = f"HTTP {f['status']}" if f.get("status") else "no response"
        by[label] = by.get(label, 0) + 1
    first = next((str(f["error"]) for f in failed if f.get("error")), "")
    tally = ", ".join(f"{k} x{v}" for k, v in sorted(by.items()))
    return f"{len(failed)} count probe(s) failed ({tally}" + (f"; first error: {first[:160]}" if first else "") + ")"


def gate_token_count(rows: Sequence[CountRow], *, retok_tol: float = 0.02, tokenizer: str | None,
                     failed: Sequence[Mapping[str, Any]] | None = None) -> Gate:
    """The token_count gate over count rows (``count_row``), judged by ``judge_counts``.

    Args:
        rows: one per successful reply (live probes, run-dir outputs, ``load-*/`` and ``probes/``).
        retok_tol: relative tolerance of re-tokenized counts (at least 2 tokens).
        tokenizer: the tokenizer that made the ``retokenized`` counts; None when none was given.
        failed: probes that got no usable reply, ``{"key", "status", "error", ...}``: a refused probe
            is evidence, so any makes the verdict at best UNPROVEN.

    Verdicts: FAIL on any mismatch; else UNPROVEN when a probe failed or a logprob stream short at the
    cut was not settled by the text; else UNPROVEN when rows exist but none carried two counts; NOT RUN
    without rows; else PASS. Details list the offending rows first (at most 50).
    """
    failed = list(failed or [])
    judged = judge_counts(rows, retok_tol)
    bad, unsettled, checked = judged["bad"], judged["unsettled"], judged["checked"]
    by_text, retok_only, lossy = judged["by_text"], judged["retok_only"], judged["lossy"]
    limitations: list[str] = []
    fallbacks: list[str] = []  # allowances used: each changes what was measured
    if tokenizer is None:
        limitations.append("no tokenizer given: re-tokenized counts not checked (pass --tokenizer)")
    if retok_only:
        fallbacks.append(
            f"{len(retok_only)} repl(ies) re-tokenize to a count other than their stream or usage (special tokens "
            "stripped from an ignore_eos text, a copied string or a greedy reply generated as a non-canonical split, "
            "one other than the tokenizer's own); that gap is not counted as a mismatch (their stream, where there is "
            "one, was judged against usage; a usage above the text on most replies without a stream would be; the "
            f"count probes check usage; {named_requests(retok_only)})")
    if by_text:
        merged = [r for r in by_text if _MERGED in str(r.get("problem"))]
        why = (f"; {len(merged)} of them hold multi-byte characters whose byte tokens a server can stream as one "
               "entry (llama-server, observed), and their gap is no larger than those characters explain: usage "
               "exceeds the re-tokenized text by at most one token per character the text shows split "
               f"({named_requests(merged)})" if merged else "")
        fallbacks.append(
            f"{len(by_text)} repl(ies) streamed fewer tokens than usage counts ({_gaps_note(by_text)}), but their "
            f"re-tokenized text covers usage: the count is proven by the text, not by the stream{why} "
            f"({named_requests(by_text)})")
    if lossy:
        fallbacks.append(
            f"{len(lossy)} repl(ies) streamed token pieces that decode to nothing (partial UTF-8 characters the "
            "server dropped from the text): their text re-tokenizes short of the tokens made, so only usage against "
            "the stream was judged for them, where both exist (the lost characters are a fault of the text, not of "
            f"the count; {named_requests(lossy)})")
    metrics = {"replies_checked": checked, "mismatches": len(bad), "unstreamed_at_limit": len(unsettled),
               "lossy_text_replies": len(lossy),
               "unstreamed_settled_by_text": len(by_text), "retokenize_only_gaps": len(retok_only),
               "streamed_methods": sorted({m for r in rows if (m := r.get("streamed_method"))}),
               "failed_probes": len(failed)}
    if bad:
        return Gate("token_count", "FAIL",
                    f"{len(bad)}/{checked} replies report a token count the stream does not support: {_bad_note(bad)}",
                    metrics, bad[:_DETAILS_CAP] + unsettled[:_SIDE_CAP] + failed, limitations, fallbacks=fallbacks)
    notes: list[str] = []
    if failed:
        notes.append(_failed_note(failed) + ": a refused probe cannot be judged")
    if unsettled:
        settle = ("pass --tokenizer so the re-tokenized text can settle it" if tokenizer is None
                  else "and the re-tokenized text does not cover usage")
        notes.append(f"{len(unsettled)}/{checked} replies cut at max_tokens streamed fewer logprob entries than usage "
                     f"counts ({_gaps_note(unsettled)}): the stream cannot prove the count (the engine returned no "
                     f"token ids; {settle})")
    if notes:
        return Gate("token_count", "UNPROVEN", "; ".join(notes) + f"; {checked - len(unsettled)} other replies agree",
                    metrics, unsettled[:_DETAILS_CAP] + failed, limitations, fallbacks=fallbacks)
    if checked == 0:
        return Gate("token_count", "UNPROVEN" if rows else "NOT RUN",
                    "no reply carried two independent token counts (usage, token ids or logprobs, re-tokenized text)",
                    metrics, retok_only[:_SIDE_CAP] + lossy[:_SIDE_CAP], limitations, fallbacks=fallbacks)
    return Gate("token_count", "PASS", f"{checked} replies: usage, streamed and re-tokenized counts agree"
                + (f" ({len(fallbacks)} allowance(s) used: see the limitations)" if fallbacks else ""),
                metrics, by_text[:_SIDE_CAP] + retok_only[:_SIDE_CAP] + lossy[:_SIDE_CAP], limitations,
                judged=checked, rules_out=rules_out(0, checked, "replies with counts that disagree", "miscount rate"),
                fallbacks=fallbacks)


def _max_tokens(rec: ProbeRecord) -> int | None:
    mt = (rec.get("body") or {}).get("max_tokens")
    return mt if isinstance(mt, int) and not isinstance(mt, bool) else None


def probe_count_part(records: Sequence[ProbeRecord], retokenized: Mapping[str, int], tokenizer: str | None,
                     retokenize_errors: Mapping[str, Any] | None = None) -> Gate:
    """token_count on the probes of ``READ_KINDS`` (keys ``"<kind>:<id>"``); failed probes are evidence.
    ``retokenize_errors`` (``{"n", "of", "first"}``, as ``retokenize_probes`` records it): the texts the
    tokenizer failed on, a fallback of the verdict (those replies were judged on two counts, not three)."""
    rows: list[CountRow] = []
    failed: list[dict[str, Any]] = []
    for rec in records:
        if rec.get("kind") not in READ_KINDS:
            continue
        reply = rec.get("reply") or {}
        key = f"{rec['kind']}:{rec['id']}"
        row = count_row(key, reply, max_tokens=_max_tokens(rec), retokenized=retokenized.get(rec["id"]))
        if row is not None:
            rows.append(row)
        elif not is_ok(reply):
            failed.append({"key": key, "status": reply.get("status"),
                           "error": (reply.get("error") or "not sent")[:300]})
    gate = gate_token_count(rows, retok_tol=RETOK_TOL, tokenizer=tokenizer, failed=failed)
    errs = retokenize_errors or {}
    if errs.get("n"):
        gate = gate.replace(fallbacks=(*gate.fallbacks, (
            f"the tokenizer ({tokenizer}) failed on {errs['n']} of {errs.get('of')} probe texts (first: "
            f"{errs.get('first')}): their re-tokenized counts are missing, so those replies were judged on usage "
            "against the stream alone")))
    return gate


def judge_probes(run: ProbeRun) -> Gate:
    """The live part: the count, exact-length and copy probes of one gate run, with the re-tokenized counts,
    tokenizer and tokenizer failures its log recorded."""
    return probe_count_part(run.records, run.header.get("retokenized") or {}, run.header.get("tokenizer"),
                            run.header.get("retokenize_errors"))


def judge_run(rows: RunRows) -> Gate:
    """The run-dir part: the counts of every reply of the load, its warm-up and the requests it mixed in
    (``rows.count_rows``); load texts the tokenizer refused (``rows.retokenize_refused``) are a fallback naming
    them (those replies were judged on usage against the stream alone)."""
    gate = gate_token_count(rows.count_rows, retok_tol=RETOK_TOL, tokenizer=rows.tokenizer)
    refused = rows.retokenize_refused
    if refused and gate.verdict != "NOT RUN":
        keys = sorted(refused)
        named = named_requests([{"key": k} for k in keys])
        gate = gate.replace(fallbacks=(*gate.fallbacks, (
            f"the tokenizer ({rows.tokenizer}) refused {len(keys)} load reply text(s) ({named}; first error: "
            f"{refused[keys[0]]}): their re-tokenized counts are missing, so those replies were judged on usage "
            "against the stream alone")))
    return gate
