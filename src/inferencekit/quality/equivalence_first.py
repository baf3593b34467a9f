"""The first-token surface of the equivalence audit: many prompts, one greedy output token each, top-k logprobs.

The logprob-tracking idea (Chauvin et al., ICLR 2026): the first output token's top-k logprobs move with any change
of weights, precision or kernels, and a one-token request costs a prefill and nothing more, so many prompts fit a
small budget, and a mix that routes some requests elsewhere meets the test once per request. Per prompt the
engine's list is compared with the reference's next-token list at the same prompt ids
(``equivalence_stats.first_token_distance``); the run statistic is the mean over prompts, judged against the
calibration's ``first_token`` cells in requests. Beside it, informational: top-1 agreement, and a paired
permutation p-value (scipy's ``permutation_test``, signs flipped per prompt) on the engine's logprob of the
reference's top token minus the reference's own, which a systematic shift (a sharper or flatter model) moves.

Collect (``collect_first_token``) does the I/O; ``first_token_pairs`` turns trajectory docs into per-prompt
pairs; ``first_token_report`` is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import permutation_test

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.quality.equivalence_judge import cell_notes, judge_equivalence
from inferencekit.quality.equivalence_stats import first_token_distance, first_token_statistic
from inferencekit.quality.metrics import top_k_cut
from inferencekit.quality.reference import Reference
from inferencekit.quality.score_rows import engine_lists
from inferencekit.quality.score_run import TrajectoryScorer
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, write_index
from inferencekit.quality.trajectory_store import load_set

__all__ = ["FIRST_TOKEN_REQUESTS", "FIRST_TOKEN_STAT", "first_token_pairs", "collect_first_token",
           "shift_test", "first_token_summary", "first_token_report"]

FIRST_TOKEN_STAT = "first_token"  # the statistic's name in calibration cells
FIRST_TOKEN_REQUESTS = 50  # the default budget: the calibrated cell with the most runs (60 fit, 60 held out, 60 per
# substitute on 2026-12-03; the 100-request cell has half as many, so its power bound stops at 90%)


async def first_token_pairs(ref: Reference, docs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per trajectory doc (one generated token), the engine's first-token list beside the reference's.

    Returns:
        one dict per doc, ``{"id", "ref": {id: lp}, "eng": {id: lp}, "token": int}``, or with ``"error"`` (no list
        keyed by token ids, nothing generated, the reference failed), and ``"template_mismatch"`` (a sentence)
        where the engine's prompt ids differ from the reference's rendering (such a prompt measures the
        tokenization, not the weights: the statistic leaves it out, as the calibration does).
    """
    scorer = TrajectoryScorer(ref, {ref.k}, "reference")  # for its cached chat rendering
    out: list[dict[str, Any]] = []
    for doc in docs.values():
        item: dict[str, Any] = {"id": str(doc.get("id"))}
        try:
            prompt = await scorer.ref_prompt(dict(doc))
            engine_prompt = doc.get("prompt_token_ids")
            counted = (doc.get("usage") or {}).get("prompt_tokens") if isinstance(doc.get("usage"), dict) else None
            if engine_prompt and list(engine_prompt) != prompt:
                item["template_mismatch"] = (f"the engine's {len(engine_prompt)} prompt ids differ from the "
                                             f"reference's {len(prompt)}")
            elif not engine_prompt and isinstance(counted, int) and counted != len(prompt):
                item["template_mismatch"] = (f"the engine counted {counted} prompt tokens, the reference's "
                                             f"rendering has {len(prompt)}")
            lists = engine_lists(dict(doc))
            ids = doc.get("token_ids") or []
            if lists is None:
                item["error"] = "the engine's top-k list names no token ids (the first-token test pairs lists by id)"
            elif not lists or not lists[0] or not ids:
                item["error"] = "the engine returned no first-token list"
            else:
                token = int(ids[0])
                row = (await ref.score([*prompt, token], len(prompt)))[0]
                item.update(ref=top_k_cut(row, ref.k, None), eng=dict(lists[0]), token=token)
        except (OpError, ValueError, TypeError, KeyError, IndexError) as e:  # a malformed doc is this prompt's fault
            item["error"] = f"{type(e).__name__}: {e}"[:300]
        out.append(item)
    return out


async def collect_first_token(client: Client, info: EngineInfo, ref: Reference, prompts: Sequence[Prompt],
                              out_dir: Path, *, top_logprobs: int, label: str, concurrency: int = 1,
                              prompts_sha256: str = "") -> dict[str, Any]:
    """One greedy token per prompt with top-k logprobs (``quality trajectory``'s collector, ``max_tokens`` 1), into
    ``out_dir``, paired with the reference's next-token lists.

    Returns:
        ``{"rows": trajectory rows, "state": collection state, "pairs": first_token_pairs, "problems": integrity
        problems, "requests": prompts sent}``.
    """
    ts = TrajectorySettings(label=label, max_tokens=1, top_logprobs=top_logprobs, seed=0, concurrency=concurrency)
    rows, state = await collect_engine(client, info, prompts, out_dir, ts)
    write_index(out_dir, label=label, model=str(info.model), engine=info.engine, prompts_sha256=prompts_sha256,
                rows=rows)
    tset = load_set(out_dir)
    pairs = await first_token_pairs(ref, tset.docs)
    failed = [{"id": r["id"], "error": r["error"]} for r in rows if "error" in r]
    return {"rows": rows, "state": state, "pairs": pairs, "problems": list(tset.problems), "requests": len(rows),
            "failed": failed}


def _finite(row: Mapping[int, float]) -> bool:
    return all(math.isfinite(v) for v in row.values())


def _usable(pairs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pairs the statistic may use: made, rendered alike, both lists non-empty and finite (a -inf or NaN logprob
    would make the mean meaningless: such a prompt is left out and counted in ``skipped``)."""
    return [p for p in pairs if "error" not in p and not p.get("template_mismatch") and p.get("ref") and p.get("eng")
            and _finite(p["ref"]) and _finite(p["eng"])]


def shift_test(diffs: Sequence[float], *, resamples: int = 9999, seed: int = 0) -> float | None:
    """Two-sided paired permutation p-value of mean(diffs) = 0, signs flipped per item (scipy
    ``permutation_test``, ``permutation_type="samples"``); None with fewer than 2 items, all zero, or a non-finite
    one."""
    xs = np.asarray([float(d) for d in diffs], dtype=np.float64)
    if len(xs) < 2 or not np.any(xs) or not np.all(np.isfinite(xs)):
        return None
    res = permutation_test((xs,), np.mean, permutation_type="samples", n_resamples=resamples,
                           alternative="two-sided", random_state=np.random.default_rng(seed))
    return float(res.pvalue)


def first_token_summary(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run statistic and what stands beside it, from ``first_token_pairs`` (pure).

    Returns:
        ``{"statistic", "name", "prompts", "skipped", "top1_agreement", "shift_mean", "shift_p_value",
        "distances"}``: ``statistic`` the mean ``first_token_distance`` in nats (None without a usable prompt);
        ``shift_mean`` the mean over prompts of lp_eng(t*) − lp_ref(t*), t* the reference's top token (an engine that
        did not list t* gives its least listed logprob); ``distances`` per usable prompt id.
    """
    usable = _usable(pairs)
    st = first_token_statistic((p["ref"], p["eng"]) for p in usable)
    shifts, agree, dist = [], 0, {}
    for p in usable:
        ref, eng = p["ref"], p["eng"]
        top = max(ref, key=lambda t: ref[t])
        shifts.append(eng.get(top, min(eng.values())) - ref[top])
        agree += int(max(eng, key=lambda t: eng[t]) == top)
        dist[p["id"]] = first_token_distance(ref, eng)
    return {"statistic": st["statistic"], "name": FIRST_TOKEN_STAT if st["statistic"] is not None else None,
            "prompts": st["prompts"], "skipped": len(pairs) - len(usable),
            "top1_agreement": agree / len(usable) if usable else None,
            "shift_mean": float(np.mean(shifts)) if shifts else None, "shift_p_value": shift_test(shifts),
            "distances": dist}


def first_token_report(collected: Mapping[str, Any], cells: Sequence[Mapping[str, Any]], *, claim: str,
                       made: Mapping[str, Any], table_source: str) -> dict[str, Any]:
    """The audit's report on the first-token surface (pure), judged in requests.

    The budget counts the prompts whose pair was made (a template mismatch included, as the calibration counts
    it); the statistic leaves mismatched prompts out.

    Returns:
        the report fields of ``equivalence_run.audit_report`` with ``method`` ``first_token``.
    """
    pairs = list(collected["pairs"])
    summary = first_token_summary(pairs)
    made_pairs = [p for p in pairs if "error" not in p]
    budget = len(made_pairs)
    k = (collected.get("state") or {}).get("k")
    if isinstance(k, int) and k < int(made.get("top_logprobs") or k):  # the engine capped k: cells of k 20 don't apply
        made = {**made, "top_logprobs": k}
    verdict = judge_equivalence(summary["statistic"], cells, method=FIRST_TOKEN_STAT, claim=claim,
                                budget_used=budget, unit="requests", name=summary["name"], made=made)
    limitations = ["first-token surface: one greedy token per prompt; only the first output position is compared "
                   "(a change that shows later in a reply is not seen)"]
    no_ids = [p for p in pairs if "names no token ids" in str(p.get("error", ""))]
    if no_ids:
        limitations.append(f"{len(no_ids)} prompt(s) without token ids in the engine's lists: not paired")
    mismatched = [p["id"] for p in pairs if p.get("template_mismatch")]
    if mismatched:
        limitations.append(f"{len(mismatched)} prompt(s) left out of the statistic: the engine's prompt ids differ "
                           f"from the reference's rendering ({', '.join(mismatched[:3])})")
    failed = list(collected.get("failed") or []) + [{"id": p["id"], "error": p["error"]} for p in pairs
                                                    if "error" in p and p not in no_ids]
    if failed:
        limitations.append(f"{len(failed)} prompt(s) failed to collect or pair; the budget counts only paired "
                           "prompts")
    if collected.get("problems"):
        limitations.append("trajectory integrity: " + "; ".join(list(collected["problems"])[:3]))
    if not cells:
        limitations.append(f"no calibration table ({table_source}): no threshold, so no verdict but UNPROVEN")
    limitations += cell_notes(verdict.get("cell"))
    if summary["statistic"] is None and no_ids:
        verdict["reason"] = ("the engine's top-k lists name no token ids, and the first-token test pairs the engine's "
                             "list with the reference's by id: no statistic (--surface logprob judges such an engine "
                             "on its text, re-tokenized by the reference)")
    stat = {k: v for k, v in summary.items() if k != "distances"}
    return {"surface": "first_token", "method": FIRST_TOKEN_STAT, "claim": claim, "budget_used": budget,
            "statistic": stat, "distances": summary["distances"], "verdict": str(verdict["verdict"]),
            "reason": verdict["reason"], "power": verdict.get("power"), "threshold": verdict.get("threshold"),
            "cell": verdict.get("cell"), "prompts": len(pairs), "failed": failed[:20], "limitations": limitations,
            "table": table_source}
