"""``LossSpec``: one framework's policy-update loss, resolved from its config.

A dialect's ``loss_spec`` builds it (the kind from its loss table, that kind's parameters, the
KL, entropy, critic and masking settings); ``losses.loss_from_spec`` runs it, the terms in
``policy_terms`` and ``loss_kl`` read it. A frozen record of plain values, no tensors.

What roll-viz simplifies: nothing (a record).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LossSpec:
    """One framework's policy loss, resolved from its config by its dialect module."""

    kind: str  # a key of policy_terms.POLICY_TERMS
    level: str  # "token" | "sequence" | "sequence-token"
    clamp: float | None
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    delta: float | None = None
    cispo_low: float | None = None
    cispo_high: float | None = None
    unified_mask: bool = False
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    kl_on: bool = False
    kl_zero: bool = False  # OpenRLHF use_loss with init_coef 0: no reference model, KL 0
    kl_estimator: str = "k3"
    kl_clamp: float | None = None
    kl_log_ratio_clamp: float | None = None
    beta: float = 0.0  # the KL loss coefficient
    entropy_coef: float = 0.0
    entropy_adaptive: bool = False  # TRL use_adaptive_entropy: the metric reads the entropy
    rl_coef: float = 1.0
    value_clip: float | None = None
    has_critic: bool = True
    kl_straight_through: bool = False  # verl "k3+": value of the estimator, gradient of k2
    kl_ratio_correction: bool = False  # TRL use_bias_correction_kl: KL * ratio
    # OpenRLHF unbiased_gradient: value of the estimator, gradient w * (logp - ref) with
    # w = min(pi / pi_old, this clip), detached (KL_IS_WEIGHT_CLIP)
    kl_is_weight_clip: float | None = None
    trunc_c: float = 3.0  # verl dppo: sg(min(r, clip_ratio_c))
    kimi_tau: float = 0.1  # ROLL kimi15_tau / verl dro_beta: + tau/2 (logp - old)^2
    # prime-rl default loss: dppo_mask_low, dppo_mask_high, adv_tau, kl_tau
    prime: tuple[float, float, float, float] = (0.2, 0.2, 1.0, 1e-3)
    kl_cov_ratio: float = 0.0002  # verl kl_cov: share of tokens with the KL penalty
    kl_cov_coef: float = 0.1  # verl ppo_kl_coef
    vespo: tuple[float, float, float, float] = (2.0, 3.0, 3.0, 2.0)  # k+, lambda+, k-, lambda-
    off_policy_threshold: float | None = None  # TRL off_policy_mask_threshold
    entropy_quantile: float = 1.0  # TRL top_entropy_quantile
    length_weights: bool = False  # ROLL length_loss_weight (per-sample weights of the policy term)
    difficulty_weights: bool = False  # ROLL difficulty_loss_weight (needs the samples' difficulty)
    topr_weights: tuple[float, float] = (1.0, 1.0)  # ROLL topr_positive/negative_weight
    clip_cov: tuple[float, float, float, int] = (0.0002, 1.0, 5.0, 0)  # ratio, lb, ub, draw seed
    # train/rollout mismatch correction (OpenRLHF is_correction_*): level, mode, gating, low, high
    is_correction: tuple[str, str, str, float, float] | None = None
    ratio_vs_rollout: bool = False  # the ratio's denominator is mu (OpenRLHF gspo + correction)
    # ROLL token-mean (agg_loss sums loss_mat unmasked): kimi15's regulariser on the tokens of
    # samples its sample-level mask dropped (metric_mask minus response_mask) still counts
    unmasked_token_sum: bool = False
    # the sampler's IS ratio (TRL vllm_importance_sampling_*): mode, clip min, clip max
    sampler_is: tuple[str, float | None, float | None] | None = None
