"""Per-position comparison of one trajectory with the reference's teacher-forced distributions (pure).

At every generated position t the reference gives a top-k list (plus the actual token) and the engine
gave its own top-k list when it returned logprobs with token ids. Per position:

- ``agree``: 1 when the engine's token is the reference's most likely one (top-1 agreement);
- ``nll``: −log p_ref(token), nats — the reference's surprise at what the engine chose;
- ``gap``: log p_ref(best) − log p_ref(token) (0 where they agree): how close a disagreement was;
  ``nll`` and ``gap`` are None where the reference's logprob of the token is a clamp sentinel
  (``CLAMP_FLOOR``; ``clamped`` True);
- ``kl_at[k]`` / ``tv_at[k]``: KL(reference ‖ engine) and total variation with both lists cut to their
  k most likely tokens plus the actual token (``metrics.kl_tv_rows``), at every k in ``ks`` — so an
  engine is compared with the noise floor at the k both returned. A top-20 reference list against a
  top-5 engine list would read as divergence even between equal distributions: the reference would
  name tokens the engine never could. ``kl``/``tv`` are the values at the engine's own k.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from inferencekit.quality.metrics import kl_tv_rows, top_k_cut

__all__ = ["CLAMP_FLOOR", "doc_k", "engine_lists", "score_positions"]

# A logprob at or below this is a server's clamp sentinel, not a value: vLLM writes -9999.0 for a prompt
# position whose probability underflowed (observed in public bug reports; float32 softmax underflows near
# -104 nats). Averaged in, one such position puts a mean NLL in the thousands; such a position's NLL is left
# out (None) and counted (``clamped``), never averaged as a real value.
CLAMP_FLOOR = -1000.0


def doc_k(doc: dict[str, Any]) -> int:
    """Alternatives per position a trajectory's engine returned (its shortest list; 0 for text only)."""
    k = doc.get("top_logprobs_returned")
    if isinstance(k, int):
        return k
    return min((len(t) for t in doc.get("top_logprobs") or []), default=0)


def engine_lists(doc: dict[str, Any]) -> list[dict[int, float]] | None:
    """The engine's top-k lists keyed by token id, or None when they are not keyed by ids (token strings)."""
    out = []
    for pos in doc.get("top_logprobs") or []:
        row = {}
        for key, lp in pos:
            if not isinstance(key, int) or isinstance(key, bool):
                return None
            if lp is not None:
                row[key] = float(lp)
        out.append(row)
    return out


def _pad(rows: Sequence[dict[int, float]], width: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.full((len(rows), width), -1, dtype=np.int64)
    lps = np.full((len(rows), width), -np.inf, dtype=np.float64)
    for i, r in enumerate(rows):
        items = list(r.items())[:width]
        if items:
            ids[i, :len(items)] = [t for t, _ in items]
            lps[i, :len(items)] = [v for _, v in items]
    return ids, lps


def score_positions(tokens: Sequence[int], ref_rows: Sequence[dict[int, float]],
                    eng_rows: Sequence[dict[int, float]] | None, ks: Iterable[int], own_k: int) -> list[dict[str, Any]]:
    """One row per generated position (see the module docstring).

    Args:
        tokens: the engine's generated ids (or the reference's reading of its text), length T.
        ref_rows: T reference lists ``{id: logprob}``, each holding ``tokens[t]``.
        eng_rows: the engine's T lists keyed by id, or None (no KL/TV: text only or token strings).
        ks: the k values to compute KL/TV at (each ≥ 1).
        own_k: the k reported as ``kl``/``tv`` (must be in ``ks`` when eng_rows is given).

    Raises:
        ValueError: lengths differ, or a reference list lacks its token.
    """
    if len(ref_rows) != len(tokens):
        raise ValueError(f"{len(ref_rows)} reference lists for {len(tokens)} tokens")
    rows: list[dict[str, Any]] = []
    for t, (tok, ref) in enumerate(zip(tokens, ref_rows)):
        if tok not in ref:
            raise ValueError(f"reference list at position {t} lacks the token {tok}")
        best = min(ref, key=lambda i: (-ref[i], i))
        clamped = ref[tok] <= CLAMP_FLOOR
        rows.append({"t": t, "agree": int(tok == best), "nll": None if clamped else -ref[tok],
                     "gap": None if clamped else ref[best] - ref[tok], "clamped": clamped,
                     "kl": None, "tv": None, "kl_at": {}, "tv_at": {}})
    if eng_rows is None:
        return rows
    n = min(len(eng_rows), len(tokens))
    usable = [t for t in range(n) if eng_rows[t]]
    if not usable:
        return rows
    for k in sorted(set(ks)):
        ref_cut = [top_k_cut(ref_rows[t], k, tokens[t]) for t in usable]
        eng_cut = [top_k_cut(eng_rows[t], k, tokens[t]) for t in usable]
        r_ids, r_lp = _pad(ref_cut, k + 1)
        e_ids, e_lp = _pad(eng_cut, k + 1)
        kl, tv = kl_tv_rows(r_ids, r_lp, e_ids, e_lp)
        for j, t in enumerate(usable):
            rows[t]["kl_at"][k] = float(kl[j]) if np.isfinite(kl[j]) else None
            rows[t]["tv_at"][k] = float(tv[j]) if np.isfinite(tv[j]) else None
    for t in usable:
        rows[t]["kl"], rows[t]["tv"] = rows[t]["kl_at"].get(own_k), rows[t]["tv_at"].get(own_k)
    return rows
