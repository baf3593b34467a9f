"""A fixed draw of single-turn function-calling samples from the Berkeley Function Calling Leaderboard.

**Source.** The BFCL v4 data shipped in the PyPI package ``bfcl-eval==2026.3.23`` (Apache-2.0,
ShishirPatil/gorilla). The package pins some thirty heavy dependencies, so it is installed with
``pip install --no-deps bfcl-eval==2026.3.23`` and only its data folder is read:
``bfcl_eval/data/BFCL_v4_<subset>.json``. ``bfcl_eval`` is never imported (its ``__init__`` may
import what ``--no-deps`` left out). ``--bfcl-data DIR`` points at a folder holding the same files.

Each file is JSON Lines, one entry a line::

    {"id": "simple_python_0", "question": [[{"role": "user", "content": "..."}]],
     "function": [{"name": "math.factorial", "description": "...", "parameters": {"type": "dict", ...}}]}

``question`` is a list of turns; a single-turn subset has exactly one, and that turn is the chat
``messages`` list (roles ``user``, ``system`` and ``assistant`` occur).

**Subsets.** Only the thirteen single-turn categories (``SINGLE_TURN``). Multi-turn, memory,
web_search and format_sensitivity are left out on purpose: their samples only make sense inside
BFCL's own harness, which keeps state between turns, executes the tools and feeds results back.

**Conversion** (``to_openai_tools``) turns BFCL's function docs into OpenAI ``tools`` by written
rules, applied through ``properties``, ``items`` and ``additionalProperties``:

- type names: ``dict`` → ``object``, ``float`` → ``number``, ``tuple`` → ``array``; the Java and
  JavaScript spellings in the data (``String``, ``Boolean``, ``Array``, ``ArrayList``,
  ``HashMap``, ``long``, ``double``, ``char``) → their JSON-Schema names; ``any`` and ``""`` → no
  ``type`` key at all (JSON Schema's own "anything"); the standard names stay. Any other name is a
  ``ValueError``, so a new dataset version cannot slip an unconverted type through;
- the top-level ``parameters`` always gets ``"type": "object"``; every other key (``properties``,
  ``required``, ``description``, ``enum``, ``default``, ``format``, BFCL's ``optional``, …) is
  kept as is;
- function names must match OpenAI's ``^[a-zA-Z0-9_-]{1,64}$``: ``.`` (and any other character
  outside that set) becomes ``_``, ``math.factorial`` → ``math_factorial``; the renames are
  returned so a reply's tool call can be mapped back.

These rules are plain schema translation. BFCL's own FC handlers differ in details (they send
``any`` as ``string``, append a "float type" note to descriptions, and add language hints to Java
and JavaScript docs), so a run on this draw is not a BFCL score; it is a fixed, realistic set of
tool-calling requests.

**Draw** (``draw``): from each subset, in ``SINGLE_TURN`` order, ``k = min(per_subset, n)``
entries at the evenly spaced positions ``floor((j + 0.5) * n / k)``, j = 0..k-1 (systematic
sampling: each file is grouped by source, so even spacing reaches every part of it). The draw order
is round-robin over the subsets (the first of each, then the second of each, …), so any prefix of
it covers the subsets evenly. Nothing is random: the same files give the same draw, and
``Draw.draw_id`` (a hash of the ordered ids) shows that two runs used the same one.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from inferencekit.errors import OpError

__all__ = [
    "BFCL_PACKAGE",
    "BFCL_VERSION",
    "CONVERSION_RULES",
    "INSTALL_HINT",
    "PINNED_SHA256",
    "SINGLE_TURN",
    "Draw",
    "Sample",
    "bfcl_data_dir",
    "cap_draw",
    "draw",
    "installed_version",
    "load_answers",
    "load_subset",
    "to_openai_tools",
]

BFCL_PACKAGE = "bfcl-eval"
BFCL_VERSION = "2026.3.23"
BFCL_LICENSE = "Apache-2.0"
INSTALL_HINT = f"pip install --no-deps {BFCL_PACKAGE}=={BFCL_VERSION}"

SINGLE_TURN: tuple[str, ...] = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)

# sha256 of each file as shipped in bfcl-eval 2026.3.23, so a copy given with --bfcl-data can be
# shown to be the same data.
PINNED_SHA256: dict[str, str] = {
    "simple_python": "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991",
    "simple_java": "13d2303a125b08754f0e41995b9273b5005fa8ed8ebfaa24ef53b4d83c4b5c6e",
    "simple_javascript": "329e67fedf79a6243d93dbda4b388d12bd2d31f1f2163d92cb6ef676d1764f44",
    "multiple": "aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a",
    "parallel": "19f51a82eff42e5d62541aa500115a056eb78f437c2ba1f10415fd7c8e5dda84",
    "parallel_multiple": "8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579",
    "irrelevance": "2b6ed4c2e992cdcf5f1678a701851f944bef7550ee026ed1ddb89efed5be01a6",
    "live_simple": "1af2ac87dca47556db7b7e37e51e28b459a38b594e3c7b3c792b4903598ca0c4",
    "live_multiple": "fd8ccfad4d911420d0e3341dbe2fff77d1d341da934248b9bb2bda24ab3a10c8",
    "live_parallel": "6c26e9fdc3350cf596e6d1ea9c179cbff834761bccf562f4141ed29a839ca421",
    "live_parallel_multiple": "21d4b9319c1faac431e22757b367ea28917fe467364c3a4b17f16ec06d4f6e79",
    "live_irrelevance": "6559fda2beaceb609a2cd2e504c65b4a56cb448e1ef88fddfd199e163d163349",
    "live_relevance": "e03f9e241657a137cba48a89ee12f47bf3fcb7e4f6274263e9c699a0c974203a",
}

_STANDARD_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
_TYPE_MAP: dict[str, str | None] = {
    **{t: t for t in _STANDARD_TYPES},
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": None,
    "": None,
    "String": "string",
    "Boolean": "boolean",
    "Array": "array",
    "ArrayList": "array",
    "HashMap": "object",
    "long": "integer",
    "double": "number",
    "char": "string",
}

CONVERSION_RULES: tuple[str, ...] = (
    ("types: dict->object, float->number, tuple->array, String->string, Boolean->boolean, "
     "Array/ArrayList->array, HashMap->object, long->integer, double->number, char->string; "
     "standard JSON-Schema names kept; any and '' -> no type key; any other name is an error"),
    "applied recursively through properties, items and additionalProperties",
    "top-level parameters always type object; all other keys kept as is",
    ("function names: characters outside [a-zA-Z0-9_-] -> '_' (math.factorial -> math_factorial); "
     "a name over 64 characters or two names colliding is an error"),
    ("tool_choice auto (BFCL's FC handlers send none); a sample with no functions sends no tools "
     "and no tool_choice"),
)

_NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NAME_BAD_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_SCHEMA_KEYS = ("items", "additionalProperties")


# --------------------------------------------------------------------------- locating the data

def installed_version() -> str | None:
    """The installed ``bfcl-eval`` version, or None when it is not installed."""
    try:
        return importlib.metadata.distribution(BFCL_PACKAGE).version
    except importlib.metadata.PackageNotFoundError:
        return None


def _file(data_dir: Path, subset: str) -> Path:
    return data_dir / f"BFCL_v4_{subset}.json"


def _check_files(data_dir: Path, what: str) -> Path:
    if not data_dir.is_dir():
        raise OpError(f"{what} {data_dir} is not a folder; --bfcl-data DIR takes the folder holding "
                      f"the BFCL_v4_<subset>.json files (bfcl_eval/data in {BFCL_PACKAGE} {BFCL_VERSION})")
    missing = [_file(data_dir, s).name for s in SINGLE_TURN if not _file(data_dir, s).is_file()]
    if missing:
        raise OpError(f"{what} {data_dir} lacks {len(missing)} of the {len(SINGLE_TURN)} single-turn "
                      f"BFCL files: {', '.join(missing)}")
    return data_dir


def bfcl_data_dir(path: str | None = None) -> Path:
    """The folder holding the ``BFCL_v4_<subset>.json`` files of every subset in ``SINGLE_TURN``.

    ``path`` given: that folder. Otherwise the ``bfcl_eval/data`` folder of the installed
    ``bfcl-eval`` distribution, found through its metadata (the package is not imported).

    Raises:
        OpError: ``bfcl-eval`` not installed (the message gives ``INSTALL_HINT`` and
            ``--bfcl-data DIR``); the folder missing or lacking some of the files (named).
    """
    if path is not None:
        return _check_files(Path(path), "--bfcl-data")
    try:
        dist = importlib.metadata.distribution(BFCL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise OpError(f"the BFCL data needs the {BFCL_PACKAGE} package, which is not installed: "
                      f"{INSTALL_HINT} (--no-deps: only its data files are read; make venv does it); or pass "
                      f"--bfcl-data DIR, a folder holding its BFCL_v4_<subset>.json files") from None
    return _check_files(Path(str(dist.locate_file("bfcl_eval/data"))),
                        f"the data folder of the installed {BFCL_PACKAGE} {dist.version}")


def _version_of(data_dir: Path) -> str | None:
    """The installed version when ``data_dir`` is the installed package's data folder, else None."""
    try:
        dist = importlib.metadata.distribution(BFCL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    installed = Path(str(dist.locate_file("bfcl_eval/data")))
    try:
        return dist.version if installed.resolve() == data_dir.resolve() else None
    except OSError:
        return None


# --------------------------------------------------------------------------- conversion

def _convert_type(name: Any, where: str) -> str | None:
    if not isinstance(name, str) or name not in _TYPE_MAP:
        raise ValueError(f"unknown BFCL type {name!r} at {where}; known: {', '.join(map(repr, _TYPE_MAP))}")
    return _TYPE_MAP[name]


def _convert_schema(schema: Any, where: str) -> Any:
    """A converted copy of one schema node (a dict); anything else is returned as a copy."""
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            new = _convert_type(value, where)
            if new is not None:
                out["type"] = new
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert_schema(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key in _SCHEMA_KEYS:
            out[key] = _convert_schema(value, f"{where}.{key}")
        else:
            out[key] = copy.deepcopy(value)
    return out


def _openai_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"function name {name!r} is not a non-empty string")
    new = _NAME_BAD_CHAR.sub("_", name)
    if not _NAME_OK.match(new):
        raise ValueError(f"function name {name!r} becomes {new!r}, longer than OpenAI's 64 characters")
    return new


def to_openai_tools(functions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """BFCL function docs → OpenAI ``tools`` and the renames, by the rules in the module docstring.

    Returns ``([{"type": "function", "function": {"name", "description", "parameters"}}, ...],
    {new_name: original_name})``; the map holds only the names that changed (empty when none).
    ``description`` is included when the doc has one. The input is not modified.

    Raises:
        ValueError: an unknown type name (the message names it and where), a function without a
            usable name, a name over 64 characters after renaming, or two functions with the same
            name after renaming.
        TypeError: a function's ``parameters`` that is not an object.
    """
    tools: list[dict[str, Any]] = []
    renamed: dict[str, str] = {}
    seen: dict[str, str] = {}
    for fn in functions:
        original = fn.get("name") if isinstance(fn, dict) else None
        name = _openai_name(original)
        assert isinstance(original, str)  # _openai_name raised otherwise
        if name in seen:
            raise ValueError(f"function names {seen[name]!r} and {original!r} both become {name!r}")
        seen[name] = original
        if name != original:
            renamed[name] = original
        raw_params = fn.get("parameters", {"properties": {}})
        if not isinstance(raw_params, dict):
            raise TypeError(f"parameters of {original!r} is not an object")
        params = _convert_schema(raw_params, f"{original}.parameters")
        params = {"type": "object", **{k: v for k, v in params.items() if k != "type"}}
        body: dict[str, Any] = {"name": name}
        if "description" in fn:
            body["description"] = fn["description"]
        body["parameters"] = params
        tools.append({"type": "function", "function": body})
    return tools, renamed


# --------------------------------------------------------------------------- samples

@dataclass(frozen=True)
class Sample:
    """One request: a BFCL entry with its tools converted.

    ``sample_id``: the BFCL id (unique over all subsets, it starts with the subset name);
    ``messages``: the single turn, ``[{"role", "content"}, ...]``; ``tools``: OpenAI tools;
    ``tool_choice``: always ``"auto"`` (BFCL's FC handlers send none, which means auto);
    ``renamed``: ``{openai_name: bfcl_name}`` for the functions ``to_openai_tools`` renamed.
    """

    sample_id: str
    subset: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str
    renamed: dict[str, str]

    def body_fields(self) -> dict[str, Any]:
        """Fresh copies of ``{"messages", "tools", "tool_choice"}`` for a chat-completions body.

        A sample with no functions (four live_irrelevance entries) gives ``{"messages"}`` alone,
        as BFCL's handlers do: OpenAI rejects an empty ``tools`` list and ``tool_choice`` without
        tools.
        """
        if not self.tools:
            return {"messages": copy.deepcopy(self.messages)}
        return {"messages": copy.deepcopy(self.messages), "tools": copy.deepcopy(self.tools),
                "tool_choice": self.tool_choice}


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return f"not a JSON object but {type(entry).__name__}"
    missing = [k for k in ("id", "question", "function") if k not in entry]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(entry["id"], str) or not entry["id"]:
        return f"id {entry['id']!r} is not a non-empty string"
    question, functions = entry["question"], entry["function"]
    if not isinstance(question, list) or len(question) != 1:
        turns = len(question) if isinstance(question, list) else type(question).__name__
        return f"question must hold exactly 1 turn, has {turns} (not a single-turn entry)"
    turn = question[0]
    if not isinstance(turn, list) or not turn or not all(isinstance(m, dict) and "role" in m for m in turn):
        return "the turn is not a non-empty list of messages with a role"
    if not isinstance(functions, list) or not all(isinstance(f, dict) for f in functions):
        return "function is not a list of objects"
    return None


def _json_lines(path: Path, subset: str, what: str = "") -> tuple[list[tuple[int, Any]], bytes]:
    """``[(line number, parsed JSON)]`` of one BFCL file of ``subset`` (blank lines skipped) and its bytes.

    Raises:
        OpError: an unknown subset, an unreadable file (``what`` names it), or a line that is not JSON.
    """
    if subset not in SINGLE_TURN:
        raise OpError(f"unknown BFCL subset {subset!r}; single-turn subsets: {', '.join(SINGLE_TURN)}")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise OpError(f"cannot read {what}{path}: {e.strerror or e}") from None
    out: list[tuple[int, Any]] = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, orjson.loads(line)))
        except orjson.JSONDecodeError as e:
            raise OpError(f"{path}:{lineno}: not valid JSON ({e})") from None
    return out, raw


def _read_subset(data_dir: Path, subset: str) -> tuple[list[dict[str, Any]], str]:
    path = _file(data_dir, subset)
    lines, raw = _json_lines(path, subset)
    entries: list[dict[str, Any]] = []
    ids: dict[str, int] = {}
    for lineno, entry in lines:
        problem = _entry_problem(entry)
        if problem is None and entry["id"] in ids:
            problem = f"id {entry['id']!r} already on line {ids[entry['id']]}"
        if problem is not None:
            raise OpError(f"{path}:{lineno}: {problem}")
        ids[entry["id"]] = lineno
        entries.append(entry)
    return entries, hashlib.sha256(raw).hexdigest()


def load_subset(data_dir: Path, subset: str) -> list[dict[str, Any]]:
    """The raw entries of ``BFCL_v4_<subset>.json`` in file order (blank lines skipped).

    Raises:
        OpError: an unknown subset, an unreadable file, or a line (``path:line``, 1-based) that is
            not a JSON object with ``id``, ``question`` and ``function``, whose ``question`` does
            not hold exactly one turn, or whose id repeats an earlier line's.
    """
    return _read_subset(data_dir, subset)[0]


def load_answers(data_dir: Path, subset: str) -> dict[str, list[dict[str, Any]]]:
    """The ground truth of every entry of ``subset``: ``{id: [{func_name: {param: [allowed, ...]}}, ...]}``, from
    BFCL's "possible answer" file ``possible_answer/BFCL_v4_<subset>.json`` (one ``{"id", "ground_truth"}`` a line,
    the format ``gates/judges/tool_call_ast.py`` checks against). The irrelevance subsets have no such file.

    Raises:
        OpError: an unknown subset, a missing or unreadable file, or a line that is not a JSON object with an
            ``id`` string and a ``ground_truth`` list.
    """
    path = data_dir / "possible_answer" / f"BFCL_v4_{subset}.json"
    out: dict[str, list[dict[str, Any]]] = {}
    for lineno, entry in _json_lines(path, subset, "BFCL's possible answers ")[0]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) \
                or not isinstance(entry.get("ground_truth"), list):
            raise OpError(f"{path}:{lineno}: not an object with an id and a ground_truth list")
        out[entry["id"]] = entry["ground_truth"]
    return out


def _sample(entry: dict[str, Any], subset: str) -> Sample:
    try:
        tools, renamed = to_openai_tools(entry["function"])
    except (ValueError, TypeError) as e:
        raise OpError(f"BFCL sample {entry['id']} in {subset}: {e} (the rules are written for "
                      f"{BFCL_PACKAGE} {BFCL_VERSION}: {INSTALL_HINT})") from None
    return Sample(sample_id=entry["id"], subset=subset, messages=copy.deepcopy(entry["question"][0]),
                  tools=tools, tool_choice="auto", renamed=renamed)


def _positions(n: int, k: int) -> list[int]:
    return [(2 * j + 1) * n // (2 * k) for j in range(k)]


def _round_robin(groups: list[list[Sample]]) -> list[Sample]:
    return [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]


# --------------------------------------------------------------------------- the draw

@dataclass
class Draw:
    """The drawn samples and what is needed to state and repeat the draw.

    ``samples``: draw order (round-robin over ``SINGLE_TURN``); ``files``: ``{subset: sha256 hex
    of the file's bytes}``; ``sizes``: ``{subset: entries in the file}``; ``version``: the
    installed ``bfcl-eval`` version when ``data_dir`` is its data folder, else None.
    """

    samples: list[Sample]
    per_subset: int
    files: dict[str, str]
    data_dir: str
    version: str | None
    sizes: dict[str, int] = field(default_factory=dict)

    @property
    def draw_id(self) -> str:
        """sha256 hex of the sample ids in draw order, joined by newlines."""
        return hashlib.sha256("\n".join(s.sample_id for s in self.samples).encode()).hexdigest()

    def counts(self) -> dict[str, int]:
        """Samples per subset, in ``SINGLE_TURN`` order."""
        return _counts(self.samples)

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for the evidence record."""
        return {
            "source": {"package": BFCL_PACKAGE, "pinned_version": BFCL_VERSION, "version": self.version,
                       "license": BFCL_LICENSE, "install": INSTALL_HINT},
            "data_dir": self.data_dir,
            "files_sha256": dict(self.files),
            "files_match_pinned": all(PINNED_SHA256.get(s) == h for s, h in self.files.items()),
            "subsets": list(SINGLE_TURN),
            "subset_sizes": dict(self.sizes),
            "per_subset": self.per_subset,
            "counts": self.counts(),
            "n": len(self.samples),
            "draw_id": self.draw_id,
            "selection": (f"from each of the {len(SINGLE_TURN)} single-turn subsets, min({self.per_subset}, n) "
                          f"entries at file positions floor((j + 0.5) * n / k), j = 0..k-1; draw order "
                          f"round-robin over the subsets in a fixed order"),
            "conversion": list(CONVERSION_RULES),
        }


def _counts(samples: list[Sample]) -> dict[str, int]:
    counts = dict.fromkeys(SINGLE_TURN, 0)
    for s in samples:
        counts[s.subset] = counts.get(s.subset, 0) + 1
    return counts


def draw(data_dir: Path, per_subset: int = 8) -> Draw:
    """The deterministic, stratified draw described in the module docstring.

    Raises:
        OpError: ``per_subset < 1``; a missing or malformed file (see ``load_subset``); a selected
            entry the conversion rules do not cover (an unknown type name, colliding names).
    """
    if per_subset < 1:
        raise OpError(f"per_subset must be at least 1, got {per_subset}")
    data_dir = Path(data_dir)
    groups: list[list[Sample]] = []
    files: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for subset in SINGLE_TURN:
        entries, files[subset] = _read_subset(data_dir, subset)
        sizes[subset] = len(entries)
        k = min(per_subset, len(entries))
        groups.append([_sample(entries[i], subset) for i in _positions(len(entries), k)])
    return Draw(samples=_round_robin(groups), per_subset=per_subset, files=files, data_dir=str(data_dir),
                version=_version_of(data_dir), sizes=sizes)


def _list_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{s} {c}" for s, c in counts.items() if c)


def cap_draw(d: Draw, cap: int) -> tuple[list[Sample], str | None]:
    """The first ``cap`` samples in draw order and a warning saying what the cap keeps.

    ``cap == 0`` or ``cap >= len(d.samples)``: every sample and None.

    Raises:
        OpError: ``cap < 0``.
    """
    if cap < 0:
        raise OpError(f"the sample cap must be 0 (no cap) or more, got {cap}")
    total = len(d.samples)
    if cap == 0 or cap >= total:
        return list(d.samples), None
    kept = d.samples[:cap]
    kept_counts = _counts(kept)
    dropped = {s: c - kept_counts.get(s, 0) for s, c in d.counts().items()}
    warning = (f"capped at {cap} of the {total}-sample draw: the first {cap} in draw order, which takes "
               f"samples round-robin over the subsets in a fixed order, so it keeps {_list_counts(kept_counts)} "
               f"and drops {total - cap} ({_list_counts(dropped)}); the cap changes the set that runs, and "
               f"so what runs before every kept sample: a result at one cap does not describe another")
    return kept, warning
