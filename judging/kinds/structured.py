"""`structured`: the attempt is a JSON document, checked against a schema and rules; nothing runs.

The verifier's fields for this kind: the attempt is a JSON document. `extra["schema"]` is a
JSON Schema (subset: type, properties, required, items, enum, minimum, maximum, pattern) and
`hidden` a JSON list of content rules `{"path": "a.b[0]", "equals": value}` (or "contains",
"matches"). Nothing is executed.
"""

from judging.kinds.base import Kind

KIND = Kind(
    "structured", attempt="document", rule_lists=("hidden",), mutants="json", job="none",
    compare="schema", shape="document",
)
