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
        title="Gradient coefficient -dL/d log pi per token, epoch 1 (what the backward pass sees)",
        quantity="-dL/dlog pi",
        signed=True,
        zmax=nice_ceiling(symmetric_range(push, mask)),
        extra={"advantage A": result.advantages},
    )


def delta_scatter(result: Any, rollout: Rollout) -> go.Figure:
    """Delta log pi against the advantage, one dot per token, one colour per sample.

    Args:
        result: the UpdateResult.
        rollout: the batch (token text and sample labels for the hover).

    Returns:
        A scatter with one trace per sample (``name`` = its p/s label).
    """
    mask = result.response_mask.bool()
    text = token_text(rollout)
    labels = sample_labels(rollout)
    fig = go.Figure()
    for b, label in enumerate(labels):
        valid = mask[b]
        if not bool(valid.any()):
            continue
        positions = np.flatnonzero(valid.numpy())
        fig.add_trace(
            go.Scatter(
                x=result.advantages[b][valid].tolist(),
                y=result.delta[b][valid].tolist(),
                mode="markers",
                name=label,
                marker={"size": 6, "color": PALETTE[b % len(PALETTE)], "opacity": 0.75},
                customdata=np.stack([text[b][positions], positions.astype(str)], axis=-1).tolist(),
                hovertemplate=(
                    "<b>%{customdata[0]}</b> (" + html.escape(label) + ", t = %{customdata[1]})"
                    "<br>A = %{x:.4f}<br>delta log pi = %{y:.4f}<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=0, line={"color": "#999", "width": 1})
    fig.add_vline(x=0, line={"color": "#999", "width": 1})
    fig.update_xaxes(title_text="advantage A")
    fig.update_yaxes(title_text="delta log pi (after - before)")
    return _layout(fig, "Did each token move the way its advantage says?", height=420)


def loss_terms_bars(epochs: Sequence[Any]) -> go.Figure:
    """The loss decomposition (policy, kl, entropy, value, total) per epoch, grouped bars."""
    names = sorted({k for e in epochs for k in e.terms})
    names = [n for n in names if n != "total"] + (
        ["total"] if any("total" in e.terms for e in epochs) else []
    )
    fig = go.Figure()
    for i, e in enumerate(epochs):
        fig.add_trace(
            go.Bar(
                x=names,
                y=[e.terms.get(n, 0.0) for n in names],
                name=f"epoch {e.epoch}",
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate="%{x} = %{y:.5g}<extra>epoch " + str(e.epoch) + "</extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="value (mean over minibatches)")
    return _layout(fig, "Loss decomposition per epoch")


def ratio_figure(epochs: Sequence[Any], mask: Tensor) -> go.Figure:
    """Left: the ratio exp(log pi - log pi_old) of every token, per epoch; right: clip fractions.

    Args:
        epochs: the UpdateResult's EpochStats.
        mask: (B, T) response mask.

    Returns:
        A two-panel figure (histograms per epoch; bars of each clip mask's share per epoch).
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.6, 0.4],
        subplot_titles=("ratio r per token", "clip fraction per epoch"),
    )
    valid = mask.bool()
    for i, e in enumerate(epochs):
        fig.add_trace(
            go.Histogram(
                x=e.ratio[valid].tolist(),
                name=f"epoch {e.epoch}",
                opacity=0.6,
                nbinsx=40,
                marker_color=PALETTE[i % len(PALETTE)],
                legendgroup=f"e{e.epoch}",
            ),
            row=1,
            col=1,
        )
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
    fig.update_xaxes(title_text="r = exp(log pi - log pi_old)", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", row=1, col=2)
    return _layout(fig, "Importance ratios and clipping, epoch by epoch", height=400)


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
