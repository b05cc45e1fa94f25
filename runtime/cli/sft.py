"""`whet sft`: supervised fine-tuning on demonstrations with the learner's engine.

Consumes a JSON-lines file of demonstrations (`whet demos`), a config (its `[model]`,
`[learner]`, `[warmstart]` and the training stop strings) and an output folder; the options
override `[warmstart]` epochs, lr and batch size. Writes DIR/model/, DIR/checkpoint/ and
DIR/sft.json (`policy.warmstart`), logs each step and prints one summary line. Bad input (a
file, a record, an option, a folder holding a checkpoint) is one line, exit 2. It touches no
bus and starts no stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus.errors import ConfigError
from policy.config import WarmstartConfig
from bus.demos_file import read_demos
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly


def overridden(warm: WarmstartConfig, **options: object) -> WarmstartConfig:
    """`warm` with the options given (not None), checked against the section's bounds."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return msgspec.convert({**msgspec.to_builtins(warm), **given}, WarmstartConfig)
    except msgspec.ValidationError as exc:
        flag = next((k for k in given if f"`$.{k}`" in str(exc)), "")
        raise ConfigError(f"--{flag.replace('_', '-')}" if flag else "whet sft",
                          "", f"{exc}") from None


@friendly
def sft(
    demos: Annotated[Path, typer.Argument(help="JSON-lines file of demonstrations (whet demos).")],
    config: Annotated[Path, typer.Option("--config", "-c", help="Config file.")] = Path("configs/default.toml"),
    out: Annotated[Path, typer.Option("--out", help="Folder to write (model/, checkpoint/, sft.json).")] = Path("sft"),
    epochs: Annotated[Optional[float], typer.Option(help="Passes over the demos ([warmstart] epochs).")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Learning rate ([warmstart] lr).")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Demos per step ([warmstart] batch_size).")] = None,
) -> None:
    """Fine-tune the policy on demonstrations; write a model folder and a checkpoint."""
    cfg = config_mod.load(config)
    warm = overridden(cfg.warmstart, epochs=epochs, lr=lr, batch_size=batch_size)
    loaded = read_demos(demos)
    log_mod.configure(kind="cli", instance="sft", level=cfg.logging.level)
    from policy import warmstart  # torch: the slim image's `whet` never imports it

    report = anyio.run(lambda: warmstart.train(
        loaded, cfg.trainer, warm, out, cfg.generator.sampling.stop, cfg.run.seed, str(demos)))
    typer.echo(f"sft: {report.demos_used} demos ({len(report.left_out_too_long)} too long), "
               f"{report.steps} steps, loss {report.loss[0]:.4f} -> {report.loss[-1]:.4f}, "
               f"{report.wall_s:.1f} s wall, {report.cpu_s:.1f} s CPU; model in {out / 'model'}")


def register(app: typer.Typer) -> None:
    app.command()(sft)
