"""Debian's chromium, headless and offline, driven by selenium: what a page looks like to a reader with no network.

Offline three ways: DevTools' network emulation set to offline before the page loads, every host name resolving
to nothing, and a proxy that does not exist; the performance log then shows whatever the page tried to fetch.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH = 1100


def chromium_or_skip() -> None:
    """Skip (fail under CI) unless Debian's chromium and its driver are installed."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    message = "needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver"
    if os.environ.get("CI"):
        pytest.fail(f"CI must not skip integration tests: {message}")
    pytest.skip(message)


@dataclass
class Page:
    """A page opened offline, and what the browser said while opening it."""

    driver: webdriver.Chrome

    def script(self, code: str, *args: Any) -> Any:
        return self.driver.execute_script(code, *args)

    def console(self) -> list[dict[str, Any]]:
        """Console messages at SEVERE or WARNING (a failed load, a CSP violation, a script error)."""
        return [
            e
            for e in self.driver.get_log("browser")  # type: ignore[no-untyped-call]  # selenium leaves it untyped
            if e.get("level") in ("SEVERE", "WARNING")
        ]

    def requests(self) -> list[str]:
        """Every URL the page asked for, from the DevTools performance log."""
        urls = []
        for entry in self.driver.get_log("performance"):  # type: ignore[no-untyped-call]
            message = orjson.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def screenshot(self, path: Path, colours: int = 128) -> int:
        """The whole page as a PNG of at most ``colours`` colours (small enough for the docs); its size in bytes."""
        from PIL import Image

        height = int(self.script("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(WIDTH, height + 120)
        image = Image.open(io.BytesIO(self.driver.get_screenshot_as_png())).convert("RGB")
        image.quantize(colors=colours).save(path, format="PNG", optimize=True)
        return path.stat().st_size


@contextmanager
def offline_page(path: Path) -> Iterator[Page]:
    """``path`` (an HTML file) open in headless chromium with networking off."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={WIDTH},900",
        "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    ):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
        driver.get(path.resolve().as_uri())
        yield Page(driver)
    finally:
        driver.quit()


def copy_if_asked(made: Path, variable: str) -> None:
    """Copy ``made`` to the path in the environment variable ``variable``, when it is set (docs screenshots)."""
    target = os.environ.get(variable)
    if target:
        shutil.copyfile(made, target)
