"""Headless Chromium for the browser tests: Debian's `chromium` driven by playwright (no browser download), every
console error and page error collected, screenshots kept in the test's folder and also in $TRIMTAB_SCREENSHOTS
when that is set. Skips the test, saying why, when Chromium or playwright is missing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@dataclass
class Browsing:
    """One page in a fresh browser: `errors` (console errors and uncaught exceptions, in order), `requested`
    (every URL the page asked for)."""

    page: Any
    shots_dir: Path
    errors: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    def screenshot(self, name: str, full_page: bool = True) -> Path:
        """`name`.png in the test's folder, copied into $TRIMTAB_SCREENSHOTS when set."""
        path = self.shots_dir / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        extra = os.environ.get("TRIMTAB_SCREENSHOTS")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(extra) / path.name)
        return path


@contextmanager
def browsing(shots_dir: Path, width: int = 1280, height: int = 900) -> Iterator[Browsing]:
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            seen = Browsing(page, shots_dir)
            page.on("console", lambda msg: seen.errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
            page.on("request", lambda req: seen.requested.append(req.url))
            yield seen
        finally:
            browser.close()
