"""``bench serve --ray [ADDRESS]``: the client processes as Ray actors on a Ray cluster.

Each actor wraps the same ``LevelWorker`` as ``--workers`` (``bench/workers.py``) and is pinned to a
node (``NodeAffinitySchedulingStrategy``), round robin over the alive nodes, so with several nodes
each worker has its own. An actor reserves one CPU. Nothing is assumed about filesystems: each
actor writes its journal into a temporary run dir on its node and returns the files' bytes, which
the parent writes into the run dir. Every request's times are measured on the actor's host; the
level window is merged on the wall clock with the skew bound the parent measured (``clock_skew``).

The actors import ``inferencekit``, so every node needs it installed in the same Python (or a
``runtime_env``; see docs/load-generation.md "Several machines").
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import Any

from inferencekit.bench.workers import LevelWorker, WorkerTask
from inferencekit.errors import OpError
from inferencekit.extras import require_extra

__all__ = ["RayPool", "require_ray"]


def require_ray() -> None:
    """Refuse ``--ray`` when Ray is not installed (called with the flag checks; Ray is not imported here).

    Raises:
        OpError: Ray is not installed (``extras.require_extra``: ``pip install 'inferencekit[ray]' (or make venv)``).
    """
    require_extra("ray", "--ray")


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) address must accept a TCP connection: ``ray.init`` retries an
    unreachable one for minutes, deaf to Ctrl-C.

    Raises:
        OpError: nothing answers there.
    """
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if address in ("default", "auto", "local") or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise OpError(f"--ray {address}: nothing answers there ({exc.strerror or exc}); start the cluster first "
                      "(docs/load-generation.md)") from None


class _Actor:
    """The actor body (made a Ray actor class in ``RayPool``); async so ``progress`` answers during ``run``."""

    def __init__(self) -> None:
        import ray

        self.worker = LevelWorker()
        self.worker.node_id = ray.get_runtime_context().get_node_id()

    async def prepare(self, task: WorkerTask) -> dict[str, Any]:
        return {**self.worker.prepare(task), "node_id": self.worker.node_id}

    async def clock(self) -> int:
        return self.worker.clock()

    async def progress(self) -> tuple[int, int]:
        return self.worker.progress()

    async def run(self, go_wall_ns: int) -> dict[str, Any]:
        return await self.worker.run(go_wall_ns)


class RayPool:
    """``workers`` actors on the cluster at ``address`` ("default": RAY_ADDRESS, else a local Ray started here).

    ``workers`` ≤ 1 means one actor per alive node.

    Raises:
        OpError: Ray missing, the cluster unreachable, or fewer CPUs than actors.
    """

    shared_fs = False

    def __init__(self, address: str, workers: int) -> None:
        require_ray()
        import ray as ray_module
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray: Any = ray_module  # its actor handles are untyped (``.remote`` is added at run time)
        self.ray = ray
        _reachable(address)
        self.started_here = not ray.is_initialized()
        try:
            ray.init(address=None if address == "default" else address, ignore_reinit_error=True,
                     log_to_driver=False, include_dashboard=False)
        except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; all mean "no cluster"
            raise OpError(f"--ray {address}: could not connect to a Ray cluster: {exc}") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.size = workers if workers > 1 else max(1, len(nodes))
        cpus = sum(float(n.get("Resources", {}).get("CPU", 0)) for n in nodes)
        if cpus < self.size:
            self.close()
            raise OpError(f"--ray: the cluster has {cpus:g} CPUs on {len(nodes)} alive node(s); "
                          f"{self.size} workers need one each (give fewer --workers)")
        self.address = address
        self.nodes = [n["NodeID"] for n in nodes]
        actor_cls = ray.remote(num_cpus=1)(_Actor)
        self.actors = [actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=self.nodes[i % len(self.nodes)], soft=False)).remote() for i in range(self.size)]

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "workers": self.size, "alive_nodes": self.nodes,
                "actor_nodes": [self.nodes[i % len(self.nodes)] for i in range(self.size)],
                "ray_version": self.ray.__version__}

    async def prepare(self, tasks: Sequence[WorkerTask]) -> None:
        await asyncio.gather(*(a.prepare.remote(t) for a, t in zip(self.actors, tasks)))

    async def clock(self, i: int) -> int:
        wall_ns: int = await self.actors[i].clock.remote()
        return wall_ns

    async def run(self, n: int, go_wall_ns: int, on_progress: Callable[[int, tuple[int, int]], None]
                  ) -> list[dict[str, Any]]:
        refs = [a.run.remote(go_wall_ns) for a in self.actors[:n]]
        pending = set(range(n))
        while pending:
            done, _ = self.ray.wait([refs[i] for i in pending], num_returns=len(pending), timeout=0)
            for ref in done:
                pending.discard(refs.index(ref))
            for i in list(pending):
                on_progress(i, await self.actors[i].progress.remote())
            if pending:
                await asyncio.sleep(0.5)
        return list(await asyncio.gather(*refs))

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            self.ray.kill(a)
        if self.started_here:
            self.ray.shutdown()
