"""The contract's judges take any edited record: a reply field of any JSON type, a missing reply, a missing
``meta`` (a probe log is a file a person can edit; ``gates check`` re-judges it) — a verdict, never an exception."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from inferencekit.gates.inputs import ProbeRun
from inferencekit.gates.judges.contract import judge_probes
from inferencekit.gates.probes.collect import read_probe_log
from inferencekit.stats import VERDICTS
from tests.paths import FIXTURES

HEADER, RECORDS, _ = read_probe_log(FIXTURES / "contract" / "llama-cpp-python.jsonl.gz")
FIELDS = ("status", "error", "text", "usage", "finish_reason", "tool_calls", "odd_choices", "n_streamed", "chunks")
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                   max_size=3), max_leaves=6)


@given(st.data())
def test_any_edited_reply_gives_a_verdict(data: st.DataObject) -> None:
    records: list[Any] = copy.deepcopy(RECORDS)
    for _ in range(data.draw(st.integers(1, 6))):
        rec = records[data.draw(st.integers(0, len(records) - 1))]
        what = data.draw(st.sampled_from(("field", "no reply", "no meta")))
        if what == "no reply":
            rec["reply"] = None
        elif what == "no meta":
            rec.pop("meta", None)
        else:
            rec["reply"] = {**(rec.get("reply") or {}), data.draw(st.sampled_from(FIELDS)): data.draw(JSON)}
    gate = judge_probes(ProbeRun(HEADER, records))
    assert gate.verdict in VERDICTS and gate.gate == "contract"
