"""The Your run history figure: boxes per step under a mean line and a +-std band."""

from __future__ import annotations

import pandas as pd
import pytest

from roll_viz.views import history_charts
from roll_viz.views.scales import whole_ticks


def test_zero_one_rewards_show_the_accuracy_rise():
    """0/1 rewards, accuracy 0.2 then 0.8: identical boxes, but the mean line rises 0.2 -> 0.8."""
    values = [1, 1] + [0] * 8 + [1] * 8 + [0, 0]
    long = pd.DataFrame({"step": [0] * 10 + [1] * 10, "group": 0, "value": values})
    fig = history_charts.step_distributions(long, "reward")
    names = [t.name for t in fig.data]
    assert names == ["+1 std", "mean +- 1 std", "0", "1", "mean"]
    mean = fig.data[-1]
    assert list(mean.x) == ["0", "1"]
    assert list(mean.y) == pytest.approx([0.2, 0.8])
    assert list(fig.data[0].y) == pytest.approx([0.6, 1.2])  # mean + std (std 0.4 both steps)
    assert list(fig.data[1].y) == pytest.approx([-0.2, 0.4])
    assert fig.data[1].fill == "tonexty"
    assert [t.type for t in fig.data[2:4]] == ["box", "box"]
    assert "mean" in fig.layout.title.text


def test_step_and_m_axes_tick_whole_numbers_only():
    """Two steps drew ticks at -0.5, 0, 0.5, 1, 1.5 (no step 0.5); m = 2..3 drew 2.2, 2.4 ..."""
    assert whole_ticks([0, 1]) == {"dtick": 1.0, "tickformat": "d"}
    assert whole_ticks(list(range(1001)))["dtick"] == 200.0  # a tick every 200 of 1,000 steps
    assert whole_ticks([7])["dtick"] == 1.0
    long = pd.DataFrame({"step": [0, 0, 1, 1], "group": 0, "value": [0.0, 1.0, 1.0, 1.0]})
    assert history_charts.step_distributions(long, "reward").layout.xaxis.dtick == 1
    history = pd.DataFrame(
        {"step": [0, 1], "zero_signal_share": [0.5, 0.0], "zero_signal_groups": [1, 0]}
    )
    assert history_charts.zero_signal_share(history).layout.xaxis.dtick == 1
    table = pd.DataFrame({"method": ["top", "top"], "m": [2, 3], "mean_std_after": [0.0, 1.0]})
    assert history_charts.pods_sweep(table).layout.xaxis.dtick == 1
