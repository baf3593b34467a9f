"""Every operation of the command line, one module per command group; importing this package registers them.

``cli.py`` imports it to build the parser, and ``inferencekit ops`` (declared here) lists what it
registered. A command module declares its operations (``@operation``), their argument bundles, flag
checks and cards, and calls the jobs of the layers below; nothing below ``commands/`` imports it.
"""

from __future__ import annotations

from typing import Any

from inferencekit.commands import (  # noqa: F401
    appliance,
    audit,
    audit_calibrate,
    bench,
    cheat,
    engine,
    evidence,
    gates,
    probe,
    quality,
    report,
    sweep,
    verify,
)
from inferencekit.registry import Call, Outcome, operation, schema

__all__ = ["list_ops"]


@operation(("ops",), "List every operation (with --json: the JSON schema of each, for agents).",
           description="Prints each command with its one-line summary; with --json, one JSON document holding every "
                       "operation's parameters as JSON schema, its example and the exit codes.",
           example="inferencekit ops --json")
def list_ops(call: Call) -> Outcome:
    doc = schema()

    def render(console: Any) -> None:
        for op in doc["operations"]:
            console.print(f"[bold]{op['command']}[/]  {op['summary']}")

    return Outcome(doc, None, render)
