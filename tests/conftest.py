"""Shared test helpers are imported by module name: tests/builders.py, and the serve room's serve_helpers.py and
Ray cluster fixture (tests/serve/), which tests of other rooms use too."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "serve")]
