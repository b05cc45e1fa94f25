"""`whet review`: people spot-check a run's judged trials; the model judge is asked and calibrated.

Consumes the run's `Trial` records (the trials stream: from the live server, or, for a run
whose stack has stopped, from its own store through a short-lived embedded server), labels
typed on stdin (one answer per line, so a script can pipe them) or a `--label-file`, and
`[judge.model_judge]` (the run's config, or `--config`); produces labels and opinions in
`<run>/review/` (`monitoring.review_log`), the agreement table, and the calibrated threshold.
It writes nothing to the bus and never changes a verdict or a reward.
(No `from __future__ import annotations`: typer reads the option types at definition.)
"""

import getpass
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus import subjects
from bus.errors import WhetError
from bus.messages import Trial
from monitoring import model_judge as mj
from monitoring import review, review_log
from judging.config import ModelJudgeConfig
from runtime import config as config_mod
from runtime.broker.cluster import EmbeddedCluster, stored_nodes
from runtime.broker.embedded import EmbeddedServer
from runtime.cli.model_judge import ask_model_judge, run_calibration
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus
from runtime.cli.render_trace import render_trial
from runtime.stack import rundir

ANSWERS = {"y": True, "yes": True, "n": False, "no": False}


class Quit(Exception):
    """The person asked to stop, or stdin ended."""


class LabelLine(msgspec.Struct, forbid_unknown_fields=True):
    """One line of a `--label-file`."""

    trial_id: str
    reward_right: bool
    cause_right: bool
    hack: bool = False
    cause_should_be: str = ""


async def _replay(run: Optional[str], url: Optional[str], run_id: str) -> list[Trial]:
    bus = await open_bus(run, url)
    try:
        return [t async for _, t, _ in bus.replay(subjects.STREAM_TRIALS,
                                                  subjects.trial_filter(run_id), Trial,
                                                  follow=False) if t is not None]
    finally:
        await bus.close()


def load_trials(run: Optional[str], url: Optional[str]) -> tuple[rundir.RunDir, list[Trial]]:
    """The run folder and its trials, newest record of each trial id."""
    rd = rundir.find(run)
    live = url or os.environ.get("WHET_NATS_URL") or rd.supervisor_pid() is not None
    nodes = stored_nodes(rd.nats_dir)
    if live or not ((rd.nats_dir / "jetstream").is_dir() or nodes):
        found = anyio.run(_replay, run, url, rd.run_id)
    else:  # the stack stopped: open its store with a server (or cluster) of our own, to read
        server = EmbeddedCluster(rd.nats_dir, nodes) if nodes else EmbeddedServer(rd.nats_dir)
        try:
            found = anyio.run(_replay, run, server.start(), rd.run_id)
        finally:
            server.stop()
    newest = {t.trial_id: t for t in sorted(found, key=lambda t: t.recorded_at)}
    return rd, list(newest.values())


def _ask(question: str) -> str:
    typer.echo(question, nl=False)
    line = sys.stdin.readline()
    if not line:
        typer.echo("")
        raise Quit
    answer = line.strip().lower()
    if answer in ("q", "quit"):
        raise Quit
    return answer


def _yes_no(question: str, skip: bool = False) -> bool | None:
    keys = "[y/n, s skip, q quit] " if skip else "[y/n] "
    while True:
        answer = _ask(f"{question} {keys}")
        if skip and answer in ("s", "skip"):
            return None
        if answer in ANSWERS:
            return ANSWERS[answer]
        typer.echo("  answer y or n" + (", s or q" if skip else ""))


def ask_label(trial: Trial, labeller: str) -> review.Label | None:
    """A person's label of `trial` from stdin; None when skipped."""
    v = trial.verdict
    shown = "- (dropped)" if v.reward is None else f"{v.reward:g}"
    reward_right = _yes_no(f"reward {shown} right?", skip=True)
    if reward_right is None:
        return None
    cause_right = _yes_no(f"cause right (judge: {v.cause or 'none, it passed'})?")
    should_be = "" if cause_right else _ask("cause it should be (e.g. model.wrong_answer, pass): ")
    hack = _yes_no("a hack?")
    return review.label_of(trial, reward_right=reward_right, cause_right=bool(cause_right),
                           cause_should_be=should_be, hack=bool(hack), labeller=labeller,
                           now=time.time())


def label_interactively(trials: list[Trial], queue: list[Trial], labels_path: Path,
                        labeller: str) -> int:
    done = 0
    for i, trial in enumerate(queue, 1):
        typer.echo(f"\n--- {i} of {len(queue)} (stratum {review.stratum_of(trial)}) ---")
        render_trial(trial)
        try:
            label = ask_label(trial, labeller)
        except Quit:
            break
        if label is not None:
            review_log.append(labels_path, label)
            done += 1
    return done


def read_label_file(path: Path, trials: dict[str, Trial], labeller: str) -> list[review.Label]:
    """Labels from a JSON-lines file; a bad line is an error naming the line."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = msgspec.json.decode(line, type=LabelLine)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise WhetError(f"{path}:{number}: {exc}; expected {{\"trial_id\", \"reward_right\", "
                            "\"cause_right\", \"hack\", \"cause_should_be\"}") from None
        if row.trial_id not in trials:
            raise WhetError(f"{path}:{number}: no trial {row.trial_id!r} in this run")
        out.append(review.label_of(trials[row.trial_id], reward_right=row.reward_right,
                                   cause_right=row.cause_right, hack=row.hack,
                                   cause_should_be=row.cause_should_be, labeller=labeller,
                                   now=time.time()))
    return out


def model_judge_config(rd: rundir.RunDir, config: Optional[Path]) -> ModelJudgeConfig:
    cfg = config_mod.load(config or rd.config_file).judge.model_judge
    try:
        import aiohttp  # noqa: F401 - the model judge's client
    except ImportError:
        raise WhetError("the model judge needs aiohttp: pip install '.[judge]'") from None
    if not cfg.enabled:
        raise WhetError(f"judge.model_judge is off in {config or rd.config_file}; enable it "
                        "there or pass --config with an enabled [judge.model_judge]")
    return cfg


def print_report(folder: Path) -> None:
    labels = review_log.read(folder / review_log.LABELS, review.Label)
    typer.echo(f"{len(review.latest_labels(labels))} trials labelled "
               "(agreement of judges and people, 95% Wilson intervals)")
    for line in review.agreement_lines(review.agreement(labels)):
        typer.echo(line)
    opinions = latest_opinions(folder)
    if opinions:
        counts: dict[str, int] = {}
        for o in opinions.values():
            key = f"{o.status} {o.verdict}".strip()
            counts[key] = counts.get(key, 0) + 1
        typer.echo("model judge: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))


def latest_opinions(folder: Path) -> dict[str, mj.Opinion]:
    return {o.trial_id: o for o in review_log.read(folder / review_log.OPINIONS, mj.Opinion)}


def register(app: typer.Typer) -> None:
    @app.command("review")
    @friendly
    def review_(run: RunOpt = None, url: UrlOpt = None,
                per_stratum: Annotated[int, typer.Option(min=1, help="Trials shown per stratum.")] = 5,
                seed: Annotated[int, typer.Option(help="Seed of the random draw.")] = 0,
                label_file: Annotated[Optional[Path], typer.Option(help="JSON-lines labels, no questions.")] = None,
                report: Annotated[bool, typer.Option("--report", help="Print the agreement table only.")] = False,
                relabel: Annotated[bool, typer.Option(help="Show labelled trials again.")] = False,
                labeller: Annotated[str, typer.Option(help="Who labels (default: the user).")] = "",
                model_judge: Annotated[bool, typer.Option("--model-judge", help="Ask the model judge about passing trials.")] = False,
                calibrate: Annotated[bool, typer.Option("--calibrate", help="Ask the model judge about labelled trials; choose its threshold.")] = False,
                config: Annotated[Optional[Path], typer.Option(help="Config whose judge.model_judge section is used (default: the run's).")] = None) -> None:
        """Spot-check judged trials by stratum (passes, each cause, hacks) and record labels;
        report agreement of judges and people; ask and calibrate the model judge."""
        if report:
            print_report(review_log.folder(rundir.find(run).path))
            return
        rd, trials = load_trials(run, url)
        folder = review_log.folder(rd.path)
        labels_path = folder / review_log.LABELS
        who = labeller or getpass.getuser()
        if model_judge or calibrate:
            cfg = model_judge_config(rd, config)
            (run_calibration if calibrate else ask_model_judge)(cfg, trials, folder)
            return
        if label_file is not None:
            new = read_label_file(label_file, {t.trial_id: t for t in trials}, who)
            for label in new:
                review_log.append(labels_path, label)
            typer.echo(f"recorded {len(new)} labels in {labels_path}")
        else:
            labelled = set() if relabel else set(review.latest_labels(
                review_log.read(labels_path, review.Label)))
            queued = [i for i, o in latest_opinions(folder).items() if o.for_people]
            queue = review.sample(trials, per_stratum=per_stratum, seed=seed, skip=labelled,
                                  first=queued)
            typer.echo(f"{len(trials)} trials in run {rd.run_id}; {len(labelled)} labelled; "
                       f"showing {len(queue)}")
            done = label_interactively(trials, queue, labels_path, who)
            typer.echo(f"recorded {done} labels in {labels_path}")
        print_report(folder)
