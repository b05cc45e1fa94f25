"""`whet eval MODEL_DIR` / `whet eval --endpoint URL --model NAME`: a held-out round, no stack.

Consumes a Hugging Face model folder, a PEFT LoRA adapter folder (its base, adapter merged),
a run folder (its `model/`) or an OpenAI-compatible endpoint, a config (`--config`, else the
run folder's resolved config, else configs/default.toml, else the defaults) and overrides of
its task choice (`--env`, `--split`, `--per-domain`, `--limit`); produces on stdout each
domain's pass rate k/n with its 95% interval and mean reward (tool domains: also turns, the
well-formed share, calls and ends; `--max-turns` cuts episodes short; an endpoint serves
single-turn tasks only), with `--baseline` (a file this verb wrote)
the paired change by domain, and with `--out` that file (`runtime.evaluate.record`). Tasks,
judging and statistics are the evaluator's (`runtime.evaluate`). Bad input is one line and
exit 2, checked before any work.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus.errors import WhetError
from bus.messages import EvalRound
from judging.tools import is_tool_task
from policy.config import ModelConfig
from policy.model import is_adapter_folder, weights_problem
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from runtime.cli.render_eval import paired_lines, score_lines
from runtime.config import RunConfig
from runtime.evaluate import record as record_mod
from runtime.evaluate.endpoint import Endpoint, EndpointSampler, chat_url
from runtime.evaluate.round import Sampler, TaskResult, heldout_tasks, run_round, tally
from runtime.evaluate.torch_sampler import TorchSampler

DEFAULT_CONFIG = Path("configs/default.toml")
SPLITS = ("heldout", "validation")
LABEL = "whet-eval"

ModelDirArg = Annotated[Optional[Path], typer.Argument(
    help="A Hugging Face model folder, a LoRA adapter folder, or a run folder (its model/).")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", "-c", help="Run config (default: the run folder's, else configs/default.toml).")]
EnvOpt = Annotated[Optional[list[str]], typer.Option(
    "--env", help="Only this environment of the config (repeatable).")]
SplitOpt = Annotated[Optional[str], typer.Option(
    help="heldout or validation (default: the config's \\[evaluator] split).")]
PerDomainOpt = Annotated[Optional[int], typer.Option(
    "--per-domain", min=1, help="Tasks in every domain (default: the config's \\[evaluator]).")]
OutOpt = Annotated[Optional[Path], typer.Option(
    "--out", "-o", help="Write the round as JSON (task ids, per-task results).")]
BaselineOpt = Annotated[Optional[Path], typer.Option(
    help="A file --out wrote: print the paired change against it.")]
EndpointOpt = Annotated[Optional[str], typer.Option(
    help="An OpenAI-compatible server (its root, /v1, or /v1/chat/completions).")]
ModelOpt = Annotated[Optional[str], typer.Option(help="Model name to ask the endpoint for.")]
KeyOpt = Annotated[Optional[str], typer.Option(
    help="Variable holding the endpoint's API key (default: OPENAI_API_KEY, if set).")]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, max=64, help="Endpoint requests at once.")]
TimeoutOpt = Annotated[float, typer.Option(min=1.0, help="Longest one endpoint request may take.")]
LimitOpt = Annotated[Optional[int], typer.Option(
    "--limit", min=1, help="At most this many tasks of each domain (a short measurement).")]
MaxTurnsOpt = Annotated[Optional[int], typer.Option(
    "--max-turns", min=1, help="Tool episodes: end after this many turns (within their budgets).")]


def model_folder(path: Path) -> Path:
    """The model folder `path` names: itself, or a run folder's `model/`."""
    if not path.is_dir():
        raise WhetError(f"eval: {path}: {'not a folder' if path.exists() else 'no such folder'}")
    if (path / "config.json").is_file() or is_adapter_folder(path):
        folder = path
    elif (path / "model" / "config.json").is_file():
        folder = path / "model"
    elif (path / "config.resolved.json").is_file():
        raise WhetError(f"eval: run {path} has no model/ yet (the learner writes it when it "
                        f"stops); write a kept version with 'whet export-model {path}'")
    else:
        raise WhetError(f"eval: {path} is not a model folder (no config.json), a LoRA adapter "
                        "folder (adapter_config.json) nor a run folder with model/config.json")
    problem = weights_problem(ModelConfig(path=str(folder)))
    if problem:
        raise WhetError(f"eval: {problem}")
    return folder


def load_config(config: Path | None, given: Path | None) -> tuple[RunConfig, str]:
    """(config, the file it came from: '' for the defaults)."""
    if config is not None:
        return config_mod.load(config), str(config)
    resolved = given / "config.resolved.json" if given and given.is_dir() else None
    for candidate in (resolved, DEFAULT_CONFIG):
        if candidate is not None and candidate.is_file():
            return config_mod.load(candidate), str(candidate)
    return RunConfig(), ""


def narrowed(cfg: RunConfig, envs: list[str], split: str | None, per_domain: int | None,
             limit: int | None = None) -> RunConfig:
    """`cfg` with the task choice the command line asks for (`limit`: at most that many of
    each domain)."""
    rep = msgspec.structs.replace
    use = cfg.envs.use
    if envs:
        unknown = [name for name in envs if name not in use]
        if unknown:
            raise WhetError(f"eval: --env {unknown[0]!r}: not an environment of the config "
                            f"(it has {', '.join(sorted(use))}); add [envs.use.{unknown[0]}] to it")
        use = {name: rep(use[name], enabled=True) for name in envs}
    if split is not None and split not in SPLITS:
        raise WhetError(f"eval: --split {split!r}: expected heldout or validation")
    ev = cfg.evaluator
    ev = rep(ev, split=split or ev.split)
    if per_domain is not None:
        ev = rep(ev, tasks_per_domain=per_domain, domain_tasks={})
    if limit is not None:
        ev = rep(ev, tasks_per_domain=min(ev.tasks_per_domain, limit),
                 domain_tasks={d: min(n, limit) for d, n in ev.domain_tasks.items()})
    return rep(cfg, envs=rep(cfg.envs, use=use), evaluator=ev)


def endpoint_of(url: str, model: str | None, api_key_env: str | None, concurrency: int,
                timeout_s: float) -> Endpoint:
    """The endpoint the options name."""
    if not model:
        raise WhetError("eval: --endpoint needs --model NAME (the model the server serves)")
    key_var = api_key_env or "OPENAI_API_KEY"
    key = os.environ.get(key_var, "")
    if api_key_env and not key:
        raise WhetError(f"eval: --api-key-env {api_key_env}: the variable is not set")
    return Endpoint(url=chat_url(url), model=model, api_key=key, concurrency=concurrency,
                    timeout_s=timeout_s)


async def _round(cfg: RunConfig, sampler: Sampler, max_turns: int | None
                 ) -> tuple[dict[str, list[str]], dict[str, TaskResult]]:
    chosen = await heldout_tasks(cfg)
    tasks = [t for domain in sorted(chosen) for t in chosen[domain]]
    if not tasks:
        raise WhetError(f"eval: no {cfg.evaluator.split} tasks in the environments "
                        f"{', '.join(sorted(n for n, e in cfg.envs.use.items() if e.enabled))}")
    tool_domains = sorted({t.domain for t in tasks if is_tool_task(t)})
    if tool_domains and isinstance(sampler, EndpointSampler):
        raise WhetError(f"eval: --endpoint evaluates single-turn tasks only; "
                        f"{', '.join(tool_domains)} runs tool episodes: give a model folder, or "
                        "leave it out with --env")
    typer.echo(f"whet eval: {len(tasks)} {cfg.evaluator.split} tasks ("
               + ", ".join(f"{d} {len(ts)}" for d, ts in sorted(chosen.items())) + ")", err=True)
    results = await run_round(cfg, sampler, tasks, LABEL, max_turns or 1 << 30)
    return {d: [t.task_id for t in ts] for d, ts in sorted(chosen.items())}, results


def source_of(model_dir: Path | None, endpoint: str | None, model: str | None,
              api_key_env: str | None, concurrency: int, timeout_s: float) -> Path | Endpoint:
    """What the arguments name, checked: a model folder, or an endpoint and its model."""
    if (model_dir is None) == (endpoint is None):
        raise WhetError("eval: give MODEL_DIR (a model or run folder) or --endpoint URL "
                        "--model NAME" + (", not both" if model_dir else ""))
    if endpoint is not None:
        return endpoint_of(endpoint, model, api_key_env, concurrency, timeout_s)
    if model:
        raise WhetError("eval: --model names an endpoint's model; with a folder, give "
                        "MODEL_DIR alone")
    return model_folder(model_dir)  # type: ignore[arg-type]


def report(made: record_mod.EvalFile, result: EvalRound, baseline: Path | None,
           before: record_mod.EvalFile | None) -> None:
    """Print the scores, and the paired change against the baseline."""
    for line in score_lines(made, result):
        typer.echo(line)
    if before is None:
        return
    if before.config_hash != made.config_hash:
        typer.echo(f"whet eval: the baseline's config hash differs ({before.config_hash[:12]} "
                   f"against {made.config_hash[:12]}): its tasks or judging may differ; only "
                   "tasks both judged are paired", err=True)
    for line in paired_lines(baseline, before, result):
        typer.echo(line)


@friendly
def eval_(model_dir: ModelDirArg = None, config: ConfigOpt = None, env: EnvOpt = None,
          split: SplitOpt = None, per_domain: PerDomainOpt = None, out: OutOpt = None,
          baseline: BaselineOpt = None, endpoint: EndpointOpt = None, model: ModelOpt = None,
          api_key_env: KeyOpt = None, concurrency: ConcurrencyOpt = 8,
          timeout_s: TimeoutOpt = 120.0, limit: LimitOpt = None,
          max_turns: MaxTurnsOpt = None) -> None:
    """Evaluate a model folder or an endpoint on the held-out tasks, as the evaluator does."""
    log_mod.configure(kind="cli", instance="eval", level="warning")  # stdout is the table
    chosen_source = source_of(model_dir, endpoint, model, api_key_env, concurrency, timeout_s)
    cfg, source = load_config(config, model_dir)
    cfg = narrowed(cfg, env or [], split, per_domain, limit)
    sampler = EndpointSampler(chosen_source) if isinstance(chosen_source, Endpoint) else \
        TorchSampler(msgspec.structs.replace(cfg.model, path=str(chosen_source)))
    before = record_mod.read(baseline) if baseline else None
    typer.echo(f"whet eval: config {source or '(defaults)'}", err=True)
    chosen, results = anyio.run(_round, cfg, sampler, max_turns)
    result = tally(cfg, results, before.results if before else None)
    made = record_mod.make(model=sampler.describe(), config=source, cfg=cfg, chosen=chosen,
                           results=results, result=result)
    report(made, result, baseline, before)
    if out is not None:
        record_mod.write(out, made)
        typer.echo(f"whet eval: wrote {out}", err=True)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
