"""TRL's adaptive entropy coefficient (``use_adaptive_entropy``), as ``GRPOTrainer`` steps it.

``applied_entropy_coef`` is the coefficient a step applies; ``next_entropy_coef`` the one TRL
logs after the step's update. ``trl.py`` reads both. The rule itself is written once, in
``core.pipeline.entropy_control.EntropyTarget`` (TRL PR #6140); this module only reads TRL's
config keys into it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from roll_viz.core.pipeline.entropy_control import EntropyTarget


def _controller(cfg: Mapping[str, Any]) -> EntropyTarget:
    last = cfg["viz_last_world_entropy"]
    return EntropyTarget(
        target=cfg["entropy_target"],
        coef=cfg["entropy_coef"],
        delta=cfg["entropy_coef_delta"],
        coef_min=cfg["entropy_coef_min"],
        coef_max=cfg["entropy_coef_max"],
        last_entropy=math.inf if last is None else float(last),  # TRL starts it at +inf
    )


def applied_entropy_coef(cfg: Mapping[str, Any]) -> float:
    """The entropy coefficient this step applies (``_compute_loss``'s ``apply_coef``).

    Static: ``entropy_coef``. Adaptive: ``entropy_coef`` while the previous step's window
    entropy is <= ``entropy_target``, else 0.
    """
    if not cfg["use_adaptive_entropy"]:
        return cfg["entropy_coef"]
    return _controller(cfg).applied()


def next_entropy_coef(cfg: Mapping[str, Any], world_entropy: float) -> float:
    """The adaptive coefficient after this optimizer step.

    +delta while the step's mean entropy is <= the target, else -delta, clamped to
    [entropy_coef_min, entropy_coef_max].
    """
    return _controller(cfg).after(world_entropy).coef
