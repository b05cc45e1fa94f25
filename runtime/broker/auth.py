"""NATS users with per-role permissions, derived from the names in `bus.subjects`.

Consumes the `[auth]` config section (roles of extra actor kinds) and the subject, stream and
bucket names of `bus.subjects`; produces what each role may publish and subscribe to
(`permissions`, from the `Grant`s below) and the nats-server `authorization` block that
enforces it (`server_config`). One role per built-in actor kind, plus `admin` (supervisor and
CLI: everything). Subjects with one owner are denied to every other role explicitly, on top
of the allow lists: verdicts (judge), weights and the policy pointer (learner), scale
targets (admin). It does not generate or store passwords (`runtime.stack.credentials` does)
and connects nowhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from bus import subjects as s
from bus.section import Section

Role = Literal["sampler", "generator", "executor", "judge", "learner", "evaluator", "monitor",
               "admin"]
ADMIN = "admin"

_API = "$JS.API"


class AuthConfig(Section):
    """The `[auth]` section: the role each extra actor kind connects as."""

    enabled: bool = False
    "NATS users with per-role permissions. The embedded server gets fresh passwords per run."
    secrets_dir: str = ""
    """Folder with one password file per role. Empty: `<run dir>/secrets`, created per run for
    the embedded server. With an external server, the files must exist there already."""
    roles: dict[str, Role] = {}
    "Role of each actor kind that is not a built-in one, e.g. probe = 'executor'."
    tls_cert_file: str = ""
    "Certificate (PEM) the embedded server presents; turns TLS on. Clients trust WHET_NATS_CA."
    tls_key_file: str = ""
    "Private key (PEM) of that certificate."
    tls: bool = False
    """TLS with whetstone's own CA, across hosts: the server requires TLS and a client
    certificate signed by the CA in `<secrets_dir>/tls`; each actor presents its role's.
    `whet up` makes the files for its embedded server; for another server make them with
    `whet auth certs`. Needs `enabled`; replaces `tls_cert_file`."""


@dataclass(frozen=True)
class Grant:
    """Subjects a role may publish to and subscribe to (NATS wildcards allowed).

    What a role needs, and why: every role, its own reply inbox (`_INBOX.<role>.>`, the client
    sets that prefix), its events and its heartbeats (`actor_base`); a stream it consumes, the
    consumer API for that stream (look up, create, fetch), acks and flow control, and what
    dead-lettering takes (`consumes`); a KV bucket it reads, the bucket's stream; a key it
    writes; the weights object store and its purge."""

    publish: frozenset[str] = field(default_factory=frozenset)
    subscribe: frozenset[str] = field(default_factory=frozenset)

    def __or__(self, other: "Grant") -> "Grant":
        return Grant(self.publish | other.publish, self.subscribe | other.subscribe)


def publishes(*subjects: str) -> Grant:
    """Publish durably (a JetStream publish; the ack comes back on the inbox)."""
    return Grant(frozenset(subjects))


def reads(stream: str) -> Grant:
    """Read `stream` through consumers of its own (durable or ephemeral) and direct gets."""
    return publishes(
        f"{_API}.STREAM.INFO.{stream}",
        f"{_API}.CONSUMER.INFO.{stream}.*",
        f"{_API}.CONSUMER.CREATE.{stream}", f"{_API}.CONSUMER.CREATE.{stream}.>",
        f"{_API}.CONSUMER.DURABLE.CREATE.{stream}.*",
        f"{_API}.CONSUMER.DELETE.{stream}.*",
        f"{_API}.CONSUMER.MSG.NEXT.{stream}.*",
        f"{_API}.STREAM.MSG.GET.{stream}",
        f"{_API}.DIRECT.GET.{stream}", f"{_API}.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
    )


def consumes(stream: str) -> Grant:
    """Work through a durable on `stream`, dead-lettering what cannot be processed."""
    return (reads(stream) | reads(s.STREAM_ADVISORIES)
            | publishes(f"{_API}.STREAM.MSG.DELETE.{stream}", s.dead_letter_subject(stream)))


def kv_reads(bucket: str) -> Grant:
    """Read KV `bucket`: its stream (info, direct get, watch)."""
    return reads(s.kv_stream(bucket))


def kv_writes(bucket: str, key: str) -> Grant:
    """Write `key` of KV `bucket` (`$KV.<bucket>.<key>`)."""
    return kv_reads(bucket) | publishes(s.kv_subject(bucket, key))


def weights_read() -> Grant:
    # nats-py's object store looks the stream up by subject (STREAM.NAMES) to list objects.
    """Read the weights object store (`$O.whet-weights.>`)."""
    return reads(s.object_stream(s.BUCKET_WEIGHTS)) | publishes(f"{_API}.STREAM.NAMES")


def weights_write() -> Grant:
    """Write the weights object store, and purge it."""
    stream = s.object_stream(s.BUCKET_WEIGHTS)
    return weights_read() | publishes(s.object_subjects(s.BUCKET_WEIGHTS),
                                      f"{_API}.STREAM.PURGE.{stream}")


def observes(streams: list[str]) -> Grant:
    """Stream and consumer state (queue depths, redeliveries)."""
    return publishes(*(f"{_API}.STREAM.INFO.{x}" for x in streams),
                     *(f"{_API}.CONSUMER.LIST.{x}" for x in streams),
                     *(f"{_API}.CONSUMER.NAMES.{x}" for x in streams))


def actor_base(role: str, kinds: list[str]) -> Grant:
    """What every actor does: replies on its inbox, events and heartbeats as its kinds."""
    grant = Grant(subscribe=frozenset({f"{s.inbox_prefix(role)}.>"}))
    for kind in kinds:
        grant = grant | publishes(f"{s.EVENTS}.{s.token(kind)}.>")
        grant = grant | kv_writes(s.BUCKET_ACTORS, s.actor_keys(kind))
    return grant


VERDICTS_ALL = f"{s.VERDICTS}.>"

ROLE_GRANTS: dict[str, Grant] = {
    "sampler": (publishes(s.TASKS) | consumes(s.STREAM_VERDICTS) | kv_reads(s.BUCKET_POLICY)
                | kv_writes(s.BUCKET_RUN, "sampler.>") | observes(s.WORK_STREAMS)),
    "generator": (consumes(s.STREAM_TASKS) | consumes(s.STREAM_ROUNDS) | consumes(s.STREAM_TURNS)
                  | publishes(s.ATTEMPTS)
                  | kv_reads(s.BUCKET_POLICY) | weights_read()),
    "executor": (consumes(s.STREAM_EXEC) | publishes(s.EXEC_DONE, f"{s.inbox_prefix('judge')}.>")
                 | Grant(subscribe=frozenset({s.SESSIONS_ALL}))),
    "judge": (consumes(s.STREAM_ATTEMPTS) | consumes(s.STREAM_EXEC_DONE)
              | publishes(s.EXEC_REQUESTS, s.TURNS, VERDICTS_ALL, s.SESSIONS_ALL)
              | observes([s.STREAM_VERDICTS, s.STREAM_ADVISORIES])
              | publishes(f"{_API}.STREAM.PURGE.{s.STREAM_VERDICTS}")),
    "learner": (consumes(s.STREAM_VERDICTS) | kv_writes(s.BUCKET_POLICY, s.KEY_POLICY)
                | kv_writes(s.BUCKET_POLICY, s.VERSION_KEYS)
                | weights_write() | kv_writes(s.BUCKET_RUN, "learner.>")),
    "evaluator": (publishes(s.ROUNDS) | consumes(s.STREAM_VERDICTS) | kv_reads(s.BUCKET_POLICY)
                  | kv_writes(s.BUCKET_RUN, "evaluator.>") | weights_read()),
    "monitor": (consumes(s.STREAM_VERDICTS) | publishes(f"{s.TRIALS}.>") | reads(s.STREAM_EVENTS)
                | kv_reads(s.BUCKET_ACTORS) | kv_reads(s.BUCKET_POLICY)
                | kv_writes(s.BUCKET_RUN, s.KEY_METRICS)
                | observes(s.WORK_STREAMS + [s.STREAM_TRIALS, s.STREAM_EVENTS])),
}
"What each actor role may do beyond `actor_base`."

OWNED: dict[str, str] = {
    VERDICTS_ALL: "judge",
    s.object_subjects(s.BUCKET_WEIGHTS): "learner",
    s.kv_subject(s.BUCKET_POLICY, ">"): "learner",
    s.kv_subject(s.BUCKET_RUN, "scale.>"): ADMIN,
}
"Subjects only one role may publish to; denied to all others explicitly."


KIND_ROLES: dict[str, str] = {"learner_rank": "learner"}
"Built-in kinds that connect as another kind's role: a learner rank writes the learner's keys."


def roles() -> list[str]:
    """Every role, admin last."""
    return [*ROLE_GRANTS, ADMIN]


def role_of(kind: str, config: AuthConfig) -> str:
    """The role an actor kind connects as; a ValueError names a kind without one."""
    role = config.roles.get(kind) or KIND_ROLES.get(kind) or (kind if kind in ROLE_GRANTS else None)
    if role is None:
        raise ValueError(f"actor kind {kind!r} has no NATS role; add it to [auth.roles], e.g. "
                         f"{kind} = \"executor\" (roles: {', '.join(roles())})")
    return role


def kinds_of(role: str, config: AuthConfig) -> list[str]:
    """Actor kinds that connect as `role`: its own kind and any mapped to it."""
    mapped = sorted(kind for kind, r in {**KIND_ROLES, **config.roles}.items()
                    if r == role and kind != role)
    return [role, *mapped]


def permissions(role: str, config: AuthConfig) -> dict:
    """nats-server permissions of `role`: allow lists plus explicit denies of owned subjects."""
    if role == ADMIN:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    grant = ROLE_GRANTS[role] | actor_base(role, kinds_of(role, config))
    deny = sorted(subject for subject, owner in OWNED.items() if owner != role)
    return {"publish": {"allow": sorted(grant.publish), "deny": deny},
            "subscribe": {"allow": sorted(grant.subscribe)}}


def password_variable(role: str) -> str:
    """Environment variable a generated server config reads `role`'s password from."""
    return f"WHET_NATS_PASSWORD_{role.upper()}"


def server_config(config: AuthConfig, passwords: dict[str, str] | None = None) -> str:
    """The `authorization` block (nats-server config syntax) for every role.

    With `passwords`, they are written in; without, each is read by the server from the
    environment variable `password_variable(role)`, so the file holds no secret.
    """
    lines = ["authorization {", "  users = ["]
    for role in roles():
        if passwords is not None:
            password = json.dumps(passwords[role])
        else:
            password = f"${password_variable(role)}"
        perms = json.dumps(permissions(role, config), indent=None, sort_keys=True)
        lines.append(f'    {{user: "{role}", password: {password}, permissions: {perms}}}')
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def tls_config(config: AuthConfig) -> str:
    """The server's `tls` block for a certificate of one's own, or '' when none is set."""
    if not config.tls_cert_file:
        return ""
    return tls_block(config.tls_cert_file, config.tls_key_file)


def tls_block(cert_file: str, key_file: str, ca_file: str = "") -> str:
    """A `tls` block: the server presents `cert_file`; with `ca_file` it also requires every
    client to present a certificate signed by that CA (`verify: true`)."""
    lines = [f"  cert_file: {json.dumps(cert_file)}", f"  key_file: {json.dumps(key_file)}"]
    if ca_file:
        lines += [f"  ca_file: {json.dumps(ca_file)}", "  verify: true"]
    return "tls {\n" + "\n".join(lines) + "\n  timeout: 2\n}\n"
