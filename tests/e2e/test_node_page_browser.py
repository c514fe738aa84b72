"""The live node page in a real headless browser (Debian's chromium + chromium-driver, via selenium).

What a user sees: the page loads from the exporter alone, lists the simulated pods on their GPUs with
per-container utilisation on the shared one, marks the allocated-but-idle GPU, turns a GPU unhealthy
without a reload when it falls off the bus in the simulator, shows a team label full of markup as
text, and the browser logs no console error (a Content-Security-Policy violation would be one).

``UPDATE_CAPTURES=1`` also saves the screenshot to docs/images/node-page.png (the README shows it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.programs import require_program

pytestmark = pytest.mark.e2e

SCENARIO = str(Path(__file__).resolve().parents[1] / "fixtures" / "node-page.yaml")
SCREENSHOT = REPO_ROOT / "docs" / "images" / "node-page.png"
DEADLINE_S = 90.0  # GPU 1 is lost 45 s after the exporter starts; a loaded machine may be slow


@pytest.fixture
def browser() -> Iterator[object]:
    chromium = require_program("chromium", "chromium")
    chromedriver = require_program("chromedriver", "chromium-driver")
    from selenium import webdriver  # noqa: PLC0415 - only this test needs it
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1500,1050", "--hide-scrollbars"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


def _texts(driver: object, selector: str) -> list[list[str]]:
    """[id, visible text] of every element matching ``selector``, read in one script run: the page
    redraws every 2 s, so element handles from an earlier call may be gone."""
    script = "return Array.from(document.querySelectorAll(arguments[0])).map(e => [e.id, e.innerText]);"
    return driver.execute_script(script, selector)  # type: ignore[attr-defined,no-any-return]


def _cards(driver: object) -> dict[str, str]:
    return dict((key, text) for key, text in _texts(driver, "section.gpu"))


def test_the_node_page_shows_pods_and_turns_a_lost_gpu_unhealthy_without_a_reload(browser: object,
                                                                                    tmp_path: Path) -> None:
    driver = browser
    with running_exporter(["--simulate", SCENARIO, "-c", "500"]) as exporter:
        exporter.wait_healthy()
        driver.get(f"http://127.0.0.1:{exporter.port}/")  # type: ignore[attr-defined]
        cards = wait_for(lambda: (c := _cards(driver)) and len(c) == 4 and "chat-api-0" in c["gpu-0"] and c,
                         DEADLINE_S, "four GPU cards with their pods")
        gpu0 = cards["gpu-0"]
        for pod in ("chat-api-0", "embedder-0", "notebook-0"):
            assert pod in gpu0
        assert "H100" in gpu0 and "utilisation" in gpu0
        assert "trainer-0" in cards["gpu-1"] and "healthy" in cards["gpu-1"]
        assert "forgotten-0" in cards["gpu-2"] and "allocated but idle" in cards["gpu-2"]
        assert "no pod" in cards["gpu-3"]
        assert _texts(driver, "#node") == [["node", "node-page-demo"]]
        # Per-container utilisation on the time-sliced GPU: each of its three pods has a figure.
        rows = [text for _, text in _texts(driver, "#gpu-0 tr.pod")]
        assert len(rows) == 3 and all(" %" in row for row in rows), rows
        # Hostile input: the team label's markup is text, no element was made from it.
        assert "<img src=x onerror=alert(1)>" in gpu0
        assert _texts(driver, "main img") == []

        lost = wait_for(lambda: "unhealthy" in (c := _cards(driver)).get("gpu-1", "") and "79" in c["gpu-1"]
                        and c, DEADLINE_S, "GPU 1 shown unhealthy with its Xid")
        assert "gpu_lost" in lost["gpu-1"] or "fatal_xid" in lost["gpu-1"]
        assert "unhealthy" not in lost["gpu-0"]  # the others keep reporting
        wait_for(lambda: "gpu_lost" in _cards(driver).get("gpu-1", ""), DEADLINE_S, "reason gpu_lost")
        # The /health line follows too (the page fetches it with each refresh).
        wait_for(lambda: "1 of 4 GPUs lost" in _texts(driver, "#health")[0][1], DEADLINE_S, "the health line")
        exporter.assert_running()

        shot = tmp_path / "node-page.png"
        driver.save_screenshot(str(shot))  # type: ignore[attr-defined]
        assert shot.stat().st_size > 10_000
        if os.environ.get("UPDATE_CAPTURES"):
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, SCREENSHOT)
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]  # type: ignore[attr-defined]
        assert errors == []
