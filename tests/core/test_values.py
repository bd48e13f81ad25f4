import pytest
import torch

from roll_viz.core.pipeline import run
from roll_viz.core.pipeline.values import probe_values, ridge_fit
from roll_viz.core.records import Batch

F = torch.float64


def _data(B=8, T=6, Fdim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, Fdim, dtype=F, generator=g)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=F)[:Fdim]
    y = x @ w + 0.3
    mask = torch.ones(B, T, dtype=F)
    mask[0, 4:] = 0
    if B > 3:
        mask[3] = 0
    return x, y, mask


def test_recovers_a_linear_target_out_of_fold():
    x, y, mask = _data()
    values = probe_values(x, y, mask, n_folds=4, alpha=1e-6)
    valid = mask > 0
    torch.testing.assert_close(values[valid], y[valid], rtol=0, atol=1e-4)
    assert bool((values[~valid] == 0).all())


def test_a_samples_values_ignore_its_own_targets():
    x, y, mask = _data()
    base = probe_values(x, y, mask, n_folds=4)
    changed = y.clone()
    changed[1] += 100.0  # sample 1 is in fold 1; its own values must not move
    moved = probe_values(x, changed, mask, n_folds=4)
    torch.testing.assert_close(moved[1], base[1], rtol=0, atol=1e-12)
    assert not torch.allclose(moved[2], base[2])  # other folds do learn from sample 1


def test_degenerate_inputs_give_zeros_not_nan():
    x, y, mask = _data(B=1)
    assert bool((probe_values(x, y, mask) == 0).all())
    x, y, mask = _data(B=2)
    mask[1] = 0
    out = probe_values(x, y, mask, n_folds=2)
    assert bool(torch.isfinite(out).all())
    assert bool((out[1] == 0).all())
    with pytest.raises(ValueError, match="alpha"):
        probe_values(x, y, mask, alpha=0.0)


def test_ridge_fit_intercept_unpenalized():
    x = torch.zeros(4, 2, dtype=F)
    w, c = ridge_fit(x, torch.full((4,), 3.0, dtype=F), alpha=10.0)
    assert c.item() == pytest.approx(3.0)
    assert bool((w == 0).all())


def test_probe_feeds_gae():
    x, y, mask = _data()
    values = probe_values(x, y, mask)
    batch = Batch(
        scores=torch.arange(8, dtype=F),
        response_mask=mask,
        group_ids=torch.arange(8) // 4,
        values=values,
    )
    trace = run(batch, "roll", {"adv_estimator": "gae"})
    assert bool(torch.isfinite(trace.advantages).all())
