"""``inferencekit quality score``: teacher-force engine trajectories through a reference and judge them
against the reference's own A/A noise floor.

Collect (the reference's distributions at every generated position, ``TrajectoryScorer``) then judge
(``score_rows`` per position, ``score_judge`` for the figures and the verdict). Every data problem —
a trajectory or index edited after capture, prompts not scored, a chat template that differs from the
reference's, trajectories from another prompt file than the baseline — turns a PASS into UNPROVEN and
is named in the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferencekit import stats
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.evidence.canonical import canonical_json, sha256_hex
from inferencekit.quality.metrics import BUCKET_LABELS
from inferencekit.quality.reference import Reference
from inferencekit.quality.score_judge import divergence, first_divergence, judge_engine, summarize
from inferencekit.quality.score_rows import CLAMP_FLOOR, doc_k, engine_lists, score_positions
from inferencekit.quality.trajectory_store import TrajectorySet
from inferencekit.rundir import RunDir, write_json

__all__ = ["score_sets", "score_record", "SCORE_FORMAT", "KL_METHOD", "TrajectoryScorer"]

SCORE_FORMAT = "inferencekit.quality.score.v1"
KL_METHOD = ("top-k union support, tail imputation, OTHER bucket (inferencekit.quality.metrics); both lists cut to "
             "the engine's k plus the trajectory token at every position; TV on the same support")
CONTEXTS = ("reference", "engine")


class TrajectoryScorer:
    """Teacher-forces trajectories through one reference, caching prompt ids and scored sequences."""

    def __init__(self, ref: Reference, ks: set[int], context: str) -> None:
        self.ref, self.ks, self.context = ref, ks, context
        self._prompt: dict[str, list[int]] = {}
        self._scored: dict[str, list[dict[int, float]]] = {}

    async def ref_prompt(self, doc: dict[str, Any]) -> list[int]:
        key = sha256_hex(canonical_json([doc.get("messages"), doc.get("chat_template_kwargs")]))
        if key not in self._prompt:
            self._prompt[key] = await self.ref.chat_prompt_ids(doc.get("messages") or [],
                                                               doc.get("chat_template_kwargs") or {})
        return self._prompt[key]

    async def score(self, doc: dict[str, Any], as_text: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"id": doc["id"], "bucket": doc.get("bucket")}
        try:
            ref_prompt = await self.ref_prompt(doc)
            engine_prompt = doc.get("prompt_token_ids")
            if engine_prompt and list(engine_prompt) != ref_prompt:
                at = first_divergence(list(engine_prompt), ref_prompt)
                out["prompt_ids_sha256"] = sha256_hex(canonical_json([int(t) for t in engine_prompt]))
                out["template_mismatch"] = (f"the engine's {len(engine_prompt)} prompt ids differ from the reference's "
                                            f"{len(ref_prompt)} from token {at} on")
            elif not engine_prompt and (doc.get("usage") or {}).get("prompt_tokens") not in (None, len(ref_prompt)):
                out["template_mismatch"] = (f"the engine counted {doc['usage']['prompt_tokens']} prompt tokens, the "
                                            f"reference template gives {len(ref_prompt)}")
            if self.context == "engine" and engine_prompt:
                prompt, out["context"] = [int(t) for t in engine_prompt], "engine_prompt_ids"
            else:
                prompt, out["context"] = ref_prompt, "reference_template"
            tokens = None if as_text else doc.get("token_ids")
            if tokens:
                lists = engine_lists(doc)
                out["token_ids_source"] = "engine"
            else:
                tokens, lists = await self.ref.encode(doc.get("text") or ""), None
                out["token_ids_source"] = "retokenized_text"
            if not tokens:
                return {**out, "error": "empty trajectory"}
            full = list(prompt) + [int(t) for t in tokens]
            key = sha256_hex(canonical_json(full))
            if key not in self._scored:
                self._scored[key] = await self.ref.score(full, len(prompt))
            own_k = min(doc_k(doc), self.ref.k) if lists is not None else 0
            out["k_kl"] = own_k
            out["ref_k"] = self.ref.k
            out["token_ids"] = [int(t) for t in tokens]
            ks = {min(k, self.ref.k) for k in self.ks} | ({own_k} if own_k else set())
            out["rows"] = score_positions(out["token_ids"], self._scored[key], lists if own_k else None, ks, own_k)
        except (OpError, ValueError) as e:
            return {**out, "error": str(e)[:300]}
        return out

    async def score_set(self, s: TrajectorySet, as_text: bool = False) -> list[dict[str, Any]]:
        return [await self.score(doc, as_text) for doc in s.docs.values()]


def _coverage(s: TrajectorySet, results: list[dict[str, Any]], required: set[str]) -> dict[str, Any]:
    """Which of the ``required`` prompts (the baseline's) got a score for this set, and for each one that did not,
    why: it failed at capture, it was never captured, its file failed the integrity check, or scoring failed."""
    scored = {r["id"] for r in results if "rows" in r}
    unscored = required - scored
    failed = set(s.failed)
    why = {"failed_in_trajectory": unscored & failed, "absent": unscored - s.ids,
           "rejected_by_integrity_check": (unscored & s.ids) - failed - set(s.docs)}
    errors = sorted((r["id"], r["error"]) for r in results if "error" in r and r["id"] in required)
    return {"required": len(required), "scored": len(required) - len(unscored), "missing": len(unscored),
            "missing_ids": sorted(unscored)[:50], **{k: sorted(v)[:50] for k, v in why.items()},
            "scoring_errors": dict(errors[:20]), "extra_not_in_baseline": len(scored - required)}


_WHY_UNSCORED = {"failed_in_trajectory": "failed at capture", "absent": "never captured",
                 "rejected_by_integrity_check": "changed since capture"}


def _coverage_text(label: str, cov: dict[str, Any]) -> str:
    """One line: how many required prompts have no score, and the reasons, counted."""
    reasons = [f"{what}: {len(cov[key])}" for key, what in _WHY_UNSCORED.items() if cov[key]]
    if cov["scoring_errors"]:
        first = next(iter(cov["scoring_errors"].values()))
        reasons.append(f"scoring failed: {len(cov['scoring_errors'])} (first: {first[:120]})")
    return (f"{label}: no score for {cov['missing']}/{cov['required']} prompts — "
            + (", ".join(reasons) or "see coverage"))


def _floor_answered_same(results: list[dict[str, Any]], floor: list[dict[str, Any]] | None) -> bool:
    """True when there is a replica floor (a second engine run, not the reference itself), some prompt's ids differ
    from the reference template's, and on every such prompt, the engine's or the floor's, both were given the same
    prompt ids (``prompt_ids_sha256``): both answered one context, so pairing them prompt by prompt compares like
    with like (an honest llama-server and its replica tokenize a prompt alike, and otherwise than the reference's
    tokenizer: 191 vs 192 ids for one dev prompt, verify standard, 7 Dec 2026)."""
    if not floor:
        return False
    mine = {r["id"]: r.get("prompt_ids_sha256") for r in results if r.get("template_mismatch")}
    theirs = {r["id"]: r.get("prompt_ids_sha256") for r in floor if r.get("template_mismatch")}
    if not mine and not theirs:
        return False
    return mine.keys() == theirs.keys() and all(v is not None and theirs[k] == v for k, v in mine.items())


def _data_problems(*, integrity: bool, cov: dict[str, Any], floor_gaps: list[str], unpaired: int, template: bool,
                   other_prompts: bool) -> list[str]:
    """What keeps one engine's comparison from being clean, one phrase each ([] = clean). Any of them turns a
    PASS into UNPROVEN: a verdict resting on changed, partial or mismatched inputs proves nothing."""
    found = [
        (integrity, "integrity check failed: a trajectory file, an index.json or its quality_trajectory record "
                    "changed after capture"),
        (cov["missing"] > 0, f"{cov['missing']}/{cov['required']} baseline prompts have no score"),
        *((True, gap) for gap in floor_gaps),
        (unpaired > 0, f"{unpaired} re-tokenized prompt(s) lack a floor read the same way"),
        (template, "template mismatch: the engine's prompt tokens are not the reference's (its chat template or "
                   "its tokenizer differs), so it answered another context"),
        (other_prompts, "the trajectories and the baseline come from different prompt files (prompts_sha256)"),
    ]
    return [what for hit, what in found if hit]


def _engine_block(label: str, results: list[dict[str, Any]], path: dict[str, list[int]] | None, resamples: int,
                  seed: int) -> dict[str, Any]:
    ok = [r for r in results if "rows" in r]
    block: dict[str, Any] = {
        "label": label, "n_prompts": len(results), "n_scored": len(ok),
        "errors": {r["id"]: r["error"] for r in results if "error" in r},
        "template_mismatch": {r["id"]: r["template_mismatch"] for r in results if r.get("template_mismatch")},
        "context": sorted({r["context"] for r in ok if r.get("context")}),
        "kl_top_k": sorted({r["k_kl"] for r in ok if any(x["kl"] is not None for x in r["rows"])}),
        "retokenized_prompts": sum(1 for r in ok if r.get("token_ids_source") == "retokenized_text"),
        "nll_clamped_positions": sum(1 for r in ok for x in r["rows"] if x.get("clamped"))}
    block.update(summarize(ok, resamples, seed))
    by_input = {}
    for b in sorted({r.get("bucket") or "none" for r in ok}):
        by_input[b] = summarize([r for r in ok if (r.get("bucket") or "none") == b], resamples, seed)["all"]
    block["by_input_bucket"] = by_input
    if path is not None:
        block["first_divergence"] = divergence(path, {r["id"]: r["token_ids"] for r in ok})
    block["per_prompt"] = {r["id"]: {"bucket": r.get("bucket"), "tokens": len(r["rows"]),
                                     "agreement": sum(x["agree"] for x in r["rows"]) / len(r["rows"]),
                                     "nll_mean": _mean([x["nll"] for x in r["rows"] if x["nll"] is not None])}
                          for r in ok}
    return block


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _metrics_for(label: str, block: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for bucket in ("all", *BUCKET_LABELS):
        b = block.get(bucket) or {}
        subj = label if bucket == "all" else f"{label} @pos {bucket}"
        agr = b.get("top1_agreement") or {}
        if not agr.get("n_tokens"):
            continue
        ci = [100 * x if x is not None else None for x in agr["ci95"]]
        out.append({"name": "top1_agreement_pct", "value": 100 * agr["value"], "unit": "%", "stat": "pooled_mean",
                    "n": agr["n_prompts"], "subject": subj, **({"ci95": ci} if None not in ci else {})})
        for name, key, unit in (("kl_ref_engine", "kl_mean", "nats/token"),
                                ("tv_ref_engine", "tv_mean", "probability/token"),
                                ("ref_nll", "ref_nll_mean", "nats/token")):
            m = b.get(key) or {}
            if m.get("value") is None:
                continue
            out.append({"name": name, "value": m["value"], "unit": unit, "stat": "pooled_mean", "n": m["n_prompts"],
                        "subject": subj, **({"ci95": m["ci95"]} if None not in m["ci95"] else {})})
    fd = block.get("first_divergence")
    if fd and fd.get("n_prompts"):
        out.append({"name": "identical_to_reference_greedy_pct", "value": 100 * fd["identical"] / fd["n_prompts"],
                    "unit": "%", "stat": "rate", "n": fd["n_prompts"], "subject": label})
    return out


async def score_sets(ref: Reference, engines: list[TrajectorySet], baseline: TrajectorySet | None,
                     repeat: TrajectorySet | None, *, context: str, margins: dict[str, float | None], resamples: int,
                     seed: int, confidence: float = 0.95) -> dict[str, Any]:
    """The whole ``score.json`` report (``SCORE_FORMAT``) for ``engines`` against ``baseline``'s floor.

    The A/A floor is ``repeat`` (a second greedy run of the reference) scored like an engine, else
    ``baseline`` itself; the first-divergence path is ``baseline``'s tokens. Engines scored from
    re-tokenized text are paired with the floor's text re-tokenized the same way. ``limitations`` lists what the
    verdicts cannot see; ``fallbacks``, the part of them that changed what was measured (prompts read as text, clamp
    sentinels left out, KL on shorter lists than the reference's), which ``verify --strict`` does not let a PASS rest
    on. ``confidence``: each verdict interval's coverage (``judge_engine``)."""
    sets = [*engines, *(x for x in (baseline, repeat) if x is not None)]
    ks = {min(doc_k(d), ref.k) for s in sets for d in s.docs.values() if doc_k(d) > 0}
    scorer = TrajectoryScorer(ref, ks, context)
    labels = [s.label for s in engines]
    if len(set(labels)) != len(labels):
        raise OpError(f"two trajectory folders share a label: {labels}")
    scored = {s.label: (s, await scorer.score_set(s)) for s in engines}
    floor_set = repeat or baseline
    limitations: list[str] = []
    fallbacks: list[str] = []
    floor_res = await scorer.score_set(floor_set) if floor_set is not None else None
    path = {pid: d["token_ids"] for pid, d in baseline.docs.items() if d.get("token_ids")} if baseline else None
    required = set(baseline.ids) if baseline else set().union(*(s.ids for s in engines))
    retok = {label: {r["id"] for r in res if r.get("token_ids_source") == "retokenized_text"}
             for label, (_, res) in scored.items()}
    floor_text, path_text = None, {}
    if floor_set is not None and any(retok.values()):
        floor_text = await scorer.score_set(floor_set, as_text=True)
        if baseline is not None:
            base_text = floor_text if repeat is None else await scorer.score_set(baseline, as_text=True)
            path_text = {r["id"]: r["token_ids"] for r in base_text if r.get("token_ids")}
    report: dict[str, Any] = {"format": SCORE_FORMAT, "reference": ref.describe(), "context": context,
                              "buckets": list(BUCKET_LABELS), "margins": margins, "kl_method": KL_METHOD,
                              "noise_floor": floor_set.label if floor_set else None,
                              "required_prompts": len(required), "engines": {}}
    floor_by_id = {r["id"]: r for r in floor_res} if floor_res is not None else None
    floor_text_by_id = {r["id"]: r for r in floor_text or []}
    floor_gaps: list[str] = []
    floor_mismatch = False
    if floor_set is not None and floor_res is not None:
        fb = _engine_block(floor_set.label, floor_res, path if repeat is not None else None, resamples, seed)
        fb["source"] = "baseline_repeat" if repeat is not None else "baseline"
        fb["coverage"] = cov = _coverage(floor_set, floor_res, required)
        floor_mismatch = bool(fb["template_mismatch"])
        if cov["missing"]:
            floor_gaps.append(f"the noise floor lacks {cov['missing']} of {cov['required']} prompts")
            limitations.append(_coverage_text(f"{floor_set.label} (noise floor)", cov))
        report["floor"] = fb
        if repeat is None:
            limitations.append("A/A floor from one reference run: it holds only the gap between the reference's own "
                               "decoding and its teacher-forced pass — not how two runs differ, "
                               "and no first divergence "
                               "of its own (--baseline-repeat, a second greedy run of the reference, gives both)")
    else:
        limitations.append("without --baseline (the reference's own greedy trajectories) there is nothing to compare "
                           "against: no A/A floor, no first divergence, and every verdict stays UNPROVEN")
    if floor_text is not None:
        report["floor_retokenized"] = _engine_block(f"{floor_set.label} (re-tokenized)", floor_text, None,  # type: ignore[union-attr]
                                                    resamples, seed)
    base_problems = [p for x in (baseline, repeat) if x is not None for p in x.problems]
    base_shas = {x.prompts_sha256 for x in (baseline, repeat) if x is not None}
    verdicts: dict[str, str] = {}
    metrics: list[dict[str, Any]] = []
    for label, (s, results) in scored.items():
        text_ids = retok[label]
        # re-tokenized prompts are compared with the reference's text read the same way, path and floor alike
        eng_path = None if path is None else {pid: (path_text.get(pid) if pid in text_ids else ids)
                                              for pid, ids in path.items()}
        block = _engine_block(label, results, {k: v for k, v in (eng_path or {}).items() if v is not None}
                              if eng_path is not None else None, resamples, seed)
        block["coverage"] = cov = _coverage(s, results, required)
        paired = None if floor_by_id is None else {
            pid: pick for pid, r in floor_by_id.items()
            if (pick := floor_text_by_id.get(pid) if pid in text_ids else r) is not None}
        v = judge_engine(results, paired, margins, resamples, seed, confidence)
        if cov["missing"]:
            limitations.append(_coverage_text(label, cov))
        mismatched = block["template_mismatch"]
        like_for_like = context == "engine" and all(r.get("context") == "engine_prompt_ids"
                                                    for r in results if r["id"] in mismatched)
        same_context = _floor_answered_same(results, floor_res if repeat is not None else None)
        problems = _data_problems(
            integrity=bool(s.problems or base_problems), cov=cov, floor_gaps=floor_gaps,
            unpaired=sum(1 for pid in text_ids if "rows" not in floor_text_by_id.get(pid, {})) if floor_res else 0,
            template=bool((mismatched or floor_mismatch) and not like_for_like and not same_context),
            other_prompts=baseline is not None and (s.prompts_sha256 not in base_shas or len(base_shas) > 1))
        if problems:
            downgrade = v["verdict"] == "PASS"
            v["verdict"] = "UNPROVEN" if downgrade else v["verdict"]
            v["reason"] += ("; downgraded to UNPROVEN: " if downgrade else "; data problems: ") + "; ".join(problems)
        block["data_problems"], block["verdict"] = problems, v
        verdicts[label] = v["verdict"]
        report["engines"][label] = block
        metrics.append({"name": "prompts_scored", "value": cov["scored"], "unit": "prompts", "stat": "count",
                        "n": cov["required"], "subject": label})
        metrics.extend(_metrics_for(label, block))
        if mismatched:
            limitations.append(f"{label}: {len(mismatched)} prompt(s) whose prompt tokens differ from the reference's "
                               "(chat template or tokenizer)" + (
                                   " — scored on the engine's own prompt ids (--context engine), so the comparison is "
                                   "like for like; the difference itself is not judged" if like_for_like else
                                   f" — the A/A floor ({floor_set.label}) was given the very same prompt ids, so "  # type: ignore[union-attr]
                                   "engine and floor answered one context and their paired comparison is like for "
                                   "like; the difference from the reference's template itself is not judged"
                                   if same_context else ""))
        if block["retokenized_prompts"]:
            fallbacks.append(f"{label}: {block['retokenized_prompts']}/{block['n_scored']} prompts "
                             "carry no token ids, "
                             "so the reference tokenized their text: agreement and NLL only, paired with the floor's "
                             "text read the same way (a tokenization of text need not be the sequence the engine "
                             f"sampled; prompts: {', '.join(sorted(text_ids)[:8])})")
        if block["nll_clamped_positions"]:
            fallbacks.append(f"{label}: {block['nll_clamped_positions']} position(s) where the reference's logprob "
                             f"of the token is a clamp sentinel (<= {CLAMP_FLOOR:g}, e.g. vLLM's -9999.0): left out "
                             "of NLL, not averaged as real values")
        kcheck = (v["checks"].get("kl_mean") or {}).get("top_k")
        if kcheck is not None and kcheck < ref.k:
            fallbacks.append(f"{label}: KL and TV taken on top-{kcheck} lists (the shortest either arm returned), not "
                             f"the reference's {ref.k}; shorter lists hide more of a divergence")
    if floor_set is not None:
        metrics.extend(_metrics_for(f"{floor_set.label} (noise floor)", report["floor"]))
    report["verdicts"] = verdicts
    report["not_run"] = {label: [n for n, c in b["verdict"]["checks"].items() if c["verdict"] == "NOT RUN"]
                         for label, b in report["engines"].items()}
    # the limitations that changed what was measured (text read instead of ids, positions left out, a lower k):
    # --strict turns a PASS resting on any into UNPROVEN (verify.strict_parts)
    report["fallbacks"] = fallbacks
    report["limitations"] = limitations + fallbacks
    report["metrics"] = metrics
    report["integrity_problems"] = list(dict.fromkeys(p for x in sets for p in x.problems))
    report["inputs"] = {x.label: {"dir": str(x.dir), "prompts_sha256": x.prompts_sha256,
                                  "index_sha256": x.index_sha256} for x in sets}
    return report


def score_record(report: dict[str, Any], out_path: Path, run: RunDir | None, *, context: str,
                 margins: dict[str, float | None], have_baseline: bool) -> dict[str, Any]:
    """Write ``report`` to ``out_path`` and save the ``quality_score`` record (verdict = the engines' combined)."""
    write_json(out_path, report, indent=True)
    overall = stats.combine_claims(report["verdicts"].values())
    missing = []
    if any(b["coverage"]["missing"] for b in report["engines"].values()):
        missing.append("scored prompts")
    if report["integrity_problems"]:
        missing.append("input integrity")
    if not have_baseline:
        missing.append("noise floor")
    if any("kl_mean" in names for names in report["not_run"].values()):
        missing.append("logprobs with token ids (KL, TV)")
    lims = report["limitations"] + report["integrity_problems"][:10]
    base_dir = run.path if run else out_path.parent
    arts = ([artifact(out_path, base_dir, "quality_score")] if out_path.resolve().is_relative_to(base_dir.resolve())
            else [])
    summary = f"{overall}: " + ", ".join(
        f"{label} {v} (top-1 agreement {_pct(report['engines'][label]['all']['top1_agreement']['value'])})"
        for label, v in report["verdicts"].items()) + (
        f"; A/A floor {_pct(report['floor']['all']['top1_agreement']['value'])}" if report.get("floor") else
        "; no A/A floor")
    rec = build_record(
        kind="quality_score", claim_class="derived", summary=summary,
        identity={"engine": {"engines": list(report["verdicts"])}, "model": {"reference": report["reference"]},
                  "workload": {"context": context, "required_prompts": report["required_prompts"]}},
        metrics=report["metrics"], artifacts=arts, missing=missing, limitations=lims, verdict=overall,
        data={"run_dir": str(base_dir.resolve()), "score_file": str(out_path), "verdicts": report["verdicts"],
              "margins": margins, "kl_method": KL_METHOD, "noise_floor": report["noise_floor"],
              "inputs": report["inputs"], "not_run": report["not_run"],
              "fallbacks": list(report.get("fallbacks") or [])})
    save_record(rec, run)
    return rec


def _pct(x: float | None) -> str:
    return f"{100 * x:.2f}%" if x is not None else "n/a"
