"""From the sidebar's generic widget values to each dialect's own config keys (no widgets here).

The same sidebar drives every dialect: ``resolve_config`` starts from the dialect's shipped
DEFAULTS, applies the generic controls it accepts (beta, gamma, lam ...) and then page overrides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_viz.ui.state import PRESET_REWARD, AppState, _pipeline, _presets


# ---------------------------------------------------------------------------------------------
# Sidebar
# ---------------------------------------------------------------------------------------------
def _preset_defaults(name: str) -> tuple[Any, Any]:
    """(SamplingConfig, RewardSpec) the preset was made with."""
    _description, sampling, reward = _presets()[name]
    return sampling, reward


def _reward_choices(reward_spec: Any) -> list[str]:
    """Reward selector options: "preset" first when the preset sums several rewards."""
    from roll_viz import rewards

    names = list(rewards.REWARD_FNS)
    return [PRESET_REWARD, *names] if len(reward_spec.terms) > 1 else names


def _default_reward_choice(reward_spec: Any) -> str:
    """The selector value that reproduces a preset's reward exactly."""
    return PRESET_REWARD if len(reward_spec.terms) > 1 else reward_spec.terms[0][0]


def _describe_terms(terms: tuple) -> str:
    """'1 x one_sentence + 1 x target_length(target=20, tolerance=20)' for a caption."""
    parts = []
    for name, weight, params in terms:
        args = ", ".join(f"{k}={v}" for k, v in params)
        parts.append(f"{weight:g} x {name}" + (f"({args})" if args else ""))
    return " + ".join(parts)


def _reward_defaults(reward_spec: Any) -> tuple[str, dict]:
    """(reward name, params dict) of the first term of a RewardSpec."""
    name, _weight, params = reward_spec.terms[0]
    return name, dict(params)


def _generic_defaults(framework: str) -> dict[str, Any]:
    """Widget values that reproduce the dialect's shipped defaults."""
    pipeline = _pipeline()
    defaults = pipeline.DEFAULTS[framework]
    out: dict[str, Any] = {}
    for generic, key in pipeline.ALIASES[framework].items():
        value = defaults.get(key) if key is not None else None
        out[generic] = _to_widget(generic, value)
    return out


def _to_widget(generic: str, value: Any) -> Any:
    """A dialect config value -> the generic widget's value."""
    if generic in {"beta", "gamma", "lam"}:
        return float(value) if value is not None else (0.0 if generic == "beta" else 1.0)
    if generic == "clip":
        if value is None:
            return 0.0
        if isinstance(value, list | tuple):
            return float(max(abs(float(v)) for v in value))
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


def _from_widget(generic: str, value: Any, default: Any) -> Any:
    """A generic widget's value -> the dialect config value (shape of the default kept)."""
    if generic == "clip":
        if not value:
            return None
        if isinstance(default, list | tuple):
            return (-float(value), float(value))
        return float(value)
    if generic in {"beta", "gamma", "lam"}:
        return float(value)
    if generic in {"kl_in_reward", "whiten"}:
        return bool(value)
    return value


def resolve_config(
    framework: str, generic: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict:
    """The dialect config: DEFAULTS[framework], then the generic controls, then overrides.

    A generic value that the dialect does not accept (an estimator name of another dialect, a
    knob the dialect lacks) is skipped, so the same sidebar drives every dialect.

    Args:
        framework: one of pipeline.FRAMEWORKS.
        generic: generic control name -> widget value (names as in pipeline.ALIASES).
        overrides: framework keys (or generic names) -> values, applied last.

    Returns:
        A fresh dict with the framework's own key names.
    """
    pipeline = _pipeline()
    defaults = pipeline.DEFAULTS[framework]
    aliases = pipeline.ALIASES[framework]
    choices = pipeline.CHOICES.get(framework, {})
    config = dict(defaults)
    for name, value in generic.items():
        key = aliases.get(name)
        if key is None:
            continue
        converted = _from_widget(name, value, defaults.get(key))
        if key in choices and converted not in choices[key]:
            continue
        config[key] = converted
    for name, value in (overrides or {}).items():
        key = name if name in defaults or name not in aliases else aliases[name]
        if key is None:
            continue
        config[key] = value
    return config


def estimator_options(framework: str) -> tuple[str, ...]:
    """The advantage estimators (or TRL scale_rewards modes) a dialect offers."""
    pipeline = _pipeline()
    return tuple(pipeline.CHOICES[framework].get(pipeline.ESTIMATOR_KEY[framework], ()))


def estimator_overrides(framework: str, estimator: str) -> dict[str, Any]:
    """Config overrides that select ``estimator`` in ``framework``."""
    return {_pipeline().ESTIMATOR_KEY[framework]: estimator}


def norm_overrides(framework: str, mode: str) -> dict[str, Any] | None:
    """Overrides for a reward-normalization mode (none/group/batch/running).

    Only ROLL has a separate reward-normalization stage; other dialects get None.

    Args:
        framework: dialect.
        mode: "none", "group", "batch" or "running".

    Returns:
        {norm_mean_type, norm_std_type} for ROLL, else None.
    """
    if framework != "roll":
        return None
    kind = None if mode == "none" else mode
    return {"norm_mean_type": kind, "norm_std_type": kind}


def kl_placement_overrides(framework: str, in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Overrides that put the KL in the token rewards (True) or in the loss (False).

    Args:
        framework: dialect.
        in_reward: where the KL goes.
        beta: coefficient to use in either place (the loss coefficient is set to it too).

    Returns:
        The overrides, or None where the dialect cannot do it (TRL GRPO: loss only).
    """
    if framework == "roll":
        return {
            "add_token_level_kl": in_reward,
            "use_kl_loss": not in_reward,
            "kl_loss_coef": 0.0 if in_reward else beta,
        }
    if framework == "verl":
        return {
            "use_kl_in_reward": in_reward,
            "use_kl_loss": not in_reward,
            "kl_loss_coef": beta,
        }
    if framework == "openrlhf":
        return {"use_loss": not in_reward}
    if framework == "trl":
        return None if in_reward else {}
    return None


def generic_value(state: AppState, name: str, default: Any = None) -> Any:
    """The sidebar's value of a generic control (beta, gamma, lam, estimator, ...)."""
    return dict(state.generic).get(name, default)
