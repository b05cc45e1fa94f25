"""The wire: message types, subjects, the MessagePack codec and the NATS adapter.

`messages`, `subjects`, `codec` and `errors` are pure; `nats_bus`, `consumer` and `objects`
are the only modules in whetstone that import `nats`.
"""
