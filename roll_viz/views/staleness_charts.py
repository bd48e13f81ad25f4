"""Figures of async training: three log-prob columns per token, and discard vs pace lengths.

Functions take ``analysis.staleness`` results and return ``go.Figure``; no Streamlit, no math
beyond formatting. Token strings reach hovers and tick labels HTML-escaped with their whitespace
made visible (untrusted model text).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.staleness import ANCHORS, ThreePolicies, Trained
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.scales import title_style
from roll_viz.views.text import visible_whitespace

#: the three columns: name, colour, dash (mu and pi_old coincide for the fp32 sampler: dashed)
COLUMNS = (
    ("log μ (sampler)", OKABE_ITO[0], "solid"),
    ("log π_old (trainer at the sampler's weights)", OKABE_ITO[1], "dash"),
    ("log π_θ (trainer now)", OKABE_ITO[2], "solid"),
)
RATIO_NAMES = {
    "recomputed": "π_θ / π_old (recomputed)",
    "current": "π_θ / π_θ (π_old := π_θ)",
    "mu": "π_θ / μ (π_old := μ)",
}


def _labels(tokens: Sequence[str], positions: Sequence[int]) -> list[str]:
    """'position: token' per valid position, escaped (the x axis and the hovers)."""
    out = []
    for t in positions:
        tok = tokens[t] if t < len(tokens) else ""
        out.append(f"{t}: {html.escape(visible_whitespace(tok))}")
    return out


def three_columns_figure(
    three: ThreePolicies, row: int, tokens: Sequence[str], eps: float
) -> go.Figure:
    """One sample: the three log-prob columns per token (top) and PPO's ratio per anchor (bottom).

    The band on the ratio panel is [1 - eps, 1 + eps]; a marker outside it on the side its
    advantage pushes is a clipped token.
    """
    mask = three.mask[row]
    positions = [int(t) for t in mask.nonzero().flatten().tolist()]
    x = _labels(tokens, positions)
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        row_heights=[0.55, 0.45],
        subplot_titles=("log-probs of the sampled tokens", "PPO's ratio under each π_old"),
    )
    for (name, colour, dash), col in zip(COLUMNS, (three.mu, three.old, three.theta), strict=True):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[float(col[row, t]) for t in positions],
                mode="lines+markers",
                name=name,
                line={"color": colour, "dash": dash},
                hovertemplate="%{x}<br>%{y:.5f}<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
    for k, anchor in enumerate(ANCHORS):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[float(three.ratio[anchor][row, t]) for t in positions],
                mode="markers",
                name=RATIO_NAMES[anchor],
                marker={"color": OKABE_ITO[(k + 3) % len(OKABE_ITO)], "size": 8 - 2 * k},
                hovertemplate="%{x}<br>ratio %{y:.5f}<extra>" + RATIO_NAMES[anchor] + "</extra>",
            ),
            row=2,
            col=1,
        )
    fig.add_hrect(
        y0=1.0 - eps, y1=1.0 + eps, fillcolor="grey", opacity=0.12, line_width=0, row=2, col=1
    )
    fig.update_layout(
        title=title_style(f"Sample {row}: μ, π_old and π_θ token by token"),
        height=520,
        margin={"l": 60, "r": 20, "t": 70, "b": 80},
        legend={"orientation": "h", "y": -0.18},
    )
    fig.update_yaxes(title_text="log-prob (nats)", row=1, col=1)
    fig.update_yaxes(title_text="ratio", row=2, col=1)
    return fig


def lengths_figure(
    data: Sequence[int], discard: Trained, pace: Trained, unit: str = "group"
) -> go.Figure:
    """Histograms of the lengths: the data's (all of which pacing trains) and what discard trains.

    ``unit``: what one count is ("group": its longest answer's length; "answer", "prompt").
    """
    fig = go.Figure()
    series = (
        (f"the data, all of which pacing trains ({len(pace.lengths)})", list(data), OKABE_ITO[0]),
        (
            f"trained: discard and requeue ({len(discard.lengths)})",
            list(discard.lengths),
            OKABE_ITO[5],
        ),
    )
    top = max([*data, *discard.lengths, 1])
    size = max(1, top // 12)
    for name, values, colour in series:
        fig.add_trace(
            go.Histogram(
                x=values,
                name=name,
                marker={"color": colour},
                opacity=0.6,
                xbins={"start": 0, "end": top + size, "size": size},
                hovertemplate="length %{x}: %{y} " + unit + "s<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        barmode="overlay",
        title=title_style(
            f"Lengths of what gets trained (tokens; one count per {unit}"
            + (", its longest answer)" if unit == "group" else ")")
        ),
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        xaxis={"title": {"text": "length (tokens)"}},
        yaxis={"title": {"text": f"{unit}s"}},
    )
    return fig
