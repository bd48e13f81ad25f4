"""What a training step does to its batch beside the update: the zero-variance filter, mu's gap.

``zero_variance_rows`` / ``drop_groups``: the 2026 recipe's zero-variance filter (dynamic
sampling without the refill: verl ``algorithm.filter_groups``, OpenRLHF
``--algo.dynamic_filtering_enable``, ROLL ``query_filter_config``), exact equality of the
rewards, whole groups dropped before the advantages. ``seen_advantages`` puts the kept rows'
advantages back among every sample of the step (0 on the dropped ones) for the run file.

``mismatch_metrics``: the behaviour policy's gap on a step's tokens (delta = log pi_old - log mu),
the effective sample size of pi_old / mu and the share the loss's correction truncates or masks.

``entropy_step``: the adaptive entropy target moved on a step's mean token entropy.
"""

from __future__ import annotations

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
