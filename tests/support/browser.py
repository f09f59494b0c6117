"""Headless Chromium for browser tests: Debian's `chromium` driven by Selenium through Debian's
`chromedriver` (package chromium-driver, the same version as the browser).

`chromium_paths()` finds both binaries or returns why not (the one skip reason on a machine
without them; under CI, where `make install` installs them, a missing browser is a failure,
not a skip). `headless_chrome()` starts a browser with both paths given, so Selenium Manager
is never asked to find or download a driver or a browser (SE_OFFLINE makes sure of it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

BROWSERS = ("chromium", "chromium-browser")
DRIVERS = ("chromedriver",)
WINDOW = (1400, 1000)


def chromium_paths() -> tuple[str, str] | str:
    """(browser, driver) paths, or the reason they cannot be used."""
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = next((p for p in map(shutil.which, DRIVERS) if p), None)
    if browser is None or driver is None:
        missing = " and ".join(
            name
            for name, found in (("chromium", browser), ("chromedriver", driver))
            if found is None
        )
        return (
            f"no {missing} on this machine: `make install` as root installs Debian's chromium "
            "and chromium-driver (or: apt-get install chromium chromium-driver)"
        )
    return browser, driver


def headless_chrome(browser: str, driver: str, log_path: Path) -> webdriver.Chrome:
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    service = Service(executable_path=driver, log_output=str(log_path))
    chrome = webdriver.Chrome(service=service, options=options)
    chrome.set_page_load_timeout(60)
    return chrome
