"""Presets of an era: "GRPO as published (2024)" and "defaults of 2026", as each dialect says them.

Plain data: for every dialect, the native config (its own keys, reward stage and loss together;
``resolve_config`` accepts it) that the era's recipe means, and notes where the dialect cannot
say a setting or says it differently. Nothing is faked: a setting a dialect lacks stays at the
dialect's nearest native option and the note says what differs.

- **GRPO as published** (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): group mean and group
  std, the KL in the loss (beta 0.04, the k3 estimator), each answer's token mean averaged over
  answers (seq-mean-token-mean), PPO clip 0.2 on both sides.
- **Defaults of 2026** (DAPO arXiv 2503.14476, Dr. GRPO arXiv 2503.20783, ScaleRL arXiv
  2510.13786, Olmo 3 arXiv 2512.13961): no KL, token mean over the batch, clip-higher (0.2 below,
  0.28 above), zero-variance groups filtered out (dynamic sampling), group mean with the batch's
  std (ScaleRL's batch-level advantage normalisation, LitePPO).

Zero-variance filtering is a data-loader step in every framework (verl
``algorithm.filter_groups``, OpenRLHF ``--algo.dynamic_filtering_enable``, ROLL
``query_filter_config``), outside the calculator's config: ``filter_zero_variance`` says the era
drops such groups before batching (exact equality of the rewards), which the analysis applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from roll_viz.core.pipeline.dialects import FRAMEWORKS, resolve_config


@dataclass(frozen=True)
class EraPreset:
    """One era's recipe in every dialect.

    Attributes:
        key: short name ("grpo_2024", "defaults_2026").
        label: display name.
        short: column tag in tables ("2024", "2026").
        recipe: the settings in words, one per item.
        sources: papers / threads the recipe comes from.
        configs: dialect -> native config (its own keys; reward stage and loss together).
        notes: dialect -> what it cannot express or expresses differently.
        filter_zero_variance: drop the groups whose rewards are all equal before batching.
    """

    key: str
    label: str
    short: str
    recipe: tuple[str, ...]
    sources: str
    configs: MappingProxyType
    notes: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    filter_zero_variance: bool = False

    def config(self, framework: str) -> dict[str, Any]:
        """The era's native config for one dialect (a copy).

        Raises:
            ValueError: an unknown dialect.
        """
        if framework not in self.configs:
            raise ValueError(f"framework must be one of {tuple(self.configs)}, got {framework!r}")
        return dict(self.configs[framework])

    def dialect_notes(self, framework: str) -> tuple[str, ...]:
        """What this dialect cannot say of the era's recipe (empty when it says all of it)."""
        return tuple(self.notes.get(framework, ()))


_FILTER_NOTES = {
    "roll": "zero-variance filter: ROLL query_filter_config type std_filter (std <= "
    "std_threshold; 0 = exact), a reward-worker setting outside the calculator's keys",
    "verl": "zero-variance filter: verl algorithm.filter_groups (enable: true, metric: acc; "
    "np.std == 0), a trainer setting outside the calculator's keys",
    "openrlhf": "zero-variance filter: OpenRLHF --algo.dynamic_filtering_enable with "
    "--algo.dynamic_filtering_range 0 1 keeps groups whose mean reward is strictly inside the "
    "range: the same as std > 0 for 0/1 rewards, not for shaped ones",
    "trl": "zero-variance filter: TRL GRPOTrainer has none (it logs frac_reward_zero_std and "
    "keeps the groups at A = 0); the analysis drops them before batching as the others do",
}

GRPO_2024 = EraPreset(
    key="grpo_2024",
    label="GRPO as published (2024)",
    short="2024",
    recipe=(
        "group mean and group std",
        "KL in the loss: beta 0.04, k3",
        "seq-mean-token-mean",
        "clip 0.2 on both sides",
    ),
    sources="Shao et al. 2024 (DeepSeekMath, arXiv 2402.03300)",
    configs=MappingProxyType(
        {
            "roll": {
                "adv_estimator": "grpo",
                "use_kl_loss": True,
                "kl_loss_coef": 0.04,
                "add_token_level_kl": False,
                "pg_variant": "ppo",
                "pg_clip": 0.2,
                "loss_agg_mode": "seq-mean-token-mean",
            },
            "verl": {
                "adv_estimator": "grpo",
                "norm_adv_by_std_in_grpo": True,
                "use_kl_in_reward": False,
                "use_kl_loss": True,
                "kl_loss_coef": 0.04,
                "kl_loss_type": "low_var_kl",
                "loss_mode": "vanilla",
                "clip_ratio": 0.2,
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.2,
                "loss_agg_mode": "seq-mean-token-mean",
            },
            "openrlhf": {
                "advantage_estimator": "group_norm",
                "use_loss": True,
                "init_coef": 0.04,
                "kl_estimator": "k3",
                "policy_loss_type": "ppo",
                "eps_clip": 0.2,
                "loss_agg_mode": "seq-mean-token-mean",
            },
            "trl": {
                "scale_rewards": "group",
                "beta": 0.04,
                "use_bias_correction_kl": False,
                "loss_type": "grpo",
                "epsilon": 0.2,
            },
        }
    ),
    notes=MappingProxyType(
        {
            "roll": ("ROLL's KL loss is always k3 (clamped to +-10), whatever kl_penalty says",),
            "verl": (
                "verl's trainer divides seq-mean-token-mean by every row of the mini-batch "
                "(empty answers included)",
                "low_var_kl is k3 with log-ratio clamped to +-20 and the value to +-10",
            ),
            "openrlhf": (
                "OpenRLHF clamps every KL estimate to +-10",
                "OpenRLHF's KL loss is a token mean over the batch (aggregate_loss's default) "
                "while the policy term is per answer",
            ),
            "trl": (
                "TRL 1.16 multiplies the k3 term by pi/pi_old by default "
                "(use_bias_correction_kl); the published loss is plain k3, so it is off here",
                "TRL loss_type grpo divides by every row (empty answers included)",
            ),
        }
    ),
)

DEFAULTS_2026 = EraPreset(
    key="defaults_2026",
    label="Defaults of 2026",
    short="2026",
    recipe=(
        "no KL",
        "token mean over the batch",
        "clip-higher: 0.2 below, 0.28 above",
        "zero-variance groups filtered",
        "group mean, batch std",
    ),
    sources="DAPO (arXiv 2503.14476), Dr. GRPO (arXiv 2503.20783), ScaleRL (arXiv 2510.13786), "
    "Olmo 3 (arXiv 2512.13961)",
    configs=MappingProxyType(
        {
            "roll": {
                "adv_estimator": "reinforce",
                "norm_mean_type": "group",
                "norm_std_type": "batch",
                "add_token_level_kl": False,
                "use_kl_loss": False,
                "kl_loss_coef": 0.0,
                "pg_variant": "ppo",
                "use_pg_clip_range": True,
                "pg_clip_low": 0.2,
                "pg_clip_high": 0.28,
                "loss_agg_mode": "token-mean",
            },
            "verl": {
                "adv_estimator": "reinforce_plus_plus_baseline",
                "use_kl_in_reward": False,
                "use_kl_loss": False,
                "kl_loss_coef": 0.0,
                "loss_mode": "vanilla",
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.28,
                "loss_agg_mode": "token-mean",
            },
            "openrlhf": {
                "advantage_estimator": "reinforce_baseline",
                "use_loss": False,
                "init_coef": 0.0,
                "policy_loss_type": "ppo",
                "eps_clip_low_high": (0.2, 0.28),
                "loss_agg_mode": "token-mean",
            },
            "trl": {
                "scale_rewards": "batch",
                "beta": 0.0,
                "loss_type": "dapo",
                "epsilon": 0.2,
                "epsilon_high": 0.28,
            },
        }
    ),
    notes=MappingProxyType(
        {
            "roll": (
                "group mean / batch std is ROLL's reward normalisation (norm_mean_type group, "
                "norm_std_type batch) followed by REINFORCE (gamma 1), the LitePPO recipe",
                _FILTER_NOTES["roll"],
            ),
            "verl": (
                "verl cannot divide group-centred rewards by the batch std: grpo's only switch "
                "is norm_adv_by_std_in_grpo (group std or none); the nearest native option is "
                "reinforce_plus_plus_baseline (group mean, then a token-weighted whitening over "
                "the batch, which also subtracts the batch's token-weighted mean)",
                _FILTER_NOTES["verl"],
            ),
            "openrlhf": (
                "OpenRLHF cannot divide group-centred rewards by the batch std: the nearest "
                "native option is reinforce_baseline (group mean, then a token-weighted "
                "whitening over the batch, which also subtracts the batch's token-weighted mean)",
                _FILTER_NOTES["openrlhf"],
            ),
            "trl": (
                "scale_rewards batch: group mean, std of the whole batch (TRL's LitePPO option)",
                _FILTER_NOTES["trl"],
            ),
        }
    ),
    filter_zero_variance=True,
)

#: The era presets by key, oldest first.
ERAS: MappingProxyType = MappingProxyType({e.key: e for e in (GRPO_2024, DEFAULTS_2026)})


def check_eras() -> None:
    """Every era names every dialect, and each dialect accepts its config (raises otherwise)."""
    for era in ERAS.values():
        if set(era.configs) != set(FRAMEWORKS):
            raise ValueError(f"{era.key}: configs for {sorted(era.configs)}, not {FRAMEWORKS}")
        for fw in FRAMEWORKS:
            resolve_config(fw, era.config(fw))
