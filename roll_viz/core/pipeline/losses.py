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

Where each piece lives: a dialect maps its loss switch (``loss_mode``, ``pg_variant``,
``loss_type``, ``policy_loss_type``) to a kind in one table of ``LossMode`` rows in
``dialects/<name>.py`` (the kind's parameters as a ``LossSpec``, the metric names it logs, the
aggregation per term); ``policy_terms.POLICY_TERMS[kind]`` computes the policy term's value, its
closed-form gradient, clip masks and metric pieces; ``loss_kl`` the KL term's; ``aggregation``
the weights; ``loss_inputs`` checks the batch. ``loss_from_spec`` composes them into the
``LossResult``, whose ``total`` is differentiable w.r.t. ``logprobs`` (and ``entropy`` /
``values`` when they require grad).

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
its rejection mask as ``policy_mask``, reinforce's IS weights as ``policy_weights``) and its
decoupled ``algorithm.rollout_correction`` (a narrowed ``response_mask``, IS weights as
``policy_weights``, the v1 trainer's ``batch_num_tokens``) are applied; no MoE aux loss, no TRL
adaptive entropy; verl clip_cov draws its tokens with the unseeded ``torch.randperm``, roll-viz
with a seeded generator (``viz_clip_cov_seed``); masked means divide by the exact count (the
frameworks add 1e-8); ROLL's unmasked token-mean sums are taken over valid tokens only (its
metrics reproduce the padded sums where they differ).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import as_bool
from roll_viz.core.pipeline import loss_variants as variants
from roll_viz.core.pipeline.aggregation import AGG_MODES as AGG_MODES  # re-export
from roll_viz.core.pipeline.aggregation import agg_weights, aggregate
from roll_viz.core.pipeline.loss_inputs import LossBatch, LossInputs, as_input, prepare_inputs
from roll_viz.core.pipeline.loss_kl import kl_loss_term
from roll_viz.core.pipeline.loss_spec import LossSpec
from roll_viz.core.pipeline.policy_terms import (
    PolicyInputs,
    PolicyTerm,
    TermResult,
    policy_term,
)
from roll_viz.core.pipeline.policy_terms import ppo_token_loss as ppo_token_loss  # re-export

F64 = torch.float64

#: The bool per-token clip masks every loss reports (a kind may add its own: ``clip_masks``).
CLIP_MASKS: tuple[str, ...] = ("clipped_high", "clipped_low", "dual_clipped")


@dataclass(frozen=True)
class LossResult:
    """One framework's policy-update loss on one batch.

    ``total = rl * (policy + beta * kl) - c_ent * entropy`` with the coefficients in
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
        clip_masks: the names in ``per_token`` of the bool clip masks (``CLIP_MASKS`` and the
            kind's own, e.g. Clip-Cov's zeroed tokens).
    """

    framework: str
    total: Tensor
    terms: dict[str, Tensor | None]
    coefficients: dict[str, float]
    per_token: dict[str, Tensor]
    metrics: dict[str, float]
    notes: tuple[str, ...] = ()
    metric_notes: dict[str, str] = field(default_factory=dict)
    clip_masks: tuple[str, ...] = CLIP_MASKS


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
class LossMode:
    """One row of a dialect's loss table: its loss name (``loss_mode``, ``pg_variant``, ...).

    Attributes:
        kind: the registered kind it runs (a key of ``policy_terms.POLICY_TERMS``).
        params: (resolved config, notes) -> that kind's ``LossSpec`` fields (level, clamp, clip
            bounds, ...); appends the note saying what the dialect runs.
        metrics: the metrics the framework logs for this loss, under its own names (the
            dialect's ``loss_metrics`` adds the ones every loss logs), or None.
        policy_agg: the policy term's aggregation (AGG_MODES name, scale factor: a number, or
            the name of the config key that holds it) where the loss has its own, else None
            (the dialect's ``loss_agg_mode``).
    """

    kind: str
    params: Callable[[Mapping[str, Any], list[str]], dict[str, Any]]
    metrics: Callable[[MetricContext], dict[str, float]] | None = None
    policy_agg: tuple[str, Any] | None = None


# -------------------------------------------------------------------- inputs and entry point


def loss_reads(spec: LossSpec) -> frozenset[str]:
    """The optional ``LossInputs`` a spec's loss reads: the dialect's switches, named by input.

    "scores" (a kind that splits rows by score, the term's ``reads``), "difficulty" (ROLL
    ``difficulty_loss_weight``), "rollout_logprobs" (a train/rollout correction, or a ratio
    against mu) and "entropy" (an entropy bonus, an entropy quantile mask, or an adaptive
    entropy coefficient whose metric needs it).
    """
    needs = set(policy_term(spec.kind).reads)
    if spec.difficulty_weights:
        needs.add("difficulty")
    if spec.is_correction is not None or spec.ratio_vs_rollout or spec.sampler_is is not None:
        needs.add("rollout_logprobs")
    if spec.entropy_coef != 0 or spec.entropy_quantile < 1.0 or spec.entropy_adaptive:
        needs.add("entropy")
    return frozenset(needs)


def loss_from_spec(
    spec: LossSpec,
    modes: dict[str, tuple[str, Any] | None],
    metrics: Callable[[MetricContext], dict[str, float]],
    *,
    framework: str,
    config: dict[str, Any],
    notes: list[str],
    inputs: LossInputs,
) -> LossResult:
    """The loss a dialect describes: value, per-token pieces, gradient coefficients, metrics.

    ``total = rl * (policy + beta * kl) - c_ent * entropy``: the policy term is the kind's
    (``POLICY_TERMS[spec.kind]``) under the dialect's aggregation weights, keep masks and
    per-sample weights; the gradient coefficient adds the KL term's in closed form.

    Args:
        spec: the dialect's ``LossSpec`` for this config.
        modes: "policy", "kl", "entropy", "value" -> (AGG_MODES name, scale_factor), or None for
            a term the framework does not have (the dialect's ``loss_agg_modes``).
        metrics: the dialect's metric function (its own logged names).
        framework: the dialect's name (recorded in the result).
        config: the resolved dialect config (handed to ``metrics``).
        notes: conventions applied so far (the spec's); the loss appends its own.
        inputs: the batch (``LossInputs``).

    Returns:
        LossResult (see its docstring).

    Raises:
        ValueError: a shape mismatch, a non-finite value on a response token, or a missing input
            the config needs (the message starts with the argument's name).
    """
    b = prepare_inputs(spec, inputs)
    pol = _policy(spec, modes, b, inputs, notes)
    kl_tok, kl_term, g_kl = kl_loss_term(spec, modes, b, pol.ratio, pol.r)
    ent_term = _entropy_term(modes, b, pol)
    value_term, vf_clipped = _value_term(inputs, b.full_m > 0, spec, modes, notes)
    total = pol.value if kl_term is None else pol.value + spec.beta * kl_term
    total = spec.rl_coef * total
    if ent_term is not None and spec.entropy_coef != 0:
        total = total - spec.entropy_coef * ent_term
    grad_coef = spec.rl_coef * (pol.grad + g_kl)
    terms = {"policy": pol.value, "kl": kl_term, "entropy": ent_term, "value": value_term}
    ctx = _metric_context(config, spec, modes, b, pol, terms, total, kl_tok, vf_clipped)
    return LossResult(
        framework=framework,
        total=total,
        terms=terms,
        coefficients={"rl": spec.rl_coef, "kl": spec.beta, "entropy": spec.entropy_coef},
        per_token=_per_token(b, pol, kl_tok, grad_coef, inputs.policy_mask is not None),
        metrics=metrics(ctx),
        notes=tuple(notes),
        metric_notes=dict(ctx.metric_notes),
        clip_masks=(*CLIP_MASKS, *pol.term.clip_masks),
    )


# ------------------------------------------------------------------------ the policy term


@dataclass(frozen=True)
class _Policy:
    """The policy term on the batch: value, closed-form gradient and the pieces shown."""

    term: TermResult
    value: Tensor  # () policy term
    grad: Tensor  # (B, T) d value / d logp
    pg: Tensor  # (B, T) per-token loss, 0 off the policy mask
    weights: Tensor  # (B, T) effective aggregation weights (keep masks included)
    ratio: Tensor  # (B, T) the loss's importance ratio (differentiable); r detached
    r: Tensor
    row_w: Tensor  # (B, 1) per-sample weights
    extra: dict[str, Tensor]
    outside: Tensor | None  # (B, T) bool tokens outside the mask that carry a regulariser


def _policy(spec: LossSpec, modes: dict, b: LossBatch, x: LossInputs, notes: list) -> _Policy:
    """Run the kind's term, weigh it, and chain its gradient through the ratio."""
    registered = policy_term(spec.kind)
    extra: dict[str, Tensor] = {}
    sampler_w = None
    if spec.sampler_is is not None and b.mu is not None:
        sampler_w = variants.sampler_is_ratio(b.old, b.mu, b.m, *spec.sampler_is)
        extra["is_ratio_unit"] = sampler_w
    base = b.mu if spec.ratio_vs_rollout else b.old
    ratio = importance_ratio(b.lp, base, b.m, spec.level, spec.clamp)
    r = ratio.detach()
    term = registered.loss(
        PolicyInputs(spec, b.lp, b.old, b.adv, b.mask, b.m, b.d, ratio, r, x.scores, sampler_w)
    )
    notes.extend(term.notes)
    extra.update(term.extra)
    pg = torch.where(b.mask, term.pg, 0.0)
    keep, row_w = _keep_weights(spec, registered, b, x, sampler_w, extra)
    w_pol = agg_weights(b.m, *modes["policy"], b.num_tokens) * row_w
    if x.policy_mask is not None and modes["policy"][0] == "token-mean":
        w_pol = b.m / b.full_m.sum().clamp(min=1.0) * row_w  # batch_num_tokens: before rejection
    weights = None
    if x.policy_weights is not None:
        weights = as_input("policy_weights", x.policy_weights, b.shape, b.mask, False)
        keep = keep * weights
    w_eff = w_pol * keep
    if term.sequence is not None and weights is not None:
        # verl geo_mean: a row's loss times the geometric mean of its tokens' IS weights
        seq, row_is = term.sequence, variants.sequence_is_weights(weights, b.mask, b.m)
        grad, value, w_eff = seq.coef * row_is, (seq.rows * row_is).sum(), seq.weights * row_is
    elif term.sequence is not None:  # a sequence-level loss: its own scalar and weights
        grad, value, w_eff = term.sequence.coef * keep, term.sequence.policy, term.sequence.weights
    else:
        if term.dl_dlogp is not None:
            grad = w_eff * term.dl_dlogp
        else:
            grad = _ratio_chain(spec, b, w_eff * term.dl_dr, r, base)
        value = (w_eff * pg).sum()
    outside = None if b.metric_bool is None else b.metric_bool & ~b.mask
    token_mean = modes["policy"][0] == "token-mean"
    use_outside = registered.outside is not None and spec.unmasked_token_sum and token_mean
    if use_outside and outside is not None and bool(outside.any()):
        lp_out = as_input("logprobs", x.logprobs, b.shape, outside, keep_grad=True)
        d_out = lp_out - as_input("old_logprobs", x.old_logprobs, b.shape, outside, False)
        w_out = outside.to(F64) / b.m.sum().clamp(min=1.0) * row_w
        reg, weighted, weighted_grad, note = registered.outside(d_out, w_out, spec)
        value, grad = value + weighted, grad + weighted_grad
        extra["outside_reg_unit"] = reg.detach()
        notes.append(note)
    else:
        outside = None
    return _Policy(term, value, grad, pg, w_eff, ratio, r, row_w, extra, outside)


def _ratio_chain(spec: LossSpec, b: LossBatch, w_dl_dr: Tensor, r: Tensor, base: Tensor) -> Tensor:
    """The gradient d policy / d logp from the weighted d loss / d ratio, via the ratio's level."""
    if spec.level == "token":  # r = exp(d), zero slope where the log-ratio clamp acts
        d_ratio = b.lp.detach() - base
        inside = torch.ones_like(r) if spec.clamp is None else (d_ratio.abs() <= spec.clamp).to(F64)
        return w_dl_dr * r * inside
    if spec.level == "sequence":  # every token of a row moves its one ratio
        coupling = w_dl_dr.sum(-1, keepdim=True)
        return b.m * r / b.lengths.clamp(min=1.0) * coupling
    # GSPO-token: own token only, log s <= clamp
    seq_mean = b.d.sum(-1, keepdim=True) / b.lengths.clamp(min=1.0)
    return w_dl_dr * r * (seq_mean <= spec.clamp).to(F64)


def _keep_weights(
    spec: LossSpec, registered: PolicyTerm, b: LossBatch, x: LossInputs, sampler_w, extra: dict
) -> tuple[Tensor, Tensor]:
    """Per-token keep multipliers and (B, 1) per-sample weights of the policy term (not the KL).

    Train/rollout IS correction, the sampler's IS ratio, TRL's off-policy mask and entropy
    quantile, ROLL's length / difficulty sample weights; their pieces go into ``extra``.
    """
    m, mask = b.m, b.mask
    keep = torch.ones_like(m)
    if spec.is_correction is not None and registered.takes_is_correction and spec.level == "token":
        coef, filtered = variants.rollout_correction(b.old, b.mu, mask, *spec.is_correction)
        keep = keep * torch.where(mask, coef, 0.0)
        extra["is_coef"] = coef.detach()
        extra["is_filtered"] = filtered.expand_as(m) & mask
        extra["is_filtered_unit"] = filtered  # (B, T) or (B, 1) with empty rows: for metrics
    if b.mu is not None:
        extra["log_w"] = b.old - b.mu  # log pi_old / mu, the train/rollout mismatch per token
    if sampler_w is not None and not registered.own_sampler_weights:
        keep = keep * torch.where(mask, sampler_w.expand_as(m), 0.0)
    if spec.off_policy_threshold is not None:
        d_sampling = b.d if b.mu is None else b.lp.detach() - b.mu
        keep = keep * variants.off_policy_keep(b.adv, d_sampling, m, spec.off_policy_threshold)
        extra["off_policy_kept"] = (keep > 0) & mask
    if spec.entropy_quantile < 1.0:
        if b.ent is None:
            raise ValueError("entropy: needed for top_entropy_quantile < 1")
        high = variants.high_entropy_mask(b.ent.detach(), mask, 1.0 - spec.entropy_quantile)
        keep = keep * high.to(F64)
        extra["entropy_kept"] = high
    row_w = torch.ones((m.shape[0], 1), dtype=F64)
    use_difficulty = spec.difficulty_weights and x.difficulty is not None
    if spec.length_weights or use_difficulty:
        diff = None
        if use_difficulty:
            diff = torch.as_tensor(x.difficulty).detach().to(F64)
            if diff.shape != (m.shape[0],) or not bool(torch.isfinite(diff).all()):
                raise ValueError(f"difficulty: expected ({m.shape[0]},) finite values")
        row_w = variants.sample_weights(m, diff, spec.length_weights)[:, None]
    return keep, row_w


def _per_token(b: LossBatch, pol: _Policy, kl_tok, grad_coef: Tensor, masked: bool) -> dict:
    """The detached (B, T) pieces of ``LossResult.per_token`` (0 / False on padding)."""
    mask, pol_mask, term = b.full_m > 0, b.mask, pol.term
    none = torch.zeros_like(mask)
    shown = pol.r if term.ratio_shown is None else term.ratio_shown
    per_token = {
        "ratio": torch.where(mask, shown, 0.0),
        "pg_loss": pol.pg.detach(),
        "loss_weight": pol.weights,
        "grad_coef": torch.where(mask, grad_coef, 0.0),
        "clipped_high": (none if term.clipped_high is None else term.clipped_high) & pol_mask,
        "clipped_low": (none if term.clipped_low is None else term.clipped_low) & pol_mask,
        "dual_clipped": (none if term.dual is None else term.dual) & pol_mask,
    }
    if masked:
        per_token["policy_mask"] = pol_mask
    if pol.outside is not None:  # the regulariser on tokens outside the mask has a gradient
        per_token["grad_coef"] = torch.where(mask | pol.outside, grad_coef, 0.0)
    if kl_tok is not None:
        per_token["kl"] = kl_tok.detach()
    for name, value in pol.extra.items():
        if not name.endswith("_unit"):
            per_token[name] = torch.where(mask, value, torch.zeros_like(value))
    return per_token


# ---------------------------------------------------------------------- KL and critic terms


def _entropy_term(modes: dict, b: LossBatch, pol: _Policy) -> Tensor | None:
    """The aggregated entropy (None without an entropy input), on the entropy quantile's tokens."""
    if b.ent is None:
        return None
    ent_mask = pol.extra["entropy_kept"].to(F64) if "entropy_kept" in pol.extra else b.ent_m
    return aggregate(b.ent, ent_mask, *modes["entropy"], b.num_tokens)


def _value_term(x: LossInputs, mask: Tensor, spec: LossSpec, modes: dict, notes: list):
    """The critic loss and its clip mask ((None, None) without values or without a critic)."""
    if x.values is None:
        return None, None
    if not spec.has_critic:
        notes.append("TRL GRPO has no critic: values ignored")
        return None, None
    shape = tuple(mask.shape)
    if x.returns is None:
        raise ValueError("returns: needed with values for the critic loss")
    if spec.value_clip is not None and x.old_values is None:
        raise ValueError("old_values: needed for the clipped critic loss")
    v = as_input("values", x.values, shape, mask, keep_grad=True)
    ret = as_input("returns", x.returns, shape, mask, keep_grad=False)
    old = None
    if x.old_values is not None:
        old = as_input("old_values", x.old_values, shape, mask, keep_grad=False)
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


def _metric_context(
    config: dict[str, Any],
    spec: LossSpec,
    modes: dict,
    b: LossBatch,
    pol: _Policy,
    terms: dict[str, Tensor | None],
    total: Tensor,
    kl_tok: Tensor | None,
    vf_clipped: Tensor | None,
) -> MetricContext:
    """What the dialect's metric function reads of the computed loss (its notes start empty)."""
    return MetricContext(
        config,
        spec,
        modes,
        b.m,
        b.mask,
        b.d,
        pol.r,
        b.adv,
        terms,
        total,
        b.ent,
        kl_tok,
        vf_clipped,
        pg=pol.pg.detach(),
        extra=pol.extra,
        row_weights=pol.row_w[:, 0],
        metric_notes={},
        logp=b.lp.detach(),
        ref=b.ref,
        metric_mask=b.metric_bool,
        metric_d=b.metric_d,
        full_mask=b.full_m,
    )
