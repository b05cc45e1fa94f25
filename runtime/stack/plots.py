"""PNG plots of a run's metrics: reward, held-out pass rate and staleness against steps.

Consumes `<run dir>/metrics/train.csv`, `eval.csv` and `progress.csv` (written by
`runtime.stack.progress`); produces `<run dir>/plots/progress.png` (tasks gated, attempts judged,
held-out attempts and learner steps against wall minutes: there from the first minute),
`reward.png`, `heldout.png` (pass rates shaded with their 95% intervals) and `staleness.png`
(against learner steps). Uses matplotlib
(the `ml` extra) without a display; without matplotlib it draws nothing and says so once.
"""

from __future__ import annotations

import csv
from pathlib import Path

import structlog

log = structlog.get_logger("runtime.stack.plots")
_warned = False


def read_rows(path: Path) -> list[dict[str, float]]:
    """CSV rows with every non-empty cell as a float (the rest left out)."""
    if not path.exists():
        return []
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            parsed = {}
            for key, value in row.items():
                try:
                    parsed[key] = float(value)
                except (TypeError, ValueError):
                    continue
            out.append(parsed)
    return out


def series(rows: list[dict[str, float]], x: str, y: str) -> tuple[list[float], list[float]]:
    points = [(r[x], r[y]) for r in rows if x in r and y in r]
    return [p[0] for p in points], [p[1] for p in points]


ROLLING = 5
"Steps in the rolling mean drawn over the noisy per-step training reward."


def with_rolling_mean(rows: list[dict[str, float]], column: str, window: int = ROLLING
                      ) -> list[dict[str, float]]:
    """`rows` with `<column>_rolling`: the mean of the last `window` values (fewer at the start)."""
    out, recent = [], []
    for row in rows:
        row = dict(row)
        if column in row:
            recent = (recent + [row[column]])[-window:]
            row[f"{column}_rolling"] = sum(recent) / len(recent)
        out.append(row)
    return out


def draw(run_dir: Path) -> list[Path]:
    """Redraw the four plots; returns the files written."""
    global _warned
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if not _warned:
            log.warning("plots.skipped", reason="matplotlib is not installed (the ml extra)")
            _warned = True
        return []
    train = with_rolling_mean(read_rows(run_dir / "metrics" / "train.csv"), "mean_reward")
    evals = read_rows(run_dir / "metrics" / "eval.csv")
    counts = read_rows(run_dir / "metrics" / "progress.csv")
    for row in counts:
        row["wall_min"] = row.get("wall_s", 0.0) / 60
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    charts = {
        "progress.png": ("progress (counts so far)", [("tasks gated", counts, "gated"),
                                                      ("attempts judged", counts, "judged"),
                                                      ("held-out round attempts judged", counts,
                                                       "round_judged"),
                                                      ("learner steps", counts, "step")]),
        "reward.png": ("mean training reward", [
            ("mean reward", train, "mean_reward"),
            (f"mean reward, rolling mean of {ROLLING} steps", train, "mean_reward_rolling"),
            ("pass rate", train, "pass_rate")]),
        "heldout.png": ("held-out pass rate and mean reward",
                        [("pass rate", evals, "overall"),
                         ("pass rate, trained domains", evals, "trained"),
                         ("pass rate, transfer domains", evals, "transfer"),
                         ("mean reward", evals, "reward")]),
        "staleness.png": ("staleness (policy versions)", [("mean", train, "staleness_mean"),
                                                          ("max", train, "staleness_max")]),
    }
    written = []
    for name, (title, lines) in charts.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        x = "wall_min" if name == "progress.png" else "step"
        for label, rows, column in lines:
            xs, ys = series(rows, x, column)
            if xs:
                line, = ax.plot(xs, ys, marker="o", markersize=3, label=label)
                band = [r for r in rows if {"step", f"{column}_low", f"{column}_high"} <= set(r)]
                if band:  # the 95% interval eval.csv carries beside a pass rate
                    ax.fill_between([r["step"] for r in band], [r[f"{column}_low"] for r in band],
                                    [r[f"{column}_high"] for r in band], alpha=0.15,
                                    color=line.get_color())
        ax.set_title(title)
        ax.set_xlabel("wall minutes" if x == "wall_min" else "learner step")
        if x == "wall_min":
            ax.set_yscale("symlog")  # steps (tens) and attempts (thousands) on one chart
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        written.append(out_dir / name)
    return written
