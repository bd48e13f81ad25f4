"""What a training step does to its batch beside the update: the zero-variance filter, mu's gap.

``zero_variance_rows`` / ``drop_groups``: the 2026 recipe's zero-variance filter (dynamic
sampling without the refill: verl ``algorithm.filter_groups``, OpenRLHF
``--algo.dynamic_filtering_enable``, ROLL ``query_filter_config``), exact equality of the
rewards, whole groups dropped before the advantages. ``seen_advantages`` puts the kept rows'
advantages back among every sample of the step (0 on the dropped ones) for the run file.

``mismatch_metrics``: the behaviour policy's gap on a step's tokens (delta = log pi_old - log mu),
the effective sample size of pi_old / mu and the share the loss's correction truncates or masks.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core import pipeline
from roll_viz.core.ops import group_stats, masked_mean
from roll_viz.core.pipeline import dialects, loss_variants, rollout_correction
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
    if delta.numel():
        w = torch.exp(delta - delta.max())  # the ESS is scale-free: shift for range
        out["is_ess"] = float(w.sum() ** 2 / (w.numel() * (w**2).sum()))
    cfg = pipeline.resolve_config(settings.framework, loss_config(settings, beta))
    spec = dialects.get(settings.framework).loss_spec(cfg, [])
    m = mask.double()
    if spec.is_correction is not None:
        _, filtered = loss_variants.rollout_correction(old, mu64, mask, *spec.is_correction)
        level = spec.is_correction[0]
        units = m.sum(-1) > 0 if level == "seq" else mask
        hit = filtered.expand_as(m)[:, 0] if level == "seq" else filtered
        out["correction"] = f"is_correction ({level}, {spec.is_correction[1]})"
        out["correction_frac"] = float((hit & units).sum() / units.sum().clamp_min(1))
    elif spec.sampler_is is not None:
        mode, low, high = spec.sampler_is
        seq = mode.startswith("sequence")
        diff = (old - mu64) * m
        w = torch.exp(diff.sum(-1, keepdim=True) if seq else diff)  # TRL's ratio before the cap
        units = (m.sum(-1, keepdim=True) > 0) if seq else mask
        lo = -math.inf if low is None else low
        hi = math.inf if high is None else high
        outside = ((w < lo) | (w > hi)) & units
        out["correction"] = f"vllm_importance_sampling_mode {mode}"
        out["correction_frac"] = float(outside.sum() / units.sum().clamp_min(1))
    elif cfg.get("loss_mode") == "bypass_mode":  # verl: old = mu, IS / rejection vs mu
        # at the first update pi_theta = pi_old, so the weights are pi_old / mu
        corr = rollout_correction.verl_correction(
            old,
            mu64,
            mask,
            rollout_is=cfg["rollout_is"],
            rollout_is_threshold=cfg["rollout_is_threshold"],
            rollout_rs=cfg["rollout_rs"],
            rollout_rs_threshold=cfg["rollout_rs_threshold"],
        )
        out["correction"] = f"bypass_mode ({cfg['loss_type']})"
        out["correction_frac"] = float(((corr.truncated | corr.masked) & mask).sum() / m.sum())
    return out


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
