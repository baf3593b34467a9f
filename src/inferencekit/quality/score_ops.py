"""``inferencekit quality score``: teacher-force engine trajectories through a reference and judge them
against the reference's own A/A noise floor.

Collect (the reference's distributions at every generated position, ``_Scorer``) then judge
(``score_rows`` per position, ``score_judge`` for the figures and the verdict). Every data problem —
a trajectory or index edited after capture, prompts not scored, a chat template that differs from the
reference's, trajectories from another prompt file than the baseline — turns a PASS into UNPROVEN and
is named in the reason.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from inferencekit import stats
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.evidence.canonical import canonical_json, sha256_hex
from inferencekit.quality.metrics import BUCKET_LABELS
from inferencekit.quality.reference import REFERENCE_KINDS, LocalReference, Reference, VllmReference, check_echo_reference
from inferencekit.quality.score_judge import DEFAULT_MARGINS, divergence, first_divergence, judge_engine, summarize
from inferencekit.quality.score_rows import doc_k, engine_lists, score_positions
from inferencekit.quality.trajectory_ops import print_tail
from inferencekit.quality.trajectory_store import TrajectorySet, label_dirs, load_set, run_of
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import verdict_style
from inferencekit.rundir import RunDir, write_json

__all__ = ["quality_score", "score_sets", "score_record", "SCORE_FORMAT", "KL_METHOD"]

SCORE_FORMAT = "inferencekit.quality.score.v1"
KL_METHOD = ("top-k union support, tail imputation, OTHER bucket (inferencekit.quality.metrics); both lists cut to "
             "the engine's k plus the trajectory token at every position; TV on the same support")
CONTEXTS = ("reference", "engine")


class _Scorer:
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
    return f"{label}: no score for {cov['missing']}/{cov['required']} prompts — " + (", ".join(reasons) or "see coverage")


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
        "retokenized_prompts": sum(1 for r in ok if r.get("token_ids_source") == "retokenized_text")}
    block.update(summarize(ok, resamples, seed))
    by_input = {}
    for b in sorted({r.get("bucket") or "none" for r in ok}):
        by_input[b] = summarize([r for r in ok if (r.get("bucket") or "none") == b], resamples, seed)["all"]
    block["by_input_bucket"] = by_input
    if path is not None:
        block["first_divergence"] = divergence(path, {r["id"]: r["token_ids"] for r in ok})
    block["per_prompt"] = {r["id"]: {"bucket": r.get("bucket"), "tokens": len(r["rows"]),
                                     "agreement": sum(x["agree"] for x in r["rows"]) / len(r["rows"]),
                                     "nll_mean": sum(x["nll"] for x in r["rows"]) / len(r["rows"])} for r in ok}
    return block


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
        for name, key, unit in (("kl_ref_engine", "kl_mean", "nats/token"), ("tv_ref_engine", "tv_mean", "probability/token"),
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
                     seed: int) -> dict[str, Any]:
    """The whole ``score.json`` report (``SCORE_FORMAT``) for ``engines`` against ``baseline``'s floor.

    The A/A floor is ``repeat`` (a second greedy run of the reference) scored like an engine, else
    ``baseline`` itself; the first-divergence path is ``baseline``'s tokens. Engines scored from
    re-tokenized text are paired with the floor's text re-tokenized the same way."""
    sets = [*engines, *(x for x in (baseline, repeat) if x is not None)]
    ks = {min(doc_k(d), ref.k) for s in sets for d in s.docs.values() if doc_k(d) > 0}
    scorer = _Scorer(ref, ks, context)
    labels = [s.label for s in engines]
    if len(set(labels)) != len(labels):
        raise OpError(f"two trajectory folders share a label: {labels}")
    scored = {s.label: (s, await scorer.score_set(s)) for s in engines}
    floor_set = repeat or baseline
    limitations: list[str] = []
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
                               "decoding and its teacher-forced pass — not how two runs differ, and no first divergence "
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
        v = judge_engine(results, paired, margins, resamples, seed)
        if cov["missing"]:
            limitations.append(_coverage_text(label, cov))
        mismatched = block["template_mismatch"]
        like_for_like = context == "engine" and all(r.get("context") == "engine_prompt_ids"
                                                    for r in results if r["id"] in mismatched)
        problems = _data_problems(
            integrity=bool(s.problems or base_problems), cov=cov, floor_gaps=floor_gaps,
            unpaired=sum(1 for pid in text_ids if "rows" not in floor_text_by_id.get(pid, {})) if floor_res else 0,
            template=bool(mismatched and not like_for_like) or floor_mismatch,
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
                                   "like for like; the difference itself is not judged" if like_for_like else ""))
        if block["retokenized_prompts"]:
            limitations.append(f"{label}: {block['retokenized_prompts']}/{block['n_scored']} prompts carry no token ids, "
                               "so the reference tokenized their text: agreement and NLL only, paired with the floor's "
                               "text read the same way (a tokenization of text need not be the sequence the engine "
                               "sampled)")
        kcheck = (v["checks"].get("kl_mean") or {}).get("top_k")
        if kcheck is not None and kcheck < ref.k:
            limitations.append(f"{label}: KL and TV taken on top-{kcheck} lists (the shortest either arm returned); "
                               "shorter lists hide more of a divergence")
    if floor_set is not None:
        metrics.extend(_metrics_for(f"{floor_set.label} (noise floor)", report["floor"]))
    report["verdicts"] = verdicts
    report["not_run"] = {label: [n for n, c in b["verdict"]["checks"].items() if c["verdict"] == "NOT RUN"]
                         for label, b in report["engines"].items()}
    report["limitations"] = limitations
    report["metrics"] = metrics
    report["integrity_problems"] = list(dict.fromkeys(p for x in sets for p in x.problems))
    report["inputs"] = {x.label: {"dir": str(x.dir), "prompts_sha256": x.prompts_sha256,
                                  "index_sha256": x.index_sha256} for x in sets}
    return report


def render_score(console: Any, rec: dict[str, Any], report: dict[str, Any]) -> None:
    from rich.table import Table

    def pct(m: dict[str, Any]) -> str:
        if m.get("value") is None:
            return "—"
        lo, hi = m["ci95"]
        return f"{100 * m['value']:.2f}%" + (f" [{100 * lo:.2f}, {100 * hi:.2f}]" if lo is not None else "")

    def num(m: dict[str, Any]) -> str:
        if m.get("value") is None:
            return "—"
        lo, hi = m["ci95"]
        return f"{m['value']:.4f}" + (f" [{lo:.4f}, {hi:.4f}]" if lo is not None else "")

    t = Table("trajectories", "verdict", "top-1 agreement", "KL nats/token", "TV", "ref NLL nats/token", "prompts",
              title=f"quality score vs {report['reference'].get('engine')} (95% CI over prompts)", title_justify="left")
    rows = [(label, b, b["verdict"]["verdict"]) for label, b in report["engines"].items()]
    if report.get("floor"):
        rows.append((f"{report['floor']['label']} (A/A floor)", report["floor"], ""))
    for label, b, verdict in rows:
        a = b["all"]
        t.add_row(label, f"[{verdict_style(verdict)}]{verdict}[/]" if verdict else "", pct(a["top1_agreement"]),
                  num(a["kl_mean"]), num(a["tv_mean"]), num(a["ref_nll_mean"]), f"{b['n_scored']}/{b['n_prompts']}")
    console.print(t)
    for label, b in report["engines"].items():
        console.print(f"{label}: {b['verdict']['reason']}", markup=False, highlight=False)
    print_tail(console, rec, f"verdict: {rec['verdict']}   record: {rec['evidence_id']}  (report: "
                             f"{rec['data']['score_file']})")


@operation(("quality", "score"), "Teacher-force trajectories through a reference: top-1 agreement, KL, TV and NLL "
           "per position bucket against the reference's A/A noise floor.",
           description="Scores every trajectory folder (quality trajectory's output) on a reference model: at each "
                       "generated position the reference's top-k distribution (teacher forcing) gives top-1 agreement "
                       "with the engine's token, KL(reference ‖ engine) and total variation on the two top-k lists "
                       "(cut to the engine's k; see kl_method), and the reference's NLL of the engine's token; the "
                       "first divergence from the reference's greedy path (--baseline). Each is a pooled mean with a "
                       "prompt-level bootstrap CI, overall and per position bucket. The A/A floor is the reference's "
                       "own greedy run (--baseline-repeat, else --baseline) scored the same way; each engine gets "
                       "PASS/FAIL/UNPROVEN from paired bootstrap CIs of engine minus floor against pre-registered "
                       "margins. Integrity (every file against its index, every index against an intact "
                       "quality_trajectory record), coverage, chat-template and prompt-file problems downgrade a PASS "
                       "to UNPROVEN. References: local (float32 transformers in this process; the embedded GGUF "
                       "dequantised by default, or --reference-model PATH), vllm (--reference-url; /v1/completions "
                       "with prompt_logprobs), llama-cpp-python (checked, then refused: its echo lists are one "
                       "position late). Writes quality/score.json and a quality_score record. Exit 0 PASS, 1 FAIL, "
                       "3 UNPROVEN.",
           example="inferencekit quality score runs/q1/quality/llama-server --reference local "
                   "--baseline runs/q1/quality/reference",
           args=[Arg("trajectories", "array", "Trajectory folders (run/quality/<label>), or a run dir / quality folder "
                     "holding them.", required=True, positional=True, metavar="DIR"),
                 Arg("reference", "string", "Which model teacher-forces the trajectories (see above).", default="local",
                     choices=REFERENCE_KINDS),
                 Arg("reference_url", "string", "The reference server (vllm, llama-cpp-python)."),
                 Arg("reference_model", "string", "local: a .gguf file or Hugging Face directory (default: the "
                     "embedded GGUF); vllm: the served model name (default: the first of /v1/models)."),
                 Arg("reference_api_key_env", "string", "NAME of the reference server's API-key variable."),
                 Arg("baseline", "string", "The reference's own greedy trajectories (quality trajectory --local, or "
                     "against the reference server): the first-divergence path, and the A/A floor without "
                     "--baseline-repeat."),
                 Arg("baseline_repeat", "string", "A second greedy run of the reference: the A/A floor, with "
                     "run-to-run variation."),
                 Arg("context", "string", "Prompt ids to teacher-force after: the reference's chat template, or the "
                     "engine's own prompt ids where its trajectory has them (a template difference is then reported, "
                     "not judged).", default="reference", choices=CONTEXTS),
                 Arg("top_k", "integer", "Reference alternatives per position (vLLM caps at --max-logprobs, 20).",
                     default=20),
                 Arg("margin_agreement", "number", "Largest allowed drop in top-1 agreement below the floor (fraction).",
                     default=0.02),
                 Arg("margin_kl", "number", "Largest allowed rise in mean KL above the floor (nats/token).",
                     default=0.02),
                 Arg("margin_tv", "number", "Largest allowed rise in mean TV above the floor (without it TV is "
                     "reported, not judged)."),
                 Arg("margin_nll", "number", "Largest allowed rise in reference NLL above the floor (nats/token).",
                     default=0.05),
                 Arg("resamples", "integer", "Bootstrap resamples per confidence interval.", default=2000),
                 Arg("seed", "integer", "Seed of the bootstrap resampling.", default=0),
                 Arg("timeout", "number", "Per-request limit in seconds (HTTP references).", default=600.0),
                 Arg("out", "string", "Report path (default: <run-dir>/quality/score.json).")])
def quality_score(call: Call, trajectories: list[str], reference: str = "local", reference_url: str | None = None,
                  reference_model: str | None = None, reference_api_key_env: str | None = None,
                  baseline: str | None = None, baseline_repeat: str | None = None, context: str = "reference",
                  top_k: int = 20, margin_agreement: float = 0.02, margin_kl: float = 0.02,
                  margin_tv: float | None = None, margin_nll: float = 0.05, resamples: int = 2000, seed: int = 0,
                  timeout: float = 600.0, out: str | None = None) -> Outcome:
    if baseline_repeat and not baseline:
        raise OpError("--baseline-repeat needs --baseline")
    if reference != "local" and not reference_url:
        raise OpError(f"--reference {reference} needs --reference-url")
    if reference_url:
        normalize_base_url(reference_url)
    read_api_key(reference_api_key_env)
    if top_k < 1 or resamples < 10 or not timeout > 0:
        raise OpError("--top-k ≥ 1, --resamples ≥ 10 and --timeout > 0 are required")
    margins = {"agreement": margin_agreement, "kl": margin_kl, "tv": margin_tv, "nll": margin_nll}
    if any(m is not None and not m >= 0 for m in margins.values()):
        raise OpError("margins must be ≥ 0")
    base_dirs = [Path(p) for p in (baseline, baseline_repeat) if p]
    for b in base_dirs:
        if not (b / "index.json").is_file():
            raise OpError(f"{b}: not a trajectory folder (no index.json)")
    if baseline_repeat and Path(baseline_repeat).resolve() == Path(baseline or "").resolve():
        raise OpError("--baseline-repeat must be a second greedy run of the reference, not --baseline again")
    dirs = [d for d in label_dirs(trajectories) if d.resolve() not in {b.resolve() for b in base_dirs}]
    if not dirs:
        raise OpError("no engine trajectories to score besides the baseline")
    engines = [load_set(d) for d in dirs]
    base = load_set(base_dirs[0]) if baseline else None
    rep = load_set(base_dirs[1]) if baseline_repeat else None
    run_path = run_of(dirs[0])
    run = RunDir.open(run_path) if run_path is not None and (run_path / "run.json").is_file() else None

    async def main() -> dict[str, Any]:
        async with AsyncExitStack() as stack:
            ref: Reference
            if reference == "local":
                from inferencekit.quality.local_model import load_local_model
                from inferencekit.quality.trajectory_ops import local_source

                ref = LocalReference(load_local_model(local_source(reference_model or "embedded")), k=top_k)
            else:
                client = await stack.enter_async_context(Client(Endpoint.parse(str(reference_url), reference_api_key_env),
                                                                timeout_s=timeout))
                info = await detect_engine(client, reference_model)
                if reference == "llama-cpp-python":
                    await check_echo_reference(client, str(info.model))
                ref = VllmReference(client, str(info.model), k=top_k)
            return await score_sets(ref, engines, base, rep, context=context, margins=margins, resamples=resamples,
                                    seed=seed)

    report = asyncio.run(main())
    out_path = Path(out) if out else ((run.path / "quality" / "score.json") if run else Path("quality_score.json"))
    rec = score_record(report, out_path, run, context=context, margins=margins, have_baseline=base is not None)
    payload = {"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "verdicts": report["verdicts"],
               "score_file": str(out_path),
               "engines": {label: {"verdict": b["verdict"]["verdict"], "reason": b["verdict"]["reason"],
                                   "top1_agreement": b["all"]["top1_agreement"], "kl_mean": b["all"]["kl_mean"],
                                   "tv_mean": b["all"]["tv_mean"], "ref_nll_mean": b["all"]["ref_nll_mean"]}
                           for label, b in report["engines"].items()}}
    return Outcome(payload, rec["verdict"], lambda console: render_score(console, rec, report))


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
    arts = [artifact(out_path, base_dir, "quality_score")] if out_path.resolve().is_relative_to(base_dir.resolve()) else []
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
              "inputs": report["inputs"], "not_run": report["not_run"]})
    save_record(rec, run)
    return rec


def _pct(x: float | None) -> str:
    return f"{100 * x:.2f}%" if x is not None else "n/a"
