"""The command line, built from the operations registry.

``inferencekit <group> <verb> [flags]`` (alias ``ik``). Every flag comes from an ``Arg``; every
command's ``--help`` shows its summary, paragraph and an example. ``--json`` prints exactly one
JSON document on stdout; cards go to stdout, progress and warnings to stderr. An ``OpError``
becomes one line on stderr and exit code 2; a run dir that stops taking writes mid-run (``StorageError``,
or an ``OSError`` of a full or read-only disk) one line and exit code 3 (the run is incomplete); any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO, cast

import orjson

import inferencekit.commands  # noqa: F401  (registers every operation)
from inferencekit.api.client import READ_TIMEOUT
from inferencekit.errors import EXIT_UNPROVEN, EXIT_USAGE, STORAGE_ERRNOS, OpError, StorageError, storage_message
from inferencekit.redact import scrub, scrub_text
from inferencekit.registry import Arg, Call, Operation, exit_code, operations

__all__ = ["main", "build_parser"]

INT_LIMIT = 2**63 - 1  # an integer flag must fit a signed 64-bit value (a seed, a count, a token budget)


def _integer(text: str) -> int:
    """An integer flag: decimal, within ±``INT_LIMIT`` (what JSON, numpy and every server can hold)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if abs(v) > INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text} is out of range (at most {INT_LIMIT} in size)")
    return v


def _number(text: str) -> float:
    """A number flag: finite (``inf`` and ``nan`` mean nothing as a rate, a time or a temperature)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


_PY_TYPES: dict[str, Callable[[str], Any]] = {"string": str, "integer": _integer, "number": _number}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _array_type(item: str) -> Callable[[str], list[Any]]:
    conv = _PY_TYPES[item]

    def parse(text: str) -> list[Any]:
        try:
            return [conv(x.strip()) for x in text.split(",") if x.strip()]
        except (ValueError, argparse.ArgumentTypeError) as e:
            why = f" ({e})" if isinstance(e, argparse.ArgumentTypeError) else ""
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {item}s, got {text!r}{why}") from None

    return parse


def _add_arg(p: argparse.ArgumentParser, a: Arg) -> None:
    help_text = a.help.replace("%", "%%")
    if a.default is not None and a.type != "boolean" and "default" not in a.help.lower():
        shown = ",".join(map(str, a.default)) if isinstance(a.default, (list, tuple)) else a.default
        help_text += f" (default: {shown})"
    kw: dict[str, Any] = {"help": help_text}
    if a.metavar:
        kw["metavar"] = a.metavar
    if a.type == "boolean":
        kw["action"] = argparse.BooleanOptionalAction
        kw["default"] = a.default
    elif a.type == "array":
        kw["type"] = _array_type(a.items)
        kw["action"] = "append"
    else:
        kw["type"] = _PY_TYPES[a.type]
        if a.choices:
            kw["choices"] = a.choices
        if a.const is not None:
            kw["nargs"], kw["const"] = "?", a.const
    if a.positional:
        if not a.required:
            kw["nargs"] = "?"
        p.add_argument(a.name, **kw)
    else:
        p.add_argument(_flag(a.name), dest=a.name, required=a.required, **kw)


class _ArgvError(Exception):
    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors reach ``main`` (one line, and JSON under --json) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise _ArgvError(self.prog, message)


def _globals() -> _Parser:
    # a _Parser like the parsers that take it as a parent (typeshed wants parents of the subparsers' class); it is
    # never parsed itself
    g = _Parser(add_help=False)
    g.add_argument("--json", dest="_json", action="store_true", default=argparse.SUPPRESS,
                   help="Print exactly one JSON document on stdout instead of the card.")
    g.add_argument("--quiet", dest="_quiet", action="store_true", default=argparse.SUPPRESS,
                   help="No progress bar or notes on stderr.")
    return g


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Operation]]:
    """The argparse tree for every registered operation, and a map from sub-command to operation."""
    parent = _globals()
    top = _Parser(
        prog="inferencekit", parents=[parent],
        description="Benchmark an OpenAI-compatible LLM server and prove the numbers are honest. "
                    "`inferencekit verify` with no URL runs everything against an embedded llama.cpp engine.",
        epilog="Exit codes: 0 ran (verdict PASS or none), 1 FAIL, 2 user error (nothing sent), 3 UNPROVEN/NOT RUN.")
    subs = top.add_subparsers(dest="_cmd", metavar="<command>")
    groups: dict[str, argparse._SubParsersAction[_Parser]] = {}
    by_key: dict[str, Operation] = {}
    for op in operations():
        # argparse %-formats help strings: a summary's "95% CI" made `inferencekit quality --help` a traceback
        kw: dict[str, Any] = dict(help=op.summary.replace("%", "%%"), description=f"{op.summary}\n\n{op.description}",
                                  epilog=f"example:\n  {op.example}",
                                  formatter_class=argparse.RawDescriptionHelpFormatter, parents=[parent])
        if len(op.path) == 1:
            p = subs.add_parser(op.path[0], **kw)
        else:
            grp = op.path[0]
            if grp not in groups:
                gp = subs.add_parser(grp, help=f"{grp} commands", parents=[parent])
                groups[grp] = gp.add_subparsers(dest="_verb", metavar="<verb>")
                gp.set_defaults(_group_parser=gp)
            p = groups[grp].add_parser(op.path[1], **kw)
        for a in op.args:
            _add_arg(p, a)
        p.set_defaults(_op=op.name)
        by_key[op.name] = op
    return top, by_key


def _kwargs(op: Operation, ns: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in op.args:
        v = getattr(ns, a.name, None)
        if a.type == "array":
            if v is None:
                v = list(a.default) if a.default is not None else None
            else:
                v = [x for chunk in v for x in chunk]
                if a.choices:
                    bad = [x for x in v if x not in a.choices]
                    if bad:
                        raise OpError(f"{_flag(a.name)}: {bad[0]!r} is not one of {', '.join(map(str, a.choices))}")
        elif v is None:
            v = a.default
        out[a.name] = v
    return out


class _Scrubbed:
    """A text stream that scrubs registered secrets (redact.py) from what is written through it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(scrub_text(text)))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(self._stream.isatty())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", "utf-8"))


def _read_timeout(kwargs: dict[str, Any]) -> float | None:
    """Take ``--read-timeout`` out of an operation's arguments (every client of the run reads it from
    ``api.client.READ_TIMEOUT``; the recorded settings keep it). None: off.

    Raises:
        OpError: a negative value.
    """
    value = kwargs.pop("read_timeout", None)
    if value is None:
        return None
    if not value >= 0:
        raise OpError(f"--read-timeout must be >= 0 seconds (0: off), got {value}")
    return float(value) or None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser, ops = build_parser()
    try:
        ns = parser.parse_args(args)
    except _ArgvError as e:
        msg = f"{e} (see `{e.prog} --help`)"
        print(f"inferencekit: error: {msg}", file=sys.stderr)
        if "--json" in args:
            sys.stdout.buffer.write(orjson.dumps({"error": msg, "exit_code": EXIT_USAGE}) + b"\n")
            sys.stdout.flush()
        return EXIT_USAGE
    if not getattr(ns, "_op", None):
        gp = getattr(ns, "_group_parser", None)
        (gp or parser).print_help(sys.stderr)
        return EXIT_USAGE
    op = ops[ns._op]
    json_out = bool(getattr(ns, "_json", False))
    quiet = bool(getattr(ns, "_quiet", False))
    try:
        kwargs = _kwargs(op, ns)
        call = Call(operation=op.name, argv=tuple(["inferencekit", *args]), settings=dict(kwargs),
                    quiet=quiet, json_output=json_out)
        token = READ_TIMEOUT.set(_read_timeout(kwargs))
        try:
            outcome = op.func(call, **kwargs)
        finally:
            READ_TIMEOUT.reset(token)
    except OpError as e:
        print(f"inferencekit: error: {scrub_text(str(e))}", file=sys.stderr)
        if json_out:  # an agent reading stdout still gets one JSON document
            sys.stdout.buffer.write(scrub(orjson.dumps({"error": str(e), "exit_code": EXIT_USAGE})) + b"\n")
            sys.stdout.flush()
        return EXIT_USAGE
    except (StorageError, OSError) as e:
        if not isinstance(e, StorageError):
            if e.errno not in STORAGE_ERRNOS:
                raise  # any other I/O error is a bug: keep its traceback
            e = StorageError(f"{storage_message(e)}; stopped: what was written before is kept", e)
        print(f"inferencekit: error: {scrub_text(str(e))}", file=sys.stderr)
        if json_out:
            sys.stdout.buffer.write(scrub(orjson.dumps({"error": str(e), "exit_code": EXIT_UNPROVEN,
                                                        "stopped": e.progress})) + b"\n")
            sys.stdout.flush()
        return EXIT_UNPROVEN
    except KeyboardInterrupt:
        hint = " (finish the run with --resume RUN_DIR)" if any(a.name == "resume" for a in op.args) else ""
        print(f"inferencekit: interrupted; finished requests are on disk{hint}", file=sys.stderr)
        if json_out:
            sys.stdout.buffer.write(orjson.dumps({"error": "interrupted; finished requests are on disk",
                                                  "exit_code": 130}) + b"\n")
            sys.stdout.flush()
        return 130
    if json_out or outcome.render is None:
        sys.stdout.buffer.write(scrub(orjson.dumps(outcome.payload, option=orjson.OPT_INDENT_2
                                                   | orjson.OPT_NON_STR_KEYS, default=str)) + b"\n")
        sys.stdout.flush()
    else:
        from rich.console import Console

        # A card piped to a file keeps its full width (rich assumes 80 columns without a terminal).
        outcome.render(Console(file=cast(TextIO, _Scrubbed(sys.stdout)), soft_wrap=False,
                               width=None if sys.stdout.isatty() else 140))
    return exit_code(outcome.verdict)
