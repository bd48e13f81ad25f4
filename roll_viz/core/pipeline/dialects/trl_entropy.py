"""TRL's adaptive entropy coefficient (``use_adaptive_entropy``), as ``GRPOTrainer`` steps it.

``applied_entropy_coef`` is the coefficient a step applies; ``next_entropy_coef`` the one TRL
logs after the step's update. ``trl.py`` reads both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def applied_entropy_coef(cfg: Mapping[str, Any]) -> float:
    """The entropy coefficient this step applies (``_compute_loss``'s ``apply_coef``).

    Static: ``entropy_coef``. Adaptive: ``entropy_coef`` while the previous step's window
    entropy is <= ``entropy_target``, else 0 (TRL starts that entropy at +inf).
    """
    if not cfg["use_adaptive_entropy"]:
        return cfg["entropy_coef"]
    last = cfg["viz_last_world_entropy"]
    return cfg["entropy_coef"] if last is not None and last <= cfg["entropy_target"] else 0.0


def next_entropy_coef(cfg: Mapping[str, Any], world_entropy: float) -> float:
    """The adaptive coefficient after this optimizer step.

    +delta while the step's mean entropy is <= the target, else -delta, clamped to
    [entropy_coef_min, entropy_coef_max].
    """
    coef, delta = cfg["entropy_coef"], cfg["entropy_coef_delta"]
    if world_entropy <= cfg["entropy_target"]:
        return min(coef + delta, cfg["entropy_coef_max"])
    return max(coef - delta, cfg["entropy_coef_min"])
