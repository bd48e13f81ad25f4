"""Figures of the mismatch lab: d per token, its histogram, the two-factor ratio, corrections.

Functions take ``analysis.mismatch`` results and return ``go.Figure``; no Streamlit, no math
beyond formatting. Token strings in hovers go through ``heatmaps.token_text`` (HTML-escaped).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.mismatch import Lab
from roll_viz.core.records import Rollout
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.heatmaps import heatmap, token_text
from roll_viz.views.scales import (
    SIGNED_SCALE,
    nice_ceiling,
    robust_range,
    title_style,
)


def delta_heatmap(lab: Lab, rollout: Rollout) -> go.Figure:
    """The heatmap of d = log pi_old - log mu per token (diverging at 0; padding blank)."""
    top = nice_ceiling(robust_range(lab.delta, lab.mask.double(), q=0.98, floor=1e-6))
    return heatmap(
        lab.delta,
        lab.mask.double(),
        rollout=rollout,
        title="d = log pi_old - log mu per token (blue: the trainer gives the token more than mu, "
        "red: less)",
        quantity="d (nats)",
        signed=True,
        zmax=top,
        extra={"pi_old / mu": lab.ratio.mismatch},
    )


def delta_histogram(lab: Lab, title: str = "") -> go.Figure:
    """Histogram of d over the valid tokens, with its mean and +-RMS marked."""
    d = lab.delta[lab.mask].numpy()
    fig = go.Figure(
        go.Histogram(
            x=d,
            nbinsx=60,
            marker={"color": OKABE_ITO[1]},
            name="tokens",
            hovertemplate="d in %{x}<br>%{y} tokens<extra></extra>",
        )
    )
    stats = lab.stats
    if d.size:
        fig.add_vline(x=stats["mean"], line={"color": "#333333", "dash": "dash"})
        for sign in (-1, 1):
            fig.add_vline(x=sign * stats["rms"], line={"color": OKABE_ITO[5], "dash": "dot"})
    fig.update_layout(
        title=title_style(title or "Histogram of d (dashed: mean, dotted: +-RMS)"),
        height=300,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        xaxis={"title": {"text": "d = log pi_old - log mu (nats)"}},
        yaxis={"title": {"text": "tokens"}},
        showlegend=False,
        bargap=0.05,
    )
    return fig


def two_factor_figure(lab: Lab, rollout: Rollout) -> go.Figure:
    """Each token at (log pi_old/mu, log pi_theta/pi_old); colour = log pi_theta/mu = x + y."""
    m = lab.mask.numpy()
    x = np.log(np.where(m, lab.ratio.mismatch.numpy(), 1.0))[m]
    y = np.log(np.where(m, lab.ratio.staleness.numpy(), 1.0))[m]
    tokens = token_text(rollout)[m]
    total = x + y
    top = float(np.abs(total).max()) if total.size else 1.0
    fig = go.Figure(
        go.Scattergl(
            x=x,
            y=y,
            mode="markers",
            marker={
                "color": total,
                "colorscale": SIGNED_SCALE,
                "cmin": -top or -1,
                "cmax": top or 1,
                "size": 6,
                "colorbar": {"title": {"text": "log pi_theta/mu"}},
            },
            customdata=tokens,
            hovertemplate="<b>%{customdata}</b><br>log pi_old/mu = %{x:.4f}<br>"
            "log pi_theta/pi_old = %{y:.4f}<br>"
            "log pi_theta/mu = %{marker.color:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title_style("pi_theta / mu = (pi_old / mu) x (pi_theta / pi_old), per token (logs)"),
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        xaxis={"title": {"text": "log pi_old / mu  (mismatch)"}, "zeroline": True},
        yaxis={"title": {"text": "log pi_theta / pi_old  (staleness)"}, "zeroline": True},
    )
    return fig


def corrections_figure(table: pd.DataFrame) -> go.Figure:
    """Per correction: share of tokens truncated / masked (left) and the loss with vs without.

    The labels take the room they need (automargin, no fixed left margin) and the right panel,
    which shares the rows and shows no labels of its own, sits close: at 1280 px a fixed 200 px
    margin and a 22 % gap had left a wide empty band in section 3.
    """
    labels = [f"{f}: {m}" for f, m in zip(table["framework"], table["method"], strict=True)]
    n = max(1.0, float(table["denominator"].max()) if len(table) else 1.0)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.6, 0.4],
        horizontal_spacing=0.05,
        subplot_titles=("tokens truncated / masked", "loss with the correction"),
    )
    total = table["kept share"].rsub(1.0) if len(table) else table["kept share"]
    share_t = table["truncated"] / max(n, 1.0)
    fig.add_trace(
        go.Bar(
            y=labels,
            x=share_t,
            orientation="h",
            name="truncated",
            marker={"color": OKABE_ITO[0]},
            hovertemplate="%{y}<br>%{x:.1%} truncated<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(
            y=labels,
            x=total,
            orientation="h",
            name="masked / rejected",
            marker={"color": OKABE_ITO[5]},
            hovertemplate="%{y}<br>%{x:.1%} masked<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(
            y=labels,
            x=table["loss with"],
            orientation="h",
            name="loss with the correction",
            marker={"color": OKABE_ITO[2]},
            hovertemplate="%{y}<br>loss %{x:.5g}<extra></extra>",
        ),
        1,
        2,
    )
    if len(table):
        without = float(table["loss without"].iloc[0])
        fig.add_vline(x=without, line={"color": "#333", "dash": "dash"}, row=1, col=2)
        fig.add_trace(  # the dashed line's legend entry (a vline has none)
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                name=f"loss without: {without:.4g}",
                line={"color": "#333", "dash": "dash"},
                hoverinfo="skip",
            ),
            1,
            2,
        )
    height = 150 + 34 * len(labels)
    top, bottom = 40, 105
    fig.update_layout(
        barmode="group",
        height=height,
        margin={"l": 10, "r": 20, "t": top, "b": bottom},
        # under the axis titles: 65 px below the plot area, whatever the number of rows
        legend={"orientation": "h", "yanchor": "top", "y": -65 / (height - top - bottom)},
    )
    fig.update_xaxes(tickformat=".0%", title={"text": "share of the tokens"}, row=1, col=1)
    fig.update_xaxes(title={"text": "PPO loss"}, row=1, col=2)
    fig.update_yaxes(autorange="reversed", automargin=True, row=1, col=1)
    fig.update_yaxes(autorange="reversed", showticklabels=False, row=1, col=2)
    fig.update_annotations(font_size=12)
    return fig


def correction_heatmap(lab: Lab, index: int, rollout: Rollout) -> go.Figure:
    """One correction's weight per token; hover says truncated / masked and the gradient."""
    corr = lab.corrections[index]
    res = lab.results[index]
    state = np.full(lab.mask.shape, "", dtype=object)
    state[corr.truncated.numpy()] = "<br>truncated"
    state[corr.masked.numpy()] = "<br>masked (weight 0)"
    out_of = corr.masked & ~corr.counted
    state[out_of.numpy()] = "<br>rejected (left the denominator)"
    weights = corr.weights.double()
    top = float(weights[lab.mask].max()) if bool(lab.mask.any()) else 1.0
    fig = heatmap(
        weights,
        lab.mask.double(),
        rollout=rollout,
        title=f"{corr.framework} {corr.name}: the weight on each token's loss "
        "(x: masked or rejected, T: truncated)",
        quantity="weight",
        signed=False,
        zmax=max(top, 1.0),
        extra={"gradient without": lab.plain.grad, "gradient with": res.grad},
        hover_lines=state.tolist(),
    )
    marks = np.full(lab.mask.shape, "", dtype=object)
    marks[corr.truncated.numpy()] = "T"
    marks[corr.masked.numpy()] = "x"
    fig.update_traces(
        text=marks.astype(str), texttemplate="%{text}", textfont={"size": 10, "color": "#c0392b"}
    )
    return fig


def gradient_figure(lab: Lab, index: int) -> go.Figure:
    """Per token: d loss / d log pi_theta without (x) vs with (y) the correction."""
    corr = lab.corrections[index]
    m = lab.mask
    g0 = lab.plain.grad[m].numpy()
    g1 = lab.results[index].grad[m].numpy()
    status = np.where(
        corr.masked[m].numpy(), "masked", np.where(corr.truncated[m].numpy(), "truncated", "kept")
    )
    fig = go.Figure()
    for k, name in enumerate(("kept", "truncated", "masked")):
        sel = status == name
        fig.add_trace(
            go.Scattergl(
                x=g0[sel],
                y=g1[sel],
                mode="markers",
                name=name,
                marker={"color": OKABE_ITO[(2, 0, 5)[k]], "size": 6},
                hovertemplate=f"{name}<br>without %{{x:.3g}}<br>with %{{y:.3g}}<extra></extra>",
            )
        )
    lim = float(max(np.abs(g0).max(initial=0), np.abs(g1).max(initial=0))) or 1.0
    fig.add_trace(
        go.Scatter(
            x=[-lim, lim],
            y=[-lim, lim],
            mode="lines",
            showlegend=False,
            line={"color": "#999999", "dash": "dot"},
            hoverinfo="skip",
        )
    )
    fig.update_layout(
        title=title_style(f"Gradient per token, {corr.name}: without (x) vs with (y)"),
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        xaxis={"title": {"text": "d loss / d log pi, no correction"}},
        yaxis={"title": {"text": "with the correction"}},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
