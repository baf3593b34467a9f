"""The unique_prompts gate: no prompt may repeat inside one load level.

A repeated prompt can be served from an exact or prefix cache, which makes the level's speed figure a
cache's. Judged from a recorded run's load requests alone (``gates/check.py`` reads them: one
``request_row`` per request body, ``inputs/<engine>/load-<level>/<bucket>/<id>[~k].json``, or the reply
file when a level holds no bodies; with no load level at all, the lines of another harness's
``*schedule*.jsonl`` / ``*requests*.jsonl``, ``schedule_rows``). The seed's rule (``gate_unique_prompts``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from inferencekit.evidence.canonical import canonical_json, sha256_hex
from inferencekit.gates.inputs import RunRows
from inferencekit.gates.result import Gate
from inferencekit.rundir import SALT_PATTERN

__all__ = ["gate_unique_prompts", "judge_run", "request_row", "salt_of", "schedule_rows"]

_MAX_DETAILS = 50  # repeat rows kept in the details (the metrics keep the full counts)


def salt_of(body: dict[str, Any]) -> str | None:
    """The reuse tag (``ik-<hex>``) bench serve put at the start of the request's first user message
    (or of its text prompt), else None (see ``bench/plan.py``)."""
    text: Any = None
    if isinstance(body.get("messages"), list):
        msgs = [m for m in body["messages"] if isinstance(m, dict)]
        first = next((m for m in msgs if m.get("role") == "user"), msgs[0] if msgs else None)
        c = first.get("content") if first else None
        if isinstance(c, list):  # content parts: the tag is a text part of its own, first
            c = next((part.get("text") for part in c if isinstance(part, dict) and part.get("type") == "text"), None)
        text = c
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    m = SALT_PATTERN.match(text) if isinstance(text, str) else None
    return f"ik-{m.group(1)}" if m else None


def request_row(source: str, engine: str, level: str, prompt: str, body: Any, *, from_inputs: bool
                ) -> dict[str, Any] | None:
    """One load request as unique_prompts compares it, or None for an unreadable file.

    Args:
        source: the file's path relative to the run dir (named in the details).
        engine, level: where it ran; prompt: its prompt id (the file name less ``~k``).
        body: the parsed request body (``from_inputs``), else the parsed reply file.

    Returns:
        ``{"source", "engine", "level", "key", "salt", "prompt", "reuse"}``: ``key`` is the sha256 of the canonical
        JSON (evidence/canonical.py) of the body's ``messages`` (else its ``prompt``) and ``salt`` the tag at the
        start of that text; from a reply file (the text sent is not there) the key is ``"<id>|<salt>"``. ``reuse``:
        a salted later use of a prompt of the run (file name ``<id>~k``; bench serve salts every request, the
        first use too, so the salt alone does not say it).
    """
    if not isinstance(body, dict):
        return None
    text = body.get("messages", body.get("prompt")) if from_inputs else None
    if text is not None:
        key, salt = sha256_hex(canonical_json(text)), salt_of(body)
    else:
        prompt = str(body.get("id") or prompt)
        salt = body.get("salt") if isinstance(body.get("salt"), str) else None
        key = f"{prompt}|{salt or ''}"
    return {"source": source, "engine": engine, "level": level, "key": key, "salt": salt, "prompt": prompt,
            "reuse": bool(salt) and "~" in source.rsplit("/", 1)[-1]}


def schedule_rows(source: str, lines: Sequence[bytes | str], default_engine: str) -> tuple[list[dict[str, Any]], int]:
    """``request_row``-shaped rows from a load schedule another harness wrote, one request per line, and the
    count of lines that could not be read as one (not JSON, not an object, no level, no prompt).

    A line is ``{"level" (else "concurrency", else "rate_rps"), "prompt_sha256" | "messages" | "prompt" |
    "prompt_id" | "id", "salt"?, "engine"?}``: the key is ``prompt_sha256`` when given, else the sha256 of the
    canonical JSON of ``messages`` (else ``prompt``), else ``"<prompt_id>|<salt>"``; ``engine`` defaults to
    ``default_engine`` (the schedule's folder). The seed's layout (``_load_requests``)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    for i, line in enumerate(lines, 1):
        if not (line.strip() if isinstance(line, str) else line.strip()):
            continue
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        level = r.get("level", r.get("concurrency", r.get("rate_rps"))) if isinstance(r, dict) else None
        if level is None or isinstance(level, (dict, list)):
            bad += 1
            continue
        text = r.get("messages", r.get("prompt"))
        pid = r.get("prompt_id", r.get("id"))
        salt = r.get("salt") if isinstance(r.get("salt"), str) else None
        if isinstance(r.get("prompt_sha256"), str) and r["prompt_sha256"]:
            key = r["prompt_sha256"]
        elif text is not None:
            key = sha256_hex(canonical_json(text))
        elif pid is not None:
            key = f"{pid}|{salt or ''}"
        else:
            bad += 1
            continue
        engine = r.get("engine") if isinstance(r.get("engine"), str) else default_engine
        rows.append({"source": f"{source}:{i}", "engine": engine, "level": str(level), "key": key, "salt": salt,
                     "prompt": str(pid if pid is not None else key), "reuse": salt is not None})
    return rows, bad


def gate_unique_prompts(reqs: Sequence[Mapping[str, Any]], journals: Sequence[str] = (), unreadable: int = 0
                        ) -> Gate:
    """No prompt may repeat inside one load level (one engine, one level): a repeat can be served from an
    exact or prefix cache, which makes the level's speed figure a cache's.

    - NOT RUN (not applicable): the run dir holds no load requests.
    - FAIL: two requests of one (engine, level) carry the same messages / prompt. The same prompt in two
      levels, or for two engines, is allowed.
    - PASS otherwise. A salted reuse (``[ik-<salt>] `` tag, ``bench/plan.py``) is a distinct prompt; it
      is counted and named in the limitations, because a near-duplicate cache could still serve it.

    Metrics: ``requests``, ``levels`` (engine-level pairs), ``repeated_prompts`` (distinct prompts seen
    more than once in a level), ``repeat_requests`` (requests beyond each prompt's first), ``salted_reuses``.
    Args:
        reqs: one ``request_row`` per load request of the run dir (every engine, every level).
        journals: load-level journals never turned into files (relative paths): their requests are not judged,
            which is a limitation.
        unreadable: schedule lines that held no readable request (``schedule_rows``): not judged, a limitation;
            with no row read at all the gate is UNPROVEN, not NOT RUN (a schedule was there).

    Details: one row per repeat -- its ``source`` file and the ``first`` file that sent the same prompt
    (at most 50). The seed's rule (``gate_unique_prompts``).
    """
    lim = []
    if journals:
        lim.append(f"{len(journals)} load level(s) still hold an unwritten journal (an interrupted run; --resume "
                   f"writes its files), whose requests are not judged: {', '.join(journals[:5])}")
    if unreadable:
        lim.append(f"{unreadable} line(s) of the load schedule(s) held no readable request and were not judged")
    if not reqs and unreadable:
        return Gate("unique_prompts", "UNPROVEN", f"a load schedule was found but none of its {unreadable} line(s) "
                    "could be read as a request (level and prompt)", limitations=lim)
    if not reqs:
        return Gate("unique_prompts", "NOT RUN", "no load requests in the run dir (inputs/ or outputs/<engine>/"
                    "load-<level>/<bucket>/, or a *schedule*.jsonl / *requests*.jsonl)", limitations=lim,
                    applicable=False)
    first: dict[tuple[str, str, str], str] = {}
    repeated: set[tuple[str, str, str]] = set()
    repeats: list[dict[str, Any]] = []
    for r in reqs:
        k = (r["engine"], r["level"], r["key"])
        if k in first:
            repeated.add(k)
            repeats.append({"source": r["source"], "first": first[k], "engine": r["engine"], "level": r["level"],
                            "prompt": r["prompt"], "salt": r["salt"]})
        else:
            first[k] = r["source"]
    levels = {(r["engine"], r["level"]) for r in reqs}
    salted = sum(1 for r in reqs if r.get("reuse", bool(r["salt"])))
    metrics = {"requests": len(reqs), "levels": len(levels), "repeated_prompts": len(repeated),
               "repeat_requests": len(repeats), "salted_reuses": salted}
    if salted:
        lim.append(f"{salted} load request(s) reuse a prompt behind a unique [ik-<salt>] tag (the prompt set ran "
                   "out): an exact or prefix cache cannot serve them, a near-duplicate cache could")
    if repeats:
        return Gate("unique_prompts", "FAIL", f"{len(repeated)} prompt(s) sent more than once inside a load level "
                    f"({len(repeats)} repeat request(s) of {len(reqs)}): a cache could have served them", metrics,
                    repeats[:_MAX_DETAILS], lim)
    return Gate("unique_prompts", "PASS", f"{len(reqs)} load requests over {len(levels)} level(s): no prompt repeats "
                "inside a level" + (f" ({salted} salted reuse(s))" if salted else ""), metrics, [], lim,
                judged=len(reqs), rules_out=f"every one of the {len(reqs)} load requests was read: no repeat inside a "
                "level, not a sample")


def judge_run(rows: RunRows) -> Gate:
    """unique_prompts on the run dir's load requests (``rows.requests``)."""
    return gate_unique_prompts(rows.requests, rows.journals, rows.unreadable_schedule_lines)
