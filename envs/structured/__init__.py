"""Environment `structured_output`: produce a JSON document that meets a schema and rules.

Consumes a seeded rng and a rung; produces `structured` Drafts: `extra["schema"]` is a JSON
Schema (subset), `hidden` the content rules, `reference` a correct document. Half the tasks
extract fields from a document (`documents`), half write a config (`configs`). Nothing is
executed to check them. It does not judge attempts.
"""

from __future__ import annotations

import json
import random

from bus.messages import Limits, Verifier
from envs import phrasing
from envs.environment import Draft, Environment
from envs.structured import configs, documents

_EXTRACT_OPENERS = (
    "Read the document below and extract {what} into a JSON object.",
    "Extract {what} from this text and return them as JSON.",
    "From the following document, pull out {what}. Output a JSON object.",
    "Turn the document into structured data: {what}.",
)
_CONFIG_OPENERS = (
    "Write a JSON configuration with these requirements:",
    "Create a JSON config file such that:",
    "Produce a JSON document for this configuration:",
)


_PLACEHOLDER = {"string": "...", "integer": 0, "number": 0.0, "boolean": False, "array": [],
                "object": {}}


def template(schema: dict) -> str:
    """The answer's shape with placeholder values, for the first rungs."""
    return json.dumps({k: _PLACEHOLDER[s["type"]] for k, s in schema["properties"].items()})


def _shape(rng: random.Random, fields: list[documents.Field], schema: dict, level: int) -> str:
    if level <= 1:  # first rungs show the answer's shape; higher rungs describe it
        return phrasing.pick(rng, ("Fill in this JSON, replacing the placeholder values:",
                                   "Answer in exactly this shape, with the real values:")) + \
            f"\n```json\n{template(schema)}\n```"
    if rng.random() < 0.35:
        return "It must match this JSON Schema:\n" + json.dumps(schema)
    lines = [f"- `{f.key}` ({f.schema['type']}): {f.ask}" for f in fields]
    return phrasing.pick(rng, ("Use exactly these keys:", "Keys:", "The object has:")) + \
        "\n" + "\n".join(lines)


def _extraction(rng: random.Random, level: int) -> tuple[str, str, dict, list, dict]:
    doc = documents.extraction(rng, level)
    schema = configs.object_schema({f.key: f.schema for f in doc.fields})
    rules = [{"path": f.key, "equals": f.value} for f in doc.fields]
    what = "; ".join(f.ask for f in doc.fields)
    opener = phrasing.pick(rng, _EXTRACT_OPENERS).format(what=what)
    fence = phrasing.pick(rng, ('"""', "---", "```"))
    prompt = (f"{opener}\n\nDocument:\n{fence}\n{doc.text}\n{fence}\n\n"
              f"{_shape(rng, doc.fields, schema, level)}\n\n{phrasing.answer_json(rng)}")
    return doc.family, prompt, schema, rules, {f.key: f.value for f in doc.fields}


def _config(rng: random.Random, level: int) -> tuple[str, str, dict, list, dict]:
    spec = phrasing.pick(rng, (configs.service_config, configs.job_schedule))(rng, level)
    asks = "\n".join(f"- {a}" for a in spec.asks)
    shape = ("\n\nIt must match this JSON Schema:\n" + json.dumps(spec.schema)
             if level >= 2 and rng.random() < 0.5 else "")
    if level <= 1 and "properties" in spec.schema and "jobs" not in spec.schema["properties"]:
        shape = f"\n\nFill in this shape:\n```json\n{template(spec.schema)}\n```"
    prompt = f"{phrasing.pick(rng, _CONFIG_OPENERS)}\n{asks}{shape}\n\n{phrasing.answer_json(rng)}"
    return spec.family, prompt, spec.schema, spec.rules, spec.reference


def make_task(rng: random.Random, level: int) -> Draft:
    """One structured-output task at `level`: an extraction or a config, half and half."""
    make = _extraction if rng.random() < 0.5 else _config
    family, prompt, schema, rules, reference = make(rng, level)
    verifier = Verifier(kind="structured", visible="", hidden=json.dumps(rules),
                        reference=json.dumps(reference), extra={"schema": json.dumps(schema)})
    return Draft(prompt=prompt, verifier=verifier, family=family)


ENVIRONMENT = Environment(
    name="structured_output",
    version="1",
    domain="structured",
    summary="Extract fields from a document, or write a config, as JSON (structured).",
    levels=5,
    difficulty="number of fields or settings, normalised values (ISO dates, numbers, "
               "booleans), nesting, line items, a derived total, pattern-checked values",
    make_task=make_task,
    limits=Limits(timeout_s=5.0, cpu_s=5.0, memory_mb=128, pids=8, disk_mb=8),
)
