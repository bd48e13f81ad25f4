"""verl PF-PPO (``algorithm.use_pf_ppo``): after GAE, the batch's rows are resampled by score.

verl (``trainer/ppo/ray_trainer.py::compute_advantage``, which the v1 trainer calls too) runs it
in the gae branch only, after the advantages and returns (whitened) are computed:
``core_algos.compute_pf_ppo_reweight_data`` weighs each row by its score
``token_level_scores.sum(-1)`` (``reweight_method`` pow: ``|s| ** weight_pow``; max_min: 1 for
the rows at the batch's max or min score, else 0; max_random: 0.4 at the max, else 0.1), adds
1e-8 (clamped at >= 1e-8) and draws B rows with ``torch.multinomial(weights, B,
replacement=True)``. verl draws unseeded; here a ``torch.Generator`` seeded with
``viz_pf_ppo_seed`` (never the global RNG). What the update trains on then depends on the trainer:

* legacy ``RayPPOTrainer`` (``use_v1: false``): the whole batch is replaced by the drawn rows
  (``resampled_batch = {key: tensor[sample_indices]}``), so the actor and critic train on rows
  ``resample`` of everything (``policy_loss(resample=)``); the Trace keeps the batch's own rows.
* v1 trainer (``use_v1: true``, the default, ``v1/trainer_base.py::_compute_advantage``): the
  resampled ``advantages`` and ``returns`` are written back under the batch's own keys through
  ``response_to_nested`` with the ORIGINAL response_mask, so row i keeps its tokens, log-probs
  and mask but gets the advantages and returns of drawn row ``resample[i]`` over its own length.
  Past the drawn row's length that is the drawn row's padding: GAE's raw advantage there is 0
  (values and rewards pad with 0), whitened to ``-mean * rsqrt(var + 1e-8)``; its return is 0.
  The Trace's advantages and returns are these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import masked_mean, masked_var
from roll_viz.core.pipeline.dialects import verl_rollout as vr

#: reweight_method -> what verl's compute_weights computes, in words
METHODS = {
    "pow": "|s|^weight_pow",
    "max_min": "1 at the batch's max or min score, else 0",
    "max_random": "0.4 at the batch's max score, else 0.1",
}


def weights(scores: Tensor, method: str, power: float) -> Tensor:
    """The draw weights: verl's ``compute_weights`` plus its ``clamp(w + 1e-8, min=1e-8)``, (B,).

    Raises:
        ValueError: a weight that is not finite (a score of 0 with a negative weight_pow), on
            which ``torch.multinomial`` would fail.
    """
    if method == "pow":
        w = scores.abs().pow(power)
    elif method == "max_min":
        top, bottom = scores.max(), scores.min()
        w = ((scores == top) | (scores == bottom)).to(scores.dtype)
    else:  # max_random
        # in the scores' dtype (verl's scalar torch.where gives float32 0.4 and 0.1)
        w = torch.where(scores == scores.max(), scores.new_tensor(0.4), scores.new_tensor(0.1))
    w = torch.clamp(w + 1e-8, min=1e-8)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(
            f"weight_pow: |score|^{power:g} is not finite for a score of 0 (verl's "
            "torch.multinomial would fail on it)"
        )
    return w


def draw(w: Tensor, seed: int) -> Tensor:
    """(B,) row indices: ``torch.multinomial(w, B, replacement=True)`` from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(w, w.shape[0], replacement=True, generator=gen)


def counts_note(rows: Tensor) -> str:
    """Each drawn row with the times it was drawn ("row x times"); rows never drawn left out."""
    counts = torch.bincount(rows, minlength=0).tolist()
    drawn = ", ".join(f"{r} x{k}" for r, k in enumerate(counts) if k)
    return f"rows drawn (row x times): {drawn}"


def resample(
    cfg: Mapping[str, Any],
    scores: Tensor,
    mask: Tensor,
    raw: Tensor,
    advantages: Tensor,
    returns: Tensor,
    ddof: int,
    notes: list[str],
) -> tuple[Tensor, Tensor, Tensor]:
    """PF-PPO on a gae run: (rows drawn, advantages, returns) as the update sees them.

    Args:
        cfg: resolved verl config with ``use_pf_ppo`` on.
        scores: (B,) the scores (``token_level_scores.sum(-1)``: the KL is not in them).
        mask: (B, T) response mask.
        raw: (B, T) GAE advantages before whitening, 0 on padding.
        advantages: (B, T) the whitened ones (``masked_whiten(raw, mask, ddof, 1e-8)``).
        returns: (B, T) GAE returns, 0 on padding.
        ddof: the whitening's variance ddof.
        notes: appended to.

    Raises:
        ValueError: with the decoupled rollout correction on (not modelled); a weight that is
            not finite.

    Returns:
        rows (B,) drawn; under the v1 trainer row i's advantages and returns are drawn row
        ``rows[i]``'s over row i's length (see the module docstring), under the legacy trainer
        the inputs unchanged (the loss takes the rows, ``policy_loss(resample=)``).
    """
    if vr.decoupled_rules(cfg):
        # verl corrects the batch's own rows, logs that, then resamples (the v1 trainer writes
        # the drawn rows' mask and IS weights back onto the batch's own rows)
        raise ValueError(
            "use_pf_ppo: together with the decoupled rollout_is / rollout_rs it is not modelled "
            "(verl weighs and rejects the batch's own rows before it draws); switch one off"
        )
    method, power, seed = cfg["reweight_method"], cfg["weight_pow"], int(cfg["viz_pf_ppo_seed"])
    w = weights(scores, method, power)
    rows = draw(w, seed)
    how = METHODS[method].replace("weight_pow", f"{power:g}")
    notes.append(
        f"PF-PPO ({method}): row weights {how} (+ 1e-8); {rows.shape[0]} rows drawn with "
        f"replacement, torch.multinomial on a torch.Generator seeded {seed} (verl's draw is "
        f"unseeded); {counts_note(rows)}"
    )
    if not cfg["use_v1"]:
        notes.append(
            "legacy trainer: the update trains on the drawn rows (every tensor of the batch "
            "indexed by them); advantages and returns here are the batch's own rows"
        )
        return rows, advantages, returns
    notes.append(
        "v1 trainer: row i keeps its tokens, log-probs and mask but gets the advantages and "
        "returns of drawn row rows[i] over its own length (past the drawn row's end: its "
        "padding, advantage -mean*rsqrt(var+1e-8), return 0)"
    )
    # a drawn row's padding holds the whitened raw 0: -mean * rsqrt(var + 1e-8)
    pad = -masked_mean(raw, mask) * torch.rsqrt(masked_var(raw, mask, ddof) + 1e-8)
    drawn = torch.where(mask[rows] > 0, advantages[rows], pad)
    return rows, drawn * mask, returns[rows] * mask


#: the (B, T) loss inputs the legacy trainer takes from the drawn rows
ROW_INPUTS = (
    "logprobs",
    "old_logprobs",
    "advantages",
    "response_mask",
    "ref_logprobs",
    "entropy",
    "values",
    "old_values",
    "returns",
    "rollout_logprobs",
)


def train_inputs(cfg: Mapping[str, Any], inputs: Any, rows: Tensor | None) -> Any:
    """The ``LossInputs`` the update trains on: the drawn rows of each under the legacy trainer."""
    rows = train_rows(cfg, rows)
    if rows is None:
        return inputs
    drawn = {f: getattr(inputs, f)[rows] for f in ROW_INPUTS if getattr(inputs, f) is not None}
    return dataclasses.replace(inputs, **drawn)


def train_rows(cfg: Mapping[str, Any], rows: Tensor | None) -> Tensor | None:
    """The batch rows the update trains on: the drawn ones under the legacy trainer, else None.

    Under the v1 trainer each row trains on itself (the Trace already carries the drawn rows'
    advantages and returns).
    """
    if rows is None or cfg["use_v1"]:
        return None
    return rows
