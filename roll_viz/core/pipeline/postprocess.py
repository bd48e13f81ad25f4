"""Stage 1: response-level reward post-processing (normalize, shape, clip), per sample (B,).

The four choices a framework makes here, each a separate pure function:
- which baseline to subtract: none, group mean, batch mean, running mean, leave-one-out mean;
- which scale to divide by: none, group std, batch std, running std; ddof and eps;
- how running statistics are carried across batches (``update_running_moments``: a new value in,
  a new value out, never hidden state);
- whether/where to clip symmetric (``clip_rewards`` reports the fraction it changed).

What roll-viz simplifies against the real recipes:
- ROLL normalizes per domain (one RunningMoments per domain); roll-viz treats the batch as one
  domain. ROLL's ``reward_norm`` looks up ``running_ctrl["domain"]`` (a literal key) so "running"
  would raise KeyError unless a domain is named "domain"; roll-viz implements the intended
  behaviour (the statistics of the batch's own domain).
- ROLL's RunningMoments keeps fp32 scalars; roll-viz keeps Python floats (float64).
- groups come from explicit prompt ids (ROLL reshapes positionally, OpenRLHF too; verl uses uid).
- no difficulty/length masks, overlong penalties or dynamic sampling filters.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from roll_viz.core.ops import group_stats
from roll_viz.core.records import RunningMoments

NORM_TYPES = (None, "group", "batch", "running")


class Normalized(NamedTuple):
    """Result of a normalization: ``rewards = (scores - baseline) / scale``; each (B,)."""

    rewards: Tensor
    baseline: Tensor
    scale: Tensor


def update_running_moments(running: RunningMoments, scores: Tensor) -> RunningMoments:
    """Merge a batch of scores into running statistics (parallel variance formula, SB3/ROLL).

    With n new values of biased variance v_x and mean m_x, delta = m_x - mean, N = count + n:
    ``mean' = mean + delta * n / N``,
    ``var' = (var * count + delta**2 * count * n / N + v_x * n) / N``, ``count' = N``.

    Args:
        running: statistics before this batch (start from ``RunningMoments()``).
        scores: (B,) values of this batch.

    Returns:
        A new RunningMoments; ``running`` is not modified.
    """
    n = scores.numel()
    if n == 0:
        return running
    x = scores.detach().to(torch.float64)
    batch_var, batch_mean = torch.var_mean(x, unbiased=False)
    delta = float(batch_mean) - running.mean
    total = running.count + n
    new_var = (
        running.var * running.count
        + delta * delta * running.count * n / total
        + float(batch_var) * n
    ) / total
    return RunningMoments(mean=running.mean + delta * n / total, var=new_var, count=total)


def singleton_groups(group_ids: Tensor, group_labels: tuple = ()) -> list:
    """Labels of groups with exactly one sample, in id order (used for clear errors).

    Args:
        group_ids: (B,) long prompt index.
        group_labels: (P,) the caller's prompt ids (index order); falls back to the index.

    Returns:
        List of labels.
    """
    counts = torch.bincount(group_ids)
    ids = torch.nonzero(counts == 1).flatten().tolist()
    return [group_labels[i] if i < len(group_labels) else i for i in ids]


def require_group_size(group_ids: Tensor, group_labels: tuple, what: str, minimum: int = 2) -> None:
    """Raise ValueError naming the first group with fewer than ``minimum`` samples.

    Args:
        group_ids: (B,) long prompt index.
        group_labels: (P,) prompt ids for the message.
        what: who needs it, e.g. "openrlhf group_norm".
        minimum: required group size.
    """
    counts = torch.bincount(group_ids)
    small = torch.nonzero((counts > 0) & (counts < minimum)).flatten().tolist()
    if small:
        g = small[0]
        label = group_labels[g] if g < len(group_labels) else g
        raise ValueError(
            f"{what} needs at least {minimum} samples per prompt "
            f"(group {label!r} has {int(counts[g])})"
        )


def normalize_scores(
    scores: Tensor,
    group_ids: Tensor,
    mean_type: str | None,
    std_type: str | None,
    running: RunningMoments | None = None,
    ddof: int = 1,
    eps: float = 1e-6,
    group_labels: tuple = (),
) -> Normalized:
    """``(r - mean) / (std + eps)`` with mean and std sources chosen independently.

    mean_type / std_type in {None, "group", "batch", "running"} (ROLL's ``norm_mean_type`` /
    ``norm_std_type``). LitePPO = group mean + batch std (of the raw scores). With std_type None
    nothing is divided (scale 1, no eps).

    Args:
        scores: (B,) raw response-level scores.
        group_ids: (B,) long prompt index.
        mean_type: where the baseline comes from.
        std_type: where the scale comes from.
        running: statistics to use for "running" (already updated with this batch, as ROLL does).
        ddof: std degrees of freedom for group/batch std (1 = unbiased, every framework).
        eps: added to the std.
        group_labels: (P,) prompt ids, for error messages.

    Returns:
        Normalized(rewards, baseline, scale), each (B,).

    Raises:
        ValueError: unknown type, a std over too few values (group or batch of size <= ddof:
            torch.std would give NaN), or "running" without statistics.
    """
    for name, kind in (("norm_mean_type", mean_type), ("norm_std_type", std_type)):
        if kind not in NORM_TYPES:
            raise ValueError(f"{name} must be one of {NORM_TYPES}, got {kind!r}")
    if "running" in (mean_type, std_type) and running is None:
        raise ValueError("'running' normalization needs running statistics")
    zeros = torch.zeros_like(scores)
    if mean_type == "group":
        baseline = group_stats(scores, group_ids).mean
    elif mean_type == "batch":
        baseline = group_stats(scores, torch.zeros_like(group_ids)).mean
    elif mean_type == "running":
        baseline = zeros + running.mean
    else:
        baseline = zeros
    if std_type is None:
        return Normalized(scores - baseline, baseline, torch.ones_like(scores))
    if std_type == "group":
        if ddof > 0:
            require_group_size(group_ids, group_labels, f"group std (ddof={ddof})", ddof + 1)
        std = group_stats(scores, group_ids, ddof=ddof).std
    elif std_type == "batch":
        if scores.numel() <= ddof:
            raise ValueError(
                f"batch std (ddof={ddof}) needs at least {ddof + 1} samples, got {scores.numel()}"
            )
        std = (zeros + scores.std(correction=ddof)) if scores.numel() > 1 else zeros
    else:
        if running.count <= 1.0:
            raise ValueError(
                f"running std needs more than 1 score seen so far, got {running.count:g}"
            )
        std = zeros + running.std
    scale = std + eps
    return Normalized((scores - baseline) / scale, baseline, scale)


def leave_one_out_baseline(scores: Tensor, group_ids: Tensor) -> Tensor:
    """b_i = (sum of the group - r_i) / (n - 1), the RLOO baseline; 0 for a singleton.

    ``r - b = n / (n - 1) * (r - mean)``.

    Args:
        scores: (B,) response-level scores.
        group_ids: (B,) long prompt index.

    Returns:
        (B,) baseline (callers decide what a singleton means; this returns 0 there).
    """
    stats = group_stats(scores, group_ids)
    # b = r - n/(n-1) (r - mean): same value as (sum - r)/(n-1), exactly r for a constant group
    factor = stats.count / (stats.count - 1.0).clamp(min=1.0)
    return torch.where(
        stats.count > 1, scores - factor * (scores - stats.mean), torch.zeros_like(scores)
    )


def clip_rewards(
    rewards: Tensor, low: float | None, high: float | None, mask: Tensor | None = None
) -> tuple[Tensor, float]:
    """Clamp to [low, high] and report the fraction of (valid) values the clamp changed.

    Args:
        rewards: (B,) or (B, T) values.
        low: lower bound or None.
        high: upper bound or None.
        mask: same shape as ``rewards``, float 0/1: only these count in the fraction.

    Returns:
        (clipped copy, fraction of counted elements changed; 0.0 when none counted).
    """
    if low is None and high is None:
        return rewards.clone(), 0.0
    clipped = rewards.clamp(min=low, max=high)
    changed = (clipped != rewards).to(torch.float64)
    weight = torch.ones_like(changed) if mask is None else (mask > 0).to(torch.float64)
    total = weight.sum().item()
    frac = (changed * weight).sum().item() / total if total > 0 else 0.0
    return clipped, frac
