"""``crawl report``'s page in a real browser: Debian's chromium, headless, driven by selenium
through the system chromedriver (issue 27).

The page of the session's two-cycle crawl (tests/conftest.py ``two_cycles``) is opened from
its file, as an operator opens it, at a desktop and at a phone size (the phone by chromium's
mobile emulation: touch, device pixel ratio, the viewport meta tag honoured). At each:

- every chart image loaded (``naturalWidth > 0``);
- the browser logged no console error;
- the summary table is above the fold, and no table makes the page wider than the window
  (a phone would show the whole page zoomed out);
- the network log (Chrome DevTools ``Network.requestWillBeSent``) holds no request that is
  not the page's own file, a ``data:`` URL or loopback.

Each check has its positive control in the same test: a broken image, a ``console.error``, a
chart below the fold, a 3000 px wide block and a request to a loopback server the test starts
are each seen by the same code. Screenshots go to ``test-artefacts/report-browser/`` (git-ignored); docs/img/
holds one copy (docs/operations-tools.md).

Chromium is installed by .ci/run (apt-get). Where it is missing the test is skipped, except
under CI (``CI=true``, or ``CRAWL_REQUIRE_BROWSER=1`` as .ci/run sets), where a missing browser
is a failure: the test must run there.

Network rule: chromium starts with background networking, component updates and sync off,
with a proxy on a closed loopback port and every host name but localhost resolving to
nothing, so that even a request the page should not make could not leave the machine
(loopback itself bypasses the proxy).
"""

from __future__ import annotations

import http.server
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTEFACTS = REPO / "test-artefacts" / "report-browser"

SIZES = {
    "desktop": {"width": 1280, "height": 900},
    # An iPhone 12-14's CSS viewport; mobile emulation (not a narrow window) so that the page is
    # laid out as a phone lays it out.
    "phone": {"width": 390, "height": 844, "pixelRatio": 3.0, "mobile": True},
}

pytestmark = pytest.mark.web


def require_browser():
    """selenium, chromium and chromedriver, or a skip; under CI a failure (.ci/run installs them)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[browser]')")
    if not missing:
        return
    why = f"no browser: {', '.join(missing)} missing (apt-get install chromium chromium-driver)"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("CRAWL_REQUIRE_BROWSER") == "1":
        pytest.fail(why + "; .ci/run installs them, and under CI this test must run")
    pytest.skip(why)


def is_local(url: str) -> bool:
    """A request an offline page may make: its own file, inline data, or loopback."""
    parts = urlsplit(url)
    if parts.scheme in ("file", "data", "about", "blob"):
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it would be resolved, and it is not ours


def test_a_missing_browser_skips_but_fails_under_ci(monkeypatch, tmp_path):
    monkeypatch.setitem(globals(), "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("CRAWL_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium"):
        require_browser()
    for name, value in (("CI", "true"), ("CRAWL_REQUIRE_BROWSER", "1")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            with pytest.raises(pytest.fail.Exception, match="must run"):
                require_browser()


def test_is_local_tells_loopback_from_elsewhere():
    assert is_local("file:///tmp/r/index.html") and is_local("data:image/png;base64,AAAA")
    assert is_local("http://127.0.0.1:8000/x.png") and is_local("http://[::1]/") and is_local("http://localhost/")
    for url in ("https://cdn.jsdelivr.net/x.js", "http://192.0.2.1/x.png", "https://127.example/x",
                "//fonts.googleapis.com/css"):
        assert not is_local(url), url


@pytest.fixture(scope="module")
def page(two_cycles):
    """The report of the two-cycle crawl, written by the real command, as a file:// URL."""
    require_browser()
    pytest.importorskip("matplotlib", reason="the report extra is not installed (pip install -e '.[report]')")
    out = two_cycles["tmp"] / "report-browser"
    done = subprocess.run([sys.executable, "-m", "cycles", "--data", str(two_cycles["store"].root), "report",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return (out / "index.html").as_uri()


def closed_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


def browser(size: str, profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--disable-default-apps", f"--user-data-dir={profile}",
                 f"--proxy-server=http://127.0.0.1:{closed_loopback_port()}",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    metrics = SIZES[size]
    if metrics.get("mobile"):
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": {
            "width": metrics["width"], "height": metrics["height"], "pixelRatio": metrics["pixelRatio"],
            "mobile": True, "touch": True}})
    else:
        options.add_argument(f"--window-size={metrics['width']},{metrics['height']}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # The system chromedriver, named: selenium-manager would otherwise look for one online.
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


IMAGES_JS = """return Array.from(document.images).map(i => ({id: i.id, complete: i.complete, width: i.naturalWidth}));"""
BOX_JS = """const r = document.getElementById(arguments[0]).getBoundingClientRect();
return {top: r.top, bottom: r.bottom, right: r.right, inner_h: window.innerHeight, inner_w: window.innerWidth};"""

WIDTH_JS = "return document.documentElement.scrollWidth;"


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def requested(driver, page: str | None = None) -> list[str]:
    """URLs of the requests in the performance log (and drops them from it); with ``page``,
    only those made for that document: the tab starts on the browser's own new-tab page,
    whose chrome:// resources are logged late, and none of the report's doing."""
    sent = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            sent.append((message["params"].get("documentURL"), message["params"]["request"]["url"]))
    return [url for document, url in sent if page is None or document == page]


class _Probe(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.seen.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def probe():
    """A loopback HTTP server for the network log's positive control."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Probe.seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("size", list(SIZES))
def test_the_report_in_chromium(page, probe, size, tmp_path):
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    driver = browser(size, tmp_path / "profile")
    try:
        console_errors(driver)  # whatever the browser's own start page logged
        driver.get(page)
        driver.execute_script("return document.fonts.ready.then(() => true);")
        shot = ARTEFACTS / f"report-{size}.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 0

        # Every chart loaded, and there are the report's eight.
        images = driver.execute_script(IMAGES_JS)
        assert len(images) == 8
        broken = [i["id"] for i in images if not (i["complete"] and i["width"] > 0)]
        assert broken == []

        # No console error.
        assert console_errors(driver) == []

        # The summary table above the fold, within the window's width; and no table widens the
        # page (a phone would show the whole page zoomed out: the cycles table has 12 columns).
        width = SIZES[size]["width"]
        box = driver.execute_script(BOX_JS, "summary")
        # On a phone the summary (now with TLS, DNS and idle-with-work rows) is longer than a
        # screen: it starts above the fold there, and fits whole at desktop size.
        assert 0 <= box["top"] < box["inner_h"] / 2, box
        if size == "desktop":
            assert box["bottom"] <= box["inner_h"], box
        assert box["right"] <= box["inner_w"] <= width, box
        assert driver.execute_script(WIDTH_JS) <= width

        # Nothing requested but the file itself and its data: URLs.
        urls = requested(driver, page)
        assert page in urls
        assert [u for u in urls if not is_local(u)] == []

        # Positive controls, after the page's own checks: each check sees what it looks for.
        last = driver.execute_script(BOX_JS, "chart-buckets")
        assert last["top"] > last["inner_h"], last  # a chart far down the page is below the fold
        base, seen = probe
        driver.execute_script("""
            const bad = document.createElement('img'); bad.id = 'broken'; bad.src = 'data:image/png;base64,AAAA';
            document.body.appendChild(bad);
            const far = document.createElement('img'); far.id = 'probe'; far.src = arguments[0];
            document.body.appendChild(far);
            console.error('positive control');""", f"{base}/probe-{size}.png")
        driver.execute_script("return new Promise(r => setTimeout(r, 500));")
        driver.execute_script("const w = document.createElement('div'); w.style.width = '3000px'; "
                              "w.textContent = 'wide'; document.body.appendChild(w);")
        assert driver.execute_script(WIDTH_JS) > width
        again = {i["id"]: i for i in driver.execute_script(IMAGES_JS)}
        assert again["broken"]["width"] == 0
        assert any("positive control" in m for m in console_errors(driver))
        assert f"{base}/probe-{size}.png" in requested(driver, page) and f"/probe-{size}.png" in seen
    finally:
        driver.quit()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
