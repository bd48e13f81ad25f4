"""The Your run history figure: boxes per step under a mean line and a +-std band."""

from __future__ import annotations

import pandas as pd
import pytest

from roll_viz.views import history_charts


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
