"""`python -m runtime.cli`: the `whet` command line, run from the checkout."""

from runtime.cli.main import app

app()
