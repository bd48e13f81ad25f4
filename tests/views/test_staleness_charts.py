"""The async figures: three columns and three ratios per token, escaped tokens, the lengths."""

import torch

from roll_viz.analysis import staleness
from roll_viz.views import staleness_charts as charts

MU = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
OLD = torch.tensor([[-1.0, -1.9, -0.5]], dtype=torch.float64)
THETA = torch.tensor([[-0.5, -1.9, -1.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 0]]).bool()


def test_three_columns_figure_draws_each_column_and_ratio_with_escaped_tokens():
    three = staleness.three_policies(MU, OLD, THETA, torch.tensor([1.0]), MASK)
    fig = charts.three_columns_figure(three, 0, ("<b>x", " y", "z"), eps=0.2)
    assert len(fig.data) == 6
    assert list(fig.data[0].x) == ["0: &lt;b&gt;x", "1: ·y"]  # escaped, the space made visible
    assert list(fig.data[2].y) == [-0.5, -1.9]  # pi_theta, valid tokens only
    assert list(fig.data[4].y) == [1.0, 1.0]  # pi_old := pi_theta: ratio 1
    band = fig.layout.shapes[0]
    assert (band.y0, band.y1) == (0.8, 1.2)


def test_lengths_figure_counts_the_data_and_what_discard_trains():
    attempts = [[10], [30], [50, 20], [60, 70]]
    discard, pace = staleness.discard_vs_pace(attempts, 16, 1)
    fig = charts.lengths_figure([10, 30, 50, 60], discard, pace, "group")
    assert [len(t.x) for t in fig.data] == [4, 3]
    assert "(3)" in fig.data[1].name
    assert "longest answer" in fig.layout.title.text
