"""The serve tests' shared helpers (serve_helpers.py) live beside them: their folder is on the import path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
