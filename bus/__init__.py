"""The wire: message types, subjects, the MessagePack codec and the NATS adapter.

`messages`, `subjects`, `codec`, `gauges` and `errors` are pure. The only modules in
whetstone that import `nats` are here: `nats_bus` (connection, publish, topology) with its
mixins `nats_kv` and `nats_reads`, `nats_retry`, `consumer` (pull loops) and `objects`
(weights).
"""
