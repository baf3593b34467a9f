"""Record trajectory sets and the local reference's answers for the quality unit tests.

    INFERENCEKIT_REFERENCE_THREADS=1 .venv/bin/python tests/capture_quality.py --run-dir RUN [--labels a,b]
    .venv/bin/python tests/capture_quality.py --replies URL      # raw replies of one engine

With ``--replies``: one non-streamed greedy chat reply with top-5 logprobs (and the engine's id fields)
from the engine at URL, plus, on vLLM, a ``prompt_logprobs`` completion, on llama-cpp-python, an
``echo`` completion, and on llama-server a sampler draw whose token streamed no logprob entry
(``first_token_held_back``), into ``tests/fixtures/quality/replies/<engine>/``.

Copies ``RUN/quality/<label>/`` (trajectory files and index), ``RUN/run.json`` and the
``quality_trajectory`` records that list those indexes into ``tests/fixtures/quality/run/``, then asks
the in-process float32 reference (the embedded GGUF, dequantised) every question ``quality score`` will
ask about them — chat prompt ids, text re-tokenization, teacher-forced top-20 lists — and writes the
answers to ``tests/fixtures/quality/reference-local.json.gz`` with provenance. The unit tests replay
them, so the judging code runs on real trajectories and real reference distributions without torch.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gzip
import json
import shutil
from pathlib import Path

from inferencekit.engines.model import embedded_gguf
from inferencekit.quality.local_model import load_local_model
from inferencekit.quality.reference import LocalReference
from inferencekit.quality.score_run import TrajectoryScorer
from inferencekit.quality.trajectory_store import label_dirs, load_set
from inferencekit.rundir import read_json

HERE = Path(__file__).parent / "fixtures" / "quality"


class _Recording:
    """Wraps a reference and remembers every answer (keys as the replay in the tests computes them)."""

    def __init__(self, ref: LocalReference) -> None:
        self.ref, self.k = ref, ref.k
        self.prompts: dict[str, list[int]] = {}
        self.texts: dict[str, list[int]] = {}
        self.scores: dict[str, dict[str, object]] = {}

    def describe(self) -> dict:
        return self.ref.describe()

    async def chat_prompt_ids(self, messages, ctk):
        ids = await self.ref.chat_prompt_ids(messages, ctk)
        self.prompts[json.dumps([messages, ctk or {}], sort_keys=True)] = ids
        return ids

    async def encode(self, text):
        ids = await self.ref.encode(text)
        self.texts[text] = ids
        return ids

    async def score(self, ids, start):
        rows = await self.ref.score(ids, start)
        self.scores[json.dumps(ids)] = {"start": start, "rows": [[[t, v] for t, v in r.items()] for r in rows]}
        return rows


async def _record(sets, ref: _Recording) -> None:
    scorer = TrajectoryScorer(ref, {20}, "reference")
    engine_scorer = TrajectoryScorer(ref, {20}, "engine")
    for s in sets:
        await scorer.score_set(s)
        await scorer.score_set(s, as_text=True)
        await engine_scorer.score_set(s)


async def _replies(url: str) -> Path:
    from inferencekit.api.client import Client
    from inferencekit.api.detect import detect_engine
    from inferencekit.api.endpoint import Endpoint
    from inferencekit.quality.reference import ECHO_CHECK_TEXT
    from inferencekit.rundir import write_json

    async with Client(Endpoint.parse(url), timeout_s=300) as client:
        info = await detect_engine(client)
        d = info.dialect
        bodies = {"chat_logprobs": ("/v1/chat/completions", {
            "model": info.model, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 8, "temperature": 0.0, "logprobs": True, "top_logprobs": 5, "stream": False,
            **d.id_fields, **d.neutral_sampling})}
        if info.engine == "vllm":
            bodies["prompt_logprobs"] = ("/v1/completions", {"model": info.model, "prompt": [504, 3575, 282, 4649, 314],
                                                             "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 5})
        if info.engine == "llama-cpp-python":
            bodies["echo"] = ("/v1/completions", {"model": info.model, "prompt": ECHO_CHECK_TEXT, "max_tokens": 1,
                                                  "temperature": 0.0, "echo": True, "logprobs": 5})
        out = HERE / "replies" / info.engine
        if d.verbose_ids:
            bodies["first_token_held_back"] = await _held_back(client, info)
        for name, (path, body) in bodies.items():
            val, err = await client.post_json(path, body)
            if err:
                raise SystemExit(f"{name}: {err}")
            write_json(out / f"{name}.json", {"_provenance": {"engine": info.engine, "version": info.version,
                                                              "model": info.model, "path": path, "body": body,
                                                              "date": dt.datetime.now(dt.UTC).isoformat(
                                                                  timespec="seconds")},
                                              "reply": val}, indent=True)
        return out


async def _held_back(client, info) -> tuple[str, dict]:
    """A sampler-check draw (``quality/sampling_collect.py``: T=1, top_k 20, max_tokens 1, one alternative, the
    dialect's ``verbose_ids``) whose drawn token streamed no logprob entry: the first seed of md-chat-003 (the
    prompt verify's sampler check found one on, 6 Dec 2026) whose reply has none."""
    from inferencekit.data.prompts import load_prompt_set
    from inferencekit.quality.sampling_collect import first_token

    p = next(x for x in load_prompt_set("dev").prompts if x.id == "md-chat-003")
    for seed in range(2000):
        body = {**info.dialect.neutral_sampling, "temperature": 1.0, "top_k": 20, "top_p": 1.0, "min_p": 0.0,
                "model": info.model, "messages": [dict(m) for m in p.messages], "max_tokens": 1, "seed": seed,
                "stream": False, "logprobs": True, "top_logprobs": 1, **info.dialect.verbose_ids}
        val, err = await client.post_json("/v1/chat/completions", body)
        if err is None and first_token(val)[0] is None:
            return "/v1/chat/completions", body
    raise SystemExit("no held-back draw in 2000 seeds")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replies", metavar="URL", help="record raw replies of the engine at URL instead")
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--labels", help="comma list of labels (default: every trajectory folder)")
    args = ap.parse_args()
    if args.replies:
        print("wrote", asyncio.run(_replies(args.replies)))
        return 0
    if args.run_dir is None:
        ap.error("--run-dir or --replies is required")
    dirs = label_dirs([args.run_dir])
    if args.labels:
        dirs = [d for d in dirs if d.name in args.labels.split(",")]
    out_run = HERE / "run"
    shutil.rmtree(out_run, ignore_errors=True)
    (out_run / "quality").mkdir(parents=True)
    (out_run / "evidence").mkdir()
    shutil.copyfile(args.run_dir / "run.json", out_run / "run.json")
    shas = set()
    for d in dirs:
        shutil.copytree(d, out_run / "quality" / d.name)
        shas.add(load_set(d).index_sha256)
    for p in (args.run_dir / "evidence").glob("ev_*.json"):
        rec = read_json(p)
        if rec.get("kind") == "quality_trajectory" and any(a.get("sha256") in shas for a in rec.get("artifacts", [])):
            shutil.copyfile(p, out_run / "evidence" / p.name)
    model = load_local_model(embedded_gguf())
    rec = _Recording(LocalReference(model, k=20))
    asyncio.run(_record([load_set(d) for d in dirs], rec))
    doc = {"_provenance": {"reference": model.describe(), "k": 20,
                           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                           "labels": [d.name for d in dirs]},
           "chat_prompt_ids": rec.prompts, "encode": rec.texts, "score": rec.scores}
    with gzip.open(HERE / "reference-local.json.gz", "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    print(f"wrote {out_run} and {HERE / 'reference-local.json.gz'}: {len(rec.scores)} scored sequences")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
