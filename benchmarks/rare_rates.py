#!/usr/bin/env python3
"""How often an honest engine writes a rare class's characters, per copy attempt (issue 42: rare_tokens).

    .venv/bin/python benchmarks/rare_rates.py --work DIR [--out benchmarks/results/rare_rates-YYYYMMDD.json]

Reads every verify run dir kept under ``--work`` (``verdict_matrix.py --work``; honest targets only, cheats are
skipped), takes each rare probe of its gate runs (``gates/judges/rare_tokens.py`` ``rare_rows``) and counts, per
class, the attempts and those whose reply wrote some of the string's rare characters or copied it (what the
no-reference rule's "class written" needs). From the per-attempt rate ``w`` of each class it gives the chance that
``n`` attempts leave some class without a writer (``1 − Π(1 − (1 − w)^n)``, attempts taken as independent), the
rate verify's rare_tokens is UNPROVEN on an honest engine for want of a writer. Run by hand, never by ``make test``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from inferencekit.gates.judges.rare_tokens import rare_rows  # noqa: E402
from inferencekit.gates.probes.collect import read_probe_log  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="the folder verdict_matrix.py kept its run dirs in")
    ap.add_argument("--out", default=None, help="write the figures here (JSON)")
    a = ap.parse_args()
    attempts: Counter[str] = Counter()
    wrote: Counter[str] = Counter()
    runs = []
    for run_dir in sorted(Path(a.work).iterdir()):
        if not (run_dir / "run.json").is_file() or run_dir.name.startswith("cheat-"):
            continue
        runs.append(run_dir.name)
        for log in sorted((run_dir / "probes").glob("2*.jsonl")):
            _, records, _ = read_probe_log(log)
            for r in rare_rows(records):
                attempts[r.cls] += 1
                wrote[r.cls] += bool(r.core_reproduced or r.wrote_rare)
    rates = {c: {"attempts": attempts[c], "wrote": wrote[c], "rate": round(wrote[c] / attempts[c], 3)}
             for c in sorted(attempts)}
    no_writer = {n: round(1 - math.prod(1 - (1 - v["rate"]) ** n for v in rates.values()), 4) for n in (2, 4, 6, 8)}
    doc = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "runs": runs, "classes": rates,
           "some_class_without_a_writer_by_attempts": no_writer,
           "note": "per-attempt rates over the runs' rare probes; attempts taken as independent"}
    text = json.dumps(doc, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
