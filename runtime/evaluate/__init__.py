"""Held-out evaluation without a training stack: a model folder or an OpenAI-compatible
endpoint on the evaluator's tasks, judged on the configured sandbox, with its statistics.

`round` chooses the tasks, judges a sampler's attempts and tallies them; `torch_sampler` and
`endpoint` are the two samplers (`episodes` plays tool tasks for the first, many episodes at
once); `record` is the file `whet eval --out` writes. `whet eval` (`runtime.cli.eval`) is the
command; `evaluate` is the call `bench/vs_trl` makes. Nothing
here trains, publishes or starts a stack.
"""

from runtime.evaluate.round import TaskResult, evaluate, heldout_tasks, run_round, tally

__all__ = ["TaskResult", "evaluate", "heldout_tasks", "run_round", "tally"]
