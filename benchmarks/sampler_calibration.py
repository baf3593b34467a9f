#!/usr/bin/env python3
"""Does the sequential sampler rule keep the error rates it states? (issue 24, item 2, the sampler check)

    .venv/bin/python benchmarks/sampler_calibration.py --from LABEL=RUN_DIR [--from …] [--replays 10000]
    make bench-sampler-calibration BENCH_SAMPLER_ARGS="--from embedded=RUN_DIR"

Input: the fixed sampler draws of earlier runs (a run dir holding ``quality/sampling/<label>/``: ``verify --profile
standard --fixed`` or ``quality sampling --fixed``; ``benchmarks/verify_modes.py`` leaves both engines' runs). For
each, ``--replays`` sequences per cell, fed look by look to the sequential rule (``quality/sampling_sequential.py``
``judge_look``, stopping where the live collector would, the second lists then judged at that look) and to the
fixed rule (``judge_sampling`` on all S draws):

- **recorded, permuted**: each prompt's S recorded draws in a random order (a look at n draws sees a random n of
  them, a valid sample of the engine's own sampler when its draws are independent). Resampling *with*
  replacement is not used: draws from the empirical distribution add its own deviation to the TV and bias the
  excess upward (measured: honest draws so replayed FAIL most of the time).
- **simulated honest / at the margin / temperature ignored**: each informative prompt's draws taken from the
  distribution its recorded logprob lists imply under the settings (``judge_sampling``'s ``implied``), i.e. an
  exact sampler; then that distribution with a share q of its mass moved to the top token, q such that the mean
  excess TV at S draws is the margin (``cheat_share``: the smallest cheat the rule must not PASS); then
  every draw the top token (an engine that ignores the temperature). Other prompts keep their recorded draws,
  permuted.

Incomplete prompts (a failed request or a reply without logprobs in the recorded run: llama-server answers some
draws of a prompt so) have no draws file and are left out, named in the results (``incomplete_left_out``): with
one, every judgement of either mode would be UNPROVEN, and no cell would test a PASS.

Error rates against the rule's statements: an honest cell FAILed (false FAIL, ≤ α = 0.05), the margin cell PASSed
(false PASS, ≤ α/2 = 0.025; and PASSed before the cap, by the top-share test alone, ≤ ``TOP_BETA`` = 0.01), the
temperature-ignored cell not FAILed (miss, ≤ β = 0.05); Wilson 95% intervals; the mean draws per prompt at the stop
and the stops by look. Writes ``benchmarks/results/sampler_calibration-<date>.json``
and prints one table. The bootstrap inside each judgement uses ``--boot`` resamples (verify's 2000). Run by hand,
never by ``make test``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.quality.sampling import DEFAULT_ORDERS, judge_sampling  # noqa: E402
from inferencekit.quality.sampling_run import DEFAULT_SETTINGS  # noqa: E402
from inferencekit.quality.sampling_sequential import (  # noqa: E402
    SEQ_ALPHA,
    TOP_BETA,
    cheat_share,
    draw_looks,
    judge_look,
)
from inferencekit.stats import wilson_interval  # noqa: E402

SEEDS, MARGIN = 64, 0.05  # verify --profile standard's sampler check


def load_rows(folder: Path) -> list[dict[str, Any]]:
    """The per-prompt rows of one fixed side (``quality/sampling/<label>/<prompt id>.json``), as ``judge_sampling``
    reads them; prompts whose requests failed are kept (they make a judgement UNPROVEN, as live)."""
    rows = []
    for path in sorted(folder.glob("*.json")):
        if path.name in ("settings.json", "index.json"):
            continue
        doc = json.loads(path.read_text())
        if "draws" not in doc:
            continue
        rows.append({"id": doc["id"], "bucket": doc.get("bucket"),
                     "top": {k: lp for k, lp in doc["top"]} if doc.get("top") else None,
                     "top_again": {k: lp for k, lp in doc["top_again"]} if doc.get("top_again") else None,
                     "draws": {int(s): k for s, k in doc["draws"].items()}, "repeat": None,
                     "error": "; ".join(doc.get("errors") or [])[:200] or None})
    return rows


def left_out(folder: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The prompts the run planned (``settings.json`` ``prompts``) that have no draws file: the sampler store writes
    none for an incomplete prompt (a failed request, a reply without logprobs), so the replay judges the others."""
    planned = json.loads((folder / "settings.json").read_text()).get("prompts") or []
    have = {r["id"] for r in rows}
    return [str(pid) for pid in planned if pid not in have]


def implied(rows: list[dict[str, Any]]) -> dict[str, list[tuple[Any, float]]]:
    """Each informative prompt's implied distribution under the settings, from its recorded lists."""
    res = judge_sampling(rows, sampling=DEFAULT_SETTINGS, margin=MARGIN, resamples=10, seed=0, order=DEFAULT_ORDERS)
    return {r["id"]: [(k, p) for k, p in r["implied"]] for r in res["rows"] if r.get("implied")}


def sequence(rows: list[dict[str, Any]], rng: random.Random, dist: dict[str, list[tuple[Any, float]]] | None,
             to_top: float) -> list[dict[str, Any]]:
    """One replayed sequence: each prompt's recorded draws permuted, or (``dist``) S draws from its implied
    distribution, a share ``to_top`` of them replaced by its most probable token."""
    out = []
    for r in rows:
        pool = [r["draws"][s] for s in sorted(r["draws"])]
        d = (dist or {}).get(r["id"])
        if d is None:
            rng.shuffle(pool)
            out.append({**r, "draws": dict(enumerate(pool))})
            continue
        keys, weights = [k for k, _ in d], [p for _, p in d]
        top = keys[max(range(len(keys)), key=weights.__getitem__)]
        draws = rng.choices(keys, weights, k=len(pool))
        out.append({**r, "draws": {i: (top if to_top and rng.random() < to_top else k) for i, k in enumerate(draws)}})
    return out


def replay_one(rows: list[dict[str, Any]], looks: tuple[int, ...], boot: int, seed: int,
               fixed_too: bool = True) -> dict[str, Any]:
    """The sequential rule look by look on one resampled sequence, and the fixed rule on all of it."""
    kw: dict[str, Any] = {"sampling": DEFAULT_SETTINGS, "margin": MARGIN, "resamples": boot, "seed": seed,
                          "order": DEFAULT_ORDERS}
    for look, n in enumerate(looks):
        cut = [{**r, "draws": {s: k for s, k in r["draws"].items() if s < n},
                "top_again": None if look < len(looks) - 1 else r["top_again"]} for r in rows]
        res, decided = judge_look(cut, looks=looks, look=look, **kw)
        if decided:
            break
    if look < len(looks) - 1:  # live, the second lists are asked once the rounds stop, then judged at that look
        res, _ = judge_look([{**r, "draws": {s: k for s, k in r["draws"].items() if s < n}} for r in rows],
                            looks=looks, look=look, **kw)
    fixed = judge_sampling(rows, n_seeds=looks[-1], **kw)["verdict"] if fixed_too else None
    return {"seq": res["verdict"], "look": look + 1, "draws": n, "fixed": fixed}


def rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "wilson95": [lo, hi]}


def replay(rows: list[dict[str, Any]], replays: int, boot: int, seed: int,
           dist: dict[str, list[tuple[Any, float]]] | None, to_top: float) -> dict[str, Any]:
    rng = random.Random(seed)
    looks = draw_looks(max(len(r["draws"]) for r in rows))  # the recorded S
    seq: Counter[str] = Counter()
    fixed: Counter[str] = Counter()
    stops: Counter[int] = Counter()
    early_pass = 0  # PASSed before the cap: by the top-share test alone (its own bound, TOP_BETA)
    draws = 0
    t0 = time.monotonic()
    # permuted recorded draws: every order holds the same S draws, so the fixed verdict is one, judged once
    once = None if dist else judge_sampling(rows, sampling=DEFAULT_SETTINGS, margin=MARGIN, resamples=boot, seed=seed,
                                            n_seeds=looks[-1], order=DEFAULT_ORDERS)["verdict"]
    for i in range(replays):
        got = replay_one(sequence(rows, rng, dist, to_top), looks, boot, seed + i, fixed_too=once is None)
        seq[got["seq"]] += 1
        fixed[str(got["fixed"] or once)] += 1
        stops[got["look"]] += 1
        early_pass += got["seq"] == "PASS" and got["look"] < len(looks)
        draws += got["draws"]
    return {"replays": replays, "to_top": to_top, "sequential": dict(seq), "fixed": dict(fixed),
            "stopped_at_look": {str(k): v for k, v in sorted(stops.items())}, "early_pass": early_pass,
            "mean_draws_per_prompt":
            draws / replays, "seconds": round(time.monotonic() - t0, 1)}


def judge_cell(name: str, kind: str, r: dict[str, Any]) -> dict[str, Any]:
    """The error rate the cell tests, for both modes: honest → FAIL share; at the margin → PASS share; cheat →
    share not FAILed."""
    n = r["replays"]
    if kind == "honest":
        what, bound = "false FAIL", SEQ_ALPHA
        k_seq, k_fix = r["sequential"].get("FAIL", 0), r["fixed"].get("FAIL", 0)
    elif kind == "margin":
        what, bound = "false PASS at the margin", SEQ_ALPHA / 2
        k_seq, k_fix = r["sequential"].get("PASS", 0), r["fixed"].get("PASS", 0)
    else:
        what, bound = "miss (not FAIL)", SEQ_ALPHA
        k_seq, k_fix = n - r["sequential"].get("FAIL", 0), n - r["fixed"].get("FAIL", 0)
    out = {"cell": name, "kind": kind, "error": what, "stated": bound, "sequential_rate": rate(k_seq, n),
           "fixed_rate": rate(k_fix, n), "within": k_seq / n <= bound}
    if kind == "margin":  # the early looks' own statement: the top-share test PASSes that cheat at most TOP_BETA
        out["early_pass_rate"] = rate(r["early_pass"], n)
        out["early_pass_stated"] = TOP_BETA
    return out


CELLS = (("recorded, permuted", "honest", False, None), ("simulated honest", "honest", True, 0.0),
         ("simulated at the margin", "margin", True, "q"), ("simulated temperature ignored", "cheat", True, 1.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="sources", action="append", required=True, metavar="LABEL=RUN_DIR",
                    help="a run dir holding fixed sampler draws (quality/sampling/<label>/)")
    ap.add_argument("--replays", type=int, default=10000)
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples inside each judgement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="results file (default results/sampler_calibration-<date>.json)")
    a = ap.parse_args()
    stamp = dt.datetime.now(dt.UTC)
    out = Path(a.out or ROOT / "benchmarks" / "results" / f"sampler_calibration-{stamp:%Y%m%d}.json")
    results: dict[str, Any] = {}
    table: list[dict[str, Any]] = []
    for src in a.sources:
        label, _, run_dir = src.partition("=")
        folder = next(p for p in sorted((Path(run_dir) / "quality" / "sampling").iterdir()) if p.is_dir())
        rows = load_rows(folder)
        dropped = left_out(folder, rows)
        if dropped:
            print(f"{label}: {len(dropped)} incomplete prompt(s) left out: {', '.join(map(str, dropped))}",
                  file=sys.stderr)
        dist = implied(rows)
        q = cheat_share([[p for _, p in d] for d in dist.values()], MARGIN, max(len(x["draws"]) for x in rows))
        for i, (cell, kind, simulated, to_top) in enumerate(CELLS):
            name = f"{label}: {cell}"
            share = q if to_top == "q" else float(to_top or 0.0)
            r = replay(rows, a.replays, a.boot, a.seed + 1000 * i, dist if simulated else None, share)
            results[name] = {"kind": kind, "source": str(folder), "prompts": len(rows), "informative": len(dist),
                             "incomplete_left_out": dropped,
                             "draws_per_prompt": max(len(x["draws"]) for x in rows), **r}
            table.append(judge_cell(name, kind, r))
            print(f"{name}: {r}", file=sys.stderr, flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"date": stamp.isoformat(timespec="seconds"), "margin": MARGIN,
                                       "looks": list(draw_looks(SEEDS)), "boot": a.boot, "cells": results,
                                       "table": table}, indent=1, default=str) + "\n")
    print("| cell | error | stated | sequential [Wilson 95%] | fixed | mean draws/prompt (seq) | stops by look |")
    print("|---|---|---|---|---|---|---|")
    for t in table:
        r = results[t["cell"]]
        s, f = t["sequential_rate"], t["fixed_rate"]
        print(f"| {t['cell']} | {t['error']} | ≤ {t['stated']:g} | {s['rate']:.4f} [{s['wilson95'][0]:.4f}, "
              f"{s['wilson95'][1]:.4f}] | {f['rate']:.4f} | {r['mean_draws_per_prompt']:.1f} | "
              f"{r['stopped_at_look']} |")
        if "early_pass_rate" in t:
            e = t["early_pass_rate"]
            print(f"| {t['cell']}, before the cap | early PASS (top-share test) | ≤ {t['early_pass_stated']:g} | "
                  f"{e['rate']:.4f} [{e['wilson95'][0]:.4f}, {e['wilson95'][1]:.4f}] | – | | |")
    print(f"\nwritten: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
