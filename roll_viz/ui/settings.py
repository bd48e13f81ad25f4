"""From the sidebar's generic widget values to each dialect's own config keys (no widgets here).

The same sidebar drives every dialect: ``native_config`` asks the dialect to translate the generic
controls (beta, gamma, lam ...) into its own keys over its shipped DEFAULTS (``to_native``), then
applies page overrides. Everything framework-specific is the dialect's
(``roll_viz.core.pipeline.dialects``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_viz import rewards
from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.data.presets import PRESETS
from roll_viz.ui.state import PRESET_REWARD, AppState


# ---------------------------------------------------------------------------------------------
# Presets and rewards
# ---------------------------------------------------------------------------------------------
def preset_defaults(name: str) -> tuple[Any, Any]:
    """(SamplingConfig, RewardSpec) the preset was made with."""
    _description, sampling, reward = PRESETS[name]
    return sampling, reward


def reward_choices(reward_spec: Any) -> list[str]:
    """Reward selector options: "preset" first when the preset sums several rewards."""
    names = list(rewards.REWARD_FNS)
    return [PRESET_REWARD, *names] if len(reward_spec.terms) > 1 else names


def default_reward_choice(reward_spec: Any) -> str:
    """The selector value that reproduces a preset's reward exactly."""
    return PRESET_REWARD if len(reward_spec.terms) > 1 else reward_spec.terms[0][0]


def describe_terms(terms: tuple) -> str:
    """'1 x one_sentence + 1 x target_length(target=20, tolerance=20)' for a caption."""
    parts = []
    for name, weight, params in terms:
        args = ", ".join(f"{k}={v}" for k, v in params)
        parts.append(f"{weight:g} x {name}" + (f"({args})" if args else ""))
    return " + ".join(parts)


def reward_defaults(reward_spec: Any) -> tuple[str, dict]:
    """(reward name, params dict) of the first term of a RewardSpec."""
    name, _weight, params = reward_spec.terms[0]
    return name, dict(params)


# ---------------------------------------------------------------------------------------------
# Dialects
# ---------------------------------------------------------------------------------------------
def generic_defaults(framework: str) -> dict[str, Any]:
    """Widget values that reproduce the dialect's shipped defaults."""
    return dialects.get(framework).from_native()


def native_config(
    framework: str, generic: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict:
    """The dialect config: the generic controls in the dialect's keys, then overrides.

    A generic value that the dialect does not accept (an estimator name of another dialect, a
    knob the dialect lacks) is skipped, so the same sidebar drives every dialect. The sidebar's
    reward normalisation (``generic["norm"]``, a stage of the chain) is applied here, so every
    config built from the sidebar (another estimator on Advantages, a KL placement on Token KL)
    normalises as the sidebar's own does.

    Args:
        framework: one of pipeline.FRAMEWORKS.
        generic: generic control name -> widget value (names as in pipeline.ALIASES).
        overrides: framework keys (or generic names) -> values, applied last.

    Returns:
        A fresh dict with the framework's own key names.
    """
    dialect = dialects.get(framework)
    config = dict(dialect.to_native(dict(generic)))
    norm = generic.get("norm")
    config.update((norm_overrides(framework, norm) if norm else None) or {})
    for name, value in (overrides or {}).items():
        in_defaults = name in dialect.DEFAULTS or name not in dialect.ALIASES
        key = name if in_defaults else dialect.ALIASES[name]
        if key is None:
            continue
        config[key] = value
    return config


#: batch inputs beyond scores, masks and log-probs the app produces: the live sampler scores
#: sum pi^2 at every position (``Rollout.sum_pi_squared``, which verl's optimal token baseline
#: reads); a batch without it (a preset, a run file, an engine's top-K rollout) gets the
#: estimator's one-line error instead
APP_INPUTS = frozenset({"sum_pi_squared"})


def offered(framework: str, estimator: str) -> bool:
    """Whether the pages offer an estimator: every batch input it reads is one the app makes."""
    return set(dialects.get(framework).ESTIMATOR_INPUTS.get(estimator, ())) <= APP_INPUTS


def estimator_options(framework: str) -> tuple[str, ...]:
    """The advantage estimators (or TRL scale_rewards modes) a dialect offers on the pages.

    Estimators that need batch inputs the app does not produce stay in the calculator only
    (``APP_INPUTS``).
    """
    options = pipeline.CHOICES[framework].get(pipeline.ESTIMATOR_KEY[framework], ())
    return tuple(est for est in options if offered(framework, est))


def estimator_overrides(framework: str, estimator: str) -> dict[str, Any]:
    """Config overrides that select ``estimator`` in ``framework``."""
    return {pipeline.ESTIMATOR_KEY[framework]: estimator}


def norm_overrides(framework: str, mode: str) -> dict[str, Any] | None:
    """Overrides for a reward-normalization mode (none/group/batch/running).

    Args:
        framework: dialect.
        mode: "none", "group", "batch" or "running".

    Returns:
        The dialect's normalization keys, or None where it has no such stage.
    """
    return dialects.get(framework).norm_config(mode)


def kl_placement_overrides(framework: str, in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Overrides that put the KL in the token rewards (True) or in the loss (False).

    Args:
        framework: dialect.
        in_reward: where the KL goes.
        beta: coefficient to use in either place (the loss coefficient is set to it too).

    Returns:
        The overrides, or None where the dialect cannot do it (TRL GRPO: loss only).
    """
    return dialects.get(framework).kl_placement(in_reward, beta)


def generic_value(state: AppState, name: str, default: Any = None) -> Any:
    """The sidebar's value of a generic control (beta, gamma, lam, estimator, ...)."""
    return dict(state.generic).get(name, default)
