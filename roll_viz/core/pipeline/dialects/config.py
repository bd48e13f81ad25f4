"""Validation of a dialect config: the only validator (``resolve``).

Keys use the framework's names (flattened: verl ``algorithm.kl_ctrl.kl_coef`` -> ``kl_coef``,
OpenRLHF ``--algo.kl.init_coef`` -> ``init_coef``); each dialect module holds its own tables
(``DEFAULTS``, ``CHOICES``, ``LOSS_DEFAULTS``, ``LOSS_CHOICES``, ``BOOL_VALUES``). Every dialect
also accepts the roll-viz extension keys ``viz_std_ddof``, ``viz_whiten_ddof`` and ``viz_eps``
(None = the framework's own constant), so the app can show what a convention changes; they are
not framework options. A dialect config accepts the union of the reward-stage and loss tables.

Unknown key or bad value -> ValueError naming the key. Configs are plain dicts in, a new dict
out; nothing is ever mutated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roll_viz.core.pipeline.dialects import corrections as fc

if TYPE_CHECKING:
    from roll_viz.core.pipeline.dialects.record import Dialect

# value rules for the non-enum keys: (kind, allow_none)
_UNIT = {"gamma", "lambd", "lam"}
_POSITIVE = {"reward_clip", "advantage_clip", "target_kl", "target", "kl_horizon", "horizon"}
_NONNEG = {"init_kl_coef", "kl_loss_coef", "kl_coef", "init_coef", "beta", "viz_eps"}
_POSITIVE |= {"value_clip", "cliprange_value", "loss_scale_factor", "delta", "tau_pos", "tau_neg"}
_POSITIVE |= {"sapo_temperature_pos", "sapo_temperature_neg"}
_NONNEG |= {"entropy_loss_coef", "rl_loss_coef", "entropy_coeff", "entropy_coef"}
_NONNEG |= {"pg_clip", "pg_clip_low", "pg_clip_high", "clip_ratio", "clip_ratio_low"}
_NONNEG |= {"clip_ratio_high", "eps_clip", "epsilon", "epsilon_high"}
_NONNEG |= {"cispo_epsilon_low", "cispo_epsilon_high"}
_NONNEG |= {"tis_lower_bound", "tis_upper_bound", "kimi15_tau", "ppo_kl_coef"}
_POSITIVE |= {"kl_cov_ratio", "dro_beta", "vespo_lambda_pos", "vespo_lambda_neg"}
_UNIT |= {"top_entropy_quantile"}
_NONNEG |= {"viz_clip_cov_seed", "viz_pf_ppo_seed", "topr_positive_weight", "topr_negative_weight"}
_POSITIVE |= {"clip_cov_ratio"}
_ABOVE_ONE = {"clip_ratio_c", "dual_clip"}  # dual-clip constants: both frameworks assert c > 1
_NULLABLE = {"clip_ratio_low", "clip_ratio_high", "value_clip"}  # verl: null -> clip_ratio
_NULLABLE |= {"vllm_importance_sampling_clip_max"}  # TRL: None = no upper bound
_INTEGER = {"max_completion_length", "max_new_tokens"}
_POSITIVE |= {"overlong_buffer_len"}
_NONNEG |= {"overlong_penalty_factor", "entropy_coef_min", "entropy_coef_max"}
_NONNEG |= {"entropy_coef_delta", "entropy_target", "viz_last_world_entropy"}


def _default(dialect: Dialect, key: str) -> Any:
    table = dialect.DEFAULTS
    return table[key] if key in table else dialect.LOSS_DEFAULTS[key]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_value(dialect: Dialect, key: str, value: Any) -> Any:
    """Validated (possibly normalized) value of one key; ValueError naming the key otherwise."""
    where = f"{dialect.NAME} config key {key!r}"
    default = _default(dialect, key)
    choices = dialect.CHOICES.get(key, dialect.LOSS_CHOICES.get(key))
    if key in dialect.BOOL_VALUES and isinstance(value, bool):
        return dialect.BOOL_VALUES[key][value]  # e.g. TRL scale_rewards True -> group
    if choices is not None:
        if isinstance(value, bool) or value not in choices:
            raise ValueError(f"{where}: {value!r} is not one of {choices}")
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true/false, got {value!r}")
        return value
    if key == "clip_range":
        return _check_range(where, value)
    if key == "eps_clip_low_high":
        return _check_pair(where, value)
    if key in _LISTS:
        return _check_list(where, value, _LISTS[key])
    if key in _VERL_ROLLOUT:
        return _check_verl_rollout(where, key, value)
    if key == "is_correction_threshold":  # OpenRLHF: HIGH, or LOW HIGH
        bounds = _check_list(where, [value] if _is_number(value) else value, float)
        if bounds is None or len(bounds) > 2 or (len(bounds) == 2 and bounds[0] > bounds[1]):
            raise ValueError(
                f"{where}: expected HIGH or [LOW, HIGH] with LOW <= HIGH, got {value!r}"
            )
        return (0.0, bounds[0]) if len(bounds) == 1 else bounds
    if value is None:
        if default is None or key == "viz_eps" or key in _NULLABLE:
            return None
        raise ValueError(f"{where}: a number is required, got None")
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    if key in _UNIT and not 0.0 <= value <= 1.0:
        raise ValueError(f"{where}: must be in [0, 1], got {value}")
    if key in _POSITIVE and not value > 0:
        raise ValueError(f"{where}: must be > 0, got {value}")
    if key in _NONNEG and value < 0:
        raise ValueError(f"{where}: must be >= 0, got {value}")
    if key in _ABOVE_ONE and not value > 1:
        raise ValueError(f"{where}: must be > 1, got {value}")
    if key in _INTEGER:
        if value != int(value) or value < 1:
            raise ValueError(f"{where}: must be a positive integer, got {value}")
        return int(value)
    return float(value)


#: verl rollout_correction keys with their own rules (rollout_correction's parsers)
_VERL_ROLLOUT = {"rollout_is_threshold", "rollout_rs", "rollout_rs_threshold"}


def _check_verl_rollout(where: str, key: str, value: Any) -> Any:
    """Validated verl rollout-correction threshold or rule value.

    ``rollout_is_threshold``: a number or 'lower_upper'; ``rollout_rs``: known rules, comma
    separated, or None; ``rollout_rs_threshold``: None, a positive number or a string (parsed
    against the rules where the loss is built).
    """
    simple = value is None or _is_number(value) or isinstance(value, str)
    if isinstance(value, bool) or not simple:
        raise ValueError(f"{where}: expected a number, a string or None, got {value!r}")
    try:
        if key == "rollout_is_threshold":
            if value is None:
                raise ValueError("a number or 'lower_upper' is required, got None")
            fc.parse_verl_is_threshold(value)
        elif key == "rollout_rs" and value is not None:
            rules = [o.strip() for o in str(value).split(",") if o.strip()]
            bad = [o for o in rules if o not in fc.VERL_RS_OPTIONS]
            if not rules or bad:
                raise ValueError(f"rules must be among {fc.VERL_RS_OPTIONS}, got {value!r}")
        elif key == "rollout_rs_threshold" and _is_number(value) and not value > 0:
            raise ValueError(f"must be > 0, got {value}")
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return float(value) if _is_number(value) else value


#: keys that take a list (or None): the kind of each item
_LISTS = {"gdpo_reward_keys": str, "gdpo_reward_weights": float, "reward_weights": float}


def _check_list(where: str, value: Any, kind: type) -> tuple | None:
    """A list key: None, or a non-empty list of strings / finite numbers, as a tuple."""
    if value is None:
        return None
    if isinstance(value, list | tuple) and value:
        if kind is str and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        if kind is float and all(_is_number(v) and math.isfinite(v) for v in value):
            return tuple(float(v) for v in value)
    what = "names" if kind is str else "finite numbers"
    raise ValueError(f"{where}: expected a non-empty list of {what} or None, got {value!r}")


def _check_pair(where: str, value: Any) -> tuple[float, float] | None:
    """OpenRLHF ``eps_clip_low_high``: None or two finite epsilons >= 0."""
    if value is None:
        return None
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(_is_number(v) and math.isfinite(v) and v >= 0 for v in value)
    ):
        return (float(value[0]), float(value[1]))
    raise ValueError(f"{where}: expected [low, high] with two numbers >= 0, got {value!r}")


def _check_range(where: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if _is_number(value):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: a single number must be finite and > 0, got {value!r}")
        return (-float(value), float(value))
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(_is_number(v) and math.isfinite(v) for v in value)
        and value[0] < value[1]
    ):
        return (float(value[0]), float(value[1]))
    raise ValueError(f"{where}: expected [low, high] with low < high, got {value!r}")


def resolve(dialect: Dialect, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A dialect's defaults overlaid with ``config``, every value validated.

    Args:
        dialect: the dialect module (``dialects.DIALECTS[name]``).
        config: the framework's own keys (and viz_ keys); missing keys take the shipped defaults.

    Returns:
        A new dict with every key of the dialect's ``DEFAULTS`` and ``LOSS_DEFAULTS``.

    Raises:
        ValueError: unknown key, or a bad value (the message names the key).
    """
    config = dict(config or {})
    known = {**dialect.DEFAULTS, **dialect.LOSS_DEFAULTS}
    for key in config:
        if key not in known:
            raise ValueError(
                f"unknown {dialect.NAME} config key {key!r} (known: {', '.join(sorted(known))})"
            )
    resolved = dict(known)
    for key, value in config.items():
        resolved[key] = _check_value(dialect, key, value)
    return resolved
