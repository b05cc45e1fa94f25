"""Base class of every config section, in the bottom layer so every package can own its own.

Consumes nothing; produces `Section`, the msgspec Struct each package's config section
derives from (`sandbox.config.SandboxConfig`, `policy.config.LearnerConfig`,
`judging.config.JudgeConfig`, `envs.config.EnvsConfig`, `monitoring.config.MonitorConfig`
and the rest of those modules). `runtime.config` composes them into
`RunConfig`; no package imports `runtime/` for its base class. It loads and validates no
file (`runtime.config` does) and does no I/O.

It lives in `bus/` because that is the layer every package already imports (with
`bus.errors.ConfigError`, the error a bad section raises), and a new top-level package
would have to be added to the project's package list.
"""

from __future__ import annotations

import msgspec


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Base of config sections: unknown keys are errors, values are immutable."""
