"""``inferencekit cheat-proxy``: serve a proxy that makes a real engine cheat, until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from urllib.parse import urlsplit

from inferencekit.api.endpoint import normalize_base_url
from inferencekit.cheats.proxy import Mix, listening_line, serve
from inferencekit.cheats.state import CheatSet
from inferencekit.cheats.transforms import MASK_BLOCKS, ORDER
from inferencekit.errors import OpError
from inferencekit.registry import Arg, Call, Outcome, operation

__all__ = ["cheat_proxy"]


@operation(("cheat-proxy",), "Serve an OpenAI-compatible proxy that makes a real engine cheat in known ways.",
           description="Forwards every request (any method and path, headers such as Authorization included) to "
                       "--upstream and streams the replies back, applying the chosen cheats to chat-completions and "
                       "completions requests and replies: output-cache, near-duplicate-cache, prefix-cache-only, "
                       "usage-inflate, usage-deflate, ignore-eos-dropped, temperature-ignored, seed-ignored, "
                       "vocab-mask, logprobs-unnormalised, spec-inexact, order-dependent (or none: pass-through). "
                       "Run the gates against it to see them FAIL on a known-bad engine before you trust them "
                       "(docs/cheat-proxy.md says which gate catches which cheat). Prints one line 'cheat-proxy: "
                       "listening on http://HOST:PORT (...)' on stdout once ready (on stderr under --json), serves "
                       "until SIGINT/SIGTERM, then prints how many requests it served and cheated on.",
           example="inferencekit cheat-proxy --upstream http://127.0.0.1:8080 --cheat output-cache,usage-inflate",
           args=[Arg("upstream", "string", "The real engine's URL, with or without /v1 (credentials in the URL are "
                     "refused).", required=True, metavar="URL"),
                 Arg("cheat", "array", "Cheats to apply, comma-separated, in a fixed order whatever the order given; "
                     "'none' forwards untouched.", required=True, choices=("none", *ORDER), metavar="NAME[,NAME]"),
                 Arg("host", "string", "Address to listen on.", default="127.0.0.1"),
                 Arg("port", "integer", "TCP port to listen on; 0 picks a free one (printed).", default=0),
                 Arg("mask_block", "string", "vocab-mask only: the Unicode block whose characters are stripped from "
                     "generated text, fixed here and never chosen from a probe (default: hangul, U+AC00-U+D7AF).",
                     choices=tuple(MASK_BLOCKS)),
                 Arg("mix_upstream", "string", "A second engine's URL: a random share of the generation requests "
                     "(--mix-share) goes there instead, a randomised substitution for the equivalence audit to "
                     "catch.", metavar="URL"),
                 Arg("mix_share", "number", "With --mix-upstream: the probability, per generation request, of "
                     "routing it to the second engine (0 < share ≤ 1)."),
                 Arg("mix_seed", "integer", "With --mix-upstream: seed of the per-request draws.", default=0)])
def cheat_proxy(call: Call, upstream: str, cheat: list[str], host: str = "127.0.0.1", port: int = 0,
                mask_block: str | None = None, mix_upstream: str | None = None, mix_share: float | None = None,
                mix_seed: int = 0) -> Outcome:
    try:
        cheats = CheatSet(cheat, mask_block=mask_block or "hangul")
    except ValueError as e:
        raise OpError(f"--cheat: {e}") from None
    mix = _mix(mix_upstream, mix_share, mix_seed)
    if mask_block is not None and "vocab-mask" not in cheats.names:
        raise OpError("--mask-block applies only to --cheat vocab-mask; add vocab-mask or drop --mask-block")
    if not 0 <= port < 65536:
        raise OpError(f"--port {port} is not a TCP port (0-65535; 0 picks a free one)")
    root = _root(upstream, "--upstream")
    names = list(cheats.names)
    shown: dict[str, str] = {}

    def ready(url: str) -> None:
        shown["url"] = url
        out = sys.stderr if call.json_output else sys.stdout
        print(listening_line(url, root, names, mix), file=out, flush=True)

    stats = asyncio.run(serve(root, cheats, host=host, port=port, on_ready=ready, mix=mix))
    payload: dict[str, Any] = {"url": shown.get("url"), "upstream": root, "cheats": names,
                               "mask_block": cheats.mask_block if "vocab-mask" in names else None, "stats": stats,
                               "mix": {"upstream": mix.root, "share": mix.share, "seed": mix.seed} if mix else None}

    def render(console: Any) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.items())) or "no requests"
        console.print(f"cheat-proxy: stopped ({counts})", markup=False, highlight=False)

    return Outcome(payload, None, render)


def _root(url: str, flag: str) -> str:
    if "@" in urlsplit(url).netloc:
        raise OpError(f"{flag} contains credentials (user:password@host); leave them out: the proxy passes "
                      "each request's Authorization header through to the upstream")
    try:
        return normalize_base_url(url)
    except OpError as e:
        raise OpError(str(e).replace("--base-url", flag)) from None


def _mix(upstream: str | None, share: float | None, seed: int) -> Mix | None:
    if upstream is None:
        if share is not None:
            raise OpError("--mix-share needs --mix-upstream (the engine the share is routed to)")
        return None
    if share is None:
        raise OpError("--mix-upstream needs --mix-share (the share of generation requests routed there, e.g. 0.1)")
    try:
        return Mix(_root(upstream, "--mix-upstream"), share, seed)
    except ValueError as e:
        raise OpError(f"--mix-share: {e}") from None
