"""Teacher as reference: on-policy distillation's per-token signal (ROLL ``use_opd``, SDPO).

On-policy distillation keeps the RL machinery and swaps the reference for a teacher: the same
model with a privileged instruction in its context (the answer, a hint: SDPO's self-distillation,
arXiv 2601.20802) or another model with the same tokenizer. The student samples; the teacher
scores the student's own tokens; the per-token reverse KL(student || teacher), estimated on the
sampled token, becomes the signal.

Conventions follow ROLL's ``compute_advantage`` (``roll/utils/functionals.py``, alibaba/ROLL at
8eb27cc2, and the same in ``roll/pipeline/agentic/utils.py``):

- per teacher ``kld = compute_approx_kl(student_logp, teacher_logp, mask, kl_penalty)`` with
  ROLL's ``kl_penalty`` names: "kl" (default) = log s - log t, "abs" = |log s - log t|,
  "mse" = (log s - log t)^2 / 2, "k3" = exp(log t - log s) - (log t - log s) - 1 clamped to
  [-10, 10]; the student's log-probs are ``old_log_probs`` (recomputed) or ``infer_logprobs``;
- ``total = sum_i opd_kl_coef_i * kld_i`` (``opd_kl_coef`` defaults to 1.0 per teacher);
- pure OPD (``is_pure_opd``: gamma 0, ``adv_estimator: reinforce``, no KL loss):
  ``advantages = -total``;
- mixed OPD (``use_opd``): ``advantages = rl_advantages - total``, with the RL advantages from
  the token-level rewards (``compute_reinforce_return``) before the subtraction;
- then, as for every estimator: optional ``masked_whiten``, ``advantages * mask``, optional clamp
  to ``[-advantage_clip, advantage_clip]``.

With "kl" the per-token advantage is ``coef * (log t - log s)``: positive where the teacher likes
the student's token more than the student did, negative where less.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.core.ops import masked_whiten
from roll_viz.core.pipeline.kl import token_kl

#: ROLL kl_penalty name -> (canonical estimator, clamp of the estimate)
KL_PENALTIES: Mapping[str, tuple[str, float | None]] = {
    "kl": ("k1", None),
    "abs": ("abs", None),
    "mse": ("k2", None),
    "k3": ("k3", 10.0),
}


def opd_token_kl(
    student_logprobs: Tensor,
    teacher_logprobs: Tensor,
    response_mask: Tensor,
    kl_penalty: str = "kl",
) -> Tensor:
    """ROLL's ``compute_approx_kl`` between student and teacher on the sampled tokens.

    Args:
        student_logprobs: (B, T) log s(y_t) of the sampled tokens under the student.
        teacher_logprobs: (B, T) log t(y_t) of the same tokens under the teacher.
        response_mask: (B, T) 1.0 on response tokens.
        kl_penalty: ROLL's name: "kl", "abs", "mse" or "k3".

    Returns:
        (B, T) the estimate of KL(student || teacher), 0 on padding.

    Raises:
        ValueError: an unknown ``kl_penalty`` ("full" needs whole distributions: not here).
    """
    if kl_penalty not in KL_PENALTIES:
        raise ValueError(f"kl_penalty must be one of {tuple(KL_PENALTIES)}, got {kl_penalty!r}")
    estimator, clamp = KL_PENALTIES[kl_penalty]
    return token_kl(
        student_logprobs.to(torch.float64),
        teacher_logprobs.to(torch.float64),
        response_mask.to(torch.float64),
        estimator,  # type: ignore[arg-type]
        clamp=clamp,
    )


@dataclass(frozen=True)
class OPDResult:
    """On-policy distillation's advantages and what they are made of.

    Attributes:
        kl: (B, T) ``sum_i coef_i * kld_i``, the weighted reverse-KL estimate per token.
        advantages: (B, T) the final advantages (after whitening, mask and clip).
        raw_advantages: (B, T) ROLL's ``raw_advantages``: ``-kl`` in pure OPD, the RL
            advantages before the KL is subtracted in mixed OPD.
        mode: "pure" or "mixed".
    """

    kl: Tensor
    advantages: Tensor
    raw_advantages: Tensor
    mode: str


def opd_advantages(
    student_logprobs: Tensor,
    teachers: Mapping[str, tuple[Tensor, float]],
    response_mask: Tensor,
    *,
    kl_penalty: str = "kl",
    rl_advantages: Tensor | None = None,
    whiten_advantages: bool = False,
    advantage_clip: float | None = None,
) -> OPDResult:
    """ROLL's OPD advantages: pure (``is_pure_opd``) or mixed with RL (``use_opd``).

    Args:
        student_logprobs: (B, T) the student's log-probs of its sampled tokens.
        teachers: teacher name -> ((B, T) its log-probs of the same tokens, ``opd_kl_coef``).
        response_mask: (B, T) 1.0 on response tokens.
        kl_penalty: ROLL's ``kl_penalty`` ("kl", "abs", "mse", "k3").
        rl_advantages: (B, T) the RL advantages of the token-level rewards (mixed mode), or None
            (pure mode).
        whiten_advantages: ROLL ``whiten_advantages`` (token-weighted, unbiased, eps 1e-8).
        advantage_clip: ROLL ``advantage_clip`` (None: no clamp).

    Returns:
        OPDResult (float64).

    Raises:
        ValueError: no teacher, a bad ``kl_penalty``, or a non-positive ``advantage_clip``.
    """
    if not teachers:
        raise ValueError("teachers: on-policy distillation needs at least one teacher")
    if advantage_clip is not None and not advantage_clip > 0:
        raise ValueError(f"advantage_clip must be > 0, got {advantage_clip}")
    mask = response_mask.to(torch.float64)
    total = torch.zeros_like(mask)
    for teacher_logprobs, coef in teachers.values():
        total = total + float(coef) * opd_token_kl(
            student_logprobs, teacher_logprobs, mask, kl_penalty
        )
    if rl_advantages is None:
        mode = "pure"
        raw = -total
        advantages = raw
    else:
        mode = "mixed"
        raw = rl_advantages.to(torch.float64)
        advantages = raw - total
    if whiten_advantages and int(mask.sum()) > 1:
        advantages = masked_whiten(advantages, mask, ddof=1, eps=1e-8)
    advantages = advantages * mask
    if advantage_clip is not None:
        advantages = advantages.clamp(-advantage_clip, advantage_clip)
    return OPDResult(kl=total, advantages=advantages, raw_advantages=raw, mode=mode)
