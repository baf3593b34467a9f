"""What the quality tasks (``quality gsm8k``, ``quality niah``, ``quality sampling``) share on the collect side.

- ``send_in_order``: items sent in list order with a bounded number in flight, optionally stopped by a
  time budget (the next item is held back once it is projected to end past the deadline);
- ``auto_concurrency``: how many requests to keep in flight when the user asks for 0 — the server's own
  capacity when it reports one, else a timing probe;
- ``ItemStore``: one JSON file per finished item (atomic), so an interrupted run resumes with what it
  already has, provided the request it would send is the same;
- ``post_chat``: one non-streamed chat request whose failure becomes a row, not an exception.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from inferencekit.api.body import parse_json_object
from inferencekit.api.client import Client
from inferencekit.api.detect import EngineInfo
from inferencekit.errors import OpError
from inferencekit.evidence import build_record, save_record, sha256_file
from inferencekit.rundir import RunDir, read_json, safe_name, write_bytes, write_json

__all__ = [
    "AUTO_MAX_CONCURRENCY",
    "PROBE_BURSTS",
    "ItemStore",
    "auto_concurrency",
    "open_task_run",
    "parallelism",
    "post_chat",
    "reply_fields",
    "save_task_record",
    "send_in_order",
    "write_new",
]

T = TypeVar("T")
R = TypeVar("R")

AUTO_MAX_CONCURRENCY = 32
"""``--concurrency 0`` never keeps more requests in flight than this, whatever the server reports."""
PROBE_BURSTS = (8, 32)
"""Burst sizes of the timing probe; a larger burst is tried only while the last one ran in parallel."""
_PARALLEL_SHARE = 0.75  # a burst of b ran "in parallel" when its measured parallelism is at least this share of b


async def send_in_order(items: Sequence[T], one: Callable[[T], Awaitable[R]], *, concurrency: int,
                        deadline: float | None = None, on_done: Callable[[R], None] | None = None,
                        clock: Callable[[], float] = time.monotonic,
                        counts: Callable[[R], bool] | None = None) -> tuple[list[R], dict[str, Any]]:
    """``one(item)`` for each item, in list order, at most ``concurrency`` at once.

    With ``deadline`` (an instant of ``clock``, ``time.monotonic`` by default), a free slot takes the
    next item only while ``now + mean latency so far`` is before it: an item sent now is projected to
    end one mean latency later. Once one item is held back no later one is sent, so the results are always the first n
    items; those in flight finish (the run can overrun by about one request).

    ``counts(result)`` False keeps a result's time out of the mean latency (a reply read back from disk
    on resume is no measure of the server).

    Returns:
        ``(results, info)``: the results of the items sent, in item order, and ``{"sent", "of",
        "stopped_early", "elapsed_s", "mean_latency_s", "projected_full_s"}`` where the projection for
        all items is Little's law, ``len(items) × mean latency / concurrency`` (seconds).
    """
    slots = max(1, concurrency)
    latencies: list[float] = []
    results: dict[int, R] = {}
    t0 = clock()
    nxt = 0
    stopped = False

    async def timed(i: int) -> None:
        t = clock()
        results[i] = await one(items[i])
        if counts is None or counts(results[i]):
            latencies.append(clock() - t)
        if on_done:
            on_done(results[i])

    running: set[asyncio.Task[None]] = set()
    try:
        while True:
            while not stopped and nxt < len(items) and len(running) < slots:
                if deadline is not None and latencies and clock() + statistics.fmean(latencies) > deadline:
                    stopped = True
                    break
                running.add(asyncio.ensure_future(timed(nxt)))
                nxt += 1
            if not running:
                break
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # re-raise a bug in ``one``: request failures are rows, not exceptions
    finally:  # interrupted (Ctrl-C cancels this coroutine) or a bug: no request may outlive the client session
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    mean = statistics.fmean(latencies) if latencies else None
    info = {"sent": nxt, "of": len(items), "stopped_early": stopped, "elapsed_s": round(clock() - t0, 2),
            "mean_latency_s": round(mean, 4) if mean is not None else None,
            "projected_full_s": round(len(items) * mean / slots, 1) if mean is not None else None}
    return [results[i] for i in range(nxt)], info


def parallelism(size: int, alone_s: float, wall_s: float) -> float:
    """How many of ``size`` identical requests a server ran at once: ``size × t_alone / t_burst``.

    ``size`` for a server that batches them all, 1 for one that serves them one after another."""
    return size * alone_s / wall_s if wall_s > 0 else float(size)


async def auto_concurrency(client: Client, info: EngineInfo, probe_body: dict[str, Any], *,
                           cap: int = AUTO_MAX_CONCURRENCY) -> dict[str, Any]:
    """Requests to keep in flight for ``--concurrency 0``: ``{"used", "source", "detail"}``.

    The server's own figure when detection found one (llama.cpp ``/props`` ``total_slots``, SGLang
    ``/get_server_info`` ``max_running_requests``, llama-cpp-python's single worker), capped at ``cap``.
    Else a timing probe with ``probe_body`` (a short chat request): one request to warm up, the best of
    two alone (t1), then bursts of ``PROBE_BURSTS`` identical requests; a burst whose ``parallelism`` is
    below 75% of its size gives the answer (rounded), a burst run fully in parallel lets the next, larger
    one run. A failed probe request gives 1 and says why in ``detail["error"]``.
    """
    if info.capacity:
        used = max(1, min(int(info.capacity), cap))
        return {"used": used, "source": info.capacity_source or "server",
                "detail": {"server_reported": info.capacity, **({"capped_at": cap} if info.capacity > cap else {})}}
    detail: dict[str, Any] = {"max_tokens": probe_body.get("max_tokens"), "bursts": []}

    async def timed() -> float:
        t = time.monotonic()
        _, err = await post_chat(client, probe_body)
        if err is not None:
            raise RuntimeError(err)
        return time.monotonic() - t

    try:
        await timed()  # warm-up: lazy initialisation and caches are not timed
        alone = min(await timed(), await timed())
    except RuntimeError as e:
        return {"used": 1, "source": "timing_probe", "detail": {**detail, "error": f"probe request failed: {e}"[:200]}}
    detail["alone_s"] = round(alone, 4)
    found = 1
    for size in PROBE_BURSTS:
        if size > cap:
            break
        t = time.monotonic()
        try:
            await asyncio.gather(*(timed() for _ in range(size)))
        except RuntimeError as e:
            detail["error"] = f"burst of {size} failed: {e}"[:200]
            break
        wall = time.monotonic() - t
        par = round(parallelism(size, alone, wall), 2)  # decided on the figure the record shows
        detail["bursts"].append({"size": size, "wall_s": round(wall, 4), "parallelism": par})
        found = size
        if par < _PARALLEL_SHARE * size:
            found = max(1, round(par))
            break
    return {"used": max(1, min(found, cap)), "source": "timing_probe", "detail": detail}


async def post_chat(client: Client, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(reply object, None)`` or ``(None, why)`` for one non-streamed chat request: a failed request (HTTP error,
    dead server, body that is not a JSON object) is a value to record, never an exception."""
    doc, err = await client.post_json("/v1/chat/completions", body)
    if err is not None:
        return None, err[:300]
    if not isinstance(doc, dict):
        return None, "reply is not a JSON object"
    return doc, None


def reply_fields(resp: dict[str, Any] | None, err: str | None) -> dict[str, Any]:
    """What a task keeps of one chat reply: ``{"error"}`` for a failed request or a reply without
    ``choices[0].message``, else ``{"text", "finish_reason", "usage"}`` (usage ``{}`` when absent)."""
    if resp is None:
        return {"error": err}
    choice = (resp.get("choices") or [None])[0]
    msg = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(msg, dict):
        return {"error": "reply has no choices[0].message"}
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    return {"text": str(msg.get("content") or ""), "finish_reason": choice.get("finish_reason"), "usage": usage}


class ItemStore:
    """One JSON file per finished item in ``folder`` (``<id>.json``), each holding the request it answered,
    beside ``settings.json`` (the claim) and ``index.json``.

    ``claim(settings)`` first: a folder holding another run's items (other settings) is refused, so a
    second run never overwrites the files an earlier record rests on. ``get(id, request)`` returns a
    stored row only when it was made by the same request and did not fail; ``write_index`` lists every
    item file by SHA-256 for the record."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.reused_ids: set[str] = set()

    @property
    def reused(self) -> int:
        return len(self.reused_ids)

    def claim(self, settings: dict[str, Any], what: str) -> None:
        """Tie the folder to these settings (``settings.json``); the same settings resume.

        Raises:
            OpError: the folder holds a run with other settings (each differing key is named).
        """
        path = self.folder / "settings.json"
        old = read_json(path) if path.is_file() else None
        if isinstance(old, dict) and old != settings:
            keys = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise OpError(f"{self.folder} already holds a {what} run with other settings (differs in "
                          f"{', '.join(keys)}): give another --label or --run-dir (the same settings resume it)")
        if old is None:
            write_json(path, settings)

    def _path(self, item_id: str) -> Path:
        return self.folder / f"{safe_name(item_id, 'item id')}.json"

    def get(self, item_id: str, request: dict[str, Any]) -> dict[str, Any] | None:
        path = self._path(item_id)
        if not path.is_file():
            return None
        doc = read_json(path)
        if not isinstance(doc, dict) or doc.get("request") != request or "error" in doc:
            return None  # another request, or a failure worth asking again
        self.reused_ids.add(item_id)
        return doc

    def put(self, item_id: str, row: dict[str, Any]) -> None:
        write_json(self._path(item_id), row)

    def write_index(self, ids: Sequence[str]) -> Path:
        """``index.json``: each listed item's file name and SHA-256 (the items a result was graded from)."""
        index = {i: {"file": self._path(i).name, "sha256": sha256_file(self._path(i))}
                 for i in ids if self._path(i).is_file()}
        path = self.folder / "index.json"
        data = orjson.dumps({"items": index})
        if not (path.is_file() and path.read_bytes() == data):  # unchanged on a resume that sent nothing
            write_bytes(path, data)
        return path

    async def answer(self, client: Client, item_id: str, body: dict[str, Any],
                     to_row: Callable[[dict[str, Any] | None, str | None], dict[str, Any]]) -> dict[str, Any]:
        """The stored row for this request, else one chat request (``post_chat``) turned into a row by
        ``to_row(reply, error)`` and stored before it is returned."""
        old = self.get(item_id, body)
        if old is not None:
            return old
        resp, err = await post_chat(client, body)
        row = to_row(resp, err)
        self.put(item_id, row)
        return row


def write_new(path: Path, data: bytes) -> Path:
    """Write ``data`` at ``path`` unless a file with other bytes is there (an earlier record may rest on it):
    then at ``<stem>-2<suffix>``, ``-3``, … (the first free or identical one). Returns the path written."""
    candidate, k = path, 1
    while candidate.is_file() and candidate.read_bytes() != data:
        k += 1
        candidate = path.with_name(f"{path.stem}-{k}{path.suffix}")
    if not candidate.is_file():
        write_bytes(candidate, data)
    return candidate


def pinned_template_kwargs(run_dir: str | None, given: str | None) -> str | None:
    """The ``--chat-template-kwargs`` a quality command uses in ``run_dir``: the run dir's pinned value
    (``run.json`` ``pins.chat_template_kwargs``, set by the run's first bench, gates or verify) when the flag was
    not given, so every part of one run dir renders prompts with one template; the flag as given otherwise.

    Raises:
        OpError: the flag differs from the value the run dir pins (both named), before any request.
    """
    run_json = Path(str(run_dir)) / "run.json" if run_dir else None
    if run_json is None or not run_json.is_file():
        return given
    pins = (RunDir.open(str(run_dir)).read_run().get("pins") or {})
    if "chat_template_kwargs" not in pins:
        return given
    pinned = pins["chat_template_kwargs"] or {}
    if given is None:
        return orjson.dumps(pinned).decode() if pinned else None
    if parse_json_object(given, "--chat-template-kwargs") != pinned:
        raise OpError(f"run dir {run_dir!r} pins chat_template_kwargs = {orjson.dumps(pinned).decode()}; this command "
                      f"has {given}. Use a new run dir, or the same setting (or leave the flag out to use the pinned "
                      "one)")
    return given


def open_task_run(run_dir: str | None, argv: Sequence[str], operation: str) -> RunDir:
    """An existing run dir (``--run-dir`` with a run.json: the task is added to it) or a new one, whose run.json
    then records the command line ``argv`` and the ``operation``."""
    existing = bool(run_dir) and (Path(str(run_dir)) / "run.json").is_file()
    run = RunDir.open(str(run_dir), writable=True) if existing else RunDir.create(run_dir)
    if not existing:
        run.update_run(command=list(argv), operation=operation)
    return run


def save_task_record(run: RunDir, *, task: str, label: str, summary: str, engine: dict[str, Any], model: str,
                     workload: dict[str, Any], metrics: list[dict[str, Any]], artifacts: list[dict[str, str]],
                     missing: list[str], limitations: list[str], data: dict[str, Any],
                     verdict: str | None = None, claim_class: str = "observed",
                     fallbacks: Sequence[str] = ()) -> dict[str, Any]:
    """Build and save a ``quality_task`` record (``data.task`` names the task, ``data.label`` the engine's label,
    ``data.run_dir`` the run dir its artifacts are relative to); returns it. ``fallbacks``: the limitations that
    changed what was measured (a refused ``--extra-body`` field, fewer alternatives than asked), kept in
    ``data.fallbacks`` and added to the limitations when missing there: ``verify --strict`` does not let a PASS
    rest on one (docs/design.md, "A PASS is a bounded claim")."""
    lims = [*limitations, *(f for f in fallbacks if f not in limitations)]
    rec = build_record(kind="quality_task", claim_class=claim_class, summary=summary,
                       identity={"engine": engine, "model": {"id": model}, "workload": workload},
                       metrics=metrics, artifacts=artifacts, missing=missing, limitations=lims,
                       data={"task": task, "label": label, "run_dir": str(run.path.resolve()), **data,
                             "fallbacks": list(fallbacks)},
                       verdict=verdict)
    save_record(rec, run)
    return rec
