"""From judged groups to training samples, and from samples to padded tensors.

Consumes groups of verdicts (`policy.groups.Group`), the learner's policy version and the
staleness bound; produces `TrainSample`s (token ids, which tokens the model sampled, their
behaviour logprobs, the advantage), per-batch counts (dropped, stale, without signal) and
the members of a group a refill batch counts (`signal_members`). Multi-turn attempts train
on every model turn's completion; prompts and feedback are context only. With per-step
credit (`credit="step"`), a tool episode's tokens get their own advantages (`policy.credit`:
the trajectory's plus their step's). Also shards samples across ranks and micro-batches,
and collates them.

It does not run the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from bus.codec import unpack_f32, unpack_ids
from bus.messages import Attempt, Verdict
from policy.credit import step_advantages, token_advantages
from policy.groups import Group
from policy.objective import group_advantages


@dataclass
class TrainSample:
    """One attempt ready to train on."""

    verdict_id: str
    group_id: str
    policy_version: int
    advantage: float
    ids: np.ndarray
    "Every token of the trajectory (int64)."
    sampled: np.ndarray
    "True where the token was sampled by the policy (a completion token)."
    behav: np.ndarray
    "Behaviour logprob of each token (0 where not sampled)."
    token_advantages: np.ndarray | None = None
    "Advantage of each token (per-step credit); None: `advantage` for every token."

    @property
    def tokens(self) -> int:
        return int(self.sampled.sum())


@dataclass
class Assembled:
    """A batch after advantages and filters, with what was left out and why."""

    samples: list[TrainSample] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)
    "Every verdict id of the batch's groups: trained or not, none is looked at again."
    rewards: list[float] = field(default_factory=list)
    passed: int = 0
    hacks: int = 0
    "Members flagged as hacks (they carry the hack reward, the lowest there is)."
    staleness: list[int] = field(default_factory=list)
    batch_tokens: int = 0
    ("Completion tokens of the trained and the zero-signal samples: what TRL's \"dapo\" "
     "divides by (`learner.loss_divisor = \"batch_tokens\"`).")
    left_out: dict[str, list[str]] = field(default_factory=dict)
    """Verdict ids consumed without training, by reason: 'dropped' (the judge dropped it, or
    it has no reward), 'stale' (older than the bound) or 'no_signal' (zero advantage)."""

    def leave_out(self, verdict_id: str, reason: str) -> None:
        self.left_out.setdefault(reason, []).append(verdict_id)

    @property
    def dropped(self) -> int:
        return len(self.left_out.get("dropped", []))

    @property
    def stale(self) -> int:
        return len(self.left_out.get("stale", []))

    @property
    def no_signal(self) -> int:
        return len(self.left_out.get("no_signal", []))

    def figures(self) -> dict[str, Any]:
        """The batch's figures as `bus.messages.StepRecord` fields: samples, what was left
        out and why, mean reward, pass rate, hacks and staleness of the judged members."""
        rewards, ages = self.rewards, self.staleness
        return dict(
            samples=len(self.samples),
            left_out={reason: len(ids) for reason, ids in self.left_out.items()},
            mean_reward=round(sum(rewards) / len(rewards), 4) if rewards else None,
            pass_rate=round(self.passed / len(rewards), 4) if rewards else None,
            hacks=self.hacks, staleness_mean=round(sum(ages) / len(ages), 3) if ages else None,
            staleness_max=max(ages, default=None), stale_rejected=self.stale,
            dropped=self.dropped, no_signal=self.no_signal)


def trajectory(attempt: Attempt, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, sampled mask, behaviour logprobs) of every turn, cut to `max_len` tokens."""
    ids, sampled, behav = [], [], []
    for turn in attempt.turns:
        prompt, completion = unpack_ids(turn.prompt_ids), unpack_ids(turn.completion_ids)
        logps = unpack_f32(turn.logprobs)
        if len(logps) != len(completion):
            raise ValueError(f"attempt {attempt.attempt_id}: {len(completion)} tokens but "
                             f"{len(logps)} logprobs")
        ids += [prompt, completion]
        sampled += [np.zeros(len(prompt), bool), np.ones(len(completion), bool)]
        behav += [np.zeros(len(prompt), np.float32), logps.astype(np.float32)]
    return (np.concatenate(ids).astype(np.int64)[:max_len],
            np.concatenate(sampled)[:max_len], np.concatenate(behav)[:max_len])


def trajectory_problem(attempt: Attempt, vocab_size: int) -> str | None:
    """Why `attempt` cannot be trained on (token ids outside the vocabulary, logprobs that do
    not match the completion, nothing sampled), or None if it can."""
    if not attempt.turns:
        return f"attempt {attempt.attempt_id} has no turns"
    for n, turn in enumerate(attempt.turns):
        for field_name in ("prompt_ids", "completion_ids"):
            raw = getattr(turn, field_name)
            if len(raw) % 4:
                return f"attempt {attempt.attempt_id} turn {n}: {field_name} is not int32 data"
            ids = unpack_ids(raw)
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
                return (f"attempt {attempt.attempt_id} turn {n}: {field_name} has ids outside "
                        f"0..{vocab_size - 1}")
        if len(turn.logprobs) != len(turn.completion_ids):
            return (f"attempt {attempt.attempt_id} turn {n}: {len(turn.completion_ids) // 4} "
                    f"tokens but {len(turn.logprobs) // 4} logprobs")
        if not np.isfinite(unpack_f32(turn.logprobs)).all():
            return f"attempt {attempt.attempt_id} turn {n}: logprobs are not all finite"
    return None


def _usable(verdict: Verdict) -> bool:
    return (verdict.trainable and verdict.outcome != "dropped" and verdict.reward is not None
            and verdict.attempt.purpose == "train")


def signal_members(group: Group) -> int:
    """Members of `group` with a reward, if their rewards differ (the group has a signal),
    else 0: what a refill batch counts towards its size (`training.zero_signal`)."""
    rewards = [v.reward if _usable(v) else None for v, _ in group.members.values()]
    advantages = group_advantages(rewards)
    return sum(a is not None for a in advantages) if any(advantages) else 0


def _step_advantages(verdicts: list[Verdict], rewards: list[float | None],
                     scale: bool) -> list[list[float] | None]:
    """Each usable attempt's step advantages (`policy.credit`), None for the others."""
    return step_advantages([[(s.state, s.reward) for s in v.attempt.steps] if r is not None
                            else None for v, r in zip(verdicts, rewards)], scale)


def assemble(groups: Iterable[Group], version: int, max_staleness: int, scale: bool,
             max_len: int, keep_no_signal: bool = False, credit: str = "trajectory",
             step_weight: float = 1.0) -> Assembled:
    """Advantages per group (with `credit="step"`, per token: `policy.credit`), then the
    samples worth a gradient."""
    out = Assembled()
    for group in groups:
        verdicts = [v for v, _ in group.members.values()]
        out.consumed += [v.verdict_id for v in verdicts]
        rewards = [v.reward if _usable(v) else None for v in verdicts]
        steps = (_step_advantages(verdicts, rewards, scale) if credit == "step"
                 else [None] * len(verdicts))
        for verdict, reward, adv, step_adv in zip(verdicts, rewards,
                                                  group_advantages(rewards, scale), steps):
            if adv is None or reward is None:
                out.leave_out(verdict.verdict_id, "dropped")
                continue
            out.rewards.append(reward)
            out.passed += verdict.outcome == "pass"
            out.hacks += verdict.outcome == "hack"
            lag = version - verdict.attempt.policy_version
            if lag > max_staleness:
                out.leave_out(verdict.verdict_id, "stale")
                continue
            per_token = None
            if step_adv and any(step_adv):
                spans = [(s.start, s.end) for s in verdict.attempt.steps]
                per_token = token_advantages(min(_length(verdict.attempt), max_len), adv, spans,
                                             step_adv, step_weight)
            ids, sampled, behav = trajectory(verdict.attempt, max_len)
            out.batch_tokens += int(sampled.sum())
            if not sampled.any() or (adv == 0.0 and per_token is None and not keep_no_signal):
                out.leave_out(verdict.verdict_id, "no_signal")
                continue
            out.staleness.append(lag)
            out.samples.append(TrainSample(verdict.verdict_id, group.group_id,
                                           verdict.attempt.policy_version, adv, ids, sampled,
                                           behav, per_token))
    return out


def _length(attempt: Attempt) -> int:
    return sum((len(t.prompt_ids) + len(t.completion_ids)) // 4 for t in attempt.turns)


def split_even(items: list, parts: int) -> list[list]:
    """`items` in `parts` contiguous chunks whose sizes differ by at most one."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out


def shard(samples: list[TrainSample], world: int) -> list[list[TrainSample]]:
    """Samples dealt to `world` ranks, longest first, each to the rank with fewest tokens."""
    ranks: list[list[TrainSample]] = [[] for _ in range(world)]
    load = [0] * world
    for s in sorted(samples, key=lambda s: -len(s.ids)):
        r = load.index(min(load))
        ranks[r].append(s)
        load[r] += len(s.ids)
    return ranks


def collate(samples: list[TrainSample], pad_id: int) -> dict[str, np.ndarray]:
    """Right-padded arrays; the per-position ones are shifted to predict the next token."""
    width = max(2, max(len(s.ids) for s in samples))
    rows = len(samples)
    ids = np.full((rows, width), pad_id, np.int64)
    attention = np.zeros((rows, width), np.int64)
    sampled = np.zeros((rows, width), np.float32)
    behav = np.zeros((rows, width), np.float32)
    adv = np.zeros((rows, width), np.float32)
    for r, s in enumerate(samples):
        n = len(s.ids)
        ids[r, :n], attention[r, :n] = s.ids, 1
        sampled[r, :n], behav[r, :n] = s.sampled, s.behav
        adv[r, :n] = s.advantage if s.token_advantages is None else s.token_advantages
    return {"input_ids": ids, "attention_mask": attention, "targets": ids[:, 1:],
            "mask": sampled[:, 1:], "behav": behav[:, 1:], "advantages": adv[:, 1:]}


def placeholder(pad_id: int) -> TrainSample:
    """A two-token sample with nothing to learn: keeps ranks in step when one has no data."""
    return TrainSample("", "", 0, 0.0, np.full(2, pad_id, np.int64), np.zeros(2, bool),
                       np.zeros(2, np.float32))
