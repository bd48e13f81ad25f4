"""Policy-loss variants beyond PPO / CISPO / SAPO, as pure tensor helpers for ``losses``.

Each function reads one framework's code and cites it; ``losses.loss_from_spec`` composes them
(value through autograd, the closed-form d loss / d logp next to it). Dimension letters: B
sequences, T response tokens; float64 in, float64 out; nothing is modified in place except
freshly created tensors.

What roll-viz simplifies against the real recipes: one process (verl's kl_cov picks its top
tokens from this batch, TRL's entropy quantile is taken over this batch's valid tokens).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

F64 = torch.float64


def _f64(x: float) -> Tensor:
    """A float64 scalar tensor (torch.where on Python floats would give float32)."""
    return torch.tensor(x, dtype=F64)


def dppo(
    lp: Tensor,
    old: Tensor,
    adv: Tensor,
    r: Tensor,
    divergence: str,
    low: float,
    high: float,
    trunc_c: float,
):
    """Verl DPPO-Binary-TV / -KL (``compute_policy_loss_dppo_tv`` / ``_dppo_kl``).

    ``-A * sg(min(r, c)) * logp * valid``; ``valid`` is a trust region on the sampled token's
    probability p vs p_old (``divergence`` "tv" or "kl"), with ``clip_ratio_low/high`` read as
    divergence thresholds: TV keeps A>0 tokens with p - p_old <= high and the others with
    p - p_old >= -low; KL keeps A>0 tokens with binary KL <= high or p <= p_old, the others with
    binary KL <= low or p >= p_old.

    Returns:
        ((B, T) per-token loss, (B, T) d loss / d logp, (B, T) bool valid).
    """
    prob, old_prob = torch.exp(lp.detach()), torch.exp(old)
    if divergence == "tv":
        pos = (prob - old_prob) <= high
        neg = (prob - old_prob) >= -low
    else:
        binary_kl = old_prob * (old - lp.detach()) + (1 - old_prob) * torch.log(
            (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
        )
        pos = (binary_kl <= high) | (prob <= old_prob)
        neg = (binary_kl <= low) | (prob >= old_prob)
    valid = torch.where(adv > 0, pos, neg)
    weight = r.clamp(max=trunc_c) * valid.to(F64)
    return -adv * weight * lp, -adv * weight, valid


def vespo_phi(
    d: Tensor, adv: Tensor, m: Tensor, params: tuple, is_ratio: Tensor | None = None
) -> Tensor:
    """TRL ``GRPOTrainer.get_gamma_weights``: phi(w) = e^lam w^k e^(-lam w), w = sequence ratio.

    ``log w = clamp(sum_t clamp(d, +-20), log 1e-8, 20)`` (a sum, not a mean), plus the sum over
    every position of ``clamp(log is_ratio, log 1e-8, 20)`` when the sampler's IS ratio is given;
    k, lambda by the sign of A (A >= 0: positive). phi(1) = 1; phi is a constant.
    """
    k_pos, lam_pos, k_neg, lam_neg = params
    lower = math.log(1e-8)
    seq = (d.clamp(-20.0, 20.0) * m).sum(-1, keepdim=True)
    if is_ratio is not None:
        seq = seq + torch.log(is_ratio).clamp(lower, 20.0).sum(-1, keepdim=True)
    log_w = seq.clamp(lower, 20.0)
    nonneg = adv >= 0
    k = torch.where(nonneg, _f64(k_pos), _f64(k_neg))
    lam = torch.where(nonneg, _f64(lam_pos), _f64(lam_neg)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def kl_cov_tokens(adv: Tensor, lp: Tensor, mask: Tensor, ratio: float) -> Tensor:
    """Verl ``compute_policy_loss_kl_cov``: the top max(1, int(N * ratio)) tokens by cov(A, logp).

    cov = (A - mean A)(logp - mean logp) over the N valid tokens (row-major order); returns a
    (B, T) float 0/1 mask of the chosen tokens.
    """
    chosen = torch.zeros_like(adv)
    flat = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
    if flat.numel() == 0:
        return chosen
    a, logp = adv.reshape(-1)[flat], lp.reshape(-1)[flat]
    cov = (a - a.mean()) * (logp - logp.mean())
    k = max(1, int(len(cov) * ratio))
    top = flat[torch.topk(cov, k, largest=True).indices]
    chosen.view(-1)[top] = 1.0
    return chosen


def geo_mean(lp: Tensor, old: Tensor, adv: Tensor, m: Tensor, low: float, high: float):
    """Verl GMPO (``compute_policy_loss_geo_mean``), a sequence-level loss.

    ``ratio_i = exp(mean_t sgnA min(sgnA d, sgnA clip(d, -lo, hi)))`` (d unclamped),
    ``loss_i = -mean_t(A) ratio_i``, policy = mean over ALL rows (``loss_agg_mode`` ignored).
    The per-token loss shown is loss_i on each of the row's tokens, with weight 1/(L_i B).

    Returns:
        (() policy, (B, T) per-token loss, {"coef": (B, T) d policy / d logp, "weights",
        "log_ratio": (B, 1), "rows": (B, 1) each row's share loss_i / B}, (B, T) bool
        d != clip(d)).
    """
    B = m.shape[0]
    lengths = m.sum(-1, keepdim=True).clamp(min=1.0)
    sgn = torch.sign(adv)
    d = lp - old
    dc = d.clamp(-low, high)
    dmin = sgn * torch.minimum(sgn * d, sgn * dc)
    log_ratio = (dmin * m).sum(-1, keepdim=True) / lengths
    seq_ratio = torch.exp(log_ratio)
    adv_mean = (adv * m).sum(-1, keepdim=True) / lengths
    loss = -adv_mean * seq_ratio  # (B, 1)
    policy = loss.sum() / max(B, 1)
    dd, ddc = d.detach(), dc.detach()
    slope = ((sgn * dd <= sgn * ddc) & (sgn != 0)).to(F64)
    coef = -adv_mean * seq_ratio.detach() * slope * m / lengths / max(B, 1)
    pieces = {"coef": coef, "weights": m / lengths / max(B, 1), "log_ratio": log_ratio.detach()}
    pieces["rows"] = loss / max(B, 1)
    clipped = (dd != ddc) & (m > 0)
    return policy, (loss.detach() * m), pieces, clipped


def sequence_is_weights(w: Tensor, mask: Tensor, m: Tensor) -> Tensor:
    """Verl geo_mean's per-row IS weight: ``exp(sum_t log(w + 1e-10) m / (L + 1e-8))``, (B, 1).

    The geometric mean of the row's token weights over its (kept) tokens, as
    ``compute_policy_loss_geo_mean`` aggregates ``rollout_is_weights``; 1 for an empty row.
    """
    logs = torch.where(mask, torch.log(w + 1e-10), 0.0)
    return torch.exp((logs * m).sum(-1, keepdim=True) / (m.sum(-1, keepdim=True) + 1e-8))


def off_policy_keep(adv: Tensor, d: Tensor, m: Tensor, threshold: float) -> Tensor:
    """TRL ``get_off_policy_mask`` (DeepSeek-V3.2): keep A >= 0 or mean_t(old - logp) <= delta.

    ``d`` is logp minus the sampling log-probs (mu when the sampler's are given, else pi_old).
    """
    seq_kl = (-d * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    return ((adv >= 0) | (seq_kl <= threshold)).to(F64)


def high_entropy_mask(ent: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """TRL ``get_high_entropy_mask``: tokens whose entropy >= the q-quantile of valid entropies."""
    local = ent[mask]
    if local.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(local, quantile)
    return (torch.where(mask, ent, 0.0) >= threshold) & mask


def sample_weights(m: Tensor, difficulty: Tensor | None = None, length: bool = False) -> Tensor:
    """ROLL ``ActorWorker.compute_sample_weights``: (B,) per-sample weights of the policy term.

    Difficulty: ``0.5 + 1.5 * clamp(difficulty, 0, 1)``; length: ``1.5 - (L - L_min) / (L_max -
    L_min + 1e-8)``; their product rescaled to mean 1 (``* B / (sum + 1e-8)``) when the sum is
    positive. Without either, all ones.
    """
    weights = torch.ones(m.shape[0], dtype=F64)
    if difficulty is not None:
        weights = weights * (0.5 + 1.5 * difficulty.to(F64).clamp(0.0, 1.0))
    if length:
        lengths = m.sum(-1)
        norm = (lengths - lengths.min()) / (lengths.max() - lengths.min() + 1e-8)
        weights = weights * (1.5 - norm)
    if weights.sum() > 0:
        weights = weights * (m.shape[0] / (weights.sum() + 1e-8))
    return weights


def clip_cov_keep(
    r: Tensor,
    adv: Tensor,
    lp: Tensor,
    mask: Tensor,
    low: float,
    high: float,
    params: tuple[float, float, float, int],
) -> Tensor:
    """Verl ``compute_policy_loss_clip_cov``: (B, T) 1.0, or 0.0 on the tokens whose PG it drops.

    Candidates: valid tokens the PPO clip did not already clip, with ``lb < cov < ub``, where
    ``cov = (A - mean A)(logp - mean logp)`` over the valid tokens; ``max(int(ratio * N), 1)`` of
    them are drawn at random. verl draws with the global ``torch.randperm``; here the draw uses
    a generator seeded with ``seed``, so it is reproducible (when every candidate is taken the
    result does not depend on the draw).
    """
    ratio, lb, ub, seed = params
    m = mask.to(F64)
    n_valid = m.sum().clamp(min=1.0)
    pg1 = -adv * r
    pg2 = -adv * r.clamp(1.0 - low, 1.0 + high)
    clipped = (pg2 > pg1) & mask
    cov = (adv - (adv * m).sum() / n_valid) * (lp - (lp * m).sum() / n_valid)
    cov = torch.where(mask & ~clipped, cov, -math.inf)
    candidates = torch.nonzero((cov < ub) & (cov > lb) & mask)
    keep = torch.ones_like(r)
    if len(candidates):
        clip_num = max(int(ratio * float(mask.sum())), 1)
        gen = torch.Generator().manual_seed(int(seed))
        chosen = candidates[torch.randperm(len(candidates), generator=gen)[:clip_num]]
        keep[chosen[:, 0], chosen[:, 1]] = 0.0
    return keep


def rollout_correction(
    old: Tensor,
    rollout: Tensor,
    mask: Tensor,
    level: str,
    mode: str,
    gating: str,
    low: float,
    high: float,
) -> tuple[Tensor, Tensor]:
    """OpenRLHF's train/rollout mismatch correction (``models/loss.py::PolicyLoss``, 0.11.2).

    The per-token IS weight is ``w = pi_old / mu = exp(old - rollout)``. A gate reads a statistic
    per unit (each token, or per sequence: the geometric mean of w, or the mean divergence):
    ``ratio`` (w itself), ``binary_kl`` or ``tv`` between the sampled token's probabilities
    (clamped to [1e-6, 1 - 1e-6]). ``mask`` keeps units with low <= stat <= high (survivors
    keep their per-token w, the others 0); ``clip`` (token level, ratio gating only) clamps w to
    [low, high]. The returned coefficient multiplies the per-token policy loss.

    Returns:
        ((B, T) coefficient, filtered: (B, T) at token level, (B, 1) at sequence level).
    """
    m = mask.to(F64)
    log_w = old - rollout
    token_w = torch.exp(log_w)
    seq = level == "seq"

    def row_mean(x: Tensor) -> Tensor:
        return ((x * m).sum(-1) / m.sum(-1)).unsqueeze(-1)  # empty rows: NaN, as OpenRLHF

    if gating == "ratio":
        stat = torch.exp(row_mean(log_w) if seq else log_w)
    else:
        p = torch.exp(rollout).clamp(1e-6, 1 - 1e-6)
        q = torch.exp(old).clamp(1e-6, 1 - 1e-6)
        if gating == "binary_kl":
            stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
        else:
            stat = (p - q).abs()
        if seq:
            stat = row_mean(stat)
    if mode == "clip":
        return stat.clamp(min=low, max=high), (stat < low) | (stat > high)
    keep = (stat >= low) & (stat <= high)
    return torch.where(keep, token_w, 0.0), ~keep


def sampler_is_ratio(
    old: Tensor, mu: Tensor, m: Tensor, mode: str, low: float | None, high: float | None
) -> Tensor:
    """TRL's vLLM importance-sampling ratio (``_generate_and_score_completions``, TRL 1.16).

    ``exp((old - mu) * mask)`` per token (``token_*``) or ``exp(sum_t (old - mu) mask)`` per
    sequence (``sequence_*``, (B, 1)); ``*_truncate`` clamps it to [low, high], ``*_mask`` sets
    it to 0 outside [low, high] (None = unbounded on that side). It multiplies the per-token loss.
    """
    diff = (old - mu) * m
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return ratio.clamp(min=low, max=high)
    lo = -math.inf if low is None else low
    hi = math.inf if high is None else high
    return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
