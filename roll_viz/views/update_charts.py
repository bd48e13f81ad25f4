"""Figures of one policy-update step (``roll_viz.lm.update.UpdateResult``): plotly only.

The functions read an UpdateResult duck-typed (its (B, T) tensors and per-epoch stats), so this
module imports no model code. Token heatmaps follow the advantage heatmap's rules (rows =
samples p/s, columns = token positions, RdBu with white at 0 on a symmetric range, padding blank,
token text escaped in the hover).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from roll_viz.core.pipeline.losses import agg_weights
from roll_viz.core.records import Rollout
from roll_viz.views.heatmaps import heatmap, token_text
from roll_viz.views.scales import nice_ceiling, symmetric_range, title_style
from roll_viz.views.text import sample_labels

#: the aggregation modes compared on the page: name -> how a token of answer i is weighted
AGG_MODES: dict[str, str] = {
    "seq-mean-token-mean": "1 / (B * L_i): every answer weighs 1/B, whatever its length",
    "token-mean": "1 / (sum of L): every token weighs the same, long answers weigh more",
    "Dr.GRPO constant": "1 / (B * T_max): a constant, answer weight grows with L_i",
}
#: below this a loss term or a ratio's distance from 1 is float rounding, drawn as exactly 0 / 1
ROUNDING = 1e-6
#: the ratio histogram's x axis ends here (0..2: the 0.8-1.2 clip band is a fifth of it)
RATIO_AXIS_MAX = 2.0
RATIO_ROUNDING = 1e-4
#: the scatter's categories: (name, colour) by sign(delta log pi) against sign(A)
MOVED = (
    ("moved with its advantage", "#2166ac"),
    ("moved against its advantage", "#b2182b"),
    ("A = 0 (no push from the advantage)", "#9e9e9e"),
)
PALETTE = (
    "#2166ac",
    "#e66101",
    "#1b7837",
    "#762a83",
    "#b2182b",
    "#4d4d4d",
    "#35978f",
    "#bf812d",
)


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(
        title=title_style(title),
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 45},
        plot_bgcolor="rgba(0,0,0,0)",
        paper_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def delta_heatmap(result: Any, rollout: Rollout, *, zmax: float | None = None) -> go.Figure:
    """Per-token change of log pi made by the step (after - before), advantage-heatmap style.

    Args:
        result: the UpdateResult (delta, advantages, grad_coef, logprobs_before/after (B, T)).
        rollout: the batch it was taken on.
        zmax: symmetric range (default: the largest |delta| rounded up to 1/2/3/5 x 10^k).

    Returns:
        The heatmap; ``data[0].z`` is delta with None on padding.
    """
    mask = result.response_mask
    top = zmax if zmax is not None else nice_ceiling(symmetric_range(result.delta, mask))
    return heatmap(
        result.delta,
        mask,
        rollout=rollout,
        title="Change of log pi per token made by the step (blue: more likely, red: less)",
        quantity="delta log pi",
        signed=True,
        zmax=top,
        extra={
            "advantage A": result.advantages,
            "log pi before": result.logprobs_before,
            "log pi after": result.logprobs_after,
        },
    )


def grad_coef_heatmap(result: Any, rollout: Rollout) -> go.Figure:
    """The gradient coefficient per token: -dL/dlog pi of epoch 1 (blue: the step pushes up).

    Args:
        result: the UpdateResult (grad_coef (B, T) = dL/dlog pi).
        rollout: the batch.

    Returns:
        The heatmap of -grad_coef (so the colours match the advantage heatmap's signs).
    """
    mask = result.response_mask
    push = -result.grad_coef
    return heatmap(
        push,
        mask,
        rollout=rollout,
        title="Gradient coefficient -dL/d log pi per token, epoch 1<br>what the backward pass sees",
        quantity="-dL/dlog pi",
        signed=True,
        zmax=nice_ceiling(symmetric_range(push, mask)),
        extra={"advantage A": result.advantages},
    )


def moved_category(delta: float, advantage: float) -> int:
    """0: moved with its advantage, 1: against it, 2: A = 0 (index into ``MOVED``)."""
    if advantage == 0:
        return 2
    return 0 if delta * advantage > 0 else 1


def delta_scatter(result: Any, rollout: Rollout) -> go.Figure:
    """Delta log pi against the advantage, one dot per token, coloured by "moved with / against".

    A token moved with its advantage when delta log pi has the sign of A (pushed up with A > 0,
    down with A < 0); tokens with A = 0 are grey. The legend names the share of each.

    Args:
        result: the UpdateResult.
        rollout: the batch (token text and sample labels for the hover).

    Returns:
        A scatter with one trace per category (``name`` starts with the category's name).
    """
    mask = result.response_mask.bool()
    text = token_text(rollout)
    labels = sample_labels(rollout)
    points: list[list[tuple]] = [[] for _ in MOVED]
    for b, label in enumerate(labels):
        for t in np.flatnonzero(mask[b].numpy()).tolist():
            a, d = float(result.advantages[b, t]), float(result.delta[b, t])
            points[moved_category(d, a)].append((a, d, str(text[b][t]), label, t))
    total = sum(len(p) for p in points) or 1
    fig = go.Figure()
    for (name, colour), pts in zip(MOVED, points, strict=True):
        if not pts:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="markers",
                name=f"{name}: {len(pts) / total:.0%}",
                marker={"size": 6, "color": colour, "opacity": 0.75},
                customdata=[[p[2], html.escape(p[3]), p[4]] for p in pts],
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (%{customdata[1]}, t = %{customdata[2]})"
                    "<br>A = %{x:.4f}<br>delta log pi = %{y:.4f}<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=0, line={"color": "#999", "width": 1})
    fig.add_vline(x=0, line={"color": "#999", "width": 1})
    fig.update_xaxes(title_text="advantage A")
    fig.update_yaxes(title_text="delta log pi (after - before)")
    fig.update_layout(legend={"orientation": "h", "y": -0.2})
    return _layout(fig, "Did each token move the way its advantage says?", height=440)


def loss_terms_bars(epochs: Sequence[Any]) -> go.Figure:
    """The loss decomposition (policy, kl, entropy, value, total) per epoch, grouped bars.

    A term smaller than ``ROUNDING`` in size is float noise (the policy loss at epoch 1, where
    every ratio is 1 and the advantages average to 0): it is drawn as 0 and labelled so, and an
    all-zero figure keeps a readable -1..1 axis instead of one scaled to the noise.
    """
    names = sorted({k for e in epochs for k in e.terms})
    names = [n for n in names if n != "total"] + (
        ["total"] if any("total" in e.terms for e in epochs) else []
    )
    fig = go.Figure()
    shown_all: list[float] = []
    for i, e in enumerate(epochs):
        raw = [float(e.terms.get(n, 0.0)) for n in names]
        shown = [0.0 if abs(v) < ROUNDING else v for v in raw]
        shown_all += shown
        fig.add_trace(
            go.Bar(
                x=names,
                y=shown,
                name=f"epoch {e.epoch}",
                marker_color=PALETTE[i % len(PALETTE)],
                text=["0 (to rounding)" if abs(v) < ROUNDING else f"{v:.3g}" for v in raw],
                textposition="outside",
                customdata=raw,
                hovertemplate="%{x} = %{customdata:.5g}<extra>epoch " + str(e.epoch) + "</extra>",
            )
        )
    fig.update_layout(barmode="group")
    top = max((abs(v) for v in shown_all), default=0.0)
    if top == 0.0:
        fig.update_yaxes(range=[-1, 1])
    else:
        fig.update_yaxes(range=[min(min(shown_all), 0) * 1.3 - 0.05 * top, top * 1.3])
    fig.update_yaxes(title_text="mean value")  # over minibatches; a longer title ran past the bars
    # two lines: the figure usually shares a row with the ratio panel
    fig = _layout(fig, "Loss terms per epoch<br>a term of 0 can still push")
    return fig.update_layout(margin={"t": 80})


def _ratio_trace(e: Any, ratios: Tensor, colour: str) -> go.Bar | go.Histogram:
    """One epoch's ratios: a histogram on the fixed axis, or one bar when all are 1."""
    n = int(ratios.numel())
    if n and float((ratios - 1).abs().max()) < RATIO_ROUNDING:
        return go.Bar(
            x=[1.0],
            y=[n],
            width=[0.02],
            name=f"epoch {e.epoch}: all {n} ratios = 1",
            text=[f"all {n} ratios = 1"],
            textposition="outside",
            marker_color=colour,
            legendgroup=f"e{e.epoch}",
            hovertemplate=f"epoch {e.epoch}: every ratio is 1 to rounding<extra></extra>",
        )
    # a fixed window: one ratio of 26 had stretched the axis and squashed the clip band
    beyond = int((ratios > RATIO_AXIS_MAX).sum())
    note = f" ({beyond} above {RATIO_AXIS_MAX:g}, max {float(ratios.max()):.3g})" if beyond else ""
    return go.Histogram(
        x=ratios.clamp(max=RATIO_AXIS_MAX).tolist(),
        name=f"epoch {e.epoch}{note}",
        opacity=0.6,
        xbins={"start": 0.0, "end": RATIO_AXIS_MAX + 1e-9, "size": RATIO_AXIS_MAX / 40},
        marker_color=colour,
        legendgroup=f"e{e.epoch}",
    )


def ratio_figure(epochs: Sequence[Any], mask: Tensor) -> go.Figure:
    """Left: the ratio exp(log pi - log pi_old) of every token, per epoch; right: clip fractions.

    An epoch whose ratios are all 1 to rounding (epoch 1: the policy is the behaviour policy) is
    one bar at r = 1 labelled "all N ratios = 1", not rounding noise spread over many bins. Clip
    fractions are shares, on a fixed 0-100 % axis.

    Args:
        epochs: the UpdateResult's EpochStats.
        mask: (B, T) response mask.

    Returns:
        A two-panel figure (histograms or the one bar per epoch; clip-mask shares per epoch).
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.6, 0.4],
        subplot_titles=(
            # two short lines each: the figure often shares a row with the loss terms
            "ratio r per token<br>r = exp(log pi - log pi_old)",
            "clip fraction<br>per epoch",
        ),
        horizontal_spacing=0.16,
    )
    valid = mask.bool()
    for i, e in enumerate(epochs):
        fig.add_trace(_ratio_trace(e, e.ratio[valid], PALETTE[i % len(PALETTE)]), row=1, col=1)
    keys = sorted({k for e in epochs for k in e.clip_fractions})
    for i, e in enumerate(epochs):
        fig.add_trace(
            go.Bar(
                x=keys,
                y=[e.clip_fractions.get(k, 0.0) for k in keys],
                name=f"epoch {e.epoch}",
                marker_color=PALETTE[i % len(PALETTE)],
                legendgroup=f"e{e.epoch}",
                showlegend=False,
                hovertemplate="%{x}: %{y:.2%}<extra>epoch " + str(e.epoch) + "</extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title_text="r (above 2: in the last bin)", row=1, col=1)
    fig.update_xaxes(range=[0.0, RATIO_AXIS_MAX * 1.02], row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", range=[0, 1], row=1, col=2)
    # one title per panel (no figure title above them to collide with); the legend sits under
    # the panels, so in a half-width column both panels keep the width their titles need
    fig.update_layout(
        height=420,
        margin={"l": 60, "r": 50, "t": 80, "b": 70},
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 0,
            "yref": "container",
            "yanchor": "bottom",
        },
        plot_bgcolor="rgba(0,0,0,0)",
        paper_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def aggregation_weights(mask: Tensor) -> dict[str, np.ndarray]:
    """Total weight each answer gets in the loss under each aggregation mode.

    Row sums of ``core.pipeline.losses.agg_weights`` (the weights the losses use).

    Args:
        mask: (B, T) response mask.

    Returns:
        mode -> (B,) answer weights: seq-mean-token-mean 1/n each (n = answers with a token);
        token-mean L_i / sum(L); Dr.GRPO constant L_i / (B * T) (T = the batch's width; TRL
        uses max_completion_length).
    """
    width = max(int(mask.shape[1]), 1)
    modes = {
        "seq-mean-token-mean": ("seq-mean-token-mean", None),
        "token-mean": ("token-mean", None),
        "Dr.GRPO constant": ("token-sum-norm-all-rows", float(width)),
    }
    return {
        name: agg_weights(mask, mode, scale).sum(-1).numpy()
        for name, (mode, scale) in modes.items()
    }


def aggregation_figure(mask: Tensor, labels: Sequence[str]) -> go.Figure:
    """Weight of each answer vs its length, the three aggregation modes side by side."""
    weights = aggregation_weights(mask)
    lengths = mask.float().sum(-1).tolist()
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(weights), shared_yaxes=True)
    for col, (mode, w) in enumerate(weights.items(), start=1):
        fig.add_trace(
            go.Scatter(
                x=lengths,
                y=w.tolist(),
                mode="markers",
                text=[html.escape(x) for x in labels],
                marker={"size": 9, "color": PALETTE[col - 1]},
                name=mode,
                hovertemplate="%{text}: length %{x}, answer weight %{y:.4f}<extra>"
                + mode
                + "</extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="answer length L_i (tokens)", row=1, col=col)
    fig.update_yaxes(title_text="weight of the answer in the loss", row=1, col=1)
    return _layout(fig, "Aggregation: how much each answer counts, by its length", height=360)


def seconds_bars(seconds: dict[str, float]) -> go.Figure:
    """Wall time of the step per phase (forward, backward, optimizer, rescore)."""
    phases = [k for k in ("forward", "backward", "optimizer", "rescore") if k in seconds]
    fig = go.Figure(
        go.Bar(
            x=[seconds[k] for k in phases],
            y=phases,
            orientation="h",
            marker_color=PALETTE[0],
            hovertemplate="%{y}: %{x:.3f} s<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="seconds")
    fig.update_yaxes(autorange="reversed")
    total = seconds.get("total", sum(seconds[k] for k in phases))
    return _layout(fig, f"Where the step's {total:.2f} s went", height=260)
