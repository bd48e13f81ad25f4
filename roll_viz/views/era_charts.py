"""Figures of the Eras page: the recipes of record side by side, MaxRL beside GRPO, the KL view.

Functions take the results of ``roll_viz.analysis.era_diff`` / ``kl_placement`` and return
``go.Figure``; they never call Streamlit and never compute pipeline math (the KL curves are
drawn from the per-token table, not recomputed). Colours: the comparison pages' Okabe-Ito
palette, one colour per recipe / estimator / placement.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.era_diff import EraDiff, MaxRLComparison
from roll_viz.analysis.kl_placement import VARIANT_LABELS, KLView
from roll_viz.views.compare_charts import OKABE_ITO, short

#: Per-sample columns of ``EraDiff.samples`` drawn as panels (column stem, panel title). The
#: middle panel is the answer's weight in the loss, not its signed part of the loss value: at
#: ratio 1 that part equals the gradient panel below it, bar for bar, and read as a negative share
ERA_PANELS: tuple[tuple[str, str], ...] = (
    ("A", "advantage per answer"),
    ("loss weight", "each answer's share of the loss's weight (its tokens' weights summed)"),
    ("gradient", "sum over its tokens of d loss / d log pi"),
)
#: the panel drawn as shares (each recipe's weights over its own total): a sum (Tinker) and a
#: mean then read on one scale, and show that they weigh the answers alike
SHARE_PANEL = "loss weight"


def era_bars(diff: EraDiff) -> go.Figure:
    """Side-by-side bars per answer, one colour per recipe, one panel per quantity.

    A filtered answer (its group dropped before batching) has no bar in that recipe and is marked
    "filtered" in the hover.

    Args:
        diff: ``diff_eras`` on a batch.

    Returns:
        The figure (traces ordered panel by panel, recipe by recipe).
    """
    s = diff.samples
    labels = [f"{i}: {short(p, 14)}" for i, p in zip(s["sample"], s["prompt"], strict=True)]
    fig = make_subplots(
        rows=len(ERA_PANELS),
        cols=1,
        shared_xaxes=True,
        subplot_titles=[t for _, t in ERA_PANELS],
        vertical_spacing=0.08,
    )
    for r, (stem, _) in enumerate(ERA_PANELS, start=1):
        for k, er in enumerate(diff.runs.values()):
            tag = er.era.short
            filtered = s[f"filtered [{tag}]"].tolist()
            values = s[f"{stem} [{tag}]"]
            if stem == SHARE_PANEL and float(values.sum()) > 0:
                values = values / float(values.sum())
            ys = [None if f else float(v) for v, f in zip(values, filtered, strict=True)]
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=ys,
                    name=er.era.label,
                    legendgroup=er.era.key,
                    showlegend=r == 1,
                    marker={"color": OKABE_ITO[k % len(OKABE_ITO)]},
                    customdata=[["filtered" if f else ""] for f in filtered],
                    hovertemplate=(
                        f"{short(er.era.label, 28)}<br>%{{x}}<br>{stem} %{{y:.4g}} "
                        "%{customdata[0]}<extra></extra>"
                    ),
                ),
                row=r,
                col=1,
            )
        fig.add_hline(y=0, line={"color": "#999999", "width": 1}, row=r, col=1)
    fig.update_layout(
        barmode="group",
        height=650,
        # the legend under the answers' labels: at y = 1.08 it ran over the title
        margin={"l": 50, "r": 20, "t": 60, "b": 70},
        title=f"The recipes of record on the same batch ({short(diff.framework)})",
        legend={"orientation": "h", "yanchor": "top", "y": -0.06},
    )
    return fig


def maxrl_bars(cmp: MaxRLComparison) -> go.Figure:
    """Advantage per answer under GRPO and MaxRL, grouped by answer.

    Args:
        cmp: ``maxrl_vs_grpo``.

    Returns:
        The figure: one bar trace per estimator.
    """
    s = cmp.samples
    labels = [f"{i}: {short(p, 14)}" for i, p in zip(s["sample"], s["prompt"], strict=True)]
    fig = go.Figure()
    for k, col in enumerate(("A GRPO", "A MaxRL")):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=s[col].to_numpy(dtype=float),
                name=col[2:],
                marker={"color": OKABE_ITO[k]},
                customdata=s[["score"]].to_numpy(dtype=float),
                hovertemplate=(
                    f"{col[2:]}<br>%{{x}}<br>reward %{{customdata[0]:.4g}}<br>A %{{y:.4g}}"
                    "<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=0, line={"color": "#999999", "width": 1})
    fig.update_layout(
        barmode="group",
        height=410,
        margin={"l": 50, "r": 20, "t": 80, "b": 40},  # the legend between title and plot
        title="GRPO divides by the group's std, MaxRL by its pass rate",
        yaxis_title="advantage",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01},
    )
    return fig


#: Columns of ``KLView.tokens`` drawn against the log ratio, with their legend names.
KL_SERIES: tuple[tuple[str, str], ...] = (
    ("value", "value k(x)"),
    ("as a loss", "d/d log pi as a loss: beta k'(x)"),
    ("in the reward", "d/d log pi in the reward: beta * KL to go"),
)


def kl_token_figure(view: KLView, variant: str) -> go.Figure:
    """One variant per token: value and both gradients against x = log pi - log pi_ref.

    Args:
        view: ``kl_view`` of a batch.
        variant: one of its variants.

    Returns:
        The figure: one marker trace per series, hover names the answer and the token.
    """
    part = view.tokens[view.tokens["variant"] == variant].sort_values("log ratio")
    fig = go.Figure()
    custom = part[["sample", "t"]].to_numpy(dtype=float)
    texts = [short(t, 16) for t in part["token"]]
    for k, (col, name) in enumerate(KL_SERIES):
        fig.add_trace(
            go.Scatter(
                x=part["log ratio"].to_numpy(dtype=float),
                y=part[col].to_numpy(dtype=float),
                mode="markers+lines" if col != "in the reward" else "markers",
                line={"width": 1},
                marker={"color": OKABE_ITO[k], "size": 7},
                name=name,
                text=texts,
                customdata=custom,
                hovertemplate=(
                    "answer %{customdata[0]:.0f}, token %{customdata[1]:.0f} (%{text})<br>"
                    f"x %{{x:.4g}}<br>{col} %{{y:.4g}}<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=0, line={"color": "#999999", "width": 1})
    fig.add_vline(x=0, line={"color": "#999999", "width": 1})
    fig.update_layout(
        height=420,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        title=f"{short(VARIANT_LABELS.get(variant, variant), 40)}, beta = {view.beta:g}",
        xaxis_title="x = log pi - log pi_ref",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def kl_summary_bars(view: KLView) -> go.Figure:
    """Mean |gradient| per token of every variant, as a loss and in the reward, side by side.

    Args:
        view: ``kl_view`` of a batch.

    Returns:
        The figure: two bar traces over the variants.
    """
    s = view.summary
    fig = go.Figure()
    for k, col in enumerate(("mean |grad| as a loss", "mean |grad| in the reward")):
        fig.add_trace(
            go.Bar(
                x=s["variant"].tolist(),
                y=s[col].to_numpy(dtype=float),
                name=col.replace("mean |grad| ", ""),
                marker={"color": OKABE_ITO[k + 1]},
                hovertemplate=f"%{{x}}<br>{col} %{{y:.4g}}<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        height=370,
        margin={"l": 50, "r": 20, "t": 80, "b": 40},  # the legend between title and plot
        title="Mean |d/d log pi| per token",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01},
    )
    return fig


def in_reward_share_bars(share_per_answer: list[float], labels: list[str], title: str) -> go.Figure:
    """Per answer, the in-reward KL's share of sum_t d loss / d log pi (through the advantage).

    Args:
        share_per_answer: (B,) sums over each answer's tokens of ``ThroughAdvantage.share``.
        labels: (B,) answer labels.
        title: figure title (names the framework and estimator).

    Returns:
        The figure: one bar trace.
    """
    fig = go.Figure(
        go.Bar(
            x=[short(x, 24) for x in labels],
            y=share_per_answer,
            marker={"color": OKABE_ITO[2]},
            hovertemplate="%{x}<br>KL share of d loss / d log pi %{y:.4g}<extra></extra>",
        )
    )
    fig.add_hline(y=0, line={"color": "#999999", "width": 1})
    fig.update_layout(
        height=320,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        title=short(title, 90),
        yaxis_title="sum over tokens",
        xaxis={"automargin": True},  # slanted answer labels were cut at the bottom
    )
    return fig
