"""The estimators of ``MASKED_OUTPUTS`` hand back exactly what ``apply_mask`` makes of them.

``make_trace`` does not mask such an output again, so each must be a fixed point of
``apply_mask(x, mask)`` with the float mask it was given: +0.0 on padding, no -0.0 anywhere, bit
for bit. Inputs here are built to produce -0.0 (negative-zero rewards and values) and padding
that holds other numbers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from roll_viz.core.ops import apply_mask
from roll_viz.core.pipeline.advantages import ALL_ESTIMATORS, MASKED_OUTPUTS, EstimatorParams


def _inputs(kind: str):
    g = torch.Generator().manual_seed(11)
    B, G, T = 12, 3, 20
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[4] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    if kind == "negzero":
        rewards = torch.full((B, T), -0.0, dtype=torch.float64)
        values = torch.full((B, T), -0.0, dtype=torch.float64)
    else:
        rewards = torch.randn(B, T, generator=g, dtype=torch.float64)
        values = torch.randn(B, T, generator=g, dtype=torch.float64)
    rewards = torch.where(mask > 0, rewards, torch.full_like(rewards, -3.0))  # junk on padding
    params = EstimatorParams(
        gamma=0.9,
        lam=0.8,
        values=values,
        baseline_scores=torch.full((B,), -0.0, dtype=torch.float64),
        std_eps=1e-6,
        logprobs=-torch.rand(B, T, generator=g, dtype=torch.float64),
        sum_pi_squared=torch.rand(B, T, generator=g, dtype=torch.float64),
    )
    return rewards, mask, torch.arange(B) // G, params


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int64)


def test_every_listed_estimator_exists():
    assert set(ALL_ESTIMATORS) >= MASKED_OUTPUTS


@pytest.mark.parametrize("kind", ["random", "negzero"])
@pytest.mark.parametrize("name", sorted(MASKED_OUTPUTS))
def test_outputs_are_fixed_points_of_the_float_mask(name, kind):
    rewards, mask, gids, params = _inputs(kind)
    for carry in (False, True):
        out = ALL_ESTIMATORS[name](rewards, mask, gids, replace(params, carry_through=carry))
        for field in ("advantages", "returns"):
            x = getattr(out, field)
            assert torch.equal(_bits(apply_mask(x, mask)), _bits(x)), (name, field, carry)
