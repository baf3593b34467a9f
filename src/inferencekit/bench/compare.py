"""Compare two appliance receipts (``inferencekit.appliance.v1``, docs/appliance.md) figure by figure.

Two receipts are comparable only when they were measured alike: the same protocol and prompts, the
same comparison id (the request nonces derive from it) and the same settings. ``receipt_differences``
lists what breaks that (the ``bench compare`` operation refuses such a pair unless told otherwise);
``receipt_notes`` lists what legitimately differs between the two sides (engine, hardware, model,
cache-isolation method, verdict) and is shown, never refused; ``compare_receipts`` gives one row per
figure present in both, with the ratio B/A and whether the difference exceeds the run-to-run noise.

Everything here is a pure function of the two receipt dicts (``evidence/receipt.py`` reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ABSENT", "Difference", "compare_receipts", "receipt_differences", "receipt_notes"]


#: The value a ``Difference`` holds for a field present in one receipt only.
ABSENT = "(absent)"

# Protocol fields that fix what was sent: a change means different requests (docs/appliance.md, Receipt).
_PROTOCOL_FIELDS = ("version", "nonce_version", "prompts_version", "prompts_sha256")
# Settings that legitimately differ between engines: how prefill caching is defeated (vLLM cache_salt,
# llama.cpp cache_prompt:false). Every other settings key shapes the measurement.
_SETTINGS_NOTED = ("prefill_cache_isolation", "decode_cache_isolation")
_APPLIANCE_FIELDS = ("hardware", "topology", "model", "model_revision", "quantisation", "kv_cache_dtype",
                     "serving_engine", "context_limit", "competing_traffic")
_TOOL_FIELDS = ("version", "git_revision", "git_dirty")
_OPTIONAL_SECTIONS = ("decode", "prefill", "concurrency")
_PREFILL_PHASES = (("cold", "cold"), ("warm_replay", "warm"))
_CONCURRENCY_METRICS = ("aggregate_end_to_end_tokens_per_second", "per_stream_decode_tokens_per_second")
_UNIT = "tokens/s"


@dataclass(frozen=True, slots=True)
class Difference:
    """One field that differs between receipt A and receipt B.

    ``field`` is a dotted path into the receipt (``settings.decode_tokens``, ``run.appliance.hardware``,
    ``skipped.prefill``); ``a`` and ``b`` are the two values as found, ``ABSENT`` where the field is
    missing on that side.
    """

    field: str
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b}


def _obj(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _get(doc: dict[str, Any], dotted: str) -> Any:
    cur: Any = doc
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return ABSENT
        cur = cur[part]
    return cur


def _diff_fields(a: dict[str, Any], b: dict[str, Any], fields: list[str]) -> list[Difference]:
    out = []
    for f in fields:
        va, vb = _get(a, f), _get(b, f)
        if va != vb:
            out.append(Difference(f, va, vb))
    return out


def _union(a: Any, b: Any) -> list[str]:
    """Keys of ``a`` in order, then the keys found in ``b`` only."""
    return [*a, *(k for k in b if k not in a)]


def _ran(doc: dict[str, Any], section: str) -> bool:
    return bool(_obj(doc.get(section)))


def _section_state(doc: dict[str, Any], section: str) -> str:
    if _ran(doc, section):
        return "ran"
    reason = _obj(doc.get("skipped")).get(section)
    return f"skipped: {reason}" if reason else "skipped"


def receipt_differences(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """The fields that make two receipts incomparable: measured differently, so a ratio would mislead.

    Refused (docs/appliance.md, Receipt): ``format``, ``schema``; ``protocol.version``,
    ``protocol.nonce_version``, ``protocol.prompts_version``, ``protocol.prompts_sha256`` (the requests
    sent); ``run.comparison_id`` (the request nonces derive from it, so the prompts differ); every key
    of ``settings`` present in either receipt (runs, decode_tokens, temperature, top_p, seed,
    extra_body, prefill and concurrency settings, ...) except ``prefill_cache_isolation``, which differs
    legitimately between engines and is a note (``receipt_notes``); and which sections ran: a section
    that ran on one side and was skipped on the other gives ``skipped.<section>`` with ``"ran"`` or
    ``"skipped: <reason>"`` on each side.

    Returns:
        The differences in that order; empty when the pair is comparable.
    """
    fields = ["format", "schema", *(f"protocol.{k}" for k in _PROTOCOL_FIELDS), "run.comparison_id"]
    out = _diff_fields(a, b, fields)
    sa, sb = _obj(a.get("settings")), _obj(b.get("settings"))
    keys = [k for k in _union(sa, sb) if k not in _SETTINGS_NOTED]
    out += _diff_fields(a, b, [f"settings.{k}" for k in keys])
    for section in _OPTIONAL_SECTIONS:
        if _ran(a, section) != _ran(b, section):
            out.append(Difference(f"skipped.{section}", _section_state(a, section), _section_state(b, section)))
    return out


def _flat(a: dict[str, Any], b: dict[str, Any], prefix: str, known: tuple[str, ...] = ()) -> list[str]:
    """Dotted names of ``known`` and of every other key under ``prefix`` in either receipt."""
    keys = _union(dict.fromkeys(known), _union(_obj(_get(a, prefix)), _obj(_get(b, prefix))))
    return [f"{prefix}.{k}" for k in keys]


def _keys_present(a: dict[str, Any], b: dict[str, Any], section: str) -> tuple[list[str], list[Difference]]:
    """Keys of ``section`` present in both receipts (A's order) and a note for each key on one side only."""
    da, db = _obj(a.get(section)), _obj(b.get(section))
    both = [k for k in da if k in db]
    if section != "decode":  # depths and levels are integers stored as strings
        both.sort(key=_numeric_key)
    if not da or not db:  # a section skipped on one side is a difference, not a note per key
        return both, []
    only = [Difference(f"{section}.{k}", "measured" if k in da else ABSENT, "measured" if k in db else ABSENT)
            for k in _union(da, db) if (k in da) != (k in db)]
    return both, only


def _numeric_key(k: str) -> tuple[int, float, str]:
    try:
        return (0, float(k), k)
    except ValueError:
        return (1, 0.0, k)


def receipt_notes(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """Informational differences: shown beside a comparison, never a reason to refuse it.

    These are what a comparison is usually for, or legitimately differ between engines:
    ``run.model``; ``run.engine.*``; ``run.appliance.*`` (hardware, topology, model, model_revision,
    quantisation, kv_cache_dtype, serving_engine, context_limit, competing_traffic and any other
    metadata key); ``settings.prefill_cache_isolation`` (vLLM cache_salt vs llama.cpp
    cache_prompt:false); ``prefill.<depth>.cold_verification`` for depths in both; ``tool.version``,
    ``tool.git_revision``, ``tool.git_dirty``; ``verdict``; and a decode workload, prefill depth or
    concurrency level measured in one receipt only (``"measured"`` vs ``ABSENT``; no row is made for it).

    Returns:
        The notes in that order; equal fields are left out.
    """
    fields = ["run.model", *_flat(a, b, "run.engine"), *_flat(a, b, "run.appliance", _APPLIANCE_FIELDS),
              *(f"settings.{k}" for k in _SETTINGS_NOTED)]
    out = _diff_fields(a, b, fields)
    depths, only_prefill = _keys_present(a, b, "prefill")
    out += _diff_fields(a, b, [f"prefill.{d}.cold_verification" for d in depths])
    out += _diff_fields(a, b, [*(f"tool.{k}" for k in _TOOL_FIELDS), "verdict"])
    out += _keys_present(a, b, "decode")[1] + only_prefill + _keys_present(a, b, "concurrency")[1]
    return out


def _summary(x: Any) -> dict[str, Any] | None:
    if isinstance(x, dict) and all(isinstance(x.get(k), (int, float)) for k in ("median", "minimum", "maximum")):
        return x
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    """B/A to 4 significant digits (4 decimal places left a ratio of 0.018 only 2, 0.15% off the medians')."""
    if a is None or b is None or a == 0:
        return None
    return float(f"{b / a:.4g}")


def _row(section: str, key: str, metric: str, sa: Any, sb: Any) -> dict[str, Any]:
    """One comparison row from two summaries (docs/appliance.md: median, minimum, maximum, p90, n)."""
    ma, mb = _summary(sa), _summary(sb)
    notes = [f"no usable sample on {side}" for side, s in (("A", ma), ("B", mb)) if s is None]
    for side, s in (("A", ma), ("B", mb)):
        if s is not None and isinstance(s.get("n"), int) and s["n"] < 2:
            notes.append(f"{side} has n={s['n']}: its range is one sample, not a measure of noise")
    a_med = ma["median"] if ma else None
    b_med = mb["median"] if mb else None
    ratio = _ratio(a_med, b_med)
    if ma and mb and a_med == 0:
        notes.append("A's median is 0: no ratio")
    single = any(s is not None and isinstance(s.get("n"), int) and s["n"] < 2 for s in (ma, mb))
    beyond = None if single else bool(ma and mb and (ma["maximum"] < mb["minimum"] or mb["maximum"] < ma["minimum"]))
    return {"section": section, "key": key, "metric": metric, "unit": _UNIT,
            "a_median": a_med, "a_range": [ma["minimum"], ma["maximum"]] if ma else None,
            "b_median": b_med, "b_range": [mb["minimum"], mb["maximum"]] if mb else None,
            "ratio_b_over_a": ratio if (ma and mb) else None, "beyond_noise": beyond,
            "note": "; ".join(notes) or None}


def _pooled_row(key: str, pa: Any, pb: Any) -> dict[str, Any]:
    va = pa if isinstance(pa, (int, float)) else None
    vb = pb if isinstance(pb, (int, float)) else None
    notes = [f"no usable sample on {side}" for side, v in (("A", va), ("B", vb)) if v is None]
    notes.append("one pooled figure per side: no run-to-run range, noise not judged")
    return {"section": "decode", "key": key, "metric": "pooled_decode_tokens_per_second", "unit": _UNIT,
            "a_median": va, "a_range": None, "b_median": vb, "b_range": None,
            "ratio_b_over_a": _ratio(va, vb), "beyond_noise": None, "note": "; ".join(notes)}


def compare_receipts(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure present in both receipts, A being the baseline.

    Rows, in this order (rates in tokens/s, docs/appliance.md):

    * ``decode``, key = workload: ``decode_tokens_per_second`` (summary over runs), then
      ``pooled_decode_tokens_per_second`` (one figure per side: its ranges are null and noise is not judged);
    * ``prefill``, key = ``d<depth> cold`` / ``d<depth> warm`` (depths ascending):
      ``effective_prefill_tokens_per_second`` of the ``cold`` and ``warm_replay`` samples;
    * ``concurrency``, key = ``c<level>`` (levels ascending): ``aggregate_end_to_end_tokens_per_second``
      (over rounds) and ``per_stream_decode_tokens_per_second`` (over streams).

    Each row is ``{"section", "key", "metric", "unit", "a_median", "a_range": [min, max], "b_median",
    "b_range": [min, max], "ratio_b_over_a", "beyond_noise", "note"}``.

    Noise rule: ``beyond_noise`` is true when the two run-to-run ranges ``[minimum, maximum]`` do not
    overlap (A's maximum < B's minimum, or B's maximum < A's minimum); ranges that touch or overlap are
    within noise. It says only that the spread of repeated runs does not explain the difference. With
    n = 1 on either side a range is a single sample, not a spread: ``beyond_noise`` is null (not judged)
    and the row's ``note`` says so; the pooled decode rows have no range and are null too.
    ``ratio_b_over_a`` is B's median
    divided by A's, rounded to 4 decimals (> 1: B is faster). A summary that is null (no usable sample)
    on either side, or a median of 0 on A, gives ``ratio_b_over_a`` null, ``beyond_noise`` false and a
    ``note``; ``note`` is null otherwise.
    """
    rows: list[dict[str, Any]] = []
    workloads, _ = _keys_present(a, b, "decode")
    for w in workloads:
        da, db = _obj(a["decode"][w]), _obj(b["decode"][w])
        rows.append(_row("decode", w, "decode_tokens_per_second", da.get("decode_tokens_per_second"),
                         db.get("decode_tokens_per_second")))
        rows.append(_pooled_row(w, da.get("pooled_decode_tokens_per_second"),
                                db.get("pooled_decode_tokens_per_second")))
    depths, _ = _keys_present(a, b, "prefill")
    for d in depths:
        pa, pb = _obj(a["prefill"][d]), _obj(b["prefill"][d])
        for phase, label in _PREFILL_PHASES:
            rows.append(_row("prefill", f"d{d} {label}", "effective_prefill_tokens_per_second",
                             _obj(pa.get(phase)).get("effective_prefill_tokens_per_second"),
                             _obj(pb.get(phase)).get("effective_prefill_tokens_per_second")))
    levels, _ = _keys_present(a, b, "concurrency")
    for c in levels:
        ca, cb = _obj(a["concurrency"][c]), _obj(b["concurrency"][c])
        for metric in _CONCURRENCY_METRICS:
            rows.append(_row("concurrency", f"c{c}", metric, ca.get(metric), cb.get(metric)))
    return rows
