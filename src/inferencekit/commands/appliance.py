"""``inferencekit bench appliance|compare|configure``: the appliance receipt, two receipts side by side, and the
metadata file the receipt needs."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencekit.api.body import parse_json_object
from inferencekit.api.client import Client
from inferencekit.api.detect import detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url
from inferencekit.bench.appliance import receipt_path
from inferencekit.bench.appliance_collect import ApplianceSettings, load_prompts
from inferencekit.bench.appliance_metadata import (
    REQUIRED_FIELDS,
    check_metadata,
    check_target,
    field_problems,
    write_metadata,
)
from inferencekit.bench.appliance_run import APPLIANCE_DEFAULTS, appliance_receipt, resolve_metadata, settings_from_args
from inferencekit.bench.compare import ABSENT, Difference, compare_receipts, receipt_differences, receipt_notes
from inferencekit.commands.serve_compare import compare_serve_runs, is_serve_run
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.evidence.receipt import load_receipt, receipt_integrity
from inferencekit.options import CLIENT_ARGS, check_client_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.appliance_card import render_appliance
from inferencekit.rundir import RunDir, write_bytes

__all__ = ["APPLIANCE_ARGS", "CONFIGURE_ARGS", "NOISE_RULE", "ask_missing", "bench_appliance", "bench_compare",
           "bench_configure", "render_compare"]

APPLIANCE_ARGS: tuple[Arg, ...] = (
    Arg("label", "string", "Name of this appliance in the receipt and the card, e.g. 'rack3-h100-vllm'.",
        required=True),
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
    Arg("prefill_runs", "integer", "Cold/warm-replay pairs per depth.", default=APPLIANCE_DEFAULTS["prefill_runs"]),
    Arg("concurrency", "array", "Concurrency levels: streams released together by a barrier in each round.",
        items="integer", default=APPLIANCE_DEFAULTS["concurrency"]),
    Arg("concurrency_runs", "integer", "Rounds per concurrency level.", default=APPLIANCE_DEFAULTS["concurrency_runs"]),
    Arg("concurrency_tokens", "integer", "max_tokens of each concurrency stream.",
        default=APPLIANCE_DEFAULTS["concurrency_tokens"]),
    Arg("concurrency_workload", "string", "Workload the concurrency streams run.",
        default=APPLIANCE_DEFAULTS["concurrency_workload"], choices=("code", "prose")),
    Arg("skip_prefill", "boolean", "Skip the prefill section (for servers with neither token-id prompts nor a "
        "tokenize endpoint).", default=APPLIANCE_DEFAULTS["skip_prefill"]),
    Arg("skip_concurrency", "boolean", "Skip the concurrency section.", default=APPLIANCE_DEFAULTS["skip_concurrency"]),
    Arg("seed", "integer", "The sampling seed sent with every chat request (concurrency stream k gets seed + k − 1).",
        default=APPLIANCE_DEFAULTS["seed"]),
    Arg("output", "string", "Also write the receipt JSON here (it is always in <run-dir>/appliance/receipt.json)."),
    Arg("run_dir", "string", "Run directory (default: runs/<run-id>)."),
)


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
    check_client_args(base_url, a.get("api_key_env"), a["timeout"])
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
    def render(console: Any) -> None:
        render_appliance(console, receipt)
        console.print(f"receipt: {receipt_path(run)}" + (f" (copy: {a['output']})" if a.get("output") else ""))
        console.print(f"card: {run.appliance_path('card.txt')}   evidence: {record['evidence_id']}")

    return Outcome({"evidence_id": record["evidence_id"], "run_dir": str(run.path), "receipt": str(receipt_path(run)),
                    "verdict": receipt["verdict"], "limitations": receipt["limitations"]}, receipt["verdict"], render)


async def _appliance(call: Call, a: dict[str, Any], endpoint: Endpoint, run: RunDir, settings: ApplianceSettings,
                     metadata: dict[str, Any], source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async with Client(endpoint, timeout_s=settings.timeout_s) as client:
        info = await detect_engine(client, a.get("model"))
        if a.get("model") is None and len(info.models) > 1:
            # a receipt names one model; the first listed is a guess the seed refused to make
            raise OpError(f"{endpoint.root}/v1/models lists {len(info.models)} models ({', '.join(info.models[:5])}"
                          f"{', …' if len(info.models) > 5 else ''}); pass --model to say which one the receipt is for")
        run.pin("engine_identity", info.identity())
        run.pin("model", info.model)
        return await appliance_receipt(client, info, run, settings, label=a["label"], comparison_id=a["comparison_id"],
                                       metadata=metadata, metadata_source=source, api_key_env=a.get("api_key_env"),
                                       quiet=call.quiet, strict=True)


# ---- bench compare

NOISE_RULE = ("B/A = B's median ÷ A's median (> 1: B is faster). Beyond noise = the run-to-run ranges "
              "[min, max] of A and B do not overlap; ranges that touch or overlap are within noise. "
              "Rates in tokens/s.")


def _value(v: Any) -> str:
    if v == ABSENT:
        return ABSENT
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _lines(diffs: list[Difference]) -> list[str]:
    return [f"  {d.field}: A={_value(d.a)}  B={_value(d.b)}" for d in diffs]


def _label(receipt: dict[str, Any], path: str) -> str:
    run = receipt.get("run")
    label = run.get("label") if isinstance(run, dict) else None
    return str(label) if label else Path(path).name


@operation(("bench", "compare"), "Compare two bench serve runs point by point, or two appliance receipts figure by "
           "figure (B against baseline A).",
           description="Two `bench serve` run directories: for each load point and headline figure (p50/p99 of "
                       "TTFT, TPOT, ITL, E2EL; output and request throughput; goodput) the ratio B/A across the "
                       "runs' repeats with its 95% interval, and a finding: 'B is 12% faster in TTFT p50 [8%, 15%]', "
                       "'no difference beyond noise (rules out more than ±X%)' (only with ≥ 3 repeats per run: "
                       "--repeats), or UNPROVEN with what the within-run intervals show. Runs measured differently "
                       "(prompt file, dataset, input and output lengths, ignore_eos, temperature, request fields, "
                       "SLO, load points) are refused with every differing field listed. "
                       "Two receipts of `bench appliance` (a receipt.json or its run directory): prints, "
                       "for each decode workload, prefill depth (cold and warm) and concurrency level present in "
                       "both, the median and run-to-run range of each side, the ratio B/A and whether the ranges "
                       "overlap (within noise) or not (beyond noise). Receipts measured differently (protocol, "
                       "prompts, comparison id, any setting but the prefill cache-isolation method, or a section "
                       "skipped on one side) are refused with every differing field listed, unless "
                       "--allow-mismatch is given. Engine, hardware, model and verdict differences are shown as "
                       "notes. No verdict: exit 0 when compared.",
           example="inferencekit bench compare runs/serve-before runs/serve-after",
           args=[Arg("a", "string", "A, the baseline: a bench serve run directory, or an appliance receipt (a "
                     "receipt.json or a run directory holding appliance/receipt.json).", required=True,
                     positional=True, metavar="A"),
                 Arg("b", "string", "B, compared against A: the same kind as A.", required=True, positional=True,
                     metavar="B"),
                 Arg("allow_mismatch", "boolean", "Compare even when the runs or receipts were measured differently; "
                     "the differences are printed on stderr as a warning and kept in the output.", default=False)])
def bench_compare(call: Call, *, a: str, b: str, allow_mismatch: bool = False) -> Outcome:
    serve_a, serve_b = is_serve_run(a), is_serve_run(b)
    if serve_a and serve_b:
        return compare_serve_runs(a, b, allow_mismatch=allow_mismatch)
    if serve_a or serve_b:
        run, other = (a, b) if serve_a else (b, a)
        raise OpError(f"{run} is a bench serve run directory but {other} is not: bench compare compares two bench "
                      "serve runs, or two appliance receipts")
    ra, rb = load_receipt(a), load_receipt(b)
    diffs = receipt_differences(ra, rb)
    if diffs and not allow_mismatch:
        head = (f"{a} and {b} were not measured alike; refusing to compare them "
                f"({len(diffs)} differing field{'s' if len(diffs) != 1 else ''}):")
        tail = ("Give --allow-mismatch to compare them anyway (the differences are then printed as a warning and "
                "kept in the output).")
        raise OpError("\n".join([head, *_lines(diffs), tail]))
    if diffs:
        head = "inferencekit: warning: the receipts were not measured alike (--allow-mismatch); these fields differ:"
        print("\n".join([head, *_lines(diffs)]), file=sys.stderr)
    notes = receipt_notes(ra, rb)
    rows = compare_receipts(ra, rb)
    checks = {side: receipt_integrity(path) for side, path in (("a", a), ("b", b))}
    for side, (status, msg) in checks.items():
        if status == "changed":
            print(f"inferencekit: warning: {side.upper()}: {msg}", file=sys.stderr)
    payload = {"a": {"label": _label(ra, a), "path": str(a), "integrity": checks["a"][0]},
               "b": {"label": _label(rb, b), "path": str(b), "integrity": checks["b"][0]},
               "differences": [d.to_dict() for d in diffs], "notes": [d.to_dict() for d in notes], "rows": rows}
    return Outcome(payload, None, lambda console: render_compare(console, payload))


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _cell(median: float | None, rng: list[float] | None) -> str:
    if median is None:
        return "—"
    if rng is None:
        return _fmt(median)
    return f"{_fmt(median)} ({_fmt(rng[0])}–{_fmt(rng[1])})"


def _noise(row: dict[str, Any]) -> tuple[str, str]:
    if row["a_range"] is None or row["b_range"] is None or row["beyond_noise"] is None:
        return "not judged", "dim"
    return ("beyond noise", "bold") if row["beyond_noise"] else ("within noise", "dim")


def render_compare(console: Any, payload: dict[str, Any]) -> None:
    """Draw the comparison table, the notes, any accepted mismatches and how ratio and noise are defined."""
    from rich.table import Table
    from rich.text import Text

    pa, pb = payload["a"], payload["b"]
    t = Table(title=f"bench compare — A: {pa['label']}  vs  B: {pb['label']} (tokens/s, median (min–max) over runs)",
              title_justify="left")
    for col in ("section", "key", "figure", "A median (min–max)", "B median (min–max)", "B/A", "noise"):
        t.add_column(col, justify="left" if col in ("section", "key", "figure", "noise") else "right")
    for row in payload["rows"]:
        ratio = "—" if row["ratio_b_over_a"] is None else f"{row['ratio_b_over_a']:.3f}×"
        noise, style = _noise(row)
        t.add_row(row["section"], row["key"], row["metric"].removesuffix("_tokens_per_second"),
                  _cell(row["a_median"], row["a_range"]), _cell(row["b_median"], row["b_range"]), ratio,
                  Text(noise, style=style))
    console.print(t)
    console.print(f"A: {pa['path']}   B: {pb['path']}", markup=False)
    if not payload["rows"]:
        console.print("no figure is present in both receipts", markup=False, style="yellow")
    for row in payload["rows"]:
        if row.get("note") and not row["note"].startswith("one pooled figure"):
            console.print(f"note: {row['section']} {row['key']} {row['metric']}: {row['note']}", markup=False,
                          style="yellow")
    for d in payload["notes"]:
        console.print(f"differs (noted, not refused): {d['field']}: A={_value(d['a'])}  B={_value(d['b'])}",
                      markup=False)
    for d in payload["differences"]:
        console.print(f"MISMATCH (allowed by --allow-mismatch): {d['field']}: A={_value(d['a'])}  "
                      f"B={_value(d['b'])}", markup=False, style="bold yellow")
    console.print(NOISE_RULE + " Pooled decode figures have no range: noise not judged.", markup=False,
                  style="dim")


# ---- bench configure

CONFIGURE_ARGS: tuple[Arg, ...] = (
    Arg("output", "string", "The metadata file to write.", default="appliance.json"),
    *(Arg(name, "integer" if name == "context_limit" else "string", text) for name, text in REQUIRED_FIELDS.items()),
    Arg("extra", "string", "JSON object of more fields to keep in the file, e.g. '{\"driver\": \"560.35\"}'; it "
        "cannot set the required fields (give those as their own flags)."),
    Arg("force", "boolean", "Overwrite an existing file.", default=False),
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached stdin
        return False


def _ask_on_stderr(prompt: str) -> str:
    """``input()`` with the prompt on stderr, so stdout stays one JSON document under --json."""
    print(prompt, end="", file=sys.stderr, flush=True)
    return input()


def _parse_answer(name: str, text: str) -> Any:
    text = text.strip()
    if name != "context_limit":
        return text
    try:
        return int(text.replace("_", ""))
    except ValueError:
        return text  # field_problems names it as not a whole number


def ask_missing(given: dict[str, Any], *, tty: bool, ask: Callable[[str], str] = _ask_on_stderr,
                say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[str, Any]:
    """The required fields in REQUIRED_FIELDS order: ``given``'s values, the rest asked for.

    With ``tty`` each missing field is explained through ``say`` and read with ``ask(prompt)``
    (a line, like ``input``); an answer that is empty, a placeholder or (for context_limit) not a
    whole number ≥ 1 is refused with the reason and asked again.

    Raises:
        OpError: a field is missing and ``tty`` is false (every missing flag named), or input ended
            or was interrupted before every field was answered.
    """
    missing = [f for f in REQUIRED_FIELDS if given.get(f) is None]
    if missing and not tty:
        raise OpError("missing " + ", ".join(_flag(f) for f in missing) + " (stdin is not a terminal, so they "
                      "cannot be asked for; give them as flags)")
    out: dict[str, Any] = {}
    for name, text in REQUIRED_FIELDS.items():
        if name not in missing:
            out[name] = given[name]
            continue
        say(f"{name}: {text}")
        while True:
            try:
                value = _parse_answer(name, ask(f"{name}> "))
            except (EOFError, KeyboardInterrupt):
                raise OpError(f"no answer for {name}; nothing was written") from None
            problems = field_problems(name, value)
            if not problems:
                out[name] = value
                break
            say(f"  refused: {'; '.join(problems)}; try again")
    return out


def parse_extra(text: str | None) -> dict[str, Any]:
    """The ``--extra`` JSON object (``{}`` when not given).

    Raises:
        OpError: not a JSON object, or it sets a required field (those have their own flags).
    """
    extra = parse_json_object(text, "--extra")
    clash = [k for k in extra if k in REQUIRED_FIELDS]
    if clash:
        raise OpError("--extra cannot set required fields (" + ", ".join(clash) + "); give them as "
                      + ", ".join(_flag(k) for k in clash))
    return extra


@operation(("bench", "configure"), "Write the appliance metadata file that bench appliance requires.",
           description="Writes the JSON file `bench appliance --metadata` reads: hardware, topology, model, "
                       "model_revision, quantisation, kv_cache_dtype, serving_engine, context_limit and "
                       "competing_traffic, plus any --extra fields. Fields left out are asked for when stdin "
                       "is a terminal; otherwise (CI, pipes) every one must be given as a flag. Placeholders "
                       "('CHANGE ME') and empty answers are refused; an existing file is kept unless --force.",
           example="inferencekit bench configure --hardware '1x NVIDIA H200 141GB' --topology 'single GPU, TP=1' "
                   "--model HuggingFaceTB/SmolLM2-135M-Instruct --model-revision 12fd25f --quantisation 'GGUF "
                   "Q4_1' --kv-cache-dtype fp16 --serving-engine 'llama.cpp b4100' --context-limit 8192 "
                   "--competing-traffic 'none: dedicated'",
           args=CONFIGURE_ARGS)
def bench_configure(call: Call, *, output: str, extra: str | None = None, force: bool = False,
                    ask: Callable[[str], str] | None = None, tty: bool | None = None, **given: Any) -> Outcome:
    """Collect, check and write the metadata file; ``ask``/``tty`` replace the terminal in tests."""
    path = Path(output)
    check_target(path, force)  # before any question is asked
    more = parse_extra(extra)
    unknown = set(given) - set(REQUIRED_FIELDS)
    if unknown:
        raise TypeError(f"bench_configure: unknown arguments {sorted(unknown)}")
    bad = [p for name, value in given.items() if value is not None for p in field_problems(name, value)]
    if bad:  # flags are checked before the first question
        raise OpError("; ".join(bad))
    fields = ask_missing(given, tty=_stdin_is_tty() if tty is None else tty, ask=ask or _ask_on_stderr)
    metadata = check_metadata({**fields, **more}, "metadata")
    write_metadata(path, metadata, force)

    def render(console: Any) -> None:
        console.print(f"wrote {path} ({len(metadata)} fields); use it with "
                      f"`inferencekit bench appliance --metadata {path}`", markup=False, highlight=False)

    return Outcome({"path": str(path), "metadata": metadata}, None, render)
