"""``inferencekit audit equivalence``: collect an audit run and judge it against the calibration table.

Three surfaces. The logprob surface (an engine that returns top-k logprobs on generated tokens): greedy trajectories
of a seeded draw of chat prompts, enough for the token budget, into ``quality/<label>/``
(``quality/trajectory.py``); each teacher-forced through the reference (``TrajectoryScorer``, the code
``quality score`` uses); the position rows reduced to the ``logprob`` run statistic
(``equivalence_stats.logprob_statistic``) and judged (``equivalence_judge.judge_equivalence``).
The text surface: ``equivalence_text``. The first-token surface (``--surface first-token``):
one greedy token per prompt with top-k logprobs, in requests (``equivalence_first``).

Collect (``collect_audit``) does the I/O; ``audit_report`` is pure.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.data.prompts import Prompt
from inferencekit.errors import OpError
from inferencekit.quality.equivalence_judge import cell_notes, judge_equivalence
from inferencekit.quality.equivalence_stats import logprob_statistic
from inferencekit.quality.reference import Reference
from inferencekit.quality.score_run import TrajectoryScorer
from inferencekit.quality.trajectory import TrajectorySettings, collect_engine, write_index
from inferencekit.quality.trajectory_run import trajectory_record
from inferencekit.quality.trajectory_store import load_set
from inferencekit.rundir import RunDir

__all__ = ["AUDIT_FORMAT", "AuditSettings", "audit_prompts", "collect_audit", "comparable", "mark_lost_ids",
           "audit_report", "load_table", "SHIPPED_TABLE"]

AUDIT_FORMAT = "inferencekit.audit.equivalence.v1"
SHIPPED_TABLE = "equivalence_table.json"  # in this package: the calibration of the embedded model, once made


@dataclass(slots=True)
class AuditSettings:
    """One audit run.

    Attributes:
        claim: the precision the endpoint claims (``F16``, ``Q4_1`` …): it picks the honest family.
        budget_tokens: output tokens to spend (the prompts drawn are ``ceil(budget / max_tokens)``).
        max_tokens: per prompt.
        top_logprobs: k of the engine's lists (the calibration's k; 20).
        seed: the prompt draw (disjoint draws for calibration runs come from different seeds).
        label: the trajectory folder's name.
    """

    claim: str
    budget_tokens: int = 300
    max_tokens: int = 64
    top_logprobs: int = 20
    seed: int = 0
    label: str = "audit"
    surface: str = "logprob"  # or "first_token", "text"
    budget_requests: int = 160  # text: requests to spend (prompts = budget_requests / samples); first_token: prompts
    samples: int = 8  # text surface: completions per prompt, each side
    sample_tokens: int = 32  # text surface: tokens per completion
    pool: str | None = None  # the prompt pool's name (equivalence_pool.POOL_NAME when drawn from the calibration's)

    def text_prompts(self) -> int:
        """Prompts of the text surface: ``ceil(budget_requests / samples)``."""
        return math.ceil(self.budget_requests / self.samples)

    def prompts_needed(self) -> int:
        """Prompts both surfaces may use: the logprob budget's and the text budget's (``auto`` falls back)."""
        if self.surface == "first_token":
            return self.budget_requests
        return max(math.ceil(self.budget_tokens / self.max_tokens), self.text_prompts())

    def made(self) -> dict[str, Any]:
        """How this run is made, as a calibration cell records it (``equivalence_judge.MADE_FIELDS``)."""
        if self.surface == "text":
            return {"pool": self.pool, "max_tokens": self.sample_tokens}
        if self.surface == "first_token":
            return {"pool": self.pool, "max_tokens": 1, "top_logprobs": self.top_logprobs}
        return {"pool": self.pool, "max_tokens": self.max_tokens, "top_logprobs": self.top_logprobs}


def audit_prompts(pool: Sequence[Prompt], s: AuditSettings) -> list[Prompt]:
    """A seeded draw of chat prompts, enough for the budget: ``ceil(budget_tokens / max_tokens)`` on the logprob
    surface, ``ceil(budget_requests / samples)`` on the text surface, ``budget_requests`` on the first-token surface.

    Raises:
        OpError: the pool has fewer chat prompts than the budget needs.
    """
    chat = [p for p in pool if p.messages is not None]
    if s.surface == "text":
        need = s.text_prompts()
        what = f"a budget of {s.budget_requests} requests at {s.samples} per prompt"
    elif s.surface == "first_token":
        need, what = s.budget_requests, f"a budget of {s.budget_requests} one-token requests"
    else:
        need = math.ceil(s.budget_tokens / s.max_tokens)
        what = f"a budget of {s.budget_tokens} tokens at {s.max_tokens} per prompt"
    if len(chat) < need:
        raise OpError(f"the prompt set has {len(chat)} chat prompts; {what} needs {need} (pass a larger "
                      "--prompts set)")
    return random.Random(f"audit:{s.seed}").sample(chat, need)


async def collect_audit(client: Client, info: EngineInfo, ref: Reference, prompts: Sequence[Prompt], run: RunDir,
                        s: AuditSettings, *, prompts_info: dict[str, Any]) -> dict[str, Any]:
    """Trajectories from the engine into ``run/quality/<label>/`` (with their ``quality_trajectory`` record, as
    ``quality trajectory`` writes them), each scored against ``ref``.

    Returns:
        ``{"rows": trajectory rows, "state": collection state, "scored": per-prompt score results,
        "problems": integrity problems, "trajectory_record": its id, "surface": "logprob" | "text"}``; ``text``
        when the engine returned no logprobs (the statistic then cannot be computed: the report says so).
    """
    out_dir = run.quality_dir(s.label)
    ts = TrajectorySettings(label=s.label, max_tokens=s.max_tokens, top_logprobs=s.top_logprobs, seed=0)
    rows, state = await collect_engine(client, info, prompts, out_dir, ts)
    write_index(out_dir, label=s.label, model=str(info.model), engine=info.engine,
                prompts_sha256=prompts_info["sha256"], rows=rows)
    rec = trajectory_record(run, out_dir, rows, label=s.label, engine=info.identity(), model=str(info.model), s=ts,
                            prompts=prompts_info, state=state)
    tset = load_set(out_dir)
    scorer = TrajectoryScorer(ref, {min(s.top_logprobs, ref.k)}, "reference")
    scored = mark_lost_ids(await scorer.score_set(tset), tset.docs)
    methods = {r.get("method") for r in rows if "error" not in r}
    return {"rows": rows, "state": state, "scored": scored, "problems": list(tset.problems),
            "trajectory_record": rec["evidence_id"], "surface": "logprob" if methods - {"text"} else "text"}


def comparable(scored: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The scored prompts a statistic may use: scored without error, with the engine's prompt ids equal to the
    reference's rendering, and with every generated token's id streamed (``mark_lost_ids``). An honest llama-server
    tokenizes some Unicode-heavy prompts differently from the reference (observed 3 Dec 2026: 435 vs 448 ids from
    token 132 on, KL 16 nats/token on that prompt alone), and streams the byte tokens of one character as one entry
    (21 ids for 64 tokens of emoji: teacher-forced, the sequence is misaligned, KL 19); either prompt measures the
    stream or the tokenization, not the weights."""
    return [r for r in scored if "error" not in r and not r.get("template_mismatch") and not r.get("lost_ids")]


def mark_lost_ids(scored: Sequence[dict[str, Any]], docs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``scored`` with ``lost_ids`` (a sentence) on each prompt whose trajectory streamed fewer token ids than its
    ``usage.completion_tokens`` (one of slack at a natural stop: an EOS counted, not streamed): some generated tokens
    have no id, so the ids the reference is forced along are not the sequence the engine generated."""
    out = []
    for r in scored:
        doc = docs.get(str(r.get("id"))) or {}
        usage = doc.get("usage")
        n, ids = usage.get("completion_tokens") if isinstance(usage, dict) else None, doc.get("token_ids")
        slack = 1 if doc.get("finish_reason") == "stop" else 0
        if isinstance(n, int) and isinstance(ids, list) and n - len(ids) > slack:
            r = {**r, "lost_ids": f"{len(ids)} token ids streamed for usage {n}"}
        out.append(r)
    return out


def audit_report(collected: Mapping[str, Any], cells: Sequence[Mapping[str, Any]], s: AuditSettings,
                 table_source: str) -> dict[str, Any]:
    """The audit's report from what ``collect_audit`` returned (pure).

    Returns:
        ``{"format", "surface", "method", "claim", "statistic", "budget_used", "verdict", "reason", "power",
        "threshold", "cell", "prompts", "failed", "limitations", "table"}``.
    """
    scored = list(collected["scored"])
    failed = [r for r in collected["rows"] if "error" in r] + [r for r in scored if "error" in r]
    limitations: list[str] = []
    if collected["surface"] != "logprob":
        verdict = judge_equivalence(None, cells, method="logprob", claim=s.claim, budget_used=0)
        verdict["reason"] = ("the endpoint returned no logprobs on generated tokens: no logprob statistic (the "
                             "text surface, --surface text or auto, judges such an endpoint)")
        stat: dict[str, Any] = {"statistic": None, "positions": 0}
    else:
        rows = [row for r in comparable(scored) for row in r.get("rows") or ()]
        stat = logprob_statistic(rows)
        # the budget as the calibration counts it: prompts scored × max_tokens (an honest reply may stop early)
        nominal = sum(1 for r in scored if "error" not in r) * s.max_tokens
        stat["budget_nominal"] = nominal
        verdict = judge_equivalence(stat["statistic"], cells, method="logprob", claim=s.claim, budget_used=nominal,
                                    name=stat["name"], made=s.made())
        if stat["name"] == "gap":
            limitations.append("the engine named no token ids, so its top-k lists could not be paired with the "
                               "reference's: the statistic is the DiFR gap alone, on its text re-tokenized by the "
                               "reference (judged only against cells of that statistic)")
    mismatched = [r["id"] for r in scored if r.get("template_mismatch")]
    if mismatched:
        limitations.append(f"{len(mismatched)} prompt(s) left out of the statistic: the engine's prompt token ids "
                           f"differ from the reference's rendering ({', '.join(mismatched[:3])}), so their divergence "
                           "would measure the tokenization, not the model (the calibration leaves such prompts out "
                           "too)")
    lost = [f"{r['id']} ({r['lost_ids']})" for r in scored if r.get("lost_ids") and not r.get("template_mismatch")]
    if lost:
        limitations.append(f"{len(lost)} prompt(s) left out of the statistic: the stream carried fewer token ids "
                           f"than usage counts ({'; '.join(lost[:3])}), so the reference cannot be forced along the "
                           "generated sequence (llama-server streams a multi-byte character's tokens as one entry)")
    if failed:
        limitations.append(f"{len(failed)} prompt(s) failed to collect or score; the budget counts only scored "
                           "prompts")
    if collected.get("problems"):
        limitations.append("trajectory integrity: " + "; ".join(collected["problems"][:3]))
    if not cells:
        limitations.append(f"no calibration table ({table_source}): no threshold, so no verdict but UNPROVEN")
    limitations += cell_notes(verdict.get("cell"))
    return {"format": AUDIT_FORMAT, "surface": collected["surface"], "method": "logprob", "claim": s.claim,
            "budget_tokens": s.budget_tokens, "budget_used": stat.get("budget_nominal", 0),
            "positions": stat.get("positions", 0), "statistic": stat,
            "verdict": str(verdict["verdict"]), "reason": verdict["reason"], "power": verdict.get("power"),
            "threshold": verdict.get("threshold"), "cell": verdict.get("cell"), "prompts": len(scored),
            "failed": [{"id": r["id"], "error": r["error"]} for r in failed], "limitations": limitations,
            "table": table_source}


def load_table(path: str | None) -> tuple[list[dict[str, Any]], str]:
    """The calibration cells and where they came from: ``path``, else the table shipped in this package (none yet:
    ``([], "none shipped")``).

    Raises:
        OpError: ``path`` unreadable, or not a table (``{"cells": [...]}``).
    """
    if path:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise OpError(f"--table {path}: cannot read a calibration table ({e})") from None
        src = path
    else:
        shipped = resources.files("inferencekit.quality").joinpath(SHIPPED_TABLE)
        if not shipped.is_file():
            return [], "none shipped for this model yet"
        doc, src = json.loads(shipped.read_text()), f"shipped ({SHIPPED_TABLE})"
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise OpError(f"{src}: not a calibration table (no list of cells)")
    return cells, src
