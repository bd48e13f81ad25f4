"""Plotly figures for the comparison pages (Local vs global, Sensitivity, Frameworks).

Functions take the tables built by ``roll_viz.analysis`` and return ``go.Figure``; they never call
Streamlit and never compute pipeline math (only reshape for display). Colour rules: a
colour-blind-safe qualitative palette (Okabe-Ito) with a marker symbol per prompt; a sequential
scale (Viridis) for non-negative summaries; a fixed symmetric diverging scale (RdBu, white at 0)
for signed quantities. Every colour is backed by a number on hover.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.views.scales import ADVANTAGE_RANGE

#: Okabe-Ito colours (colour-blind safe), the low-contrast yellow moved to the end.
OKABE_ITO: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#56B4E9",
    "#CC79A7",
    "#000000",
    "#F0E442",
)
#: Marker symbols cycled with the colours, so prompts differ in shape as well as colour.
SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star")
DIVERGING = "RdBu"
#: The app's fixed symmetric advantage colour range (widened only if a value falls outside).
SEQUENTIAL = "Viridis"

#: Display names of the sweep metrics (columns of ``analysis.sweep``) and whether they are signed.
METRICS: dict[str, tuple[str, bool]] = {
    "spread": ("advantage spread (std over valid tokens)", False),
    "sign_flips": ("fraction of tokens whose sign flipped vs. the current setting", False),
    "agreement": ("estimator agreement (Pearson r over valid tokens)", True),
    "sign_agreement": ("estimator sign agreement (fraction of tokens)", False),
}
#: Axis titles of the sweep parameters.
PARAM_TITLES: dict[str, str] = {
    "beta": "beta (KL coefficient)",
    "gamma": "gamma (discount)",
    "lam": "lambda (GAE)",
    "G": "G (samples per prompt)",
}


def short(text: object, n: int = 32) -> str:
    """Display text cut to ``n`` characters with an ellipsis, HTML-escaped for plotly labels."""
    text = str(text)
    text = text if len(text) <= n else text[: n - 3].rstrip() + "..."
    return html.escape(text)


def _layout(fig: go.Figure, height: int = 420) -> go.Figure:
    fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


def _symmetric_limit(values: np.ndarray, floor: float = 1.0) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(max(floor, finite.max())) if finite.size else floor


def local_global_scatter(samples: pd.DataFrame) -> go.Figure:
    """Local vs global advantage of every sample, one colour and symbol per prompt.

    Args:
        samples: ``analysis.LocalGlobal.samples`` (columns prompt, sample, reward, group mean,
            group std, local advantage, global advantage, ...).

    Returns:
        Scatter with one trace per prompt plus the diagonal ``local = global``.
    """
    fig = go.Figure()
    both = samples[["local advantage", "global advantage"]].to_numpy(dtype=float)
    lim = _symmetric_limit(both, floor=1.0) * 1.1
    fig.add_trace(
        go.Scatter(
            x=[-lim, lim],
            y=[-lim, lim],
            mode="lines",
            line={"color": "#888888", "dash": "dash", "width": 1},
            name="local = global",
            hoverinfo="skip",
        )
    )
    for k, (prompt, rows) in enumerate(samples.groupby("prompt", sort=False)):
        custom = rows[["sample", "reward", "group mean", "group std"]].to_numpy(dtype=float)
        fig.add_trace(
            go.Scatter(
                x=rows["global advantage"],
                y=rows["local advantage"],
                mode="markers",
                name=short(prompt),
                marker={
                    "color": OKABE_ITO[k % len(OKABE_ITO)],
                    "symbol": SYMBOLS[k % len(SYMBOLS)],
                    "size": 12,
                    "line": {"color": "white", "width": 1},
                },
                customdata=custom,
                text=[html.escape(str(prompt))] * len(rows),
                hovertemplate=(
                    "prompt %{text}, sample %{customdata[0]:.0f}<br>reward %{customdata[1]:.4g}"
                    "<br>group mean %{customdata[2]:.4g}, group std %{customdata[3]:.4g}"
                    "<br>global advantage %{x:.4f}<br>local advantage %{y:.4f}<extra></extra>"
                ),
            )
        )
    fig.update_xaxes(title_text="global advantage (batch mean / batch std)", range=[-lim, lim])
    fig.update_yaxes(title_text="local advantage (group mean / group std)", range=[-lim, lim])
    fig.update_layout(
        title="Each sample: local vs global advantage",
        legend={"title": {"text": "prompt"}, "orientation": "h", "y": -0.22},
    )
    return _layout(fig, 520)


#: what a group whose rewards are all equal gets instead of batch std / 1e-6 (e.g. "4.79e+5x")
NO_SIGNAL = "no signal (std 0)"


def scale_labels(groups: pd.DataFrame) -> list[str]:
    """The "local / global scale" of each group as text: "18.1x", or ``NO_SIGNAL`` for std 0.

    A group whose rewards are all equal has std 0: local normalization gives every answer an
    advantage of exactly 0, so its ratio batch std / (0 + eps) (e.g. 4.79e+5) means nothing.
    A group of one has no std ("undefined (n = 1)").
    """
    out = []
    for std, scale in zip(groups["group std"], groups["local / global scale"], strict=True):
        std, scale = float(std), float(scale)
        if not np.isfinite(std):
            out.append("undefined (n = 1)")
        elif std == 0.0:
            out.append(NO_SIGNAL)
        else:
            out.append(f"{scale:.3g}x")
    return out


def group_std_bars(groups: pd.DataFrame) -> go.Figure:
    """Group std of every prompt next to the batch std (the divisor each normalization uses).

    Args:
        groups: ``analysis.LocalGlobal.groups`` (columns prompt, n, group mean, group std,
            batch std, local / global scale).

    Returns:
        Bar chart, one bar per prompt in the prompt's colour, with the batch std as a line.
    """
    names = [short(p, 24) for p in groups["prompt"]]
    colours = [OKABE_ITO[k % len(OKABE_ITO)] for k in range(len(groups))]
    custom = groups[["n", "group mean"]].to_numpy(dtype=float).tolist()
    std = groups["group std"].to_numpy(dtype=float)
    for row, scale in zip(custom, scale_labels(groups), strict=True):
        row.append(scale)
    fig = go.Figure(
        go.Bar(
            x=names,
            y=np.nan_to_num(std, nan=0.0),
            marker_color=colours,
            customdata=custom,
            text=[f"{s:.3g}" if np.isfinite(s) else "undefined (n=1)" for s in std],
            textposition="outside",
            name="group std",
            hovertemplate=(
                "prompt %{x}<br>group std %{text}<br>n %{customdata[0]:.0f}, "
                "mean %{customdata[1]:.4g}<br>local / global scale: "
                "%{customdata[2]}<extra></extra>"
            ),
        )
    )
    batch_std = float(groups["batch std"].iloc[0]) if len(groups) else float("nan")
    if np.isfinite(batch_std):
        fig.add_hline(
            y=batch_std,
            line={"color": "#444444", "dash": "dash"},
            annotation_text=f"batch std {batch_std:.3g}",
            annotation_position="top right",
        )
    top = np.nanmax(np.append(std, batch_std)) if len(groups) else 1.0
    fig.update_yaxes(title_text="std of rewards (unbiased)", range=[0, 1.25 * (top or 1.0)])
    fig.update_xaxes(title_text="prompt")
    fig.update_layout(title="Group std per prompt vs the batch std", showlegend=False)
    return _layout(fig, 380)


def sensitivity_lines(table: pd.DataFrame, param: str, current: float | None = None) -> go.Figure:
    """Summary statistics along a 1-D sweep, one panel per metric.

    Args:
        table: ``analysis.sweep`` output with column ``param`` and the ``METRICS`` columns.
        param: the swept parameter (``beta``, ``gamma``, ``lam`` or ``G``).
        current: the sidebar's value of ``param``, marked with a vertical line.

    Returns:
        Figure with one row of three panels (spread, sign flips, agreement).
    """
    panels = ("spread", "sign_flips", "agreement")
    titles = ("spread of advantages", "sign flips vs. now", "agreement of estimators")
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.08)
    x = table[param].to_numpy(dtype=float)
    for col, metric in enumerate(panels, start=1):
        y = table[metric].to_numpy(dtype=float)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers",
                name=METRICS[metric][0],
                line={"color": OKABE_ITO[col - 1]},
                hovertemplate=f"{param} %{{x:.4g}}<br>{metric} %{{y:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=PARAM_TITLES.get(param, param), row=1, col=col)
        if current is not None:
            fig.add_vline(x=current, line={"color": "#888888", "dash": "dot"}, row=1, col=col)
    fig.update_yaxes(title_text="std of advantages", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="fraction of tokens", range=[0, 1.02], row=1, col=2)
    fig.update_yaxes(title_text="Pearson r", range=[-1.02, 1.02], row=1, col=3)
    fig.update_annotations(font_size=12)
    fig.update_layout(showlegend=False, title=f"Sweep over {PARAM_TITLES.get(param, param)}")
    return _layout(fig, 380)


def sensitivity_heatmap(table: pd.DataFrame, param_x: str, param_y: str, metric: str) -> go.Figure:
    """One summary statistic over a 2-D grid of two parameters.

    Args:
        table: ``analysis.sweep`` output with columns ``param_x``, ``param_y`` and ``metric``.
        param_x: parameter on the x axis.
        param_y: parameter on the y axis.
        metric: a key of ``METRICS``; signed metrics get RdBu in [-1, 1], others Viridis.

    Returns:
        Heatmap with a colourbar naming the metric and its range.
    """
    grid = table.pivot_table(index=param_y, columns=param_x, values=metric, sort=True)
    title, signed = METRICS[metric]
    z = grid.to_numpy(dtype=float)
    scale: dict = {"colorscale": DIVERGING, "zmid": 0.0, "zmin": -1.0, "zmax": 1.0}
    if not signed:
        finite = z[np.isfinite(z)]
        hi = float(finite.max()) if finite.size else 1.0
        zmax = 1.0 if metric in {"sign_flips", "sign_agreement"} else max(hi, 1e-12)
        scale = {"colorscale": SEQUENTIAL, "zmin": 0.0, "zmax": zmax}
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"{v:.4g}" for v in grid.columns],
            y=[f"{v:.4g}" for v in grid.index],
            colorbar={"title": {"text": f"{metric}<br>[{scale['zmin']:.3g}, {scale['zmax']:.3g}]"}},
            hoverongaps=False,
            hovertemplate=(
                f"{param_x} %{{x}}<br>{param_y} %{{y}}<br>{metric} %{{z:.4f}}<extra></extra>"
            ),
            **scale,
        )
    )
    fig.update_xaxes(title_text=PARAM_TITLES.get(param_x, param_x), type="category")
    fig.update_yaxes(title_text=PARAM_TITLES.get(param_y, param_y), type="category")
    fig.update_layout(title=title)
    return _layout(fig, 460)


def frameworks_heatmap(table: pd.DataFrame, frameworks: Sequence[str]) -> go.Figure:
    """Per-sample mean advantage in each dialect, side by side (fixed symmetric RdBu).

    Args:
        table: ``analysis.FrameworkComparison.samples`` with columns ``prompt``, ``sample`` and
            ``advantage <fw>`` for each framework.
        frameworks: the dialects to show, as columns of the heatmap.

    Returns:
        Heatmap (rows = samples, columns = dialects) with the numbers printed in the cells.
    """
    cols = [f"advantage {fw}" for fw in frameworks]
    z = table[cols].to_numpy(dtype=float)
    lim = _symmetric_limit(z, floor=ADVANTAGE_RANGE)
    prompts = list(dict.fromkeys(table["prompt"]))
    index = {p: k for k, p in enumerate(prompts)}
    labels = [  # the p0/s2 names every page uses (text.sample_labels)
        f"p{index[p]}/s{int(s)}" for p, s in zip(table["prompt"], table["sample"], strict=True)
    ]
    full = [html.escape(str(p)) for p in table["prompt"]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(frameworks),
            y=labels,
            colorscale=DIVERGING,
            zmid=0.0,
            zmin=-lim,
            zmax=lim,
            text=np.vectorize(lambda v: "" if not np.isfinite(v) else f"{v:.3f}")(z),
            texttemplate="%{text}",
            hoverongaps=False,
            customdata=[[f] * z.shape[1] for f in full],
            colorbar={"title": {"text": f"mean advantage<br>[{-lim:.3g}, {lim:.3g}]"}},
            hovertemplate=(
                "%{y}: %{customdata}<br>dialect %{x}<br>mean advantage %{z:.6f}<extra></extra>"
            ),
        )
    )
    fig.update_yaxes(title_text="sample", autorange="reversed", type="category", automargin=True)
    fig.update_xaxes(title_text="dialect")
    fig.update_layout(title="Mean advantage per sample in each dialect")
    _layout(fig, max(380, 26 * len(table) + 160))
    fig.update_layout(margin={"l": 120})
    return fig


def frameworks_diff_bars(summary: pd.DataFrame) -> go.Figure:
    """Max absolute advantage difference of each dialect against the reference dialect.

    Args:
        summary: ``analysis.FrameworkComparison.summary`` with columns ``dialect`` and
            ``max |diff| advantage`` (and ``max |diff| reward``).

    Returns:
        Grouped bar chart (log-free, numbers printed on the bars).
    """
    fig = go.Figure()
    for k, col in enumerate(("max |diff| reward", "max |diff| advantage")):
        vals = summary[col].to_numpy(dtype=float)
        fig.add_trace(
            go.Bar(
                x=summary["dialect"],
                y=vals,
                name=col.replace("max |diff| ", "max |difference| of "),
                marker_color=OKABE_ITO[k],
                text=[f"{v:.3g}" for v in vals],
                textposition="outside",
                textfont={"size": 13},
                hovertemplate="dialect %{x}<br>" + col + " %{y:.6g}<extra></extra>",
            )
        )
    diffs = summary[["max |diff| reward", "max |diff| advantage"]].to_numpy(float)
    top = float(np.nanmax(diffs)) if np.isfinite(diffs).any() else 1.0
    fig.update_yaxes(title_text="max |difference| vs. reference", range=[0, 1.2 * (top or 1.0)])
    fig.update_xaxes(title_text="dialect")
    fig.update_layout(
        barmode="group",
        title="Distance from the reference dialect",
        legend={"orientation": "h", "y": -0.3},
    )
    return _layout(fig, 400)
