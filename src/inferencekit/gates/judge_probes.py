"""Every live gate judged from one gate run's probe records (pure; the same code live and offline).

``gates run`` calls ``judge_gate_run`` on the probes it just sent; ``gates check`` calls it on the
``probes/<gate-run>.jsonl`` files of a run dir, and on the hidden probes a load mixed in
(``outputs/<engine>/probes/``, ``where="load"``). The settings that change a verdict (threshold,
whether a reference engine answered, spec_exact's early window) come from the log's header, so a
re-judged run uses what the live run used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inferencekit.api.reply import is_ok
from inferencekit.gates.live_caching import gate_caching
from inferencekit.gates.live_hidden import gate_hidden_probes
from inferencekit.gates.live_length import gate_output_length_live
from inferencekit.gates.live_rare import gate_rare_tokens
from inferencekit.gates.order_collect import judge_order_log
from inferencekit.gates.result import Gate
from inferencekit.gates.spec_exact import judge_spec_exact, spec_row
from inferencekit.gates.token_count import count_row, gate_token_count

__all__ = ["COUNTED_KINDS", "SPEC_KINDS", "judge_gate_run", "spec_rows", "token_count_part"]

# Probe kinds whose counts the token_count gate checks: the count probes, and the exact-length and
# copy probes with their allowances (token_count.RETOK_EXEMPT). Sampled (T=1) text is left out: a
# sampled token sequence need not be the tokenizer's own split of its text.
COUNTED_KINDS = ("count", "ignore_eos", "rare", "echo_orig", "echo_perturbed")
SPEC_KINDS = ("spec_a", "spec_b", "spec_b2")
PROBED_GATES = ("caching", "token_count", "output_length", "hidden_probes", "rare_tokens", "spec_exact", "order")
RETOK_TOL = 0.02


def _max_tokens(rec: dict[str, Any]) -> int | None:
    mt = (rec.get("body") or {}).get("max_tokens")
    return mt if isinstance(mt, int) and not isinstance(mt, bool) else None


def token_count_part(records: Sequence[dict[str, Any]], retokenized: dict[str, int], tokenizer: str | None) -> Gate:
    """token_count on the probes of ``COUNTED_KINDS`` (keys ``"<kind>:<id>"``); failed probes are evidence."""
    rows, failed = [], []
    for rec in records:
        if rec.get("kind") not in COUNTED_KINDS:
            continue
        reply = rec.get("reply") or {}
        key = f"{rec['kind']}:{rec['id']}"
        row = count_row(key, reply, max_tokens=_max_tokens(rec), retokenized=retokenized.get(rec["id"]))
        if row is not None:
            rows.append(row)
        elif not is_ok(reply):
            failed.append({"key": key, "status": reply.get("status"), "error": (reply.get("error") or "not sent")[:300]})
    return gate_token_count(rows, retok_tol=RETOK_TOL, tokenizer=tokenizer, failed=failed)


def spec_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One spec_exact row per prompt key that has its A, B and B-again replies (A = engine under test)."""
    by_key: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("kind") in SPEC_KINDS:
            by_key.setdefault(rec["key"], {})[rec["kind"]] = rec.get("reply")
    return [spec_row(key, g.get("spec_a"), g.get("spec_b"), g.get("spec_b2")) for key, g in by_key.items()]


def _answered(records: Sequence[dict[str, Any]]) -> bool:
    return any(rec.get("reply") and is_ok(rec["reply"]) for rec in records
               if not str(rec.get("kind", "")).endswith("_reference"))


def _known_to_drop(gate: Gate, header: dict[str, Any]) -> Gate:
    """An engine known to accept ``ignore_eos`` and drop it (its dialect, e.g. llama-cpp-python) cannot show an
    exact length: replies of max_tokens tokens are then luck, not proof. A PASS becomes UNPROVEN; a FAIL stays."""
    if "ignore_eos" not in (header.get("known_ignored_options") or ()) or gate.verdict != "PASS":
        return gate
    engine = (header.get("engine_info") or {}).get("engine") or header.get("engine")
    return Gate(gate.gate, "UNPROVEN", f"{engine} is known to accept ignore_eos and drop it silently, so replies of "
                f"max_tokens tokens do not show that exact lengths are honoured ({gate.reason}); compare lengths against "
                "a reference engine (gates check RUN_DIR --reference-outputs)", gate.metrics, gate.details,
                gate.limitations)


def judge_gate_run(header: dict[str, Any], records: Sequence[dict[str, Any]], *, where: str = "live"
                   ) -> dict[str, Gate]:
    """The gates one gate run asked for (``header["settings"]["gates"]``), by name.

    Args:
        header: the probe log's header: ``settings`` (gates, threshold, reference_url, early_tokens,
            spec_tolerance), ``tokenizer`` and ``retokenized`` (counts by probe id).
        records: the probe records (planned probe + ``reply``).
        where: ``"live"`` for a gate run's own probes, ``"load"`` for hidden probes mixed into a load.
    """
    s = header.get("settings") or {}
    asked = [g for g in s.get("gates") or () if g in PROBED_GATES]  # unique_prompts is judged on the load
    # the order gate judges failed requests itself (UNMEASURED samples), so it does not need an answered probe
    out: dict[str, Gate] = {"order": judge_order_log(header, records)} if "order" in asked else {}
    asked = [g for g in asked if g != "order"]
    if not _answered(records):
        first = next((r["reply"].get("error") for r in records if r.get("reply") and r["reply"].get("error")), None)
        why = "the endpoint answered no probe" + (f" (first error: {first[:200]})" if first else "")
        return {**out, **{g: Gate(g, "NOT RUN", why) for g in asked}}
    for g in asked:
        if g == "caching":
            out[g] = gate_caching(records, threshold=float(s.get("threshold", 0.10)))
        elif g == "token_count":
            out[g] = token_count_part(records, header.get("retokenized") or {}, header.get("tokenizer"))
        elif g == "output_length":
            out[g] = _known_to_drop(gate_output_length_live(records), header)
        elif g == "hidden_probes":
            out[g] = gate_hidden_probes(records, where=where)
        elif g == "rare_tokens":
            out[g] = gate_rare_tokens(records, reference_given=bool(s.get("reference_url")))
        elif g == "spec_exact":
            out[g] = judge_spec_exact(spec_rows(records), early_tokens=int(s.get("early_tokens", 32)),
                                      tolerance=int(s.get("spec_tolerance", 0)))
    return out
