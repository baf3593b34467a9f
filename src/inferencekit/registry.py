"""Operations declared once: the CLI and the JSON-schema listing are both built from here.

An operation is a function decorated with ``@operation``. Its arguments are ``Arg`` objects
with a JSON-schema type, help text (unit and default) and an optional default. ``cli.py``
turns every operation into an argparse sub-command (``inferencekit <group> <verb>``) and
``schema()`` describes every operation as JSON schema for agents (``inferencekit ops --json``).

The function receives a ``Call`` (the command line and the settings as given, for evidence
records) and the arguments as keyword arguments, and returns an ``Outcome``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Arg", "Call", "Operation", "Outcome", "operation", "operations", "schema", "exit_code", "common_args"]

_TYPES = ("string", "integer", "number", "boolean", "array")


@dataclass(frozen=True, slots=True)
class Arg:
    """One typed argument of an operation.

    ``type`` is a JSON-schema type; an ``array`` holds ``items`` values and is given on the
    command line as a comma-separated list (or the flag repeated). ``positional`` arguments are
    given without a flag. ``secret`` is never allowed: secrets arrive as env-var *names*.
    """

    name: str
    type: str
    help: str
    default: Any = None
    choices: tuple[Any, ...] | None = None
    required: bool = False
    items: str = "string"
    positional: bool = False
    metavar: str | None = None
    const: Any = None  # a flag given without a value takes this (string flags only: ``--ray`` alone)

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"Arg {self.name}: unknown type {self.type!r}")
        if self.type == "array" and self.items not in _TYPES[:3]:
            raise ValueError(f"Arg {self.name}: unknown item type {self.items!r}")

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.help}
        if self.type == "array":
            out["items"] = {"type": self.items}
            if self.choices:
                out["items"]["enum"] = list(self.choices)
        elif self.choices:
            out["enum"] = list(self.choices)
        if self.default is not None:
            out["default"] = list(self.default) if isinstance(self.default, tuple) else self.default
        if self.positional:
            out["x-positional"] = True
        return out


@dataclass(frozen=True, slots=True)
class Call:
    """How an operation was invoked: the argv (secrets never appear there) and the settings."""

    operation: str
    argv: tuple[str, ...]
    settings: dict[str, Any]
    quiet: bool = False
    json_output: bool = False


@dataclass(slots=True)
class Outcome:
    """What an operation returns: a JSON-able payload, an optional verdict, an optional renderer.

    ``render`` draws the human view (a rich card) on the console it is given; without one the
    CLI prints the payload as JSON. The exit code follows the verdict (``exit_code``).
    """

    payload: dict[str, Any]
    verdict: str | None = None
    render: Callable[[Any], None] | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    path: tuple[str, ...]
    summary: str
    description: str
    example: str
    args: tuple[Arg, ...]
    func: Callable[..., Outcome]

    def json_schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": "inferencekit " + " ".join(self.path),
            "summary": self.summary,
            "description": self.description,
            "example": self.example,
            "parameters": {
                "type": "object",
                "properties": {a.name: a.json_schema() for a in self.args},
                "required": [a.name for a in self.args if a.required],
                "additionalProperties": False,
            },
        }


_REGISTRY: dict[str, Operation] = {}


def operation(path: Sequence[str], summary: str, *, description: str, example: str,
              args: Sequence[Arg] = ()) -> Callable[[Callable[..., Outcome]], Callable[..., Outcome]]:
    """Register ``func`` as the operation ``inferencekit <path...>``.

    Raises:
        ValueError: a path or an argument name registered twice (a programming error).
    """

    def deco(func: Callable[..., Outcome]) -> Callable[..., Outcome]:
        name = ".".join(path)
        if name in _REGISTRY:
            raise ValueError(f"operation {name} registered twice")
        names = [a.name for a in args]
        if len(set(names)) != len(names):
            raise ValueError(f"operation {name}: duplicate argument names")
        _REGISTRY[name] = Operation(name, tuple(path), summary, description, example, tuple(args), func)
        return func

    return deco


def operations() -> list[Operation]:
    """Every registered operation, sorted by path (``inferencekit.commands`` registers them when imported)."""
    return sorted(_REGISTRY.values(), key=lambda o: o.path)


def schema() -> dict[str, Any]:
    """JSON schema of every operation (``inferencekit ops --json``)."""
    from inferencekit import __version__

    return {"tool": "inferencekit", "version": __version__,
            "exit_codes": {"0": "ran; verdict PASS or no verdict", "1": "verdict FAIL",
                           "2": "user error, nothing sent", "3": "verdict UNPROVEN or NOT RUN"},
            "operations": [o.json_schema() for o in operations()]}


def exit_code(verdict: str | None) -> int:
    """0 for PASS or no verdict, 1 for FAIL, 3 for UNPROVEN / NOT RUN (docs/design.md, exit codes)."""
    if verdict in (None, "PASS"):
        return 0
    if verdict == "FAIL":
        return 1
    if verdict in ("UNPROVEN", "NOT RUN"):
        return 3
    raise ValueError(f"unknown verdict {verdict!r}")


def common_args(*groups: Sequence[Arg]) -> tuple[Arg, ...]:
    """Concatenate reusable argument bundles, keeping the first of any repeated name."""
    seen: dict[str, Arg] = {}
    for g in groups:
        for a in g:
            seen.setdefault(a.name, a)
    return tuple(seen.values())

