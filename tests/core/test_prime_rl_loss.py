"""prime-rl's default loss (``prime_default``): hand numbers and a plain-loop oracle.

The oracle transcribes ``default_loss_fn`` of prime-rl (``src/prime_rl/trainer/rl/loss.py`` at
559b447) token by token with ``math``; prime-rl sums each sample's per-token loss and divides by
the batch's loss-token count (``rl_scale``), i.e. a token mean over the batch.
"""

import math

import pytest
import torch

from roll_viz.core.pipeline.dialects.prime_loss import prime_default_loss, prime_spec
from roll_viz.core.pipeline.losses import LossInputs, LossSpec, loss_from_spec

F = torch.float64
MU = [[-0.2, -1.6, -0.9], [-0.1, -2.5, 0.0]]
LP = [[-0.5, -1.0, -0.9], [-0.9, -2.0, 0.0]]
ADV = [[1.0, 1.0, 1.0], [-0.5, -0.5, 0.0]]
MASK = [[1, 1, 1], [1, 1, 0]]
DEFAULTS = (0.2, 0.2, 1.0, 1e-3)  # dppo_mask_low, dppo_mask_high, adv_tau, kl_tau


def _oracle(params):
    low, high, adv_tau, kl_tau = params
    total, count, grads = 0.0, 0, []
    for b in range(2):
        row = []
        for t in range(3):
            if not MASK[b][t]:
                row.append(0.0)
                continue
            lr = LP[b][t] - MU[b][t]
            ratio = math.exp(lr)
            diff = math.exp(LP[b][t]) - math.exp(MU[b][t])
            a = ADV[b][t]
            masked = diff > high if a > 0 else diff < -low
            keep = 0.0 if masked else 1.0
            total += -keep * adv_tau * a * ratio + kl_tau * lr * lr
            row.append(-keep * adv_tau * a * ratio + 2 * kl_tau * lr)
            count += 1
        grads.append(row)
    return total / count, [[g / count for g in row] for row in grads]


def _ours(params):
    lp = torch.tensor(LP, dtype=F, requires_grad=True)
    spec = LossSpec(kind="prime_default", level="token", clamp=None, prime=params)
    modes = {m: ("token-mean", None) for m in ("policy", "kl", "entropy")} | {"value": None}
    inputs = LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(MU, dtype=F),
        advantages=torch.tensor(ADV, dtype=F),
        response_mask=torch.tensor(MASK, dtype=F),
    )
    res = loss_from_spec(
        spec, modes, lambda ctx: {}, framework="toy", config={}, notes=[], inputs=inputs
    )
    (grad,) = torch.autograd.grad(res.total, lp)
    return res, grad


@pytest.mark.parametrize("params", [DEFAULTS, (0.05, 0.3, 2.0, 0.1), (1.0, 1.0, 1.0, 0.0)])
def test_matches_the_plain_loop(params):
    loss, grad = _oracle(params)
    res, auto = _ours(params)
    assert res.total.item() == pytest.approx(loss, abs=1e-14)
    assert auto.tolist() == [pytest.approx(row, abs=1e-14) for row in grad]
    assert res.per_token["grad_coef"].tolist() == [pytest.approx(row, abs=1e-14) for row in grad]


def test_by_hand_at_the_defaults():
    # p - p_mu: row 0: e^-0.5 - e^-0.2 = -0.2122 (A > 0: only the high side masks, kept),
    # e^-1 - e^-1.6 = 0.1660 (kept, <= 0.2), 0 (kept); row 1 (A < 0): e^-0.9 - e^-0.1 = -0.4982
    # < -0.2 -> masked; e^-2 - e^-2.5 = 0.0533 (kept)
    res, _ = _ours(DEFAULTS)
    r = [math.exp(-0.3), math.exp(0.6), 1.0, math.exp(0.5)]
    pg = -(r[0] + r[1] + r[2]) + 0.5 * r[3]
    kl = 1e-3 * (0.09 + 0.36 + 0.0 + 0.64 + 0.25)
    assert res.total.item() == pytest.approx((pg + kl) / 5, abs=1e-14)
    assert res.per_token["clipped_low"].tolist() == [[False] * 3, [True, False, False]]
    assert not res.per_token["clipped_high"].any()


def test_prime_default_loss_on_the_lab_tokens():
    corr, res = prime_default_loss(
        torch.tensor(LP, dtype=F),
        torch.tensor(MU, dtype=F),
        torch.tensor(ADV, dtype=F),
        torch.tensor(MASK, dtype=F),
    )
    loss, grad = _oracle(DEFAULTS)
    assert res.loss == pytest.approx(loss, abs=1e-14)
    assert res.grad.tolist() == [pytest.approx(row, abs=1e-14) for row in grad]
    assert res.denominator == 5
    assert corr.masked.tolist() == [[False] * 3, [True, False, False]]
    assert corr.counted.sum() == 5
    assert dict(corr.config) == {
        "dppo_mask_low": 0.2, "dppo_mask_high": 0.2, "adv_tau": 1.0, "kl_tau": 1e-3,
    }  # fmt: skip
    with pytest.raises(ValueError, match="no knob"):
        prime_spec(dppo_mask=0.1)
    with pytest.raises(ValueError, match=">= 0"):
        prime_spec(kl_tau=-1.0)
