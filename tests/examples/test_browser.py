"""The page of examples/server in headless Chromium: draw a digit with the mouse, see a prediction
and a saliency map, teach the model."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

from .conftest import Server

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs playwright (pip install playwright)"
)

CHROMIUM: Final = os.environ.get("ASYNCGRAD_CHROMIUM") or shutil.which("chromium") or ""
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS: Final = 30_000

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not CHROMIUM, reason="no chromium on PATH (apt-get install chromium, or ASYNCGRAD_CHROMIUM)"
    ),
]


@pytest.fixture
def page(server: Server) -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 700})
            page.set_default_timeout(WAIT_MS)
            page.goto(server.url + "/")
            yield page
        finally:
            browser.close()


def draw(page: Any, points: list[tuple[float, float]]) -> None:
    """One stroke through ``points``, given as fractions of the drawing pad's size."""
    box = page.locator("#pad").bounding_box()
    assert box is not None

    def at(p: tuple[float, float]) -> tuple[float, float]:
        return box["x"] + p[0] * box["width"], box["y"] + p[1] * box["height"]

    page.mouse.move(*at(points[0]))
    page.mouse.down()
    for p in points[1:]:
        page.mouse.move(*at(p), steps=8)
    page.mouse.up()


# The colour of the map's cell (row, column) on the page.
CELL_RGB: Final = """([r, c]) => Array.from(document.getElementById('saliency')
    .getContext('2d').getImageData(c, r, 1, 1).data.slice(0, 3))"""


def test_draw_predict_and_teach(page: Any) -> None:
    requests: list[str] = []
    failed: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    with page.expect_response(lambda r: r.url.endswith("/saliency")) as answer:
        draw(page, [(0.45, 0.15), (0.5, 0.5), (0.52, 0.85)])  # a one, more or less
    page.wait_for_function(
        "() => document.getElementById('saliency').dataset.drawn === '1'"
        " && document.getElementById('prediction').textContent !== ''"
    )
    prediction = page.locator("#prediction").text_content()
    assert prediction is not None
    assert prediction in set("0123456789")
    # The map drawn is the answer's: its largest cell full red (raises) or full blue.
    grad = np.asarray(answer.value.json()["saliency"])
    r, c = np.unravel_index(np.abs(grad).argmax(), grad.shape)
    want = [255, 0, 0] if grad[r, c] > 0 else [0, 0, 255]
    page.wait_for_function(
        f"() => ({CELL_RGB})([{r}, {c}]).join() === '{','.join(map(str, want))}'"
    )
    # One request per drawing (no second one for a PNG), and nothing the page asks for is
    # missing (the favicon included).
    assert not [u for u in requests if "format=png" in u], requests
    assert not failed, failed
    assert page.locator("#probs .bar").count() == 10
    assert page.locator("#status").text_content() == ""

    page.select_option("#label", "1")
    page.click("#teach")
    page.wait_for_function("() => document.getElementById('status').textContent.startsWith('le')")
    assert "learned 1" in (page.locator("#status").text_content() or "")
    page.wait_for_function(
        "() => /version [1-9]/.test(document.getElementById('version').textContent)"
    )

    page.click("#clear")
    assert page.locator("#prediction").text_content() == ""
    # The map goes back to its blank background (no broken image).
    assert page.locator("#saliency").evaluate("c => c.dataset.drawn") == ""
    assert page.evaluate(f"({CELL_RGB})([0, 0])") == [246, 246, 246]
