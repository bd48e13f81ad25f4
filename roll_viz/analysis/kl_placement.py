"""The KL view: each estimator's value and its gradient per token, in the reward and as a loss.

``kl_view`` runs every estimator (k1, |k1|, k2, k3 and verl's straight-through ``k1+``,
``abs+``, ``k3+``) on a batch's policy and reference log-probs and reports, per token, the
value and d/d log pi in both placements (``core.pipeline.kl_gradient``): as a loss the slope
beta * k'(x) of the token's own term; in the reward, where the frameworks compute the penalty
under no_grad, the share of REINFORCE's -A_t that the penalty put there, beta * (reward-to-go
of k). ``expected_table`` judges each estimator by its expected gradient on one categorical step
(exact sums over the vocabulary): which true gradient it follows, KL(pi || ref), the reverse
KL(ref || pi), or nothing (0). ``through_the_advantage`` does the in-reward case with a
framework's own pipeline and loss: the KL's share of d loss / d log pi is the difference of the
loss gradients with and without the penalty, and it reaches the policy only via the advantages
(``run`` works on detached tensors). ``centred_placement`` is the fourth placement besides in the
reward, in the loss and none: the KL as a centred adjustment of the advantage (Tinker, ART).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.pipeline import dialects, policy_loss, resolve_config, run
from roll_viz.core.pipeline.kl_advantage import centred_kl_advantages
from roll_viz.core.pipeline.kl_gradient import KL_VARIANTS, expected_gradients, kl_gradient
from roll_viz.core.records import Batch

F64 = torch.float64

#: What each variant is, in words (verl's names for the "+" variants).
VARIANT_LABELS: dict[str, str] = {
    "k1": "k1 = x",
    "abs": "|x|",
    "k2": "k2 = x^2 / 2",
    "k3": "k3 = e^-x - 1 + x",
    "k1+": "k1+ (value k1, gradient k2)",
    "abs+": "abs+ (value |x|, gradient k2)",
    "k3+": "k3+ (value k3, gradient k2)",
    "k3*r": "k3 x ratio (TRL bias-corrected KL: value k3 at ratio 1, gradient k3' + k3 = x)",
}


@dataclass(frozen=True)
class KLView:
    """Per-token values and gradients of every KL variant on one batch.

    Attributes:
        tokens: long table, one row per valid token and variant: sample, t, token, log ratio,
            variant, value, "as a loss" (beta k'(x)), "in the reward" (beta * sum_{t'>=t} k).
        summary: one row per variant: mean value per token, mean |gradient| as a loss and in
            the reward, and the batch's total of each.
        beta: the coefficient used.
    """

    tokens: pd.DataFrame
    summary: pd.DataFrame
    beta: float


def kl_view(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    response_mask: Tensor,
    beta: float = 0.1,
    variants: Sequence[str] = KL_VARIANTS,
    tokens: Sequence[Sequence[str]] | None = None,
) -> KLView:
    """Every variant's value and both gradients per token (token-sum weights).

    Args:
        logprobs: (B, T) policy log-probs of the sampled tokens.
        ref_logprobs: (B, T) reference log-probs.
        response_mask: (B, T) 0/1.
        beta: KL coefficient.
        variants: names from ``KL_VARIANTS``.
        tokens: (B,) display strings per valid token, or None.

    Returns:
        KLView.
    """
    mask = torch.as_tensor(response_mask, dtype=F64)
    lp = torch.as_tensor(logprobs, dtype=F64)
    ref = torch.as_tensor(ref_logprobs, dtype=F64)
    rows_b, rows_t = torch.nonzero(mask > 0, as_tuple=True)
    pos = [(b, t) for b, t in zip(rows_b.tolist(), rows_t.tolist(), strict=True)]
    frames, summary = [], []
    for name in variants:
        g = kl_gradient(lp, ref, mask, name, beta)
        value, loss_g, reward_g = (x[rows_b, rows_t] for x in (g.value, g.as_loss, g.in_reward))
        frames.append(
            pd.DataFrame(
                {
                    "sample": rows_b.tolist(),
                    "t": rows_t.tolist(),
                    "token": [_token(tokens, b, t) for b, t in pos],
                    "log ratio": g.log_ratio[rows_b, rows_t].tolist(),
                    "variant": name,
                    "value": value.tolist(),
                    "as a loss": loss_g.tolist(),
                    "in the reward": reward_g.tolist(),
                }
            )
        )
        n = max(len(pos), 1)
        summary.append(
            {
                "variant": name,
                "what": VARIANT_LABELS.get(name, name),
                "mean value": float(value.sum()) / n,
                "mean |grad| as a loss": float(loss_g.abs().sum()) / n,
                "mean |grad| in the reward": float(reward_g.abs().sum()) / n,
                "sum grad as a loss": float(loss_g.sum()),
                "sum grad in the reward": float(reward_g.sum()),
            }
        )
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return KLView(table, pd.DataFrame(summary), float(beta))


def _token(tokens: Sequence[Sequence[str]] | None, b: int, t: int) -> str:
    if tokens is None or b >= len(tokens) or t >= len(tokens[b]):
        return f"t{t}"
    return str(tokens[b][t])


def toy_step(seed: int = 0, vocab: int = 6, drift: float = 0.8) -> tuple[Tensor, Tensor]:
    """(logits, ref_logits) of one categorical step: a reference and a policy drifted from it."""
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(vocab, generator=gen, dtype=F64)
    return ref + drift * torch.randn(vocab, generator=gen, dtype=F64), ref


def _follows(vec: Tensor, forward: Tensor, reverse: Tensor, tol: float) -> str:
    if float(vec.norm()) <= tol:
        return "nothing (0)"
    if float((vec - forward).norm()) <= tol:
        return "grad KL(pi || ref)"
    if float((vec - reverse).norm()) <= tol:
        return "grad KL(ref || pi)"
    return "neither"


def expected_table(
    logits: Tensor, ref_logits: Tensor, variants: Sequence[str] = KL_VARIANTS, tol: float = 1e-10
) -> pd.DataFrame:
    """Each variant's exact expected gradient on one step, against the true KL gradients.

    Args:
        logits: (V,) policy logits.
        ref_logits: (V,) reference logits.
        variants: names from ``KL_VARIANTS``.
        tol: how close (Euclidean) counts as equal.

    Returns:
        One row per variant and placement: variant, placement, "follows", and the distances
        to grad KL(pi || ref) and to grad KL(ref || pi).
    """
    e = expected_gradients(logits, ref_logits)
    rows = []
    for name in variants:
        placements = (("in the reward", e.in_reward[name]), ("as a loss", e.as_loss[name]))
        for placement, vec in placements:
            rows.append(
                {
                    "variant": name,
                    "placement": placement,
                    "follows": _follows(vec, e.forward_kl, e.reverse_kl, tol),
                    "|E grad - grad KL(pi||ref)|": float((vec - e.forward_kl).norm()),
                    "|E grad - grad KL(ref||pi)|": float((vec - e.reverse_kl).norm()),
                }
            )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ThroughAdvantage:
    """A framework's in-reward KL and what it does to the update (all (B, T), 0 on padding).

    Attributes:
        config: the resolved config with the KL in the reward.
        kl: the per-token KL the pipeline subtracted (times beta in the token rewards).
        advantages: with the penalty.
        advantages_without: the same config with beta = 0.
        grad: d loss / d log pi with the penalty (first update, ratio 1).
        share: the penalty's share of it: ``grad`` minus the gradient without the penalty.
    """

    config: dict
    kl: Tensor
    advantages: Tensor
    advantages_without: Tensor
    grad: Tensor
    share: Tensor


def through_the_advantage(
    batch: Batch,
    framework: str,
    config: dict | None = None,
    beta: float = 0.1,
    estimator: str = "k1",
) -> ThroughAdvantage:
    """The in-reward KL's gradient in one framework: through its advantages, nothing else.

    Args:
        batch: needs logprobs and ref_logprobs.
        framework: a dialect that can put the KL in the reward.
        config: its keys (estimator etc.); the KL placement, beta and estimator are set here.
        beta: KL coefficient.
        estimator: canonical k1 / abs / k2 / k3.

    Returns:
        ThroughAdvantage.

    Raises:
        ValueError: the dialect puts the KL only in the loss (TRL), does not name the
            estimator, or rejects the config.
    """
    d = dialects.get(framework)
    if d.KL_IN_LOSS_ONLY or d.KL_ESTIMATOR_KEY is None:
        raise ValueError(f"{framework} has no KL in the reward (its KL is a loss term only)")
    name = d.KL_NAMES.get(estimator)
    if name is None:
        raise ValueError(f"{framework} has no {estimator} estimator")
    base = {**(config or {}), **(d.kl_placement(True, beta) or {})}
    base |= {d.BETA_KEY: beta, d.KL_ESTIMATOR_KEY: name}
    with_kl = resolve_config(framework, base)
    without = resolve_config(framework, {**base, d.BETA_KEY: 0.0})
    traces = [run(batch, framework, c) for c in (with_kl, without)]
    grads = [
        policy_loss(
            framework,
            c,
            logprobs=batch.logprobs,
            old_logprobs=batch.logprobs,
            advantages=t.advantages,
            response_mask=batch.response_mask,
            ref_logprobs=batch.ref_logprobs,
        ).per_token["grad_coef"]
        for c, t in zip((with_kl, without), traces, strict=True)
    ]
    return ThroughAdvantage(
        config=with_kl,
        kl=traces[0].kl,
        advantages=traces[0].advantages,
        advantages_without=traces[1].advantages,
        grad=grads[0],
        share=grads[0] - grads[1],
    )


@dataclass(frozen=True)
class CentredPlacement:
    """The KL as a centred advantage adjustment on a batch (Tinker, OpenPipe ART PR #562).

    Attributes:
        kl: (B, T) x_t = log pi - log pi_ref, 0 on padding.
        mean_kl: the batch's mean x over valid tokens.
        adjustment: (B, T) beta * (mean x - x_t).
        advantages: (B, T) A + adjustment.
        samples: one row per sample: its mean x, mean A before and after, the adjustment's sum.
    """

    kl: Tensor
    mean_kl: float
    adjustment: Tensor
    advantages: Tensor
    samples: pd.DataFrame


def centred_placement(
    advantages: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    response_mask: Tensor,
    beta: float,
    discount: float = 0.0,
) -> CentredPlacement:
    """The fourth placement on a batch: A'_t = A_t + beta * (mean KL - KL_t).

    Args:
        advantages: (B, T) or (B,) the reward's advantages (no KL in them).
        logprobs: (B, T) policy log-probs.
        ref_logprobs: (B, T) reference log-probs.
        response_mask: (B, T) 0/1.
        beta: Tinker's ``kl_penalty_coef``.
        discount: Tinker's ``kl_discount_factor`` (0: none).
    """
    res = centred_kl_advantages(advantages, logprobs, ref_logprobs, response_mask, beta, discount)
    m = torch.as_tensor(response_mask, dtype=F64)
    before = res.advantages - res.adjustment
    count = m.sum(-1).clamp(min=1.0)
    samples = pd.DataFrame(
        {
            "sample": list(range(m.shape[0])),
            "tokens": m.sum(-1).long().tolist(),
            "mean KL x": ((res.kl * m).sum(-1) / count).tolist(),
            "mean A before": ((before * m).sum(-1) / count).tolist(),
            "mean A after": ((res.advantages * m).sum(-1) / count).tolist(),
            "adjustment sum": (res.adjustment * m).sum(-1).tolist(),
        }
    )
    return CentredPlacement(res.kl, res.mean_kl, res.adjustment, res.advantages, samples)
