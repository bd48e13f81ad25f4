"""An adaptive entropy target: the entropy bonus's coefficient steered toward a target entropy.

TRL PR #6140 (TRL 1.16 ``GRPOTrainer._compute_loss``, ``use_adaptive_entropy``) keeps an
entropy coefficient c and the previous optimizer step's mean token entropy H_prev (+inf before
the first step). Each step:

- applies the bonus ``loss -= c_applied * H`` with c_applied = c while H_prev <= target, else 0
  (so the first step applies none);
- after the step, with H this step's mean entropy: c <- min(c + delta, c_max) when H <= target,
  else max(c - delta, c_min); H_prev <- H.

So the bonus switches on only once the entropy has fallen to the target, and its size grows
step by step while the entropy stays low. ``EntropyTarget`` is that state as a frozen record
(``after`` returns the next one); ``entropy_curve`` runs it over a sequence of entropies (the
curve a training page draws). Framework-neutral: a dialect puts ``applied()`` under its own
entropy-coefficient key (``dialects/entropy_keys``). TRL's own path in its dialect (``trl.py``:
``applied_entropy_coef`` / ``next_entropy_coef``) is the same rule; the tests check both.

What roll-viz simplifies: one process, one micro-batch per optimizer step (TRL sums the entropy
over the accumulation window and all ranks before the update: the same mean here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

#: the names of the controller's numbers per training step (run files, curves)
METRIC_APPLIED, METRIC_NEXT, METRIC_TARGET = "ent_coef_applied", "ent_coef_next", "ent_target"

#: TRL 1.16's GRPOConfig defaults of the rule's parameters
DEFAULT_TARGET = 0.2
DEFAULT_DELTA = 0.005
DEFAULT_MIN = 0.0
DEFAULT_MAX = 1.0


@dataclass(frozen=True)
class EntropyTarget:
    """The controller's state between optimizer steps.

    Attributes:
        target: the target mean token entropy (nats, > 0).
        coef: the current coefficient c (the initial one before any step).
        delta: the step of c per optimizer step (> 0).
        coef_min: the lower clamp of c.
        coef_max: the upper clamp of c.
        last_entropy: the previous step's mean entropy (+inf before the first step).
    """

    target: float = DEFAULT_TARGET
    coef: float = 0.0
    delta: float = DEFAULT_DELTA
    coef_min: float = DEFAULT_MIN
    coef_max: float = DEFAULT_MAX
    last_entropy: float = math.inf

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.target) and self.target > 0):
            problems.append("target must be a finite number > 0")
        if not (math.isfinite(self.delta) and self.delta > 0):
            problems.append("delta must be a finite number > 0")
        if not (0 <= self.coef_min <= self.coef_max and math.isfinite(self.coef_max)):
            problems.append("need 0 <= coef_min <= coef_max (finite)")
        if not (math.isfinite(self.coef) and self.coef >= 0):
            problems.append("coef must be a finite number >= 0")
        if problems:
            raise ValueError("invalid EntropyTarget: " + "; ".join(problems))

    def applied(self) -> float:
        """The coefficient this step's loss applies (0 until the entropy reached the target)."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def after(self, entropy: float) -> EntropyTarget:
        """The state after a step whose mean token entropy was ``entropy``.

        Raises:
            ValueError: a non-finite entropy (a step without a valid token must not move c).
        """
        if not math.isfinite(entropy):
            raise ValueError(f"entropy must be finite, got {entropy!r}")
        if entropy <= self.target:
            coef = min(self.coef + self.delta, self.coef_max)
        else:
            coef = max(self.coef - self.delta, self.coef_min)
        return replace(self, coef=coef, last_entropy=float(entropy))


def entropy_curve(start: EntropyTarget, entropies: Sequence[float]) -> list[tuple[float, float]]:
    """(applied coefficient, coefficient after the step) for each step's mean entropy in turn."""
    state, out = start, []
    for entropy in entropies:
        applied = state.applied()
        state = state.after(entropy)
        out.append((applied, state.coef))
    return out
