"""Stage 7: the policy-update losses, as pure tensor functions every dialect composes.

Dimension letters: B sequences, T response tokens (right-padded). Everything runs in float64 on
the caller's device; inputs are never modified. With d = logp - logp_old, r = exp(d), A the
per-token advantage and W the aggregation weights (loss = sum W * per-token loss):

- importance ratio: per token ``exp(d)`` (verl / OpenRLHF clamp d to [-20, 20]; ROLL, TRL none),
  per sequence ``exp(masked mean d)`` broadcast (ROLL ``importance_sampling: seq``, OpenRLHF
  ``gspo``, TRL ``sequence``), or verl's GSPO-token form ``sg(s) * pi / sg(pi)`` with log s
  clamped to <= 10 (same value, gradient only through the token's own log-prob);
- per-token losses: PPO ``-min(r A, clip(r) A)`` with the frameworks' dual clips (verl always
  c = clip_ratio_c = 3; ROLL ``dual_clip_loss`` c = 1 + 2 pg_clip; OpenRLHF optional c) and TRL's
  ``delta`` cap; vanilla PG ``-A logp``; CISPO ``-sg(w(r)) A logp`` (verl w = clip(r, 1-lo, 1+hi),
  ROLL clip(r, 0.9, 1.1), TRL min(r, epsilon_high)); SAPO ``-sigmoid(tau (r-1)) 4/tau A``;
- aggregation: every mode is linear, ``sum_bt W_bt x_bt`` with (B, T) weights (``agg_weights``);
- KL as a loss (``kl.token_kl`` with each framework's estimator and clamps), the entropy bonus and
  the clipped critic loss, each aggregated the way its framework does (``loss_agg_modes``);
- ``grad_coef`` = d(total)/d(logp_t) in closed form: the policy term with its aggregation weights
  plus the KL-loss term. The entropy bonus is NOT in it: the entropy depends on the whole
  next-token distribution (its gradient flows through the logits, not through the sampled
  token's log-prob), so no per-token coefficient of d(logp_t) describes it.

A dialect describes its loss (``LossSpec``, aggregation per term, metric names) in
``dialects/<name>.py``; ``loss_from_spec`` computes the ``LossResult``, whose ``total`` is
differentiable w.r.t. ``logprobs`` (and ``entropy`` / ``values`` when they require grad).

Further kinds (helpers in ``loss_variants``): verl DPPO-TV/-KL (``-A sg(min(r, c)) logp`` on a
probability trust region), GMPO (``geo_mean``, sequence level, mean over all rows), KL-Cov (PG
without clipping plus ``coef |d|`` on the top-covariance tokens), ROLL kimi15 / verl DRO
(``-A logp + tau/2 d^2``), TRL VESPO (``-phi(w) A logp``), verl Clip-Cov (PPO with the PG of a
few high-covariance tokens zeroed), ROLL TOPR (plain PG on rows with a positive score, TIS [0, 1]
on the others); per-token keep masks (TRL
``off_policy_mask_threshold``, ``top_entropy_quantile``) and ROLL's length sample weights scale
the policy term only; the KL may be straight-through (verl ``k3+``: value of k3, gradient of k2)
or multiplied by the ratio (TRL ``use_bias_correction_kl``).

What roll-viz simplifies against the real recipes: one process, one micro-batch, one gradient
accumulation step (global token / sample counts are this batch's; TRL's grad-accumulation
division is 1; verl's mini-batch is the whole batch, so its ``global_batch_size`` is B); of the
train/rollout corrections (the sampler's log-probs mu as ``rollout_logprobs``) OpenRLHF's
``is_correction_*``, TRL's ``vllm_importance_sampling_*`` and verl's ``bypass_mode`` (old = mu,
its rejection mask as ``policy_mask``, reinforce's IS weights as ``policy_weights``) are applied,
verl's decoupled ``algorithm.rollout_correction`` is not (``rollout_correction.lab_loss`` shows
it); no MoE aux loss, no TRL adaptive entropy; verl clip_cov
draws its tokens with the unseeded ``torch.randperm``, roll-viz with a seeded generator
(``viz_clip_cov_seed``); masked means divide by the exact count (the frameworks add 1e-8); ROLL's
unmasked token-mean sums are taken over valid tokens only (its metrics reproduce the padded sums
where they differ).

Size: one entry point (``loss_from_spec``) with the closed-form gradient of every loss kind next
to its value, so that the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import as_bool
from roll_viz.core.pipeline import loss_variants as variants
from roll_viz.core.pipeline.kl import token_kl

F64 = torch.float64

# canonical aggregation modes: name -> what it computes (x masked, L_i row lengths, n = rows
# with at least one token, B = all rows, T = tensor width, f = scale factor)
AGG_MODES: dict[str, str] = {
    "token-mean": "sum x / sum L_i  (verl/ROLL/OpenRLHF token-mean, TRL bnpo/dapo/cispo)",
    "token-sum": "sum x  (verl token-sum)",
    "seq-mean-token-sum": "sum_i (sum_t x) / n",
    "seq-mean-token-mean": "sum_i (mean_t x) / n  (OpenRLHF per-sample, ROLL)",
    "seq-mean-token-sum-norm": "sum_i (sum_t x) / n / f, f = loss_scale_factor or T",
    "token-sum-norm": "sum x / T, no batch division  (ROLL seq-mean-token-sum-norm)",
    "seq-mean-token-mean-all-rows": "sum_i (mean_t x) / B  (TRL grpo/sapo, ROLL critic, verl "
    "trainer seq-mean-token-mean)",
    "token-sum-norm-all-rows": "sum x / (B * f), f = max_completion_length  (TRL dr_grpo)",
    "seq-mean-token-sum-all-rows": "sum x / B  (verl trainer seq-mean-token-sum, TRL luspo)",
    "seq-mean-token-sum-norm-all-rows": "sum x / (B * f), f = loss_scale_factor or T  (verl "
    "trainer seq-mean-token-sum-norm)",
}


@dataclass(frozen=True)
class LossResult:
    """One framework's policy-update loss on one batch.

    ``total = rl * (policy + c_kl * kl) - c_ent * entropy`` with the coefficients in
    ``coefficients`` (rl is ROLL's ``rl_loss_coef``, 1 elsewhere; TRL's KL is added per token
    before aggregation, which is the same number because aggregation is linear). The critic
    loss ``terms["value"]`` is a separate optimisation and is NOT part of ``total``.

    Attributes:
        framework: "roll", "verl", "openrlhf" or "trl".
        total: () the actor loss; differentiable w.r.t. ``logprobs`` when it requires grad.
        terms: "policy", "kl", "entropy", "value" -> () aggregated term before its coefficient,
            or None where the framework does not compute it (KL loss off, no entropy, no critic).
        coefficients: "rl", "kl", "entropy" -> the multipliers used in ``total``.
        per_token: (B, T) detached tensors, 0 / False on padding: "ratio" (the ratio the loss
            uses; the broadcast sequence ratio for GSPO), "pg_loss" (per-token policy loss),
            "loss_weight" (W of the policy term), "grad_coef" (d total / d logp_t, without the
            entropy bonus), "kl" (per-token KL when the KL loss is on), and bool masks
            "clipped_high", "clipped_low" (the clip bound replaced the ratio: for PPO A>0 and
            r > 1+eps_high, A<0 and r < 1-eps_low, gradient 0; for CISPO the weight is capped,
            gradient kept), "dual_clipped" (A<0 loss capped at -c*A, or TRL's delta cap).
        metrics: the framework's own logged metrics under its own names (floats), as the
            framework computes them, its quirks included.
        notes: conventions applied, in order.
        metric_notes: metric name -> a note printed beside it where the framework's logged
            number is not the meaningful one (the masked value and why they differ).
    """

    framework: str
    total: Tensor
    terms: dict[str, Tensor | None]
    coefficients: dict[str, float]
    per_token: dict[str, Tensor]
    metrics: dict[str, float]
    notes: tuple[str, ...] = ()
    metric_notes: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------- aggregation


def agg_weights(response_mask: Tensor, mode: str, scale_factor: float | None = None) -> Tensor:
    """(B, T) weights W of an aggregation mode: ``aggregate(x) = sum(W * x)``.

    Zero-length rows get weight 0 everywhere; they still count in B for the "-all-rows" modes
    (TRL grpo / dr_grpo / luspo, ROLL's critic, verl's trainer, which passes the mini-batch's row
    count as ``global_batch_size``), and never in n (rows with a token) or the token count.

    Args:
        response_mask: (B, T) float 0/1 (or bool).
        mode: one of AGG_MODES.
        scale_factor: f of "seq-mean-token-sum-norm" and "seq-mean-token-sum-norm-all-rows"
            (None = T) and "token-sum-norm-all-rows" (required: TRL's max_completion_length);
            "token-sum-norm" always uses T.

    Returns:
        (B, T) float64 weights, 0 on padding.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"aggregation mode must be one of {tuple(AGG_MODES)}, got {mode!r}")
    m = as_bool(response_mask).to(F64)
    B, T = m.shape
    lengths = m.sum(-1, keepdim=True)
    n_rows = (lengths > 0).sum().clamp(min=1)
    per_row_mean = m / lengths.clamp(min=1.0)
    if mode == "token-mean":
        return m / m.sum().clamp(min=1.0)
    if mode == "token-sum":
        return m
    if mode == "seq-mean-token-sum":
        return m / n_rows
    if mode == "seq-mean-token-mean":
        return per_row_mean / n_rows
    if mode == "seq-mean-token-sum-norm":
        return m / n_rows / float(T if scale_factor is None else scale_factor)
    if mode == "token-sum-norm":
        return m / T
    if mode == "seq-mean-token-mean-all-rows":
        return per_row_mean / max(B, 1)
    if mode == "seq-mean-token-sum-all-rows":
        return m / max(B, 1)
    if mode == "seq-mean-token-sum-norm-all-rows":
        return m / max(B, 1) / float(T if scale_factor is None else scale_factor)
    if scale_factor is None:
        raise ValueError("token-sum-norm-all-rows needs scale_factor (max_completion_length)")
    return m / (max(B, 1) * float(scale_factor))


def aggregate(
    x: Tensor, response_mask: Tensor, mode: str, scale_factor: float | None = None
) -> Tensor:
    """Aggregate a (B, T) per-token quantity into a scalar (differentiable in ``x``).

    Args:
        x: (B, T) values (padding may hold anything, even inf).
        response_mask: (B, T) float 0/1 (or bool).
        mode: one of AGG_MODES (see ``agg_weights``).
        scale_factor: see ``agg_weights``.

    Returns:
        () float64 tensor.
    """
    weights = agg_weights(response_mask, mode, scale_factor)
    return (weights * torch.where(as_bool(response_mask), x.to(F64), 0.0)).sum()


# ---------------------------------------------------------------------------- ratio and losses


def importance_ratio(
    logprobs: Tensor,
    old_logprobs: Tensor,
    response_mask: Tensor,
    level: str = "token",
    clamp: float | None = None,
) -> Tensor:
    """Importance ratio pi / pi_old at each response token (differentiable in ``logprobs``).

    Args:
        logprobs: (B, T) current-policy log-probs of the sampled tokens.
        old_logprobs: (B, T) rollout-policy log-probs.
        response_mask: (B, T) float 0/1.
        level: "token" (exp(d), d clamped to [-clamp, clamp]), "sequence" (exp of the masked
            mean of d, broadcast; ``clamp`` unused) or "sequence-token" (verl GSPO: value
            exp(min(mean d, clamp)), gradient only through each token's own log-prob).
        clamp: see ``level`` (None = no clamp).

    Returns:
        (B, T) float64 ratio, 0 on padding (a zero-length row's sequence ratio would be 1).
    """
    mask = as_bool(response_mask)
    d = torch.where(mask, logprobs.to(F64) - old_logprobs.to(F64), 0.0)
    if level == "token":
        ratio = torch.exp(d if clamp is None else d.clamp(-clamp, clamp))
    elif level in ("sequence", "sequence-token"):
        lengths = mask.sum(-1, keepdim=True).clamp(min=1).to(F64)
        seq = d.sum(-1, keepdim=True) / lengths
        if level == "sequence":
            ratio = torch.exp(seq).expand_as(d)
        else:
            lp = torch.where(mask, logprobs.to(F64), 0.0)
            log_s = lp - lp.detach() + seq.detach()
            ratio = torch.exp(log_s if clamp is None else log_s.clamp(max=clamp))
    else:
        raise ValueError(f"level must be token, sequence or sequence-token, got {level!r}")
    return torch.where(mask, ratio, 0.0)


def ppo_token_loss(
    ratio: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    delta: float | None = None,
) -> Tensor:
    """PPO clipped surrogate per token, ``-min(r1 A, clip(r, 1-eps_low, 1+eps_high) A)``.

    ``r1 = min(r, delta)`` (TRL's two-sided cap) or r. With ``dual_clip`` c, tokens with A<0
    take ``min(loss, -c A)`` (verl always, c = 3; ROLL c = 1 + 2 pg_clip; OpenRLHF optional).

    Args:
        ratio: (B, T) importance ratio (differentiable).
        advantages: (B, T) advantages.
        eps_low: lower clip epsilon.
        eps_high: upper clip epsilon.
        dual_clip: dual-clip constant c > 1, or None.
        delta: TRL delta cap, or None.

    Returns:
        (B, T) per-token loss.
    """
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    r1 = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(r1 * advantages, clipped * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def value_loss(
    values: Tensor,
    old_values: Tensor | None,
    returns: Tensor,
    response_mask: Tensor,
    clip: float | None,
    mode: str,
    scale_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Clipped critic loss ``0.5 * agg(max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2))``.

    Args:
        values: (B, T) new value predictions (differentiable).
        old_values: (B, T) values at rollout time (needed when ``clip`` is set).
        returns: (B, T) value targets.
        response_mask: (B, T) float 0/1.
        clip: clip range c (None = plain squared error).
        mode: aggregation (AGG_MODES).
        scale_factor: see ``agg_weights``.

    Returns:
        (() loss, (B, T) bool mask where the clipped error is the larger one).
    """
    mask = as_bool(response_mask)
    v = torch.where(mask, values.to(F64), 0.0)
    ret = torch.where(mask, returns.to(F64), 0.0)
    err = (v - ret) ** 2
    if clip is None:
        per_token, used_clip = err, torch.zeros_like(mask)
    else:
        old = torch.where(mask, old_values.to(F64), 0.0)
        clipped = old + (v - old).clamp(-clip, clip)
        err_clipped = (clipped - ret) ** 2
        per_token = torch.maximum(err, err_clipped)
        used_clip = (err_clipped > err) & mask
    return 0.5 * aggregate(per_token, mask, mode, scale_factor), used_clip


# ---------------------------------------------------------------- the loss a dialect describes


@dataclass(frozen=True)
class LossSpec:
    """One framework's policy loss, resolved from its config by its dialect module."""

    kind: str  # "ppo" | "pg" | "cispo" | "sapo" | "dppo_tv" | "dppo_kl" | "geo_mean" | "kl_cov"
    #            | "kimi" | "vespo"
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
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
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


# -------------------------------------------------------------------- inputs and entry point


def _as_input(name: str, x: Any, shape: tuple, mask: Tensor, keep_grad: bool) -> Tensor:
    t = torch.as_tensor(x)
    if not keep_grad:
        t = t.detach()
    if name == "advantages" and t.dim() == 1 and t.shape[0] == shape[0]:
        t = t[:, None].expand(shape)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    bad = torch.nonzero(mask & ~torch.isfinite(t.detach()))
    if bad.numel():
        b, tok = bad[0].tolist()
        raise ValueError(f"{name}[{b}][{tok}]: non-finite value on a response token")
    return torch.where(mask, t.to(F64), 0.0)


def loss_from_spec(
    spec: LossSpec,
    modes: dict[str, tuple[str, Any] | None],
    metrics: Callable[[MetricContext], dict[str, float]],
    *,
    framework: str,
    config: dict[str, Any],
    notes: list[str],
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
    scores: Tensor | None = None,
    rollout_logprobs: Tensor | None = None,
    difficulty: Tensor | None = None,
    policy_mask: Tensor | None = None,
    policy_weights: Tensor | None = None,
    metric_mask: Tensor | None = None,
    entropy_mask: Tensor | None = None,
) -> LossResult:
    """The loss a dialect describes: value, per-token pieces, gradient coefficients, metrics.

    Args:
        spec: the dialect's ``LossSpec`` for this config.
        modes: "policy", "kl", "entropy", "value" -> (AGG_MODES name, scale_factor), or None for
            a term the framework does not have (the dialect's ``loss_agg_modes``).
        metrics: the dialect's metric function (its own logged names).
        framework: the dialect's name (recorded in the result).
        config: the resolved dialect config (handed to ``metrics``).
        notes: conventions applied so far (the spec's); the loss appends its own.
        logprobs: (B, T) current-policy log-probs of the sampled tokens; may require grad.
        old_logprobs: (B, T) rollout ("old") log-probs (treated as constants).
        advantages: (B, T) or (B,) advantages (constants).
        response_mask: (B, T) 0/1 loss mask.
        ref_logprobs: (B, T) reference log-probs; needed when the KL loss is on.
        entropy: (B, T) policy entropy per position; needed when the entropy coefficient is not 0.
            Kept differentiable if it requires grad.
        values: (B, T) new critic predictions (kept differentiable); with ``returns`` (and
            ``old_values`` when the framework clips) gives ``terms["value"]``.
        old_values: (B, T) critic values at rollout time.
        returns: (B, T) value targets.
        scores: (B,) response scores (ROLL ``pg_variant: topr`` splits the rows by their sign).
        rollout_logprobs: (B, T) the sampler's log-probs mu (constants); needed by a
            train/rollout correction (``LossSpec.is_correction``).
        difficulty: (B,) each sample's difficulty in [0, 1] (ROLL ``difficulty_loss_weight``;
            without it the weight is skipped, as ROLL skips it without the data).
        policy_mask: (B, T) 0/1 subset of ``response_mask`` the policy term and its metrics run
            on (verl ``bypass_mode``: the rejection mask); the KL and entropy terms keep
            ``response_mask``, and token-mean still divides by ``response_mask``'s token count
            (verl's ``batch_num_tokens`` is counted before the loss rejects tokens).
        policy_weights: (B, T) constant multipliers of the per-token policy loss (verl
            ``bypass_mode`` reinforce: the rollout IS weights).
        metric_mask: (B, T) 0/1 mask the dialect's metric function may read as
            ``MetricContext.metric_mask`` (ROLL: the response mask before its sample-level mask,
            over which it logs some metrics); the loss does not use it.
        entropy_mask: (B, T) 0/1 mask of the entropy term in place of ``response_mask`` (ROLL
            aggregates its entropy over the unmasked ``response_mask``).

    Returns:
        LossResult (see its docstring). Padding may hold anything (even inf) in every input.

    Raises:
        ValueError: a shape mismatch, a non-finite value on a response token, or a missing input
            the config needs (the message starts with the argument's name).
    """
    cfg = config
    mask_raw = torch.as_tensor(response_mask).detach()
    if mask_raw.dim() != 2 or mask_raw.shape[1] == 0:
        raise ValueError(f"response_mask: expected (B, T>=1), got {tuple(mask_raw.shape)}")
    if not bool(((mask_raw == 0) | (mask_raw == 1)).all()):
        raise ValueError("response_mask: must contain only 0 and 1")
    mask = mask_raw > 0
    shape = tuple(mask.shape)
    m = mask.to(F64)
    lp = _as_input("logprobs", logprobs, shape, mask, keep_grad=True)
    old = _as_input("old_logprobs", old_logprobs, shape, mask, keep_grad=False)
    adv = _as_input("advantages", advantages, shape, mask, keep_grad=False)
    ref = None
    if ref_logprobs is not None:
        ref = _as_input("ref_logprobs", ref_logprobs, shape, mask, keep_grad=False)
    if spec.kl_on and not spec.kl_zero and ref is None:
        raise ValueError("ref_logprobs: needed for the KL loss term")
    ent, ent_m = None, m
    if entropy_mask is not None:
        ent_bool = torch.as_tensor(entropy_mask).detach() > 0
        if tuple(ent_bool.shape) != shape:
            raise ValueError(f"entropy_mask: expected shape {shape}, got {tuple(ent_bool.shape)}")
        ent_m = ent_bool.to(F64)
    if entropy is not None:
        ent = _as_input("entropy", entropy, shape, ent_m > 0, keep_grad=True)
    if spec.entropy_coef != 0 and ent is None:
        raise ValueError("entropy: needed when the entropy coefficient is not 0")

    lengths = m.sum(-1, keepdim=True)
    d = lp.detach() - old  # (B, T), 0 on padding
    w_pol = agg_weights(m, *modes["policy"])

    mu = None
    if rollout_logprobs is not None:
        mu = _as_input("rollout_logprobs", rollout_logprobs, shape, mask, keep_grad=False)
    if (spec.is_correction is not None or spec.ratio_vs_rollout) and mu is None:
        raise ValueError("rollout_logprobs: needed for the train/rollout correction")
    full_m = m  # response_mask: the KL / entropy terms and token-mean's denominator
    metric_bool, metric_d = None, None
    if metric_mask is not None:
        metric_bool = torch.as_tensor(metric_mask).detach() > 0
        if tuple(metric_bool.shape) != shape:
            raise ValueError(f"metric_mask: expected shape {shape}, got {tuple(metric_bool.shape)}")
        if bool((mask & ~metric_bool).any()):
            raise ValueError("metric_mask: must cover every token of response_mask")
        lp_u = _as_input("logprobs", logprobs, shape, metric_bool, keep_grad=False)
        metric_d = lp_u - _as_input("old_logprobs", old_logprobs, shape, metric_bool, False)
    if policy_mask is not None:
        pmask = torch.as_tensor(policy_mask).detach()
        if tuple(pmask.shape) != shape:
            raise ValueError(f"policy_mask: expected shape {shape}, got {tuple(pmask.shape)}")
        mask = mask & (pmask > 0)
        m = mask.to(F64)
        lengths = m.sum(-1, keepdim=True)

    extra: dict[str, Tensor] = {}
    sampler_w = None
    if spec.sampler_is is not None and mu is not None:
        if spec.kind == "vespo" and spec.sampler_is[0].startswith("sequence"):
            raise ValueError(
                "vllm_importance_sampling_mode: VESPO takes token_truncate or token_mask"
            )
        sampler_w = variants.sampler_is_ratio(old, mu, m, *spec.sampler_is)
        extra["is_ratio_unit"] = sampler_w

    # ---- policy term: value (autograd) and closed-form dl/dlogp
    base = mu if spec.ratio_vs_rollout else old
    ratio = importance_ratio(lp, base, m, spec.level, spec.clamp)
    r = ratio.detach()
    false = torch.zeros_like(mask)
    clipped_high, clipped_low, dual = false, false, false
    dl_dlogp, seq_policy = None, None
    ratio_shown = r
    if spec.kind == "pg":
        pg = -adv * lp
        dl_dlogp = -adv
        ratio_shown = torch.where(mask, torch.exp(d), 0.0)
    elif spec.kind == "cispo":
        low = 0.0 if spec.cispo_low is None else spec.cispo_low
        weight = r.clamp(min=spec.cispo_low, max=spec.cispo_high)  # TRL: no lower bound
        keep = torch.ones_like(r)
        if spec.unified_mask:
            killed = ((adv > 0) & (r > spec.cispo_high)) | ((adv < 0) & (r < low))
            keep = (~killed).to(F64)
            notes.append("cispo_use_unified_mask: PPO-clipped tokens get zero weight")
        pg = -weight * adv * lp * keep
        dl_dlogp = -weight * adv * keep
        clipped_high = (r > spec.cispo_high) & mask
        clipped_low = (r < spec.cispo_low) & mask if spec.cispo_low is not None else false
    elif spec.kind in ("dppo_tv", "dppo_kl"):
        pg, dl_dlogp, valid = variants.dppo(
            lp, old, adv, r, spec.kind, spec.eps_low, spec.eps_high, spec.trunc_c
        )
        clipped_high = (~valid) & (adv > 0) & mask
        clipped_low = (~valid) & (adv <= 0) & mask
        extra["valid"] = valid & mask
    elif spec.kind == "topr":
        if scores is None:
            raise ValueError("scores: needed for pg_variant topr (it splits rows by score sign)")
        positive = (torch.as_tensor(scores).to(F64) > 0)[:, None].expand_as(r)
        w_pos, w_neg = spec.topr_weights
        weight = torch.where(positive, w_pos, w_neg * r.clamp(0.0, 1.0))
        pg = -weight * adv * lp
        dl_dlogp = -weight * adv
        clipped_high = (~positive) & (r > 1.0) & mask
        extra["topr_positive"] = positive & mask
        extra["topr_positive_unit"] = positive[:, :1]  # (B, 1), empty rows included: for metrics
    elif spec.kind == "kimi":
        pg = -adv * lp + 0.5 * spec.kimi_tau * (lp - old) ** 2
        dl_dlogp = -adv + spec.kimi_tau * d
        ratio_shown = torch.where(mask, torch.exp(d), 0.0)
    elif spec.kind == "vespo":
        phi = variants.vespo_phi(d, adv, m, spec.vespo, sampler_w)
        pg = -phi * adv * lp
        dl_dlogp = -phi * adv
        extra["phi"] = phi
    elif spec.kind == "kl_cov":
        chosen = variants.kl_cov_tokens(adv, lp.detach(), mask, spec.kl_cov_ratio)
        pg = -adv * ratio + spec.kl_cov_coef * (lp - old).abs() * chosen
        dl_dlogp = -adv * r + spec.kl_cov_coef * torch.sign(d) * chosen
        extra["kl_cov_chosen"] = chosen > 0
    elif spec.kind == "geo_mean":
        seq_policy, pg, g_geo, clipped = variants.geo_mean(
            lp, old, adv, m, spec.eps_low, spec.eps_high
        )
        clipped_high = clipped & (adv > 0)
        clipped_low = clipped & (adv < 0)
        ratio_shown = torch.where(mask, torch.exp(g_geo["log_ratio"]), 0.0)
    else:
        if spec.kind in ("ppo", "clip_cov"):
            pg = ppo_token_loss(ratio, adv, spec.eps_low, spec.eps_high, spec.dual_clip, spec.delta)
            dl_dr, clipped_high, clipped_low, dual = _ppo_dr(r, adv, spec, mask)
            if spec.kind == "clip_cov":
                corr = variants.clip_cov_keep(
                    r, adv, lp.detach(), mask, spec.eps_low, spec.eps_high, spec.clip_cov
                )
                pg, dl_dr = pg * corr, dl_dr * corr
                extra["clip_cov_zeroed"] = corr == 0
        else:
            tau_pos, tau_neg = (
                torch.tensor(spec.tau_pos, dtype=F64),
                torch.tensor(spec.tau_neg, dtype=F64),
            )
            tau = torch.where(adv > 0, tau_pos, tau_neg)  # float64 (Python floats give float32)
            pg = -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * adv
            sig = torch.sigmoid(tau * (r - 1.0))
            dl_dr = -adv * 4.0 * sig * (1.0 - sig)
    pg = torch.where(mask, pg, 0.0)

    # per-token keep masks (TRL off_policy_mask_threshold, top_entropy_quantile) and ROLL's
    # per-sample weights: they scale the policy term's weights, not the KL's
    keep = torch.ones_like(m)
    if spec.is_correction is not None and spec.kind == "ppo" and spec.level == "token":
        coef, filtered = variants.rollout_correction(old, mu, mask, *spec.is_correction)
        keep = keep * torch.where(mask, coef, 0.0)
        extra["is_coef"] = coef.detach()
        extra["is_filtered"] = filtered.expand_as(m) & mask
        extra["is_filtered_unit"] = filtered  # (B, T) or (B, 1) with empty rows: for metrics
    if mu is not None:
        extra["log_w"] = old - mu  # log pi_old / mu, the train/rollout mismatch per token
    if sampler_w is not None and spec.kind != "vespo":
        keep = keep * torch.where(mask, sampler_w.expand_as(m), 0.0)
    if spec.off_policy_threshold is not None:
        d_sampling = d if mu is None else lp.detach() - mu
        keep = keep * variants.off_policy_keep(adv, d_sampling, m, spec.off_policy_threshold)
        extra["off_policy_kept"] = (keep > 0) & mask
    if spec.entropy_quantile < 1.0:
        if ent is None:
            raise ValueError("entropy: needed for top_entropy_quantile < 1")
        high = variants.high_entropy_mask(ent.detach(), mask, 1.0 - spec.entropy_quantile)
        keep = keep * high.to(F64)
        extra["entropy_kept"] = high
    row_w = torch.ones((shape[0], 1), dtype=F64)
    use_difficulty = spec.difficulty_weights and difficulty is not None
    if spec.length_weights or use_difficulty:
        diff = None
        if use_difficulty:
            diff = torch.as_tensor(difficulty).detach().to(F64)
            if diff.shape != (shape[0],) or not bool(torch.isfinite(diff).all()):
                raise ValueError(f"difficulty: expected ({shape[0]},) finite values")
        row_w = variants.sample_weights(m, diff, spec.length_weights)[:, None]
    w_pol = agg_weights(m, *modes["policy"]) * row_w
    if policy_mask is not None and modes["policy"][0] == "token-mean":
        w_pol = m / full_m.sum().clamp(min=1.0) * row_w  # batch_num_tokens: before rejection
    if policy_weights is not None:
        pw = _as_input("policy_weights", policy_weights, shape, mask, keep_grad=False)
        keep = keep * pw
    w_eff = w_pol * keep

    if seq_policy is not None:  # verl geo_mean: a sequence-level loss, mean over all rows
        g_policy = g_geo["coef"] * keep
        policy = seq_policy
        w_pol = g_geo["weights"]
        w_eff = w_pol
    elif dl_dlogp is not None:
        g_policy = w_eff * dl_dlogp
    elif spec.level == "token":
        d_ratio = lp.detach() - base
        inside = torch.ones_like(r) if spec.clamp is None else (d_ratio.abs() <= spec.clamp).to(F64)
        g_policy = w_eff * dl_dr * r * inside
    elif spec.level == "sequence":
        coupling = (w_eff * dl_dr).sum(-1, keepdim=True)
        g_policy = m * r / lengths.clamp(min=1.0) * coupling
    else:  # verl GSPO-token: own token only, log s <= clamp
        seq_mean = d.sum(-1, keepdim=True) / lengths.clamp(min=1.0)
        g_policy = w_eff * dl_dr * r * (seq_mean <= spec.clamp).to(F64)
    if seq_policy is None:
        policy = (w_eff * pg).sum()
    outside = None if metric_bool is None else metric_bool & ~mask
    if (
        spec.kind == "kimi"
        and spec.unmasked_token_sum
        and modes["policy"][0] == "token-mean"
        and outside is not None
        and bool(outside.any())
    ):
        lp_out = _as_input("logprobs", logprobs, shape, outside, keep_grad=True)
        d_out = lp_out - _as_input("old_logprobs", old_logprobs, shape, outside, False)
        w_out = outside.to(F64) / m.sum().clamp(min=1.0) * row_w
        reg = 0.5 * spec.kimi_tau * d_out**2
        policy = policy + (w_out * reg).sum()
        g_policy = g_policy + w_out * spec.kimi_tau * d_out.detach()
        extra["kimi_outside_unit"] = reg.detach()
        notes.append(
            "ROLL token-mean sums loss_mat without the mask: kimi15's tau/2 d^2 on the "
            f"{int(outside.sum())} tokens of dropped samples adds to the loss, divided by the "
            "final mask's token count"
        )

    # ---- KL term (on response_mask: a policy_mask narrows the policy term only)
    pol_mask, pol_m = mask, m
    mask, m = full_m > 0, full_m
    kl_tok, kl_term, g_kl = None, None, torch.zeros_like(m)
    w_kl = agg_weights(m, *modes["kl"])
    if spec.kl_on:
        if spec.kl_zero:
            kl_tok = torch.zeros_like(m)
            kl_term = torch.zeros((), dtype=F64)
        else:
            kl_tok = token_kl(lp, ref, m, spec.kl_estimator, spec.kl_clamp, spec.kl_log_ratio_clamp)
            slope = _kl_grad(lp.detach() - ref, spec, mask)
            if spec.kl_straight_through:  # verl "+": forward value, k2 gradient
                k2 = 0.5 * torch.where(mask, lp - ref, 0.0) ** 2
                kl_tok = k2 - k2.detach() + kl_tok.detach()
                slope = torch.where(mask, lp.detach() - ref, 0.0)
            elif spec.kl_is_weight_clip is not None:  # OpenRLHF unbiased_gradient
                w = torch.exp(torch.where(mask, lp.detach() - old, 0.0))
                w = w.clamp(max=spec.kl_is_weight_clip)
                k2 = w * 0.5 * torch.where(mask, lp - ref, 0.0) ** 2
                kl_tok = k2 - k2.detach() + kl_tok.detach()
                slope = torch.where(mask, w * (lp.detach() - ref), 0.0)
            if spec.kl_ratio_correction:  # TRL use_bias_correction_kl: k3 * pi/pi_old
                value = kl_tok.detach()
                kl_tok = kl_tok * ratio
                g = w_kl * slope * r
                if spec.level == "token":
                    g = g + w_kl * value * r
                else:
                    coupling = (w_kl * value).sum(-1, keepdim=True)
                    g = g + m * r / lengths.clamp(min=1.0) * coupling
                g_kl = spec.kl_coef * g
            else:
                g_kl = spec.kl_coef * w_kl * slope
            kl_term = (w_kl * kl_tok).sum()
    # ---- entropy term
    ent_term = None
    if ent is not None:
        ent_mask = ent_m if "entropy_kept" not in extra else extra["entropy_kept"].to(F64)
        ent_term = aggregate(ent, ent_mask, *modes["entropy"])
    # ---- value term (separate critic)
    value_term, vf_clipped = None, None
    if values is not None:
        if not spec.has_critic:
            notes.append("TRL GRPO has no critic: values ignored")
        else:
            value_term, vf_clipped = _value_term(values, old_values, returns, mask, spec, modes)

    total = policy
    if kl_term is not None:
        total = total + spec.kl_coef * kl_term
    total = spec.rl_coef * total
    if ent_term is not None and spec.entropy_coef != 0:
        total = total - spec.entropy_coef * ent_term
    grad_coef = spec.rl_coef * (g_policy + g_kl)

    per_token = {
        "ratio": torch.where(mask, ratio_shown, 0.0),
        "pg_loss": pg.detach(),
        "loss_weight": w_eff,
        "grad_coef": torch.where(mask, grad_coef, 0.0),
        "clipped_high": clipped_high & pol_mask,
        "clipped_low": clipped_low & pol_mask,
        "dual_clipped": dual & pol_mask,
    }
    if policy_mask is not None:
        per_token["policy_mask"] = pol_mask
    if "kimi_outside_unit" in extra:  # ROLL kimi15 token-mean: dropped samples' tokens too
        per_token["grad_coef"] = torch.where(mask | outside, grad_coef, 0.0)
    if kl_tok is not None:
        per_token["kl"] = kl_tok.detach()
    for name, value in extra.items():
        if not name.endswith("_unit"):
            per_token[name] = torch.where(mask, value, torch.zeros_like(value))
    terms = {"policy": policy, "kl": kl_term, "entropy": ent_term, "value": value_term}
    ctx = MetricContext(
        cfg,
        spec,
        modes,
        pol_m,
        pol_mask,
        d,
        r,
        adv,
        terms,
        total,
        ent,
        kl_tok,
        vf_clipped,
        pg=pg.detach(),
        extra=extra,
        row_weights=row_w[:, 0],
        metric_notes={},
        logp=lp.detach(),
        ref=ref,
        metric_mask=metric_bool,
        metric_d=metric_d,
        full_mask=full_m,
    )
    metric_values = metrics(ctx)
    return LossResult(
        framework=framework,
        total=total,
        terms=terms,
        coefficients={"rl": spec.rl_coef, "kl": spec.kl_coef, "entropy": spec.entropy_coef},
        per_token=per_token,
        metrics=metric_values,
        notes=tuple(notes),
        metric_notes=dict(ctx.metric_notes),
    )


def _ppo_dr(r: Tensor, adv: Tensor, spec: LossSpec, mask: Tensor):
    """Closed-form d(ppo_token_loss)/dr (ties split like torch.minimum) and the clip masks."""
    lo, hi = 1.0 - spec.eps_low, 1.0 + spec.eps_high
    clipped = r.clamp(lo, hi)
    r1 = r if spec.delta is None else r.clamp(max=spec.delta)
    a1, a2 = r1 * adv, clipped * adv
    d1 = -adv * (r <= spec.delta).to(F64) if spec.delta is not None else -adv
    d2 = -adv * ((r >= lo) & (r <= hi)).to(F64)
    dl = torch.where(a1 < a2, d1, torch.where(a2 < a1, d2, 0.5 * (d1 + d2)))
    dual = torch.zeros_like(mask)
    if spec.dual_clip is not None:
        loss0 = -torch.minimum(a1, a2)
        cap = -spec.dual_clip * adv
        capped = torch.where(loss0 < cap, dl, torch.where(loss0 == cap, 0.5 * dl, 0.0))
        dl = torch.where(adv < 0, capped, dl)
        dual = (adv < 0) & (loss0 > cap)
    if spec.delta is not None:
        dual = (adv < 0) & (r > spec.delta)
    clipped_high = (adv > 0) & (r > hi)
    clipped_low = (adv < 0) & (r < lo)
    return dl, clipped_high, clipped_low, dual


def _kl_grad(log_ratio: Tensor, spec: LossSpec, mask: Tensor) -> Tensor:
    """Slope of KL_estimator(logp - ref) w.r.t. logp with the framework's clamps (0 if clamped)."""
    x = log_ratio
    inside = torch.ones_like(x)
    if spec.kl_log_ratio_clamp is not None:
        c = spec.kl_log_ratio_clamp
        inside = ((x >= -c) & (x <= c)).to(F64)
        x = x.clamp(-c, c)
    if spec.kl_estimator == "k1":
        value, slope = x, torch.ones_like(x)
    elif spec.kl_estimator == "abs":
        value, slope = x.abs(), torch.sign(x)
    elif spec.kl_estimator == "k2":
        value, slope = 0.5 * x * x, x
    else:
        value, slope = torch.expm1(-x) + x, -torch.expm1(-x)
    if spec.kl_clamp is not None:
        c = spec.kl_clamp
        inside = inside * ((value >= -c) & (value <= c)).to(F64)
    return torch.where(mask, slope * inside, 0.0)


def _value_term(values, old_values, returns, mask, spec: LossSpec, modes):
    shape = tuple(mask.shape)
    if returns is None:
        raise ValueError("returns: needed with values for the critic loss")
    if spec.value_clip is not None and old_values is None:
        raise ValueError("old_values: needed for the clipped critic loss")
    v = _as_input("values", values, shape, mask, keep_grad=True)
    ret = _as_input("returns", returns, shape, mask, keep_grad=False)
    old = None
    if old_values is not None:
        old = _as_input("old_values", old_values, shape, mask, keep_grad=False)
    mode, factor = modes["value"]
    return value_loss(v, old, ret, mask, spec.value_clip, mode, factor)


# ------------------------------------------------------------------------------------ metrics


@dataclass(frozen=True)
class MetricContext:
    """What a dialect's metric function reads: the config, spec, masks, ratio and terms."""

    cfg: dict
    spec: LossSpec
    modes: dict
    m: Tensor  # (B, T) float mask
    mask: Tensor  # (B, T) bool
    d: Tensor  # (B, T) logp - old (unclamped), 0 on padding
    r: Tensor  # (B, T) ratio used by the loss (detached)
    adv: Tensor
    terms: dict
    total: Tensor
    entropy: Tensor | None
    kl_tok: Tensor | None
    vf_clipped: Tensor | None
    pg: Tensor | None = None  # (B, T) per-token policy loss (detached)
    extra: dict | None = None  # kind-specific (B, T) pieces (dppo valid mask, vespo phi, ...)
    row_weights: Tensor | None = None  # (B,) ROLL per-sample weights (ones when off)
    metric_notes: dict | None = None  # filled by the metric function: name -> note
    logp: Tensor | None = None  # (B, T) current log-probs (detached), for logged-only metrics
    ref: Tensor | None = None  # (B, T) reference log-probs when given (KL logged with it off)
    metric_mask: Tensor | None = None  # (B, T) bool, a dialect's own metric mask (ROLL: unmasked)
    full_mask: Tensor | None = None  # (B, T) float response_mask (m is the policy term's mask)
    metric_d: Tensor | None = None  # (B, T) logp - old on metric_mask (0 elsewhere)

    def token_mean(self, x: Tensor) -> float:
        """Token-mean of a (B, T) quantity over the valid tokens."""
        return aggregate(x.to(F64), self.m, "token-mean").item()

    def agg(self, x: Tensor, term: str = "policy") -> float:
        """A (B, T) quantity aggregated the way the framework aggregates ``term``."""
        return aggregate(x.to(F64), self.m, *self.modes[term]).item()

    def item(self, name: str) -> float | None:
        """The float value of a loss term (None where the framework does not compute it)."""
        value = self.terms[name]
        return None if value is None else value.detach().item()

    def surrogates(self) -> tuple[Tensor, Tensor]:
        """(B, T) PPO surrogates ``r1 * A`` and ``clip(r) * A`` (r1 = min(r, delta) or r)."""
        spec = self.spec
        r1 = self.r if spec.delta is None else self.r.clamp(max=spec.delta)
        clipped = self.r.clamp(1.0 - spec.eps_low, 1.0 + spec.eps_high)
        return r1 * self.adv, clipped * self.adv
