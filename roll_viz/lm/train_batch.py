"""What a training step does to its batch beside the update, and the numbers it records.

``zero_variance_rows`` / ``drop_groups``: the 2026 recipe's zero-variance filter (dynamic
sampling without the refill: verl ``algorithm.filter_groups``, OpenRLHF
``--algo.dynamic_filtering_enable``, ROLL ``query_filter_config``), exact equality of the
rewards, whole groups dropped before the advantages. ``seen_advantages`` puts the kept rows'
advantages back among every sample of the step (0 on the dropped ones) for the run file.

``mismatch_metrics``: the behaviour policy's gap on a step's tokens (delta = log pi_old - log mu),
the effective sample size of pi_old / mu and the share the loss's correction truncates or masks.

``entropy_step``: the adaptive entropy target moved on a step's mean token entropy.

``step_metrics`` / ``round_metrics``: the numbers a run file records for the step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core import pipeline
from roll_viz.core.ops import group_stats, masked_mean
from roll_viz.core.pipeline import dialects, rollout_correction
from roll_viz.core.pipeline.entropy_control import (
    METRIC_APPLIED,
    METRIC_NEXT,
    METRIC_TARGET,
    EntropyTarget,
)
from roll_viz.core.records import Rollout, Trace, batch_from_rollout, select_rows
from roll_viz.lm.runfile import TrainSettings, loss_config
from roll_viz.lm.update import loss_inputs


def zero_variance_rows(scores: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) bool: rows of groups of two or more whose rewards are all exactly equal."""
    stats = group_stats(scores.double(), group_ids.long(), ddof=1)
    return (stats.count > 1) & (stats.std == 0)


def drop_groups(rollout: Rollout, scores: Tensor, keep: Tensor) -> tuple[Rollout, Tensor, Tensor]:
    """The rows ``keep`` (B,) bool of whole groups, prompts and group ids renumbered 0..P'-1.

    Returns:
        (the rollout of the kept rows, their scores, (B',) their indices in ``rollout``).
    """
    rows = torch.nonzero(keep).flatten()
    sub = select_rows(rollout, rows)
    uniq, inverse = torch.unique(sub.group_ids, return_inverse=True)
    kept = uniq.tolist()
    greedy = rollout.greedy_responses
    sub = replace(
        sub,
        prompts=tuple(rollout.prompts[g] for g in kept),
        group_ids=inverse.to(rollout.group_ids.dtype),
        greedy_responses=tuple(greedy[g] for g in kept) if greedy else greedy,
    )
    return sub, scores[rows], rows


def seen_advantages(seen: Rollout, rows: Tensor | None, trace: Trace | None) -> Tensor:
    """(B, T) advantages of every sample of the step: 0 on the rows a filter dropped.

    ``rows``: the indices into ``seen`` of the trace's rows (None: all of them).
    """
    if trace is None:
        return torch.zeros_like(seen.response_mask, dtype=torch.float64)
    if rows is None:
        return trace.advantages.double()
    out = torch.zeros_like(seen.response_mask, dtype=torch.float64)
    out[rows] = trace.advantages.double()
    return out


def records_mismatch(settings: TrainSettings, beta: float) -> bool:
    """Whether a step records ``mismatch_metrics``: a sampler other than the trainer, or mu read.

    With the fp32 sampler and a loss that does not read mu, mu = pi_old by construction: the
    run file keeps the keys it had before samplers existed.
    """
    if settings.sampler != "fp32":
        return True
    return "rollout_logprobs" in loss_inputs(settings.framework, loss_config(settings, beta))


def mismatch_metrics(settings: TrainSettings, rollout: Rollout, mu: Tensor, beta: float) -> dict:
    """The sampler's gap to the trainer on a step's tokens and what the correction does to it.

    delta = log pi_old - log mu per valid token (``rollout.logprobs`` is pi_old).

    Returns:
        delta_abs_mean: mean |delta|; delta_mean: mean delta; is_ess: the normalised effective
        sample size of w = pi_old / mu over the tokens, (sum w)^2 / (n sum w^2), 1 when mu =
        pi_old; correction_frac: share of the units the loss's correction truncates or masks
        (OpenRLHF ``is_correction_*``: filtered; TRL ``vllm_importance_sampling_*``: clamped or
        zeroed; verl ``bypass_mode``: IS-truncated or rejected tokens at the first update), None
        when the loss has no correction; correction: its name ("" when none).
    """
    mask = rollout.response_mask > 0
    old = rollout.logprobs.double()
    mu64 = mu.double()
    delta = (old - mu64)[mask]
    out: dict[str, Any] = {
        "sampler": settings.sampler,
        "delta_abs_mean": float(delta.abs().mean()) if delta.numel() else 0.0,
        "delta_mean": float(delta.mean()) if delta.numel() else 0.0,
        "is_ess": 1.0,
        "correction": "",
        "correction_frac": None,
    }
    if delta.numel():  # the ESS is scale-free: shift the log-weights for range
        shifted = torch.where(mask, old - mu64 - delta.max(), 0.0)
        out["is_ess"] = rollout_correction.effective_sample_size(torch.exp(shifted), mask)
    cfg = pipeline.resolve_config(settings.framework, loss_config(settings, beta))
    # the dialect's correction; at the first update pi_theta = pi_old: its weights are pi_old / mu
    correction = dialects.get(settings.framework).mismatch_correction
    found = None if correction is None else correction(cfg, old, mu64, mask)
    if found is None:
        return out
    corr, name, per_sequence = found
    out["correction"] = name
    out["correction_frac"] = _hit_share(corr.truncated | corr.masked, mask, per_sequence)
    return out


def _hit_share(hit: Tensor, mask: Tensor, per_sequence: bool) -> float:
    """Share of the units (valid tokens, or sequences with a token) a correction touched."""
    hit = hit & mask
    if per_sequence:
        hit, mask = hit.any(-1), mask.any(-1)
    return int(hit.sum()) / max(int(mask.sum()), 1)


def seen_kl_est(
    settings: TrainSettings, seen: Rollout, scores: Tensor, beta: float, running: Any
) -> float:
    """The dialect's KL estimate over every sample of a step, dropped groups included.

    With the zero-variance filter the update sees only the kept rows, but the KL to the
    reference is a property of all the samples (as ``kl_exact``), also on a step where every
    group was dropped. The dialect's own pipeline gives its estimator with its clamps.
    """
    batch = batch_from_rollout(seen, scores, values=torch.zeros_like(seen.response_mask))
    trace = pipeline.run(batch, settings.framework, settings.dialect_config(beta), running)
    mask = seen.response_mask.double()
    if seen.token_ids.shape[0] == 0:
        return 0.0
    return float(masked_mean(trace.kl.double(), mask, dim=-1).mean())


def entropy_step(state: EntropyTarget, trained: Rollout) -> tuple[EntropyTarget, dict[str, float]]:
    """Move the adaptive entropy target on the trained rows' mean token entropy.

    The rows' entropy at sampling is the policy's before the update (TRL measures it in the
    update's forward pass: the same numbers on the first epoch). A step without a valid token
    leaves the controller where it was.

    Returns:
        (the next state, {applied coefficient, next coefficient, target} for the curve).
    """
    valid = trained.response_mask > 0
    if not bool(valid.any()):
        return state, {}
    after = state.after(float(trained.entropy.double()[valid].mean()))
    return after, {
        METRIC_APPLIED: state.applied(),
        METRIC_NEXT: after.coef,
        METRIC_TARGET: after.target,
    }


# ---------------------------------------------------------------------------------------------
# The step's metrics (what a run file records per step)


def _seq_mean(x: Tensor, mask: Tensor) -> float:
    """Mean over samples of each sample's token mean (empty rows count 0)."""
    if x.shape[0] == 0:
        return 0.0
    return float(masked_mean(x.double(), mask.double(), dim=-1).mean())


def step_metrics(
    settings: TrainSettings,
    rollout: Rollout,
    scores: Tensor,
    trace: Trace | None,
    update_metrics: Mapping[str, Any],
    trained: Rollout | None = None,
    beta: float | None = None,
) -> dict:
    """The metric dict of one step (see the module docstring).

    Args:
        settings: the run's settings.
        rollout: the step's samples (B rows).
        scores: (B,) raw rewards.
        trace: the pipeline's trace of this step (None: every group was dropped, no update).
        update_metrics: numbers the update reported (clip_frac, loss, grad_norm, ...).
        trained: the rows of the advantages and the update when a filter dropped some.
        beta: the step's KL coefficient when there is no trace (None: ``settings.beta``).

    Returns:
        Plain-number dict.
    """
    mask = rollout.response_mask.double()
    valid = mask.bool()
    trained = rollout if trained is None else trained
    P = len(rollout.prompts)
    gids = rollout.group_ids
    per_prompt = [float(scores[gids == p].mean()) for p in range(P)]
    spread = [
        float(scores[gids == p].max() - scores[gids == p].min()) if bool((gids == p).any()) else 0
        for p in range(P)
    ]
    est = settings.kl_estimator
    # the trace's KL is the dialect's own estimator with its clamps: what its controller saw
    if trace is None:
        beta = settings.beta if beta is None else beta
        kl_value, next_beta = 0.0, beta
        adv = torch.zeros(0, dtype=torch.float64)
    else:
        trained_mask = trained.response_mask.double()
        kl_value = _seq_mean(trace.kl.double(), trained_mask)
        beta, next_beta = float(trace.beta), float(trace.next_beta)
        adv = trace.advantages[trained_mask.bool()].double()
    upd = {k: float(v) for k, v in update_metrics.items() if isinstance(v, int | float)}
    return {
        "reward_mean": float(scores.mean()),
        "reward_std": float(scores.std(unbiased=False)) if scores.numel() > 1 else 0.0,
        "reward_per_prompt": [round(v, 6) for v in per_prompt],
        "kl_exact": _seq_mean(rollout.exact_kl, mask),
        "kl_est": kl_value,
        "kl_estimator": est,
        "beta": beta,
        "next_beta": next_beta,
        "entropy": float(rollout.entropy.double()[valid].mean()) if bool(valid.any()) else 0.0,
        "response_length": float(mask.sum(-1).mean()),
        "eos_share": sum(f == "eos" for f in rollout.finish_reasons) / len(rollout.finish_reasons),
        "clip_frac": upd.get("clip_frac"),
        "zero_spread_share": sum(s <= 1e-12 for s in spread) / max(P, 1),
        "adv_std": float(adv.std(unbiased=False)) if adv.numel() > 1 else 0.0,
        "adv_abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
        "loss": upd.get("loss"),
        "grad_norm": upd.get("grad_norm"),
        "update": upd,
    }


def round_metrics(metrics: dict) -> dict:
    """Every float of a step's metrics to 6 significant digits (NaN and inf as None)."""

    def rnd(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.6g}") if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: rnd(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rnd(x) for x in v]
        return v

    return {k: rnd(v) for k, v in metrics.items()}
