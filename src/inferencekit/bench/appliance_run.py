"""The appliance-receipt job (``bench appliance``, ``verify --profile full``): settings, metadata, the run.

RigMark's behaviour; the receipt format is in docs/appliance.md.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import EngineTokenizer, TokenizeError
from inferencekit.bench.appliance import appliance_record, run_appliance, write_card
from inferencekit.bench.appliance_collect import (
    PREFILL_TOKENS,
    PROTECTED_FIELDS,
    ApplianceSettings,
    Collector,
    load_prompts,
)
from inferencekit.bench.appliance_metadata import check_metadata, check_prefill_depths, load_metadata
from inferencekit.engines.model import MODEL_PACKAGE, embedded_gguf
from inferencekit.engines.recipes import DEFAULT_CONTEXT
from inferencekit.engines.target import EMBEDDED_ENGINE
from inferencekit.errors import OpError
from inferencekit.evidence import sha256_file
from inferencekit.rundir import RunDir

__all__ = ["APPLIANCE_DEFAULTS", "DEFAULT_SEED", "EMBEDDED_CONTEXT", "appliance_receipt", "embedded_metadata",
           "resolve_metadata", "settings_from_args"]

EMBEDDED_CONTEXT = DEFAULT_CONTEXT  # the embedded engine's n_ctx
DEFAULT_SEED = 20261130
_PROMPT_ALLOWANCE = 256  # tokens a decode prompt (system + nonce + workload, chat template) may take
# Defaults: RigMark's for a server you name; smaller ones that fit the embedded engine's 4096-token context.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "url": {"runs": 5, "decode_tokens": 8192, "prefill_depths": [8192, 32768, 65536]},
    "embedded": {"runs": 3, "decode_tokens": 1024, "prefill_depths": [256, 1024, 2048]}}
# The options whose default is one value whatever the target (bench appliance's flags show these).
APPLIANCE_DEFAULTS: dict[str, Any] = {
    "runs": None, "decode_tokens": None, "prefill_depths": None, "prefill_runs": 3, "concurrency": (1, 2, 4),
    "concurrency_runs": 3, "concurrency_tokens": 256, "concurrency_workload": "code", "skip_prefill": False,
    "skip_concurrency": False, "seed": DEFAULT_SEED}


def _positive(a: Mapping[str, Any], name: str) -> None:
    v = a.get(name)
    if v is not None and v < 1:
        raise OpError(f"--{name.replace('_', '-')} must be ≥ 1, got {v}")


def settings_from_args(a: Mapping[str, Any], embedded: bool) -> ApplianceSettings:
    """Check the receipt's options into ApplianceSettings (before anything is sent).

    Args:
        a: the options by name (``APPLIANCE_DEFAULTS`` for those not given; ``runs``, ``decode_tokens`` and
            ``prefill_depths`` None for the defaults of the target), with ``timeout``, ``extra_body`` and
            ``chat_template_kwargs`` as given.
        embedded: the target is the embedded engine (its smaller defaults).

    Raises:
        OpError: a non-positive count or depth, a depth or level listed twice, or an
            ``--extra-body`` that is not a JSON object. Fields ``--extra-body`` may not set are not sent, and
            the receipt's limitations say so (``api.body``).
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
    policy = body_policy(a.get("extra_body"), a.get("chat_template_kwargs"), fixed=PROTECTED_FIELDS,
                         operation="bench appliance")
    extra = dict(policy.extra)
    if policy.chat_template_kwargs:
        extra["chat_template_kwargs"] = dict(policy.chat_template_kwargs)
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
        concurrency_workload=a["concurrency_workload"], timeout_s=a["timeout"], skipped=skipped,
        notes=policy.limitations())


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


async def appliance_receipt(client: Client, info: EngineInfo, run: RunDir, settings: ApplianceSettings, *, label: str,
                            comparison_id: str, metadata: dict[str, Any], metadata_source: str,
                            api_key_env: str | None, quiet: bool, strict: bool
                            ) -> tuple[dict[str, Any], dict[str, Any]]:
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
        raise OpError(f"--decode-tokens {settings.decode_tokens} plus the prompt (≈ {_PROMPT_ALLOWANCE} tokens) "
                      f"exceeds the server's own context of {ctx} tokens per request; use --decode-tokens ≤ "
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
