"""The UI in a real browser: the OS's headless Chromium driven by Playwright's Python package.

The server is the real command line over a real run (job, export, predict into the embedded
PostgreSQL, a quality folder), the session's `ui_server` that tests/ui/test_http.py also uses; the
browser loads the overview, opens the gallery and an image page, uploads a photo and sees its
neighbours, and opens the quality page. Screenshots go to the test's temporary folder. Chromium comes
from the OS (`apt-get install chromium`: scripts/test.sh installs it when missing); Playwright's own
browser download is not used.
"""

import shutil
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def ui(ui_server, ui_inputs):
    """(base URL, the run's folders): the session's UI (tests/conftest.py), every part lit; its log is checked
    for tracebacks when the session ends."""
    return ui_server[0], ui_inputs


@pytest.fixture(scope="module")
def browser():
    """Headless system Chromium through Playwright."""
    assert CHROMIUM, "no chromium on PATH: apt-get install chromium (scripts/ensure_chromium.sh)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, tmp_path):
    """A fresh page that fails the test on any failed request, script error or console error (a
    Content-Security-Policy violation is one: the UI must work under its own policy)."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    # A 4xx answer is logged as "Failed to load resource" (the tests ask for some); anything else logged as an
    # error, such as "Refused to apply inline style because it violates ... Content Security Policy", fails.
    page.on("console", lambda message: message.type == "error" and not message.text.startswith(
        "Failed to load resource") and problems.append(f"console: {message.text}"))
    # An image still loading when the page navigates away is aborted by the browser: not a failure.
    page.on("requestfailed", lambda request: "ERR_ABORTED" in (request.failure or "") or problems.append(
        f"request failed: {request.url} ({request.failure})"))
    page.on("response", lambda response: response.status >= 500 and problems.append(
        f"{response.status} from {response.url}"))
    yield page
    context.close()
    assert not problems, problems


def loaded_images(page):
    """How many <img> on the page have loaded with a real size (not a broken image), once all have settled."""
    # Polled from here: wait_for_function polls by eval() in the page, which the UI's policy (script-src 'self')
    # refuses whenever the images have not all settled at its first look (a CI run failed so).
    deadline = time.monotonic() + 30
    while not page.evaluate("Array.from(document.images).every(i => i.complete)"):
        assert time.monotonic() < deadline, "the page's images did not settle within 30 s"
        page.wait_for_timeout(50)
    return page.evaluate("Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length")


def test_overview_gallery_and_an_image_page(ui, page, tmp_path):
    base, run = ui
    page.goto(base + "/")
    assert page.locator("h1").inner_text().startswith("Run ")
    assert page.locator("#summary").inner_text().count("18") >= 1  # 18 written (16 photos and two copies)
    assert page.locator("svg.chart rect").count() == 4  # One bar per label.
    assert "not_an_image" in page.locator("#reasons").inner_text()
    # The stylesheet (/static/ui.css, the policy allows no inline style) applies: the navigation bar's colour.
    assert page.evaluate("getComputedStyle(document.querySelector('nav')).backgroundColor") == "rgb(36, 54, 79)"
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)

    page.click("nav >> text=Gallery")
    page.wait_for_selector("#gallery .tile")
    assert page.locator("#gallery .tile").count() == 18
    page.select_option("select[name=label]", "cat")
    page.click("text=Filter")
    page.wait_for_url("**/gallery?**label=cat**")
    assert page.locator("#gallery .tile").count() == 5  # 4 cats and the duplicate.
    assert loaded_images(page) == 5
    page.screenshot(path=str(tmp_path / "gallery.png"), full_page=True)

    page.locator("#gallery .tile a").first.click()
    page.wait_for_selector("#details")
    details = page.locator("#details").inner_text()
    assert "cat" in details and "stored size" in details
    assert page.locator("#top_k tr").count() == 1 + 2  # The header and the export's 2 classes.
    assert page.locator(".neighbours .tile").count() == 8
    assert loaded_images(page) >= 9
    page.screenshot(path=str(tmp_path / "image_page.png"), full_page=True)
    assert (tmp_path / "image_page.png").stat().st_size > 1000


def test_upload_a_photo_and_see_its_neighbours(ui, page, tmp_path):
    base, run = ui
    page.goto(base + "/search")
    page.set_input_files("#upload input[type=file]", run["photos"][6])
    page.click("text=Find similar images")
    page.wait_for_selector("#results")
    tiles = page.locator(".neighbours .tile")
    assert tiles.count() == 8
    assert float(tiles.first.locator(".muted").inner_text()) < 1e-4  # The photo itself comes first.
    assert loaded_images(page) == 8
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)

    page.set_input_files("#upload input[type=file]", files=[{"name": "notes.txt", "mimeType": "text/plain",
                                                              "buffer": b"no picture here"}])
    page.click("text=Find similar images")
    assert page.locator("#message").inner_text().startswith("not_an_image")


def test_quality_page_shows_the_leak_and_the_label_conflict(ui, page, tmp_path):
    base, run = ui
    page.goto(base + "/")
    page.click("nav >> text=Quality")
    page.wait_for_selector("#leaks")
    found = run["quality_keys"]  # What the quality job wrote, read from its Parquet.
    assert page.locator("#leaks").inner_text() == f"Leaks across splits ({found['leaks']})"
    assert page.locator("#conflicts").inner_text() == f"Label conflicts ({found['conflicts']})"
    assert page.locator("#flagged").inner_text() == f"Flagged images ({len(found['flagged'])})"
    text = page.locator("main").inner_text()
    assert all(name in text for name in found["flag_names"]) and "['" not in text
    # Every tile: leaks, conflicts, then every group again, then the flagged images.
    assert loaded_images(page) == (found["leak_images"] + found["conflict_images"] + found["group_images"]
                                   + len(found["flagged"]))
    page.screenshot(path=str(tmp_path / "quality.png"), full_page=True)
    leak = run["quality_keys"]["leak"][0]
    page.goto(f"{base}/item/{leak}")
    assert "leak across splits" in page.locator("h2", has_text="Duplicate group").inner_text()
