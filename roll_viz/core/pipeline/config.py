"""Each framework's own config keys for the reward -> advantage stage: defaults, choices, help.

Keys use the framework's names (flattened: verl ``algorithm.kl_ctrl.kl_coef`` -> ``kl_coef``,
OpenRLHF ``--algo.kl.init_coef`` -> ``init_coef``), and defaults are what the framework ships
(algorithms.md, sections 1 and 2b). Every dialect also accepts the roll-viz extension keys
``viz_std_ddof``, ``viz_whiten_ddof`` and ``viz_eps`` (None = the framework's own constant), so
the app can show what a convention changes; they are not framework options.

The policy-update (loss) keys live in their own tables ``LOSS_DEFAULTS`` / ``LOSS_CHOICES`` /
``LOSS_HELP`` (policy-update.md 1.2; verl ``actor.policy_loss.loss_mode`` -> ``loss_mode``,
OpenRLHF ``--actor.eps_clip`` -> ``eps_clip``); the KL-loss keys the reward stage already knows
(``use_kl_loss``, ``kl_loss_coef``, ``kl_loss_type``, ``use_loss``, ``init_coef``,
``kl_estimator``, ``beta``) stay in ``DEFAULTS``. ``LOSS_KEYS`` lists, per dialect, every key the
loss reads. A dialect config accepts the union of both tables.

``resolve_config`` is the only validator: unknown key or bad value -> ValueError naming the key.
Configs are plain dicts in, a new dict out; nothing is ever mutated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

FRAMEWORKS = ("roll", "verl", "openrlhf", "trl")

VIZ_DEFAULTS: dict[str, Any] = {"viz_std_ddof": None, "viz_whiten_ddof": None, "viz_eps": None}

DEFAULTS: dict[str, dict[str, Any]] = {
    "roll": {
        "adv_estimator": "gae",
        "gamma": 1.0,
        "lambd": 0.95,
        "norm_mean_type": None,
        "norm_std_type": None,
        "reward_clip": None,
        "whiten_rewards": False,
        "whiten_advantages": False,
        "advantage_clip": None,
        "add_token_level_kl": False,
        "init_kl_coef": 0.2,
        "kl_penalty": "kl",
        "target_kl": None,
        "kl_horizon": 10000,
        "use_kl_loss": False,
        "kl_loss_coef": 0.0,
        **VIZ_DEFAULTS,
    },
    "verl": {
        "adv_estimator": "gae",
        "gamma": 1.0,
        "lam": 1.0,
        "norm_adv_by_std_in_grpo": True,
        "use_kl_in_reward": False,
        "kl_penalty": "kl",
        "kl_ctrl_type": "fixed",
        "kl_coef": 0.001,
        "target_kl": 0.1,
        "horizon": 10000,
        "use_kl_loss": False,
        "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl",
        **VIZ_DEFAULTS,
    },
    "openrlhf": {
        "advantage_estimator": "gae",
        "gamma": 1.0,
        "lambd": 1.0,
        "kl_estimator": "k1",
        "init_coef": 0.01,
        "target": None,
        "horizon": 10000,
        "use_loss": False,
        "clip_range": (-10.0, 10.0),
        "no_std_norm": False,
        **VIZ_DEFAULTS,
    },
    "trl": {
        "scale_rewards": "group",
        "beta": 0.0,
        **VIZ_DEFAULTS,
    },
}

_NORM = (None, "batch", "group", "running")
_VERL_KL = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
_VIZ_CHOICES = {"viz_std_ddof": (None, 0, 1), "viz_whiten_ddof": (None, 0, 1)}

CHOICES: dict[str, dict[str, tuple]] = {
    "roll": {
        "adv_estimator": ("gae", "reinforce", "grpo"),
        "norm_mean_type": _NORM,
        "norm_std_type": _NORM,
        "kl_penalty": ("kl", "abs", "mse", "k3"),
        **_VIZ_CHOICES,
    },
    "verl": {
        "adv_estimator": (
            "gae",
            "grpo",
            "rloo",
            "reinforce_plus_plus",
            "reinforce_plus_plus_baseline",
            "remax",
        ),
        "kl_penalty": _VERL_KL,
        "kl_ctrl_type": ("fixed", "adaptive"),
        "kl_loss_type": _VERL_KL,
        **_VIZ_CHOICES,
    },
    "openrlhf": {
        "advantage_estimator": (
            "gae",
            "reinforce",
            "rloo",
            "reinforce_baseline",
            "group_norm",
            "dr_grpo",
        ),
        "kl_estimator": ("k1", "k2", "k3"),
        **_VIZ_CHOICES,
    },
    "trl": {"scale_rewards": ("group", "batch", "none"), **_VIZ_CHOICES},
}

_VIZ_HELP = {
    "viz_std_ddof": "roll-viz extension, not a framework option: ddof of the response-level "
    "group/batch std (1 = unbiased like every framework, 0 = biased); None keeps the framework's.",
    "viz_whiten_ddof": "roll-viz extension, not a framework option: ddof of the token-level "
    "advantage whitening variance; None keeps the framework's (OpenRLHF 0, others 1).",
    "viz_eps": "roll-viz extension, not a framework option: eps added to the std before dividing; "
    "None keeps the framework's (ROLL/verl 1e-6, OpenRLHF 1e-9, TRL 1e-4).",
}

HELP: dict[str, dict[str, str]] = {
    "roll": {
        "adv_estimator": "Advantage estimator: gae (critic), reinforce (reward-to-go) or grpo "
        "(group-normalized reward, then reward-to-go).",
        "gamma": "Discount factor for returns and GAE.",
        "lambd": "GAE lambda (only used by gae).",
        "norm_mean_type": "Baseline subtracted from the response reward: batch, group, running "
        "mean or none (grpo forces group).",
        "norm_std_type": "Std the response reward is divided by (+1e-6): batch, group, running or "
        "none (grpo forces group).",
        "reward_clip": "Symmetric clip of the normalized response reward and again of the token "
        "rewards after the KL penalty (None = off).",
        "whiten_rewards": "Whiten the token rewards (token-weighted) before the estimator.",
        "whiten_advantages": "Whiten the advantages over all valid tokens (unbiased var, "
        "rsqrt(var+1e-8)); skipped with at most one valid token.",
        "advantage_clip": "Symmetric clip of the final advantages (None = off).",
        "add_token_level_kl": "Subtract init_kl_coef * KL from every token reward.",
        "init_kl_coef": "KL coefficient beta for the in-reward KL (start value of the controller).",
        "kl_penalty": "In-reward KL estimator: kl (k1), abs, mse (k2) or k3 (clamped to +-10).",
        "target_kl": "Target KL of the adaptive controller (None = fixed beta).",
        "kl_horizon": "Horizon of the adaptive KL controller.",
        "use_kl_loss": "Add a k3 KL term to the policy loss (reported as kl_loss, not in rewards).",
        "kl_loss_coef": "Coefficient of the KL loss term.",
        **_VIZ_HELP,
    },
    "verl": {
        "adv_estimator": "algorithm.adv_estimator: gae, grpo, rloo, reinforce_plus_plus, "
        "reinforce_plus_plus_baseline or remax.",
        "gamma": "algorithm.gamma: discount for gae and reinforce_plus_plus.",
        "lam": "algorithm.lam: GAE lambda.",
        "norm_adv_by_std_in_grpo": "Divide GRPO advantages by the group std (False = Dr.GRPO).",
        "use_kl_in_reward": "algorithm.use_kl_in_reward: subtract kl_coef * KL from token rewards.",
        "kl_penalty": "algorithm.kl_penalty: in-reward KL estimator (kl/k1, abs, mse/k2, "
        "low_var_kl/k3).",
        "kl_ctrl_type": "algorithm.kl_ctrl.type: fixed or adaptive (in-reward KL only).",
        "kl_coef": "algorithm.kl_ctrl.kl_coef: beta of the in-reward KL.",
        "target_kl": "algorithm.kl_ctrl.target_kl: target of the adaptive controller.",
        "horizon": "algorithm.kl_ctrl.horizon: horizon of the adaptive controller.",
        "use_kl_loss": "actor.use_kl_loss: put a KL term in the policy loss instead.",
        "kl_loss_coef": "actor.kl_loss_coef: coefficient of the KL loss term.",
        "kl_loss_type": "actor.kl_loss_type: KL estimator of the loss term.",
        **_VIZ_HELP,
    },
    "openrlhf": {
        "advantage_estimator": "--algo.advantage.estimator: gae, reinforce, rloo, "
        "reinforce_baseline, group_norm or dr_grpo.",
        "gamma": "--algo.advantage.gamma (forced to 1 for rloo, reinforce_baseline, group_norm, "
        "dr_grpo).",
        "lambd": "--algo.advantage.lambd: GAE lambda.",
        "kl_estimator": "--algo.kl.estimator: k1, k2 or k3 (all clamped to +-10).",
        "init_coef": "--algo.kl.init_coef: KL coefficient (KL goes into the reward unless "
        "use_loss).",
        "target": "--algo.kl.target: target KL of the adaptive controller (None = fixed).",
        "horizon": "--algo.kl.horizon: horizon of the adaptive controller.",
        "use_loss": "--algo.kl.use_loss: put the KL in the loss instead of the reward.",
        "clip_range": "--reward.clip_range: clamp of the shaped reward (after baseline shaping); "
        "a number c means (-c, c).",
        "no_std_norm": "--algo.advantage.no_std_norm: global advantage normalization only "
        "subtracts the mean.",
        **_VIZ_HELP,
    },
    "trl": {
        "scale_rewards": "GRPOConfig.scale_rewards: divide (reward - group mean) by the group std, "
        "the batch std, or nothing (+1e-4).",
        "beta": "GRPOConfig.beta: coefficient of the k3 KL term in the loss (0 = no reference "
        "model).",
        **_VIZ_HELP,
    },
}

# ------------------------------------------------------------------ policy-update (loss) keys

_ROLL_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
_VERL_AGG = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

LOSS_DEFAULTS: dict[str, dict[str, Any]] = {
    "roll": {
        "pg_variant": "ppo",
        "pg_clip": 0.2,
        "use_pg_clip_range": False,
        "pg_clip_low": 0.2,
        "pg_clip_high": 0.2,
        "dual_clip_loss": False,
        "loss_agg_mode": "seq-mean-token-mean",
        "importance_sampling": "token",
        "entropy_loss_coef": 0.0,
        "rl_loss_coef": 1.0,
        "value_clip": None,
        "cispo_epsilon_low": 0.1,
        "cispo_epsilon_high": 0.1,
        "cispo_use_unified_mask": False,
    },
    "verl": {
        "loss_mode": "vanilla",
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "loss_scale_factor": None,
        "entropy_coeff": 0.0,
        "cliprange_value": 0.5,
        "tau_pos": 1.0,
        "tau_neg": 1.05,
    },
    "openrlhf": {
        "policy_loss_type": "ppo",
        "eps_clip": 0.2,
        "eps_clip_low_high": None,
        "dual_clip": None,
        "token_level_loss": True,
        "entropy_coef": None,
        "value_clip": 0.5,
    },
    "trl": {
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": None,
        "delta": None,
        "importance_sampling_level": "token",
        "max_completion_length": 512,
        "entropy_coef": 0.0,
        "sapo_temperature_pos": 1.0,
        "sapo_temperature_neg": 1.05,
    },
}

LOSS_CHOICES: dict[str, dict[str, tuple]] = {
    "roll": {
        "pg_variant": ("vanilla", "ppo", "cispo"),
        "loss_agg_mode": _ROLL_AGG,
        "importance_sampling": ("token", "seq"),
    },
    "verl": {"loss_mode": ("vanilla", "gspo", "cispo", "gpg", "sapo"), "loss_agg_mode": _VERL_AGG},
    "openrlhf": {"policy_loss_type": ("ppo", "gspo")},
    "trl": {
        "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"),
        "importance_sampling_level": ("token", "sequence"),
    },
}

LOSS_HELP: dict[str, dict[str, str]] = {
    "roll": {
        "pg_variant": "actor_train.pg_variant: ppo = the default ActorWorker (clipped surrogate), "
        "vanilla = -A*logp (ActorPGWorker), cispo = -sg(clip(r, 1-lo, 1+hi))*A*logp.",
        "pg_clip": "pg_clip: PPO clip epsilon (both sides unless use_pg_clip_range); also sets the "
        "dual-clip constant 1 + 2*pg_clip.",
        "use_pg_clip_range": "use_pg_clip_range: use pg_clip_low / pg_clip_high, not pg_clip.",
        "pg_clip_low": "pg_clip_low: lower clip epsilon (only with use_pg_clip_range).",
        "pg_clip_high": "pg_clip_high: upper clip epsilon (only with use_pg_clip_range).",
        "dual_clip_loss": "dual_clip_loss: for A<0 cap the loss at -c*A with c = 1 + 2*pg_clip.",
        "loss_agg_mode": "loss_agg_mode: aggregation of the policy, KL and entropy terms; "
        "seq-mean-token-sum-norm is sum / L_max with no batch division.",
        "importance_sampling": "importance_sampling: token ratio or seq = exp(masked mean "
        "log-ratio) broadcast to the tokens (GSPO-like); no log-ratio clamp.",
        "entropy_loss_coef": "entropy_loss_coef: total -= coef * agg(entropy) when > 0.",
        "rl_loss_coef": "rl_loss_coef: multiplies (policy + KL loss) before the entropy term.",
        "value_clip": "value_clip: critic clip around the old values (None = plain MSE); the "
        "critic loss is always the mean over samples of per-sample token means.",
        "cispo_epsilon_low": "cispo_epsilon_low: CISPO weight floor 1 - eps (pg_variant cispo).",
        "cispo_epsilon_high": "cispo_epsilon_high: CISPO weight cap 1 + eps (pg_variant cispo).",
        "cispo_use_unified_mask": "cispo_use_unified_mask: also zero the tokens PPO would clip "
        "(A>0 and r>1+hi, A<0 and r<1-lo).",
    },
    "verl": {
        "loss_mode": "actor.policy_loss.loss_mode: vanilla (PPO clip + always-on dual clip), gspo "
        "(sequence ratio, GSPO-token form), cispo, gpg (-A*logp) or sapo (soft gate).",
        "clip_ratio": "actor.clip_ratio: PPO epsilon, used where clip_ratio_low/high are null.",
        "clip_ratio_low": "actor.clip_ratio_low: lower epsilon (null = clip_ratio).",
        "clip_ratio_high": "actor.clip_ratio_high: upper epsilon (null = clip_ratio; DAPO "
        "clip-higher uses 0.28).",
        "clip_ratio_c": "actor.clip_ratio_c: dual-clip constant c > 1, always on for A<0.",
        "loss_agg_mode": "actor.loss_agg_mode: aggregation of policy, KL, entropy and critic "
        "terms (gspo and sapo force seq-mean-token-mean for the policy term).",
        "loss_scale_factor": "actor.loss_scale_factor: divisor of seq-mean-token-sum-norm "
        "(null = L_max, the tensor width).",
        "entropy_coeff": "actor.entropy_coeff: policy_loss -= coeff * agg(entropy).",
        "cliprange_value": "critic.cliprange_value: critic clip around the old values.",
        "tau_pos": "actor.tau_pos: SAPO gate temperature for A > 0.",
        "tau_neg": "actor.tau_neg: SAPO gate temperature for A <= 0.",
    },
    "openrlhf": {
        "policy_loss_type": "--actor.policy_loss_type: ppo (token ratio, log-ratio clamped "
        "+-20) or gspo (sequence ratio, forces per-sample aggregation).",
        "eps_clip": "--actor.eps_clip: PPO clip epsilon.",
        "eps_clip_low_high": "--actor.eps_clip_low_high: [low, high] epsilons (None = eps_clip "
        "on both sides).",
        "dual_clip": "--actor.dual_clip: dual-clip constant c > 1 for A<0 (None = off).",
        "token_level_loss": "token_level_loss (not on the CLI): True = sum / tokens, False = mean "
        "of per-sample token means; the KL and entropy terms are always token-level.",
        "entropy_coef": "--actor.entropy_coef: None = entropy not computed, 0 = logged only, > 0 "
        "= loss -= coef * token-mean entropy.",
        "value_clip": "--critic.value_clip: critic clip around the old values (None = plain MSE).",
    },
    "trl": {
        "loss_type": "GRPOConfig.loss_type: dapo (sum / active tokens), grpo (mean of sequence "
        "means), bnpo (token mean), dr_grpo (sum / (B * max_completion_length)), cispo, sapo.",
        "epsilon": "GRPOConfig.epsilon: lower clip epsilon (and upper when epsilon_high is None).",
        "epsilon_high": "GRPOConfig.epsilon_high: upper clip epsilon (None = epsilon); for cispo "
        "the absolute cap on the weight min(r, epsilon_high) (ScaleRL recommends 5.0).",
        "delta": "GRPOConfig.delta: two-sided cap r <= delta before the PPO min (INTELLECT-2).",
        "importance_sampling_level": "GRPOConfig.importance_sampling_level: token ratio or "
        "sequence = exp(mean log-ratio).",
        "max_completion_length": "GRPOConfig.max_completion_length: the dr_grpo divisor.",
        "entropy_coef": "GRPOConfig.entropy_coef: loss -= coef * mean per-token entropy "
        "(independent of loss_type).",
        "sapo_temperature_pos": "GRPOConfig.sapo_temperature_pos: SAPO temperature for A > 0.",
        "sapo_temperature_neg": "GRPOConfig.sapo_temperature_neg: SAPO temperature for A <= 0.",
    },
}

# every key the policy update reads, per dialect (loss table plus the reward-stage KL-loss keys)
LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "roll": (*LOSS_DEFAULTS["roll"], "use_kl_loss", "kl_loss_coef"),
    "verl": (*LOSS_DEFAULTS["verl"], "use_kl_loss", "kl_loss_coef", "kl_loss_type"),
    "openrlhf": (*LOSS_DEFAULTS["openrlhf"], "use_loss", "init_coef", "kl_estimator"),
    "trl": (*LOSS_DEFAULTS["trl"], "beta"),
}


ESTIMATOR_KEY: dict[str, str] = {
    "roll": "adv_estimator",
    "verl": "adv_estimator",
    "openrlhf": "advantage_estimator",
    "trl": "scale_rewards",
}

ALIASES: dict[str, dict[str, str | None]] = {
    "roll": {
        "estimator": "adv_estimator",
        "gamma": "gamma",
        "lam": "lambd",
        "beta": "init_kl_coef",
        "kl_estimator": "kl_penalty",
        "kl_in_reward": "add_token_level_kl",
        "clip": "reward_clip",
        "whiten": "whiten_advantages",
    },
    "verl": {
        "estimator": "adv_estimator",
        "gamma": "gamma",
        "lam": "lam",
        "beta": "kl_coef",
        "kl_estimator": "kl_penalty",
        "kl_in_reward": "use_kl_in_reward",
        "clip": None,
        "whiten": None,
    },
    "openrlhf": {
        "estimator": "advantage_estimator",
        "gamma": "gamma",
        "lam": "lambd",
        "beta": "init_coef",
        "kl_estimator": "kl_estimator",
        "kl_in_reward": None,  # the KL is in the reward unless use_loss (inverted switch)
        "clip": "clip_range",
        "whiten": None,
    },
    "trl": {
        "estimator": "scale_rewards",
        "gamma": None,
        "lam": None,
        "beta": "beta",
        "kl_estimator": None,
        "kl_in_reward": None,
        "clip": None,
        "whiten": None,
    },
}

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
_ABOVE_ONE = {"clip_ratio_c", "dual_clip"}  # dual-clip constants: both frameworks assert c > 1
_NULLABLE = {"clip_ratio_low", "clip_ratio_high", "value_clip"}  # verl: null -> clip_ratio
_INTEGER = {"max_completion_length"}


def _default(framework: str, key: str) -> Any:
    table = DEFAULTS[framework]
    return table[key] if key in table else LOSS_DEFAULTS[framework][key]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_value(framework: str, key: str, value: Any) -> Any:
    """Validated (possibly normalized) value of one key; ValueError naming the key otherwise."""
    where = f"{framework} config key {key!r}"
    default = _default(framework, key)
    choices = CHOICES[framework].get(key, LOSS_CHOICES[framework].get(key))
    if framework == "trl" and key == "scale_rewards" and isinstance(value, bool):
        return "group" if value else "none"  # TRL maps True -> group, False -> none
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


def resolve_config(framework: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The framework's defaults overlaid with ``config``, every value validated.

    Args:
        framework: one of FRAMEWORKS.
        config: the framework's own keys (and viz_ keys); missing keys take the shipped defaults.

    Returns:
        A new dict with every key of ``DEFAULTS[framework]`` and ``LOSS_DEFAULTS[framework]``.

    Raises:
        ValueError: unknown framework, unknown key, or a bad value (the message names the key).
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    config = dict(config or {})
    known = {**DEFAULTS[framework], **LOSS_DEFAULTS[framework]}
    for key in config:
        if key not in known:
            raise ValueError(
                f"unknown {framework} config key {key!r} (known: {', '.join(sorted(known))})"
            )
    resolved = dict(known)
    for key, value in config.items():
        resolved[key] = _check_value(framework, key, value)
    return resolved
