"""verl's ``algorithm.rollout_correction`` in the loss: which trainer does what with it (0.9.1).

verl ships two trainers (``trainer.use_v1``, default true: ``trainer/ppo/v1/trainer_base.py``;
false: the legacy ``ray_trainer.RayPPOTrainer``) and two operating modes
(``algorithm.rollout_correction.bypass_mode``). With mu the sampler's log-prob and pi_old the
trainer's recomputed one:

- decoupled (``bypass_mode: false``, the default), the sampler's log-probs in the batch: before
  the advantages ``compute_rollout_correction_and_add_to_batch`` takes pi_old against mu, puts
  ``rollout_is_weights`` (``rollout_is``; ``corrections.verl_rollout_is``) into the batch and
  replaces ``response_mask`` by the tokens ``rollout_rs`` keeps, for every loss term (policy, KL,
  entropy); every ``compute_policy_loss_<loss_mode>`` multiplies its per-token loss by the
  weights. The token-mean denominator ``batch_num_tokens`` counts the engine's ``loss_mask``:
  the v1 trainer's is the response mask its agent loop wrote before the rejection
  (``agent_loop_tq``: ``loss_mask = response_mask``), so rejected tokens still count; the
  legacy trainer's ``left_right_2_no_padding`` copies the narrowed ``response_mask``, so they
  do not. It logs ``rollout_corr/*`` (pi_old against mu), whether or not a rule is set.
- ``bypass_mode: true``: old_log_prob = mu (no recompute), no decoupled correction. The legacy
  trainer's ``apply_bypass_mode`` also sets ``loss_mode: bypass_mode``; the v1 trainer does not,
  so there the configured ``loss_mode`` runs with old = mu and ``rollout_is`` / ``rollout_rs``
  act nowhere (verl reads them only in ``compute_policy_loss_bypass_mode``).
- ``loss_mode: bypass_mode`` (``compute_policy_loss_bypass_mode``, old = mu): IS weights and
  rejection of the CURRENT log-prob against mu (``bypass_inputs``); ppo_clip ignores the weights,
  reinforce multiplies by them; rejected tokens leave the policy term only and token-mean still
  divides by every response token.

``loss_inputs`` turns a resolved verl config into the ``LossInputs`` overrides of its mode (and
the ``rollout_corr/*`` metrics the trainer logs); ``mismatch_correction`` gives the Sampler !=
trainer page the same correction at the first update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline.dialects import corrections as fc
from roll_viz.core.pipeline.losses import MetricContext

#: what each mode is called in notes and on the Sampler != trainer page
DECOUPLED_V1 = "decoupled (v1 trainer)"
DECOUPLED_LEGACY = "decoupled (legacy trainer)"


def mode(cfg: Mapping[str, Any]) -> str:
    """The operating mode a resolved verl config runs.

    Returns:
        "bypass_loss" (``compute_policy_loss_bypass_mode``: ``loss_mode: bypass_mode``, or the
        legacy trainer's ``bypass_mode: true``), "bypass_old" (the v1 trainer's ``bypass_mode:
        true``: old = mu, the configured loss) or "decoupled".
    """
    if cfg.get("loss_mode") == "bypass_mode":
        return "bypass_loss"
    if cfg.get("bypass_mode"):
        return "bypass_old" if cfg.get("use_v1", True) else "bypass_loss"
    return "decoupled"


def decoupled_rules(cfg: Mapping[str, Any]) -> bool:
    """Whether a decoupled config sets a rule (``rollout_is`` or ``rollout_rs``)."""
    return mode(cfg) == "decoupled" and (cfg["rollout_is"] or cfg["rollout_rs"]) is not None


def reads_rollout_logprobs(cfg: Mapping[str, Any]) -> bool:
    """Whether the loss reads the sampler's log-probs mu beyond the spec's own corrections.

    Both bypass modes take mu as the old log-prob; the decoupled mode weighs and rejects with it
    when a rule is set.
    """
    return mode(cfg) != "decoupled" or decoupled_rules(cfg)


def bypass_rules(cfg: Mapping[str, Any]) -> None:
    """Check the rejection rules against their thresholds (verl's parser, its words).

    Raises:
        ValueError: rollout_rs without rollout_rs_threshold, or thresholds that do not fit the
            rules (the message starts with the key).
    """
    if cfg["rollout_rs"] is None:
        return
    options = list(dict.fromkeys(o.strip() for o in cfg["rollout_rs"].split(",") if o.strip()))
    try:
        fc.parse_verl_rs_threshold(options, cfg["rollout_rs_threshold"])
    except ValueError as err:
        raise ValueError(f"rollout_rs_threshold: {err}") from None


def _correction(cfg: Mapping[str, Any], train: Tensor, mu: Tensor, mask: Tensor, v1: bool):
    return fc.verl_correction(
        train,
        mu,
        mask,
        rollout_is=cfg["rollout_is"],
        rollout_is_threshold=cfg["rollout_is_threshold"],
        rollout_rs=cfg["rollout_rs"],
        rollout_rs_threshold=cfg["rollout_rs_threshold"],
        rollout_is_batch_normalize=cfg["rollout_is_batch_normalize"],
        count_rejected=v1,
        dual_clip=cfg["clip_ratio_c"],
    )


def trainer_metrics(cfg: Mapping[str, Any], train: Tensor, mu: Tensor, mask: Tensor) -> dict:
    """``rollout_corr/*`` of ``compute_rollout_correction_and_rejection_mask`` (train vs mu)."""
    gap = fc.verl_offpolicy_metrics(train, mu, mask)
    if cfg["rollout_is"] is not None:
        gap |= fc.verl_is_metrics(
            train,
            mu,
            mask,
            cfg["rollout_is"],
            cfg["rollout_is_threshold"],
            cfg["rollout_is_batch_normalize"],
        )
    if cfg["rollout_rs"] is not None:
        gap |= fc.verl_rs_metrics(train, mu, mask, cfg["rollout_rs"], cfg["rollout_rs_threshold"])
    return {f"rollout_corr/{k}": v for k, v in gap.items()}


def loss_inputs(
    cfg: Mapping[str, Any],
    notes: list[str],
    logprobs: Tensor,
    old_logprobs: Tensor,
    rollout_logprobs: Tensor | None,
    response_mask: Tensor,
) -> tuple[dict[str, Any], dict[str, float]]:
    """The ``LossInputs`` overrides of a resolved verl config's operating mode, and metrics.

    The metrics are the ``rollout_corr/*`` its trainer logs (empty where it logs none).

    Raises:
        ValueError: a mode that reads mu without ``rollout_logprobs``; bad rejection
            thresholds.
    """
    how = mode(cfg)
    if how == "decoupled" and rollout_logprobs is None:
        if decoupled_rules(cfg):
            raise ValueError(
                "rollout_logprobs: verl's decoupled algorithm.rollout_correction (rollout_is / "
                "rollout_rs without bypass_mode) weighs and rejects with the sampler's log-probs mu"
            )
        return {}, {}
    if how == "bypass_loss":
        return bypass_inputs(cfg, notes, logprobs, rollout_logprobs, response_mask), {}
    if rollout_logprobs is None:
        raise ValueError(
            "rollout_logprobs: verl bypass_mode needs the sampler's log-probs mu (the trainer "
            "sets old_log_prob = rollout_log_prob)"
        )
    if how == "bypass_old":
        notes.append(
            f"bypass_mode: true under the v1 trainer: old_log_prob = mu, loss_mode "
            f"{cfg['loss_mode']} as configured; rollout_is / rollout_rs act nowhere (only the "
            "legacy trainer, trainer.use_v1: false, switches to loss_mode bypass_mode)"
        )
        return {"old_logprobs": rollout_logprobs}, {}
    bypass_rules(cfg)
    v1 = bool(cfg["use_v1"])
    mask = torch.as_tensor(response_mask).detach()
    old = torch.as_tensor(old_logprobs).detach()
    corr = _correction(cfg, old, rollout_logprobs, mask, v1)
    metrics = trainer_metrics(cfg, old, rollout_logprobs, mask)
    if not decoupled_rules(cfg):
        notes.append("verl decoupled mode, no rule set: rollout_corr/ metrics only")
        return {}, metrics
    keep = _keep(cfg, rollout_logprobs, old, mask)
    rejected = int(((mask > 0) & ~keep).sum())
    name = DECOUPLED_V1 if v1 else DECOUPLED_LEGACY
    text = f"verl {name}: pi_old against mu, before the advantages"
    if cfg["rollout_is"] is not None and cfg["loss_mode"] == "geo_mean":
        text += f"; rollout_is {cfg['rollout_is']} ({cfg['rollout_is_threshold']}): geo_mean "
        text += "multiplies each row's loss by exp(sum_t log(w + 1e-10) / (L + 1e-8)) over its "
        text += "kept tokens (the geometric mean of its token weights)"
    elif cfg["rollout_is"] is not None:
        text += f"; rollout_is {cfg['rollout_is']} ({cfg['rollout_is_threshold']}) multiplies "
        text += "the per-token policy loss"
    if cfg["rollout_rs"] is not None:
        text += (
            f"; rollout_rs {cfg['rollout_rs']} ({cfg['rollout_rs_threshold']}) removed "
            f"{rejected} token(s) from response_mask (every loss term)"
        )
        text += (
            ", token-mean still divides by every response token (loss_mask is counted before)"
            if v1
            else ", token-mean divides by the kept tokens"
        )
    notes.append(text)
    overrides: dict[str, Any] = {"response_mask": keep.to(torch.float64)}
    if cfg["rollout_is"] is not None:
        overrides["policy_weights"] = corr.weights
    if v1:
        overrides["batch_num_tokens"] = float((mask > 0).sum())
    return overrides, metrics


def _keep(cfg: Mapping[str, Any], mu: Tensor, old: Tensor, mask: Tensor) -> Tensor:
    """The tokens the rejection keeps (every response token without ``rollout_rs``)."""
    if cfg["rollout_rs"] is None:
        return mask > 0
    return fc.verl_rollout_rs(old, mu, mask, cfg["rollout_rs"], cfg["rollout_rs_threshold"])


def bypass_inputs(
    cfg: Mapping[str, Any],
    notes: list[str],
    logprobs: Tensor,
    rollout_logprobs: Tensor | None,
    response_mask: Tensor,
) -> dict[str, Tensor | None]:
    """The inputs ``compute_policy_loss_bypass_mode`` hands its loss (verl 0.9.1).

    The trainer sets old_log_prob = rollout_log_prob (mu); under no_grad
    ``compute_rollout_correction_and_rejection_mask`` takes the CURRENT log-prob against mu
    (``corrections.verl_correction``): IS weights w (rollout_is, threshold, batch
    normalisation) and the rejection mask (rollout_rs). The policy term runs on the rejection
    mask; reinforce multiplies by w, ppo_clip ignores it.

    Returns:
        ``old_logprobs`` (mu), ``policy_mask`` (the kept tokens) and ``policy_weights`` (w, or
        None: reinforce without rollout_is, and ppo_clip) for ``loss_from_spec``.

    Raises:
        ValueError: ``rollout_logprobs`` missing (bypass_mode has no other old log-prob).
    """
    if rollout_logprobs is None:
        raise ValueError(
            "rollout_logprobs: verl loss_mode bypass_mode needs the sampler's log-probs mu "
            "(the trainer sets old_log_prob = rollout_log_prob)"
        )
    if cfg["bypass_mode"] and not cfg["use_v1"]:
        notes.append(
            "bypass_mode: true under the legacy trainer (trainer.use_v1: false): "
            "apply_bypass_mode sets loss_mode bypass_mode"
        )
    current = torch.as_tensor(logprobs).detach()
    corr = _correction(cfg, current, rollout_logprobs, response_mask, False)
    reinforce = cfg["loss_type"] == "reinforce"
    notes.append("bypass_mode: old_logprobs is not read (verl's old log-prob is mu)")
    if cfg["rollout_is"] is not None:
        notes.append(
            f"rollout_is {cfg['rollout_is']} (threshold {cfg['rollout_is_threshold']}) on pi / mu"
            + (": multiplies -A * logp" if reinforce else ": computed for metrics, not applied")
        )
    if cfg["rollout_rs"] is not None:
        dropped = int((torch.as_tensor(response_mask).detach() > 0).sum() - corr.counted.sum())
        notes.append(
            f"rollout_rs {cfg['rollout_rs']} ({cfg['rollout_rs_threshold']}) on pi / mu: "
            f"{dropped} token(s) left the policy term's mask; token-mean still divides by every "
            "response token (batch_num_tokens is counted before the loss)"
        )
    weights = corr.weights if reinforce and cfg["rollout_is"] is not None else None
    return {
        "old_logprobs": rollout_logprobs,
        "policy_mask": corr.counted,
        "policy_weights": weights,
    }


def bypass_metrics(ctx: MetricContext) -> dict[str, float]:
    """bypass_mode's rollout-correction metrics (``actor/rollout_corr/*``) of pi against mu."""
    _bypass_pg_note(ctx)
    full = ctx.full_mask
    mu = torch.where(full > 0, ctx.logp - ctx.d, 0.0)  # old_logprobs = mu, d = logp - mu
    gap = trainer_metrics(ctx.cfg, ctx.logp, mu, full)
    return {f"actor/{k}": v for k, v in gap.items()}


def _bypass_pg_note(ctx: MetricContext) -> None:
    """Beside actor/pg_loss: token-mean divided by tokens rollout_rs rejected too."""
    full, kept = float(ctx.full_mask.sum()), float(ctx.m.sum())
    if ctx.cfg["loss_agg_mode"] != "token-mean" or kept == full or kept == 0:
        return
    value = ctx.item("policy") * full / kept
    ctx.metric_notes["actor/pg_loss"] = (
        f"divided by all {full:g} response tokens, {full - kept:g} of them rejected by rollout_rs "
        f"(verl counts batch_num_tokens before the loss rejects); the mean over the {kept:g} "
        f"kept tokens is {value:.6g}"
    )


def mismatch_correction(
    cfg: Mapping[str, Any], old: Tensor, mu: Tensor, mask: Tensor
) -> tuple[rc.Correction, str, bool] | None:
    """The correction this resolved config's loss applies to pi_old / mu at the first update.

    bypass_mode's loss takes mu as its old log-prob and weighs / rejects tokens against the
    current log-prob, which at the first update is pi_old; the decoupled mode weighs and
    rejects pi_old against mu (under the v1 trainer rejected tokens stay in the token-mean
    denominator). The v1 trainer's ``bypass_mode: true`` applies none.

    Args:
        cfg: a resolved verl config.
        old: (B, T) float64 pi_old log-probs of the sampled tokens.
        mu: (B, T) float64 the sampler's log-probs of the same tokens.
        mask: (B, T) bool valid tokens.

    Returns:
        (the correction, its name as shown, whether it counts sequences) or None (no correction).
    """
    how = mode(cfg)
    if how == "bypass_loss":  # batch_num_tokens is counted before the loss rejects
        corr = _correction(cfg, old, mu, mask, True)
        return corr, f"bypass_mode ({cfg['loss_type']})", False
    if how == "bypass_old" or not decoupled_rules(cfg):
        return None
    v1 = bool(cfg["use_v1"])
    corr = _correction(cfg, old, mu, mask, v1)
    return corr, DECOUPLED_V1 if v1 else DECOUPLED_LEGACY, False
