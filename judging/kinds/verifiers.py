"""`verifiers`: a verifiers taskset's task; the whole reply is scored in the sandbox by its rubric.

The verifier's fields for this kind: a task of a verifiers 0.4.0 taskset
(`envs.verifiers_env`); the whole reply is scored in the sandbox by the task's `@vf.reward`
methods (`judging.rubric`). `extra` holds `module`, `task_class`, `data_class`, `data` (the
task data, JSON) and `files` (the module's source files, JSON); there is no reference.
"""

from judging.kinds.base import Kind

KIND = Kind(
    "verifiers", attempt="reply", turns="one", gated_by="rubric", job="rubric",
    compare="rubric", shape="document",
)
