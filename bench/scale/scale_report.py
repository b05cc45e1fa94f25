"""The scale bench's table: each measure per actor count, and how its cost grows.

Consumes the result dict of `bench/scale/scale.py`; produces Markdown. For a total (CPU, memory,
writes per second, time over all actors) the growth column is the cost per actor at the
larger count over that at the smaller one: 1.0 is linear, above 1 is worse than linear. For a
per-message or per-call measure (a latency, one status call) it is the plain ratio: 1.0 means
the actor count does not change it. It measures nothing.
"""

from __future__ import annotations

import math

# (key, label, "total" or "each")
MEASURES = [
    ("bring_up_s", "bring-up of all actors (s)", "total"),
    ("published_per_s", "messages published /s", "total"),
    ("handled_per_s", "messages handled /s", "total"),
    ("publish_p50_ms", "publish until ack p50 (ms)", "each"),
    ("publish_p99_ms", "publish until ack p99 (ms)", "each"),
    ("latency_p50_ms", "publish to handler p50 (ms)", "each"),
    ("latency_p99_ms", "publish to handler p99 (ms)", "each"),
    ("heartbeats_per_s", "heartbeat KV writes /s", "total"),
    ("heartbeats_expected_per_s", "  expected (N / heartbeat_s)", "total"),
    ("beat_age_max_s", "oldest beat seen by status (s)", "each"),
    ("status_dead", "actors status shows dead", "total"),
    ("actors_cpu_pct", "actor processes CPU (% of a core)", "total"),
    ("server_cpu_pct", "server CPU (% of a core)", "total"),
    ("server_msgs_per_s", "server messages in+out /s", "total"),
    ("server_rss_mb", "server RSS (MB)", "total"),
    ("server_fds", "server open fds", "total"),
    ("connections", "server connections", "total"),
    ("subscriptions", "server subscriptions", "total"),
    ("slow_consumers", "slow consumers", "total"),
    ("status_s", "`whet status` read (s)", "each"),
    ("heartbeats_key_by_key_s", "  the heartbeats read key by key, as before (s)", "each"),
    ("status_render_s", "`whet status` table drawn (s)", "each"),
    ("status_idle_s", "`whet status` read, actors stopped (s)", "each"),
    ("status_idle_render_s", "`whet status` drawn, actors stopped (s)", "each"),
    ("newcomer_ready_s", "newcomer: start to ready (s)", "each"),
    ("newcomer_first_message_s", "newcomer: start to first message (s)", "each"),
    ("stop_s", "stop of all actors (s)", "total"),
]
SUPERVISOR = [
    ("spawn_s", "supervisor: spawn all children (s)", "total"),
    ("watch_cpu_pct", "supervisor: CPU while watching (% of a core)", "total"),
    ("threads", "supervisor: threads added", "total"),
    ("fds", "supervisor: fds added", "total"),
    ("stop_s", "supervisor: stop all children (s)", "total"),
]


def growth(kind: str, n1: int, v1: float, n2: int, v2: float) -> str:
    if not v1 or math.isnan(v1) or math.isnan(v2):
        return ""
    ratio = (v2 / n2) / (v1 / n1) if kind == "total" else v2 / v1
    return f"{ratio:.2f}"


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return f"{v:,}"


def table(rows: list[dict], measures: list[tuple[str, str, str]]) -> list[str]:
    counts = [r["actors"] for r in rows]
    pairs = list(zip(range(len(rows)), range(1, len(rows))))
    head = ["measure", *(f"N={n}" for n in counts),
            *(f"growth {counts[a]}→{counts[b]}" for a, b in pairs)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, kind in measures:
        values = [r.get(key) for r in rows]
        if all(v is None for v in values):
            continue
        grow = [growth(kind, counts[a], values[a], counts[b], values[b])
                if values[a] is not None and values[b] is not None else "" for a, b in pairs]
        out.append("| " + " | ".join([label, *map(fmt, values), *grow]) + " |")
    return out


def render(result: dict) -> str:
    lines = [f"# Scale bench: {result['command']}", "",
             f"Connections: {result['connections']}. Each simulated actor: a heartbeat every 2 s, one consumer "
             f"on a shared durable, {result['rate_per_actor']} messages/s published; "
             f"{result['per_process']} actors per OS process; window {result['window_s']} s; "
             f"{result['cpus']} CPUs, load average {result['load_before']:.1f} before the run.",
             "growth: per-actor cost at the larger count over the smaller (totals), or the plain "
             "ratio (per-message and per-call measures); 1.0 = linear / unchanged.", ""]
    lines += table(result["rows"], MEASURES)
    if result.get("supervisor"):
        lines += ["", "Supervisor (the real `runtime.stack.supervisor.Supervisor`; children are "
                  "`sleep` stand-ins, as a real actor process is ~100 MB):", ""]
        lines += table(result["supervisor"], SUPERVISOR)
    return "\n".join(lines)
