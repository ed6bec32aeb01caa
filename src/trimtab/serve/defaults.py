"""Where `trimtab serve` keeps its data and listens unless told otherwise.

Its own module so that the command line and the HTTP client read them without loading the daemon."""

from pathlib import Path

DEFAULT_DATA_DIR = Path("~/.local/share/trimtab")
DEFAULT_PORT = 8470
