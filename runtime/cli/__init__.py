"""`whet`, the command line: one module per verb, the shared options, and the rendering.

`app` (from `runtime.cli.main`) is the `whet` entry point (`pyproject.toml`); the verbs
import `runtime.cli.options`, never the app. Who reads what: `runtime.stack` runs a stack,
`runtime.broker` makes its server's users and certificates; the verbs only call them.
"""

from runtime.cli.main import app

__all__ = ["app"]
