"""The broker: the embedded nats-server (one node or a local cluster of three), its users
and per-role permissions, and whetstone's own CA and certificates.

Consumes the `[auth]` section (its own, `runtime.broker.auth.AuthConfig`) and the names in
`bus.subjects`; produces server processes, server config blocks and certificate files. It
imports only `bus`: where a run keeps its passwords and certificates (config, run
directory) is the stack's business (`runtime.stack.credentials`).
"""
