"""A float32 model in this process (transformers on the CPU): the higher-precision reference a CPU user has.

Given the embedded GGUF (or any GGUF), transformers dequantises its weights exactly into float32
(``GgufConfig(dequantize=True)``); given a Hugging Face directory, it loads that. Against the GGUF's
own engines (llama.cpp: quantised matmuls, 8-bit activations, its own kernels) the KL then measures
the engine's arithmetic, not the loss from quantising the original weights — which this reference
shares.

Needs the ``reference`` extra (torch, transformers, gguf, accelerate; see pyproject.toml). Nothing
is downloaded: the hub is switched off before transformers is imported.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

from inferencekit.engines.recipes import llama_threads
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["LocalModel", "load_local_model", "require_reference"]

_CACHE: dict[str, LocalModel] = {}


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for d in ("torch", "transformers", "gguf"):
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            out[d] = None
    return out


def require_reference(need: str) -> None:
    """Refuse a local float32 reference when the ``reference`` extra (torch, transformers, gguf, accelerate) is
    missing. Called with the flag checks of the commands that load one: nothing is imported.

    Raises:
        OpError: a module missing; the line names ``need`` and ``pip install 'inferencekit[reference]' (or make
            venv)`` (``extras.require_extra``).
    """
    require_extra("reference", need)


class LocalModel:
    """A causal LM in float32 that generates greedily and scores token sequences (teacher forcing).

    Args:
        source: a ``.gguf`` file (dequantised on load) or a Hugging Face model directory.
        threads: torch CPU threads (default: ``$INFERENCEKIT_REFERENCE_THREADS``, else the cores this process
            may use that other work leaves free at load time, ``engines.recipes.llama_threads``). Torch's worker
            threads and llama.cpp's spin against each other (measured here on 2 cores: 2 s per token with 2
            threads beside a busy llama-server, 55 ms with 1).

    Raises:
        OpError: the ``reference`` extra missing (``require_reference``), or the model cannot be loaded.
    """

    def __init__(self, source: str | Path, threads: int | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantisation bar; progress is ours to show
        require_reference("the local reference")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.source = Path(source).resolve()
        if not self.source.exists():
            raise OpError(f"local reference model not found: {source}")
        env = os.environ.get("INFERENCEKIT_REFERENCE_THREADS", "")
        # the cores other work leaves free (engines/recipes.py llama_threads): torch's OpenMP threads wait for each
        # other at a barrier like ggml's, and one on a core another process holds stalls the rest
        torch.set_num_threads(threads or (int(env) if env.isdigit() and int(env) > 0
                                          else llama_threads(len(os.sched_getaffinity(0)))))
        self._torch = torch
        from transformers.utils import logging as hf_logging

        # transformers leaves it unannotated (unused-ignore: without the reference extra transformers is Any)
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]
        try:
            if self.source.is_file() and self.source.suffix == ".gguf":
                from transformers import GgufConfig

                kw: dict[str, Any] = {"gguf_file": self.source.name}
                # Any: transformers types its results as unions (str | list[str], str | BatchEncoding) wider than
                # what the single-sequence calls below return
                self.tokenizer: Any = AutoTokenizer.from_pretrained(self.source.parent, **kw)
                self.model = AutoModelForCausalLM.from_pretrained(self.source.parent, dtype=torch.float32,
                                                                  quantization_config=GgufConfig(dequantize=True), **kw)
                self.kind = "gguf_dequantized"
            else:
                self.tokenizer = AutoTokenizer.from_pretrained(self.source)
                self.model = AutoModelForCausalLM.from_pretrained(self.source, dtype=torch.float32)
                self.kind = "hf_directory"
        except (OSError, ValueError, RuntimeError, ImportError) as e:
            raise OpError(f"cannot load the local reference model {self.source}: {e}") from None
        # torch leaves Module.eval unannotated (unused-ignore: without the reference extra the model is Any)
        self.model.eval()  # type: ignore[no-untyped-call, unused-ignore]
        eos = self.tokenizer.eos_token_id
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        self.eos_ids = {int(t) for t in ([eos] if isinstance(eos, int) else []) +
                        (gen_eos if isinstance(gen_eos, list) else [gen_eos] if isinstance(gen_eos, int) else [])}

    def describe(self) -> dict[str, Any]:
        """``{engine, source, kind, dtype, versions}``: what a record says about this reference."""
        return {"engine": "local-transformers", "source": str(self.source), "kind": self.kind, "dtype": "float32",
                "versions": _versions()}

    @property
    def name(self) -> str:
        return self.source.name

    def chat_prompt_ids(self, messages: list[dict[str, Any]], ctk: dict[str, Any] | None = None) -> list[int]:
        """The prompt ids of a chat rendered with the model's own template, generation prompt added."""
        out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **(ctk or {}))
        if not isinstance(out, list):  # a BatchEncoding in transformers 5
            out = out["input_ids"]
        return [int(t) for t in out]

    def encode(self, text: str) -> list[int]:
        """``text`` as token ids, no special tokens added."""
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]

    def pieces(self, ids: list[int]) -> list[str]:
        """Each id decoded on its own (special tokens kept)."""
        return [self.tokenizer.decode([t], skip_special_tokens=False) for t in ids]

    def decode(self, ids: list[int]) -> str:
        text: str = self.tokenizer.decode(ids, skip_special_tokens=True)
        return text

    def _top(self, logits: Any, k: int, chosen: Any = None) -> tuple[Any, Any, Any]:
        """log-softmax in float32 → (top-k ids, top-k logprobs, chosen tokens' logprobs or None)."""
        lp = self._torch.log_softmax(logits.float(), dim=-1)
        vals, idx = self._torch.topk(lp, k, dim=-1)
        picked = lp.gather(-1, chosen.unsqueeze(-1)).squeeze(-1) if chosen is not None else None
        return idx, vals, picked

    def greedy(self, prompt_ids: list[int], max_tokens: int, k: int) -> dict[str, Any]:
        """Greedy decode with the KV cache: ``{token_ids, logprobs, top, finish_reason}``; ``top`` per position
        ``[[id, logprob], …]`` (k entries, most likely first). Stops after an end-of-sequence id (kept, as
        vLLM keeps it) or ``max_tokens``."""
        torch = self._torch
        ids, lps, tops = [], [], []
        finish = "length"
        with torch.inference_mode():
            inp = torch.tensor([prompt_ids])
            past = None
            for _ in range(max_tokens):
                out = self.model(input_ids=inp, past_key_values=past, use_cache=True)
                past = out.past_key_values
                idx, vals, _ = self._top(out.logits[0, -1], k)
                tok = int(idx[0])
                ids.append(tok)
                lps.append(float(vals[0]))
                tops.append([[int(i), float(v)] for i, v in zip(idx.tolist(), vals.tolist())])
                if tok in self.eos_ids:
                    finish = "stop"
                    break
                inp = torch.tensor([[tok]])
        return {"token_ids": ids, "logprobs": lps, "top": tops, "finish_reason": finish}

    def sample(self, prompt_ids: list[int], max_tokens: int, *, n: int, temperature: float = 1.0, seed: int = 0
               ) -> list[list[int]]:
        """``n`` completions sampled at ``temperature`` (full vocabulary, no top-k/top-p), batched with the KV cache;
        each stops after an end-of-sequence id (kept) or ``max_tokens``. Seeded (``torch.Generator``): the same
        arguments give the same tokens on one machine and library version.

        Raises:
            ValueError: ``n`` < 1 or ``temperature`` ≤ 0.
        """
        if n < 1 or not temperature > 0:
            raise ValueError(f"sample needs n ≥ 1 and temperature > 0, got {n} and {temperature}")
        torch = self._torch
        gen = torch.Generator().manual_seed(seed)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        finished = [False] * n
        with torch.inference_mode():
            # the prompt is prefilled once and its cache copied n times (batching n copies of it costs n prefills)
            out = self.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
            past = out.past_key_values
            past.batch_repeat_interleave(n)
            logits = out.logits[:, -1].expand(n, -1)
            for step in range(max_tokens):
                probs = torch.softmax(logits.float() / temperature, dim=-1)
                toks = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                for r, tok in enumerate(toks.tolist()):
                    if not finished[r]:  # a finished row keeps being fed (one batch), its tokens are not kept
                        out_ids[r].append(int(tok))
                        finished[r] = int(tok) in self.eos_ids
                if all(finished) or step == max_tokens - 1:
                    break
                out = self.model(input_ids=toks.unsqueeze(-1), past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[:, -1]
        return out_ids

    def score(self, ids: list[int], start: int, k: int) -> list[dict[int, float]]:
        """Teacher forcing: one forward pass over ``ids``; for every position t ≥ ``start`` (t ≥ 1), the top-k
        logprobs of the distribution that predicts ``ids[t]``, plus ``ids[t]``'s own — the shape of vLLM's
        ``prompt_logprobs``.

        Raises:
            ValueError: ``start`` < 1 or beyond ``ids``.
        """
        if not 1 <= start <= len(ids):
            raise ValueError(f"start {start} outside 1..{len(ids)}")
        torch = self._torch
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, start - 1:len(ids) - 1]
            chosen = torch.tensor(ids[start:])
            idx, vals, picked = self._top(logits, k, chosen)
        rows = []
        for t in range(len(ids) - start):
            row = {int(i): float(v) for i, v in zip(idx[t].tolist(), vals[t].tolist())}
            row[int(chosen[t])] = float(picked[t])
            rows.append(row)
        return rows


def load_local_model(source: str | Path) -> LocalModel:
    """One ``LocalModel`` per source per process (loading takes seconds to tens of seconds)."""
    key = str(Path(source).resolve())
    if key not in _CACHE:
        _CACHE[key] = LocalModel(source)
    return _CACHE[key]
