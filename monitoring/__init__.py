"""Run health from verdicts, heartbeats and stream state: metrics, alerts, trial records.

Pure functions and small classes (metrics, alerts, snapshot, trials, autoscale inputs) that
take values and return values; `actors.monitor` drives them from the bus, and the CLI reads
what it publishes.
"""
