"""The GSM8K problems: the packaged test split, or a JSONL/Parquet file of the same shape, and the numbers in them.

The default is the GSM8K test split (1,319 problems, MIT, from openai/grade-school-math) packaged as
``inferencekit/data/gsm8k/test.jsonl``. Each line is ``{"question": str, "answer": str}``; the answer
is a worked solution whose last line is ``#### <number>`` (Cobbe et al. 2021, "Training Verifiers to
Solve Math Word Problems", the dataset's own format). The number after the last ``####`` is the
target, in the normal form of ``normalize_number`` (``quality/gsm8k.py`` grades replies against it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from io import BytesIO
from pathlib import Path
from typing import Any

from inferencekit.errors import OpError
from inferencekit.extras import EXTRAS, missing_modules, require_extra

__all__ = ["NUMBER_PATTERN", "PACKAGED_COUNT", "PACKAGED_NAME", "GsmData", "GsmItem", "load_gsm8k", "normalize_number",
           "number_of"]

# One number as written in prose or LaTeX. A sign counts only where it cannot be a minus between
# two operands: not after an ASCII letter, digit or point ("3-4" is 3 and 4), or right after "$".
# The digits may not continue a number ("0.5" is never read as "5"). The integer part is comma
# groups of exactly three digits or a plain run of digits; "/digits" right after makes a fraction.
NUMBER_PATTERN = re.compile(
    r"(?:(?<![0-9A-Za-z.])(?P<sign1>[-\u2212]))?(?:\\?\$(?P<sign2>[-\u2212])?)?"
    r"(?<![0-9.])(?P<int>[0-9]{1,3}(?:,[0-9]{3}(?![0-9]))+|[0-9]+)"
    r"(?P<dec>\.[0-9]+)?"
    r"(?:[ \t]*/[ \t]*(?P<den>[0-9]+))?"
    r"(?:[ \t]*\\?%)?"
)


def _canonical(sign: str, integer: str, dec: str) -> str:
    integer = integer.replace(",", "").lstrip("0") or "0"
    frac = dec[1:].rstrip("0") if dec else ""
    body = f"{integer}.{frac}" if frac else integer
    return body if body == "0" or not sign else f"-{body}"


def number_of(m: re.Match[str]) -> str:
    """The normal form of one ``NUMBER_PATTERN`` match (a fraction kept as ``"a/b"``, never evaluated)."""
    sign = m.group("sign1") or m.group("sign2") or ""
    if m.group("den") is not None:  # a fraction: kept as written, never evaluated
        num = _canonical("", m.group("int"), m.group("dec") or "")
        den = m.group("den").lstrip("0") or "0"
        return f"{'-' if sign else ''}{num}/{den}"
    return _canonical(sign, m.group("int"), m.group("dec") or "")


def normalize_number(text: str) -> str | None:
    """The normal form of ``text`` when all of it is one number, else None.

    Accepts surrounding spaces, a final full stop, ``$``/``\\$``, ``%``/``\\%``, ``-`` or U+2212,
    comma thousands groups, decimals. ``" $1,234.50. "`` → ``"1234.5"``, ``"−0.0"`` → ``"0"``.
    A fraction (``"3/4"``) and any text around the number give None.
    """
    s = text.strip()
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    m = NUMBER_PATTERN.fullmatch(s)
    if m is None or m.group("den") is not None:
        return None
    return number_of(m)


PACKAGED_NAME = "gsm8k-test"


PACKAGED_COUNT = 1319


_PACKAGED_SOURCE = "package:inferencekit.data/gsm8k/test.jsonl"




@dataclass(frozen=True, slots=True)
class GsmItem:
    """One problem.

    ``id``: ``<dataset name>-<index, 4 digits>``, index 0-based in file order; ``answer_text``: the
    reference solution as given; ``target``: the number after its last ``####``, in the normal form
    of ``normalize_number``.
    """

    id: str
    question: str
    answer_text: str
    target: str


@dataclass(frozen=True, slots=True)
class GsmData:
    """A loaded problem set: ``name`` (``gsm8k-test`` for the packaged split, ``gsm8k-data`` for a
    user file), ``source`` (where it was read), ``sha256`` (hex, of the file's bytes as stored)."""

    name: str
    source: str
    sha256: str
    items: tuple[GsmItem, ...]

    @property
    def count(self) -> int:
        return len(self.items)

    def describe(self) -> dict[str, Any]:
        """The fields a record keeps: ``{name, source, sha256, count}``."""
        return {"name": self.name, "source": self.source, "sha256": self.sha256, "count": self.count}


def _target_of(answer: str) -> str | None:
    """Normal form of the number after the answer's last ``####`` (None when absent or not a number)."""
    _, sep, tail = answer.rpartition("####")
    if not sep:
        return None
    return normalize_number(tail.strip().splitlines()[0] if tail.strip() else "")


def _make_item(prefix: str, index: int, row: Any, where: str) -> GsmItem:
    if not isinstance(row, dict):
        raise OpError(f"{where}: expected a JSON object with 'question' and 'answer', got {type(row).__name__}")
    question, answer = row.get("question"), row.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise OpError(f"{where}: 'question' must be a non-empty string, got {question!r:.80}")
    if not isinstance(answer, str) or not answer.strip():
        raise OpError(f"{where}: 'answer' must be a non-empty string, got {answer!r:.80}")
    target = _target_of(answer)
    if target is None:
        raise OpError(f"{where}: 'answer' must end with a line '#### <number>' (the GSM8K format), "
                      f"got ...{answer[-80:]!r}")
    return GsmItem(id=f"{prefix}-{index:04d}", question=question, answer_text=answer, target=target)


def _items_from_jsonl(raw: bytes, where: str, prefix: str) -> tuple[GsmItem, ...]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OpError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start}); give a GSM8K JSONL file") from e
    items: list[GsmItem] = []
    # Split on "\n" only: str.splitlines would also break at U+2028, which JSON allows inside strings.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise OpError(f"{where}:{lineno}: not valid JSON ({e.msg}); each line must be one "
                          "{\"question\", \"answer\"} object") from e
        items.append(_make_item(prefix, len(items), row, f"{where}:{lineno}"))
    return tuple(items)


def _parquet_records(raw: bytes, where: str) -> list[Any]:
    """The rows of a Parquet file: with pyarrow, else with pandas and a Parquet engine of its own; with neither, the
    ``parquet`` extra's refusal (``extras.require_extra``), or JSONL instead."""
    need = f"{where}: reading Parquet"
    if not missing_modules(("pyarrow",)):
        import pyarrow.parquet as pq

        try:
            return list(pq.read_table(BytesIO(raw), columns=["question", "answer"]).to_pylist())
        except Exception as e:  # pyarrow raises several types for a bad file or a missing column
            raise OpError(f"{where}: cannot read as Parquet with columns question, answer: {e}") from e
    if missing_modules(("pandas",)):  # pandas alone may still read it (with fastparquet)
        require_extra("parquet", need, ("pyarrow", "pandas"))
    import pandas as pd

    try:
        frame = pd.read_parquet(BytesIO(raw), columns=["question", "answer"])
    except ImportError:  # pandas without a Parquet engine
        raise OpError(f"{need} needs pyarrow (missing: pyarrow): {EXTRAS['parquet'].hint()}; or convert the file "
                      "to JSONL") from None
    except Exception as e:
        raise OpError(f"{where}: cannot read as Parquet with columns question, answer: {e}") from e
    return list(frame.to_dict("records"))


def load_gsm8k(path: str | os.PathLike[str] | None = None) -> GsmData:
    """Load GSM8K problems.

    Args:
        path: None for the packaged test split (1,319 problems); else a user file: ``*.parquet``
            (columns ``question``, ``answer``; needs pyarrow or pandas), anything else is read as
            JSONL with one ``{"question", "answer"}`` object per line (blank lines skipped).

    Returns:
        ``GsmData`` with items in file order; ``sha256`` is of the file's bytes.

    Raises:
        OpError: the file is missing or unreadable; a line is not JSON, lacks a non-empty
            ``question``/``answer`` or its answer has no ``#### <number>`` line (named as
            ``path:line``, or ``path: row i`` for Parquet; reading stops there); the file holds no
            problems; Parquet with neither pyarrow nor pandas installed (the ``parquet`` extra's line:
            ``pip install 'inferencekit[parquet]' (or make venv)``).

    Source: the answer format is the dataset's own (Cobbe et al. 2021).
    """
    if path is None:
        raw = resources.files("inferencekit.data").joinpath("gsm8k", "test.jsonl").read_bytes()
        name, source, where = PACKAGED_NAME, _PACKAGED_SOURCE, _PACKAGED_SOURCE
    else:
        p = Path(path).expanduser()
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise OpError(f"--data {str(path)!r}: cannot read ({e.strerror or e}); give a GSM8K JSONL or "
                          "Parquet file") from e
        name, source, where = "gsm8k-data", str(p.resolve()), str(path)
    sha = hashlib.sha256(raw).hexdigest()
    if path is not None and Path(path).suffix.lower() == ".parquet":
        rows = _parquet_records(raw, where)
        items = tuple(_make_item(name, i, row, f"{where}: row {i}") for i, row in enumerate(rows))
    else:
        items = _items_from_jsonl(raw, where, name)
    if not items:
        raise OpError(f"{where}: no problems in the file; expected GSM8K JSONL lines "
                      "{\"question\": ..., \"answer\": \"... #### <number>\"}")
    return GsmData(name=name, source=source, sha256=sha, items=items)
