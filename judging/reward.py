"""Compose the reward of a judged attempt from its layers, under the `[judge.reward]` weights.

Consumes whether the candidate compiled, whether it followed the format, the test layers,
the number of turns and whether it was flagged as a hack; produces the total and every
component (`compose` lists them); the components always sum to the total. A hack always
scores strictly below anything an honest attempt can. Dropped attempts get no reward at all
(None), decided by the caller. It runs nothing.
"""

from __future__ import annotations

from bus.messages import LayerResult
from judging.config import RewardConfig

COMPONENTS = ("compile", "tests", "format", "turns", "hack", "clip")
QUALITY_COMPONENTS = ("lint", "types", "runtime")
"Optional: only on a passing attempt judged with `[judge.reward.quality]` on."


def pass_ratio(layers: list[LayerResult], weights: RewardConfig) -> float:
    """Weighted pass ratio over the test layers that have tests (0 when none has)."""
    by_name = {"visible": weights.visible, "hidden": weights.hidden, "robustness": weights.robustness}
    used = [(by_name[layer.name], layer.passed / layer.total) for layer in layers
            if layer.name in by_name and layer.total > 0 and by_name[layer.name] > 0]
    total_weight = sum(w for w, _ in used)
    return sum(w * r for w, r in used) / total_weight if total_weight else 0.0


def compose(*, compiled: bool, format_ok: bool, layers: list[LayerResult], turns: int,
            hack: bool, weights: RewardConfig,
            quality: dict[str, float] | None = None) -> tuple[float, dict[str, float]]:
    """(total, components) for one attempt; `quality` holds the bonuses of a pass. Components:

    - `compile`: the (negative) reward for code that does not compile, which replaces tests and format;
    - `tests`: `tests` weight times the pass ratio, each layer weighted (`visible`, `hidden`,
      `robustness`; layers without tests are left out and the rest renormalized);
    - `format`: the format bonus, when the format was followed;
    - `turns`: minus `turn_penalty` per turn after the first;
    - `hack`: what brings a flagged attempt to the hack reward (`RewardConfig.hack_reward`, by
      default the minimum), strictly below anything an honest attempt can score (`JudgeConfig`
      refuses weights where it is not): in a group a hack always gets a lower advantage than an
      honest failure, a syntax error included;
    - `clip`: what clipping to [minimum, maximum] took off;
    - `lint`, `types`, `runtime`: quality bonuses (`judging.quality`), present only when the
      caller passes them, which it does for a passing attempt with quality on, and never
      otherwise: a verdict without quality has none of these keys."""
    parts = dict.fromkeys(COMPONENTS, 0.0)
    if quality and not hack:
        parts.update({name: quality[name] for name in QUALITY_COMPONENTS if name in quality})
    if compiled:
        parts["tests"] = weights.tests * pass_ratio(layers, weights)
        parts["format"] = weights.format if format_ok else 0.0
    else:
        parts["compile"] = weights.compile_error
    parts["turns"] = -weights.turn_penalty * max(turns - 1, 0)
    total = sum(parts.values())
    if hack:
        parts["hack"] = weights.hack_reward - total
        total = weights.hack_reward
    clipped = min(max(total, weights.minimum), weights.maximum)
    parts["clip"] = clipped - total
    return clipped, {k: round(v, 6) for k, v in parts.items()}
