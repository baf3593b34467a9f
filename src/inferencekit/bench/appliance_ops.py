"""``inferencekit bench appliance``: the appliance receipt operation (RigMark behaviour, docs/appliance.md)."""

from __future__ import annotations

import asyncio
import importlib.metadata as md
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.api.tokenize import EngineTokenizer, TokenizeError
from inferencekit.bench.appliance import appliance_record, receipt_path, run_appliance, write_card
from inferencekit.bench.appliance_collect import (PREFILL_TOKENS, PROTECTED_FIELDS, ApplianceSettings, Collector,
                                                  load_prompts)
from inferencekit.bench.appliance_metadata import check_metadata, check_prefill_depths, load_metadata
from inferencekit.engines.model import EMBEDDED_MODEL_NAME, MODEL_PACKAGE, embedded_gguf
from inferencekit.engines.target import EMBEDDED_ENGINE, serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import sha256_file
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, template_kwargs
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import RunDir, write_bytes

__all__ = ["bench_appliance", "settings_from_args", "embedded_metadata", "appliance_receipt", "resolve_metadata",
           "APPLIANCE_ARGS", "EMBEDDED_CONTEXT"]

EMBEDDED_CONTEXT = 4096  # the embedded engine's n_ctx (engines.recipes default)
DEFAULT_SEED = 20261130
_PROMPT_ALLOWANCE = 256  # tokens a decode prompt (system + nonce + workload, chat template) may take
# Defaults: RigMark's for a server you name; smaller ones that fit the embedded engine's 4096-token context.
_DEFAULTS = {"url": {"runs": 5, "decode_tokens": 8192, "prefill_depths": [8192, 32768, 65536]},
             "embedded": {"runs": 3, "decode_tokens": 1024, "prefill_depths": [256, 1024, 2048]}}

APPLIANCE_ARGS: tuple[Arg, ...] = (
    Arg("label", "string", "Name of this appliance in the receipt and the card, e.g. 'rack3-h100-vllm'.", required=True),
    Arg("comparison_id", "string", "Id shared by every appliance of one sweep: the request nonces derive from it, so "
        "all of them get byte-identical prompts (bench compare refuses receipts with different ids).", required=True),
    Arg("metadata", "string", "Appliance metadata JSON (hardware, topology, model, ...; write it with `inferencekit "
        "bench configure`). Required with --base-url; for the embedded engine it is filled in from what "
        "inferencekit started."),
    Arg("runs", "integer", "Decode samples per workload (code, prose, structured). Default 5; 3 on the embedded "
        "engine."),
    Arg("decode_tokens", "integer", "Generated-token cap per decode sample, reasoning included. Default 8192; 1024 "
        "on the embedded engine."),
    Arg("prefill_depths", "array", "Exact prompt depths in tokens for cold/warm prefill. Default 8192,32768,65536; "
        "256,1024,2048 on the embedded engine. Each plus 8 generated tokens must fit the metadata's context_limit.",
        items="integer"),
    Arg("prefill_runs", "integer", "Cold/warm-replay pairs per depth.", default=3),
    Arg("concurrency", "array", "Concurrency levels: streams released together by a barrier in each round.",
        items="integer", default=(1, 2, 4)),
    Arg("concurrency_runs", "integer", "Rounds per concurrency level.", default=3),
    Arg("concurrency_tokens", "integer", "max_tokens of each concurrency stream.", default=256),
    Arg("concurrency_workload", "string", "Workload the concurrency streams run.", default="code",
        choices=("code", "prose")),
    Arg("skip_prefill", "boolean", "Skip the prefill section (for servers with neither token-id prompts nor a "
        "tokenize endpoint).", default=False),
    Arg("skip_concurrency", "boolean", "Skip the concurrency section.", default=False),
    Arg("seed", "integer", "The sampling seed sent with every chat request (concurrency stream k gets seed + k − 1).",
        default=DEFAULT_SEED),
    Arg("output", "string", "Also write the receipt JSON here (it is always in <run-dir>/appliance/receipt.json)."),
    Arg("run_dir", "string", "Run directory (default: runs/<run-id>)."),
)


def _positive(a: dict[str, Any], name: str) -> None:
    v = a.get(name)
    if v is not None and v < 1:
        raise OpError(f"--{name.replace('_', '-')} must be ≥ 1, got {v}")


def settings_from_args(a: dict[str, Any], embedded: bool) -> ApplianceSettings:
    """Validate the flags into ApplianceSettings (before anything is sent).

    Raises:
        OpError: a non-positive count or depth, an --extra-body that overrides a field the receipt fixes.
    """
    for name in ("runs", "decode_tokens", "prefill_runs", "concurrency_runs", "concurrency_tokens"):
        _positive(a, name)
    defaults = _DEFAULTS["embedded" if embedded else "url"]
    depths = list(a.get("prefill_depths") or defaults["prefill_depths"])
    levels = list(a.get("concurrency") or (1, 2, 4))
    for flag, vals in (("--prefill-depths", depths), ("--concurrency", levels)):
        if any(v < 1 for v in vals):
            raise OpError(f"{flag} takes positive integers, got {','.join(map(str, vals))}")
        if len(set(vals)) != len(vals):
            raise OpError(f"{flag} lists a value twice ({','.join(map(str, vals))}): each is measured once, give it "
                          "once (a repeated flag adds to the list)")
    check_client_args(a["timeout"])
    extra = parse_json_object(a.get("extra_body"), "--extra-body")
    refused = sorted(PROTECTED_FIELDS.intersection(extra))
    if refused:
        raise OpError(f"--extra-body cannot override fields the receipt fixes: {', '.join(refused)}")
    kwargs = template_kwargs(extra, a.get("chat_template_kwargs"))
    if kwargs:
        extra["chat_template_kwargs"] = kwargs
    skipped = {}
    if a.get("skip_prefill"):
        skipped["prefill"] = "--skip-prefill"
    if a.get("skip_concurrency"):
        skipped["concurrency"] = "--skip-concurrency"
    return ApplianceSettings(
        runs=a.get("runs") or defaults["runs"], decode_tokens=a.get("decode_tokens") or defaults["decode_tokens"],
        seed=a["seed"], extra_body=extra, prefill_depths=[] if a.get("skip_prefill") else depths,
        prefill_runs=a["prefill_runs"], concurrency=[] if a.get("skip_concurrency") else levels,
        concurrency_runs=a["concurrency_runs"], concurrency_tokens=a["concurrency_tokens"],
        concurrency_workload=a["concurrency_workload"], timeout_s=a["timeout"], skipped=skipped)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def embedded_metadata() -> dict[str, Any]:
    """Metadata for the embedded engine, filled in from what inferencekit starts (nothing is guessed but
    competing traffic, which is stated as undeclared with the load average at the start)."""
    gguf = embedded_gguf()
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        mem = ""
    return {
        "hardware": f"{_cpu_model()} ({os.cpu_count()} logical CPUs{mem}), no accelerator",
        "topology": f"one {EMBEDDED_ENGINE} process on this machine, {os.cpu_count()} threads, requests served one "
                    "at a time",
        "model": "SmolLM2-135M-Instruct", "model_revision": f"{MODEL_PACKAGE} {md.version(MODEL_PACKAGE)}, "
                                                            f"{gguf.name} sha256 {sha256_file(gguf)}",
        "quantisation": "Q4_1 (GGUF)", "kv_cache_dtype": "f16 (llama.cpp default)",
        "serving_engine": f"{EMBEDDED_ENGINE} {md.version('llama_cpp_python')}", "context_limit": EMBEDDED_CONTEXT,
        "competing_traffic": f"undeclared: the embedded engine shares this machine with inferencekit's client "
                             f"(1-minute load average at start {os.getloadavg()[0]:.2f})",
    }


def resolve_metadata(path: str | None, settings: ApplianceSettings) -> tuple[dict[str, Any], str]:
    """``(metadata, source)``: the file at ``path``, else the embedded engine's; depths checked against its
    context_limit.

    Raises:
        OpError: a bad metadata file, or a prefill depth that does not fit the context limit.
    """
    if path:
        metadata, source = load_metadata(path), "file"
    else:
        metadata, source = check_metadata(embedded_metadata(), "embedded metadata"), "embedded engine"
    if settings.prefill_depths:
        check_prefill_depths(settings.prefill_depths, metadata["context_limit"], PREFILL_TOKENS)
    return metadata, source


def _safe_label(label: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip(".-")
    if not out:
        raise OpError("--label must contain a letter or a digit")
    return out


@operation(("bench", "appliance"), "Appliance receipt: decode workloads, exact cold/warm prefill, concurrency rounds.",
           description="Measures one serving appliance as RigMark does: three decode workloads (code, prose, a "
                       "50-object JSON array) with completion gates; cold and immediately replayed warm prefill at "
                       "exact token depths, the cold request provably missing the cache where the engine allows it; "
                       "and concurrency rounds whose streams a barrier releases together. Writes a receipt JSON "
                       "(docs/appliance.md), a card, and an `appliance` evidence record. Exit 0 when every sample "
                       "was usable and every completion gate passed, 3 (UNPROVEN) otherwise.",
           example="inferencekit bench appliance --base-url http://127.0.0.1:8080 --label box-a --comparison-id "
                   "sweep-2026-11 --metadata appliance.json --runs 2 --decode-tokens 1024 --prefill-depths 256,1024",
           args=[*CLIENT_ARGS, *APPLIANCE_ARGS])
def bench_appliance(call: Call, **a: Any) -> Outcome:
    base_url = a.get("base_url")
    if base_url:
        normalize_base_url(base_url)
    read_api_key(a.get("api_key_env"))
    _safe_label(a["label"])
    if not a["comparison_id"].strip():
        raise OpError("--comparison-id must not be empty")
    settings = settings_from_args(a, embedded=not base_url)
    if not a.get("metadata") and base_url:
        raise OpError("--metadata FILE is required with --base-url (write one with `inferencekit bench configure`)")
    metadata, source = resolve_metadata(a.get("metadata"), settings)
    if a.get("output") and Path(a["output"]).is_dir():
        raise OpError(f"--output {a['output']} is a directory; give the receipt copy's file name")
    load_prompts()
    run = RunDir.create(a.get("run_dir"))
    run.update_run(operation=call.operation, command=list(call.argv),
                   target=normalize_base_url(base_url) if base_url else "embedded")
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            endpoint = Endpoint.parse(url, a.get("api_key_env"))
            receipt, record = asyncio.run(_appliance(call, a, endpoint, run, settings, metadata, source))
    except OpError:
        run.discard_if_empty()
        raise
    if a.get("output"):
        write_bytes(Path(a["output"]), receipt_path(run).read_bytes())
    from inferencekit.report.appliance_card import render_appliance

    def render(console: Any) -> None:
        render_appliance(console, receipt)
        console.print(f"receipt: {receipt_path(run)}" + (f" (copy: {a['output']})" if a.get("output") else ""))
        console.print(f"card: {run.path / 'appliance' / 'card.txt'}   evidence: {record['evidence_id']}")

    return Outcome({"evidence_id": record["evidence_id"], "run_dir": str(run.path), "receipt": str(receipt_path(run)),
                    "verdict": receipt["verdict"], "limitations": receipt["limitations"]}, receipt["verdict"], render)


async def _appliance(call: Call, a: dict[str, Any], endpoint: Endpoint, run: RunDir, settings: ApplianceSettings,
                     metadata: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async with Client(endpoint, timeout_s=settings.timeout_s) as client:
        info = await detect_engine(client, a.get("model"))
        run.pin("engine_identity", info.identity())
        run.pin("model", info.model)
        return await appliance_receipt(client, info, run, settings, label=a["label"], comparison_id=a["comparison_id"],
                                       metadata=metadata, metadata_source=source, api_key_env=a.get("api_key_env"),
                                       quiet=call.quiet, strict=True)


async def appliance_receipt(client: Client, info: EngineInfo, run: RunDir, settings: ApplianceSettings, *, label: str,
                            comparison_id: str, metadata: dict[str, Any], metadata_source: str,
                            api_key_env: str | None, quiet: bool, strict: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the receipt on an open client and write receipt, card and ``appliance`` record (bench appliance and
    verify --profile full).

    Everything that can be checked before generating is checked first (nothing is generated when one
    fails): prefill depths and decode tokens against the server's own context, the tokenize endpoint,
    the smallest depth against a sample's own prefix.

    Args:
        strict: prefill that cannot run on this engine is a user error (bench appliance: exit 2); otherwise
            (verify) the prefill section is skipped with the reason.

    Raises:
        OpError: ``strict`` and prefill cannot run; --decode-tokens does not fit the server's context; the
            smallest prefill depth is shorter than a sample's prefix.
    """
    def say(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    def cannot(section: str, problem: str, flag: str) -> None:
        if strict:
            raise OpError(f"{problem}; {flag}")
        setattr(settings, "prefill_depths" if section == "prefill" else "concurrency", [])
        settings.skipped[section] = problem

    prompts, _ = load_prompts()
    tok = EngineTokenizer(client, info.dialect) if info.dialect.tokenize_path else None
    col = Collector(client, info, run, tok, prompts, settings, comparison_id, say)
    ctx = info.context_tokens
    if settings.prefill_depths and ctx and max(settings.prefill_depths) + PREFILL_TOKENS > ctx:
        cannot("prefill", f"prefill depth {max(settings.prefill_depths)} + {PREFILL_TOKENS} generated tokens exceeds "
                          f"the server's own context of {ctx} tokens per request", "use smaller --prefill-depths")
    if ctx and settings.decode_tokens + _PROMPT_ALLOWANCE > ctx:
        raise OpError(f"--decode-tokens {settings.decode_tokens} plus the prompt (≈ {_PROMPT_ALLOWANCE} tokens) exceeds "
                      f"the server's own context of {ctx} tokens per request; use --decode-tokens ≤ "
                      f"{ctx - _PROMPT_ALLOWANCE}")
    if settings.prefill_depths and tok is None:
        cannot("prefill", f"prefill builds exact depths with the engine's tokenize endpoint, and {info.engine} has "
                          "none known", "pass --skip-prefill")
    if settings.prefill_depths:
        try:
            await col.preflight()
        except TokenizeError as e:
            cannot("prefill", f"the tokenize endpoint of {info.engine} does not answer ({e})", "pass --skip-prefill")
    if settings.prefill_depths:
        settings.prefill_cache_isolation = col.iso.description
    settings.decode_cache_isolation = col.iso.bypass_description
    run.update_run(appliance={"engine": info.to_dict(), "dialect": info.dialect.describe(), "api_key_env": api_key_env,
                              "settings": settings.to_json(), "label": label, "comparison_id": comparison_id})
    say(f"appliance receipt on {info.engine} {info.version or ''} ({info.model}); run dir {run.path}")
    receipt = await run_appliance(col, label=label, comparison_id=comparison_id, metadata=metadata,
                                  metadata_source=metadata_source, api_key_env=api_key_env)
    write_card(run, receipt)
    return receipt, appliance_record(run, receipt, info)
