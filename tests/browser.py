"""Pages checked in a real browser: Debian's ``chromium`` driven through its own
``chromedriver`` (selenium), headless and offline.

Root installs both with ``apt-get install chromium chromium-driver`` (``.ci/run`` does when they
are missing). Without them the ``browser`` fixture skips its test with a loud reason in the
summary (``-rs``); with ``REQUIRE_BROWSER=1`` (what ``.ci/run`` sets) it fails the test instead.
Nothing is downloaded: the driver and the binary are the machine's (selenium's driver manager is
never asked).

Screenshots go to ``var/screenshots/`` (``Browser.screenshot``); the run's summary lists them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

# What works headless on these machines; a fresh profile per browser; nothing phones home.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=480,800",
    # The live server's certificate is minted per run by a throwaway authority.
    "--ignore-certificate-errors",
)
WAIT_SECONDS = 20

# Every screenshot saved during this run, for the terminal summary.
SAVED_SCREENSHOTS: list[Path] = []


def _executable(name: str, *fallbacks: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((path for path in fallbacks if os.access(path, os.X_OK)), None)


def chromium_executables() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, or None when either is missing."""
    chromium = _executable("chromium", "/usr/bin/chromium")
    driver = _executable("chromedriver", "/usr/bin/chromedriver")
    return (chromium, driver) if chromium and driver else None


def require_chromium() -> tuple[str, str]:
    """The paths, or skip (fail with REQUIRE_BROWSER=1) with the reason."""
    executables = chromium_executables()
    if executables is None:
        message = (
            "Browser check NOT RUN: Debian's chromium and chromium-driver are not installed "
            "(apt-get install chromium chromium-driver)"
        )
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return executables


# What the screenshots of the Chinese pages need to be legible: a font with Chinese (中) and one
# with the emoji the bot's texts use (📤 U+1F4E4, ✅ U+2705).
SCREENSHOT_CHARACTERS = {"Chinese": "4e2d", "emoji": "1f4e4 2705"}


def missing_screenshot_fonts() -> list[str]:
    """What has no font (fontconfig's ``fc-list``): "Chinese", "emoji"; all of them when
    fontconfig itself is missing."""
    missing = []
    for what, charset in SCREENSHOT_CHARACTERS.items():
        try:
            listed = subprocess.run(
                ["fc-list", f":charset={charset}", "family"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout
        except OSError:
            listed = ""
        if not listed.strip():
            missing.append(what)
    return missing


def require_screenshot_fonts() -> None:
    """Skip (fail with REQUIRE_BROWSER=1) when a screenshot would show boxes for Chinese or
    emoji."""
    missing = missing_screenshot_fonts()
    if missing:
        message = (
            f"Screenshot fonts NOT INSTALLED ({', '.join(missing)}): "
            "apt-get install fonts-wqy-microhei fonts-noto-color-emoji"
        )
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)


class Browser:
    """One headless Chromium with a fresh profile (selenium WebDriver underneath: ``driver``)."""

    def __init__(self, chromium: str, chromedriver: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self._profile = tempfile.mkdtemp(prefix="cpr-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(
            service=Service(executable_path=chromedriver), options=options
        )
        self.driver.set_page_load_timeout(WAIT_SECONDS)
        self._console: list[dict] = []

    def open(self, url: str) -> None:
        self.driver.get(url)

    def script(self, source: str, *arguments: object) -> object:
        return self.driver.execute_script(source, *arguments)

    def wait_until(
        self, condition: Callable[[], object], *, timeout: float = WAIT_SECONDS, what: str = ""
    ) -> object:
        """Poll ``condition`` until it returns something truthy; that value. Fails the test
        (with the page's text and console) when it never does."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                body = self.script("return document.body ? document.body.innerText : ''")
                pytest.fail(
                    f"browser: timed out waiting for {what or condition}; page text: {body!r}; "
                    f"console: {self.console()}"
                )
            time.sleep(0.05)

    def console(self) -> list[dict]:
        """The browser's console and security messages so far (CSP violations included)."""
        self._console.extend(self.driver.get_log("browser"))
        return list(self._console)

    def screenshot(self, name: str) -> Path:
        """Save the viewport as ``var/screenshots/<name>.png``; its path."""
        directory = Path(settings.VAR_DIR) / "screenshots"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.png"
        if not self.driver.save_screenshot(str(path)):
            pytest.fail(f"browser: screenshot {path} was not written")
        SAVED_SCREENSHOTS.append(path)
        print(f"screenshot saved: {path}")
        return path

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)
