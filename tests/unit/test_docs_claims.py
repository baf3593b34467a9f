"""Docs that state a verdict rule say what the code does (issue 18, item 11: docs/gates.md said unsorted
top_logprobs FAIL while the judge notes them; docs/appliance.md promised a list of departures it did not have).

Each test pairs the documented sentence with the behaviour it describes, so a change to either side alone fails.
"""

from __future__ import annotations

import re

from tests.paths import ROOT

DOCS = ROOT / "docs"


def table_row(path_text: str, first_cell: str) -> list[str]:
    """The cells of the markdown table row whose first cell is ``first_cell``."""
    for line in path_text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r}")


def test_gates_md_says_out_of_order_top_logprobs_are_noted_as_the_judge_does():
    from inferencekit.gates.judges.hidden_probes import _logprob_part

    gate, sent, fail, unproven = table_row((DOCS / "gates.md").read_text(), "hidden_probes")
    assert "not sorted" not in fail
    assert "top_logprobs out of order are noted, not failed" in fail
    entry = {"token": " a", "logprob": -0.5, "top_logprobs": [{"token": " a", "logprob": -0.5},
                                                             {"token": " c", "logprob": -2.5},
                                                             {"token": " b", "logprob": -2.0}]}
    rec = {"id": "p0.logprobs", "kind": "logprobs", "key": "p0", "meta": {}, "body": {},
           "reply": {"status": 200, "text": " a", "logprobs": [entry]}}
    parts = _logprob_part([rec], {}, [])
    assert parts[0][0] == "PASS" and "out of order" in parts[0][1]


def test_gates_md_says_a_refused_top_logprobs_is_unproven():
    gate, sent, fail, unproven = table_row((DOCS / "gates.md").read_text(), "hidden_probes")
    assert "no top_logprobs" in unproven


def breaks_a_promise(text: str) -> bool:
    """True when ``text`` says its departures are listed (at the end, below) and has no heading for them."""
    return bool(re.search(r"departures are listed (at the end|below)", text, re.IGNORECASE)
                and not re.search(r"^#+ .*departures", text, re.IGNORECASE | re.MULTILINE))


def test_every_promised_list_of_departures_exists():
    assert [doc.name for doc in sorted(DOCS.glob("*.md")) if breaks_a_promise(doc.read_text())] == []


def test_the_departures_check_sees_a_broken_promise():
    promise = "Behaviour follows the seed; departures are listed at the end.\n\n## Files\n"
    assert breaks_a_promise(promise)
    assert not breaks_a_promise(promise + "\n## Departures from the seed\n- one\n")
    assert not breaks_a_promise("Behaviour follows the seed.\n")


def test_error_budget_md_states_the_budget_and_the_deterministic_gates_the_code_uses():
    from inferencekit.gates.budget import DETERMINISTIC_GATES, FAMILY_ALPHA

    text = (DOCS / "error-budget.md").read_text()
    assert f"family-wise false-FAIL rate of {FAMILY_ALPHA:.0%}**" in text and "Holm's step-down rule" in text
    row = table_row(text, ", ".join(sorted(DETERMINISTIC_GATES, key=["token_count", "output_length",
                                                                      "unique_prompts"].index)))
    assert row[2] == "deterministic"
