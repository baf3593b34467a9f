"""What a load run sends: load levels, the prompt draw, and request bodies. Seeded, except the salts.

Prompts are drawn in one seeded order for the whole run. Every load request carries a tag
``[ik-<salt>] `` at the start of its first user message (or text prompt), the salt 64 bits from the
operating system's CSPRNG (``secrets``), fresh per request and per run: no exact or prefix cache can
serve it, not even one left by an earlier run (every run of the dev set sends the same texts, so a
second ``bench serve`` would otherwise measure llama-server's or vLLM's prompt cache). MLPerf
Endpoints asks the same of any prefix reuse: a per-query random salt of at least 64 bits. The salt is
recorded as ``salt`` in the request and reply files; a prompt's later uses in the run get a ``~k``
file suffix. The one exception is a prompt set drawn afresh per run (``Planner.salt_first_use``).
"""

from __future__ import annotations

import math
import random
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from inferencekit.data.prompts import Prompt
from inferencekit.data.traces import load_trace, replay_rate, scale
from inferencekit.errors import OpError
from inferencekit.rundir import SALT_PATTERN

__all__ = ["LevelSpec", "PlannedRequest", "Planner", "RAMP_STRATEGIES", "RATE_RANGE", "SALT_BITS", "SALT_PATTERN",
           "heaviest_level", "new_salt", "parse_levels", "parse_slo", "ramp_level", "repeat_levels", "request_body",
           "session_levels", "trace_level"]



@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One load level.

    ``mode`` is ``closed`` (``concurrency`` streams, each sending the next request when one ends) or
    ``open`` (arrivals at ``rate`` requests/s following ``arrival``; ``concurrency`` then caps the
    requests in flight, 0 = no cap). ``label`` names ``load-<label>/``.

    ``--repeats K`` runs one load point K times: each run is its own level, labelled ``<point>_rep<i>`` (i = 1..K),
    with ``point`` the point's own label (``c4``) and ``repeat`` = i; a level run once has ``repeat`` 0 and its
    ``point`` is its label.

    An open-loop level of multi-turn sessions (``--dataset conversations --request-rate``) schedules session
    starts, each session then running its turns closed-loop (``bench/runner.py``). ``rate_of`` says what ``rate``
    counts (``--rate-of``): ``sessions`` (session starts/s) or ``turns`` (turns/s offered: the sessions then start
    at ``rate / turns_per_session``, so that starts × mean turns per session equal the rate asked);
    ``turns_per_session`` is the mean number of turns of the run's sessions, set once they are built
    (``session_levels``). ``rate_of`` is "" for every other level.
    """

    label: str
    mode: str
    concurrency: int = 0
    rate: float = 0.0
    arrival: str = "poisson"
    burstiness: float = 1.0
    point: str = ""
    repeat: int = 0
    ramp: str = ""  # open loop: "linear" or "exponential" ramp-up from ramp_start to ramp_end requests/s
    ramp_start: float = 0.0
    ramp_end: float = 0.0
    rate_of: str = ""  # "sessions" or "turns": what an open-loop session level's rate counts (--rate-of)
    turns_per_session: float = 0.0  # mean turns per session of the run's sessions (0: not known yet)

    @property
    def start_rate(self) -> float:
        """The scheduled arrivals per second: ``rate``, except for a ``rate_of`` ``turns`` level, whose arrivals are
        session starts at ``rate / turns_per_session``.

        Raises:
            ValueError: a ``turns`` level whose ``turns_per_session`` was never set (a bug: ``session_levels``).
        """
        if self.rate_of != "turns":
            return self.rate
        if self.turns_per_session <= 0:
            raise ValueError(f"level {self.label}: --rate-of turns needs the mean turns per session")
        return self.rate / self.turns_per_session

    @property
    def point_label(self) -> str:
        """The load point this level measures (its label when it is not one of several repeats)."""
        return self.point or self.label

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"label": self.label, "mode": self.mode, "point": self.point_label}
        if self.repeat:
            d["repeat"] = self.repeat
        if self.mode == "closed":
            d["concurrency"] = self.concurrency
        else:
            d.update(rate_req_s=self.rate, arrival=self.arrival, burstiness=self.burstiness,
                     max_concurrency=self.concurrency or None)
            if self.ramp:
                d.update(ramp_up_strategy=self.ramp, ramp_up_start_rps=self.ramp_start,
                         ramp_up_end_rps=self.ramp_end)
            if self.rate_of:
                d["rate_of"] = self.rate_of
                if self.turns_per_session > 0:
                    d.update(session_start_rate_req_s=self.start_rate, turns_per_session_mean=self.turns_per_session,
                             offered_turn_rate_req_s=self.start_rate * self.turns_per_session,
                             arrivals=("session starts, each session's turns closed-loop after it (turn k + 1 after "
                                       "turn k's reply and the think time); the max_concurrency cap is on sessions"))
        return d


def _num_label(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


RATE_RANGE = (1e-3, 1e6)  # open-loop rates in requests/s: one per ~17 min up to a million a second


def parse_levels(concurrency: Sequence[int] | None, rates: Sequence[float] | None, *, arrival: str = "poisson",
                 burstiness: float = 1.0, max_concurrency: int | None = None) -> list[LevelSpec]:
    """Levels from ``--concurrency 1,4,16`` (closed loop) and ``--request-rate 2,8`` (open loop).

    Raises:
        OpError: no level, a non-positive value, or a bad arrival process / burstiness.
    """
    levels: list[LevelSpec] = []
    for c in concurrency or []:
        if c < 1:
            raise OpError(f"--concurrency values must be ≥ 1, got {c}")
        levels.append(LevelSpec(f"c{c}", "closed", concurrency=c))
    if arrival not in ("constant", "poisson", "gamma"):
        raise OpError(f"--arrival must be constant, poisson or gamma, got {arrival!r}")
    if burstiness <= 0:
        raise OpError(f"--burstiness must be > 0, got {burstiness}")
    if arrival != "gamma" and burstiness != 1.0:
        raise OpError("--burstiness applies only to --arrival gamma")
    cap = max_concurrency or 0
    if cap < 0:
        raise OpError("--max-concurrency must be ≥ 0")
    for r in rates or []:
        if not (r > 0 and math.isfinite(r)):
            raise OpError(f"--request-rate values must be finite and > 0 requests/s, got {r} (for 'as fast as "
                          "possible' use closed loop: --concurrency)")
        if not RATE_RANGE[0] <= r <= RATE_RANGE[1]:
            raise OpError(f"--request-rate {r:g} is outside {RATE_RANGE[0]:g}..{RATE_RANGE[1]:g} requests/s: the "
                          "first arrival would come after the run or every arrival at once")
        label = f"r{_num_label(r)}" + (f"c{cap}" if cap else "")
        levels.append(LevelSpec(label, "open", concurrency=cap, rate=float(r), arrival=arrival, burstiness=burstiness))
    if not levels:
        raise OpError("give at least one load level: --concurrency 1,4 and/or --request-rate 2,8")
    labels = [lv.label for lv in levels]
    if len(set(labels)) != len(labels):
        raise OpError(f"load levels repeat: {', '.join(labels)}")
    return levels


RAMP_STRATEGIES = ("linear", "exponential")


def ramp_level(strategy: str, start_rps: float | None, end_rps: float | None, *, arrival: str = "poisson",
               burstiness: float = 1.0, max_concurrency: int | None = None) -> LevelSpec:
    """The one open-loop level of ``--ramp-up-strategy S --ramp-up-start-rps A --ramp-up-end-rps B``: vLLM ``bench
    serve``'s ramp-up (vllm/benchmarks/serve.py ``get_current_request_rate``): request i of n is sent at rate
    ``A + (B - A)·i/(n-1)`` (linear) or ``A·(B/A)^(i/(n-1))`` (exponential), its gap drawn by ``arrival`` at that
    rate (``bench/schedule.py`` ``ramp_offsets_s``). Labelled ``ramp-<strategy>-<A>-<B>``; ``rate`` holds B.

    Raises:
        OpError: an unknown strategy, a missing or non-positive rate, or A > B (as vLLM refuses them).
    """
    if strategy not in RAMP_STRATEGIES:
        raise OpError(f"--ramp-up-strategy must be linear or exponential, got {strategy!r}")
    if start_rps is None or end_rps is None:
        raise OpError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
    for name, r in (("--ramp-up-start-rps", start_rps), ("--ramp-up-end-rps", end_rps)):
        if not (math.isfinite(r) and RATE_RANGE[0] <= r <= RATE_RANGE[1]):
            raise OpError(f"{name} {r:g} must be within {RATE_RANGE[0]:g}..{RATE_RANGE[1]:g} requests/s")
    if start_rps > end_rps:
        raise OpError(f"--ramp-up-start-rps {start_rps:g} must be ≤ --ramp-up-end-rps {end_rps:g}")
    base = parse_levels(None, [end_rps], arrival=arrival, burstiness=burstiness, max_concurrency=max_concurrency)[0]
    label = f"ramp-{strategy[:3]}-{_num_label(start_rps)}-{_num_label(end_rps)}" + (
        f"c{max_concurrency}" if max_concurrency else "")
    return LevelSpec(label, "open", concurrency=base.concurrency, rate=float(end_rps), arrival=arrival,
                     burstiness=burstiness, ramp=strategy, ramp_start=float(start_rps), ramp_end=float(end_rps))


def trace_level(path: str, fmt: str, *, time_scale: float, block_size: int = 512, max_concurrency: int | None = None
                ) -> tuple[LevelSpec, int]:
    """A trace replay's one open-loop level, labelled ``trace`` (arrival ``trace``: the rows' own times ×
    ``time_scale``, ``bench/runner.py`` ``offsets_for``), its ``rate`` the mean over the scaled span (requests/s),
    and the trace's request count. The file is read and checked here, before anything is sent.

    Raises:
        OpError: a malformed trace (``data/traces.py`` names file:line) or a time scale outside (0, 1000].
    """
    if not (isinstance(time_scale, int | float) and 0 < time_scale <= 1000):
        raise OpError(f"--time-scale must be > 0 and ≤ 1000, got {time_scale}")
    rows = scale(load_trace(path, fmt, block_size=block_size).rows, time_scale)
    return (LevelSpec("trace", "open", rate=replay_rate(rows), arrival="trace", concurrency=max_concurrency or 0),
            len(rows))


def session_levels(levels: Sequence[LevelSpec], turns_per_session: float) -> list[LevelSpec]:
    """The levels with ``turns_per_session`` set on each open-loop session level (``rate_of`` set), the others as
    they are: the mean turns per session of the run's sessions (``--turns`` for synthetic ones; a ShareGPT record's
    human turns, capped by ``--turns``, vary). A ``turns`` level's sessions then start at rate ÷ that mean.

    Raises:
        ValueError: ``turns_per_session`` is not ≥ 1.
    """
    if not turns_per_session >= 1:
        raise ValueError(f"a session has at least one turn, got a mean of {turns_per_session!r}")
    return [replace(lv, turns_per_session=float(turns_per_session)) if lv.rate_of else lv for lv in levels]


def repeat_levels(levels: Sequence[LevelSpec], repeats: int) -> list[LevelSpec]:
    """``--repeats K``: each load point K times, interleaved (every point once, then every point again, ...), so a
    drift of the server over the run spreads over all points alike. K = 1 returns the levels unchanged.

    Raises:
        OpError: K < 1.
    """
    if repeats < 1:
        raise OpError(f"--repeats must be ≥ 1, got {repeats}")
    if repeats == 1:
        return list(levels)
    return [replace(lv, label=f"{lv.label}_rep{i}", point=lv.label, repeat=i)
            for i in range(1, repeats + 1) for lv in levels]


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft=500,tpot=50,e2el=8000`` (ms) → ``{"ttft_ms": 500.0, ...}``.

    Raises:
        OpError: an unknown key or a value that is not a positive number.
    """
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        key = key.strip().lower().removesuffix("_ms")
        if not sep or key not in ("ttft", "ttfo", "tpot", "itl", "e2el"):
            raise OpError(f"--slo {part!r}: use key=milliseconds with keys ttft, ttfo, tpot, itl, e2el")
        try:
            ms = float(val)
        except ValueError:
            raise OpError(f"--slo {part!r}: {val!r} is not a number of milliseconds") from None
        if not (ms > 0 and math.isfinite(ms)):
            raise OpError(f"--slo {part!r}: the limit must be a finite number > 0 ms")
        if f"{key}_ms" in out:
            raise OpError(f"--slo gives {key} twice")
        out[f"{key}_ms"] = ms
    return out


_TURN_KEY = re.compile(r"(.+)\.t(\d+)")  # a session's turn file: <key>.t<n> (bench/runner.py)
SALT_BITS = 64  # MLPerf Endpoints' minimum for a per-query salt in front of reusable content


def new_salt() -> str:
    """A fresh reuse tag, ``ik-<16 hex>``: ``SALT_BITS`` bits from ``secrets`` (the OS CSPRNG), never from the
    run's seed, so two runs with one seed never send the same bytes."""
    return f"ik-{secrets.token_hex(SALT_BITS // 8)}"


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request to send: ``key`` names its files (``<id>`` or ``<id>~k``); ``salt`` its tag (``new_salt``),
    None only for a request built elsewhere without one."""

    key: str
    prompt: Prompt
    salt: str | None


@dataclass(slots=True)
class Planner:
    """Seeded prompt draw for a whole run, balanced over buckets; ``take()`` returns the next request.

    ``used`` counts earlier uses per prompt id (restored from disk on resume with ``restore``).
    ``salt_first_use``: salt a prompt's first use too (the default: a fixed prompt set sends the same texts in
    every run). False only for a prompt set drawn afresh per run (``--dataset random`` mixes a per-run nonce into its
    draw, see ``bench/serve.py``), whose token-exact lengths a tag would change; its later uses are salted.
    """

    prompts: Sequence[Prompt]
    seed: int
    used: Counter[str] = field(default_factory=Counter)
    salt_first_use: bool = True
    in_order: bool = False  # draw the prompts in the given order (a trace replay), not shuffled by the seed
    _order: list[int] = field(default_factory=list)
    # draws so far, the sum of ``used`` kept as it grows: summing ``used`` at each draw cost O(prompts), ~10 µs a
    # send at 1,024 prompts, on the event loop between a closed level's sends
    _taken: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._taken = sum(self.used.values())
        if not self.prompts:
            raise OpError("the prompt set is empty")
        if self.in_order:
            self._order = list(range(len(self.prompts)))
            return
        # Shuffle within each bucket, then deal the buckets round-robin: any run of consecutive draws
        # (one level's requests) mixes prompt lengths alike, so levels compare like with like.
        rng = random.Random(self.seed)
        by_bucket: dict[str, list[int]] = {}
        for i, p in enumerate(self.prompts):
            by_bucket.setdefault(p.bucket, []).append(i)
        piles = [by_bucket[b] for b in sorted(by_bucket)]
        for pile in piles:
            rng.shuffle(pile)
        self._order = [pile[k] for k in range(max(map(len, piles))) for pile in piles if k < len(pile)]

    def restore(self, keys: Iterable[str]) -> None:
        """Count uses recorded on disk (file stems ``<id>`` / ``<id>~k``, a session's turns ``<key>.t<n>``, counted
        once) so the draw continues after them."""
        for k in keys:
            m = _TURN_KEY.fullmatch(k)
            if m and m.group(2) != "1":
                continue
            self.used[(m.group(1) if m else k).split("~", 1)[0]] += 1
            self._taken += 1

    def take(self) -> PlannedRequest:
        p = self.prompts[self._order[self._taken % len(self._order)]]
        self._taken += 1
        k = self.used[p.id]
        self.used[p.id] += 1
        if k == 0:
            return PlannedRequest(p.id, p, new_salt() if self.salt_first_use else None)
        return PlannedRequest(f"{p.id}~{k}", p, new_salt())


def _tag_messages(messages: Sequence[dict[str, Any]], tag: str, at: int = 0) -> list[dict[str, Any]]:
    """The messages with ``tag`` put into the first user message, ``at`` characters in (after an intended shared
    prefix: ``Prompt.shared_prefix_chars``; 0 for every other prompt)."""
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                m["content"] = c[:at] + tag + c[at:]
            elif isinstance(c, list):
                m["content"] = [{"type": "text", "text": tag}, *c]
            return out
    out[0]["content"] = tag + str(out[0].get("content") or "")
    return out


def request_body(req: PlannedRequest, *, model: str, max_tokens: int | None, stream: bool = True,
                 extra: dict[str, Any] | None = None, fixed: dict[str, Any] | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, default_max_tokens: int = 128) -> dict[str, Any]:
    """The JSON body for ``req``.

    Args:
        max_tokens: output length for every request; when None, the prompt's own ``max_tokens``,
            else ``default_max_tokens``.
        extra: ``--extra-body`` fields (cannot override ``fixed`` or the fields set here).
        fixed: fields the operation sets itself (temperature, ignore_eos, count fields, ...).
        chat_template_kwargs: merged per key under the prompt record's own.
    """
    p = req.prompt
    tag = f"[{req.salt}] " if req.salt else ""
    body: dict[str, Any] = dict(extra or {})
    body["model"] = model
    if p.messages is not None:
        body["messages"] = (_tag_messages(p.messages, tag, p.shared_prefix_chars) if tag
                            else [dict(m) for m in p.messages])
    else:
        body["prompt"] = tag + (p.prompt or "")
    body["max_tokens"] = max_tokens if max_tokens is not None else (p.max_tokens or default_max_tokens)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(fixed or {})
    ctk = {**(chat_template_kwargs or {}), **(p.chat_template_kwargs or {})}
    if ctk and p.messages is not None:
        body["chat_template_kwargs"] = ctk
    return body


def heaviest_level(levels: Sequence[LevelSpec]) -> str:
    """Label of the level with the most load: the highest request rate when any level is open-loop, else the
    highest concurrency; the last such level on a tie."""
    open_ = [lv for lv in levels if lv.mode == "open"]
    if open_:
        return max(reversed(open_), key=lambda lv: lv.rate or 0.0).label
    return max(reversed(list(levels)), key=lambda lv: lv.concurrency).label
