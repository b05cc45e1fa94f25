"""Terminal rendering of the monitor's snapshot: the run-health section of `whet status`.

Consumes a `MetricsSnapshot`; produces rich tables on the console. No I/O beyond printing.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bus.messages import MetricsSnapshot, RewardStats


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _reward(stats: RewardStats) -> str:
    if not stats.count:
        return "-"
    return (f"mean {stats.mean:+.3f} ± {stats.std:.3f}  p10/p50/p90 "
            f"{stats.p10:+.2f}/{stats.p50:+.2f}/{stats.p90:+.2f}  (n={stats.count})")


def render_metrics(snap: MetricsSnapshot, console: Console, *, now: float) -> None:
    health = Table(title=f"run health (last {snap.window_s:.0f} s: {snap.verdicts} verdicts; "
                         f"snapshot {max(0.0, now - snap.at):.0f} s old)",
                   title_justify="left", show_header=False)
    health.add_column("metric")
    health.add_column("value")
    for name in ("execution_success_rate", "timeout_rate", "infra_failure_rate", "hack_rate",
                 "train_pass_rate", "eval_pass_rate"):
        health.add_row(name.replace("_", " "), _pct(snap.rates.get(name)))
        if name == "hack_rate":
            for rate, value in sorted(snap.rates.items()):
                if rate.startswith("hack_rate."):
                    health.add_row(f"  hack: {rate.removeprefix('hack_rate.')}", _pct(value))
    health.add_row("held-out pass rate",
                   _pct(snap.heldout_pass_rate) + (f" (policy v{snap.heldout_version})"
                                                   if snap.heldout_pass_rate is not None else ""))
    health.add_row("reward now", _reward(snap.reward))
    health.add_row("reward before", _reward(snap.reward_previous))
    if snap.reward_drift:
        health.add_row("reward drift", f"mean {snap.reward_drift['mean_delta']:+.3f}  "
                                       f"KS {snap.reward_drift['ks']:.2f}")
    health.add_row("version lag", "  ".join(f"{lag}: {n}" for lag, n in snap.staleness.items()) or "-")
    for name, value in sorted(snap.throughput.items()):
        health.add_row(name.replace("_", " "), f"{value:.3g}")
    health.add_row("alerts", "[bold red]" + ", ".join(snap.alerts) + "[/]" if snap.alerts else "none")
    for name, ids in sorted(snap.alert_trials.items()):
        health.add_row(f"  {escape(name)}", "trials " + escape(", ".join(ids)) + "  (whet trace ID)")
    console.print(health)
    if snap.pass_rates:
        cells = Table(title="pass rate by domain and difficulty", title_justify="left")
        for col in ("purpose", "domain", "difficulty", "passed", "judged", "rate"):
            cells.add_column(col, justify="right" if col in ("passed", "judged", "rate") else "left")
        for row in snap.pass_rates:
            cells.add_row(row.purpose, row.domain, row.difficulty, str(row.passed),
                          str(row.judged), _pct(row.rate))
        console.print(cells)
