"""``gates run``: the probes sized to a prompt set (``size_probes``), the reference copies (``with_bypass``)."""

from __future__ import annotations

import pytest

from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.gates.probes.plan import SAMPLING_FLOOR, ProbeSettings, prompts_needed
from inferencekit.gates.run import size_probes


def sealed(n: int) -> list[Prompt]:
    return [Prompt(f"s{i}", "short", ({"role": "user", "content": f"sealed question {i}"},)) for i in range(n)]


@pytest.mark.parametrize("n", [22, 23, 24, 25])
def test_a_sealed_set_too_small_for_the_default_shrinks_the_sampling_check_instead_of_refusing(n):
    # 2 warm-ups + 6 cache + 4 count + 3 logprob + 3 ignore_eos (drawn from a sealed set) = 18 before sampling:
    # before, the room left out the ignore_eos prompts, so 22–25 prompts planned too many and got an OpError
    s = ProbeSettings(sealed_prompts=True)
    size_probes(s, sealed(n), None, "sealed.jsonl")
    assert s.sampling_prompts == n - 18 and s.sampling_shrunk_from == 8
    assert prompts_needed(s) == n


def test_a_sealed_set_below_the_floor_is_still_refused():
    s = ProbeSettings(sealed_prompts=True)
    with pytest.raises(OpError, match="has 21 usable chat prompts; the probes need 22"):
        size_probes(s, sealed(21), None, "sealed.jsonl")
    assert s.sampling_prompts == SAMPLING_FLOOR


def test_the_public_set_draws_no_ignore_eos_prompt_so_it_has_three_more_for_sampling():
    s = ProbeSettings()
    size_probes(s, sealed(22), None, "dev")
    assert s.sampling_prompts == 7 and s.sampling_shrunk_from == 8


def test_a_reference_copy_swaps_the_engines_cache_bypass_for_the_references():
    from inferencekit.api.dialects import DIALECTS
    from inferencekit.gates.run import with_bypass

    rec = {"id": "r0.rare", "kind": "rare", "key": "r0", "body": {"model": "m", "cache_prompt": False, "seed": 1}}
    to_vllm = with_bypass(rec, ["cache_prompt"], DIALECTS["vllm"].cache_bypass)
    assert set(to_vllm["body"]) == {"model", "seed", "cache_salt"} and len(to_vllm["body"]["cache_salt"]) == 32
    assert rec["body"]["cache_prompt"] is False  # the engine's own record is not changed
    assert with_bypass(rec, ["cache_prompt"], None)["body"] == {"model": "m", "seed": 1}
