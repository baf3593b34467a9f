"""The spec_exact judgement: rows from three greedy replies, and the verdict against the A/A floor."""

from __future__ import annotations

from typing import Any

from inferencekit.gates.judges.spec_exact import judge_spec_exact, spec_row
from inferencekit.gates.records import first_divergence, sequence


def reply(ids: list[int] | None = None, text: str = "", status: int = 200, error: str | None = None,
          logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "text": text, "reasoning": "", "token_ids": ids, "logprobs": logprobs,
                           "finish_reason": "length"}
    if error is not None:
        out["error"] = error
    return out


def row(pid: str, ab: int | None, aa: int | None, method: str = "token_ids") -> dict[str, Any]:
    return {"id": pid, "method": method, "ab_first_divergence": ab, "aa_first_divergence": aa, "len_a": 64,
            "len_b": 64}


# --- helpers --------------------------------------------------------------------------------------------------------

def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # a prefix diverges where it ends
    assert first_divergence([], []) is None
    assert first_divergence("abc", "abd") == 2


def test_sequence_prefers_ids_then_logprob_tokens_then_characters():
    assert sequence(reply(ids=[5, 6])) == ([5, 6], "token_ids")
    assert sequence(reply(logprobs=[{"token": "a"}, {"token": "b"}])) == (["a", "b"], "logprob_tokens")
    assert sequence(reply(text="hi")) == (["h", "i"], "characters")


# --- spec_row -------------------------------------------------------------------------------------------------------

def test_spec_row_compares_token_ids():
    got = spec_row("p1", reply([1, 2, 3, 4]), reply([1, 2, 9, 4]), reply([1, 2, 3, 4]))
    assert got == {"id": "p1", "method": "token_ids", "ab_first_divergence": 2, "aa_first_divergence": 2,
                   "len_a": 4, "len_b": 4}
    same = spec_row("p2", reply([1, 2]), reply([1, 2]), reply([1, 2]))
    assert same["ab_first_divergence"] is None and same["aa_first_divergence"] is None


def test_spec_row_falls_back_to_characters_when_methods_differ():
    got = spec_row("p1", reply([1, 2], text="abcd"), reply(None, text="abXd"), reply(None, text="abcd"))
    assert got["method"] == "characters"
    assert (got["ab_first_divergence"], got["aa_first_divergence"], got["len_a"]) == (2, 2, 4)


def test_spec_row_records_the_first_error():
    got = spec_row("p1", reply([1]), reply(status=500, error="engine died"), None)
    assert got == {"id": "p1", "error": "B: HTTP 500: engine died"}
    assert spec_row("p2", None, reply([1]), reply([1])) == {"id": "p2", "error": "A: not sent"}


# --- judge_spec_exact -----------------------------------------------------------------------------------------------

def test_pass_when_identical():
    g = judge_spec_exact([row(f"p{i}", None, None) for i in range(8)])
    assert g.verdict == "PASS"
    assert g.reason == ("8/8 identical to the reference engine; early divergences 0 <= A/A floor 0 + 0; any "
                        "divergence 0 <= A/A 0 + 1")
    assert g.metrics["ab_identical"] == 8 and g.metrics["late_allowed"] == 1 and list(g.limitations) == []


def test_fail_when_early_divergences_exceed_the_floor():
    rows = [row("p0", 3, None), row("p1", 10, None), row("p2", 31, None)] + [row(f"p{i}", None, None)
                                                                              for i in range(3, 8)]
    g = judge_spec_exact(rows)
    assert g.verdict == "FAIL"
    assert g.reason == ("3/8 prompts diverge from the reference engine before token 32; the A/A floor is 0 "
                        "(+0 allowed)")
    assert g.metrics["ab_early_divergences"] == 3 and g.metrics["ab_first_divergence_median"] == 10
    assert [d["id"] for d in g.details] == ["p0", "p1", "p2"]


def test_the_floor_and_tolerance_absorb_early_divergences():
    # the reference disagrees with itself early on two prompts: two A/B early divergences are the floor
    rows = [row("p0", 3, 5), row("p1", 10, 12)] + [row(f"p{i}", None, None) for i in range(2, 8)]
    assert judge_spec_exact(rows).verdict == "PASS"
    one_over = [row("p0", 3, None)] + [row(f"p{i}", None, None) for i in range(1, 8)]
    assert judge_spec_exact(one_over).verdict == "FAIL"
    assert judge_spec_exact(one_over, tolerance=1).verdict == "PASS"


def test_late_divergences_beyond_the_allowance_are_unproven():
    # 8 prompts: allowance 0 + max(1, 8 // 8) = 1; three late A/B divergences against a floor of 0
    rows = [row(f"p{i}", 40 + i, None) for i in range(3)] + [row(f"p{i}", None, None) for i in range(3, 8)]
    g = judge_spec_exact(rows)
    assert g.verdict == "UNPROVEN"
    assert g.reason.startswith("3/8 prompts diverge from the reference engine, all at or after token 32, against an "
                               "A/A floor of 0 (+1 allowed)")
    one = [row("p0", 40, None)] + [row(f"p{i}", None, None) for i in range(1, 8)]
    assert judge_spec_exact(one).verdict == "PASS"


def test_early_tokens_moves_the_cut():
    rows = [row("p0", 40, None)] + [row(f"p{i}", None, None) for i in range(1, 8)]
    g = judge_spec_exact(rows, early_tokens=64)
    assert g.verdict == "FAIL" and "before token 64" in g.reason


def test_errors_make_it_unproven():
    rows = [row(f"p{i}", None, None) for i in range(4)] + [{"id": "p4", "error": "A: HTTP 500: boom"}]
    g = judge_spec_exact(rows)
    assert g.verdict == "UNPROVEN"
    assert g.reason == ("1 prompt(s) failed (first error: A: HTTP 500: boom); of the other 4: "
                        "4 identical to the reference")
    assert g.metrics["errors"] == 1


def test_all_errors_is_unproven_and_no_rows_not_run():
    g = judge_spec_exact([{"id": "p0", "error": "B: not sent"}])
    assert g.verdict == "UNPROVEN" and g.reason.startswith("no prompt got three successful replies")
    assert judge_spec_exact([]).verdict == "NOT RUN"


def test_character_comparison_is_a_limitation():
    g = judge_spec_exact([row("p0", None, None, "characters")])
    assert g.verdict == "PASS" and any("compared by characters" in x for x in g.limitations)
