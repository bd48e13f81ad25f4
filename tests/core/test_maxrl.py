"""MaxRL (arXiv 2602.02710), roll-viz's own estimator: hand values, loop oracle, gradient."""

import torch

from core.cases import close
from roll_viz.core.pipeline.advantages import ALL_ESTIMATORS, EstimatorParams, maxrl_advantages

F = torch.float64


def _call(scores, lengths, groups, eps=1e-6):
    T = max(lengths)
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths], dtype=F)
    params = EstimatorParams(seq_rewards=torch.tensor(scores, dtype=F), std_eps=eps)
    gids = torch.tensor(groups, dtype=torch.long)
    return maxrl_advantages(torch.zeros_like(mask), mask, gids, params), mask


def _loop(scores, groups, eps=1e-6):
    out = []
    for s, g in zip(scores, groups, strict=True):
        xs = [v for v, h in zip(scores, groups, strict=True) if h == g]
        m = sum(xs) / len(xs)
        out.append((s - m) / (abs(m) + eps))
    return out


def test_maxrl_by_hand():
    # group 0: 1 of 4 right (p = 1/4): right (1 - p) / p = 3, wrong -1
    # group 1: 3 of 4 right (p = 3/4): right (1/4) / (3/4) = 1/3, wrong -1
    # group 2: none right: 0 everywhere (0 / eps)
    scores = [1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    est, _ = _call(scores, [2, 1, 3, 2, 1, 1, 2, 3, 1, 2, 3], groups, eps=1e-12)
    want = [3, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1, 0, 0, 0]
    close(est.advantages[:, 0], want, 1e-9)
    close(est.advantages[2], [-1, -1, -1], 1e-9)  # broadcast to every valid token
    assert est.advantages[1, 1:].abs().sum() == 0  # padding stays 0
    close(est.baseline, [0.25] * 4 + [0.75] * 4 + [0.0] * 3, 1e-15)


def test_maxrl_matches_the_loop_oracle_and_is_registered():
    gen = torch.Generator().manual_seed(3)
    scores = torch.rand(12, generator=gen, dtype=F).round(decimals=1).tolist()
    groups = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]
    est, _ = _call(scores, [3] * 12, groups)
    close(est.advantages[:, 0], _loop(scores, groups), 1e-12)
    assert ALL_ESTIMATORS["maxrl"] is maxrl_advantages


def test_maxrl_gradient_is_mean_over_right_answers_minus_control_variate():
    # (1/N) sum_i A_i grad log pi_i = (1/K) sum_right grad log pi - (1/N) sum_all grad log pi
    scores = [1.0, 0.0, 1.0, 0.0, 0.0]
    est, _ = _call(scores, [1] * 5, [0] * 5, eps=0.0)
    logp = torch.tensor([-0.3, -1.2, -0.8, -2.0, -0.5], dtype=F, requires_grad=True)
    (est.advantages[:, 0] * logp).mean().backward()
    n, k = 5, 2
    want = torch.tensor([1 / k - 1 / n if s else -1 / n for s in scores], dtype=F)
    close(logp.grad, want, 1e-12)


def test_maxrl_singleton_is_zero():
    est, _ = _call([1.0, 0.0, 1.0], [1, 1, 1], [0, 1, 1])
    close(est.advantages[:, 0], [0.0, -0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6)], 1e-12)
