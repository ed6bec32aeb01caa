"""`python -m trimtab.serve ...`: the `trimtab` command under the serve room's name, for service units and tests
that start the server by module. `python -m trimtab.serve serve --gpus 4` is `trimtab serve --gpus 4`."""

from trimtab.cli import app

app()
