"""The unique_prompts gate: no prompt may repeat inside one load level.

A repeated prompt can be served from an exact or prefix cache, which makes the level's speed figure a
cache's. Judged from a recorded run's load requests alone (``gates/check.py`` reads them: one
``request_row`` per request body, ``inputs/<engine>/load-<level>/<bucket>/<id>[~k].json``, or the reply
file when a level holds no bodies; with no load level at all, the lines of another harness's
``*schedule*.jsonl`` / ``*requests*.jsonl``, ``schedule_rows``). The seed's rule (``gate_unique_prompts``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from inferencekit.evidence.canonical import canonical_json, sha256_hex
from inferencekit.gates.inputs import RunRows
from inferencekit.gates.result import Gate
from inferencekit.rundir import SALT_PATTERN

__all__ = ["SALT_MIN_BITS", "gate_unique_prompts", "judge_run", "request_row", "salt_of", "salted_split",
           "schedule_rows"]

_MAX_DETAILS = 50  # repeat rows kept in the details (the metrics keep the full counts)


SALT_MIN_BITS = 64  # MLPerf Endpoints: prefix reuse only behind a per-query random salt of at least 64 bits
_TAG = re.compile(SALT_PATTERN.pattern.lstrip("^"))
_TURN = re.compile(r"\.t(\d+)$")
_OUR_SALT = re.compile(r"ik-([0-9a-f]+)")  # the salts bench serve writes; another harness's are not sized


def _first_user_text(body: dict[str, Any]) -> str | None:
    """The text the salt goes into: the first user message's (a content-part list: its first text part), else the
    text prompt's; None when the body has neither."""
    if isinstance(body.get("messages"), list):
        msgs = [m for m in body["messages"] if isinstance(m, dict)]
        first = next((m for m in msgs if m.get("role") == "user"), msgs[0] if msgs else None)
        c = first.get("content") if first else None
        if isinstance(c, list):  # content parts: the tag is a text part of its own, first
            c = next((part.get("text") for part in c if isinstance(part, dict) and part.get("type") == "text"), None)
        return c if isinstance(c, str) else None
    return body["prompt"] if isinstance(body.get("prompt"), str) else None


def salt_of(body: dict[str, Any]) -> str | None:
    """The reuse tag (``ik-<hex>``) bench serve put into the request's first user message (or its text prompt):
    at its start, or right after an intended shared prefix (``bench/plan.py``); else None."""
    split = salted_split(body)
    return split[1] if split else None


def salted_split(body: dict[str, Any]) -> tuple[int, str] | None:
    """``(at, salt)``: where the tag starts in the first user text (0, or the length of the intended shared prefix
    in front of it) and the tag; None when the body carries none. The first tag found is the one: a prompt's own
    text after it is not searched for another."""
    text = _first_user_text(body)
    m = _TAG.search(text) if text else None
    return (m.start(), f"ik-{m.group(1)}") if m else None


def _salted_part(body: dict[str, Any], at: int) -> Any:
    """What the uniqueness key hashes: the messages (or prompt) with the first user text cut to its salted part,
    the tag and what follows it; the intended shared prefix in front is left out."""
    if isinstance(body.get("messages"), list):
        out, done = [], False
        for m in body["messages"]:
            if not done and isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                m, done = {**m, "content": m["content"][at:]}, True
            out.append(m)
        return out
    return body["prompt"][at:] if isinstance(body.get("prompt"), str) else body.get("prompt")


def request_row(source: str, engine: str, level: str, prompt: str, body: Any, *, from_inputs: bool
                ) -> dict[str, Any] | None:
    """One load request as unique_prompts compares it, or None for an unreadable file.

    Args:
        source: the file's path relative to the run dir (named in the details).
        engine, level: where it ran; prompt: its prompt id (the file name less ``~k``).
        body: the parsed request body (``from_inputs``), else the parsed reply file.

    Returns:
        ``{"source", "engine", "level", "key", "salt", "prompt", "reuse", "prefix", "session", "turn"}``: ``key`` is
        the sha256 of the canonical JSON (evidence/canonical.py) of the body's ``messages`` (else its ``prompt``)
        with the first user text cut to its salted part (``salted_split``: an intended shared prefix in front of
        the tag is left out, so uniqueness is judged on what the salt covers) and ``salt`` that tag; ``prefix``
        the sha256 of the text in front of the tag (None when the tag leads). From a reply file (the text sent is
        not there) the key is ``"<id>|<salt>"`` and ``prefix`` its ``shared_prefix_id``. ``reuse``: a salted later
        use of a prompt of the run (file name ``<id>~k``; bench serve salts every request, the first use too, so
        the salt alone does not say it). ``session`` / ``turn``: a multi-turn session's turn (file name
        ``<key>.t<k>``, or the reply's ``session_id`` / ``turn``), whose earlier turns it resends on purpose.
    """
    if not isinstance(body, dict):
        return None
    name = source.rsplit("/", 1)[-1].split(".json", 1)[0]
    turn_m = _TURN.search(name)
    session: str | None = name[:turn_m.start()] if turn_m else None
    turn: int | None = int(turn_m.group(1)) if turn_m else None
    text = body.get("messages", body.get("prompt")) if from_inputs else None
    prefix: str | None = None
    if text is not None:
        split = salted_split(body)
        salt = split[1] if split else None
        if split and split[0] > 0:
            head = _first_user_text(body) or ""
            prefix = sha256_hex(head[:split[0]].encode())
        key = sha256_hex(canonical_json(_salted_part(body, split[0]) if split else text))
    else:
        prompt = str(body.get("id") or prompt)
        salt = body.get("salt") if isinstance(body.get("salt"), str) else None
        key = f"{prompt}|{salt or ''}"
        prefix = body.get("shared_prefix_id") if isinstance(body.get("shared_prefix_id"), str) else None
        if isinstance(body.get("session_id"), str) and isinstance(body.get("turn"), int):
            session, turn = body["session_id"], body["turn"]
    return {"source": source, "engine": engine, "level": level, "key": key, "salt": salt, "prompt": prompt,
            "reuse": bool(salt) and "~" in name, "prefix": prefix, "session": session, "turn": turn}


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

    Uniqueness is judged on the salted part (``request_row``): the reuse a workload intends is named, never a
    repeat: a shared prefix in front of the salt (``--shared-prefix-tokens``: the same text before the tag in
    several requests) and a session's later turns, which resend its own history (``--dataset conversations``).
    A salt shorter than ``SALT_MIN_BITS`` (an older run's 48-bit tags) is a limitation.

    Metrics: ``requests``, ``levels`` (engine-level pairs), ``repeated_prompts`` (distinct prompts seen
    more than once in a level), ``repeat_requests`` (requests beyond each prompt's first), ``salted_reuses``,
    ``prefix_requests`` / ``prefix_groups`` (requests behind an intended shared prefix, and how many distinct
    prefixes), ``later_turns`` / ``sessions`` (turns after a session's first, and the sessions), ``weak_salts``.
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
    prefixed = [r for r in reqs if r.get("prefix")]
    later = [r for r in reqs if isinstance(r.get("turn"), int) and r["turn"] > 1]
    sessions = {(r["engine"], r["level"], r.get("session")) for r in reqs if r.get("session")}
    weak = [r for r in reqs if isinstance(r.get("salt"), str) and (m := _OUR_SALT.fullmatch(r["salt"]))
            and 4 * len(m.group(1)) < SALT_MIN_BITS]
    metrics = {"requests": len(reqs), "levels": len(levels), "repeated_prompts": len(repeated),
               "repeat_requests": len(repeats), "salted_reuses": salted, "prefix_requests": len(prefixed),
               "prefix_groups": len({r["prefix"] for r in prefixed}), "later_turns": len(later),
               "sessions": len(sessions), "weak_salts": len(weak)}
    if salted:
        lim.append(f"{salted} load request(s) reuse a prompt behind a unique [ik-<salt>] tag (the prompt set ran "
                   "out): an exact or prefix cache cannot serve them, a near-duplicate cache could")
    if weak:
        lim.append(f"{len(weak)} load request(s) carry a salt of fewer than {SALT_MIN_BITS} bits (first: "
                   f"{weak[0]['source']}): a short salt can repeat by chance, so their uniqueness is weaker than "
                   "MLPerf Endpoints asks of a per-query salt")
    intended = []
    if later:
        intended.append(f"{len(later)} later turn(s) of {len(sessions)} session(s) resend their own history")
    if prefixed:
        intended.append(f"{len(prefixed)} request(s) share one of {metrics['prefix_groups']} prefix(es) in front of "
                        "their salt")
    intended_note = f"; intended reuse, not repeats: {', '.join(intended)}" if intended else ""
    if repeats:
        return Gate("unique_prompts", "FAIL", f"{len(repeated)} prompt(s) sent more than once inside a load level "
                    f"({len(repeats)} repeat request(s) of {len(reqs)}): a cache could have served them", metrics,
                    repeats[:_MAX_DETAILS], lim)
    return Gate("unique_prompts", "PASS", f"{len(reqs)} load requests over {len(levels)} level(s): no prompt repeats "
                "inside a level" + (f" ({salted} salted reuse(s))" if salted else "") + intended_note, metrics, [], lim,
                judged=len(reqs), rules_out=f"every one of the {len(reqs)} load requests was read: no repeat inside a "
                "level, not a sample")


def judge_run(rows: RunRows) -> Gate:
    """unique_prompts on the run dir's load requests (``rows.requests``)."""
    return gate_unique_prompts(rows.requests, rows.journals, rows.unreadable_schedule_lines)
