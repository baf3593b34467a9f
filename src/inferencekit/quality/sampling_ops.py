"""``inferencekit quality sampling``: do an engine's seeded draws follow its own first-token logprobs?

Collect: ``quality/sampling_collect.py``; judge: ``quality/sampling.py``. Writes under the run dir
``quality/sampling/<label>/<prompt id>.json`` (each prompt's lists and draws, as it completes),
``quality/sampling/<label>.json`` (the judged rows, histograms and verdicts) and a ``quality_task`` record.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.data.prompts import Prompt, load_prompt_set
from inferencekit.engines.target import serve_target
from inferencekit.errors import OpError
from inferencekit.evidence import artifact, metric
from inferencekit.options import CLIENT_ARGS, check_client_args, parse_json_object, split_extra_body, template_kwargs
from inferencekit.quality.sampling import (DEFAULT_ORDERS, MIN_PROMPTS, judge_sampling, sampling_settings,
                                           tv_between)
from inferencekit.quality.sampling_collect import FORMAT, SamplingPlan, collect_side
from inferencekit.quality.task_run import open_task_run, save_task_record, write_new
from inferencekit.quality.trajectory import select_prompts
from inferencekit.quality.trajectory_ops import print_tail
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, safe_name

__all__ = ["DEFAULT_SETTINGS", "quality_sampling", "run_sampling_check"]

DEFAULT_SETTINGS = {"temperature": 1.0, "top_k": 20, "top_p": 1.0, "min_p": 0.0}
"""Sent unless changed: a kept set the top-20 list provably holds (top-k 20), every filter stated, so an engine's
own defaults (llama.cpp: top_k 40, top_p 0.95, min_p 0.05) never apply unseen."""
SAMPLING_FIELDS = tuple(DEFAULT_SETTINGS)
OWN_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "seed", "stream", "n", "logprobs",
              "top_logprobs", "stream_options", "return_token_ids", "return_tokens_as_token_ids"}


def _per_prompt(got: dict[str, Any], prompts: list[Prompt]) -> list[dict[str, Any]]:
    out = []
    for p in prompts:
        row = got["rows"][p.id]
        out.append({"id": p.id, "bucket": p.bucket,
                    "top": {k: lp for k, lp in row["top"]} if row["top"] else None,
                    "top_again": {k: lp for k, lp in row["top_again"]} if row["top_again"] else None,
                    "draws": {int(s): k for s, k in row["draws"].items()},
                    "repeat": got["repeats"].get(p.id) or None,
                    "error": "; ".join(row["errors"][:3]) or None})
    return out


def _cross(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Information only: TV between the two servers' implied distributions on the prompts both could build."""
    other = {r["id"]: r for r in b["rows"] if "implied" in r}
    per = {r["id"]: tv_between(dict(map(tuple, r["implied"])), dict(map(tuple, other[r["id"]]["implied"])))
           for r in a["rows"] if "implied" in r and r["id"] in other}
    if not per:
        return {"n_prompts": 0, "mean": None, "max": None, "per_prompt": {}}
    worst = max(per, key=per.__getitem__)
    return {"n_prompts": len(per), "mean": sum(per.values()) / len(per), "max": per[worst], "max_prompt": worst,
            "per_prompt": per}


async def _side(url: str, model: str | None, api_key_env: str | None, timeout: float, prompts: list[Prompt],
                plan: SamplingPlan, run: RunDir, label: str | None, quiet: bool) -> tuple[dict[str, Any], EngineInfo, str]:
    async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
        info = await detect_engine(client, model)
        name = label or info.engine
        safe_name(name, "--label")
        with ProgressBar(quiet) as bar:
            bar.on_level(f"sampler check ({name}: {len(prompts)} prompts × {plan.seeds} draws)", len(prompts))
            got = await collect_side(client, info, prompts, plan, run.path / "quality" / "sampling" / name,
                                     on_done=lambda r: bar.on_done("s", not r["errors"]))
    return got, info, name


def _limitations(res: dict[str, Any], got: dict[str, Any], plan: SamplingPlan, *, unsent: list[str],
                 n_asked: int, base: dict[str, Any] | None) -> list[str]:
    out = list(res["notes"])
    if base is not None and base["verdict"] != "PASS":
        out.append(f"baseline {base['verdict']} on the same check: it is no reference for this sampler either "
                   f"({base['reason'][:300]})")
    out.append("self-consistency: the draws are tested against the server's own top-k log-probabilities, which must be "
               "raw (log-softmax before temperature and filters); whether those match the model is quality score's job")
    out.append("the first generated token only (max_tokens 1), at each prompt's full context")
    out.append("draws are asked with logprobs (one alternative) so the drawn token is named exactly as the list "
               "names it" + (": by token string, so tokens that print alike share a bin (which can only lower TV)"
                             if res["checks"]["settings"].get("binned_by") == "text" else ""))
    if got["top_logprobs"] < plan.top_logprobs:
        out.append(f"the server lists at most {got['top_logprobs']} alternatives (asked {plan.top_logprobs}): "
                   "fewer prompts can be judged")
    if got["refused"]:
        out.append(f"the server refused logprobs ({got['refused']}): nothing can be judged")
    sc = res["seed_check"]
    if sc["status"] == "ignored":
        out.append(f"the seed is not honoured ({sc['same']} of {sc['repeats']} repeats gave the same token, "
                   f"{sc['expected_same_if_ignored']:.0%} expected by chance): information only, unseeded draws are "
                   "still draws")
    if plan.concurrency > 1:
        out.append(f"concurrency {plan.concurrency}: a batched engine's logits change with the batch, so draws taken "
                   "beside other requests need not follow the logprobs of one request alone")
    if got["reused"]:
        out.append(f"{got['reused']} prompts kept from an earlier, interrupted run of the same requests")
    out.append(f"the margin bounds the mean excess TV, not the sampler's own error (the excess grows about with the "
               f"square of a small error): {plan.seeds} draws × {n_asked} prompts")
    return out


def _metrics(res: dict[str, Any], label: str, requests: int) -> list[dict[str, Any]]:
    tv, oos = res["checks"]["excess_tv"], res["checks"]["out_of_support"]
    n = tv["n_prompts"]
    return [metric("first_token_tv_excess", tv["excess"], "probability", "mean", n, ci95=tv["ci95"], subject=label),
            metric("first_token_tv", tv["mean_tv"], "probability", "mean", n, subject=label),
            metric("first_token_tv_expected", tv["mean_tv_expected"], "probability", "mean", n, subject=label),
            metric("first_token_out_of_support", oos["rate"], "fraction", "rate", oos["of"], ci95=oos["ci95"],
                   subject=label),
            metric("sampling_requests", requests, "requests", "count", requests, subject=label)]


def _fmt(x: float | None, spec: str = "+.4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _summary(label: str, res: dict[str, Any], seeds: int, base: dict[str, Any] | None) -> str:
    tv, oos = res["checks"]["excess_tv"], res["checks"]["out_of_support"]
    lo, hi = tv["ci95"]
    text = (f"{label}: {res['verdict']}: first-token draws vs the server's own logprobs — mean TV "
            f"{_fmt(tv['mean_tv'], '.4f')}, expected {_fmt(tv['mean_tv_expected'], '.4f')}, excess {_fmt(tv['excess'])} "
            f"(95% CI {_fmt(lo)} to {_fmt(hi)}, margin {tv['margin']:g}) over {tv['n_prompts']} informative prompts × "
            f"{seeds} draws; {oos['draws']} of {oos['of']} draws outside the kept tokens; seed "
            f"{res['seed_check']['status']}")
    if base is not None:
        text += f"; baseline {base['verdict']}"
    return text


def run_sampling_check(url: str, run: RunDir, prompts: list[Prompt], plan: SamplingPlan, *, label: str | None,
                       model: str | None, api_key_env: str | None, timeout: float, margin: float, resamples: int,
                       bootstrap_seed: int, baseline_url: str | None = None, baseline_model: str | None = None,
                       baseline_api_key_env: str | None = None, prompts_info: dict[str, Any],
                       quiet: bool = False) -> dict[str, Any]:
    """Collect and judge one server (and the optional baseline, the same way); write the results file and the
    ``quality_task`` record, and return the record. The record's verdict is the first server's."""
    got, info, name = asyncio.run(_side(url, model, api_key_env, timeout, prompts, plan, run, label, quiet))
    kw = {"sampling": plan.send, "margin": margin, "resamples": resamples, "seed": bootstrap_seed,
          "n_seeds": plan.seeds, "order": DEFAULT_ORDERS}
    res = judge_sampling(_per_prompt(got, prompts), **kw)
    res["checks"]["settings"]["binned_by"] = ("id" if any(isinstance(k, int) for r in got["rows"].values()
                                                          for k, _ in r["top"] or []) else "text")
    base = cross = None
    if baseline_url:
        bgot, _, _ = asyncio.run(_side(baseline_url, baseline_model or model, baseline_api_key_env or api_key_env,
                                       timeout, prompts, plan, run, f"{name}-baseline", quiet))
        base = judge_sampling(_per_prompt(bgot, prompts), **kw)
        cross = _cross(res, base)
    _, unsent = sampling_settings(plan.send)
    out = write_new(run.path / "quality" / "sampling" / f"{name}.json", orjson.dumps({"format": FORMAT, "label": name, "engine": info.identity(), "verdict": res["verdict"],
                     "reason": res["reason"], "settings": {"send": plan.send, "not_sent": unsent, "seeds": plan.seeds,
                                                          "top_logprobs": got["top_logprobs"], "margin": margin,
                                                          "concurrency": plan.concurrency},
                     "prompts": prompts_info, "result": res, "baseline": base, "cross_server": cross},
                    option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    lim = _limitations(res, got, plan, unsent=unsent, n_asked=len(prompts), base=base)
    failed = sum(1 for r in got["rows"].values() if r["errors"])
    return save_task_record(
        run, task="sampling", label=name, summary=_summary(name, res, plan.seeds, base)[:600], engine=info.identity(),
        model=str(info.model),
        workload={"prompts": prompts_info, "seeds": plan.seeds, "max_tokens": 1, "sampling": plan.send,
                  "concurrency": plan.concurrency},
        metrics=_metrics(res, name, got["requests"]), artifacts=[artifact(out, run.path, "sampling_results")],
        missing=["samples"] if failed else [], limitations=lim, verdict=res["verdict"], claim_class="derived",
        data={"verdict": res["verdict"], "reason": res["reason"], "sent": plan.send, "checks": res["checks"], "dropped": res["dropped"],
              "dropped_why": res["dropped_why"], "n_prompts": res["n_prompts"], "n_informative": res["n_informative"],
              "seed_check": res["seed_check"], "not_sent": unsent, "results_file": out.relative_to(run.path).as_posix(),
              "requests": got["requests"], "failed_prompts": failed,
              "baseline": ({"url": baseline_url, "verdict": base["verdict"], "reason": base["reason"],
                            "checks": base["checks"]} if base else None),
              "cross_server": ({k: v for k, v in cross.items() if k != "per_prompt"} if cross else None)})


def _settings(extra: dict[str, Any], temperature: float | None, top_k: int | None, top_p: float | None,
              min_p: float | None, omit: list[str]) -> dict[str, Any]:
    flags = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    unknown = sorted(set(omit) - set(SAMPLING_FIELDS))
    if unknown:
        raise OpError(f"--omit names {', '.join(unknown)}; it takes {', '.join(SAMPLING_FIELDS)}")
    if "temperature" in omit:
        raise OpError("--omit temperature: the check needs the temperature it is asked with")
    both = sorted(k for k in omit if flags.get(k) is not None)
    if both:
        raise OpError(f"--{both[0].replace('_', '-')} is given and also named in --omit: send it or omit it, not both")
    send = {**DEFAULT_SETTINGS, **{k: v for k, v in extra.items()},
            **{k: v for k, v in flags.items() if v is not None}}
    for k in omit:
        send.pop(k, None)
    try:
        sampling_settings(send)
    except ValueError as e:
        raise OpError(f"sampling settings: {e}") from None
    if send["temperature"] <= 0:
        raise OpError("--temperature must be above 0: at temperature 0 there is no distribution to sample")
    return send


def render_sampling(console: Any, rec: dict[str, Any]) -> None:
    from rich.table import Table

    d = rec["data"]
    console.print(rec["summary"], markup=False, highlight=False)
    t = Table("check", "verdict", "figures")
    c = d["checks"]
    tv, oos, greedy = c["excess_tv"], c["out_of_support"], c["greedy_only"]
    t.add_row("excess TV", tv["verdict"], tv["reason"])
    t.add_row("out of support", oos["verdict"], f"{oos['draws']} of {oos['of']} draws outside the kept tokens")
    t.add_row("greedy only", greedy["verdict"], f"{greedy['greedy_draws']} of {greedy['draws']} draws were the top token")
    t.add_row("settings", c["settings"]["verdict"], ", ".join(c["settings"]["unmodelled"]) or "all modelled")
    console.print(t)
    if d["dropped"]:
        console.print("not judged for TV: " + "; ".join(f"{n} {k} ({d['dropped_why'][k]})" for k, n in d["dropped"].items()),
                      markup=False, highlight=False)
    console.print(f"verdict: {d['verdict']} — {d['reason']}", markup=False, highlight=False)
    print_tail(console, rec, f"results: {d['run_dir']}/{d['results_file']}   record: {rec['evidence_id']}")


@operation(("quality", "sampling"), "Sampler check: do the engine's seeded draws follow its own first-token logprobs "
           "under the sampling settings sent?",
           description="Per prompt: the top-20 first-token log-probabilities (asked before and after the draws, to "
                       "see they are stable), then S draws with seeds 0..S-1 at max_tokens 1 with the sampling "
                       "settings. The distribution those settings imply (temperature, top_k, top_p, min_p, under "
                       "every engine's filter order; prompts whose kept set is ambiguous are not judged) is compared "
                       "with the draws: mean excess TV (observed minus its exact expectation under correct sampling) "
                       "with a bootstrap 95% CI over prompts against --margin, draws outside the kept tokens (Wilson "
                       "bound), and an exact test that not every draw was the top token. A request field the check "
                       "does not model makes it UNPROVEN; a sampling field left unsent is named (the engine may apply "
                       "its own default). Sends temperature 1, top_k 20, top_p 1, min_p 0 unless told otherwise. "
                       "--baseline-url checks a second server the same way.",
           example="inferencekit quality sampling --n-prompts 16 --seeds 256 --run-dir runs/s1",
           args=[*CLIENT_ARGS,
                 Arg("label", "string", "Name of the server checked (default: the detected engine's name)."),
                 Arg("prompts", "string", "Prompt set: 'dev' or a .jsonl file.", default="dev"),
                 Arg("n_prompts", "integer", f"Prompts, taken in turn from each bucket ({MIN_PROMPTS} informative ones "
                     "are needed for a verdict).", default=16),
                 Arg("seeds", "integer", "Draws per prompt (seeds 0..S-1).", default=256),
                 Arg("temperature", "number", "Sampling temperature sent (default 1)."),
                 Arg("top_k", "integer", "top_k sent (default 20: a kept set the top-20 list provably holds)."),
                 Arg("top_p", "number", "top_p sent (default 1)."),
                 Arg("min_p", "number", "min_p sent (default 0)."),
                 Arg("omit", "array", "Sampling fields not to send (top_k, top_p, min_p), to see an engine's own "
                     "defaults at work.", items="string"),
                 Arg("margin", "number", "Pre-registered margin on the mean excess TV (probability mass).",
                     default=0.02),
                 Arg("resamples", "integer", "Bootstrap resamples over prompts.", default=10000),
                 Arg("bootstrap_seed", "integer", "Seed of the bootstrap's generator.", default=0),
                 Arg("concurrency", "integer", "Requests in flight (1: batching changes an engine's logits).",
                     default=1),
                 Arg("baseline_url", "string", "A second server checked the same way after the first (information: "
                     "the record's verdict is the first server's)."),
                 Arg("baseline_model", "string", "Model name on the baseline server (default: --model)."),
                 Arg("baseline_api_key_env", "string", "NAME of the environment variable with the baseline's API key."),
                 Arg("run_dir", "string", "Run directory (default: runs/<run-id>; an existing one is added to).")])
def quality_sampling(call: Call, base_url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                     timeout: float = 600.0, extra_body: str | None = None, chat_template_kwargs: str | None = None,
                     label: str | None = None, prompts: str = "dev", n_prompts: int = 16, seeds: int = 256,
                     temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                     min_p: float | None = None, omit: list[str] | None = None, margin: float = 0.02,
                     resamples: int = 10000, bootstrap_seed: int = 0, concurrency: int = 1,
                     baseline_url: str | None = None, baseline_model: str | None = None,
                     baseline_api_key_env: str | None = None, run_dir: str | None = None) -> Outcome:
    for u in (base_url, baseline_url):
        if u:
            normalize_base_url(u)
    read_api_key(api_key_env)
    read_api_key(baseline_api_key_env)
    check_client_args(timeout)
    for flag, value, low in (("--n-prompts", n_prompts, 2), ("--seeds", seeds, 2), ("--concurrency", concurrency, 1),
                             ("--resamples", resamples, 1)):
        if value < low:
            raise OpError(f"{flag} must be at least {low}, got {value}")
    if not 0 < margin <= 0.5:
        raise OpError(f"--margin must lie in (0, 0.5] (probability mass; TV is at most 1, so a wider margin "
                      f"passes anything), got {margin:g}")
    if label is not None:
        safe_name(label, "--label")
    extra_all = parse_json_object(extra_body, "--extra-body")
    extra, refused = split_extra_body(extra_all, OWN_FIELDS)
    if refused:
        raise OpError(f"--extra-body may not set {', '.join(refused)}: quality sampling sets "
                      f"{'it' if len(refused) == 1 else 'them'} itself")
    send = _settings(extra, temperature, top_k, top_p, min_p, list(omit or []))
    pset = load_prompt_set(prompts)
    chosen = select_prompts(pset.prompts, n_prompts)
    if len(chosen) < 2:
        raise OpError(f"prompt set {prompts!r} has {len(chosen)} chat prompt(s); the check needs at least 2")
    plan = SamplingPlan(send=send, seeds=seeds, concurrency=concurrency,
                        ctk=template_kwargs(extra_all, chat_template_kwargs))
    run = open_task_run(run_dir, call)
    info = {**pset.describe(), "selected": [p.id for p in chosen]}
    try:
        with serve_target(base_url, run.engine_dir, quiet=call.quiet) as (url, _):
            rec = run_sampling_check(url, run, chosen, plan, label=label, model=model, api_key_env=api_key_env,
                                     timeout=timeout, margin=margin, resamples=resamples, bootstrap_seed=bootstrap_seed,
                                     baseline_url=baseline_url, baseline_model=baseline_model,
                                     baseline_api_key_env=baseline_api_key_env, prompts_info=info, quiet=call.quiet)
    except OpError:
        run.discard_if_empty()
        raise
    d = rec["data"]
    payload = {"evidence_id": rec["evidence_id"], "run_dir": str(run.path), "label": d["label"],
               "verdict": d["verdict"], "reason": d["reason"], "sent": d["sent"], "checks": d["checks"], "dropped": d["dropped"],
               "n_informative": d["n_informative"], "seed_check": d["seed_check"], "not_sent": d["not_sent"],
               "results_file": str(run.path / d["results_file"]), "baseline": d["baseline"],
               "summary": rec["summary"], "limitations": rec["limitations"]}
    return Outcome(payload, d["verdict"], lambda console: render_sampling(console, rec))
