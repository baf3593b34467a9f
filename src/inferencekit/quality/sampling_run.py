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
from inferencekit.api.endpoint import Endpoint
from inferencekit.data.prompts import Prompt
from inferencekit.evidence import artifact, metric
from inferencekit.quality.sampling import DEFAULT_ORDERS, judge_sampling, sampling_settings, tv_between
from inferencekit.quality.sampling_collect import FORMAT, SamplingPlan, collect_side
from inferencekit.quality.sampling_sequential import TOP_BETA, describe_rule, judge_look
from inferencekit.quality.task_run import save_task_record, write_new
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir, safe_name

__all__ = ["DEFAULT_SETTINGS", "run_sampling_check", "sampling_fallbacks"]

DEFAULT_SETTINGS = {"temperature": 1.0, "top_k": 20, "top_p": 1.0, "min_p": 0.0}
"""Sent unless changed: a kept set the top-20 list provably holds (top-k 20), every filter stated, so an engine's
own defaults (llama.cpp: top_k 40, top_p 0.95, min_p 0.05) never apply unseen."""
SAMPLING_FIELDS = tuple(DEFAULT_SETTINGS)
OWN_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "seed", "stream", "n", "logprobs",
              "top_logprobs", "stream_options", "return_token_ids", "return_tokens_as_token_ids", "return_tokens",
              "verbose"}


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


def _judge(got: dict[str, Any], prompts: list[Prompt], plan: SamplingPlan, kw: dict[str, Any]) -> dict[str, Any]:
    """The side's verdict: the fixed judgement, or (sequential) the judgement at the look the rounds stopped at."""
    per = _per_prompt(got, prompts)
    if not plan.looks:
        return judge_sampling(per, **kw)
    look = max(len(got["looks_run"]) - 1, 0)
    res, _ = judge_look(per, looks=plan.looks, look=look, **{k: v for k, v in kw.items() if k != "n_seeds"})
    res["sequential"].update(rule=describe_rule(len(prompts), plan.seeds, plan.looks), looks_run=got["looks_run"],
                             requests=got["requests"])
    return res


async def _side(url: str, model: str | None, api_key_env: str | None, timeout: float, prompts: list[Prompt],
                plan: SamplingPlan, run: RunDir, label: str | None, quiet: bool, kw: dict[str, Any]
                ) -> tuple[dict[str, Any], EngineInfo, str]:
    async with Client(Endpoint.parse(url, api_key_env), timeout_s=timeout) as client:
        info = await detect_engine(client, model)
        name = label or info.engine
        safe_name(name, "--label")
        with ProgressBar(quiet) as bar:
            bar.on_level(f"sampler check ({name}: {len(prompts)} prompts × {plan.seeds} draws)", len(prompts))
            def decide(rows: dict[str, dict[str, Any]], look: int) -> tuple[bool, dict[str, Any]]:
                per = _per_prompt({"rows": rows, "repeats": {}}, prompts)
                res, stop = judge_look(per, looks=plan.looks, look=look,
                                       **{k: v for k, v in kw.items() if k != "n_seeds"})
                return stop, look_shown(res)

            got = await collect_side(client, info, prompts, plan, run.quality_dir("sampling", name),
                                     on_done=lambda r: bar.on_done("s", not r["errors"]), decide=decide)
    return got, info, name


def look_shown(res: dict[str, Any]) -> dict[str, Any]:
    """What one look showed, for its state in ``looks_run``: the verdict, the TV interval and the informative
    prompts behind it, the out-of-support count, the SPRT's state and the top-share test's ln LR (None when the
    look did not run it)."""
    tv, oos = res["checks"]["excess_tv"], res["checks"]["out_of_support"]
    seq = res.get("sequential") or {}
    sprt, top = seq.get("oos_sprt") or {}, seq.get("top_share_sprt") or {}
    return {"verdict": res["verdict"], "excess_tv_ci": tv["ci95"], "informative_prompts": tv["n_prompts"],
            "out_of_support": [oos["draws"], oos["of"]], "sprt": sprt.get("decision"), "top_share_llr": top.get("llr")}


def sampling_fallbacks(got: dict[str, Any], plan: SamplingPlan) -> list[str]:
    """The sampler check's limitations that changed what was measured: the refused ``--extra-body`` fields
    (``plan.notes``) and a server that lists fewer alternatives than asked (``got["top_logprobs"]`` below
    ``plan.top_logprobs``: fewer prompts can be judged). ``verify --strict`` does not let a PASS rest on one."""
    out = list(plan.notes)
    if got["top_logprobs"] < plan.top_logprobs:
        out.append(f"the server lists at most {got['top_logprobs']} alternatives (asked {plan.top_logprobs}): "
                   "fewer prompts can be judged")
    return out


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
    out += [x for x in sampling_fallbacks(got, plan) if x not in plan.notes]
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
    if got.get("verbose_draws"):
        out.append(f"{got['verbose_draws']} draw(s) streamed no logprob entry (a token that ends inside a UTF-8 "
                   "character, held back by llama-server): their ids come from the same reply's __verbose.tokens "
                   "(return_tokens, verbose)")
    seq = res.get("sequential")
    if seq:
        out.append(f"sequential: drawn in rounds up to {seq['looks']} draws per prompt, stopped at look {seq['look']} "
                   f"({seq['draws_per_prompt']} draws per prompt, {seq['why']}); the TV interval is at "
                   f"{seq['confidence']:.2%} (α {seq['rule']['alpha']:g} split over {len(seq['looks'])} looks) and "
                   "out-of-support is Wald's SPRT (honest ≤ 0.5%, cheat ≥ 3%); --fixed draws every seed")
        top = seq.get("top_share_sprt")
        if seq["look"] < len(seq["looks"]) and res["verdict"] == "PASS" and top:
            out.append(f"an early PASS comes from the top-share test alone (ln LR {top['llr']:.2f} of the smallest "
                       f"cheat, {top['q']:.3f} of each prompt's mass moved to its top token, over honest; PASS at "
                       f"≤ ln {TOP_BETA:g}, Ville's inequality): it rules out that cheat, not an error of another "
                       "shape of the same TV, which only the interval at the cap judges (--fixed)")
    stage = got.get("seed_stage")
    if stage:
        out.append(f"sequential seed check: one repeat per prompt first, the other seeds only when that does not "
                   f"settle it: {stage['why']}")
    out.append(f"the margin bounds the mean excess TV, not the sampler's own error (the excess grows about with the "
               f"square of a small error): {_drawn(res, plan)} draws × {n_asked} prompts")
    return out


def _drawn(res: dict[str, Any], plan: SamplingPlan) -> int:
    """Draws per prompt the verdict rests on: the seeds, or a sequential side's draws at its stop."""
    return int((res.get("sequential") or {}).get("draws_per_prompt", plan.seeds))


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
    cov = f"{tv.get('confidence', 0.95) * 100:.4g}%"
    text = (f"{label}: {res['verdict']}: first-token draws vs the server's own logprobs — mean TV "
            f"{_fmt(tv['mean_tv'], '.4f')}, expected {_fmt(tv['mean_tv_expected'], '.4f')}, "
            f"excess {_fmt(tv['excess'])} "
            f"({cov} CI {_fmt(lo)} to {_fmt(hi)}, margin {tv['margin']:g}) over {tv['n_prompts']} informative "
            "prompts × "
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
    ``quality_task`` record, and return the record. The record's verdict is the first server's. ``plan.looks``
    set: the draws go in rounds and stop once decided (``quality/sampling_sequential.py``); the record's
    ``data.sequential`` then states the rule, each look run and why it stopped."""
    kw: dict[str, Any] = {"sampling": plan.send, "margin": margin, "resamples": resamples, "seed": bootstrap_seed,
                          "n_seeds": plan.seeds, "order": DEFAULT_ORDERS}
    got, info, name = asyncio.run(_side(url, model, api_key_env, timeout, prompts, plan, run, label, quiet, kw))
    res = _judge(got, prompts, plan, kw)
    res["checks"]["settings"]["binned_by"] = ("id" if any(isinstance(k, int) for r in got["rows"].values()
                                                          for k, _ in r["top"] or []) else "text")
    base = cross = None
    if baseline_url:
        bgot, _, _ = asyncio.run(_side(baseline_url, baseline_model or model, baseline_api_key_env or api_key_env,
                                       timeout, prompts, plan, run, f"{name}-baseline", quiet, kw))
        base = _judge(bgot, prompts, plan, kw)
        cross = _cross(res, base)
    _, unsent = sampling_settings(plan.send)
    out = write_new(run.quality_file("sampling", f"{name}.json"), orjson.dumps({"format": FORMAT, "label": name,
                     "engine": info.identity(), "verdict": res["verdict"],
                     "reason": res["reason"], "settings": {"send": plan.send, "not_sent": unsent, "seeds": plan.seeds,
                                                          "top_logprobs": got["top_logprobs"], "margin": margin,
                                                          "concurrency": plan.concurrency},
                     "prompts": prompts_info, "result": res, "baseline": base, "cross_server": cross},
                    option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    lim = _limitations(res, got, plan, unsent=unsent, n_asked=len(prompts), base=base) + list(plan.notes)
    fallbacks = sampling_fallbacks(got, plan)
    failed = sum(1 for r in got["rows"].values() if r["errors"])
    return save_task_record(
        run, task="sampling", label=name, summary=_summary(name, res, _drawn(res, plan), base)[:600],
        engine=info.identity(), model=str(info.model),
        workload={"prompts": prompts_info, "seeds": plan.seeds, "max_tokens": 1, "sampling": plan.send,
                  "concurrency": plan.concurrency},
        metrics=_metrics(res, name, got["requests"]), artifacts=[artifact(out, run.path, "sampling_results")],
        missing=["samples"] if failed else [], limitations=lim, verdict=res["verdict"], claim_class="derived",
        fallbacks=fallbacks,
        data={"verdict": res["verdict"], "reason": res["reason"], "sent": plan.send, "checks": res["checks"],
              "dropped": res["dropped"],
              "dropped_why": res["dropped_why"], "n_prompts": res["n_prompts"], "n_informative": res["n_informative"],
              "seed_check": res["seed_check"], "not_sent": unsent, "results_file": out.relative_to(run.path).as_posix(),
              "requests": got["requests"], "failed_prompts": failed, "sequential": res.get("sequential"),
              "seed_stage": got.get("seed_stage"),
              "baseline": ({"url": baseline_url, "verdict": base["verdict"], "reason": base["reason"],
                            "checks": base["checks"]} if base else None),
              "cross_server": ({k: v for k, v in cross.items() if k != "per_prompt"} if cross else None)})


