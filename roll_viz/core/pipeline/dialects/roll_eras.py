"""The recipes of record (``core/pipeline/eras.py``) in ROLL's own keys.

``roll.py`` imports ``ERAS`` from here into its record (``Dialect.ERAS``): the recipes are data
beside the framework file, so a new recipe does not grow it. Nothing is faked: a setting ROLL
lacks stays at its nearest native option and a note says what differs. ROLL's ``grpo`` forces
the group std (``norm_mean_type = norm_std_type = group``), so every recipe without the std is
ROLL's reward normalisation (group mean, no std) followed by REINFORCE with gamma 1.
"""

from __future__ import annotations

from roll_viz.core.pipeline.dialects.record import EraSetting

#: group mean, no std: reward normalisation then REINFORCE (gamma 1: every token gets r - mean)
_NO_STD = {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": None}
_NO_KL = {"add_token_level_kl": False, "use_kl_loss": False, "kl_loss_coef": 0.0}
_PPO = {"pg_variant": "ppo", "pg_clip": 0.2}
_NO_STD_NOTE = (
    "no std: ROLL's grpo always divides by the group std, so the recipe is norm_mean_type group, "
    "norm_std_type null followed by REINFORCE (gamma 1), the same r - mean on every token"
)

ERAS: dict[str, EraSetting] = {
    "grpo_2024": EraSetting(
        config={
            "adv_estimator": "grpo",
            "use_kl_loss": True,
            "kl_loss_coef": 0.04,
            "add_token_level_kl": False,
            "pg_variant": "ppo",
            "pg_clip": 0.2,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=("ROLL's KL loss is always k3 (clamped to +-10), whatever kl_penalty says",),
    ),
    "prime_rl": EraSetting(
        config={**_NO_STD, **_NO_KL, **_PPO, "loss_agg_mode": "token-mean"},
        notes=(
            _NO_STD_NOTE,
            "prime-rl's loss (a DPPO mask on p - p_mu at 0.2, the ratio pi / mu, 1e-3 x "
            "log^2(pi / mu) to the sampler) is not a ROLL pg_variant: the nearest is the PPO "
            "clip 0.2, which at the first update (every ratio 1) gives the same loss and gradient",
            "zero-advantage filter: prime-rl drops the tokens whose advantage is 0 (also an "
            "answer that scored exactly its group's mean); roll-viz drops whole zero-variance "
            "groups, as ROLL's query_filter_config std_filter does",
        ),
    ),
    "tinker": EraSetting(
        config={**_NO_STD, **_NO_KL, **_PPO, "loss_agg_mode": "seq-mean-token-sum"},
        notes=(
            _NO_STD_NOTE,
            "Tinker's importance_sampling loss is -sum of (pi / mu) x A over every token of "
            "the batch, with no clip and no division; ROLL's nearest is the PPO clip (no clip "
            "acts at the first update) with seq-mean-token-sum: the same sum divided by the "
            "number of answers",
        ),
    ),
    "deepseek_v32": EraSetting(
        config={
            **_NO_STD,
            "add_token_level_kl": False,
            "use_kl_loss": True,
            "kl_loss_coef": 0.04,
            **_PPO,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=(
            _NO_STD_NOTE,
            "ROLL's KL loss is plain k3 (gradient 1 - pi_ref / pi); V3.2's is k3 times "
            "pi / pi_old (the unbiased estimate): the same value at the first update, the "
            "gradient log pi - log ref",
            "off-policy sequence masking, keep routing and keep sampling mask: not ROLL "
            "settings (at the first update the sequence mask removes nothing)",
        ),
    ),
    "scalerl_olmo3": EraSetting(
        config={
            "adv_estimator": "reinforce",
            "norm_mean_type": "group",
            "norm_std_type": "batch",
            **_NO_KL,
            "pg_variant": "ppo",
            "use_pg_clip_range": True,
            "pg_clip_low": 0.2,
            "pg_clip_high": 0.28,
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "group mean / batch std is ROLL's reward normalisation (norm_mean_type group, "
            "norm_std_type batch) followed by REINFORCE (gamma 1), the LitePPO recipe",
            "zero-variance filter: ROLL query_filter_config type std_filter (std <= "
            "std_threshold; 0 = exact), a reward-worker setting outside the calculator's keys",
        ),
    ),
}
