"""A cross-fitted ridge-regression value probe: a real (if tiny) critic for GAE.

GAE needs V(s_t) at every response token. Training a critic is out of scope for a teaching app,
so roll-viz fits a linear probe V(s_t) ~ w . h_t + c from features h_t (the reference model's
hidden state at each response position) to value targets (e.g. each token's reward-to-go).

Cross-fitting keeps it honest: samples are split into folds, and each sample's values come from
a ridge fit on the OTHER folds only, so a sample's own outcome never leaks into its baseline
(otherwise the probe could memorize the answer and GAE's advantages would collapse to ~0).

What roll-viz simplifies against a real critic: a linear head on frozen features instead of a
trained value model, fitted once per batch (no value clipping, no PPO value loss, no warm-up),
and folds assigned round-robin by sample index (deterministic, no shuffling).
"""

from __future__ import annotations

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask


def ridge_fit(features: Tensor, targets: Tensor, alpha: float) -> tuple[Tensor, Tensor]:
    """Ridge regression with an unpenalized intercept (features and targets centred).

    Args:
        features: (N, F) training rows.
        targets: (N,) training targets.
        alpha: L2 penalty (> 0 keeps the system well posed for any N, F).

    Returns:
        ``(weights (F,), intercept ())`` minimizing ``|X w + c - y|^2 + alpha |w|^2``.
    """
    x_mean = features.mean(dim=0)
    y_mean = targets.mean()
    xc = features - x_mean
    gram = xc.T @ xc + alpha * torch.eye(features.shape[1], dtype=features.dtype)
    weights = torch.linalg.solve(gram, xc.T @ (targets - y_mean))
    return weights, y_mean - x_mean @ weights


def probe_values(
    features: Tensor,
    targets: Tensor,
    response_mask: Tensor,
    n_folds: int = 4,
    alpha: float = 1.0,
) -> Tensor:
    """Cross-fitted ridge value estimates V(s_t) for every valid response token.

    Sample b belongs to fold ``b % n_folds``; its values come from a ridge fit on the valid
    tokens of all samples in the other folds. With a single sample (or no valid training token)
    there is nothing to fit on, and the values are 0 (GAE then reduces to reward-to-go).

    Args:
        features: (B, T, F) features per response position (e.g. reference hidden states).
        targets: (B, T) value targets per position (e.g. reward-to-go of the scores).
        response_mask: (B, T) float 0/1.
        n_folds: number of folds (clamped to [2, B]).
        alpha: ridge penalty (> 0).

    Returns:
        (B, T) values, exactly 0 where response_mask == 0.
    """
    B, T, _F = features.shape
    assert targets.shape == (B, T), f"targets must be (B, T) = {(B, T)}"
    assert response_mask.shape == (B, T), f"response_mask must be (B, T) = {(B, T)}"
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    x = features.detach().to(torch.float64)
    y = targets.detach().to(torch.float64)
    valid = response_mask > 0
    out = torch.zeros(B, T, dtype=torch.float64)
    if B < 2:
        return out
    folds = torch.arange(B) % max(2, min(n_folds, B))
    parts = []
    for fold in folds.unique().tolist():
        held_out = (folds == fold)[:, None].expand(B, T)  # (B, T)
        train = valid & ~held_out
        if not bool(train.any()):
            continue
        weights, intercept = ridge_fit(x[train], y[train], alpha)
        pred = x @ weights + intercept  # (B, T, F) -> (B, T)
        parts.append(torch.where(held_out, pred, torch.zeros_like(pred)))
    if parts:
        out = torch.stack(parts).sum(dim=0)
    return apply_mask(out, response_mask.to(torch.float64))
