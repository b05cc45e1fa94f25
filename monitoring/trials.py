"""Trial records: a verdict made into a durable record, and records made into table rows.

Consumes verdicts (with the whole attempt inside) and `Trial` records; produces `Trial`
values for the recorder, flat rows for `whet export` (JSON lines or Parquet, one row per
trial with its turns nested) and the Parquet schema. No I/O except `write_parquet`.
Token ids and logprobs are left out of rows unless asked for (they dwarf the text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from bus.codec import unpack_f32, unpack_ids
from bus.errors import WhetError
from bus.messages import Trial, Turn, Verdict


def trial_of(verdict: Verdict, *, run_id: str, current_version: int, recorder: str,
             now: float) -> Trial:
    """The record of one final verdict."""
    return Trial(trial_id=verdict.verdict_id, run_id=run_id, verdict=verdict,
                 current_version=current_version, recorded_at=now, recorder=recorder)


def _turn_row(i: int, turn: Turn, tokens: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "turn": i, "completion": turn.completion, "feedback": turn.feedback,
        "policy_version": turn.policy_version, "generator": turn.generator,
        "finish_reason": turn.finish_reason, "executor": turn.executor,
        "execution": msgspec.to_builtins(turn.execution) if turn.execution else None,
    }
    if tokens:
        row.update(prompt_ids=unpack_ids(turn.prompt_ids).tolist(),
                   completion_ids=unpack_ids(turn.completion_ids).tolist(),
                   logprobs=unpack_f32(turn.logprobs).tolist())
    return row


def trial_row(trial: Trial, *, tokens: bool = False) -> dict[str, Any]:
    """One flat row: task, attempt, verdict and who handled it; turns nested in order."""
    v = trial.verdict
    a, t = v.attempt, v.attempt.task
    turns = [_turn_row(i, turn, tokens) for i, turn in enumerate(a.turns)]
    return {
        "run_id": trial.run_id, "trial_id": trial.trial_id, "group_id": a.group_id,
        "index": a.index, "group_size": a.group_size, "task_id": t.task_id, "env": t.env,
        "env_version": t.env_version, "domain": t.domain, "split": t.split,
        "difficulty": t.difficulty, "purpose": a.purpose, "prompt": t.prompt,
        "completion": a.turns[-1].completion if a.turns else "",
        "policy_version": a.policy_version, "admitted_version": a.admitted_version,
        "current_version": trial.current_version, "outcome": v.outcome, "reward": v.reward,
        "components": dict(v.components), "cause": v.cause, "evidence": v.evidence,
        "trainable": v.trainable,
        "layers": [msgspec.to_builtins(layer) for layer in v.layers],
        "turns": turns,
        "generators": sorted({x.generator for x in a.turns if x.generator}),
        "executors": sorted({x.executor for x in a.turns if x.executor}),
        "judge": v.judge, "judged_at": v.judged_at, "recorder": trial.recorder,
        "recorded_at": trial.recorded_at,
    }


def arrow_schema(tokens: bool = False):
    """The Parquet schema of `trial_row` rows."""
    import pyarrow as pa

    execution = pa.struct([
        ("status", pa.string()), ("exit_code", pa.int64()), ("signal", pa.int64()),
        ("wall_s", pa.float64()), ("cpu_s", pa.float64()), ("peak_memory_mb", pa.float64()),
        ("stdout", pa.string()), ("stderr", pa.string()), ("stdout_truncated", pa.bool_()),
        ("stderr_truncated", pa.bool_()), ("report", pa.string()),
        ("sandbox_failed", pa.bool_()), ("sandbox_error", pa.string()), ("backend", pa.string())])
    turn_fields = [("turn", pa.int64()), ("completion", pa.string()), ("feedback", pa.string()),
                   ("policy_version", pa.int64()), ("generator", pa.string()),
                   ("finish_reason", pa.string()), ("executor", pa.string()),
                   ("execution", execution)]
    if tokens:
        turn_fields += [("prompt_ids", pa.list_(pa.int32())),
                        ("completion_ids", pa.list_(pa.int32())),
                        ("logprobs", pa.list_(pa.float32()))]
    layer = pa.struct([("name", pa.string()), ("passed", pa.int64()), ("total", pa.int64()),
                       ("ok", pa.bool_()), ("detail", pa.string())])
    text, i64, f64 = pa.string(), pa.int64(), pa.float64()
    return pa.schema([
        ("run_id", text), ("trial_id", text), ("group_id", text), ("index", i64),
        ("group_size", i64), ("task_id", text), ("env", text), ("env_version", text),
        ("domain", text), ("split", text), ("difficulty", f64), ("purpose", text),
        ("prompt", text), ("completion", text), ("policy_version", i64),
        ("admitted_version", i64), ("current_version", i64), ("outcome", text),
        ("reward", f64), ("components", pa.map_(text, f64)), ("cause", text),
        ("evidence", text), ("trainable", pa.bool_()), ("layers", pa.list_(layer)),
        ("turns", pa.list_(pa.struct(turn_fields))), ("generators", pa.list_(text)),
        ("executors", pa.list_(text)), ("judge", text), ("judged_at", f64),
        ("recorder", text), ("recorded_at", f64)])


class ParquetSink:
    """Rows appended in batches to one Parquet file (memory stays bounded by the batch)."""

    def __init__(self, path: Path, *, tokens: bool = False, batch: int = 1000) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise WhetError("parquet export needs pyarrow: pip install 'whetstone[export]'") from None
        self._pa = pa
        self.schema = arrow_schema(tokens)
        self.writer = pq.ParquetWriter(path, self.schema)
        self.batch = batch
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        row = dict(row, components=list(row["components"].items()))  # a map takes pairs
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.writer.write_table(self._pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()
