"""Known-bad engines on demand: ``inferencekit cheat-proxy`` and the cheats it applies.

``transforms`` holds the cheats as pure functions and classes on request bodies and reply payloads;
``state`` the ones that remember across requests (caches, the simulated prefix cache) and
``CheatSet``; ``proxy`` serves them in front of a real engine (aiohttp) and ``running_proxy`` runs that
as a subprocess for tests and benchmarks; ``ops`` declares the operation. See docs/cheat-proxy.md.
"""

from inferencekit.cheats.proxy import running_proxy
from inferencekit.cheats.state import CheatSet
from inferencekit.cheats.transforms import CHEATS, MASK_BLOCKS, ORDER, parse_cheats

__all__ = ["CHEATS", "MASK_BLOCKS", "ORDER", "CheatSet", "parse_cheats", "running_proxy"]
