"""The mismatch lab on one batch: d = log pi_old - log mu, the two-factor ratio, ESS, corrections.

Input: the trainer's recompute pi_old and the sampler's mu of the same tokens (from
``lm.behaviour`` live, or ``data.behaviour_presets`` for a preset), the batch's advantages and
the lab's settings (every framework's thresholds). Output: plain tensors and tables for the page.

pi_theta: at the first update after a rollout pi_theta = pi_old, so the ratio pi_theta / mu is
all mismatch. ``Settings.staleness`` s > 0 stands in for a policy that moved since the rollout:
log pi_theta = log pi_old + s * A per token (a toy step in the direction a policy-gradient update
moves each sampled token, stated as such on the page), so the second factor and PPO's clip show.

The loss of every row is ``rollout_correction.lab_loss``: PPO-clip (eps 0.2; verl's rows with
its dual clip c = 3 for A < 0), token mean over the batch, the correction's weights multiplying
each token's loss and its own denominator rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline.dialects import corrections as fc

EPS_CLIP = 0.2


@dataclass(frozen=True)
class Settings:
    """The lab's thresholds, each under its framework's key (defaults: the frameworks' own).

    Attributes:
        staleness: s of the toy pi_theta (log pi_theta = log pi_old + s * A); 0 = first update.
        tis: verl ``rollout_is_threshold`` of token-TIS and seq-TIS (upper truncation).
        icepop: IcePop's [alpha, beta] (verl ``rollout_is_threshold: "alpha_beta"``).
        rs: verl ``rollout_rs`` of the "your rejection rule" row.
        rs_threshold: its ``rollout_rs_threshold`` (verl's syntax).
        trl_mode: TRL ``vllm_importance_sampling_mode``.
        trl_min: TRL ``vllm_importance_sampling_clip_min`` (None = no lower bound).
        trl_max: TRL ``vllm_importance_sampling_clip_max``.
        orl_level: OpenRLHF ``is_correction_level`` (token / seq; gating ratio).
        orl_mode: OpenRLHF ``is_correction_mode`` (mask / clip; clip needs level token).
        orl_threshold: OpenRLHF ``is_correction_threshold`` (low, high).
        roll_upper: ROLL ``is_weight.upper_bound``.
        roll_filter: ROLL filter ``ratio_low``, ``ratio_high`` (agg_type token).
    """

    staleness: float = 0.0
    tis: float = 2.0
    icepop: tuple[float, float] = (0.5, 5.0)
    rs: str = "seq_sum_k1"
    rs_threshold: str = "0.5_2.0"
    trl_mode: str = "sequence_mask"
    trl_min: float | None = None
    trl_max: float | None = 3.0
    orl_level: str = "token"
    orl_mode: str = "mask"
    orl_threshold: tuple[float, float] = (0.5, 5.0)
    roll_upper: float = 1.2
    roll_filter: tuple[float, float] = (0.8, 1.2)


@dataclass(frozen=True)
class Lab:
    """Everything the page draws for one batch and one set of thresholds.

    Attributes:
        delta: (B, T) d = log pi_old - log mu, 0 off ``mask``.
        mask: (B, T) bool, the tokens with both log-probs.
        logp: (B, T) log pi_theta (pi_old + the toy staleness step).
        ratio: the two-factor ratio (``rc.TwoFactor``).
        stats: summary numbers of d (name -> value).
        corrections: every correction, in table order.
        plain: the loss and gradient without a correction.
        results: the loss and gradient with each correction (same order).
        table: one row per correction (what it does, ESS, loss and gradient with / without).
    """

    delta: Tensor
    mask: Tensor
    logp: Tensor
    ratio: rc.TwoFactor
    stats: dict[str, float]
    corrections: tuple[rc.Correction, ...]
    plain: rc.LabLoss
    results: tuple[rc.LabLoss, ...]
    table: pd.DataFrame


def delta_stats(delta: Tensor, mask: Tensor) -> dict[str, float]:
    """Tokens, mean d, mean |d|, RMS d, max |d|, and the share of tokens with |d| > 0.01 nats."""
    m = mask.bool()
    d = delta[m].double()
    n = int(d.numel())
    if n == 0:
        return {
            "tokens": 0.0,
            "mean": math.nan,
            "mean_abs": math.nan,
            "rms": math.nan,
            "max_abs": math.nan,
            "share_above_0.01": math.nan,
        }
    return {
        "tokens": float(n),
        "mean": float(d.mean()),
        "mean_abs": float(d.abs().mean()),
        "rms": float(d.pow(2).mean().sqrt()),
        "max_abs": float(d.abs().max()),
        "share_above_0.01": float((d.abs() > 0.01).double().mean()),
    }


def build_corrections(
    old: Tensor, mu: Tensor, mask: Tensor, settings: Settings
) -> tuple[rc.Correction, ...]:
    """Every framework's correction at the settings' thresholds (ValueError on a bad one)."""
    s = settings
    alpha, beta = s.icepop
    out = [
        fc.verl_correction(
            old, mu, mask, rollout_is="token", rollout_is_threshold=s.tis, name="token-TIS"
        ),
        fc.verl_correction(
            old, mu, mask, rollout_is="sequence", rollout_is_threshold=s.tis, name="seq-TIS"
        ),
        fc.verl_correction(
            old,
            mu,
            mask,
            rollout_is="token",
            rollout_is_threshold=f"{alpha:g}_{beta:g}",
            name="IcePop",
        ),
        fc.verl_correction(
            old,
            mu,
            mask,
            rollout_is="sequence",
            rollout_is_threshold=s.tis,
            rollout_rs="seq_sum_k1",
            rollout_rs_threshold=f"{1 / s.tis:g}_{s.tis:g}",
            name="seq-MIS",
        ),
        fc.verl_correction(old, mu, mask, **fc.VERL_PRESETS["Geo-RS"], name="Geo-RS"),
        fc.verl_correction(
            old, mu, mask, rollout_rs=s.rs, rollout_rs_threshold=s.rs_threshold, name=f"RS {s.rs}"
        ),
        fc.trl_correction(old, mu, mask, mode=s.trl_mode, clip_min=s.trl_min, clip_max=s.trl_max),
        fc.openrlhf_correction(
            old, mu, mask, level=s.orl_level, mode=s.orl_mode, threshold=s.orl_threshold
        ),
        fc.roll_correction(old, mu, mask, upper_bound=s.roll_upper),
        fc.roll_correction(
            old,
            mu,
            mask,
            is_weight_enabled=False,
            filters=(fc.RollFilter(ratio_low=s.roll_filter[0], ratio_high=s.roll_filter[1]),),
        ),
    ]
    return tuple(out)


def _config_text(corr: rc.Correction) -> str:
    return ", ".join(f"{k}={v}" for k, v in corr.config if v is not None and v is not False)


def _cosine(a: Tensor, b: Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return math.nan
    return float((a * b).sum()) / (na * nb)


def mismatch_lab(
    old: Tensor, mu: Tensor, mask: Tensor, advantages: Tensor, settings: Settings
) -> Lab:
    """The whole lab on one batch (milliseconds for a classroom batch).

    Args:
        old: (B, T) log pi_old.
        mu: (B, T) log mu of the same tokens.
        mask: (B, T) tokens with both log-probs.
        advantages: (B, T) or (B,) advantages of the batch (the sidebar's estimator).
        settings: the thresholds.

    Raises:
        ValueError: a threshold a framework refuses (its own message).
    """
    m = torch.as_tensor(mask).bool()
    delta = rc.log_mismatch(old, mu, m)
    adv = torch.as_tensor(advantages).double()
    if adv.dim() == 1:
        adv = adv[:, None].expand(m.shape)
    adv = torch.where(m, adv, 0.0)
    old64 = torch.where(m, torch.as_tensor(old).double(), 0.0)
    logp = torch.where(m, old64 + settings.staleness * adv, 0.0)
    ratio = rc.two_factor_ratio(logp, old64, mu, m)
    corrections = build_corrections(old64, mu, m, settings)
    plain = rc.lab_loss(logp, old64, adv, m, eps=EPS_CLIP)
    results = tuple(rc.lab_loss(logp, old64, adv, m, c, eps=EPS_CLIP) for c in corrections)
    n = int(m.sum())
    rows = []
    for corr, res in zip(corrections, results, strict=True):
        rows.append(
            {
                "framework": corr.framework,
                "method": corr.name,
                "config": _config_text(corr),
                "truncated": int(corr.truncated.sum()),
                "masked": int(corr.masked.sum()),
                "kept share": (n - int(corr.masked.sum())) / n if n else math.nan,
                "ESS": rc.effective_sample_size(corr.weights, m),
                "denominator": res.denominator,
                "loss without": plain.loss,
                "loss with": res.loss,
                "|g| without": float(plain.grad.norm()),
                "|g| with": float(res.grad.norm()),
                "cos(g, g without)": _cosine(res.grad, plain.grad),
            }
        )
    table = pd.DataFrame(rows)
    stats = delta_stats(delta, m)
    stats["ESS of pi_old/mu"] = rc.effective_sample_size(ratio.mismatch, m)
    stats["ESS of pi_theta/mu"] = rc.effective_sample_size(ratio.total, m)
    return Lab(delta, m, logp, ratio, stats, corrections, plain, results, table)
