"""Base class of every config section, importable from anywhere without cycles.

Actor modules declare their own section (`class ExecutorConfig(Section)`) next to their
code; `runtime.config` composes them into `RunConfig`. Unknown keys are errors and values
are immutable.
"""

from __future__ import annotations

import msgspec


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Base of config sections: unknown keys are errors, values are immutable."""
