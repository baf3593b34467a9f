"""Run the CLI in-process and parse its one JSON document (for fixtures where capsys is not available)."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from inferencekit.cli import main


def run_cli(argv: list[str]) -> tuple[int, Any]:
    """``inferencekit <argv> --json --quiet`` in-process: (exit code, parsed stdout or None).

    ``main`` writes its JSON to ``sys.stdout.buffer``, so stdout is swapped for a text wrapper over a
    byte buffer.
    """
    buf = io.BytesIO()
    out = io.TextIOWrapper(buf, encoding="utf-8")
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "--quiet"])
        out.flush()
    text = buf.getvalue().decode()
    return code, (json.loads(text) if text.strip() else None)
