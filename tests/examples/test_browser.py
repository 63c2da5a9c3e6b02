"""The page of examples/server in headless Chromium: draw a digit with the mouse, see a prediction
and a saliency map, teach the model."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any, Final

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


def test_draw_predict_and_teach(page: Any) -> None:
    draw(page, [(0.45, 0.15), (0.5, 0.5), (0.52, 0.85)])  # a one, more or less
    page.wait_for_function(
        "() => document.getElementById('saliency').naturalWidth > 0"
        " && document.getElementById('prediction').textContent !== ''"
    )
    prediction = page.locator("#prediction").text_content()
    assert prediction is not None
    assert prediction in set("0123456789")
    assert page.locator("#saliency").evaluate("img => img.naturalWidth") == 192
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
