"""The one table of gates (``inferencekit.gates.GATES``) agrees with what the plans send and what the runs record."""

from collections import Counter

from inferencekit.data.prompts import load_prompt_set
from inferencekit.gates import GATES, PLANNED_GATES, PROBED_GATES, RUN_COMMAND_GATES
from inferencekit.gates.judges.spec_exact import SPEC_KINDS
from inferencekit.gates.probes.plan import ProbeSettings, plan_probes
from inferencekit.gates.run import GateRunSettings, default_gates

DEV = list(load_prompt_set("dev").prompts)


def test_every_planned_probe_kind_belongs_to_exactly_one_planned_gate():
    plan = plan_probes(DEV, ProbeSettings(seed=3), model="m")
    kinds = {p["kind"] for p in plan} - {"warmup"}
    owners = Counter(k for g in GATES.values() if g.planned for k in g.probe_kinds)
    # rare_reference copies go to a reference engine, not in the plan; token_count reads kinds other gates send
    shared = {"ignore_eos", "rare", "echo_orig", "echo_perturbed"}
    assert kinds <= set(owners), kinds - set(owners)
    assert {k for k, n in owners.items() if n > 1} == shared
    assert {k for g in GATES.values() if g.planned for k in g.probe_kinds} - kinds == {"rare_reference"}


def test_each_gate_has_a_judge_and_the_derived_lists_follow_the_table():
    assert list(GATES) == ["caching", "token_count", "output_length", "unique_prompts", "spec_exact", "hidden_probes",
                           "rare_tokens", "order", "contract"]
    for g in GATES.values():
        assert g.judge_probes is not None or g.judge_run is not None, g.name
        assert bool(g.probe_kinds) == (g.judge_probes is not None), g.name
    assert PLANNED_GATES == ("caching", "token_count", "output_length", "hidden_probes", "rare_tokens")
    assert PROBED_GATES == ("caching", "token_count", "output_length", "spec_exact", "hidden_probes", "rare_tokens",
                            "order", "contract")
    assert "order" not in RUN_COMMAND_GATES and "contract" not in RUN_COMMAND_GATES
    assert "unique_prompts" in RUN_COMMAND_GATES
    assert default_gates(None) == ["caching", "token_count", "output_length", "hidden_probes", "rare_tokens"]
    assert "spec_exact" in default_gates("http://b") and GATES["spec_exact"].probe_kinds == SPEC_KINDS


def test_the_settings_a_judge_reads_are_in_every_gate_run_header():
    header = GateRunSettings(gates=list(PLANNED_GATES), probes=ProbeSettings(), order={}, contract={}).header()
    for g in GATES.values():
        assert set(g.settings) <= set(header), (g.name, set(g.settings) - set(header))
