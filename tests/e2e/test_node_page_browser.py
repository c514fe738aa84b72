"""The live node page in a real headless browser (Debian's chromium + chromium-driver, via selenium).

What a user sees: the page loads from the exporter alone, lists the simulated pods on their GPUs with
per-container utilisation on the shared one, shows every condition of ``/gpus.json`` with its reason,
turns a GPU unhealthy without a reload when it falls off the bus in the simulator, shows a team label
full of markup as text, and the browser logs no console error (a Content-Security-Policy violation
would be one). Time is visible: the page says how old its data is, turns stale (words, colour, greyed
values) when the exporter is paused with SIGSTOP, and loses its colours and says since when once the
exporter is killed. It loads when opened as ``http://user:pass@host/``; nothing is cut at 360-420 px;
axe-core (from the npm registry) finds no WCAG 2 A/AA violation in any of those states.

``UPDATE_CAPTURES=1`` also saves the screenshots to docs/images/node-page.png (the README's) and
docs/screenshots/node-page-{fresh,stale,gone}-{1400,420}.png, and axe-core's report to
docs/screenshots/axe-report.json (docs/node-page.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.programs import require_file, require_program

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCENARIO = str(FIXTURES / "node-page.yaml")
STEADY_SCENARIO = str(FIXTURES / "top-node.yaml")  # the same node without its fault: nothing changes by itself
SCREENSHOT = REPO_ROOT / "docs" / "images" / "node-page.png"
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
DEADLINE_S = 90.0  # GPU 1 is lost 45 s after the exporter starts; a loaded machine may be slow
# Where scripts/test installs axe-core from the npm registry (outside the repository).
AXE_CORE = Path(os.environ.get("AXE_CORE_JS", Path.home() / ".cache" / "gpu-pod-exporter" / "npm" / "node_modules"
                               / "axe-core" / "axe.min.js"))
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
GREY_VALUE = "rgb(79, 85, 96)"  # node.css: a stale card's values (#4f5560)
GREY_EDGE = "rgb(141, 147, 156)"  # node.css: a card's edge once the exporter is gone (#8d939c)


@pytest.fixture
def browser() -> Iterator[Any]:
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


def _texts(driver: Any, selector: str) -> list[list[str]]:
    """[id, visible text] of every element matching ``selector``, read in one script run: the page
    redraws every 2 s, so element handles from an earlier call may be gone."""
    script = "return Array.from(document.querySelectorAll(arguments[0])).map(e => [e.id, e.innerText]);"
    return driver.execute_script(script, selector)  # type: ignore[no-any-return]


def _cards(driver: Any) -> dict[str, str]:
    return dict((key, text) for key, text in _texts(driver, "section.gpu"))


def _freshness(driver: Any) -> tuple[str, str]:
    """The page's state (body data-freshness: fresh, stale, gone) and its status line, read together."""
    script = "return [document.body.dataset.freshness, document.getElementById('status').innerText];"
    kind, text = driver.execute_script(script)
    return str(kind), str(text)


def _shown_conditions(driver: Any) -> set[tuple[str, str, str, str]]:
    """(card id, condition id, severity word, reason text) of every condition drawn on a GPU card."""
    script = """return Array.from(document.querySelectorAll('section.gpu li.condition')).map(li =>
        [li.closest('section').id, li.dataset.condition, li.querySelector('.severity').innerText.toLowerCase(),
         li.querySelector('.text').innerText]);"""
    return {tuple(item) for item in driver.execute_script(script)}  # type: ignore[misc]


def _json_conditions(view: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {(f"gpu-{gpu['gpu']}", c["id"], c["severity"], c["text"]) for gpu in view["gpus"]
            for c in gpu.get("conditions", [])}


def _set_width(driver: Any, width: int) -> None:
    """The viewport at ``width`` CSS pixels, as a phone or a desktop window shows the page."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
    wait_for(lambda: driver.execute_script("return window.innerWidth") == width, 10, f"a {width} px viewport")


def _nothing_cut(driver: Any) -> list[str]:
    """Elements of the cards that reach past the viewport's right edge or whose text overflows its box."""
    script = """const root = document.documentElement, limit = root.clientWidth + 0.5, bad = [];
      if (root.scrollWidth > root.clientWidth) bad.push('page scrolls sideways');
      for (const e of document.querySelectorAll('header *, main *')) {
        const r = e.getBoundingClientRect();
        if (r.width === 0) continue;
        const clipped = e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflow !== 'hidden';
        if (r.right > limit || (clipped && e.children.length === 0))
          bad.push(e.tagName + '.' + e.className + ' ' + JSON.stringify(e.innerText.slice(0, 40)) + ' ' + r.right);
      }
      return bad;"""
    return driver.execute_script(script)  # type: ignore[no-any-return]


def _axe(driver: Any) -> dict[str, Any]:
    """axe-core's WCAG 2 A/AA run over the page as it is now (violations, and how many rules passed)."""
    if not driver.execute_script("return typeof window.axe === 'object'"):
        driver.execute_script(AXE_CORE.read_text(encoding="utf-8"))
    script = """const done = arguments[arguments.length - 1];
      axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}})
        .then(r => done({version: r.testEngine.version, passes: r.passes.map(p => p.id).sort(),
                         incomplete: r.incomplete.map(i => i.id).sort(),
                         violations: r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                           nodes: v.nodes.map(n => ({target: n.target, summary: n.failureSummary}))}))}))
        .catch(e => done({error: String(e)}));"""
    driver.set_script_timeout(60)
    result: dict[str, Any] = driver.execute_async_script(script, WCAG_AA)
    assert "error" not in result, result
    return result


def _screenshot(driver: Any, name: str, width: int, tmp_path: Path) -> Path:
    """The whole page at ``width`` px (as tall as it is), into tmp_path; with UPDATE_CAPTURES=1 into docs/."""
    _set_width(driver, width)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": max(height, 600), "deviceScaleFactor": 1, "mobile": width < 600})
    shot = tmp_path / f"node-page-{name}-{width}.png"
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("UPDATE_CAPTURES"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOTS / shot.name)
    return shot


def _check_state(driver: Any, name: str, tmp_path: Path, report: dict[str, Any]) -> None:
    """At 1400 and 420 px: a screenshot, nothing cut on the narrow one (and at 360 px), and no axe violation."""
    for width in (1400, 420):
        _screenshot(driver, name, width, tmp_path)
        if width == 420:
            assert _nothing_cut(driver) == [], f"{name} at 420 px"
        result = _axe(driver)
        report[f"{name}-{width}"] = result
        assert result["violations"] == [], f"{name} at {width} px: {json.dumps(result['violations'], indent=1)}"
        assert "color-contrast" in result["passes"], result  # the contrast rule ran and passed
    _set_width(driver, 360)
    assert _nothing_cut(driver) == [], f"{name} at 360 px"
    _set_width(driver, 1400)


def _healthy_card_colours(driver: Any) -> set[tuple[str, str]]:
    """(edge colour, health-words colour) of every card that was healthy with nothing firing."""
    script = """return Array.from(document.querySelectorAll('section.gpu.good')).map(e =>
        [getComputedStyle(e).borderLeftColor, getComputedStyle(e.querySelector('.health')).color]);"""
    return {(str(edge), str(words)) for edge, words in driver.execute_script(script)}


def _severe_console_errors(driver: Any) -> list[Any]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_node_page_shows_pods_and_turns_a_lost_gpu_unhealthy_without_a_reload(browser: Any,
                                                                                    tmp_path: Path) -> None:
    driver = browser
    with running_exporter(["--simulate", SCENARIO, "-c", "500"]) as exporter:
        exporter.wait_healthy()
        driver.get(f"http://127.0.0.1:{exporter.port}/")
        cards = wait_for(lambda: (c := _cards(driver)) and len(c) == 4 and "chat-api-0" in c["gpu-0"]
                         and "forgotten-0" in c["gpu-2"] and c, DEADLINE_S, "four GPU cards with their pods")
        gpu0 = cards["gpu-0"]
        for pod in ("chat-api-0", "embedder-0", "notebook-0"):
            assert pod in gpu0
        assert "H100" in gpu0 and "utilisation" in gpu0
        assert "trainer-0" in cards["gpu-1"] and "healthy" in cards["gpu-1"]
        assert "forgotten-0" in cards["gpu-2"]
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
        # The /health line follows too (the page fetches it with each refresh) and says how old it is.
        health = wait_for(lambda: (t := _texts(driver, "#health")[0][1]) and "1 of 4 GPUs lost" in t and t,
                          DEADLINE_S, "the health line")
        assert "answered" in health and " s ago" in health
        # Every condition the exporter reports is on its card with its reason, and no other.
        wait_for(lambda: _shown_conditions(driver) == _json_conditions(json.loads(exporter.get("/gpus.json").text)),
                 DEADLINE_S, "the conditions of /gpus.json on the cards")
        exporter.assert_running()

        shot = tmp_path / "node-page.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("UPDATE_CAPTURES"):
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, SCREENSHOT)
        assert _severe_console_errors(driver) == []


def test_the_page_says_how_old_its_data_is_turns_stale_when_the_exporter_pauses_and_grey_when_it_is_gone(
        browser: Any, tmp_path: Path) -> None:
    """Fresh, paused (SIGSTOP: connections accepted, never answered), killed: what the page says in each,
    screenshots at 1400 and 420 px, nothing cut at 360-420 px, and axe-core's WCAG 2 AA run clean."""
    require_file(AXE_CORE, "axe-core (npm install --prefix ~/.cache/gpu-pod-exporter/npm axe-core; "
                           "./scripts/test does it)")
    driver = browser
    report: dict[str, Any] = {}
    # -c 1000: a 3 s stale bound, so a loaded machine's slow sample does not flip the fresh page to stale.
    with running_exporter(["--simulate", STEADY_SCENARIO, "-c", "1000"]) as exporter:
        exporter.wait_healthy()
        driver.get(f"http://127.0.0.1:{exporter.port}/")
        wait_for(lambda: len(_cards(driver)) == 4 and _freshness(driver)[0] == "fresh", DEADLINE_S, "the page fresh")
        _, status = _freshness(driver)
        assert "4 GPU(s) · data " in status and " s old, last sample " in status and "refreshes" not in status
        assert "answered" in _texts(driver, "#health")[0][1]
        _check_state(driver, "fresh", tmp_path, report)

        os.kill(exporter.process.pid, signal.SIGSTOP)
        try:
            _, status = wait_for(lambda: (f := _freshness(driver))[0] == "stale" and f, DEADLINE_S,
                                    "the page stale while the exporter is paused")
            assert status.startswith("stale: data ") and " old, last sample " in status, status
            cards = wait_for(lambda: (c := _cards(driver)) and all("stale: as of" in t for t in c.values()) and c,
                             DEADLINE_S, "every card marked stale")
            assert all("last known: " in text for text in cards.values())
            greyed = driver.execute_script(
                "return Array.from(document.querySelectorAll('main .facts')).map(e => getComputedStyle(e).color)")
            assert set(greyed) == {GREY_VALUE}
            assert _healthy_card_colours(driver) == {(GREY_EDGE, GREY_VALUE)}  # no card stays green
            # The age keeps growing although no request answers.
            first = _texts(driver, "#status")[0][1]
            wait_for(lambda: _texts(driver, "#status")[0][1] != first, DEADLINE_S, "the age to move on")
            _check_state(driver, "stale", tmp_path, report)
        finally:
            os.kill(exporter.process.pid, signal.SIGCONT)
        wait_for(lambda: _freshness(driver)[0] == "fresh", DEADLINE_S, "the page fresh again once the exporter runs")

        exporter.process.kill()
        exporter.process.wait()
        _, status = wait_for(lambda: (f := _freshness(driver))[0] == "gone" and f, DEADLINE_S,
                                "the page saying the exporter is gone")
        assert status.startswith("exporter unreachable since ") and "last sample" in status, status
        cards = wait_for(lambda: (c := _cards(driver)) and all("exporter unreachable since" in t for t in c.values())
                         and c, DEADLINE_S, "every card saying since when the exporter is gone")
        edges = driver.execute_script(
            "return Array.from(document.querySelectorAll('section.gpu')).map(e => getComputedStyle(e).borderLeftColor)")
        assert set(edges) == {GREY_EDGE}  # no green, amber or red left
        _check_state(driver, "gone", tmp_path, report)
    if os.environ.get("UPDATE_CAPTURES"):
        (SCREENSHOTS / "axe-report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n",
                                                     encoding="utf-8")


def test_the_page_loads_when_opened_with_credentials_in_its_url(browser: Any, tmp_path: Path) -> None:
    """``http://user:pass@host/``: fetch refuses a URL with credentials, so the page's requests carry none
    and the browser sends the Authorization header it already has for this origin."""
    password = "s3cret-pass"
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  viewer: {digest}\n", encoding="utf-8")
    driver = browser
    with running_exporter(["--simulate", STEADY_SCENARIO, "-c", "500", "--web-config-file", str(web_config)]) \
            as exporter:
        exporter.wait_listening()
        assert exporter.get("/gpus.json").status == 401
        driver.get(f"http://viewer:{password}@127.0.0.1:{exporter.port}/")
        wait_for(lambda: len(_cards(driver)) == 4 and _freshness(driver)[0] == "fresh", DEADLINE_S,
                 "the page loaded with its data")
        assert "OK" in _texts(driver, "#health")[0][1]
        assert _severe_console_errors(driver) == []


def test_a_hung_sampler_turns_the_page_stale_with_the_health_reason_on_top(browser: Any) -> None:
    """The ``hang`` scenario: an NVML call on GPU 5 blocks, the exporter keeps serving its last data.
    The page must not show that data as live: it turns stale once the data is older than
    ``stale_after_s``, the /health 503 reason stands in a red alert at the top, and the node's own
    conditions (the sampler stalled, the data stale) are listed with their reasons."""
    driver = browser
    with running_exporter(["--simulate", "hang", "-c", "500"]) as exporter:
        exporter.wait_listening()
        driver.get(f"http://127.0.0.1:{exporter.port}/")
        _, status = wait_for(lambda: (f := _freshness(driver))[0] == "stale" and "/health is failing" in f[1] and f,
                             DEADLINE_S, "the page stale because the sampler hangs")
        assert status.startswith("stale: data ") and "older than" in status, status
        alarm = wait_for(lambda: (a := _texts(driver, "#alarm")[0][1]) and "GPU 5" in a and a, DEADLINE_S,
                         "the /health alarm naming the hung call")
        assert alarm.startswith("/health is failing: last complete sample is "), alarm
        colours = driver.execute_script("const s = getComputedStyle(document.getElementById('alarm'));"
                                        "return [s.color, s.backgroundColor];")
        assert colours == ["rgb(255, 255, 255)", "rgb(179, 32, 42)"]  # white on red, not grey header text
        view = json.loads(exporter.get("/gpus.json").text)
        assert view["conditions"], view["conditions"]  # the exporter reports the stall as a node condition
        script = """return Array.from(document.querySelectorAll('#node-conditions li.condition')).map(li =>
            [li.dataset.condition, li.querySelector('.text').innerText]);"""
        wanted = {condition["id"] for condition in view["conditions"]}
        shown = wait_for(lambda: (c := dict(driver.execute_script(script))) and set(c) == wanted and c, DEADLINE_S,
                         "the node's conditions on the page")
        assert all(text for text in shown.values())  # each with its reason
        assert all("last known: " in text for text in _cards(driver).values())
        # Data 40 s old claims no health: the hung node's cards are not green (edge and words grey).
        assert _healthy_card_colours(driver) == {(GREY_EDGE, GREY_VALUE)}
        # /health's 503 is the browser's own network log entry; nothing else may be logged as an error.
        assert [entry for entry in _severe_console_errors(driver)
                if not (entry["source"] == "network" and "/health" in entry["message"] and "503" in entry["message"])] \
            == []
