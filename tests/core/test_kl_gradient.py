"""KL estimators judged by their gradient: slopes by hand, autograd, and the exact expectations."""

import math

import pytest
import torch

from core.cases import close
from roll_viz.core.pipeline import dialects, policy_loss
from roll_viz.core.pipeline.kl_gradient import (
    KL_VARIANTS,
    RATIO_K3,
    expected_gradients,
    kl_gradient,
    value_and_slope,
)

F = torch.float64


def test_slopes_by_hand():
    x = torch.tensor([0.5, -0.2], dtype=F)
    close(value_and_slope(x, "k1").slope, [1.0, 1.0], 0)
    close(value_and_slope(x, "abs").slope, [1.0, -1.0], 0)
    close(value_and_slope(x, "k2").slope, [0.5, -0.2], 0)
    close(value_and_slope(x, "k3").slope, [1 - math.exp(-0.5), 1 - math.exp(0.2)], 1e-15)
    k3p = value_and_slope(x, "k3+")
    close(k3p.value, [math.exp(-0.5) - 1 + 0.5, math.exp(0.2) - 1 - 0.2], 1e-15)
    close(k3p.slope, [0.5, -0.2], 0)  # value of k3, gradient of k2
    # k3 x ratio at ratio 1 (TRL PR #6503): k3' + k3 = (1 - e^-x) + (e^-x - 1 + x) = x
    k3r = value_and_slope(x, RATIO_K3)
    close(k3r.value, k3p.value, 0)
    close(k3r.slope, [0.5, -0.2], 1e-15)
    with pytest.raises(ValueError, match="KL variant"):
        value_and_slope(x, "k4")


@pytest.mark.parametrize("name", KL_VARIANTS)
def test_slope_is_autograd_of_the_straight_through_term(name):
    x = torch.tensor([0.7, -0.4, 0.05, -1.3], dtype=F, requires_grad=True)
    base = "k3" if name == RATIO_K3 else name.rstrip("+")
    value = value_and_slope(x, base).value
    if name.endswith("+"):  # verl kl_penalty: k2 - sg(k2) + sg(k)
        k2 = 0.5 * x * x
        value = k2 - k2.detach() + value.detach()
    if name == RATIO_K3:  # TRL: per_token_kl * exp(logp - sg(logp)) (the ratio on-policy)
        value = value * torch.exp(x - x.detach())
    value.sum().backward()
    vs = value_and_slope(x.detach(), name)
    close(vs.slope, x.grad, 1e-15)
    close(vs.value, value.detach(), 1e-15)


def _batch():
    gen = torch.Generator().manual_seed(0)
    lp = -1.0 + 0.4 * torch.randn(3, 4, generator=gen, dtype=F)
    ref = lp + 0.3 * torch.randn(3, 4, generator=gen, dtype=F)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=F)
    return lp, ref, mask


@pytest.mark.parametrize("name", ["k1", "k2", "k3", "k3+"])
def test_in_reward_gradient_flows_through_the_advantage_only(name):
    lp, ref, mask = _batch()
    beta = 0.1
    out = kl_gradient(lp, ref, mask, name, beta)
    # REINFORCE with the KL in the reward, computed under no_grad as the frameworks do
    logp = lp.clone().requires_grad_(True)
    with torch.no_grad():
        r = -beta * value_and_slope(logp - ref, name).value * mask
    adv = torch.zeros_like(r)
    for b in range(r.shape[0]):  # plain loop: reward-to-go over valid tokens
        running = 0.0
        for t in reversed(range(r.shape[1])):
            if mask[b, t]:
                running += float(r[b, t])
                adv[b, t] = running
    (-(adv * logp * mask).sum()).backward()
    close(out.in_reward, logp.grad, 1e-14)
    # and the loss placement: d(beta * sum k) / d logp
    logp2 = lp.clone().requires_grad_(True)
    value = value_and_slope(logp2 - ref, name.rstrip("+")).value
    if name.endswith("+"):
        k2 = 0.5 * (logp2 - ref) ** 2
        value = k2 - k2.detach() + value.detach()
    (beta * (value * mask).sum()).backward()
    close(out.as_loss, logp2.grad, 1e-14)
    assert out.value[1, 2:].abs().sum() == 0
    assert out.in_reward[1, 2:].abs().sum() == 0


def test_as_loss_column_matches_verl_kl_loss_grad_coef():
    lp, ref, mask = _batch()
    cfg = {"use_kl_loss": True, "kl_loss_coef": 0.2, "kl_loss_type": "k3+"}
    cfg["loss_agg_mode"] = "token-sum"
    res = policy_loss(
        "verl",
        cfg,
        logprobs=lp,
        old_logprobs=lp,
        advantages=torch.zeros_like(lp),
        response_mask=mask,
        ref_logprobs=ref,
    )
    out = kl_gradient(lp, ref, mask, "k3+", 0.2)
    close(res.per_token["grad_coef"], out.as_loss, 1e-14)
    assert dialects.canonical_kl("verl", "low_var_kl") == "k3"


def test_expected_gradients_identities():
    logits = torch.tensor([0.3, -1.0, 0.5, 0.0, 1.2], dtype=F)
    ref = torch.tensor([0.0, 0.2, -0.4, 1.0, 0.3], dtype=F)
    e = expected_gradients(logits, ref)
    close(e.in_reward["k1"], e.forward_kl, 1e-14)  # k1 in the reward: grad KL(pi || ref)
    for name in ("k2", "k1+", "k3+", "abs+"):  # k2 (or any "+") as a loss: the same
        close(e.as_loss[name], e.forward_kl, 1e-14)
    close(e.as_loss["k1"], torch.zeros(5, dtype=F), 1e-15)  # k1 as a loss: 0 in expectation
    close(e.as_loss["k3"], e.reverse_kl, 1e-14)  # k3 as a loss: grad KL(ref || pi)
    assert (e.as_loss["k3"] - e.forward_kl).abs().max() > 1e-3
    assert (e.in_reward["k3"] - e.forward_kl).abs().max() > 1e-3
    # "+" in the reward changes nothing: the reward is a constant
    close(e.in_reward["k3+"], e.in_reward["k3"], 0)
