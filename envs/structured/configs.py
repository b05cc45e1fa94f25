"""Config-generation tasks: write a JSON config that meets stated requirements.

Consumes a seeded rng and a rung; produces a `ConfigSpec`: the requirements in words, the
JSON Schema, the content rules and a reference config that satisfies them. Difficulty:
the number of settings, nesting, lists, and free-form values constrained by a pattern
rather than given verbatim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from envs.phrasing import pick

SERVICES = ("billing", "search", "auth", "gateway", "reports", "media", "ledger", "notify")
HOSTS = ("0.0.0.0", "127.0.0.1", "10.0.0.5", "api.internal")
LEVELS = ["debug", "info", "warning", "error"]
ORIGINS = ("https://app.example.com", "https://admin.example.com", "http://localhost:3000")


@dataclass
class ConfigSpec:
    """One structured-config task: its asks, schema, rules and reference document."""

    family: str
    asks: list[str]
    "Requirements, one sentence each."
    schema: dict
    rules: list[dict]
    reference: dict
    notes: list[str] = field(default_factory=list)


def object_schema(props: dict, required: list[str] | None = None) -> dict:
    """A JSON Schema object with `props`, all required unless `required` says otherwise."""
    return {"type": "object", "properties": props, "required": required or list(props)}


def service_config(rng: random.Random, level: int) -> ConfigSpec:
    """A service's config; each rung adds settings, nesting or a constrained value."""
    name, port = pick(rng, SERVICES), rng.randint(1025, 9999)
    replicas, debug = rng.randint(1, 8), rng.random() < 0.5
    asks = [f"the service is called \"{name}\" (key `name`)",
            f"it listens on port {port} (key `port`, an integer)"]
    props: dict = {"name": {"type": "string"},
                   "port": {"type": "integer", "minimum": 1, "maximum": 65535}}
    ref: dict = {"name": name, "port": port}
    rules = [{"path": "name", "equals": name}, {"path": "port", "equals": port}]
    if level >= 1:
        asks += [f"it runs {replicas} replica{'s' if replicas > 1 else ''} (key `replicas`)",
                 f"debug mode is {'on' if debug else 'off'} (key `debug`, a boolean)"]
        props |= {"replicas": {"type": "integer", "minimum": 1}, "debug": {"type": "boolean"}}
        ref |= {"replicas": replicas, "debug": debug}
        rules += [{"path": "replicas", "equals": replicas}, {"path": "debug", "equals": debug}]
    if level >= 2:
        lvl, host = pick(rng, LEVELS), pick(rng, HOSTS)
        asks += [f"under `logging`, the `level` is \"{lvl}\" (one of {', '.join(LEVELS)})",
                 f"under `server`, the `host` is \"{host}\""]
        props |= {"logging": object_schema({"level": {"type": "string", "enum": LEVELS}}),
                  "server": object_schema({"host": {"type": "string"}})}
        ref |= {"logging": {"level": lvl}, "server": {"host": host}}
        rules += [{"path": "logging.level", "equals": lvl},
                  {"path": "server.host", "equals": host}]
    if level >= 3:
        origins = rng.sample(ORIGINS, rng.randint(1, 3))
        asks.append("`allowed_origins` is a list that includes " +
                    " and ".join(f"\"{o}\"" for o in origins))
        props["allowed_origins"] = {"type": "array", "items": {"type": "string"}}
        ref["allowed_origins"] = origins
        rules += [{"path": "allowed_origins", "contains": o} for o in origins]
    if level >= 4:
        major = rng.randint(1, 4)
        asks.append(f"`version` is a semantic version string with major version {major} "
                    f"(for example \"{major}.0.0\")")
        props["version"] = {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"}
        ref["version"] = f"{major}.{rng.randint(0, 9)}.{rng.randint(0, 20)}"
        rules.append({"path": "version", "matches": rf"^{major}\.\d+\.\d+$"})
    return ConfigSpec(f"config.service{level}", asks, object_schema(props), rules, ref)


def job_schedule(rng: random.Random, level: int) -> ConfigSpec:
    """A list of scheduled jobs; the number of jobs and their settings grow with the rung."""
    n = min(level, 3) if level >= 2 else 1
    jobs, asks = [], []
    for i, job in enumerate(rng.sample(("backup", "cleanup", "report", "sync", "rotate"), n)):
        hour, retries = rng.randint(0, 23), rng.randint(0, 5)
        entry: dict = {"name": job, "hour": hour}
        words = f"job {i + 1} is named \"{job}\" and runs at hour {hour}"
        if level >= 1:
            entry["retries"] = retries
            words += f" with {retries} retries"
        jobs.append(entry)
        asks.append(words)
    item_props = {"name": {"type": "string"}, "hour": {"type": "integer", "minimum": 0,
                                                       "maximum": 23}}
    if level >= 1:
        item_props["retries"] = {"type": "integer", "minimum": 0}
    schema = object_schema({"jobs": {"type": "array", "items": object_schema(item_props)}})
    rules = [{"path": f"jobs[{i}].{k}", "equals": v} for i, j in enumerate(jobs)
             for k, v in j.items()]
    asks.insert(0, "the top-level key `jobs` holds a list of job objects, in the order given")
    return ConfigSpec(f"config.jobs{n}", asks, schema, rules, {"jobs": jobs})
