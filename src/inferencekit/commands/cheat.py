"""``inferencekit cheat-proxy``: serve a proxy that makes a real engine cheat, until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from urllib.parse import urlsplit

from inferencekit.api.endpoint import normalize_base_url
from inferencekit.cheats.proxy import Mix, listening_line, serve
from inferencekit.cheats.state import PREFILL_BASE_MS, PREFILL_MS_PER_100_CHARS, CheatSet
from inferencekit.cheats.transforms import CORRUPT_SHARE, MASK_BLOCKS, ORDER, TRUNCATE_CHARS, parse_cheats
from inferencekit.errors import OpError
from inferencekit.registry import Arg, Call, Outcome, operation

__all__ = ["cheat_proxy"]


@operation(("cheat-proxy",), "Serve an OpenAI-compatible proxy that makes a real engine cheat in known ways.",
           description="Forwards every request (any method and path, headers such as Authorization included) to "
                       "--upstream and streams the replies back, applying the chosen cheats to chat-completions and "
                       "completions requests and replies: output-cache, near-duplicate-cache, prefix-cache-only, "
                       "usage-inflate, usage-deflate, prompt-tokens-inflated, ignore-eos-dropped, "
                       "temperature-ignored, seed-ignored, top-p-dropped, logit-bias-dropped, penalty-dropped, "
                       "stop-ignored, silent-truncate, json-broken-under-load, vocab-mask, logprobs-unnormalised, "
                       "spec-inexact, order-dependent (or none: pass-through). "
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
                 Arg("mix_seed", "integer", "With --mix-upstream: seed of the per-request draws.", default=0),
                 Arg("mix_under_load", "boolean", "With --mix-upstream: route only generation requests that arrive "
                     "while at least 2 are in flight at the proxy (this one included), so the second engine answers "
                     "under load and the first alone: a quantisation swapped in when batches fill, for the order "
                     "gate's known answers to catch.", default=False),
                 Arg("truncate_chars", "integer", "silent-truncate only: a generation request whose prompt is longer "
                     "than N characters has the middle of its longest message (or prompt) dropped, keeping the first "
                     f"and last N/2 characters; N ≥ 2 (default: {TRUNCATE_CHARS}).", metavar="N"),
                 Arg("corrupt_share", "number", "json-broken-under-load only: the probability of breaking a JSON "
                     "reply (response_format json_object or json_schema) that arrives while at least 2 generation "
                     f"requests are in flight (0 < share ≤ 1; default: {CORRUPT_SHARE:g})."),
                 Arg("corrupt_seed", "integer", "json-broken-under-load only: seed of the draws (default: 0)."),
                 Arg("prefill_ms", "number", "prefix-cache-only only: the fixed part of the simulated prefill a "
                     "prompt not seen before waits before it is forwarded, in ms, 0-60000 (default: "
                     f"{PREFILL_BASE_MS:g}; plus {PREFILL_MS_PER_100_CHARS:g} ms a hundred characters). A repeat "
                     "saves all of it.", metavar="MS")])
def cheat_proxy(call: Call, upstream: str, cheat: list[str], host: str = "127.0.0.1", port: int = 0,
                mask_block: str | None = None, mix_upstream: str | None = None, mix_share: float | None = None,
                mix_seed: int = 0, truncate_chars: int | None = None, corrupt_share: float | None = None,
                corrupt_seed: int | None = None, prefill_ms: float | None = None, mix_under_load: bool = False
                ) -> Outcome:
    try:
        chosen = parse_cheats(cheat)
    except ValueError as e:
        raise OpError(f"--cheat: {e}") from None
    mix = _mix(mix_upstream, mix_share, mix_seed, mix_under_load)
    for flag, value, needs in (("--mask-block", mask_block, "vocab-mask"),
                               ("--truncate-chars", truncate_chars, "silent-truncate"),
                               ("--corrupt-share", corrupt_share, "json-broken-under-load"),
                               ("--corrupt-seed", corrupt_seed, "json-broken-under-load"),
                               ("--prefill-ms", prefill_ms, "prefix-cache-only")):
        if value is not None and needs not in chosen:
            raise OpError(f"{flag} applies only to --cheat {needs}; add {needs} or drop {flag}")
    if truncate_chars is not None and truncate_chars < 2:
        raise OpError(f"--truncate-chars must be ≥ 2 (N/2 characters are kept at each end of the prompt), "
                      f"got {truncate_chars}")
    if corrupt_share is not None and not 0.0 < corrupt_share <= 1.0:
        raise OpError(f"--corrupt-share must be in (0, 1], got {corrupt_share!r}")
    if prefill_ms is not None and not 0.0 <= prefill_ms <= 60_000.0:
        raise OpError(f"--prefill-ms must be in 0-60000 (ms), got {prefill_ms!r}")
    cheats = CheatSet(chosen, mask_block=mask_block or "hangul",
                      truncate_chars=TRUNCATE_CHARS if truncate_chars is None else truncate_chars,
                      corrupt_share=CORRUPT_SHARE if corrupt_share is None else corrupt_share,
                      corrupt_seed=corrupt_seed or 0,
                      prefill_ms=PREFILL_BASE_MS if prefill_ms is None else prefill_ms)
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
                               "mask_block": cheats.mask_block if "vocab-mask" in names else None,
                               "truncate_chars": cheats.truncate_chars if "silent-truncate" in names else None,
                               "json_corruption": {"share": cheats.corrupt_share, "seed": cheats.corrupt_seed}
                               if "json-broken-under-load" in names else None,
                               "prefill_ms": cheats.prefill_ms if "prefix-cache-only" in names else None,
                               "stats": stats,
                               "mix": {"upstream": mix.root, "share": mix.share, "seed": mix.seed,
                                       "under_load": mix.under_load} if mix else None}

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


def _mix(upstream: str | None, share: float | None, seed: int, under_load: bool = False) -> Mix | None:
    if upstream is None:
        if share is not None or under_load:
            raise OpError(f"{'--mix-share' if share is not None else '--mix-under-load'} needs --mix-upstream (the "
                          "engine the share is routed to)")
        return None
    if share is None:
        raise OpError("--mix-upstream needs --mix-share (the share of generation requests routed there, e.g. 0.1)")
    try:
        return Mix(_root(upstream, "--mix-upstream"), share, seed, under_load)
    except ValueError as e:
        raise OpError(f"--mix-share: {e}") from None
