"""The recipes of record (``core/pipeline/eras.py``) in TRL's own keys.

``trl.py`` imports ``ERAS`` from here into its record (``Dialect.ERAS``): the recipes are data
beside the framework file, so a new recipe does not grow it. Nothing is faked: a setting TRL
lacks stays at its nearest native option and a note says what differs.
"""

from __future__ import annotations

from roll_viz.core.pipeline.dialects.record import EraSetting

_NO_FILTER_NOTE = (
    "zero-variance filter: TRL GRPOTrainer has none (it logs frac_reward_zero_std and keeps the "
    "groups at A = 0); the analysis drops them before batching as the others do"
)

ERAS: dict[str, EraSetting] = {
    "grpo_2024": EraSetting(
        config={
            "scale_rewards": "group",
            "beta": 0.04,
            "use_bias_correction_kl": False,
            "loss_type": "grpo",
            "epsilon": 0.2,
        },
        notes=(
            "TRL 1.16 multiplies the k3 term by pi/pi_old by default "
            "(use_bias_correction_kl); the published loss is plain k3, so it is off here",
            "TRL loss_type grpo divides by every row (empty answers included)",
        ),
    ),
    "prime_rl": EraSetting(
        config={"scale_rewards": "none", "beta": 0.0, "loss_type": "dapo", "epsilon": 0.2},
        notes=(
            "loss_type dapo: the token mean over the batch, as prime-rl normalises by the "
            "batch's loss tokens",
            "prime-rl's loss (a DPPO mask on p - p_mu at 0.2, the ratio pi / mu, 1e-3 x "
            "log^2(pi / mu) to the sampler) has no TRL key: the nearest is the PPO clip 0.2, "
            "which at the first update (every ratio 1) gives the same loss and gradient",
            "zero-advantage filter: prime-rl drops the tokens whose advantage is 0 (also an "
            "answer that scored exactly its group's mean); roll-viz drops whole zero-variance "
            "groups",
            _NO_FILTER_NOTE,
        ),
    ),
    "tinker": EraSetting(
        config={"scale_rewards": "none", "beta": 0.0, "loss_type": "dr_grpo", "epsilon": 0.2},
        notes=(
            "Tinker's importance_sampling loss is -sum of (pi / mu) x A over every token of "
            "the batch with no clip: TRL's dr_grpo is that sum divided by a constant "
            "(rows x max_completion_length); the PPO clip stays (no clip acts at the first "
            "update)",
        ),
    ),
    "deepseek_v32": EraSetting(
        config={
            "scale_rewards": "none",
            "beta": 0.04,
            "use_bias_correction_kl": True,
            "loss_type": "grpo",
            "epsilon": 0.2,
        },
        notes=(
            "use_bias_correction_kl: TRL's k3 times pi / pi_old, V3.2's unbiased estimate",
            "TRL loss_type grpo divides by every row (empty answers included)",
            "off-policy sequence masking, keep routing and keep sampling mask: not in the "
            "calculator's keys (at the first update the sequence mask removes nothing)",
        ),
    ),
    "scalerl_olmo3": EraSetting(
        config={
            "scale_rewards": "batch",
            "beta": 0.0,
            "loss_type": "dapo",
            "epsilon": 0.2,
            "epsilon_high": 0.28,
        },
        notes=(
            "scale_rewards batch: group mean, std of the whole batch (TRL's LitePPO option)",
            _NO_FILTER_NOTE,
        ),
    ),
}
