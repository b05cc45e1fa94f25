"""Sandbox configuration (the `[executor.sandbox]` table).

Consumes nothing; declares which backend runs jobs and how. Validated with the run config.
"""

from __future__ import annotations

from typing import Literal

from runtime.section import Section


class SandboxConfig(Section):
    backend: Literal["subprocess", "local", "docker"] = "subprocess"
    "Which backend runs jobs. 'subprocess' isolates nothing: a baseline, never for model output."
    workdir_root: str = ""
    "Where job directories are made; empty uses the system temp dir."
