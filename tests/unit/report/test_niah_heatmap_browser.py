"""The NIAH heat-map page as headless Chromium renders it: cell colours in a screenshot, labels in the DOM.

Chromium is Debian's package (``make chromium`` installs it; ``make test`` does so first). Outside CI a
machine without it skips; in CI (``CI`` set) the test fails instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from PIL import Image

from inferencekit.quality import niah
from inferencekit.report.niah_heatmap import write_heatmap
from tests.conftest import _missing

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without these, Chromium stalls on first-run, sync and update fetches.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
WINDOW = (1100, 1300)  # CSS pixels at scale 1: the whole figure and table fit without scrolling
TOLERANCE = 6  # per RGB channel: antialiasing only touches cell edges


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not CHROMIUM.is_file():
        _missing("chromium", f"{CHROMIUM} not installed (make chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()  # a new, empty profile every time
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def grid() -> dict:
    """2 lengths × 2 depths × 2 trials from real cases: L256 depth 0.1 2/2 (100%), L256 depth 0.9 1/2 (50%),
    L512 depth 0.1 0/2 (0%), L512 depth 0.9 0/2 with one failed request (0%)."""
    cases = niah.plan_grid([256, 512], [0.1, 0.9], 2, 7, 4.2)
    replies: dict[str, str | None] = {}
    for c in cases:
        if c.length_tokens == 256 and (c.depth == 0.1 or c.trial == 0):
            replies[c.id] = f"The vault access code is **{c.code}**."
        else:
            replies[c.id] = f"The code is {c.code}1."  # a longer number: not the code
    replies[niah.case_id(512, 0.9, 1)] = None
    tokens = {c.id: c.length_tokens + 80 + 2 * c.trial for c in cases}  # means 337 and 593
    result = niah.score_grid(cases, replies, tokens)
    assert [(c["length_tokens"], c["depth"], c["hits"], c["trials"], c["failed"]) for c in result["cells"]] == [
        (256, 0.1, 2, 2, 0), (256, 0.9, 1, 2, 0), (512, 0.1, 0, 2, 0), (512, 0.9, 0, 2, 1)]
    return result


@pytest.fixture(scope="module")
def page(grid: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("niah-page") / "heatmap.html"
    return write_heatmap(grid, out, label="browser-test", measurement="assumed 4.2 chars/token (test)")


def expected_rgb(accuracy: float) -> np.ndarray:
    rgba = matplotlib.colormaps["RdYlGn"](accuracy)
    return np.round(np.array(rgba[:3]) * 255).astype(int)


def pixels_of(img: np.ndarray, rgb: np.ndarray) -> np.ndarray:
    """(row, column) of every pixel within TOLERANCE of ``rgb`` on each channel."""
    near = np.all(np.abs(img[:, :, :3].astype(int) - rgb) <= TOLERANCE, axis=2)
    return np.argwhere(near)


def test_screenshot_shows_the_cells_in_their_colours_where_they_belong(page: Path, tmp_path: Path) -> None:
    png = tmp_path / "heatmap.png"
    proc = chromium(tmp_path, f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = np.asarray(Image.open(png).convert("RGB"))
    assert img.shape[:2] == (WINDOW[1], WINDOW[0])
    white = np.all(img >= 250, axis=2).mean()
    assert 0.3 < white < 0.97, f"page is {white:.0%} white: blank or unstyled"
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50  # text, a gradient and cells, not a flat fill

    green = pixels_of(img, expected_rgb(1.0))   # the 100% cell
    yellow = pixels_of(img, expected_rgb(0.5))  # the 50% cell
    red = pixels_of(img, expected_rgb(0.0))     # the two 0% cells
    # a cell is thousands of pixels; the colour bar holds each exact colour in a thin band only
    assert len(green) > 5000 and len(yellow) > 5000 and len(red) > 2 * 5000, (len(green), len(yellow), len(red))
    # columns are lengths (256 left of 512), rows depths (0.1 above 0.9)
    assert np.median(green[:, 1]) < np.median(red[:, 1])
    assert np.median(yellow[:, 1]) < np.median(red[:, 1])
    assert np.median(green[:, 0]) < np.median(yellow[:, 0])


def test_dumped_dom_has_the_svg_and_every_cell_label(page: Path, grid: dict, tmp_path: Path) -> None:
    proc = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert dom.count("<svg") == 1 and "<img" not in dom and "<script" not in dom
    svg = dom[dom.index("<svg"):dom.index("</svg>")]
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)
    labels = [t for t in texts if re.fullmatch(r"\d+/\d+", t)]
    assert sorted(labels) == sorted(f"{c['hits']}/{c['trials']}" for c in grid["cells"]) == ["0/2", "0/2", "1/2", "2/2"]
    assert "1 failed" in texts
    assert "(sent ≈ 337)" in texts and "(sent ≈ 593)" in texts  # mean prompt tokens per length under its tick
    assert "Needle in a haystack: browser-test" in texts
    assert "Overall: 3/8 found (38%" in dom and "1 request(s) failed" in dom
