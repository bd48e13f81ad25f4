"""Loss aggregation: how each framework turns a (B, T) per-token quantity into one number.

Every mode is linear, ``aggregate(x) = sum_bt W_bt x_bt`` with the (B, T) weights of
``agg_weights``; each dialect names the mode of each loss term (its ``loss_agg_modes``).
Dimension letters: B sequences, T response tokens (right-padded).

What roll-viz simplifies against the real recipes: one micro-batch, so the global token and row
counts are this batch's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from roll_viz.core.ops import as_bool

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


def agg_weights(
    response_mask: Tensor,
    mode: str,
    scale_factor: float | None = None,
    num_tokens: float | None = None,
) -> Tensor:
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
        num_tokens: token-mean's denominator where the framework counts it on a wider mask than
            ``response_mask`` (verl's v1 trainer: ``batch_num_tokens`` counts the response before
            its rollout rejection narrowed ``response_mask``); None = ``response_mask``'s count.

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
        return m / (m.sum().clamp(min=1.0) if num_tokens is None else max(num_tokens, 1.0))
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
    x: Tensor,
    response_mask: Tensor,
    mode: str,
    scale_factor: float | None = None,
    num_tokens: float | None = None,
) -> Tensor:
    """Aggregate a (B, T) per-token quantity into a scalar (differentiable in ``x``).

    Args:
        x: (B, T) values (padding may hold anything, even inf).
        response_mask: (B, T) float 0/1 (or bool).
        mode: one of AGG_MODES (see ``agg_weights``).
        scale_factor: see ``agg_weights``.
        num_tokens: see ``agg_weights``.

    Returns:
        () float64 tensor.
    """
    weights = agg_weights(response_mask, mode, scale_factor, num_tokens)
    return (weights * torch.where(as_bool(response_mask), x.to(F64), 0.0)).sum()
