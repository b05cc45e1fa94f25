"""`structured`: the attempt is a JSON document, checked against a schema and rules; nothing runs."""

from judging.kinds.base import Kind

KIND = Kind(
    "structured", attempt="document", rule_lists=("hidden",), mutants="json", job="none",
    compare="schema", shape="document",
)
