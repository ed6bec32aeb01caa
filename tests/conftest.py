"""Shared test helpers are imported by module name: tests/builders.py, and the serve room's serve_helpers.py and
Ray cluster fixture (tests/serve/), which tests of other rooms use too. The `admin` fixture is the admin's client of
the `server` fixture of the module that asks for it."""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "serve")]


@pytest.fixture(scope="module")
def admin(server: Any) -> Iterator[httpx.Client]:
    """The admin's client of the module's `server` (a serve_helpers.Server, module-scoped in that module)."""
    with server.client() as client:
        yield client
