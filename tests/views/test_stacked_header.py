"""``scales.stacked_header``: the title, a horizontal legend and the plot one above the other.

Hand numbers: a figure 450 px tall (Plotly's default), a two-line title at the default 15 px
(12 + 3), a horizontal legend, a 1 x 3 grid's subplot titles (16 px: make_subplots' own size).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.views import scales


def _figure() -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=["a", "b", "c"])
    for col, name in enumerate(("first", "second", "third"), start=1):
        fig.add_trace(go.Scatter(x=[0, 1], y=[1, 2], name=name), row=1, col=col)
    fig.update_layout(title="Top line<br>under it", legend={"orientation": "h", "y": -0.3})
    return fig


def test_the_changes_by_hand():
    fig = _figure()
    patch = scales.stacked_header(fig)
    assert patch["title"]["text"] == "Top line"
    assert patch["title"]["subtitle"] == {"text": "under it", "font": {"size": 12}}  # 15 * 0.8
    assert patch["title"]["y"] == 1 - 6 / 450
    assert patch["title"]["yref"] == "container"
    header = 6 + math.ceil(2 * 15 * 1.3) + 6  # gap, two lines of 15 px, gap
    assert patch["legend"] == {"yref": "container", "y": 1 - header / 450, "yanchor": "top"}
    # subplot titles (16 px) above the grid: the legend's one row (3 names < 900 px) + gaps
    legend_px = math.ceil(1 * 12 * 1.6) + 8
    room = legend_px + math.ceil(16 * 1.4) + 2 * 6
    assert patch["title"]["pad"] == {"b": room}
    assert patch["margin"] == {"t": header + room}


def test_the_figure_is_only_read_and_a_second_pass_changes_nothing():
    fig = _figure()
    before = fig.to_dict()
    patch = scales.stacked_header(fig)
    assert fig.to_dict() == before
    fig.update_layout(patch)
    assert fig.layout.title.text == "Top line"
    assert fig.layout.title.subtitle.text == "under it"
    assert fig.layout.legend.y == patch["legend"]["y"]
    assert scales.stacked_header(fig) == {}


def test_a_vertical_legend_and_no_title_stay():
    fig = go.Figure(go.Bar(x=[1], y=[2], name="n"))
    fig.update_layout(legend={"orientation": "v"})
    assert scales.stacked_header(fig) == {}
