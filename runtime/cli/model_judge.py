"""`whet review --model-judge` and `--calibrate`: ask the model judge, record, calibrate.

Consumes a run's trials, its review folder (people's labels, earlier opinions) and an enabled
`[judge.model_judge]`; produces opinions appended to `<run>/review/model_judge.jsonl` (a
`suspect` or an abstention is queued for `whet review`; an outage is recorded as absent and
asked again next time) and, for `--calibrate`, the agreement per threshold on the labelled
passing trials and `<run>/review/model_judge_threshold.json`. Wiring only: the rules are in
`monitoring.model_judge`. It never changes a verdict or a reward.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import anyio
import typer

from bus.errors import WhetError
from bus.messages import Trial
from monitoring import model_judge as mj
from monitoring import review, review_log
from judging.config import ModelJudgeConfig


async def _ask_all(cfg: ModelJudgeConfig, trials: list[Trial], threshold: float,
                   record: Path | None) -> list[mj.Opinion]:
    out = []
    for trial in trials:
        opinion = await mj.ask(cfg, trial, threshold)
        if record is not None:
            review_log.append(record, opinion)
        out.append(opinion)
    return out


def ask_model_judge(cfg: ModelJudgeConfig, trials: list[Trial], folder: Path) -> None:
    """Ask about every passing trial without an opinion (or whose last ask was an outage)."""
    threshold = mj.threshold_of(cfg)
    record = folder / review_log.OPINIONS
    known = {o.trial_id: o for o in review_log.read(record, mj.Opinion)}
    todo = [t for t in trials if t.verdict.outcome == "pass"
            and (t.trial_id not in known or known[t.trial_id].status == "unavailable")]
    opinions = anyio.run(_ask_all, cfg, todo, threshold, record)
    counts = Counter(f"{o.status} {o.verdict}".strip() for o in opinions)
    queued = sum(o.for_people for o in opinions)
    typer.echo(f"model judge ({cfg.model}, threshold {threshold:g}) on {len(todo)} passing "
               f"trials: " + (", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "none")
               + f"; {queued} queued for 'whet review'")
    for o in opinions:
        if o.status == "unavailable":
            typer.echo(f"  {o.trial_id}: {o.cause}: {o.evidence} (absent; asked again next time)")


def run_calibration(cfg: ModelJudgeConfig, trials: list[Trial], folder: Path) -> None:
    """Agreement with people per threshold on labelled passing trials; write the chosen one."""
    by_id = {t.trial_id: t for t in trials}
    labels = [x for x in review.latest_labels(
        review_log.read(folder / review_log.LABELS, review.Label)).values()
        if x.outcome == "pass" and x.trial_id in by_id]
    if not labels:
        raise WhetError("calibrate: no labelled passing trials in this run; label some with "
                        "'whet review' first")
    opinions = anyio.run(_ask_all, cfg, [by_id[x.trial_id] for x in labels], 0.0, None)
    points = [(o.confidence, mj.agrees(o.verdict, x)) for o, x in zip(opinions, labels)
              if o.status != "unavailable"]
    absent = len(labels) - len(points)
    rows, chosen = mj.calibrate(points, cfg.target_agreement)
    typer.echo(f"model judge {cfg.model} on {len(labels)} labelled passing trials"
               + (f" ({absent} unavailable, left out)" if absent else "")
               + f"; target agreement {cfg.target_agreement:g}")
    typer.echo(f"{'threshold':>9}  {'answered':>9}  agreement")
    for r in rows:
        low, high = r.interval
        typer.echo(f"{r.threshold:>9.2f}  {r.answered:>4}/{r.labelled:<4}  "
                   f"{r.agreed}/{r.answered} {r.rate:.3f} [{low:.2f}, {high:.2f}]")
    if chosen is None:
        typer.echo("no threshold reaches the target: keep the model judge off, or label more")
        raise typer.Exit(1)
    path = folder / review_log.THRESHOLD
    path.write_text(json.dumps({
        "threshold": chosen.threshold, "target_agreement": cfg.target_agreement,
        "agreement": chosen.rate, "interval": list(chosen.interval),
        "answered": chosen.answered, "labelled": chosen.labelled, "model": cfg.model,
        "calibrated_at": time.time()}, indent=2) + "\n")
    typer.echo(f"chosen threshold {chosen.threshold:g} (agreement {chosen.rate:.3f} on "
               f"{chosen.answered} of {chosen.labelled}); written to {path}; in config: "
               f'[judge.model_judge] threshold_file = "{path}"')
