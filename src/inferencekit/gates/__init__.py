"""The anti-cheat gates: one table, ``GATES``, says what each gate is, what it sends and how it is judged.

A gate shows that an engine did the work it claims. Each row names the gate's judges, pure functions
in ``gates/judges/<gate>.py`` that hold the gate's whole rule:

- ``judge_probes(ProbeRun) -> Gate``: the gate's probes from one gate run's probe log
  (``probes/<gate-run>.jsonl``), live or re-judged offline;
- ``judge_run(RunRows) -> Gate | None``: what the gate reads from a recorded run's own files (the load
  replies, the hidden probes, known answers and structured requests a load mixed in); None when the run dir
  holds nothing of it.

``gates/check.py`` reads a run dir and loops over this table; ``gates/probes/`` plans and sends the
probes. Every other list of gates is derived from ``GATES`` below. Adding a gate: a judge file, one
row here, its probes (docs/architecture.md, "Add a gate").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inferencekit.gates.inputs import ProbeRun, RunRows
from inferencekit.gates.judges import (
    caching,
    contract,
    hidden_probes,
    order,
    output_length,
    rare_tokens,
    spec_exact,
    structured_load,
    token_count,
    unique_prompts,
)
from inferencekit.gates.result import Gate

__all__ = ["GATES", "GateSpec", "PLANNED_GATES", "PROBED_GATES", "RUN_COMMAND_GATES"]


@dataclass(frozen=True, slots=True)
class GateSpec:
    """One gate.

    Attributes:
        name: the gate's name (records, ``--gates``, the card).
        catches: what an engine that fails it does, in a few words.
        command: the command that sends its live probes: ``"gates run"`` (planned with the others, or, for
            spec_exact, with ``--spec-off-url``), ``"gates order"``, or None when it has no live probes.
        planned: its probes come from the shared plan of ``gates run`` (``gates/probes/plan.py``).
        probe_kinds: the ``kind`` of each of its probes in a probe log.
        settings: the keys of a probe log's ``settings`` its judge reads.
        judge_probes: judge of one gate run's probe records (None: no live part).
        judge_run: judge of the run dir's own files (None: no run-dir part).
        needs_answer: a gate run whose probes all failed leaves this gate NOT RUN (the order gate instead
            judges failed requests itself, as UNMEASURED samples).
    """

    name: str
    catches: str
    command: str | None
    planned: bool
    probe_kinds: tuple[str, ...]
    settings: tuple[str, ...]
    judge_probes: Callable[[ProbeRun], Gate] | None
    judge_run: Callable[[RunRows], Gate | None] | None
    needs_answer: bool = True


# The seven gates of the seed, then the order gate and the API contract; the order is the report's.
GATES: dict[str, GateSpec] = {g.name: g for g in (
    GateSpec("caching", "answers repeated or near-repeated prompts from a cache", "gates run", True,
             caching.CACHE_KINDS, ("threshold",), caching.judge_probes, None),
    GateSpec("token_count", "reports a token count its stream does not support", "gates run", True,
             token_count.COUNTED_KINDS, (), token_count.judge_probes, token_count.judge_run),
    GateSpec("output_length", "ignores an exact length (ignore_eos) or misreports it", "gates run", True,
             ("ignore_eos",), (), output_length.judge_probes, output_length.judge_run),
    GateSpec("unique_prompts", "is benchmarked on repeated prompts a cache can serve", None, False, (), (),
             None, unique_prompts.judge_run),
    GateSpec("spec_exact", "changes greedy output with speculative decoding", "gates run", False,
             spec_exact.SPEC_KINDS, ("early_tokens", "spec_tolerance"), spec_exact.judge_probes, None),
    GateSpec("hidden_probes", "ignores temperature, or returns logprobs that are no distribution", "gates run",
             True, (*hidden_probes.SAMPLING_KINDS, "logprobs"), (), hidden_probes.judge_probes,
             hidden_probes.judge_run),
    GateSpec("rare_tokens", "cannot produce rare tokens (a pruned vocabulary or a logit mask)", "gates run", True,
             ("rare", "rare_reference"), ("reference_url",), rare_tokens.judge_probes, None),
    GateSpec("order", "answers a request differently depending on what ran before or beside it", "gates order",
             False, ("order",), ("order",), order.judge_probes, order.judge_run, needs_answer=False),
    GateSpec("contract", "accepts a request option and does not apply it, miscounts the prompt, truncates it "
             "silently, or breaks structured output", "probe --contract", False, (contract.CONTRACT_KIND,),
             ("contract",), contract.judge_probes, structured_load.judge_run, needs_answer=False),
)}

#: gates whose probes the shared ``gates run`` plan sends (``gates/probes/plan.py``)
PLANNED_GATES: tuple[str, ...] = tuple(g.name for g in GATES.values() if g.planned)
#: gates with a live part, judged from a gate run's probe log
PROBED_GATES: tuple[str, ...] = tuple(g.name for g in GATES.values() if g.judge_probes is not None)
#: what ``gates run --gates`` may ask for: every gate but those another command sends
RUN_COMMAND_GATES: tuple[str, ...] = tuple(g.name for g in GATES.values() if g.command in ("gates run", None))
