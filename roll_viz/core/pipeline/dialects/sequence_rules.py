"""The sequence-level masks under each framework's own names, as ``Correction`` records.

The math is ``core/pipeline/sequence_masks.py``; this file names it the way each framework that
ships it does, with its defaults, so the Mismatch page lists the rows it removes beside the
token-level corrections (``corrections.py``):

- OPSM: TRL ``off_policy_mask_threshold`` (TRL 1.16 ``GRPOTrainer.get_off_policy_mask``;
  DeepSeek-V3.2's delta; None = off, the docs' example 0.5). TRL multiplies the per-token loss
  by the (B, 1) mask, so a dropped sequence's tokens stay in the token-mean denominator. TRL
  compares the sampler's log-probs (``sampling_per_token_logps``, else pi_old) with the
  CURRENT policy pi_theta. slime's ``--use-opsm`` / ``--opsm-delta`` is the same rule
  (``slime_opsm_per_token`` is its per-token version before the fix of slime PR #1917).
- Product ratio mask: TRL ``vllm_importance_sampling_mode="sequence_mask"`` (``corrections``).
- Geometric-mean ratio mask: verl Geo-RS, ``rollout_rs="seq_mean_k1"`` with
  ``rollout_rs_threshold="lower_upper"`` (``corrections.verl_correction``). TRL PR #4891 proposed
  a geometric mode for TRL; TRL 1.16 does not ship it (its modes are token / sequence x
  truncate / mask, the sequence ratio a product), so the geometric row is verl's.
- TRM (arXiv 2512.23075): verl ``rollout_rs="seq_max_k2"`` (verl PR #4544, "veto for max
  criterion"): a sequence whose largest token k2 = d^2 / 2 exceeds ``rollout_rs_threshold`` is
  rejected; rejected tokens leave ``response_mask``.
- Keep sampling mask (DeepSeek-V3.2; no framework key among the four dialects): pi renormalised
  on the sampler's top-p / top-k support (``keep_sampling``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import sequence_masks as sm
from roll_viz.core.pipeline.dialects.corrections import trl_correction, verl_correction
from roll_viz.core.pipeline.rollout_correction import F64, Correction, prep

#: TRL OPSM's example delta in its docs (GRPOConfig.off_policy_mask_threshold)
TRL_OPSM_DOC_DELTA = 0.5
#: verl's TRM rule (rollout_rs) and the Geo-RS rule
VERL_TRM_RULE = "seq_max_k2"
VERL_GEO_RULE = "seq_mean_k1"


def trl_opsm(
    logp: Tensor,
    mu: Tensor,
    mask: Tensor,
    advantages: Tensor,
    off_policy_mask_threshold: float = TRL_OPSM_DOC_DELTA,
) -> Correction:
    """TRL's OPSM: keep A >= 0 or mean_t(log mu - log pi_theta) <= delta, per sequence."""
    rule = sm.opsm(advantages, logp, mu, mask, off_policy_mask_threshold)
    m = prep(mask)[0]
    note = (
        "off_policy_mask_threshold: a sequence with A < 0 whose mean log mu - log pi_theta is "
        "above delta is dropped whole (DeepSeek-V3.2 OPSM); TRL multiplies the per-token loss by "
        "the mask, so its tokens stay in the denominator."
    )
    return Correction(
        "trl",
        "OPSM",
        (("off_policy_mask_threshold", off_policy_mask_threshold),),
        rule.keep.to(F64),
        m,
        torch.zeros_like(m),
        m & ~rule.keep,
        note,
    )


def trl_sequence_product(
    old: Tensor, mu: Tensor, mask: Tensor, low: float, high: float
) -> Correction:
    """TRL ``sequence_mask``: drop a sequence whose product ratio pi_old / mu leaves [low, high]."""
    corr = trl_correction(old, mu, mask, mode="sequence_mask", clip_min=low, clip_max=high)
    return replace(corr, name="sequence_mask (product)")


def verl_geo_rs(old: Tensor, mu: Tensor, mask: Tensor, low: float, high: float) -> Correction:
    """Geo-RS in verl: reject a sequence whose geometric-mean ratio pi_old / mu leaves [low, high].

    verl's k1 is log mu - log pi_old, so its ``rollout_rs_threshold`` bounds mu / pi_old: the
    bounds on pi_old / mu are passed inverted, ``"1/high_1/low"``.
    """
    return verl_correction(
        old,
        mu,
        mask,
        rollout_rs=VERL_GEO_RULE,
        rollout_rs_threshold=f"{1.0 / high:.6g}_{1.0 / low:.6g}",
        name="Geo-RS (geometric mean)",
    )


def verl_trm(old: Tensor, mu: Tensor, mask: Tensor, threshold: float) -> Correction:
    """TRM in verl: reject a sequence when any token's k2 = d^2 / 2 exceeds the threshold."""
    return verl_correction(
        old,
        mu,
        mask,
        rollout_rs=VERL_TRM_RULE,
        rollout_rs_threshold=threshold,
        name="TRM (max token k2)",
    )


def keep_sampling(old: Tensor, mu: Tensor, mask: Tensor, log_mass: Tensor) -> Correction:
    """Keep sampling mask: pi_old on the sampler's support, log pi_old - log S, against mu.

    ``log_mass`` (B, T) is log pi_old(S) of each position's support (0 where the sampler
    truncates nothing). The weight is the ratio that is left, exp(d - log S), a constant like
    the other corrections' weights.
    """
    m, o, u, s = prep(mask, old, mu, log_mass)
    weights = torch.where(m, torch.exp(o - s - u), 0.0)
    note = (
        "Keep sampling mask (DeepSeek-V3.2): the trainer's pi renormalised on the sampler's "
        "support, so both act on the same tokens: log pi - log pi(S), the term -log pi(S) per "
        "token; nothing is dropped."
    )
    config: tuple[tuple[str, Any], ...] = (("keep_sampling_mask", True),)
    zero = torch.zeros_like(m)
    return Correction("deepseek", "keep sampling mask", config, weights, m, zero, zero, note)


def slime_opsm_per_token(
    advantages: Tensor, logp: Tensor, mu: Tensor, mask: Tensor, opsm_delta: float
) -> Tensor:
    """OPSM in slime before PR #1917 / miles PR #1127: ``(advantage < 0) & (seq_kl > delta)``.

    ``advantage`` was the per-token tensor, so each token of a high-KL sequence is rejected by
    its OWN sign. Returns the (B, T) float 0/1 rejection mask (``opsm_mask``), as the bug had it.
    """
    m, adv, lp, u = prep(mask, advantages, logp, mu)
    count = m.sum(-1, keepdim=True).clamp(min=1)
    seq_kl = ((u - lp) * m).sum(-1, keepdim=True) / count
    return ((adv < 0) & (seq_kl > opsm_delta) & m).to(F64)


def trl_kl_config(beta: float, bias_correction: bool) -> dict[str, Any]:
    """TRL's config: k3 KL as a loss term, times the ratio or not (use_bias_correction_kl)."""
    return {"beta": beta, "use_bias_correction_kl": bias_correction}
