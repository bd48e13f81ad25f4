"""The silent-bug gallery's figure: the wrong and the right value per item, side by side.

One grouped bar chart per lesson (``roll_viz.analysis.silent_bugs``): for every item of its tiny
batch (an answer, a token, a sequence) the buggy formula's value next to the one roll-viz
computes, each bar labelled with its number. A value that does not exist (NaN: the buggy code
raises) is drawn as an empty bar labelled "NaN". Labels come from the lesson records and are
HTML-escaped for Plotly.
"""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go

from roll_viz.analysis.silent_bugs import Outcome

WRONG_COLOUR = "#D55E00"  # Okabe-Ito vermillion
RIGHT_COLOUR = "#0072B2"  # Okabe-Ito blue


def value_text(x: float) -> str:
    """A bar's label: 4 significant digits, scientific for tiny or huge values, NaN spelled out."""
    if math.isnan(x):
        return "NaN"
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.2e}"
    return f"{x:.4g}"


def _bars(values: tuple[float, ...]) -> tuple[list[float], list[str]]:
    heights = [0.0 if math.isnan(v) else v for v in values]
    return heights, [value_text(v) for v in values]


def outcome_figure(
    outcome: Outcome,
    wrong_label: str,
    right_label: str,
    title: str,
) -> go.Figure:
    """Grouped bars: per item, the wrong value (vermillion) next to the right one (blue).

    Args:
        outcome: a lesson's computed Outcome.
        wrong_label: legend name of the wrong side (how it was computed).
        right_label: legend name of the right side.
        title: y-axis title (what the per-item values are).

    Returns:
        A small Plotly figure (height 340).
    """
    labels = [html.escape(label) for label in outcome.labels]
    fig = go.Figure()
    for name, values, colour in (
        (f"wrong: {wrong_label}", outcome.wrong_series, WRONG_COLOUR),
        (f"right: {right_label}", outcome.right_series, RIGHT_COLOUR),
    ):
        heights, texts = _bars(values)
        fig.add_bar(
            x=labels,
            y=heights,
            name=html.escape(name),
            marker_color=colour,
            text=texts,
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: %{text}<extra>" + html.escape(name) + "</extra>",
        )
    fig.update_layout(
        barmode="group",
        height=340,
        margin={"l": 60, "r": 20, "t": 30, "b": 40},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        yaxis_title=html.escape(title),
        plot_bgcolor="white",
        paper_bgcolor="white",
    )
    fig.update_yaxes(zeroline=True, zerolinecolor="#888", gridcolor="#eee")
    return fig
