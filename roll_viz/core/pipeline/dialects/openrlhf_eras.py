"""The recipes of record (``core/pipeline/eras.py``) in OpenRLHF's own keys.

``openrlhf.py`` imports ``ERAS`` from here into its record (``Dialect.ERAS``): the recipes are
data beside the framework file, so a new recipe does not grow it. Nothing is faked: a setting
OpenRLHF lacks stays at its nearest native option and a note says what differs.
"""

from __future__ import annotations

from roll_viz.core.pipeline.dialects.record import EraSetting

_NO_KL = {"use_loss": False, "init_coef": 0.0}
_PPO = {"policy_loss_type": "ppo", "eps_clip": 0.2}
_FILTER_NOTE = (
    "zero-variance filter: OpenRLHF --algo.dynamic_filtering_enable with "
    "--algo.dynamic_filtering_range 0 1 keeps groups whose mean reward is strictly inside the "
    "range: the same as std > 0 for 0/1 rewards, not for shaped ones"
)

ERAS: dict[str, EraSetting] = {
    "grpo_2024": EraSetting(
        config={
            "advantage_estimator": "group_norm",
            "use_loss": True,
            "init_coef": 0.04,
            "kl_estimator": "k3",
            **_PPO,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=(
            "OpenRLHF clamps every KL estimate to +-10",
            "OpenRLHF's KL loss is a token mean over the batch (aggregate_loss's default) "
            "while the policy term is per answer",
        ),
    ),
    "prime_rl": EraSetting(
        config={
            "advantage_estimator": "dr_grpo",
            **_NO_KL,
            **_PPO,
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "prime-rl's loss (a DPPO mask on p - p_mu at 0.2, the ratio pi / mu, 1e-3 x "
            "log^2(pi / mu) to the sampler) has no OpenRLHF key: the nearest is the PPO clip "
            "0.2, which at the first update (every ratio 1) gives the same loss and gradient",
            "zero-advantage filter: prime-rl drops the tokens whose advantage is 0 (also an "
            "answer that scored exactly its group's mean); roll-viz drops whole zero-variance "
            "groups",
            _FILTER_NOTE,
        ),
    ),
    "tinker": EraSetting(
        config={
            "advantage_estimator": "dr_grpo",
            **_NO_KL,
            **_PPO,
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "Tinker's importance_sampling loss is -sum of (pi / mu) x A over every token of "
            "the batch with no clip: OpenRLHF has no token sum, its token-mean is that sum "
            "divided by the number of tokens; the PPO clip stays (no clip acts at the first "
            "update)",
        ),
    ),
    "deepseek_v32": EraSetting(
        config={
            "advantage_estimator": "dr_grpo",
            "use_loss": True,
            "init_coef": 0.04,
            "kl_estimator": "k3",
            "unbiased_gradient": True,
            **_PPO,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        notes=(
            "--algo.kl.unbiased_gradient keeps k3's value and backpropagates min(pi / pi_old, "
            "10) x (log pi - log ref): V3.2's unbiased estimate (pi / pi_old) x k3 has that "
            "gradient at the first update",
            "OpenRLHF's KL loss is a token mean over the batch while the policy term is per answer",
            "off-policy sequence masking, keep routing and keep sampling mask: not OpenRLHF "
            "settings (at the first update the sequence mask removes nothing)",
        ),
    ),
    "scalerl_olmo3": EraSetting(
        config={
            "advantage_estimator": "reinforce_baseline",
            **_NO_KL,
            "policy_loss_type": "ppo",
            "eps_clip_low_high": (0.2, 0.28),
            "loss_agg_mode": "token-mean",
        },
        notes=(
            "OpenRLHF cannot divide group-centred rewards by the batch std: the nearest "
            "native option is reinforce_baseline (group mean, then a token-weighted "
            "whitening over the batch, which also subtracts the batch's token-weighted mean)",
            _FILTER_NOTE,
        ),
    ),
}
