"""The recipes of record (``core/pipeline/eras.py``) in verl's own keys.

``verl.py`` imports ``ERAS`` from here into its record (``Dialect.ERAS``): the recipes are data
beside the framework file, so a new recipe does not grow it. Nothing is faked: a setting verl
lacks stays at its nearest native option and a note says what differs.
"""

from __future__ import annotations

from roll_viz.core.pipeline.dialects.record import EraSetting

#: group mean, no std (Dr. GRPO's switch)
_NO_STD = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False}
_NO_KL = {"use_kl_in_reward": False, "use_kl_loss": False, "kl_loss_coef": 0.0}
_PPO = {"loss_mode": "vanilla", "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2}

ERAS: dict[str, EraSetting] = {
    "grpo_2024": EraSetting(
        config={
            "adv_estimator": "grpo",
            "norm_adv_by_std_in_grpo": True,
            "use_kl_in_reward": False,
            "use_kl_loss": True,
            "kl_loss_coef": 0.04,
            "kl_loss_type": "low_var_kl",
            **_PPO,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=(
            "verl's trainer divides seq-mean-token-mean by every row of the mini-batch "
            "(empty answers included)",
            "low_var_kl is k3 with log-ratio clamped to +-20 and the value to +-10",
        ),
    ),
    "prime_rl": EraSetting(
        config={
            **_NO_STD,
            **_NO_KL,
            "loss_mode": "dppo_tv",
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.2,
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "dppo_tv masks a token whose p - p_old leaves [-0.2, 0.2], as prime-rl's default "
            "loss does against the sampler's p_mu; verl weighs log pi by sg(min(r, "
            "clip_ratio_c)), so its loss value is -A x log pi where prime-rl's is -A x pi / mu "
            "(the same gradient at the first update), and prime-rl's 1e-3 x log^2(pi / mu) "
            "term has no verl key (0 at the first update)",
            "zero-advantage filter: prime-rl drops the tokens whose advantage is 0 (also an "
            "answer that scored exactly its group's mean); roll-viz drops whole zero-variance "
            "groups, as verl algorithm.filter_groups does",
        ),
    ),
    "tinker": EraSetting(
        config={**_NO_STD, **_NO_KL, **_PPO, "loss_agg_mode": "token-sum"},
        notes=(
            "Tinker's importance_sampling loss is -sum of (pi / mu) x A over every token of "
            "the batch with no clip: verl's token-sum is that sum; the PPO clip stays (no clip "
            "acts at the first update)",
        ),
    ),
    "deepseek_v32": EraSetting(
        config={
            **_NO_STD,
            "use_kl_in_reward": False,
            "use_kl_loss": True,
            "kl_loss_coef": 0.04,
            "kl_loss_type": "low_var_kl+",
            **_PPO,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=(
            "low_var_kl+ keeps k3's value and takes the gradient log pi - log ref, which is "
            "V3.2's unbiased estimate (pi / pi_old) x k3 at the first update; later its gradient "
            "lacks the ratio",
            "off-policy sequence masking, keep routing and keep sampling mask: not in the "
            "calculator's keys (at the first update the sequence mask removes nothing)",
        ),
    ),
    "scalerl_olmo3": EraSetting(
        config={
            "adv_estimator": "reinforce_plus_plus_baseline",
            **_NO_KL,
            "loss_mode": "vanilla",
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "verl cannot divide group-centred rewards by the batch std: grpo's only switch "
            "is norm_adv_by_std_in_grpo (group std or none); the nearest native option is "
            "reinforce_plus_plus_baseline (group mean, then a token-weighted whitening over "
            "the batch, which also subtracts the batch's token-weighted mean)",
            "zero-variance filter: verl algorithm.filter_groups (enable: true, metric: acc; "
            "np.std == 0), a trainer setting outside the calculator's keys",
        ),
    ),
}
