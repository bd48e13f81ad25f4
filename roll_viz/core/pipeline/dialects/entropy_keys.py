"""Each framework's key for the entropy bonus's coefficient (``loss -= coef * entropy``).

The adaptive entropy target (``core/pipeline/entropy_control``) is framework-neutral: it puts the
coefficient a step applies under the dialect's own key. TRL's native adaptive mode
(``use_adaptive_entropy``) is left off here, so the loss applies exactly the controller's
coefficient as a static one (the same rule, kept outside the loss).
"""

from __future__ import annotations

from typing import Any

#: dialect -> its entropy coefficient key
ENTROPY_COEF_KEYS: dict[str, str] = {
    "roll": "entropy_loss_coef",
    "verl": "entropy_coeff",
    "openrlhf": "entropy_coef",
    "trl": "entropy_coef",
}


def entropy_overrides(framework: str, coef: float) -> dict[str, Any]:
    """The config keys that make ``framework``'s loss apply the entropy bonus ``coef``.

    Raises:
        ValueError: a framework without an entropy bonus key here.
    """
    if framework not in ENTROPY_COEF_KEYS:
        raise ValueError(f"no entropy coefficient key for {framework!r}")
    return {ENTROPY_COEF_KEYS[framework]: float(coef)}
