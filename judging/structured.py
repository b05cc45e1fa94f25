"""Judge a structured (JSON) attempt without running anything: schema, then content rules.

Consumes the parsed document, `extra["schema"]` (a JSON Schema subset: type, properties,
required, additionalProperties (false only), items, enum, minimum, maximum, minLength,
maxLength, minItems, maxItems, pattern) and rule lists (`visible` and `hidden`, each a JSON
list of `{"path": "a.b[0]", <check>: value}`); produces schema violations and one result per
rule. Checks: `equals` (the same value; numbers within 1e-6), `contains` (a substring of a
string, or a member of a list), `matches` (a regular expression that must match the whole
string, `re.fullmatch`). A path that does not exist fails its rule. It runs nothing.
"""

from __future__ import annotations

import json
import re

from judging.compare import same_value, show

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def schema_errors(doc, schema: dict, where: str = "$") -> list[str]:
    """What in `doc` breaks `schema` (empty when it conforms)."""
    errors: list[str] = []
    if not isinstance(schema, dict):
        return errors
    kind = schema.get("type")
    if kind is not None and not any(_is_type(doc, k) for k in (kind if isinstance(kind, list) else [kind])):
        return [f"{where}: expected {kind}, got {type(doc).__name__}"]
    if "enum" in schema and not any(same_value(doc, e, "float") for e in schema["enum"]):
        errors.append(f"{where}: {show(doc, 60)} is not one of {show(schema['enum'], 80)}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            errors.append(f"{where}: {doc} < minimum {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            errors.append(f"{where}: {doc} > maximum {schema['maximum']}")
    if isinstance(doc, str):
        errors += _string_errors(doc, schema, where)
    if isinstance(doc, dict):
        errors += _object_errors(doc, schema, where)
    if isinstance(doc, list):
        if len(doc) < schema.get("minItems", 0) or len(doc) > schema.get("maxItems", len(doc)):
            errors.append(f"{where}: {len(doc)} items, outside [{schema.get('minItems', 0)}, {schema.get('maxItems', '∞')}]")
        for i, item in enumerate(doc):
            errors += schema_errors(item, schema.get("items", {}), f"{where}[{i}]")
    return errors


def _is_type(doc, kind: str) -> bool:
    if kind == "integer":
        return isinstance(doc, int) and not isinstance(doc, bool)
    if kind == "number":
        return isinstance(doc, (int, float)) and not isinstance(doc, bool)
    return isinstance(doc, _TYPES.get(kind, object))


def _string_errors(doc: str, schema: dict, where: str) -> list[str]:
    errors = []
    if len(doc) < schema.get("minLength", 0) or len(doc) > schema.get("maxLength", len(doc)):
        errors.append(f"{where}: length {len(doc)} outside the allowed range")
    if "pattern" in schema and not re.search(schema["pattern"], doc):
        errors.append(f"{where}: {show(doc, 60)} does not match {schema['pattern']!r}")
    return errors


def _object_errors(doc: dict, schema: dict, where: str) -> list[str]:
    errors = [f"{where}: missing {key!r}" for key in schema.get("required", []) if key not in doc]
    props = schema.get("properties", {})
    for key, value in doc.items():
        if key in props:
            errors += schema_errors(value, props[key], f"{where}.{key}")
        elif schema.get("additionalProperties") is False:
            errors.append(f"{where}: unexpected key {key!r}")
    return errors


def check_rule(doc, rule: dict) -> tuple[bool, str]:
    """(passed, detail) of one content rule."""
    path = str(rule.get("path", ""))
    found, value = lookup(doc, path)
    if not found:
        return False, f"{path}: not present"
    if "equals" in rule:
        ok = same_value(value, rule["equals"], "float")
        return ok, "" if ok else f"{path}: {show(value, 80)} != {show(rule['equals'], 80)}"
    if "contains" in rule:
        want = rule["contains"]
        ok = (isinstance(value, str) and isinstance(want, str) and want in value) or (
            isinstance(value, list) and any(same_value(v, want, "float") for v in value))
        return ok, "" if ok else f"{path}: does not contain {show(want, 80)}"
    if "matches" in rule:
        ok = isinstance(value, str) and re.fullmatch(str(rule["matches"]), value) is not None
        return ok, "" if ok else f"{path}: {show(value, 80)} does not match {rule['matches']!r}"
    return False, f"{path}: rule has no equals, contains or matches"


def lookup(doc, path: str) -> tuple[bool, object]:
    """(found, value) at a path like 'a.b[0].c' ('' or '$' is the whole document)."""
    value = doc
    for key, index in _PATH_PART.findall(path.removeprefix("$").lstrip(".")):
        if index:
            if not isinstance(value, list) or int(index) >= len(value):
                return False, None
            value = value[int(index)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return False, None
    return True, value


def rules_of(text: str, where: str) -> list[dict]:
    """The rule list in `text` (empty for empty text); ValueError naming `where` if malformed."""
    if not text.strip():
        return []
    rules = json.loads(text)
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise ValueError(f"verifier.{where}: expected a JSON list of rule objects")
    return rules
