"""Sequence-level figures: group statistics, the beta schedule, KL bars.

The Rewards page's raw-vs-processed bars are drawn in the browser (``ui/instant/rewards.js``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from torch import Tensor

from roll_viz.core.records import Rollout
from roll_viz.views.scales import title_style
from roll_viz.views.text import sample_labels


def group_stats_figure(
    rollout: Rollout, scores: Tensor, means: Sequence[float], stds: Sequence[float]
) -> go.Figure:
    """Each prompt's rewards as dots with the group mean +- std as a bar.

    Args:
        rollout: the batch.
        scores: (B,) raw rewards.
        means: (P,) group means.
        stds: (P,) group std (NaN for a group of one).

    Returns:
        The figure.
    """
    prompts = [f"p{p}" for p in range(len(rollout.prompts))]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=prompts,
            y=list(means),
            error_y={"type": "data", "array": [0.0 if math.isnan(s) else s for s in stds]},
            name="group mean +- std",
            marker_color="rgba(33,102,172,0.35)",
            hovertemplate="%{x}<br>mean = %{y:.4f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[f"p{g}" for g in rollout.group_ids.tolist()],
            y=scores.tolist(),
            mode="markers",
            name="samples",
            marker={"color": "#b2182b", "size": 8, "line": {"width": 1, "color": "white"}},
            text=sample_labels(rollout),
            hovertemplate="%{text}<br>reward = %{y:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=360,
        margin={"l": 50, "r": 20, "t": 40, "b": 110},
        title=title_style("Group statistics of the raw reward"),
        xaxis_title="prompt",
        yaxis_title="raw reward",
        legend={"orientation": "h", "y": -0.38, "x": 0.5, "xanchor": "center"},
    )
    return fig


def beta_schedule(
    betas: Sequence[float],
    *,
    target: float | None = None,
    observed: float | None = None,
    mode: str = "adaptive",
) -> go.Figure:
    """The KL coefficient over simulated controller steps; the title names the mode.

    Args:
        betas: beta at step 0, 1, ... (beta_0 first).
        target: the target KL (annotated), or None.
        observed: the observed KL used at every step (annotated), or None.
        mode: "adaptive" (the controller replays one batch's KL: an open loop, said in the
            title) or "fixed" (beta never moves).

    Returns:
        A line chart.
    """
    fig = go.Figure(
        go.Scatter(
            x=list(range(len(betas))),
            y=list(betas),
            mode="lines+markers" if len(betas) <= 60 else "lines",
            name="beta",
            line={"color": "#2166ac"},
            hovertemplate="step %{x}<br>beta = %{y:.5f}<extra></extra>",
        )
    )
    note = []
    if observed is not None:
        note.append(f"observed KL {observed:.4f}")
    if target is not None:
        note.append(f"target {target:.4f}")
    fig.update_layout(
        height=300,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        title={
            "text": (
                "Adaptive beta, open loop: this batch's KL replayed at every step"
                if mode == "adaptive"
                else "Fixed beta: the same value at every step"
            )
            + (f" ({', '.join(note)})" if note else ""),
            "font": {"size": 15},
        },
        xaxis_title="controller step",
        yaxis_title="beta",
        yaxis_rangemode="tozero",
    )
    return fig


def kl_bars(table_rows: Mapping[str, Sequence[float]], labels: Sequence[str]) -> go.Figure:
    """Per-sample mean KL of several estimators next to the exact KL (grouped bars).

    Args:
        table_rows: series name -> (B,) values.
        labels: (B,) sample labels.

    Returns:
        A grouped bar chart.
    """
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    fig = go.Figure(
        [
            go.Bar(x=list(labels), y=list(vals), name=name, marker_color=palette[i % len(palette)])
            for i, (name, vals) in enumerate(table_rows.items())
        ]
    )
    fig.update_layout(
        barmode="group",
        height=360,
        margin={"l": 50, "r": 20, "t": 40, "b": 110},
        title=title_style("Token-mean KL per sample"),
        legend={"orientation": "h", "y": -0.38, "x": 0.5, "xanchor": "center"},
        yaxis_title="mean KL per token",
    )
    return fig
