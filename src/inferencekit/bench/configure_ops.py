"""``inferencekit bench configure``: write the appliance metadata file ``bench appliance`` requires.

Fields given as flags are taken as they are; a field left out is asked for on the terminal, but
only when stdin is one: in CI or a pipe every missing field is a user error naming its flag.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferencekit.bench.appliance_metadata import REQUIRED_FIELDS, check_metadata, field_problems
from inferencekit.errors import OpError
from inferencekit.options import parse_json_object
from inferencekit.registry import Arg, Call, Outcome, operation
from inferencekit.rundir import write_json

__all__ = ["CONFIGURE_ARGS", "ask_missing", "bench_configure", "parse_extra", "write_metadata"]

CONFIGURE_ARGS: tuple[Arg, ...] = (
    Arg("output", "string", "The metadata file to write.", default="appliance.json"),
    *(Arg(name, "integer" if name == "context_limit" else "string", text) for name, text in REQUIRED_FIELDS.items()),
    Arg("extra", "string", "JSON object of more fields to keep in the file, e.g. '{\"driver\": \"560.35\"}'; it "
        "cannot set the required fields (give those as their own flags)."),
    Arg("force", "boolean", "Overwrite an existing file.", default=False),
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached stdin
        return False


def _ask_on_stderr(prompt: str) -> str:
    """``input()`` with the prompt on stderr, so stdout stays one JSON document under --json."""
    print(prompt, end="", file=sys.stderr, flush=True)
    return input()


def _parse_answer(name: str, text: str) -> Any:
    text = text.strip()
    if name != "context_limit":
        return text
    try:
        return int(text.replace("_", ""))
    except ValueError:
        return text  # field_problems names it as not a whole number


def ask_missing(given: dict[str, Any], *, tty: bool, ask: Callable[[str], str] = _ask_on_stderr,
                say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[str, Any]:
    """The required fields in REQUIRED_FIELDS order: ``given``'s values, the rest asked for.

    With ``tty`` each missing field is explained through ``say`` and read with ``ask(prompt)``
    (a line, like ``input``); an answer that is empty, a placeholder or (for context_limit) not a
    whole number ≥ 1 is refused with the reason and asked again.

    Raises:
        OpError: a field is missing and ``tty`` is false (every missing flag named), or input ended
            or was interrupted before every field was answered.
    """
    missing = [f for f in REQUIRED_FIELDS if given.get(f) is None]
    if missing and not tty:
        raise OpError("missing " + ", ".join(_flag(f) for f in missing) + " (stdin is not a terminal, so they "
                      "cannot be asked for; give them as flags)")
    out: dict[str, Any] = {}
    for name, text in REQUIRED_FIELDS.items():
        if name not in missing:
            out[name] = given[name]
            continue
        say(f"{name}: {text}")
        while True:
            try:
                value = _parse_answer(name, ask(f"{name}> "))
            except (EOFError, KeyboardInterrupt):
                raise OpError(f"no answer for {name}; nothing was written") from None
            problems = field_problems(name, value)
            if not problems:
                out[name] = value
                break
            say(f"  refused: {'; '.join(problems)}; try again")
    return out


def parse_extra(text: str | None) -> dict[str, Any]:
    """The ``--extra`` JSON object (``{}`` when not given).

    Raises:
        OpError: not a JSON object, or it sets a required field (those have their own flags).
    """
    extra = parse_json_object(text, "--extra")
    clash = [k for k in extra if k in REQUIRED_FIELDS]
    if clash:
        raise OpError("--extra cannot set required fields (" + ", ".join(clash) + "); give them as "
                      + ", ".join(_flag(k) for k in clash))
    return extra


def _check_target(path: Path, force: bool) -> None:
    if path.is_dir():
        raise OpError(f"--output {str(path)!r} is a directory; name a file")
    if path.exists() and not force:
        raise OpError(f"{str(path)!r} already exists; pass --force to overwrite it")


def write_metadata(path: Path, metadata: dict[str, Any], force: bool) -> None:
    """Atomically write ``metadata`` (indented JSON) to ``path``.

    Raises:
        OpError: ``path`` exists and ``force`` is false, is a directory, or cannot be written.
    """
    _check_target(path, force)
    try:
        write_json(path, metadata, indent=True)
    except OSError as e:
        raise OpError(f"cannot write {str(path)!r}: {e.strerror or e}") from None


@operation(("bench", "configure"), "Write the appliance metadata file that bench appliance requires.",
           description="Writes the JSON file `bench appliance --metadata` reads: hardware, topology, model, "
                       "model_revision, quantisation, kv_cache_dtype, serving_engine, context_limit and "
                       "competing_traffic, plus any --extra fields. Fields left out are asked for when stdin "
                       "is a terminal; otherwise (CI, pipes) every one must be given as a flag. Placeholders "
                       "('CHANGE ME') and empty answers are refused; an existing file is kept unless --force.",
           example="inferencekit bench configure --hardware '1x NVIDIA H200 141GB' --topology 'single GPU, TP=1' "
                   "--model HuggingFaceTB/SmolLM2-135M-Instruct --model-revision 12fd25f --quantisation 'GGUF "
                   "Q4_1' --kv-cache-dtype fp16 --serving-engine 'llama.cpp b4100' --context-limit 8192 "
                   "--competing-traffic 'none: dedicated'",
           args=CONFIGURE_ARGS)
def bench_configure(call: Call, *, output: str, extra: str | None = None, force: bool = False,
                    ask: Callable[[str], str] | None = None, tty: bool | None = None, **given: Any) -> Outcome:
    """Collect, check and write the metadata file; ``ask``/``tty`` replace the terminal in tests."""
    path = Path(output)
    _check_target(path, force)  # before any question is asked
    more = parse_extra(extra)
    unknown = set(given) - set(REQUIRED_FIELDS)
    if unknown:
        raise TypeError(f"bench_configure: unknown arguments {sorted(unknown)}")
    bad = [p for name, value in given.items() if value is not None for p in field_problems(name, value)]
    if bad:  # flags are checked before the first question
        raise OpError("; ".join(bad))
    fields = ask_missing(given, tty=_stdin_is_tty() if tty is None else tty, ask=ask or _ask_on_stderr)
    metadata = check_metadata({**fields, **more}, "metadata")
    write_metadata(path, metadata, force)

    def render(console: Any) -> None:
        console.print(f"wrote {path} ({len(metadata)} fields); use it with "
                      f"`inferencekit bench appliance --metadata {path}`", markup=False, highlight=False)

    return Outcome({"path": str(path), "metadata": metadata}, None, render)
