"""`python -m trimtab.cli ...`: the `trimtab` command run by module name (tests and benchmarks start it this way
with the interpreter they run under)."""

from trimtab.cli import app

app()
