"""Figures of the sequence-level masks: which rows each rule removes, and why.

Functions take ``analysis.sequence_lab`` results and return ``go.Figure``; no Streamlit. Rule
labels come from the dialect records (plain text); no model text is drawn here.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from roll_viz.analysis.sequence_lab import SequenceLab
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.scales import title_style

KEPT, PARTLY, REMOVED = "#e8eef4", OKABE_ITO[1], OKABE_ITO[5]
#: three bands on [0, 1]: kept (0), some tokens masked (0.5), removed (1)
SCALE = [[0.0, KEPT], [0.33, KEPT], [0.33, PARTLY], [0.66, PARTLY], [0.66, REMOVED], [1.0, REMOVED]]


def _level(cell: str) -> float:
    """0 kept, 0.5 some tokens masked (a token rule), 1 the whole response removed."""
    return {"kept": 0.0, "removed": 1.0}.get(cell, 0.5)


def rows_removed_grid(seq: SequenceLab) -> go.Figure:
    """One cell per (response, rule): dark where the rule removes the whole response.

    A token rule (prime-rl's DPPO mask) that masks some of a response's tokens is drawn light.

    Hover: the response's length, mean advantage and the statistic each rule compares.
    """
    frame = seq.sequences
    names = list(seq.rule_names)
    z = np.array([[_level(v) for v in frame[n]] for n in names]).T
    hover = []
    for _, row in frame.iterrows():
        line = (
            f"sample {int(row['sample'])} ({int(row['tokens'])} tokens), mean A "
            f"{row['mean A']:.3f}<br>seq KL(mu||pi_theta) {row['seq KL (mu || pi_theta)']:.4f}"
            f"<br>product {row['product pi_old/mu']:.4g}, geometric "
            f"{row['geometric pi_old/mu']:.4f}<br>max token k2 {row['max token k2']:.4g}"
        )
        hover.append([f"{line}<br>{n}: {row[n]}" for n in names])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=[f"sample {int(s)}" for s in frame["sample"]],
            zmin=0.0,
            zmax=1.0,
            colorscale=SCALE,
            showscale=False,
            xgap=2,
            ygap=1,
            customdata=np.array(hover, dtype=object),
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title_style("Responses each rule removes (dark: all, light: some tokens)"),
        height=max(260, 26 * len(frame) + 120),
        margin={"l": 80, "r": 20, "t": 50, "b": 40},
        xaxis={"side": "top", "automargin": True},
        yaxis={"autorange": "reversed"},
    )
    return fig


def product_vs_geometric(seq: SequenceLab, low: float, high: float) -> go.Figure:
    """Each response's product and geometric-mean ratio against its length, with [low, high].

    The product exp(sum d) spreads with length; the geometric mean exp(mean d) stays near 1.
    """
    frame = seq.sequences
    fig = go.Figure()
    for column, color, name in (
        ("product pi_old/mu", OKABE_ITO[0], "product (TRL sequence_mask)"),
        ("geometric pi_old/mu", OKABE_ITO[2], "geometric mean (verl Geo-RS)"),
    ):
        fig.add_trace(
            go.Scatter(
                x=frame["tokens"],
                y=frame[column],
                mode="markers",
                name=name,
                marker={"color": color, "size": 9},
                text=[f"sample {int(s)}" for s in frame["sample"]],
                hovertemplate="%{text}: %{x} tokens, ratio %{y:.4g}<extra>" + name + "</extra>",
            )
        )
    for bound in (low, high):
        fig.add_hline(y=bound, line={"color": "#333333", "dash": "dash"})
    fig.update_layout(
        title=title_style("Sequence ratio by length (dashed: low, high)"),
        height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        xaxis={"title": {"text": "response length (tokens)"}},
        yaxis={"title": {"text": "ratio (log scale)"}, "type": "log"},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
