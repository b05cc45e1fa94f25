"""The `[monitor]` config section: windows, the Prometheus endpoint, alert bands, trial
retention. Importable without the ML stack (the slim image runs the monitor)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus.section import Section

Rate = Literal["execution_success_rate", "timeout_rate", "infra_failure_rate", "hack_rate",
               "train_pass_rate", "eval_pass_rate"]
"Rates the monitor computes over its window (see monitoring.metrics.rates)."


class Band(Section):
    """The healthy range of one rate; an alert is raised outside it."""

    low: float | None = None
    "Alert when the rate falls below this."
    high: float | None = None
    "Alert when the rate rises above this."


def _default_bands() -> dict[Rate, Band]:
    # A timeout spike is the classic sandbox outage; infra failures past a few percent mean
    # executors or the engine are sick; hacks past a few percent mean the policy is learning
    # to game the judge (each scores the lowest reward, but a detector can miss its cousins).
    return {"timeout_rate": Band(high=0.3), "infra_failure_rate": Band(high=0.1),
            "hack_rate": Band(high=0.05)}


class MonitorConfig(Section):
    """The monitor's section, `[monitor]`: windows, snapshots, Prometheus, alert bands."""

    window_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    "Rates, rewards and pass rates cover the last window; drift compares it with the one before."
    snapshot_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    "Seconds between snapshots (KV for `whet status`, Prometheus, alert checks)."
    prometheus_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9464
    "Port of the Prometheus endpoint (/metrics); 0 serves none."
    prometheus_host: str = "127.0.0.1"
    "Address the endpoint listens on; 0.0.0.0 in a container."
    difficulty_step: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    "Width of the difficulty buckets pass rates are grouped by."
    staleness_cap: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 8
    "Version lags at or past this share the last staleness bucket."
    bands: dict[Rate, Band] = msgspec.field(default_factory=_default_bands)
    "Healthy range of each rate; leaving it raises an alert event."
    hack_class_band: Band = msgspec.field(default_factory=lambda: Band(high=0.05))
    ("Healthy range of each hack class's rate (`hack_rate.<kind>`, e.g. hack_rate.early_exit). "
     "By default the band of all hacks: a class past it alone raises its own alert beside "
     "hack_rate's, saying which trick the policy found; lower it to hear of one class sooner.")
    drop_band: Band = msgspec.field(default_factory=lambda: Band(high=0.2))
    ("Healthy range of the infra-drop rate of one task (`drop_rate.task.<id>`) and of one group "
     "(`drop_rate.group.<id>`): a drop is no reward and never a penalty, so a policy that learned "
     "to cause drops shows as one task or group dropping far more than the run's average.")
    drop_min_samples: Annotated[int, msgspec.Meta(ge=1)] = 8
    "Verdicts a task or group needs in the window before its drop rate can raise an alert."
    alert_trials: Annotated[int, msgspec.Meta(ge=0, le=100)] = 5
    ("Trial ids an alert names (its event, `whet status`): the top-reward training verdicts of "
     "the window for reward_rising_heldout_flat, the latest flagged ones for hack rates.")
    min_samples: Annotated[int, msgspec.Meta(ge=1)] = 20
    "Verdicts a window needs before its rates can raise alerts."
    cooldown_s: Annotated[float, msgspec.Meta(ge=0)] = 300.0
    "An alert is raised again at most this often while its condition lasts."
    reward_rise: Annotated[float, msgspec.Meta(gt=0)] = 0.1
    "Mean training reward gain over one window that counts as rising."
    heldout_flat: Annotated[float, msgspec.Meta(ge=0)] = 0.01
    "Held-out pass-rate gain over the same span at or below which it counts as flat."
    max_points: Annotated[int, msgspec.Meta(ge=100)] = 200_000
    "Most verdicts kept in memory for the two windows."
    trials_retention_h: Annotated[float, msgspec.Meta(gt=0)] = 168.0
    "How long trial records are kept."
    trials_max_mb: Annotated[int, msgspec.Meta(ge=1)] = 1024
    "Size cap of the trial store; the oldest trials go first."
