"""ROLL's sample-level masks: which samples the advantages and the loss keep (``roll.py``'s).

``sample_level_mask`` is ROLL's ``get_sample_level_mask`` (``max_len_mask``,
``difficulty_mask``, ``error_max_len_clip``) with the ratios it logs; ``final_response_mask``
turns its keep mask into ROLL's ``final_response_mask`` for the loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import group_stats
from roll_viz.core.pipeline.dialects.shared import refuse_row_inputs
from roll_viz.core.records import Batch

F64 = torch.float64


def sample_level_mask(batch: Batch, cfg: Mapping[str, Any]) -> tuple[Tensor, dict[str, float]]:
    """ROLL ``get_sample_level_mask``: the (B,) 0/1 keep mask and ROLL's logged ratios.

    The product of the switched-on masks: ``max_len_mask`` (length != the response width T),
    ``difficulty_mask`` (the prompt's mean raw score strictly inside the thresholds; all kept
    when every group has one sample, ROLL's n_sample <= 1) and ``error_max_len_clip`` ((score
    == 0 and length < threshold) or score == 1). A ratio is 1.0 when its switch is off. The
    loss then runs on ``response_mask * keep[:, None]`` (ROLL's ``final_response_mask``, also
    the token count of token-mean).
    """
    mask, scores = batch.response_mask, batch.scores
    B, T = mask.shape
    length = mask.sum(-1) if cfg.get("max_len_mask") or cfg.get("error_max_len_clip") else None
    keep = torch.ones(B, dtype=F64)
    metrics: dict[str, float] = {}
    for key, name in (
        ("max_len_mask", "actor/max_len_mask_ratio"),
        ("difficulty_mask", "actor/difficulty_mask_ratio"),
        ("error_max_len_clip", "actor/error_len_mask_ratio"),
    ):
        if not cfg.get(key, False):
            metrics[name] = 1.0
            continue
        if key == "max_len_mask":
            part = (length != T).to(F64)
        elif key == "difficulty_mask":
            stats = group_stats(scores, batch.group_ids)
            if bool((stats.count <= 1).all()):
                part = torch.ones(B, dtype=F64)
            else:
                low, high = cfg["difficulty_low_threshold"], cfg["difficulty_high_threshold"]
                part = ((stats.mean > low) & (stats.mean < high)).to(F64)
        else:
            short = length < cfg["error_max_len_threshold"]
            part = (((scores == 0) & short) | (scores == 1)).to(F64)
        keep = keep * part
        metrics[name] = part.mean().item()
    metrics["actor/final_mask_ratio"] = keep.mean().item()
    metrics["actor/samples_used"] = keep.sum().item()
    metrics["actor/samples_total"] = float(B)
    return keep, metrics


def final_response_mask(
    response_mask: Tensor, advantages: Tensor, sample_mask: Tensor, notes: list[str]
) -> tuple[Tensor, Tensor, Tensor]:
    """ROLL's ``final_response_mask`` from the unmasked mask and a sample-level keep mask.

    Args:
        response_mask: (B, T) 0/1 ROLL ``response_mask`` (before the sample-level mask).
        advantages: (B, T) or (B,) advantages.
        sample_mask: (B,) 0/1 keep mask (``sample_level_mask``).
        notes: appended with what was dropped.

    Returns:
        (final mask (B, T), advantages 0 outside it, the unmasked mask for ROLL's metrics).

    Raises:
        ValueError: ``sample_mask`` not (B,) or not 0/1.
    """
    mask = torch.as_tensor(response_mask).detach().to(F64)
    keep = torch.as_tensor(sample_mask).detach().to(F64)
    if mask.dim() != 2 or keep.shape != (mask.shape[0],):
        raise ValueError(f"sample_mask: expected ({mask.shape[0]},), got {tuple(keep.shape)}")
    if not bool(((keep == 0) | (keep == 1)).all()):
        raise ValueError("sample_mask: must contain only 0 and 1")
    adv = torch.as_tensor(advantages).detach().to(F64)
    adv = adv * (keep if adv.dim() == 1 else keep[:, None])
    dropped = int((keep == 0).sum())
    notes.append(
        f"sample-level mask: {dropped} of {keep.numel()} samples dropped; the loss runs on "
        "final_response_mask = response_mask * keep with advantages 0 outside it "
        "(compute_advantage ran on it); the entropy term and approxkl, policykl, ratio_* and "
        "clipfrac run over the unmasked response_mask"
    )
    return mask * keep[:, None], adv, mask


def rewrite_loss_inputs(
    cfg: Mapping[str, Any],
    notes: list[str],
    inputs: Any,
    sample_mask: Tensor | None,
    resample: Tensor | None,
) -> tuple[Any, dict[str, float]]:
    """ROLL's loss inputs: with a sample-level mask, its ``final_response_mask``.

    ``inputs.response_mask`` is then ROLL's mask before the sample-level mask: the loss runs on
    the final mask with the advantages 0 outside it, while the metrics ROLL logs over the
    unmasked mask, and its entropy term, read ``metric_mask`` / ``entropy_mask``.
    """
    refuse_row_inputs(None, resample)
    if sample_mask is None:
        return inputs, {}
    mask, advantages, unmasked = final_response_mask(
        inputs.response_mask, inputs.advantages, sample_mask, notes
    )
    return dataclasses.replace(
        inputs,
        response_mask=mask,
        advantages=advantages,
        metric_mask=unmasked,
        entropy_mask=unmasked,
    ), {}
