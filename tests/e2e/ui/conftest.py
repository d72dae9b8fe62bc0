"""Fixtures of the browser tests: one headless Chromium per module, a page per test,
and screenshots saved under the test's tmp dir (artifacts, never compared as pixels)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uikit import Project, need_chromium


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module's browser tests run on one xdist worker (`--dist loadgroup` in
    scripts/test hands out every other test one at a time), so each module starts
    one Chromium, not one per worker that happens to take one of its tests."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(f"browser:{item.path.name}"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = need_chromium()
    with sync_playwright() as pw:
        # Debian's chromium, not a downloaded Playwright build; no sandbox as root.
        chromium = pw.chromium.launch(executable_path=executable,
                                      args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors
    yield page
    context.close()


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where this test's screenshots go (pytest's tmp dir: kept for the last runs)."""
    out = tmp_path / "screenshots"
    out.mkdir()
    return out
