"""Run-dir gates judged from files alone: unique_prompts and the static part of output_length.

Both read a recorded run directory (DESIGN.md, "Run directory")::

    inputs/<engine>/<bucket>/<id>.json                      request body of a fixed-length request
    inputs/<engine>/load-<level>/<bucket>/<id>[~k].json     request body of a load request, as sent
    outputs/<engine>/<bucket>/<id>.json                     its reply file ("Reply file")
    outputs/<engine>/load-<level>/<bucket>/<id>[~k].json

Reply and request files may be gzipped (``.json.gz``). ``outputs/<engine>/warmup/`` (not counted) and
``outputs/<engine>/probes/`` (hidden probes, which repeat prompts on purpose and are judged by
hidden_probes) are not read here.

Rules and thresholds follow the seed's run-dir gates (``../shared/seeds/000``: ``gate_unique_prompts``,
``gate_output_length_static``), with DESIGN.md's departure: the seed judged only the top-level buckets,
so the load levels -- the requests behind the published numbers -- went unjudged; here exact-length
requests are read from every ``load-<level>/`` folder as well.
"""

from __future__ import annotations

import gzip
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from inferencekit.evidence.canonical import canonical_json, sha256_hex
from inferencekit.gates.result import Gate
from inferencekit.rundir import SALT_PATTERN
from inferencekit.stats import combine_claims

__all__ = ["exact_length_of", "gate_output_length_static", "gate_unique_prompts", "load_requests", "output_lengths",
           "salt_of"]

_SKIPPED = ("warmup", "probes")  # outputs/<engine>/ folders that are not buckets
_MAX_DETAILS = 50  # rows of each kind kept in a gate's details (the metrics keep the full counts)


# ---- files

def _read(path: Path) -> Any:
    """Parsed JSON of a ``.json`` or ``.json.gz`` file, or None when unreadable."""
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return orjson.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, orjson.JSONDecodeError):
        return None


def _name(path: Path) -> str:
    """The file's request key: its name less ``.json`` / ``.json.gz``."""
    n = path.name
    return n[: -len(".json.gz")] if n.endswith(".json.gz") else n[: -len(".json")]


def _files(folder: Path) -> list[Path]:
    """``folder/<bucket>/*.json[.gz]``, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for pat in ("*/*.json", "*/*.json.gz") for p in folder.glob(pat) if p.is_file())


def _walk(engine_dir: Path) -> Iterator[tuple[str | None, Path]]:
    """(level or None, file) for the top-level buckets and every ``load-<level>/`` of one engine folder."""
    if not engine_dir.is_dir():
        return
    for p in _files(engine_dir):
        if not p.parent.name.startswith("load-") and p.parent.name not in _SKIPPED:
            yield None, p
    for d in sorted(engine_dir.glob("load-*")):
        if d.is_dir():
            for p in _files(d):
                yield d.name[len("load-"):], p


def _key(level: str | None, path: Path) -> str:
    """``<id>[~k]`` for a top-level request, ``load-<level>/<id>[~k]`` for a load request (ids repeat
    across levels, so the level is part of the key)."""
    return _name(path) if level is None else f"load-{level}/{_name(path)}"


# ---- request bodies

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


def exact_length_of(body: dict[str, Any]) -> int | None:
    """``max_tokens`` (else ``max_completion_tokens``) when the request forces its output to exactly that
    length -- ``ignore_eos`` true, or ``min_tokens`` equal to it -- else None (the seed's rule)."""
    mt = body.get("max_tokens")
    if not _is_int(mt):
        mt = body.get("max_completion_tokens")
    if not _is_int(mt):
        return None
    if body.get("ignore_eos") is True or (_is_int(body.get("min_tokens")) and body["min_tokens"] == mt):
        return int(mt)
    return None


def _mechanisms(body: dict[str, Any]) -> set[str]:
    """The options by which ``body`` forces its exact length."""
    out = set()
    if body.get("ignore_eos") is True:
        out.add("ignore_eos")
    if _is_int(body.get("min_tokens")) and exact_length_of(body) == body["min_tokens"]:
        out.add("min_tokens")
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# ---- unique_prompts

def load_requests(run_dir: Path) -> list[dict[str, Any]]:
    """One row per load request of a ``bench serve`` run dir.

    Rows: ``{"source": path relative to run_dir, "engine", "level", "key", "salt", "prompt"}``, where
    ``key`` is the sha256 of the canonical JSON (evidence/canonical.py) of the body's ``messages`` (else
    its ``prompt``), ``salt`` the reuse tag found at the start of that text and ``prompt`` the prompt id
    (the file name less ``~k``). The bodies come from ``inputs/<engine>/load-<level>/<bucket>/``; a level
    with no request bodies falls back to its reply files in ``outputs/``, keyed by ``"<id>|<salt>"``
    (what the reply records: the text sent is not there).
    """
    run_dir = Path(run_dir)
    rows: list[dict[str, Any]] = []
    levels = sorted({(d.parent.name, d.name) for kind in ("inputs", "outputs")
                     for d in (run_dir / kind).glob("*/load-*") if d.is_dir()})
    for engine, folder in levels:
        level = folder[len("load-"):]
        bodies = _files(run_dir / "inputs" / engine / folder)
        from_inputs = bool(bodies)
        for p in bodies or _files(run_dir / "outputs" / engine / folder):
            o = _read(p)
            if not isinstance(o, dict):
                continue
            prompt = _name(p).split("~", 1)[0]
            text = o.get("messages", o.get("prompt")) if from_inputs else None
            if text is not None:
                key, salt = sha256_hex(canonical_json(text)), salt_of(o)
            else:
                prompt = str(o.get("id") or prompt)
                salt = o.get("salt") if isinstance(o.get("salt"), str) else None
                key = f"{prompt}|{salt or ''}"
            rows.append({"source": p.relative_to(run_dir).as_posix(), "engine": engine, "level": level, "key": key,
                         "salt": salt, "prompt": prompt})
    return rows


def gate_unique_prompts(run_dir: Path) -> Gate:
    """No prompt may repeat inside one load level (one engine, one level): a repeat can be served from an
    exact or prefix cache, which makes the level's speed figure a cache's.

    - NOT RUN (not applicable): the run dir holds no load requests.
    - FAIL: two requests of one (engine, level) carry the same messages / prompt. The same prompt in two
      levels, or for two engines, is allowed.
    - PASS otherwise. A salted reuse (``[ik-<salt>] `` tag, ``bench/plan.py``) is a distinct prompt; it
      is counted and named in the limitations, because a near-duplicate cache could still serve it.

    Metrics: ``requests``, ``levels`` (engine-level pairs), ``repeated_prompts`` (distinct prompts seen
    more than once in a level), ``repeat_requests`` (requests beyond each prompt's first), ``salted_reuses``.
    Details: one row per repeat -- its ``source`` file and the ``first`` file that sent the same prompt
    (at most 50). The seed's rule (``gate_unique_prompts``).
    """
    run_dir = Path(run_dir)
    reqs = load_requests(run_dir)
    journals = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "outputs").glob("*/load-*/journal.jsonl"))
    lim = []
    if journals:
        lim.append(f"{len(journals)} load level(s) still hold an unwritten journal (an interrupted run; --resume "
                   f"writes its files), whose requests are not judged: {', '.join(journals[:5])}")
    if not reqs:
        return Gate("unique_prompts", "NOT RUN", "no load requests in the run dir (inputs/ or outputs/<engine>/"
                    "load-<level>/<bucket>/)", limitations=lim, applicable=False)
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
    salted = sum(1 for r in reqs if r["salt"])
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
                "inside a level" + (f" ({salted} salted reuse(s))" if salted else ""), metrics, [], lim)


# ---- output_length

def output_lengths(outputs_dir: Path) -> dict[str, dict[str, Any]]:
    """Generated length of every reply under one engine's outputs folder (``outputs/<engine>``).

    Keys as ``_key``: ``<id>[~k]`` for ``<bucket>/`` replies, ``load-<level>/<id>[~k]`` for load replies;
    warmup/ and probes/ are skipped. Values: ``{"source": path relative to outputs_dir, "bucket",
    "level" (None at top level), "length", "method", "problem"}`` -- ``length`` is ``len(token_ids)``
    when the reply has them (method ``token_ids``), else ``usage.completion_tokens`` (``usage``); it is
    None, with ``problem`` saying why, for an unreadable file, a failed request (``error``) or a reply
    with neither field.
    """
    outputs_dir = Path(outputs_dir)
    out: dict[str, dict[str, Any]] = {}
    for level, p in _walk(outputs_dir):
        row: dict[str, Any] = {"source": p.relative_to(outputs_dir).as_posix(), "bucket": p.parent.name,
                               "level": level, "length": None, "method": None, "problem": None}
        o = _read(p)
        if not isinstance(o, dict):
            row["problem"] = "unreadable reply file"
        elif o.get("error"):
            row["problem"] = f"request failed: {str(o['error'])[:120]}"
        elif isinstance(o.get("token_ids"), list):
            row.update(length=len(o["token_ids"]), method="token_ids")
        elif _is_int((o.get("usage") or {}).get("completion_tokens")):
            row.update(length=o["usage"]["completion_tokens"], method="usage")
        else:
            row["problem"] = "reply has neither token_ids nor usage.completion_tokens"
        out[_key(level, p)] = row
    return out


def _exact_requests(run_dir: Path, engine: str) -> dict[str, tuple[int, set[str], str]]:
    """{key: (max_tokens, forcing options, source)} for the exact-length request bodies of one engine."""
    base = run_dir / "inputs" / engine
    out = {}
    for level, p in _walk(base):
        body = _read(p)
        want = exact_length_of(body) if isinstance(body, dict) else None
        if want is not None:
            out[_key(level, p)] = (want, _mechanisms(body), p.relative_to(run_dir).as_posix())
    return out


def _exact_part(run_dir: Path, engine: str, cand: dict[str, dict[str, Any]], ignored: set[str],
                metrics: dict[str, Any], details: list[dict[str, Any]]) -> list[tuple[str, str]]:
    wrong: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    unenforced: list[dict[str, Any]] = []
    n_unenforced = 0
    reqs = _exact_requests(run_dir, engine)
    for key, (want, how, source) in reqs.items():
        o = cand.get(key)
        n = o["length"] if o else None
        row = {"id": key, "source": source, "max_tokens": want}
        if how <= ignored:  # every option forcing this length is one the engine drops: nothing to hold it to
            n_unenforced += 1
            if n is not None and n != want:
                unenforced.append({**row, "length": n, "method": o["method"] if o else None})
        elif n is None:
            missing.append({**row, "problem": o["problem"] if o else "no reply file"})
        elif n != want:
            wrong.append({**row, "length": n, "method": o["method"] if o else None})
    metrics.update(exact_length_outputs=len(reqs), exact_length_wrong=len(wrong), exact_length_missing=len(missing),
                   exact_length_unenforced=n_unenforced)
    sub = []
    judged = len(reqs) - n_unenforced
    if judged:
        v = "FAIL" if wrong else ("UNPROVEN" if missing else "PASS")
        ok = judged - len(wrong) - len(missing)
        why = (f"exact length: {ok}/{judged} outputs exactly max_tokens long, {len(wrong)} wrong, "
               f"{len(missing)} missing or failed")
        sub.append((v, why))
        details += wrong[:_MAX_DETAILS] + missing[:_MAX_DETAILS]
    if n_unenforced:
        names = " and ".join(sorted({o for _, how, _ in reqs.values() if how <= ignored for o in how}))
        why = (f"the engine is known to ignore {names}: {n_unenforced} exact-length request(s) cannot be held to "
               f"max_tokens ({len(unenforced)} came back another length)")
        sub.append(("UNPROVEN", why))
        details += unenforced[:_MAX_DETAILS]
    return sub


def _length_ratio(n: int, m: int) -> float | None:
    """Candidate length over reference length; a reference of 0 tokens matches only 0 (else None: an outlier)."""
    if m:
        return n / m
    return 1.0 if n == 0 else None


def _reference_part(cand: dict[str, dict[str, Any]], reference: Path, tol: float, max_outliers: float,
                    metrics: dict[str, Any], details: list[dict[str, Any]]) -> tuple[str, str]:
    ref = {key: r["length"] for key, r in output_lengths(reference).items() if r["length"] is not None}
    ref_n = len(ref)
    # a prompt the candidate did not answer counts against it (as an outlier of length 0), never as skipped
    missing = [{"id": key, "reference_length": m,
                "problem": f"candidate: {cand[key]['problem']}" if key in cand else "no candidate reply file"}
               for key, m in ref.items() if cand.get(key, {}).get("length") is None]
    pairs = {key: (cand[key]["length"], m) for key, m in ref.items() if cand.get(key, {}).get("length") is not None}
    ratio_of = {key: _length_ratio(n, m) for key, (n, m) in pairs.items()}
    outliers = [{"id": key, "length": pairs[key][0], "reference_length": pairs[key][1],
                 "ratio": None if r is None else round(r, 4)}
                for key, r in ratio_of.items() if r is None or abs(r - 1) > tol]
    scored = [0.0 if r is None else r for r in ratio_of.values()]
    coverage = len(pairs) / ref_n if ref_n else None
    metrics.update(reference_outputs=ref_n, reference_pairs=len(pairs), outside_tolerance=len(outliers),
                   missing_outputs=len(missing), coverage=coverage,
                   length_ratio_median=statistics.median(scored) if scored else None)
    if not ref_n:
        return "NOT RUN", f"the reference outputs under {reference} carry no lengths"
    share = (len(outliers) + len(missing)) / ref_n
    mean = sum(scored) / ref_n  # missing outputs add 0 to the sum
    metrics["length_ratio_mean"] = mean
    if share > max_outliers or abs(mean - 1) > tol:
        verdict = "FAIL"
    else:
        verdict = "UNPROVEN" if missing else "PASS"
    details += outliers[:_MAX_DETAILS] + missing[:_MAX_DETAILS]
    return verdict, (f"{len(outliers)}/{ref_n} prompts outside +/-{tol:.0%} of the reference length and "
                     f"{len(missing)} without a candidate output (together {share:.0%}, allowed {max_outliers:.0%}); "
                     f"coverage {coverage:.0%}; mean ratio {mean:.3f}")


def gate_output_length_static(run_dir: Path, engine: str, *, reference: Path | None = None, tol: float = 0.10,
                              max_outliers: float = 0.10, ignored_options: tuple[str, ...] = ()) -> Gate:
    """Output lengths of a recorded run: the engine generated as many tokens as it was asked and says.

    Two parts, each a verdict, combined by ``combine_claims``:

    - **Exact length.** Every request whose body forces an exact length (``ignore_eos`` true, or
      ``min_tokens == max_tokens``; ``exact_length_of``), in the top-level buckets and in every
      ``load-<level>/`` (DESIGN.md departure), must come back exactly ``max_tokens`` long (length from
      ``token_ids``, else ``usage.completion_tokens``). A wrong length is FAIL; a missing, unreadable or
      failed reply (or one with no length) is UNPROVEN. Requests forced only by options in
      ``ignored_options`` (e.g. ``("ignore_eos",)`` for llama-cpp-python, ``api.dialects.Dialect.ignores``)
      are not judged: that part is UNPROVEN, "the engine is known to ignore ignore_eos".
    - **Reference** (``reference`` = another engine's outputs folder, same layout). For each reply with a
      length there, the candidate's length / the reference's must lie within ``1 +/- tol``; a prompt with
      no candidate length is counted as an outlier (and as 0 in the mean). FAIL when the outlier share
      exceeds ``max_outliers`` or the mean ratio is off 1 by more than ``tol``; else UNPROVEN when some
      candidate outputs are missing; else PASS. Defaults 10% / 10% are the seed's. NOT RUN (that part)
      when the reference carries no lengths.

    NOT RUN (not applicable) when ``outputs/<engine>/`` holds no replies, or there are no exact-length
    requests and no reference. Metrics: ``exact_length_outputs``, ``exact_length_wrong``,
    ``exact_length_missing``, ``exact_length_unenforced``; with a reference also ``reference_outputs``,
    ``reference_pairs``, ``outside_tolerance``, ``missing_outputs``, ``coverage``, ``length_ratio_median``,
    ``length_ratio_mean``. Details: wrong, missing, then unenforced rows of each part (at most 50 a kind).
    The seed's rules (``gate_output_length_static``).
    """
    run_dir = Path(run_dir)
    cand = output_lengths(run_dir / "outputs" / engine)
    if not cand:
        return Gate("output_length", "NOT RUN", f"no replies under outputs/{engine}/", applicable=False)
    metrics: dict[str, Any] = {}
    details: list[dict[str, Any]] = []
    lim: list[str] = []
    sub = _exact_part(run_dir, engine, cand, set(ignored_options), metrics, details)
    if metrics["exact_length_unenforced"]:
        lim.append("the engine drops " + ", ".join(sorted(set(ignored_options) & {"ignore_eos", "min_tokens"})) +
                   ": its exact-length requests show nothing about its output lengths")
    if reference is not None:
        sub.append(_reference_part(cand, Path(reference), tol, max_outliers, metrics, details))
    if not sub:
        return Gate("output_length", "NOT RUN", "no exact-length requests and no reference outputs given", metrics,
                    applicable=False)
    return Gate("output_length", combine_claims(v for v, _ in sub), "; ".join(f"{v}: {w}" for v, w in sub), metrics,
                details, lim)
