"""The policy term of each loss kind: value, closed-form gradient, clip masks and metric pieces.

``POLICY_TERMS[kind]`` is one function per kind (verl's ``core_algos`` registry shape), each
taking the batch as ``PolicyInputs`` and returning a ``TermResult``: the per-token loss (its
value, differentiable in ``logprobs`` through autograd), its closed-form derivative next to it
(``dl_dlogp``, or ``dl_dr`` for a loss written in the importance ratio r, which
``losses.loss_from_spec`` chains through the ratio's level), the clip masks and the kind's own
per-token pieces the dialects' metrics read (``extra``). Keeping value and gradient in one
function is what lets ``tests/core/test_policy_terms.py`` check every kind against autograd: a
kind added here is in that test's parametrisation.

Dimension letters: B sequences, T response tokens. Float64 in and out; nothing is modified in
place. Which framework runs which kind (and with which parameters) is each dialect's table; the
formulas and their sources are in ``losses`` (module docstring) and ``loss_variants``.

What roll-viz simplifies: as ``losses`` (one process, one micro-batch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from roll_viz.core.pipeline import loss_variants as variants
from roll_viz.core.pipeline.loss_spec import LossSpec

F64 = torch.float64


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy term reads (all (B, T) float64, 0 on padding unless said otherwise).

    Attributes:
        spec: the dialect's ``LossSpec`` (the kind's parameters).
        lp: current log-probs, differentiable.
        old: the ratio's denominator log-probs (constants).
        adv: advantages (constants).
        mask: bool policy-term mask; ``m`` the same as float.
        m: float 0/1 policy-term mask.
        d: ``lp.detach() - old``.
        ratio: the importance ratio at the spec's level (differentiable); ``r`` detached.
        r: ``ratio.detach()``.
        scores: (B,) response scores, or None.
        sampler_w: the sampler's IS ratio ((B, T) or (B, 1)), or None.
    """

    spec: LossSpec
    lp: Tensor
    old: Tensor
    adv: Tensor
    mask: Tensor
    m: Tensor
    d: Tensor
    ratio: Tensor
    r: Tensor
    scores: Tensor | None = None
    sampler_w: Tensor | None = None


@dataclass(frozen=True)
class SequenceLoss:
    """A loss defined per sequence (GMPO): its scalar, gradient and the weights shown per token."""

    policy: Tensor  # () the policy term, mean over all rows
    coef: Tensor  # (B, T) d policy / d logp
    weights: Tensor  # (B, T) weight of each token's share, 1 / (L_i B)
    rows: Tensor  # (B, 1) each row's share of ``policy`` (differentiable)


@dataclass(frozen=True)
class TermResult:
    """One kind's policy term on one batch (all (B, T); masks bool).

    Attributes:
        pg: per-token loss (differentiable); aggregated by the dialect's weights.
        dl_dlogp: d pg / d logp in closed form, or None when ``dl_dr`` is given.
        dl_dr: d pg / d ratio (the loss chains it through the ratio's level), or None.
        clipped_high: the upper clip bound replaced the ratio (or capped the weight).
        clipped_low: the lower clip bound did.
        dual: the dual clip (or the delta cap) capped the loss.
        ratio_shown: the ratio the per-token view shows (None: the ratio the loss used).
        extra: kind-specific per-token pieces for the metrics (names ending in ``_unit`` are
            kept for the metrics only).
        notes: conventions applied, appended to the loss's notes.
        sequence: set by a sequence-level loss (its own scalar and weights), else None.
        clip_masks: names in ``extra`` of further bool clip masks (beside the three above).
    """

    pg: Tensor
    dl_dlogp: Tensor | None = None
    dl_dr: Tensor | None = None
    clipped_high: Tensor | None = None
    clipped_low: Tensor | None = None
    dual: Tensor | None = None
    ratio_shown: Tensor | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    sequence: SequenceLoss | None = None
    clip_masks: tuple[str, ...] = ()


@dataclass(frozen=True)
class PolicyTerm:
    """A registered kind: its function and what else the loss does around it.

    Attributes:
        loss: the term function.
        reads: extra inputs the kind reads beyond the log-probs and advantages ("scores").
        takes_is_correction: the train/rollout IS correction (``LossSpec.is_correction``)
            multiplies this kind's per-token loss (the PPO clip at token level).
        own_sampler_weights: the kind folds the sampler's IS ratio into its own weight (VESPO's
            phi), so the loss does not multiply it in again.
        outside: a regulariser on tokens outside the loss mask (``LossSpec.unmasked_token_sum``):
            ``(d, weights, spec) -> (per-token value, weighted sum, weighted d / d logp, note)``,
            or None.
    """

    loss: Callable[[PolicyInputs], TermResult]
    reads: frozenset[str] = frozenset()
    takes_is_correction: bool = False
    own_sampler_weights: bool = False
    outside: Callable[[Tensor, Tensor, LossSpec], tuple] | None = None


def _f64(x: float) -> Tensor:
    return torch.tensor(x, dtype=F64)


def _none(mask: Tensor) -> Tensor:
    return torch.zeros_like(mask)


def _exp_d(x: PolicyInputs) -> Tensor:
    return torch.where(x.mask, torch.exp(x.d), 0.0)


# -------------------------------------------------------------------------- the PPO clip


def ppo_token_loss(
    ratio: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    delta: float | None = None,
) -> Tensor:
    """PPO clipped surrogate per token, ``-min(r1 A, clip(r, 1-eps_low, 1+eps_high) A)``.

    ``r1 = min(r, delta)`` (TRL's two-sided cap) or r. With ``dual_clip`` c, tokens with A<0
    take ``min(loss, -c A)`` (verl always, c = 3; ROLL c = 1 + 2 pg_clip; OpenRLHF optional).

    Args:
        ratio: (B, T) importance ratio (differentiable).
        advantages: (B, T) advantages.
        eps_low: lower clip epsilon.
        eps_high: upper clip epsilon.
        dual_clip: dual-clip constant c > 1, or None.
        delta: TRL delta cap, or None.

    Returns:
        (B, T) per-token loss.
    """
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    r1 = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(r1 * advantages, clipped * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def ppo_dr(r: Tensor, adv: Tensor, spec: LossSpec, mask: Tensor):
    """Closed-form d(ppo_token_loss)/dr (ties split like torch.minimum) and the clip masks.

    Returns:
        ((B, T) d loss / dr, clipped_high, clipped_low, dual): the masks are bool (B, T).
    """
    lo, hi = 1.0 - spec.eps_low, 1.0 + spec.eps_high
    clipped = r.clamp(lo, hi)
    r1 = r if spec.delta is None else r.clamp(max=spec.delta)
    a1, a2 = r1 * adv, clipped * adv
    d1 = -adv * (r <= spec.delta).to(F64) if spec.delta is not None else -adv
    d2 = -adv * ((r >= lo) & (r <= hi)).to(F64)
    dl = torch.where(a1 < a2, d1, torch.where(a2 < a1, d2, 0.5 * (d1 + d2)))
    dual = torch.zeros_like(mask)
    if spec.dual_clip is not None:
        loss0 = -torch.minimum(a1, a2)
        cap = -spec.dual_clip * adv
        capped = torch.where(loss0 < cap, dl, torch.where(loss0 == cap, 0.5 * dl, 0.0))
        dl = torch.where(adv < 0, capped, dl)
        dual = (adv < 0) & (loss0 > cap)
    if spec.delta is not None:
        dual = (adv < 0) & (r > spec.delta)
    clipped_high = (adv > 0) & (r > hi)
    clipped_low = (adv < 0) & (r < lo)
    return dl, clipped_high, clipped_low, dual


# ------------------------------------------------------------------------------ the terms


def ppo(x: PolicyInputs) -> TermResult:
    """PPO clip with the dual clip / delta cap: ``-min(r1 A, clip(r) A)``; d/dr closed form."""
    s = x.spec
    pg = ppo_token_loss(x.ratio, x.adv, s.eps_low, s.eps_high, s.dual_clip, s.delta)
    dl_dr, high, low, dual = ppo_dr(x.r, x.adv, s, x.mask)
    return TermResult(pg, dl_dr=dl_dr, clipped_high=high, clipped_low=low, dual=dual)


def clip_cov(x: PolicyInputs) -> TermResult:
    """PPO clip with the PG of a few high-covariance unclipped tokens zeroed (Clip-Cov)."""
    s = x.spec
    base = ppo(x)
    corr = variants.clip_cov_keep(
        x.r, x.adv, x.lp.detach(), x.mask, s.eps_low, s.eps_high, s.clip_cov
    )
    return replace(
        base,
        pg=base.pg * corr,
        dl_dr=base.dl_dr * corr,
        extra={"clip_cov_zeroed": corr == 0},
        clip_masks=("clip_cov_zeroed",),
    )


def pg(x: PolicyInputs) -> TermResult:
    """Vanilla policy gradient ``-A logp`` (no ratio, no clip); d/dlogp = -A."""
    return TermResult(-x.adv * x.lp, dl_dlogp=-x.adv, ratio_shown=_exp_d(x))


def cispo(x: PolicyInputs) -> TermResult:
    """CISPO / TIS ``-sg(clip(r, lo, hi)) A logp`` (lo None: no lower bound); gradient kept.

    With ``unified_mask`` the tokens the PPO clip would clip get weight 0.
    """
    s, r = x.spec, x.r
    low = 0.0 if s.cispo_low is None else s.cispo_low
    weight = r.clamp(min=s.cispo_low, max=s.cispo_high)  # no lower bound when cispo_low is None
    keep, notes = torch.ones_like(r), ()
    if s.unified_mask:
        killed = ((x.adv > 0) & (r > s.cispo_high)) | ((x.adv < 0) & (r < low))
        keep = (~killed).to(F64)
        notes = ("cispo_use_unified_mask: PPO-clipped tokens get zero weight",)
    high_mask = (r > s.cispo_high) & x.mask
    low_mask = (r < s.cispo_low) & x.mask if s.cispo_low is not None else _none(x.mask)
    return TermResult(
        -weight * x.adv * x.lp * keep,
        dl_dlogp=-weight * x.adv * keep,
        clipped_high=high_mask,
        clipped_low=low_mask,
        notes=notes,
    )


def sapo(x: PolicyInputs) -> TermResult:
    """SAPO soft gate ``-sigmoid(tau (r-1)) 4/tau A``, tau by the sign of A; d/dr closed form."""
    s = x.spec
    tau = torch.where(x.adv > 0, _f64(s.tau_pos), _f64(s.tau_neg))  # float64, not float32
    sig = torch.sigmoid(tau * (x.r - 1.0))
    return TermResult(
        -torch.sigmoid(tau * (x.ratio - 1.0)) * 4.0 / tau * x.adv,
        dl_dr=-x.adv * 4.0 * sig * (1.0 - sig),
    )


def _dppo(x: PolicyInputs, divergence: str) -> TermResult:
    s = x.spec
    loss, dl, valid = variants.dppo(
        x.lp, x.old, x.adv, x.r, divergence, s.eps_low, s.eps_high, s.trunc_c
    )
    return TermResult(
        loss,
        dl_dlogp=dl,
        clipped_high=(~valid) & (x.adv > 0) & x.mask,
        clipped_low=(~valid) & (x.adv <= 0) & x.mask,
        extra={"valid": valid & x.mask},
    )


def dppo_tv(x: PolicyInputs) -> TermResult:
    """DPPO-Binary-TV: ``-A sg(min(r, c)) logp`` inside a trust region on p - p_old."""
    return _dppo(x, "tv")


def dppo_kl(x: PolicyInputs) -> TermResult:
    """DPPO-Binary-KL: ``-A sg(min(r, c)) logp`` inside a trust region on binary KL."""
    return _dppo(x, "kl")


def topr(x: PolicyInputs) -> TermResult:
    """TOPR: ``-A logp`` on rows with a positive score, ``-sg(clip(r, 0, 1)) A logp`` on others.

    Raises:
        ValueError: no scores (the rows are split by the score's sign).
    """
    if x.scores is None:
        raise ValueError("scores: needed for pg_variant topr (it splits rows by score sign)")
    positive = (torch.as_tensor(x.scores).to(F64) > 0)[:, None].expand_as(x.r)
    w_pos, w_neg = x.spec.topr_weights
    weight = torch.where(positive, w_pos, w_neg * x.r.clamp(0.0, 1.0))
    return TermResult(
        -weight * x.adv * x.lp,
        dl_dlogp=-weight * x.adv,
        clipped_high=(~positive) & (x.r > 1.0) & x.mask,
        extra={
            "topr_positive": positive & x.mask,
            "topr_positive_unit": positive[:, :1],  # (B, 1), empty rows included
        },
    )


def kimi(x: PolicyInputs) -> TermResult:
    """Kimi 1.5 / DRO: ``-A logp + tau/2 (logp - old)^2``; d/dlogp = -A + tau d."""
    tau = x.spec.kimi_tau
    return TermResult(
        -x.adv * x.lp + 0.5 * tau * (x.lp - x.old) ** 2,
        dl_dlogp=-x.adv + tau * x.d,
        ratio_shown=_exp_d(x),
    )


def kimi_outside(d: Tensor, weights: Tensor, spec: LossSpec) -> tuple:
    """The Kimi regulariser ``tau/2 d^2`` on tokens outside the loss mask, under ``weights``.

    ROLL's token-mean ``agg_loss`` sums ``loss_mat`` without the mask, so the regulariser of the
    tokens its sample-level mask dropped still counts (``LossSpec.unmasked_token_sum``).

    Returns:
        ((B, T) regulariser, () weighted sum, (B, T) its d / d logp, note).
    """
    reg = 0.5 * spec.kimi_tau * d**2
    note = (
        "ROLL token-mean sums loss_mat without the mask: kimi15's tau/2 d^2 on the "
        f"{int((weights > 0).sum())} tokens of dropped samples adds to the loss, divided by the "
        "final mask's token count"
    )
    return reg, (weights * reg).sum(), weights * spec.kimi_tau * d.detach(), note


def vespo(x: PolicyInputs) -> TermResult:
    """VESPO ``-phi(w) A logp`` with phi of the sequence ratio (and the sampler's IS ratio).

    Raises:
        ValueError: a sequence-level sampler IS mode (VESPO takes token_truncate or token_mask).
    """
    s = x.spec
    if x.sampler_w is not None and s.sampler_is[0].startswith("sequence"):
        raise ValueError("vllm_importance_sampling_mode: VESPO takes token_truncate or token_mask")
    phi = variants.vespo_phi(x.d, x.adv, x.m, s.vespo, x.sampler_w)
    return TermResult(-phi * x.adv * x.lp, dl_dlogp=-phi * x.adv, extra={"phi": phi})


def kl_cov(x: PolicyInputs) -> TermResult:
    """KL-Cov: ``-A r`` (no clip) plus ``coef |d|`` on the top-covariance tokens."""
    s = x.spec
    chosen = variants.kl_cov_tokens(x.adv, x.lp.detach(), x.mask, s.kl_cov_ratio)
    return TermResult(
        -x.adv * x.ratio + s.kl_cov_coef * (x.lp - x.old).abs() * chosen,
        dl_dlogp=-x.adv * x.r + s.kl_cov_coef * torch.sign(x.d) * chosen,
        extra={"kl_cov_chosen": chosen > 0},
    )


def geo_mean(x: PolicyInputs) -> TermResult:
    """GMPO: a sequence-level geometric-mean ratio, ``-mean_t(A) ratio_i``, mean over all rows."""
    s = x.spec
    policy, loss, pieces, clipped = variants.geo_mean(
        x.lp, x.old, x.adv, x.m, s.eps_low, s.eps_high
    )
    return TermResult(
        loss,
        clipped_high=clipped & (x.adv > 0),
        clipped_low=clipped & (x.adv < 0),
        ratio_shown=torch.where(x.mask, torch.exp(pieces["log_ratio"]), 0.0),
        sequence=SequenceLoss(policy, pieces["coef"], pieces["weights"], pieces["rows"]),
    )


def prime_default(x: PolicyInputs) -> TermResult:
    """prime-rl's default loss: a DPPO mask on p - p_mu, ``-A r`` and ``kl_tau d^2`` to mu.

    prime-rl ``default_loss_fn`` (``src/prime_rl/trainer/rl/loss.py`` at 559b447): with the
    ratio r = pi / mu (``old`` holds mu: prime-rl keeps no pi_old) and d = log r, a token with
    A > 0 is masked when p - p_mu > ``dppo_mask_high``, any other when p - p_mu <
    -``dppo_mask_low``; the loss is ``-keep adv_tau A r + kl_tau d^2`` (Kimi-K2.5's squared
    log-ratio to the INFERENCE policy, on every token). d/dlogp = ``-keep adv_tau A r + 2
    kl_tau d``. Its docs write the policy term with ``min(r, delta)``; the code applies no clamp
    and has no delta knob, so none is applied here.
    """
    low, high, adv_tau, kl_tau = x.spec.prime
    diff = torch.exp(x.lp.detach()) - torch.exp(x.old)
    masked = torch.where(x.adv > 0, diff > high, diff < -low) & x.mask
    keep = (~masked).to(F64)
    d = x.lp - x.old
    return TermResult(
        -keep * adv_tau * x.adv * x.ratio + kl_tau * d * d,
        dl_dlogp=-keep * adv_tau * x.adv * x.r + 2.0 * kl_tau * x.d,
        clipped_high=masked & (x.adv > 0),
        clipped_low=masked & (x.adv < 0),
        ratio_shown=_exp_d(x),
        extra={"valid": ~masked & x.mask},
    )


#: kind -> its policy term. Each dialect maps its own loss names to these kinds in one table.
POLICY_TERMS: dict[str, PolicyTerm] = {
    "ppo": PolicyTerm(ppo, takes_is_correction=True),
    "clip_cov": PolicyTerm(clip_cov),
    "pg": PolicyTerm(pg),
    "cispo": PolicyTerm(cispo),
    "sapo": PolicyTerm(sapo),
    "dppo_tv": PolicyTerm(dppo_tv),
    "dppo_kl": PolicyTerm(dppo_kl),
    "topr": PolicyTerm(topr, reads=frozenset({"scores"})),
    "kimi": PolicyTerm(kimi, outside=kimi_outside),
    "vespo": PolicyTerm(vespo, own_sampler_weights=True),
    "kl_cov": PolicyTerm(kl_cov),
    "geo_mean": PolicyTerm(geo_mean),
    "prime_default": PolicyTerm(prime_default),
}


def policy_term(kind: str) -> PolicyTerm:
    """The registered term of ``kind``.

    Raises:
        ValueError: an unknown kind (the message lists the registered ones).
    """
    if kind not in POLICY_TERMS:
        raise ValueError(f"loss kind must be one of {tuple(POLICY_TERMS)}, got {kind!r}")
    return POLICY_TERMS[kind]
