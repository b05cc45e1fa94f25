"""The `whet` command line: one Typer app with every verb registered on it.

Each verb is a module of its own in `runtime/cli/` with a `register(app)` function; this
module imports them all at the top and registers them in the order `whet --help` lists
them. It defines no command itself. The package (`runtime.cli`) exposes `app` for the
`whet` entry point; `python -m runtime.cli` runs it (`__main__.py`).
"""

from __future__ import annotations

import typer

from runtime.cli import (auth, compose, demos, down, judge, redteam, review, scale, sft, status,
                         tail, tasks, trace, up)
from runtime.cli import eval as eval_verb
from runtime.cli import exec as exec_verb
from runtime.cli import export_model

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="whetstone: RL post-training on verifiable tasks, as actors on NATS.")

for _verb in (up, down, scale, status, tail, auth, trace, exec_verb, judge, redteam, tasks, compose,
              review, export_model, eval_verb, sft, demos):
    _verb.register(app)
