"""The settings of one ``bench serve`` run, stored in run.json so ``--resume`` replays them exactly."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from inferencekit.bench.plan import LevelSpec

__all__ = ["ServeConfig", "FIXED_FIELDS"]

# Request fields bench serve sets itself; --extra-body may not override them.
FIXED_FIELDS = frozenset({"model", "messages", "prompt", "max_tokens", "stream", "stream_options", "temperature",
                          "ignore_eos", "return_token_ids", "logprobs", "top_logprobs"})


@dataclass(slots=True)
class ServeConfig:
    """Everything that decides what is sent (all JSON-able; see ``to_json``).

    ``num_prompts`` is per level; ``duration_s`` (when set) bounds each level's sending time
    instead. ``count_tokens`` asks the engine's dialect for per-event token counts (token ids or
    logprob entries) so N_out can be checked against usage.
    """

    levels: list[LevelSpec]
    dataset: str = "dev"
    num_prompts: int | None = 32
    duration_s: float | None = None
    warmup: int = 2
    max_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float = 0.0
    input_len: int | None = None
    seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)
    count_tokens: bool = True
    retokenize: bool = True
    tokenizer: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    refused_fields: list[str] = field(default_factory=list)  # --extra-body fields not sent (bench serve sets them)
    timeout_s: float = 600.0
    engine_label: str | None = None
    probes: bool = False  # the caller mixes in the hidden probes (gates/probes/load.py); bench only sends them
    kat: int = 0  # the caller mixes in known-answer requests alone, then inside the heaviest level
    kat_max_tokens: int = 64
    structured: int = 0  # the caller mixes in structured-output/tool-call requests alone, then inside every level
    structured_max_tokens: int = 128
    workers: int = 1  # client processes per level (bench/workers.py); with ray, Ray actors
    repeats: int = 1  # --repeats: each load point run this many times, its levels labelled <point>_rep<i>
    ray: str | None = None  # --ray: a Ray cluster address ("default": RAY_ADDRESS or a local Ray), None = no Ray
    metrics_interval_s: float = 1.0  # --metrics-interval: scrape the server's /metrics every so many s (0 = off)
    shared_prefix_tokens: int = 0  # --shared-prefix-tokens L: every prompt opens with one of G prefixes of L tokens
    prefix_groups: int = 1  # --prefix-groups G (data/shared_prefix.py)
    turns: int = 4  # --dataset conversations: user turns per session
    think_time_s: float = 0.0  # --think-time: seconds between a reply and the session's next turn
    rate_of: str = "sessions"  # --rate-of: what an open-loop session level's rate counts (sessions or turns)
    conversation_source: str = "synthetic"  # --conversation-source: synthetic turns, or ShareGPT's human turns
    trace: str | None = None  # --trace FILE: replay a request trace (one open-loop level "trace")
    trace_format: str = "mooncake"  # --trace-format
    time_scale: float = 1.0  # --time-scale: the trace's times multiplied by this (0.5: twice as fast)
    trace_block_size: int = 512  # --trace-block-size: tokens per Mooncake hash id
    keep_trace_repeats: bool = False  # --keep-trace-repeats: a trace's exact repeats are sent as exact repeats

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["levels"] = [asdict(lv) for lv in self.levels]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServeConfig:
        d = dict(d)
        d["levels"] = [LevelSpec(**lv) for lv in d["levels"]]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})
