"""The browser checks' tool rule (tests/browser.py): without Debian's chromium a browser test is
skipped with its reason, and with REQUIRE_BROWSER=1 (CI) it fails instead — never silently."""

from __future__ import annotations

import pytest

from tests import browser


@pytest.fixture
def no_chromium(monkeypatch):
    monkeypatch.setattr(browser, "chromium_executables", lambda: None)


def test_without_chromium_the_check_is_skipped_with_its_reason(no_chromium, monkeypatch):
    monkeypatch.delenv("REQUIRE_BROWSER", raising=False)

    with pytest.raises(pytest.skip.Exception) as skipped:
        browser.require_chromium()

    assert str(skipped.value).startswith("Browser check NOT RUN: Debian's chromium")


def test_with_require_browser_a_missing_chromium_fails(no_chromium, monkeypatch):
    monkeypatch.setenv("REQUIRE_BROWSER", "1")

    with pytest.raises(pytest.fail.Exception) as failed:
        browser.require_chromium()

    assert "apt-get install chromium chromium-driver" in str(failed.value)


def test_with_require_browser_a_missing_screenshot_font_fails(monkeypatch):
    monkeypatch.setenv("REQUIRE_BROWSER", "1")
    # A character no font has (a private-use code point).
    monkeypatch.setattr(browser, "SCREENSHOT_CHARACTERS", {"Chinese": "4e2d", "emoji": "10fffd"})

    with pytest.raises(pytest.fail.Exception) as failed:
        browser.require_screenshot_fonts()

    assert str(failed.value).startswith("Screenshot fonts NOT INSTALLED (emoji)")
