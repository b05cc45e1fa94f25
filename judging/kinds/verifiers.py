"""`verifiers`: a verifiers taskset's task; the whole reply is scored in the sandbox by its rubric."""

from judging.kinds.base import Kind

KIND = Kind(
    "verifiers", attempt="reply", turns="one", gated_by="rubric", job="rubric",
    compare="rubric", shape="document",
)
