"""Figures of the comparison pages: trace types, axis titles, colour scales, numbers on hover."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from roll_viz.analysis import compare, local_global, reward_table, sweep
from roll_viz.views import compare_charts as charts_compare
from tests.synthetic import batch_of, consistent_rollout


def _lg():
    t = reward_table.parse_reward_table(reward_table.default_reward_table())
    return local_global.local_vs_global(t.scores, t.group_ids, t.prompts)


def test_local_global_scatter_one_trace_per_prompt_plus_diagonal():
    lg = _lg()
    fig = charts_compare.local_global_scatter(lg.samples)
    assert [tr.type for tr in fig.data] == ["scatter"] * 3
    assert fig.data[0].name == "local = global"
    assert [tr.name for tr in fig.data[1:]] == ["quantum", "capital of France"]
    np.testing.assert_allclose(fig.data[1].y, lg.local[:3].numpy())
    np.testing.assert_allclose(fig.data[2].x, lg.global_[3:].numpy())
    assert fig.data[1].marker.color != fig.data[2].marker.color
    assert fig.data[1].marker.symbol != fig.data[2].marker.symbol
    assert "global advantage" in fig.layout.xaxis.title.text
    assert "local advantage" in fig.layout.yaxis.title.text
    assert "%{y" in fig.data[1].hovertemplate


def test_group_std_bars_values_and_batch_line():
    lg = _lg()
    fig = charts_compare.group_std_bars(lg.groups)
    assert fig.data[0].type == "bar"
    np.testing.assert_allclose(fig.data[0].y, lg.group_std.numpy())
    assert any("batch std" in (a.text or "") for a in fig.layout.annotations)
    assert fig.layout.yaxis.title.text.startswith("std")


def test_group_std_bars_singleton_is_labelled_not_zero():
    lg = local_global.local_vs_global(
        torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.tensor([0, 1, 1])
    )
    fig = charts_compare.group_std_bars(lg.groups)
    assert fig.data[0].text[0] == "undefined (n=1)"


def test_sensitivity_lines_three_panels_and_current_marker():
    table = pd.DataFrame(
        {
            "lam": [0.0, 0.5, 1.0],
            "spread": [1.0, 2.0, 3.0],
            "sign_flips": [0.2, 0.0, 0.1],
            "agreement": [0.1, 0.5, 0.9],
            "sign_agreement": [0.5, 0.6, 0.7],
        }
    )
    fig = charts_compare.sensitivity_lines(table, "lam", current=0.5)
    assert len(fig.data) == 3
    assert list(fig.data[2].y) == [0.1, 0.5, 0.9]
    assert fig.layout.xaxis.title.text == "lambda (GAE)"
    assert fig.layout.yaxis3.range == (-1.02, 1.02)
    assert len(fig.layout.shapes) == 3


def test_sensitivity_heatmap_scales():
    b = batch_of(consistent_rollout())
    table = sweep.sweep(
        b,
        "roll",
        {"adv_estimator": "gae"},
        "gamma",
        (0.9, 1.0),
        "lam",
        (0.0, 0.5, 1.0),
        compare_config={"adv_estimator": "grpo"},
    )
    spread = charts_compare.sensitivity_heatmap(table, "gamma", "lam", "spread")
    assert spread.data[0].type == "heatmap"
    assert spread.data[0].colorscale[0][1] != "rgb(103,0,31)"  # sequential, not RdBu
    assert spread.data[0].zmin == 0.0
    assert np.asarray(spread.data[0].z).shape == (3, 2)
    corr = charts_compare.sensitivity_heatmap(table, "gamma", "lam", "agreement")
    assert corr.data[0].zmid == 0.0
    assert (corr.data[0].zmin, corr.data[0].zmax) == (-1.0, 1.0)
    assert "agreement" in corr.data[0].colorbar.title.text


def test_frameworks_heatmap_and_bars():
    b = batch_of(consistent_rollout())
    cmp = compare.compare_frameworks(b, {"beta": 0.1, "kl_in_reward": True}, "grpo")
    fws = list(cmp.traces)
    fig = charts_compare.frameworks_heatmap(cmp.samples, fws)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (len(cmp.samples), len(fws))
    np.testing.assert_allclose(z[:, 0], cmp.samples["advantage roll"].to_numpy())
    assert fig.data[0].zmid == 0.0
    assert fig.data[0].zmin == -fig.data[0].zmax
    assert list(fig.data[0].x) == fws
    bars = charts_compare.frameworks_diff_bars(cmp.summary)
    assert [tr.type for tr in bars.data] == ["bar", "bar"]
    assert list(bars.data[0].x) == fws


def test_frameworks_heatmap_names_samples_like_every_page():
    """Rows are p0/s0, p0/s1, ... (text.sample_labels), not "prompt 1, #2"."""
    b = batch_of(consistent_rollout())
    cmp = compare.compare_frameworks(b, {"beta": 0.1, "kl_in_reward": True}, "grpo")
    fig = charts_compare.frameworks_heatmap(cmp.samples, list(cmp.traces))
    labels = list(fig.data[0].y)
    assert labels[:2] == ["p0/s0", "p0/s1"]
    assert not any("#" in label or "prompt" in label for label in labels)


def test_zero_variance_group_says_no_signal_not_a_huge_ratio():
    """Equal rewards: std 0, local A = 0; batch std / 1e-6 (about 5.16e+5x) is not printed."""
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    lg = local_global.local_vs_global(scores, torch.tensor([0, 0, 0, 1, 1, 1]), ("flat", "mixed"))
    assert float(lg.groups["local / global scale"].iloc[0]) > 1e5  # the raw ratio
    labels = charts_compare.scale_labels(lg.groups)
    assert labels[0] == charts_compare.NO_SIGNAL == "no signal (std 0)"
    assert labels[1].endswith("x")
    assert float(labels[1][:-1]) < 10
    fig = charts_compare.group_std_bars(lg.groups)
    assert fig.data[0].customdata[0][2] == "no signal (std 0)"
    assert "e+5" not in str(fig.to_plotly_json()["data"][0]["customdata"])
