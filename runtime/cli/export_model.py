"""`whet export-model`: a kept learner checkpoint of a run as a Hugging Face model folder.

Consumes a run id or path, and optionally a policy version and an output folder; finds the
run's learner checkpoints (`[learner] checkpoint_dir`, else `<run>/checkpoints`) and writes
the chosen one with `policy.export` (default: the newest kept version, into
`<run>/model-v<N>/`). A LoRA run's checkpoint is written merged into its base, or with
`--adapter` as a PEFT adapter folder (`<run>/adapter-v<N>/`). A version that is not kept, or
`--adapter` on a run that trained full weights, is one line, exit 2.
It touches no bus and starts nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bus.errors import RunError
from policy import export as export_mod
from runtime import config as config_mod
from runtime.cli.options import friendly
from runtime.stack import rundir


@friendly
def export_model(
        run: Annotated[str, typer.Argument(help="Run id or path.")],
        version: Annotated[Optional[int], typer.Option(help="Policy version (default: the newest kept).")] = None,
        out: Annotated[Optional[Path], typer.Option(help="Folder to write (default: <run>/model-v<N>, or adapter-v<N>).")] = None,
        adapter: Annotated[bool, typer.Option("--adapter", help="LoRA runs: the adapter folder (PEFT's), not the merged model.")] = False,
) -> None:
    """Write a kept policy version of a run as a folder transformers loads."""
    rd = rundir.find(run)
    cfg = config_mod.load(rd.config_file) if rd.config_file.is_file() else config_mod.RunConfig()
    ckpt = Path(cfg.learner.checkpoint_dir) if cfg.learner.checkpoint_dir else rd.path / "checkpoints"
    kept = export_mod.kept(ckpt)
    if not kept:
        raise RunError(f"run {rd.run_id} keeps no learner checkpoints (in {ckpt})")
    chosen = export_mod.pick(kept, version)
    target = out or rd.path / f"{'adapter' if adapter else 'model'}-v{chosen.version}"
    export_mod.export(ckpt, chosen.tag, cfg.model, target, lora=cfg.learner.lora,
                      adapter=adapter)
    typer.echo(f"version {chosen.version} (step {chosen.step}) written to {target}")


def register(app: typer.Typer) -> None:
    app.command("export-model")(export_model)
