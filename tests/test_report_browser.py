"""The report of a real tiny campaign, opened in headless Chromium with the network blocked.

Static checks of the HTML cannot tell whether the inlined Vega bundle really draws every chart,
whether a script throws, or whether something in the page still reaches for the network. So this
opens the file the way a reader does (Debian's chromium + chromium-driver, no browser download)
and checks what the browser saw. The charts are found through the HTML only (``.vega-target``
containers and the ``#mpiatlas-specs`` JSON), not through the Python that wrote it.

A full-page screenshot goes to results/ci-artifacts/report.png, taken before any assertion so that
CI keeps it precisely when something fails.
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from campaign_fixtures import Campaign
from conftest import REPO, require_infra

pytestmark = pytest.mark.infra

SCREENSHOT = REPO / "results" / "ci-artifacts" / "report.png"
CHART_CONTAINER = ".vega-target"
CHART_TIMEOUT_S = 30.0

# The network is blocked at launch, not just watched: every proxied request goes to a closed port
# (loopback included, "<-loopback>" removes Chromium's implicit bypass) and no host name resolves.
# The rest keeps Chromium's own background traffic (updates, sync, ...) out of the log.
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--window-size=1400,1000",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
)

# Per container: open (true) once it holds a drawn svg/canvas of non-zero size; an error text when
# the report's own script gave up on it; null while Vega is still working.
CHART_STATE_JS = """
const el = arguments[0];
if (el.classList.contains("chart-error")) return {done: true, error: el.textContent.trim()};
for (const g of el.querySelectorAll("svg, canvas")) {
  const r = g.getBoundingClientRect();
  const drawn = g.tagName.toLowerCase() === "canvas" || g.querySelector("path, rect, line, text") !== null;
  if (r.width > 0 && r.height > 0 && drawn)
    return {done: true, error: null, tag: g.tagName.toLowerCase(), width: r.width, height: r.height};
}
return null;
"""


@dataclass
class ChartState:
    id: str
    tag: str | None = None
    width: float = 0.0
    height: float = 0.0
    error: str | None = None

    @property
    def rendered(self) -> bool:
        return self.error is None and self.tag is not None and self.width > 0 and self.height > 0


@dataclass
class BrowserView:
    """What Chromium saw of the report."""

    page_url: str
    container_ids: list[str]
    spec_ids: list[str]
    charts: list[ChartState]
    console_errors: list[str]
    requests: list[str]
    failed_requests: list[str]
    findings_present: bool
    page_size: tuple[int, int]  # CSS pixels of the whole document
    viewport_height: int


def chromium_driver() -> WebDriver:
    """Selenium on Debian's chromium + chromedriver, given explicitly so Selenium Manager never
    runs (it would try to download a browser)."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)


def network_events(driver: WebDriver) -> list[dict[str, Any]]:
    """The CDP Network.* events of the page so far, from Chrome's performance log."""
    events = (json.loads(entry["message"])["message"] for entry in driver.get_log("performance"))
    return [e for e in events if e["method"].startswith("Network.")]


def requested_urls(events: list[dict[str, Any]]) -> list[str]:
    """Every URL the page asked for: ordinary requests and WebSockets alike."""
    urls = []
    for e in events:
        if e["method"] == "Network.requestWillBeSent":
            urls.append(e["params"]["request"]["url"])
        elif e["method"] == "Network.webSocketCreated":
            urls.append(e["params"]["url"])
    return urls


def failed_request_errors(events: list[dict[str, Any]]) -> list[str]:
    return [e["params"].get("errorText", "") for e in events if e["method"] == "Network.loadingFailed"]


def severe_console_messages(driver: WebDriver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def open_all_details(driver: WebDriver) -> None:
    """Charts inside a closed <details> have no size; a reader opens them, so does the test."""
    driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = true; });")


def wait_for_chart(driver: WebDriver, container: WebElement) -> ChartState:
    """Scroll the container into view (a chart may draw lazily) and wait for Vega to finish it."""
    chart_id = container.get_attribute("id") or "(no id)"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", container)
    try:
        state = WebDriverWait(driver, CHART_TIMEOUT_S, poll_frequency=0.2).until(
            lambda d: d.execute_script(CHART_STATE_JS, container))
    except TimeoutException:
        return ChartState(chart_id, error=f"nothing drawn within {CHART_TIMEOUT_S:.0f} s")
    return ChartState(chart_id, tag=state.get("tag"), width=state.get("width", 0.0),
                      height=state.get("height", 0.0), error=state["error"])


def drain_logs(driver: WebDriver) -> None:
    """Chrome hands out log entries once: reading them now leaves only what comes next."""
    driver.get_log("performance")
    driver.get_log("browser")


def save_full_page_screenshot(driver: WebDriver, path: Path) -> tuple[int, int]:
    """The whole page, not just the viewport (CDP captureBeyondViewport); returns its CSS size."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return round(size["width"]), round(size["height"])


def view_report(driver: WebDriver, report: Path) -> BrowserView:
    page_url = report.resolve().as_uri()
    drain_logs(driver)  # whatever an earlier page left there is not this report's
    driver.get(page_url)  # returns after the load event: the inlined scripts have run
    open_all_details(driver)
    containers = driver.find_elements(By.CSS_SELECTOR, CHART_CONTAINER)
    charts = [wait_for_chart(driver, c) for c in containers]
    driver.execute_script("window.scrollTo(0, 0);")
    page_size = save_full_page_screenshot(driver, SCREENSHOT)
    specs = driver.execute_script(
        "const s = document.getElementById('mpiatlas-specs'); return s ? Object.keys(JSON.parse(s.textContent)) : [];")
    events = network_events(driver)
    return BrowserView(
        page_url=page_url,
        container_ids=[c.id for c in charts],
        spec_ids=list(specs),
        charts=charts,
        console_errors=severe_console_messages(driver),
        requests=requested_urls(events),
        failed_requests=failed_request_errors(events),
        findings_present=bool(driver.execute_script("return document.getElementById('findings') !== null;")),
        page_size=page_size,
        viewport_height=int(driver.execute_script("return window.innerHeight;")),
    )


def require_chromium() -> None:
    require_infra(shutil.which("chromium") is not None, "Debian chromium")
    require_infra(shutil.which("chromedriver") is not None, "Debian chromium-driver")


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    require_chromium()
    drv = chromium_driver()
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def report_view(driver: WebDriver, tiny_campaign: Campaign) -> BrowserView:
    return view_report(driver, tiny_campaign.report)


def test_every_chart_renders(report_view: BrowserView) -> None:
    assert report_view.container_ids, "no chart container (.vega-target) in the report"
    rendered = [c for c in report_view.charts if c.rendered]
    broken = {c.id: c.error or f"{c.tag} {c.width}x{c.height}" for c in report_view.charts if not c.rendered}
    assert not broken, f"{len(broken)} of {len(report_view.charts)} charts not drawn: {broken}"
    assert len(rendered) == len(report_view.container_ids) > 0
    # Every embedded spec has its container, and no container waits for a spec that is not there.
    assert sorted(report_view.spec_ids) == sorted(report_view.container_ids)


def test_no_console_errors(report_view: BrowserView) -> None:
    assert report_view.console_errors == []


def test_no_network_requests_besides_the_page_itself(report_view: BrowserView) -> None:
    assert report_view.requests == [report_view.page_url], report_view.failed_requests


def test_findings_section_is_present(report_view: BrowserView) -> None:
    assert report_view.findings_present, 'no element with id="findings" in the report'


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk (no imaging library needed for two numbers)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_screenshot_shows_the_whole_page(report_view: BrowserView) -> None:
    width, height = png_size(SCREENSHOT)
    page_width, page_height = report_view.page_size
    assert abs(width - page_width) <= 1 and abs(height - page_height) <= 1, (width, height, report_view.page_size)
    assert height > report_view.viewport_height  # more than the window: the full page was captured


HISTORY_SCREENSHOT = REPO / "results" / "ci-artifacts" / "history.png"


@pytest.fixture(scope="module")
def history_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report whose History section judges a week of ORFEO osu_scatter runs, its large sizes made
    1.3x slower, against two earlier weeks (tests/test_history.py)."""
    from test_history import history_report, make_weeks

    root = tmp_path_factory.mktemp("history-report")
    return history_report(root, make_weeks(root / "weeks"))


def test_the_history_section_draws_its_trend_charts_and_alarms(driver: WebDriver, history_page: Path) -> None:
    page_url = history_page.resolve().as_uri()
    drain_logs(driver)
    driver.get(page_url)
    open_all_details(driver)
    section = driver.find_element(By.ID, "history")
    charts = [wait_for_chart(driver, c) for c in section.find_elements(By.CSS_SELECTOR, CHART_CONTAINER)]
    driver.execute_script("arguments[0].scrollIntoView();", section)
    HISTORY_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    section.screenshot(str(HISTORY_SCREENSHOT))
    broken = {c.id: c.error or f"{c.tag} {c.width}x{c.height}" for c in charts if not c.rendered}
    assert len(charts) == 12 and not broken, broken
    rows = section.find_elements(By.CSS_SELECTOR, "table tbody tr")
    assert len(rows) >= 20 and "Scatter np=" in rows[0].text and "MiB" in rows[0].text
    assert "series worse than their history" in section.text
    assert severe_console_messages(driver) == []
    assert requested_urls(network_events(driver)) == [page_url]


def test_the_request_watch_sees_a_blocked_request(driver: WebDriver, tmp_path: Path) -> None:
    """The control for the checks above: a page that does reach out, to the internet or to
    loopback, is caught in both logs, and the launch flags (not luck) make its requests fail."""
    outside = ["http://example.com/pixel.png", "http://127.0.0.1:8000/pixel.png"]
    page = tmp_path / "reaches-out.html"
    page.write_text("<!DOCTYPE html><title>t</title>" + "".join(f'<img src="{u}">' for u in outside))
    drain_logs(driver)  # drop what the report left in the logs
    driver.get(page.as_uri())
    events = network_events(driver)
    assert sorted(requested_urls(events)) == sorted([page.as_uri(), *outside])
    assert failed_request_errors(events) == ["net::ERR_PROXY_CONNECTION_FAILED"] * len(outside)
    errors = severe_console_messages(driver)
    assert all(any(u in m for m in errors) for u in outside), errors
