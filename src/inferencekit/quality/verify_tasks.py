"""The quality tasks as parts of ``inferencekit verify`` (standard: sampler check and a GSM8K subset; full: NIAH too).

Each function runs one task against the engine already serving at ``url``, in the verify run dir, and
returns ``(verdict, reason, records)``: the part's verdict (None for a measurement with no pass/fail:
GSM8K accuracy, the NIAH grid), one line saying what was measured, and the records it wrote. A task
that cannot run returns NOT RUN with the reason; it never raises for the engine's faults.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from inferencekit.api.body import body_policy
from inferencekit.data.gsm8k import load_gsm8k
from inferencekit.data.prompts import load_prompt_set
from inferencekit.errors import OpError
from inferencekit.quality.gsm8k_run import GSM_FIXED, gsm8k_settings, run_builtin
from inferencekit.quality.niah_run import NIAH_FIXED, run_niah
from inferencekit.quality.sampling_collect import SamplingPlan
from inferencekit.quality.sampling_run import DEFAULT_SETTINGS, OWN_FIELDS, run_sampling_check
from inferencekit.quality.sampling_sequential import draw_looks
from inferencekit.quality.trajectory import select_prompts
from inferencekit.rundir import RunDir

__all__ = ["TaskSizes", "gsm8k_task", "niah_task", "sampler_task"]

Result = tuple[str | None, str, list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class TaskSizes:
    """How large each task is in one profile: sampler prompts × draws and its margin, the GSM8K time budget
    and token budget, and the NIAH grid (empty: not in the profile)."""

    sampler_prompts: int = 16
    sampler_seeds: int = 64
    sampler_margin: float = 0.05
    gsm8k_budget_s: float = 240.0
    gsm8k_max_tokens: int = 512
    niah_lengths: tuple[int, ...] = ()
    niah_depths: tuple[float, ...] = (0.1, 0.5, 0.9)
    niah_trials: int = 3


def _measured(rec: dict[str, Any]) -> Result:
    """A measurement's part: no verdict of its own, UNPROVEN when requests failed (missing evidence)."""
    failed = rec["data"]["failed"]
    if failed:
        return "UNPROVEN", f"{failed} requests failed; {rec['summary']}", [rec]
    return None, f"informational: a measurement, no pass/fail; {rec['summary']}", [rec]


def sampler_task(url: str, run: RunDir, sizes: TaskSizes, *, label: str, model: str | None, api_key_env: str | None,
                 timeout: float, extra_body: dict[str, Any], ctk: dict[str, Any], quiet: bool,
                 fixed: bool = False) -> Result:
    """``quality sampling`` with its default settings (temperature 1, top_k 20, top_p 1, min_p 0; --extra-body's
    fields over them) on ``sizes.sampler_prompts`` dev prompts × ``sizes.sampler_seeds`` draws at most: drawn in
    rounds and stopped once decided (``quality/sampling_sequential.py``), every draw with ``fixed``."""
    policy = body_policy(extra_body, ctk, fixed=OWN_FIELDS, operation="quality sampling")
    pset = load_prompt_set("dev")
    prompts = select_prompts(pset.prompts, sizes.sampler_prompts)
    plan = SamplingPlan(send={**DEFAULT_SETTINGS, **policy.extra}, seeds=sizes.sampler_seeds,
                        ctk=policy.chat_template_kwargs, notes=policy.limitations(),
                        looks=() if fixed else draw_looks(sizes.sampler_seeds))
    try:
        rec = run_sampling_check(url, run, prompts, plan, label=label, model=model, api_key_env=api_key_env,
                                 timeout=timeout, margin=sizes.sampler_margin, resamples=2000, bootstrap_seed=0,
                                 prompts_info={**pset.describe(), "selected": [p.id for p in prompts]}, quiet=quiet)
    except (OpError, ValueError) as e:
        return "NOT RUN", str(e), []
    d = rec["data"]
    seq = d.get("sequential")
    drawn = (f"{seq['draws_per_prompt']} of at most {sizes.sampler_seeds} draws, stopped at look {seq['look']}"
             if seq else f"{sizes.sampler_seeds} draws")
    return d["verdict"], f"{d['reason']} ({len(prompts)} prompts × {drawn}; {d['requests']} requests)", [rec]


def gsm8k_task(url: str, run: RunDir, sizes: TaskSizes, *, label: str, model: str | None, api_key_env: str | None,
               timeout: float, extra_body: dict[str, Any], ctk: dict[str, Any], quiet: bool) -> Result:
    """``quality gsm8k`` over the packaged test split in order, concurrency from the server, stopped by
    ``sizes.gsm8k_budget_s``: the subset that fits is recorded as such."""
    policy = body_policy(extra_body, ctk, fixed=GSM_FIXED, operation="quality gsm8k")
    data = load_gsm8k(None)
    s = gsm8k_settings(data, max_tokens=sizes.gsm8k_max_tokens, ctk=policy.chat_template_kwargs or None,
                       backend="builtin", seed=0)
    try:
        rec = run_builtin(url, run, data, list(data.items), s, policy.extra, None, label=label, model=model,
                          api_key_env=api_key_env, timeout=timeout, concurrency=0,
                          deadline=time.monotonic() + sizes.gsm8k_budget_s, budget=sizes.gsm8k_budget_s, quiet=quiet,
                          notes=policy.limitations())
    except OpError as e:
        return "NOT RUN", str(e), []
    return _measured(rec)


def niah_task(url: str, run: RunDir, sizes: TaskSizes, *, label: str, model: str | None, api_key_env: str | None,
              timeout: float, extra_body: dict[str, Any], ctk: dict[str, Any], quiet: bool) -> Result:
    """``quality niah`` on the profile's grid (``sizes.niah_lengths`` × depths × trials), greedy, one at a time."""
    policy = body_policy(extra_body, ctk, fixed=NIAH_FIXED, operation="quality niah")
    s = {"lengths": list(sizes.niah_lengths), "depths": list(sizes.niah_depths), "trials": sizes.niah_trials,
         "max_tokens": 32, "seed": 0, "concurrency": 1, "temperature": 0.0,
         "chat_template_kwargs": policy.chat_template_kwargs or None}
    try:
        rec = run_niah(url, None, run, s, policy.extra, label=label, model=model, api_key_env=api_key_env,
                       timeout=timeout, quiet=quiet, notes=policy.limitations())
    except OpError as e:
        return "NOT RUN", str(e), []
    return _measured(rec)
