"""The mismatch lab's figures on a synthetic batch: values drawn as computed, tokens escaped."""

import math

import torch

from roll_viz.analysis import mismatch
from roll_viz.views import mismatch_charts as charts
from tests.synthetic import synthetic_rollout


def _lab(rollout, staleness=0.0):
    mask = rollout.response_mask > 0
    old = rollout.logprobs.double()
    gen = torch.Generator().manual_seed(0)
    mu = torch.where(mask, old - 0.05 * torch.randn(old.shape, generator=gen, dtype=torch.float64),
                     0.0)  # fmt: skip
    adv = torch.linspace(-1, 1, old.shape[0], dtype=torch.float64)
    return mismatch.mismatch_lab(old, mu, mask, adv, mismatch.Settings(staleness=staleness))


def test_every_figure_draws_the_lab():
    rollout = synthetic_rollout(tokens=("<b>x</b>", " y"))
    lab = _lab(rollout, staleness=0.1)
    heat = charts.delta_heatmap(lab, rollout)
    z = heat.data[0].z
    b, t = 0, 0
    assert math.isclose(z[b][t], float(lab.delta[b, t]), rel_tol=1e-12)
    assert "&lt;b&gt;x&lt;/b&gt;" in str(heat.data[0].customdata[0][0][0])  # escaped, never HTML
    hist = charts.delta_histogram(lab)
    assert len(hist.data[0].x) == int(lab.mask.sum())
    two = charts.two_factor_figure(lab, rollout)
    assert len(two.data[0].x) == int(lab.mask.sum())
    assert all("<b>x</b>" not in str(c) for c in two.data[0].customdata)
    corr = charts.corrections_figure(lab.table)
    assert len(corr.data[0].y) == len(lab.table)
    # no fixed left margin (the labels size it) and the label-less right panel sits close
    assert corr.layout.margin.l <= 20
    assert corr.layout.yaxis.automargin
    assert corr.layout.xaxis2.domain[0] - corr.layout.xaxis.domain[1] <= 0.06
    without = float(lab.table["loss without"].iloc[0])
    assert f"loss without: {without:.4g}" in [tr.name for tr in corr.data]  # the dashed line
    for i in range(len(lab.corrections)):
        charts.correction_heatmap(lab, i, rollout)
        grad = charts.gradient_figure(lab, i)
        total = sum(len(tr.x) for tr in grad.data[:3])
        assert total == int(lab.mask.sum())
