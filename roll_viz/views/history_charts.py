"""Figures of an imported run: distributions across steps, zero-signal share, PODS subsets."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from roll_viz.views.scales import title_style, whole_ticks

LABELS = {
    "reward": "reward (as the file gives it)",
    "advantage": "advantage",
    "kl_k1": "mean k1 KL per sample",
    "kl_k3": "mean k3 KL per sample",
    "length": "response length",
}


def step_distributions(long: pd.DataFrame, what: str, max_steps: int = 60) -> go.Figure:
    """One box per step of a per-sample quantity, under a mean line with a +-std band.

    Boxes of 0/1 rewards look the same at every step (quartiles 0 and 1) even while the accuracy
    rises from 0.2 to 0.8; the mean line and its +-1 std band show that rise.

    Args:
        long: ``analysis.history.distributions`` output (step, group, value).
        what: the quantity's name (for the axis title).
        max_steps: at most this many boxes (later steps kept).

    Returns:
        Traces: the band's upper edge ("+1 std") and lower edge ("mean +- 1 std", filled up to
        the upper one), one box per step, then the "mean" line.
    """
    fig = go.Figure()
    steps = sorted(long["step"].unique())[-max_steps:]
    names = [str(step) for step in steps]
    groups = [long.loc[long["step"] == step, "value"].astype(float) for step in steps]
    means = [float(v.mean()) for v in groups]
    stds = [float(v.std(ddof=0)) if len(v) else float("nan") for v in groups]
    fig.add_trace(
        go.Scatter(
            x=names,
            y=[m + d for m, d in zip(means, stds, strict=True)],
            name="+1 std",
            mode="lines",
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=names,
            y=[m - d for m, d in zip(means, stds, strict=True)],
            name="mean +- 1 std",
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor="rgba(230, 97, 1, 0.15)",
            hoverinfo="skip",
            legendgroup="band",
            showlegend=True,
            legendrank=2,
        )
    )
    for name, values in zip(names, groups, strict=True):
        fig.add_trace(
            go.Box(y=values, name=name, boxpoints=False, marker_color="#2166ac", showlegend=False)
        )
    fig.add_trace(
        go.Scatter(
            x=names,
            y=means,
            name="mean",
            mode="lines+markers",
            line={"color": "#e66101", "width": 2},
            customdata=stds,
            hovertemplate="step %{x}: mean %{y:.4g}, std %{customdata:.4g}<extra></extra>",
            legendrank=1,
        )
    )
    fig.update_layout(
        title=title_style(f"{LABELS.get(what, what)} per step: boxes, mean and +-1 std"),
        xaxis_title="training step",
        yaxis_title=LABELS.get(what, what),
        showlegend=True,
        legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"},
        height=340,
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
    )
    fig.update_xaxes(**whole_ticks(steps))
    return fig


def zero_signal_share(history: pd.DataFrame) -> go.Figure:
    """Share of prompts whose rewards are all equal (advantage 0: no learning signal), per step."""
    fig = go.Figure(
        go.Bar(
            x=history["step"],
            y=history["zero_signal_share"],
            marker_color="#b2182b",
            customdata=history["zero_signal_groups"],
            hovertemplate="step %{x}: %{y:.0%} of prompts (%{customdata}) give no signal"
            "<extra></extra>",
        )
    )
    fig.update_layout(
        title=title_style("Zero-signal groups: every reward equal, so every advantage is 0"),
        xaxis_title="training step",
        yaxis_title="share of prompts",
        yaxis_tickformat=".0%",
        yaxis_range=[0, 1],
        height=300,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    fig.update_xaxes(**whole_ticks(list(history["step"])))
    return fig


def pods_groups(results: dict, group_labels: tuple, max_groups: int = 12) -> go.Figure:
    """Each method's kept rollouts on the first groups: rewards as dots, kept ones filled.

    Args:
        results: method -> ``analysis.downsampling.PodsResult``.
        group_labels: (P,) group ids.
        max_groups: groups drawn.
    """
    methods = list(results)
    fig = go.Figure()
    colours = {"max_variance": "#2166ac", "top": "#b2182b", "random": "#7f7f7f"}
    for method in methods:
        res = results[method]
        groups = min(max_groups, res.rewards.shape[0])
        for p in range(groups):
            kept = set(res.kept[p].tolist())
            rewards = res.rewards[p].tolist()
            fig.add_trace(
                go.Scatter(
                    x=[f"{html.escape(str(group_labels[p]))[:20]}"] * len(rewards),
                    y=rewards,
                    mode="markers",
                    marker={
                        "symbol": [
                            "circle" if i in kept else "circle-open" for i in range(len(rewards))
                        ],
                        "size": 10,
                        "color": colours.get(method, "#333"),
                    },
                    offsetgroup=method,
                    name=method,
                    legendgroup=method,
                    showlegend=p == 0,
                    hovertemplate=f"{method}<br>reward %{{y:.3g}}<extra></extra>",
                )
            )
    fig.update_layout(
        title=title_style("Kept (filled) and dropped (open) rollouts per prompt"),
        scattermode="group",
        xaxis_title="prompt group",
        yaxis_title="reward",
        height=340,
        margin={"l": 60, "r": 20, "t": 50, "b": 80},
    )
    return fig


def pods_sweep(table: pd.DataFrame) -> go.Figure:
    """Mean std of the kept rewards against m, one line per method (PODS keeps the most)."""
    fig = go.Figure()
    for method, part in table.groupby("method", sort=False):
        fig.add_trace(
            go.Scatter(x=part["m"], y=part["mean_std_after"], mode="lines+markers", name=method)
        )
    fig.update_layout(
        title=title_style("Signal left after keeping m of n: mean std of the kept rewards"),
        xaxis_title="m (rollouts kept per prompt)",
        yaxis_title="mean std of kept rewards",
        height=300,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    fig.update_xaxes(**whole_ticks(list(table["m"])))
    return fig
