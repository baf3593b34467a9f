"""``inferencekit verify``: the main job's face (``verify.py`` runs it)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from inferencekit.api.body import parse_json_object
from inferencekit.options import CLIENT_ARGS, FIXED_ARG, check_client_args, check_urls, trace_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.verify_card import render_verification
from inferencekit.verify import PROFILES, VerifyRequest, plan_verify, run_verify

__all__ = ["verify"]


APPLIANCE_VERIFY_ARGS = (
    Arg("metadata", "string", "--profile full with --base-url: the appliance metadata file for the appliance receipt "
        "(`inferencekit bench configure` writes one); required there."),
    Arg("comparison_id", "string", "--profile full: comparison id of the appliance receipt (default: verify-<run dir "
        "name>)."),
)


@operation(("verify",), "The main job: probe, load benchmark, gates and quality in one run, one verdict.",
           description="Without --base-url, starts the embedded engine (llama.cpp serving SmolLM2-135M-Instruct, both "
                       "from PyPI) and stops it afterwards. Runs the capability probe, bench serve at several load "
                       "levels, and the gates and quality checks of the profile, in one run directory; writes one "
                       "'verification' evidence record linking every part and prints a card. Parts not built yet or "
                       "not possible on the target are NOT RUN with the reason, which makes the verdict UNPROVEN. Exit "
                       "0 PASS, 1 FAIL, 3 UNPROVEN.",
           example="inferencekit verify --profile quick",
           args=[*CLIENT_ARGS,
                 Arg("profile", "string", "quick (≤ 5 min on the embedded engine), standard, or full.",
                     default="quick", choices=tuple(PROFILES)),
                 Arg("seed", "integer", "Seed for the prompt order (default: drawn and recorded); the salts "
                     "come from the OS CSPRNG."),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>)."),
                 Arg("reference_url", "string", "A reference engine (same model, trusted) for the rare_tokens gate: "
                     "misses it shares are not counted; without one a miss is UNPROVEN."),
                 Arg("quality_reference", "string", "standard/full: the model's weights for the float32 quality "
                     "reference ('embedded', a .gguf file or a Hugging Face folder; default 'embedded' on the "
                     "embedded engine, none with --base-url)."),
                 Arg("claim", "string", "standard/full: the precision the endpoint claims (F16, Q4_1 …) for the "
                     "equivalence audit (default Q4_1 on the embedded engine; without one the part is UNPROVEN)."),
                 Arg("strict", "boolean", "For CI: a PASS that rests on a fallback (a dropped or refused field, a "
                     "shrunk prompt set, an allowance used) and a gate marked not applicable count as UNPROVEN (exit "
                     "3); a gate that showed a property an honest engine may lack (docs/properties.md) takes the "
                     "property's strict verdict (not-batch-invariant: FAIL, seed 004's byte rule). Without it, those "
                     "PASSes stand and say their limitation, and properties are reported beside the verdict.",
                     default=False),
                 Arg("workload", "string", "The load part's prompts: 'dev' (the packaged dev set), 'conversations' "
                     "(multi-turn sessions of 4 user turns of 64 tokens each, every turn carrying the model's own "
                     "earlier replies; one session per stream at the profile's concurrency levels) or 'trace:FILE' "
                     "(a request trace replayed at its own times, token-exact; --trace-format, --time-scale). The "
                     "gates and quality parts are the same for every workload.", default="dev", metavar="WORKLOAD"),
                 *trace_args("--workload trace:FILE"), FIXED_ARG,
                 *APPLIANCE_VERIFY_ARGS])
def verify(call: Call, base_url: str | None, model: str | None, api_key_env: str | None, timeout: float,
           extra_body: str | None, chat_template_kwargs: str | None, profile: str, run_dir: str | None,
           seed: int | None, metadata: str | None = None, comparison_id: str | None = None,
           reference_url: str | None = None, quality_reference: str | None = None, strict: bool = False,
           claim: str | None = None, workload: str = "dev", trace_format: str = "mooncake",
           time_scale: float = 1.0, trace_block_size: int = 512, fixed: bool = False) -> Outcome:
    check_urls([reference_url])
    check_client_args(base_url, api_key_env, timeout)
    req = VerifyRequest(
        profile=PROFILES[profile], base_url=base_url, model=model, api_key_env=api_key_env, timeout=timeout,
        extra_body=parse_json_object(extra_body, "--extra-body"),
        chat_template_kwargs=parse_json_object(chat_template_kwargs, "--chat-template-kwargs"), run_dir=run_dir,
        seed=seed if seed is not None else secrets.randbits(31), gate_seed=secrets.randbits(63),
        reference_url=reference_url, quality_reference=quality_reference, metadata=metadata,
        comparison_id=comparison_id, strict=strict, claim=claim, workload=workload, trace_format=trace_format,
        time_scale=time_scale, trace_block_size=trace_block_size, fixed=fixed)
    plan = plan_verify(req)
    if not call.quiet:
        for part, line in plan.unavailable.items():
            print(f"inferencekit: note: --profile {profile}: '{part}' cannot run here: {line}", file=sys.stderr)
    run, rec, subs = run_verify(plan, argv=list(call.argv), operation=call.operation, quiet=call.quiet)
    payload = {"evidence_id": rec["evidence_id"], "verdict": rec["verdict"], "run_dir": str(Path(run.path)),
               "parts": rec["data"]["parts"], "levels": subs["bench"]["data"]["levels"]}
    return Outcome(payload, rec["verdict"], lambda console: render_verification(console, rec, subs))
