"""The KL estimators judged by their gradient: value and d/d log pi per token, in both placements.

With x = log pi(y_t) - log pi_ref(y_t) at the sampled token (``kl`` module for the values):

- **as a loss** (verl/ROLL ``use_kl_loss``, OpenRLHF ``use_loss``, TRL ``beta``): the term
  ``beta * k(x)`` is differentiated; its gradient w.r.t. log pi_t is ``beta * k'(x)`` times the
  aggregation weight: k1' = 1, |x|' = sign(x), k2' = x, k3' = 1 - exp(-x). verl's
  straight-through names (``k1+``, ``k3+``, ``abs+``; ``k2+`` is k2) keep the value of the
  estimator and take the gradient of k2: x.
- **in the reward** (verl ``use_kl_in_reward``, ROLL ``add_token_level_kl``, OpenRLHF without
  ``use_loss``): r_t -= beta * k(x_t) is computed under no_grad, a constant w.r.t. the policy; the
  gradient comes only through the policy-gradient term ``-A_t log pi_t``: with REINFORCE
  (gamma = 1, no baseline) the KL's share of d loss / d log pi_t is ``beta * sum_{t' >= t}
  k(x_t')``, the reward-to-go of the estimate. A straight-through "+" changes nothing there.

On policy, in expectation over y ~ pi (``expected_gradients`` on one categorical step, exact):
k1 in the reward and k2 (or any "+") as a loss give grad KL(pi || ref); k1 as a loss gives 0
(E[grad log pi] = 0); k3 as a loss gives grad KL(ref || pi), the reverse KL (the xihuai18
KL-estimator post, verl's ``kl_penalty`` docstring). Pure tensor math, float64, no framework.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask, as_bool, reverse_discounted_cumsum
from roll_viz.core.pipeline.kl import KL_ESTIMATORS

#: k3 * pi / pi_old on-policy (TRL use_bias_correction_kl): value k3, slope k3' + k3 = x
RATIO_K3 = "k3*r"

#: Canonical estimator names, the straight-through variants (verl ``kl_loss_type`` with "+") and
#: k3 times the importance ratio pi / pi_old (TRL ``use_bias_correction_kl``, DeepSeek-V3.2's
#: unbiased estimate), taken on-policy: ratio 1 in value, d ratio / d log pi = 1.
KL_VARIANTS: tuple[str, ...] = ("k1", "abs", "k2", "k3", "k1+", "abs+", "k3+", RATIO_K3)


class ValueSlope(NamedTuple):
    """An estimator's value and its slope d k / d log pi at each token (both (B, T))."""

    value: Tensor
    slope: Tensor


def _base(name: str) -> str:
    if name == RATIO_K3:
        return "k3"
    base = name[:-1] if name.endswith("+") else name
    if base not in KL_ESTIMATORS:
        raise ValueError(f"KL variant must be one of {KL_VARIANTS} (or k2+), got {name!r}")
    return base


def value_and_slope(log_ratio: Tensor, name: str) -> ValueSlope:
    """Value k(x) and slope dk/dx of a KL estimator or its straight-through variant.

    Args:
        log_ratio: (...) x = log pi - log pi_ref at the sampled tokens.
        name: "k1", "abs", "k2", "k3" or one of those with "+" (value of the estimator,
            slope of k2 = x, as verl's ``kl_penalty`` with a "+" suffix), or ``RATIO_K3``
            (k3 times a ratio that is 1 on-policy: value k3, slope k3' + k3, which is x: the
            "no-op" of TRL PR #6503 turns k3's reverse-KL gradient into k2's forward one).

    Returns:
        ValueSlope of the input's shape (no clamps: the frameworks' clamps act only beyond
        |x| of about 2.4 for k3's value, where ``losses`` reproduces them).
    """
    base = _base(name)
    x = log_ratio
    value = KL_ESTIMATORS[base](x)
    if name.endswith("+") or base == "k2":
        slope = x.clone()
    elif base == "k1":
        slope = torch.ones_like(x)
    elif base == "abs":
        slope = torch.sign(x)
    else:  # k3 = exp(-x) - 1 + x
        slope = -torch.expm1(-x)
    if name == RATIO_K3:  # d(k3 * ratio) = k3' * ratio + k3 * d ratio, ratio 1: k3' + k3 (= x)
        slope = slope + value
    return ValueSlope(value, slope)


class KLGradient(NamedTuple):
    """Per token, one estimator in both placements (all (B, T), 0 on padding).

    Attributes:
        log_ratio: x = log pi - log pi_ref.
        value: k(x).
        as_loss: d(beta * sum_t k(x_t)) / d log pi_t = beta * k'(x_t) (token-sum weights).
        in_reward: the KL's share of d(-sum_t A_t log pi_t) / d log pi_t with A_t the
            reward-to-go of r_t = -beta * k(x_t) (REINFORCE, gamma = 1): beta * sum_{t'>=t} k.
    """

    log_ratio: Tensor
    value: Tensor
    as_loss: Tensor
    in_reward: Tensor


def kl_gradient(
    logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor, name: str, beta: float = 1.0
) -> KLGradient:
    """Value and both gradients of one KL estimator on a batch (token-sum aggregation).

    Multiply a column by the loss's aggregation weight W_t (``losses.agg_weights``) to get the
    framework's coefficient; the in-reward column is what REINFORCE's advantage carries (an
    outcome estimator such as GRPO sums the KL into the sequence reward and normalises it with
    the group, so its share is not separable per token).

    Args:
        logprobs: (B, T) policy log-probs of the sampled tokens.
        ref_logprobs: (B, T) reference log-probs of the same tokens.
        response_mask: (B, T) 0/1.
        name: one of ``KL_VARIANTS`` (or "k2+").
        beta: the KL coefficient.

    Returns:
        KLGradient; every tensor exactly 0 on padding.
    """
    mask = as_bool(response_mask)
    x = apply_mask(logprobs.to(torch.float64) - ref_logprobs.to(torch.float64), mask)
    vs = value_and_slope(x, name)
    value = apply_mask(vs.value, mask)
    to_go = apply_mask(reverse_discounted_cumsum(value, 1.0), mask)
    return KLGradient(x, value, apply_mask(beta * vs.slope, mask), beta * to_go)


class ExpectedGradients(NamedTuple):
    """Exact expected gradients w.r.t. the logits of one categorical step (all (V,)).

    Attributes:
        forward_kl: grad KL(pi || ref), by autograd.
        reverse_kl: grad KL(ref || pi), by autograd.
        as_loss: variant -> E_{y~pi}[k'(x_y) grad log pi(y)].
        in_reward: variant -> E_{y~pi}[k(x_y) grad log pi(y)] (k a constant: the score function).
    """

    forward_kl: Tensor
    reverse_kl: Tensor
    as_loss: dict[str, Tensor]
    in_reward: dict[str, Tensor]


def expected_gradients(logits: Tensor, ref_logits: Tensor) -> ExpectedGradients:
    """Each variant's expected gradient on one categorical step, next to the true KL gradients.

    Sums over the whole vocabulary (no sampling): ``E_pi[f(y) grad log pi(y)] = sum_y pi(y)
    f(y) (e_y - pi)`` for logits theta.

    Args:
        logits: (V,) policy logits.
        ref_logits: (V,) reference logits.

    Returns:
        ExpectedGradients.
    """
    theta = logits.detach().to(torch.float64).clone().requires_grad_(True)
    ref_lp = torch.log_softmax(ref_logits.detach().to(torch.float64), -1)
    lp = torch.log_softmax(theta, -1)
    p = lp.exp()
    forward = torch.autograd.grad((p * (lp - ref_lp)).sum(), theta, retain_graph=True)[0]
    reverse = torch.autograd.grad((ref_lp.exp() * (ref_lp - lp)).sum(), theta)[0]
    pd = p.detach()
    x = lp.detach() - ref_lp
    score = torch.eye(pd.numel(), dtype=torch.float64) - pd[None, :]  # row y: grad log pi(y)
    as_loss, in_reward = {}, {}
    for name in KL_VARIANTS:
        vs = value_and_slope(x, name)
        as_loss[name] = (pd * vs.slope) @ score
        in_reward[name] = (pd * vs.value) @ score
    return ExpectedGradients(forward, reverse, as_loss, in_reward)
