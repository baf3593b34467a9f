"""Write docs/cli.md from the operations registry (`inferencekit ops --json`); a test fails on drift.

    .venv/bin/python scripts/gen_cli_docs.py          # rewrite docs/cli.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import inferencekit.commands  # noqa: F401  (registers every operation)
from inferencekit.registry import schema

OUT = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def render() -> str:
    doc = schema()
    lines = ["# inferencekit command reference", "",
             "Generated from the operations registry by `scripts/gen_cli_docs.py`; do not edit by hand.", "",
             "Exit codes: " + "; ".join(f"{k} {v}" for k, v in doc["exit_codes"].items()) + ".", ""]
    for op in doc["operations"]:
        lines += [f"## `{op['command']}`", "", op["summary"], "", op["description"], "",
                  f"Example: `{op['example']}`", ""]
        props = op["parameters"]["properties"]
        if props:
            lines += ["| flag | type | default | meaning |", "|---|---|---|---|"]
            for name, p in props.items():
                t = p["type"] + (f" of {p['items']['type']}" if p["type"] == "array" else "")
                choices = p.get("enum") or p.get("items", {}).get("enum")
                if choices:
                    t += " (" + ", ".join(map(str, choices)) + ")"
                default = p.get("default")
                flag = name.upper() if p.get("x-positional") else "--" + name.replace("_", "-")
                lines.append(f"| `{flag}` | {t} | {'' if default is None else f'`{default}`'} | "
                             f"{p['description'].replace('|', '/')} |")
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
