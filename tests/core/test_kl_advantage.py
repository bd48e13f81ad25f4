"""The KL as a centred advantage adjustment (Tinker incorporate_kl_penalty, ART PR #562)."""

import math

import pytest
import torch

from roll_viz.core.pipeline.kl_advantage import centred_kl_advantages

F = torch.float64
LP = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.9, 0.0]], dtype=F)
REF = torch.tensor([[-1.2, -0.5, -1.0], [-0.6, -1.0, 0.0]], dtype=F)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=F)
ADV = torch.tensor([0.5, -0.5], dtype=F)


def _oracle(coef, discount):
    """Tinker's loop: the batch mean of the masked diffs, then coef * mask * (mean - diff)."""
    diffs = [
        [(LP[b, t] - REF[b, t]).item() * MASK[b, t].item() for t in range(3)] for b in range(2)
    ]
    mean = sum(map(sum, diffs)) / MASK.sum().item()
    out = []
    for b in range(2):
        kl_adv = [coef * MASK[b, t].item() * (mean - diffs[b][t]) for t in range(3)]
        if discount > 0:  # discounted_future_sum_vectorized
            running, summed = 0.0, [0.0] * 3
            for t in reversed(range(3)):
                running = kl_adv[t] + discount * running
                summed[t] = running
            kl_adv = summed
        out.append([ADV[b].item() + kl_adv[t] if MASK[b, t] else ADV[b].item() for t in range(3)])
    return mean, out


def test_by_hand():
    # x = 0.2, 0, -1.0, 0.3, 0.1 -> mean -0.4 / 5 = -0.08
    res = centred_kl_advantages(ADV, LP, REF, MASK, coef=0.5)
    assert res.mean_kl == pytest.approx(-0.08, abs=1e-15)
    expected = [
        [0.5 * (-0.08 - 0.2), 0.5 * -0.08, 0.5 * (-0.08 + 1.0)],
        [0.5 * (-0.38), 0.5 * -0.18, 0.0],
    ]
    assert res.adjustment.tolist() == [pytest.approx(r, abs=1e-15) for r in expected]
    # zero-mean across tokens: the total push is unchanged, moved from drifted tokens to others
    assert float(res.adjustment.sum()) == pytest.approx(0.0, abs=1e-15)
    # the most drifted token (x = 0.3) loses the most; the one below the reference (-1.0) gains
    assert res.adjustment[1, 0] < 0 < res.adjustment[0, 2]
    assert res.advantages[1, 2] == -0.5  # padding keeps its value


@pytest.mark.parametrize(("coef", "discount"), [(0.5, 0.0), (0.1, 0.9), (2.0, 1.0), (0.0, 0.0)])
def test_matches_the_plain_loop(coef, discount):
    mean, expected = _oracle(coef, discount)
    res = centred_kl_advantages(ADV, LP, REF, MASK, coef, discount)
    assert res.mean_kl == pytest.approx(mean, abs=1e-15)
    assert res.advantages.tolist() == [pytest.approx(r, abs=1e-14) for r in expected]


def test_bad_inputs():
    with pytest.raises(ValueError, match="coef"):
        centred_kl_advantages(ADV, LP, REF, MASK, coef=-1.0)
    with pytest.raises(ValueError, match="discount"):
        centred_kl_advantages(ADV, LP, REF, MASK, coef=0.1, discount=1.5)
    bad = REF.clone()
    bad[0, 0] = -math.inf
    with pytest.raises(ValueError, match="finite"):
        centred_kl_advantages(ADV, LP, bad, MASK, coef=0.1)
    bad[0, 0], bad[1, 2] = -1.2, -math.inf  # padding may hold anything
    assert centred_kl_advantages(ADV, LP, bad, MASK, coef=0.1).advantages.isfinite().all()
