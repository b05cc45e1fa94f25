"""The curriculum: which training task to practise next. Pure logic, no I/O.

Consumes training tasks (id, domain, rung), one verdict at a time, and a seeded rng;
produces task choices, by band, ladder, mix and replay (`Curriculum`); domains follow the mix
exactly, not by chance (`MixDraw`, which TRL's side of bench/vs_trl shares). Held-out tasks are
refused at `add`, so they can never be chosen. Every choice is O(domains + rungs),
independent of the pool size: tasks live in buckets keyed by (domain, rung, band) with O(1)
add, remove and uniform pick (`Bucket`).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from envs.config import SamplerConfig

BANDS = ("unmeasured", "in_band", "solved", "unsolved")
MIN_EVIDENCE = 2.0
"Decayed attempts a task needs before its pass rate places it in a band."
RUNG_RATE_STEP = 0.05
"Weight of one attempt in a rung's moving pass rate (about the last 20 attempts count)."


class Bucket:
    """A set of ints with O(1) add, remove and uniform choice."""

    __slots__ = ("items", "where")

    def __init__(self) -> None:
        self.items: list[int] = []
        self.where: dict[int, int] = {}

    def add(self, item: int) -> None:
        """Add `item`, which is not in the bucket yet."""
        self.where[item] = len(self.items)
        self.items.append(item)

    def remove(self, item: int) -> None:
        """Remove `item`, which is in the bucket, in O(1) (the last item takes its place)."""
        pos = self.where.pop(item)
        last = self.items.pop()
        if last != item:
            self.items[pos] = last
            self.where[last] = pos

    def choice(self, rng: random.Random) -> int:
        """A uniformly chosen item."""
        return self.items[int(rng.random() * len(self.items))]

    def __len__(self) -> int:
        return len(self.items)


class MixDraw:
    """Domains in their mix ratio exactly, not by a weighted coin: each draw credits every
    domain its share and takes the one owed most (smooth weighted round robin), so any run of
    draws holds each domain within one of its share. Ties go to the first listed. With mix
    data 0.5, structured 0.5 a batch of four groups is two and two; a weighted coin per draw
    gave TRL's side of bench/vs_trl 21 or 22 of 32 groups of one domain in each of three seeds
    (results/short_lean_mb2_trl1_fence/draws.json)."""

    def __init__(self, mix: dict[str, float]) -> None:
        self.mix = {d: w for d, w in mix.items() if w > 0}
        self.owed = {d: 0.0 for d in self.mix}

    def next(self, present: list[str] | None = None) -> str:
        """The next domain, among `present` (default: every domain of the mix) only: a domain
        absent now earns no credit meanwhile."""
        domains = [d for d in self.mix if present is None or d in present]
        if not domains:
            raise ValueError("no domain of the mix to draw from")
        total = sum(self.mix[d] for d in domains)
        for d in domains:
            self.owed[d] += self.mix[d] / total
        pick = max(domains, key=lambda d: self.owed[d])
        self.owed[pick] -= 1.0
        return pick


@dataclass
class Frontier:
    """A domain's frontier rung, with the attempts and passes measured at it since it became the
    frontier (halved at each check that moves nothing: older evidence counts half)."""

    rung: int = 0
    attempts: float = 0.0
    passes: float = 0.0


class Curriculum:
    """The training pool and its statistics.

    - Band: each task has a pass rate that follows the policy (older attempts fade by
      `rate_memory` each time the task is measured again). Tasks inside [band_low, band_high]
      and unmeasured tasks are favoured; always-solved and never-solved tasks get
      `out_of_band_weight`, so they are sampled rarely, not never.
    - Ladder: each domain has a frontier rung. Rungs are sampled by `ladder_weights` at
      `ladder_offsets` around it; the frontier moves up when its pass rate reaches
      `promote_at`, down when it falls under `demote_at`.
    - Mix: domains follow their `mix` ratio exactly (`MixDraw`); a domain without one is never
      practised.
    - Replay: `replay_share` of choices go to easy tasks (rungs below the frontier, or solved).
    - Without replacement (`without_replacement`): a task drawn by band rests (out of its
      bucket, in `resting`) until no task of its domain and rung is left to draw; then they
      all return. With `pass_over = "ladder"` the pass spans the rungs the ladder reaches:
      the ladder draws only among those with tasks left, and they all return together.
      Resting is not saved: a restart begins a new pass."""

    def __init__(self, config: SamplerConfig, mix: dict[str, float]) -> None:
        self.config = config
        self.draw = MixDraw(mix)
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.domain: list[str] = []
        self.rung: list[int] = []
        self.attempts: list[float] = []
        self.passes: list[float] = []
        self.last_group: list[str] = []
        self.band: list[str] = []
        self.resting: dict[tuple[str, int], set[int]] = {}
        "Tasks drawn in the current pass of their (domain, rung), out of their buckets."
        self.buckets: dict[tuple[str, int, str], Bucket] = {}
        self.rungs: dict[str, list[int]] = {}
        self.frontiers: dict[str, Frontier] = {}
        self.rung_rates: dict[tuple[str, int], float] = {}
        "Pass rate of each (domain, rung) on the recent policy (moving average of attempts)."
        self.band_weight = {"unmeasured": config.unmeasured_weight, "in_band": 1.0,
                            "solved": config.out_of_band_weight,
                            "unsolved": config.out_of_band_weight}

    @property
    def mix(self) -> dict[str, float]:
        """The domains practised and their mix ratios (above 0): the draw's."""
        return self.draw.mix

    # --- pool --------------------------------------------------------------------------

    def add(self, task_id: str, domain: str, rung: int, split: str = "train") -> None:
        """Put a training task in the pool (a repeat id is ignored)."""
        if split != "train":
            raise ValueError(f"{task_id}: {split} tasks are never sampled for training")
        if task_id in self.index:
            return
        i = len(self.ids)
        self.index[task_id] = i
        self.ids.append(task_id)
        self.domain.append(domain)
        self.rung.append(rung)
        self.attempts.append(0.0)
        self.passes.append(0.0)
        self.last_group.append("")
        self.band.append("unmeasured")
        self._bucket(domain, rung, "unmeasured").add(i)
        rungs = self.rungs.setdefault(domain, [])
        if rung not in rungs:
            bisect.insort(rungs, rung)
        frontier = self.frontiers.setdefault(domain, Frontier(rung))
        frontier.rung = min(frontier.rung, rung) if frontier.attempts == 0 else frontier.rung

    def __len__(self) -> int:
        return len(self.ids)

    def _bucket(self, domain: str, rung: int, band: str) -> Bucket:
        key = (domain, rung, band)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket()
        return bucket

    # --- measuring ---------------------------------------------------------------------

    def pass_rate(self, task_id: str) -> float | None:
        """The task's current pass rate, or None while unmeasured."""
        i = self.index[task_id]
        return self.passes[i] / self.attempts[i] if self.attempts[i] >= MIN_EVIDENCE else None

    def graded_difficulty(self, task_id: str) -> float | None:
        """Difficulty as measured on the current policy: 1 - pass rate (None if unmeasured)."""
        rate = self.pass_rate(task_id)
        return None if rate is None else 1.0 - rate

    def record(self, task_id: str, passed: bool, group_id: str = "") -> None:
        """One judged attempt at `task_id`; unknown ids (held-out, removed) are ignored."""
        i = self.index.get(task_id)
        if i is None:
            return
        if group_id and group_id != self.last_group[i]:
            self.attempts[i] *= self.config.rate_memory
            self.passes[i] *= self.config.rate_memory
            self.last_group[i] = group_id
        self.attempts[i] += 1.0
        self.passes[i] += 1.0 if passed else 0.0
        key = (self.domain[i], self.rung[i])
        old = self.rung_rates.get(key)
        self.rung_rates[key] = float(passed) if old is None else \
            old + RUNG_RATE_STEP * (float(passed) - old)
        self._rebucket(i)
        self._move_frontier(i, passed)

    def _rebucket(self, i: int) -> None:
        rate = self.passes[i] / self.attempts[i] if self.attempts[i] >= MIN_EVIDENCE else None
        if rate is None:
            band = "unmeasured"
        elif rate > self.config.band_high:
            band = "solved"
        elif rate < self.config.band_low:
            band = "unsolved"
        else:
            band = "in_band"
        if band != self.band[i] and i not in self.resting.get((self.domain[i], self.rung[i]), ()):
            self.buckets[(self.domain[i], self.rung[i], self.band[i])].remove(i)
            self._bucket(self.domain[i], self.rung[i], band).add(i)
        self.band[i] = band

    def _move_frontier(self, i: int, passed: bool) -> None:
        domain, rung = self.domain[i], self.rung[i]
        f = self.frontiers[domain]
        if rung != f.rung:
            return
        f.attempts += 1
        f.passes += passed
        if f.attempts < self.config.min_rung_attempts:
            return
        rate = f.passes / f.attempts
        rungs = self.rungs[domain]
        at = rungs.index(f.rung)
        if rate >= self.config.promote_at and at + 1 < len(rungs):
            self.frontiers[domain] = Frontier(rungs[at + 1])
        elif rate < self.config.demote_at and at > 0:
            self.frontiers[domain] = Frontier(rungs[at - 1])
        else:  # keep a sliding window: older evidence counts half
            f.attempts /= 2
            f.passes /= 2

    # --- choosing ----------------------------------------------------------------------

    def choose(self, rng: random.Random) -> str | None:
        """The next task to practise, or None when no domain with a mix ratio has tasks."""
        domains = [d for d in self.mix if self.rungs.get(d)]
        if not domains:
            return None
        domain = self.draw.next(domains)
        if rng.random() < self.config.replay_share:
            picked = self._replay(rng, domain)
            if picked is not None:
                return self.ids[picked]
        rung = self._ladder_rung(rng, domain)
        bands = self._filled(domain, rung)
        if not bands:  # every task of the rung was drawn in this pass: a new one begins
            self._wake(domain, rung)
            bands = self._filled(domain, rung)
        weights = [self.band_weight[b] * len(self.buckets[(domain, rung, b)]) for b in bands]
        if not sum(weights):
            weights = [float(len(self.buckets[(domain, rung, b)])) for b in bands]
        band = _weighted(rng, bands, weights)
        picked = self.buckets[(domain, rung, band)].choice(rng)
        if self.config.without_replacement:
            self.buckets[(domain, rung, band)].remove(picked)
            self.resting.setdefault((domain, rung), set()).add(picked)
        return self.ids[picked]

    def _wake(self, domain: str, rung: int) -> None:
        """Every resting task of (domain, rung) back in the bucket of its current band."""
        for i in self.resting.pop((domain, rung), ()):
            self._bucket(domain, rung, self.band[i]).add(i)

    def _ladder_rung(self, rng: random.Random, domain: str) -> int:
        rungs = self.rungs[domain]
        frontier = self.frontiers[domain].rung
        reach = [(frontier + offset, weight) for offset, weight
                 in zip(self.config.ladder_offsets, self.config.ladder_weights)
                 if weight > 0 and self._has(domain, frontier + offset)]
        if not reach:
            return min(rungs, key=lambda r: abs(r - frontier))
        if self.config.without_replacement and self.config.pass_over == "ladder":
            left = [(rung, weight) for rung, weight in reach if self._filled(domain, rung)]
            if not left:  # every task the ladder reaches was drawn: a new pass begins
                for rung, _ in reach:
                    self._wake(domain, rung)
                left = reach
            reach = left
        return _weighted(rng, [r for r, _ in reach], [w for _, w in reach])

    def _filled(self, domain: str, rung: int) -> list[str]:
        """The bands of (domain, rung) that hold a task to draw."""
        return [b for b in BANDS if len(self.buckets.get((domain, rung, b), ()))]

    def _has(self, domain: str, rung: int) -> bool:
        return bool(self._filled(domain, rung) or self.resting.get((domain, rung)))

    def _replay(self, rng: random.Random, domain: str) -> int | None:
        frontier = self.frontiers[domain].rung
        below = [r for r in self.rungs[domain] if r < frontier]
        if below:
            rung = below[int(rng.random() * len(below))]
            bands = self._filled(domain, rung)
            if bands:  # none while all of the rung rest (without_replacement)
                band = _weighted(rng, bands, [len(self.buckets[(domain, rung, b)]) for b in bands])
                return self.buckets[(domain, rung, band)].choice(rng)
        solved = [k for k, b in self.buckets.items() if k[0] == domain and k[2] == "solved" and len(b)]
        if solved:
            return self.buckets[solved[int(rng.random() * len(solved))]].choice(rng)
        return None

    # --- reporting and persistence -----------------------------------------------------

    def gauges(self) -> dict[str, float]:
        """Pool size, band counts, frontier and measured pass rate per rung (heartbeats)."""
        out: dict[str, float] = {"pool": float(len(self.ids))}
        for (domain, _, band), bucket in self.buckets.items():
            key = f"{domain}.{band}"
            out[key] = out.get(key, 0.0) + len(bucket)
        for (domain, _), resting in self.resting.items():
            for i in resting:
                key = f"{domain}.{self.band[i]}"
                out[key] = out.get(key, 0.0) + 1
        for domain, f in self.frontiers.items():
            out[f"{domain}.frontier"] = float(f.rung)
        for (domain, rung), rate in self.rung_rates.items():
            out[f"{domain}.L{rung}.pass_rate"] = round(rate, 4)
        return out

    def snapshot(self) -> dict:
        """Pass-rate state by task id, and frontiers (to survive a restart)."""
        return {"tasks": {t: [self.attempts[i], self.passes[i]] for t, i in self.index.items()
                          if self.attempts[i]},
                "frontiers": {d: [f.rung, f.attempts, f.passes] for d, f in self.frontiers.items()}}

    def restore(self, state: dict) -> None:
        """Load a snapshot; ids no longer in the pool are skipped."""
        for task_id, (attempts, passes) in state.get("tasks", {}).items():
            i = self.index.get(task_id)
            if i is not None:
                self.attempts[i], self.passes[i] = float(attempts), float(passes)
                self._rebucket(i)
        for domain, (rung, attempts, passes) in state.get("frontiers", {}).items():
            if domain in self.rungs and rung in self.rungs[domain]:
                self.frontiers[domain] = Frontier(int(rung), float(attempts), float(passes))


def _weighted(rng: random.Random, options: list, weights: list[float]):
    total = sum(weights)
    x = rng.random() * total
    for option, weight in zip(options, weights):
        x -= weight
        if x < 0:
            return option
    return options[-1]
