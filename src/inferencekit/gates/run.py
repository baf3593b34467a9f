"""The gate-run jobs: send one gate run's probes, record them, and judge the run dir (``gates run``,
``gates spec-exact``, ``verify``).

Collect, then judge: the probes of one gate run go to ``probes/<gate-run>.jsonl`` in the run dir as
they finish (``gates/probes/collect.py``), and the verdicts come from ``check_run_dir`` on that run
dir — the very code ``gates check`` runs offline, so a recorded run re-judges to the same verdicts.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo, detect_engine
from inferencekit.api.endpoint import Endpoint
from inferencekit.api.tokenize import Tokenizer
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.gates import GATES, PLANNED_GATES, RUN_COMMAND_GATES
from inferencekit.gates.check import check_run_dir
from inferencekit.gates.judges.caching import echo_rule, sequential_states, timing_rule
from inferencekit.gates.probes.collect import ProbeLog, retokenize_probes, send_probes
from inferencekit.gates.probes.plan import (
    OPTIONAL_FIELDS,
    SAMPLING_FLOOR,
    ProbeSettings,
    plan_probes,
    probe_pool,
    prompts_needed,
)
from inferencekit.gates.probes.spec import send_spec_exact, spec_probes
from inferencekit.gates.record import gates_record
from inferencekit.gates.result import Gate
from inferencekit.report.progress import ProgressBar
from inferencekit.rundir import RunDir
from inferencekit.sequential import SprtState
from inferencekit.shapes import ProbeRecord, is_ok

__all__ = ["GateRunSettings", "default_gates", "gate_run_dir", "gate_run_id", "judge_gate_run", "pin_engine",
           "run_gate_probes", "size_probes"]


@dataclass(slots=True)
class GateRunSettings:
    """What one gate run sends and how it is judged (stored in the probe log's header)."""

    gates: list[str]
    probes: ProbeSettings
    threshold: float = 0.10
    reference_url: str | None = None
    spec_off_url: str | None = None
    spec_limit: int = 16
    spec_max_tokens: int = 128
    early_tokens: int = 32
    spec_tolerance: int = 0
    prompts: dict[str, Any] | None = None
    order: dict[str, Any] | None = None  # gates order: OrderSettings.to_json()
    contract: dict[str, Any] | None = None  # probe --contract: ContractSettings.to_json()
    request_policy: dict[str, Any] | None = None  # api.body.BodyPolicy.to_json(): what --extra-body added or lost

    def header(self) -> dict[str, Any]:
        out = {"gates": self.gates, "probes": self.probes.to_json(), "threshold": self.threshold,
               "reference_url": self.reference_url, "spec_off_url": self.spec_off_url, "spec_limit": self.spec_limit,
               "spec_max_tokens": self.spec_max_tokens, "early_tokens": self.early_tokens,
               "spec_tolerance": self.spec_tolerance, "prompts": self.prompts}
        if self.order is not None:
            out["order"] = self.order
        if self.contract is not None:
            out["contract"] = self.contract
        if self.request_policy is not None:
            out["request_policy"] = self.request_policy
        return out


class CachingStop:
    """The caching gate's sequential stop during one gate run (``gates/judges/caching.py`` ``sequential_states``):
    after each answered caching probe the two rules are re-judged on everything answered so far; once a family's
    rule reaches a boundary, its unsent pairs are skipped (a pair whose first request went out is completed).
    ``record()`` is the probe log's ``sequential`` line, which the judge reads back."""

    FAMILY = {"cache_first": "timing", "cache_repeat": "timing", "cache_control_a": "timing",
              "cache_control_b": "timing", "echo_orig": "echo", "echo_perturbed": "echo"}
    OPENS = ("cache_first", "cache_control_a", "echo_orig")

    def __init__(self, s: GateRunSettings) -> None:
        self.threshold = s.threshold
        self.caps = {"timing": s.probes.cache_prompts, "echo": s.probes.echo_pairs}
        self.controls = s.probes.cache_controls
        self.answered: list[ProbeRecord] = []
        self.opened: set[tuple[str, str]] = set()
        self.stopped: dict[str, dict[str, Any]] = {}
        self.skipped = {"timing": 0, "echo": 0}

    def _states(self) -> dict[str, SprtState]:
        return sequential_states(self.answered, self.threshold, self.caps["timing"], self.caps["echo"],
                                 controls_planned=self.controls)

    def on_done(self, rec: ProbeRecord) -> None:
        if rec.get("kind") not in self.FAMILY:
            return
        self.answered.append(rec)
        for fam, st in self._states().items():
            if st.decision in ("PASS", "FAIL") and fam not in self.stopped:
                self.stopped[fam] = st.to_json()

    def skip(self, p: ProbeRecord) -> bool:
        fam = self.FAMILY.get(p["kind"])
        if fam is None:
            return False
        if p["kind"] in self.OPENS:
            if fam in self.stopped:
                self.skipped[fam] += 1
                return True
            self.opened.add((fam, str(p["key"])))
            return False
        if (fam, str(p["key"])) in self.opened:
            return False
        self.skipped[fam] += 1
        return True

    def record(self) -> dict[str, Any]:
        rules = {"timing": timing_rule(self.caps["timing"]), "echo": echo_rule(self.caps["echo"])}
        return {"caching": {"rules": {k: r.describe() for k, r in rules.items()}, "stopped": self.stopped,
                            "final": {k: v.to_json() for k, v in self._states().items()},
                            "skipped_requests": self.skipped, "caps": self.caps}}


def gate_run_id() -> str:
    """A sortable, unique gate-run name: UTC time and 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def default_gates(spec_off_url: str | None) -> list[str]:
    """The gates ``gates run`` runs when none are named: those whose probes it plans, and with a spec-off engine
    those it sends to a second engine (spec_exact). A gate judged from a load alone is not probed, so not asked."""
    return [g for g in RUN_COMMAND_GATES
            if GATES[g].planned or (GATES[g].command == "gates run" and spec_off_url is not None)]


def size_probes(s: ProbeSettings, prompts: Sequence[Prompt], sampling_prompts: int | None, what: str) -> None:
    """Fit ``s.sampling_prompts`` to the prompt set (the asked number, else the default within what the set's
    probe pool leaves, never below ``SAMPLING_FLOOR``), then check the pool holds every probe's prompt. The room
    is what every other probe of ``s`` leaves (``prompts_needed`` with ``s``'s own counts and, for a sealed set,
    the ignore_eos prompts it draws), so a set the shrunk plan fits is never refused.

    Raises:
        OpError: the prompt set ``what`` has fewer usable chat prompts than the probes need.
    """
    pool = len(probe_pool(prompts))
    if sampling_prompts is not None:
        s.sampling_prompts = sampling_prompts
    elif "hidden_probes" in s.gates:
        room = pool - prompts_needed(dataclasses.replace(s, sampling_prompts=0))
        fitted = max(SAMPLING_FLOOR, min(s.sampling_prompts, room))
        if fitted < s.sampling_prompts:
            s.sampling_shrunk_from = s.sampling_prompts  # a fallback the hidden_probes gate states
        s.sampling_prompts = fitted
    if s.gates and pool < prompts_needed(s):
        raise OpError(f"prompt set {what!r} has {pool} usable chat prompts; the probes need {prompts_needed(s)}")


def with_bypass(rec: ProbeRecord, drop: Sequence[str], bypass: Callable[[], dict[str, Any]] | None) -> ProbeRecord:
    """A copy of ``rec`` for another engine: the fields ``drop`` (the first engine's cache bypass) taken out of its
    body and that engine's own bypass (``Dialect.cache_bypass``, or nothing) put in."""
    body = {k: v for k, v in rec["body"].items() if k not in drop}
    return {**rec, "body": {**body, **(bypass() if bypass else {})}}


async def run_gate_probes(client: Client, info: EngineInfo, run: RunDir, s: GateRunSettings, prompts: list[Prompt], *,
                          engine: str, extra: dict[str, Any], ctk: dict[str, Any], tokenizer: Tokenizer | None,
                          api_key_env: str | None, reference_key_env: str | None, quiet: bool = True) -> str:
    """Send one gate run's probes into ``run`` (``probes/<gate-run>.jsonl``) and return the gate-run name.

    The reference engine (``s.reference_url``) gets copies of the rare-string probes; the spec-off engine
    (``s.spec_off_url``) the spec_exact prompts. Nothing is judged here."""
    name = gate_run_id()
    bypass = info.dialect.cache_bypass
    s.probes.cache_bypass = sorted(bypass()) if bypass else None
    plan = plan_probes(prompts, s.probes, model=str(info.model), extra=extra, ctk=ctk,
                       count_fields=info.dialect.count_fields, neutral=info.dialect.neutral_sampling,
                       cache_bypass=bypass) if set(s.gates) & set(PLANNED_GATES) else []
    header = {"gate_run": name, "engine": engine, "model": info.model, "engine_info": info.identity(),
              "known_ignored_options": list(info.dialect.ignores),
              "known_honoured_options": list(info.dialect.honours), "settings": s.header()}
    with ProbeLog(run.gate_run_log(name), header) as log, ProgressBar(quiet) as bar:
        def tick(rec: ProbeRecord) -> None:
            bar.on_done("probes", is_ok(rec.get("reply") or {}))

        stop = CachingStop(s) if s.probes.sequential and "caching" in s.gates else None

        def done(rec: ProbeRecord) -> None:
            tick(rec)
            if stop is not None:
                stop.on_done(rec)

        bar.on_level(f"gate probes ({engine})", len(plan))
        records = await send_probes(client, plan, log, optional=OPTIONAL_FIELDS, on_done=done,
                                    skip=stop.skip if stop is not None else None)
        if stop is not None:
            log.append({"sequential": stop.record()})
        rare = [r for r in plan if r["kind"] == "rare"]
        if s.reference_url and rare:
            async with Client(Endpoint.parse(s.reference_url, reference_key_env), timeout_s=client.timeout_s) as ref:
                ref_info = await detect_engine(ref)
                bar.on_level("rare strings on the reference engine", len(rare))
                rare = [with_bypass(r, s.probes.cache_bypass or [], ref_info.dialect.cache_bypass) for r in rare]
                records += await send_probes(ref, rare, log, optional=OPTIONAL_FIELDS, kind_suffix="_reference",
                                             model=str(ref_info.model), on_done=tick)
        if s.spec_off_url:
            spec = spec_probes(prompts, s.spec_limit, s.spec_max_tokens, str(info.model),
                                {**extra, **info.dialect.neutral_sampling}, ctk, info.dialect.count_fields)
            async with Client(Endpoint.parse(s.spec_off_url, api_key_env), timeout_s=client.timeout_s) as off:
                off_info = await detect_engine(off)
                bar.on_level("spec_exact: A, B, B again", 3 * len(spec))
                await send_spec_exact(client, off, str(off_info.model), spec, log, tick)
        if tokenizer is not None:
            counts, errors = await retokenize_probes(tokenizer, records)
            log.append({"tokenizer": tokenizer.source, "retokenized": counts, "retokenize_errors": errors})
    return name


def gate_run_dir(run_dir: str | None) -> tuple[RunDir, bool]:
    """``(run dir, existed)``: an existing run dir (a bench serve run, an earlier gate run) gets a new gate run
    beside what it holds; otherwise a new one is created."""
    existing = bool(run_dir) and (Path(str(run_dir)) / "run.json").is_file()
    return (RunDir.open(str(run_dir), writable=True) if existing else RunDir.create(run_dir)), existing


def pin_engine(run: RunDir, info: EngineInfo, ctk: dict[str, Any]) -> None:
    """Pin the model and template kwargs (a different engine later in the same run dir is refused there) and
    record the engine when the run dir has none yet."""
    run.pin("model", info.model)
    run.pin("chat_template_kwargs", ctk)
    if not run.read_run().get("engine"):
        run.update_run(engine=info.to_dict(), dialect=info.dialect.describe())


def judge_gate_run(run: RunDir, engine: str, gate_run: str, s: GateRunSettings, *, mode: str,
                   only_asked: bool = False) -> tuple[list[Gate], dict[str, Any]]:
    """Judge ``gate_run`` (and the run dir's load replies) with ``gates check``'s code and write the ``gates``
    record: ``(gates, record)``. ``only_asked`` keeps just the gates the run asked for (``gates order`` reports the
    order gate alone)."""
    checked = check_run_dir(run.path, engine, gate_runs=[gate_run])
    gates = [_applicable(g, s.gates) for g in checked.gates if not only_asked or g.gate in s.gates]
    rec = gates_record(run, gates, engine=engine, files=checked.files, mode=mode, notes=checked.notes,
                       settings={"gate_run": gate_run, **s.header()})
    return gates, rec


def _applicable(g: Gate, wanted: Sequence[str]) -> Gate:
    """A gate the run asked for that ended NOT RUN counts as UNPROVEN (docs/design.md); others are not asked."""
    if g.gate not in wanted and g.verdict == "NOT RUN":
        return g.replace(applicable=False)
    if g.gate in wanted and not g.applicable:
        return g.replace(applicable=True)
    return g
