"""The bench report page of a sweep run dir as headless Chromium renders it: non-blank, every chart in the DOM.

The run dir is the recorded bench serve run with the hand-written sweep block and the transplanted server telemetry
(tests/unit/report/bench_runs.py).
Chromium is Debian's package (``make chromium`` installs it; ``make test`` does so first). Outside CI a machine
without it skips; in CI (``CI`` set) the test fails instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inferencekit.report.bench_charts import CHART_IDS
from inferencekit.report.bench_html import write_bench_html
from tests.conftest import _missing
from tests.unit.report.bench_runs import SWEEP_RUN, sweep_copy

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without these, Chromium stalls on first-run, sync and update fetches.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
WINDOW = (1200, 7000)  # CSS pixels: tall enough for the whole page, every chart on the one screenshot
TOLERANCE = 6  # per RGB channel
# the first three level colours (bench_charts._PALETTE: c1, c2, r2) and the sweep's pass/fail marks
COLOURS = {"c1": "#4477aa", "c2": "#ee6677", "r2": "#228833", "meets": "#1a7f37", "misses": "#b00020"}


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not CHROMIUM.is_file():
        _missing("chromium", f"{CHROMIUM} not installed (make chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()  # a new, empty profile every time
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = sweep_copy(tmp_path_factory.mktemp("sweep-page") / "run", telemetry=True)
    return write_bench_html(run_dir, run_dir.parent / "report.html")


def rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])


def test_screenshot_is_not_blank_and_shows_each_levels_colour(page: Path, tmp_path: Path) -> None:
    png = tmp_path / "page.png"
    proc = chromium(tmp_path, f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = np.asarray(Image.open(png).convert("RGB"))
    assert img.shape[:2] == (WINDOW[1], WINDOW[0])
    white = np.all(img >= 250, axis=2).mean()
    assert 0.3 < white < 0.97, f"page is {white:.0%} white: blank or unstyled"
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50  # text, lines, markers: not a flat fill
    counts = {name: int(np.all(np.abs(img.astype(int) - rgb(c)) <= TOLERANCE, axis=2).sum())
              for name, c in COLOURS.items()}
    # every level is drawn in its colour (CDF lines, dots, bars), and the sweep's marks in theirs
    assert all(n > 200 for n in counts.values()), counts
    rows = np.argwhere(np.any(np.abs(img.astype(int) - rgb(COLOURS["c1"])) <= TOLERANCE, axis=2))[:, 0]
    assert rows.max() - rows.min() > 3000  # c1's colour from the first chart down to the client self-check


def test_dumped_dom_has_every_chart(page: Path, tmp_path: Path) -> None:
    proc = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<script" not in dom and "<img" not in dom
    for chart_id in CHART_IDS:
        m = re.search(rf'<figure id="{chart_id}" class="([^"]*)"', dom)
        assert m is not None, chart_id
        start = m.start()
        fig = dom[start:dom.index("</figure>", start)]
        assert m.group(1) == "ik-chart" and fig.count("<svg") == 1, chart_id
    sweep = dom[dom.index('<figure id="chart-sweep"'):]
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", sweep[:sweep.index("</svg>")])
    assert {"limit 8,000.0", "limit 90.0", "boundary 1.00", "c1", "c2"} <= set(texts)


def test_a_recorded_sweep_page_has_every_chart(tmp_path: Path) -> None:
    """The page of a real `bench sweep` run dir: every chart drawn but the server's telemetry (the embedded engine
    serves no /metrics), which says so."""
    page = write_bench_html(SWEEP_RUN, tmp_path / "sweep.html")
    proc = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    for chart_id in CHART_IDS:
        m = re.search(rf'<figure id="{chart_id}" class="([^"]*)"', dom)
        assert m is not None, chart_id
        fig = dom[m.start():dom.index("</figure>", m.start())]
        if chart_id == "chart-server-telemetry":
            assert m.group(1) == "ik-chart not-measured" and "no server telemetry recorded" in fig
        else:
            assert m.group(1) == "ik-chart" and fig.count("<svg") == 1, chart_id
    sweep = dom[dom.index('<figure id="chart-sweep"'):]
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", sweep[:sweep.index("</svg>")])
    assert {"limit 2,500.0", "boundary 1.00", "c1", "c2", "c4"} <= set(texts)
