"""Figures and banner text for the normalisation matrix, the phantom advantages and group health.

Functions take the results of ``roll_viz.analysis.normalisation`` / ``group_health`` and return
``go.Figure`` or markdown text; they never call Streamlit and never compute pipeline math.
Colours: the comparison pages' Okabe-Ito palette, one colour and marker per prompt.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.group_health import GroupHealth, PolicyOutcome
from roll_viz.analysis.normalisation import LEVELS, NormMatrix, Phantom, cell_name
from roll_viz.views.compare_charts import OKABE_ITO, SYMBOLS, short


def matrix_figure(matrix: NormMatrix) -> go.Figure:
    """3 x 3 grid: rows = mean level, columns = std level, each answer's advantage as a dot.

    Each cell is titled with the method that uses it (``analysis.normalisation.CELL_METHODS``);
    each cell has its own y range (no std keeps reward units, a tiny group std can give 1e6).

    Args:
        matrix: ``normalisation_matrix`` of a batch.

    Returns:
        The figure; hover shows prompt, sample, reward and advantage.
    """
    # two short lines a cell: one long line ran into its neighbours' titles at a projector's size
    titles = [f"mean {m} / std {s}<br>{short(cell_name(m, s), 26)}" for m in LEVELS for s in LEVELS]
    fig = make_subplots(rows=3, cols=3, subplot_titles=titles, vertical_spacing=0.12)
    samples = matrix.samples
    prompts = list(dict.fromkeys(samples["prompt"]))
    for r, m in enumerate(LEVELS, start=1):
        for c, s in enumerate(LEVELS, start=1):
            cell = samples[(samples["mean"] == m) & (samples["std"] == s)]
            for k, prompt in enumerate(prompts):
                part = cell[cell["prompt"] == prompt]
                fig.add_trace(
                    go.Scatter(
                        x=[short(prompt, 16)] * len(part),
                        y=part["advantage"].to_numpy(dtype=float),
                        mode="markers",
                        marker={
                            "color": OKABE_ITO[k % len(OKABE_ITO)],
                            "symbol": SYMBOLS[k % len(SYMBOLS)],
                            "size": 9,
                        },
                        name=short(prompt, 24),
                        legendgroup=prompt,
                        showlegend=r == 1 and c == 1,
                        customdata=part[["sample", "reward"]].to_numpy(dtype=float),
                        hovertemplate=(
                            f"{short(prompt, 24)}, sample %{{customdata[0]:.0f}}<br>reward "
                            "%{customdata[1]:.4g}<br>advantage %{y:.4g}<extra></extra>"
                        ),
                    ),
                    row=r,
                    col=c,
                )
            fig.add_hline(y=0, line={"color": "#999999", "width": 1}, row=r, col=c)
    fig.update_annotations(font_size=11)
    # the legend names the prompts: per-cell tick labels only ran into the next row's titles
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(
        height=760,
        margin={"l": 50, "r": 20, "t": 60, "b": 40},
        title="Mean level (rows) x std level (columns) on the same rewards",
        legend={"orientation": "h", "y": -0.06},
    )
    return fig


def phantom_figure(phantom: Phantom) -> go.Figure:
    """Each answer's advantage under group std, no std and batch std, grouped by answer.

    Args:
        phantom: ``phantom_advantages``.

    Returns:
        Grouped bar chart; the all-fail group's bars under group std are as tall as real
        right/wrong differences.
    """
    table = phantom.table
    labels = [
        f"{p} #{i} ({'right' if c else 'wrong'}, {n:.0f} tok)"
        for i, (p, c, n) in enumerate(
            zip(table["prompt"], table["correct"], table["length"], strict=True)
        )
    ]
    fig = go.Figure()
    columns = [c for c in table.columns if c.startswith("A, ")]
    for k, column in enumerate(columns):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=table[column].to_numpy(dtype=float),
                name=column[3:],
                marker_color=OKABE_ITO[k],
                customdata=table[["reward"]].to_numpy(dtype=float),
                hovertemplate="%{x}<br>reward %{customdata[0]:.4g}<br>advantage %{y:.4g}"
                "<extra>" + column[3:] + "</extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        height=440,
        # the legend sits between the title and the plot (at y = 1.12 it ran over the title),
        # and the right margin holds the last slanted answer label
        margin={"l": 60, "r": 80, "t": 80, "b": 110},
        title="Reward = correct - length penalty: the all-fail group under three normalisations",
        yaxis_title="advantage",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01},
    )
    return fig


def health_banner_text(health: GroupHealth) -> str:
    """One-line markdown banner: group counts, the share without signal, near-flat groups.

    Args:
        health: ``group_health`` of a batch.

    Returns:
        Markdown text, e.g. "**8 groups**: 2 all-good, 3 all-bad, 3 mixed. 5 of 8 (62 %) give
        GRPO no signal."
    """
    c = health.counts
    parts = [f"{c['all-good']} all-good", f"{c['all-bad']} all-bad"]
    if c["flat"]:
        parts.append(f"{c['flat']} flat")
    parts.append(f"{c['mixed']} mixed")
    if c["single"]:
        parts.append(f"{c['single']} single")
    n = health.n_groups
    text = f"**{n} group{'s' if n != 1 else ''}**: {', '.join(parts)}."
    if n:
        share = health.no_signal / n
        text += f" {health.no_signal} of {n} ({share:.0%}) give GRPO no signal (all answers equal)."
    if health.near_flat:
        text += (
            f" {health.near_flat} mixed group{'s have' if health.near_flat != 1 else ' has'} a std "
            f"<= {health.eps:g}: a std filter drops {'them' if health.near_flat != 1 else 'it'}, "
            "an exact-equality filter does not."
        )
    return text


def health_table(health: GroupHealth) -> pd.DataFrame:
    """The per-group table for display: combined std next to each reward component's std."""
    columns = ["prompt", "n", "status", "mean", "std"]
    columns += [f"std {name}" for name in health.components]
    return health.groups[columns] if len(health.groups) else health.groups


def policies_figure(outcome: PolicyOutcome) -> go.Figure:
    """Per policy: the policy gradient on the other groups and the KL gradient on the flat ones.

    Args:
        outcome: ``zero_variance_policies``.

    Returns:
        Grouped bar chart (sums of |d loss / d logp| over tokens), with the denominator on hover.
    """
    t = outcome.table
    fig = go.Figure()
    series = (
        ("|policy grad|, other groups", "policy gradient, other groups", OKABE_ITO[0]),
        ("|KL grad|, zero-variance groups", "KL gradient, zero-variance groups", OKABE_ITO[3]),
        (
            "|policy grad|, zero-variance groups",
            "policy gradient, zero-variance groups",
            OKABE_ITO[1],
        ),
    )
    for column, name, colour in series:
        fig.add_trace(
            go.Bar(
                x=t["policy"],
                y=t[column].to_numpy(dtype=float),
                name=name,
                marker_color=colour,
                customdata=t[["tokens in the denominator", "loss"]].to_numpy(dtype=float),
                hovertemplate="%{x}<br>" + name + " %{y:.4g}<br>denominator %{customdata[0]:.0f}"
                " tokens<br>loss %{customdata[1]:.4g}<extra></extra>",
            )
        )
    top = float(np.nanmax(t[[s[0] for s in series]].to_numpy(dtype=float))) if len(t) else 1.0
    fig.update_layout(
        barmode="group",
        height=440,
        margin={"l": 60, "r": 20, "t": 80, "b": 80},  # legend under the title, as phantom_figure
        title="What each zero-variance policy leaves of the gradient (sum of |dL/dlogp|)",
        yaxis={"title": "sum of |d loss / d logp|", "range": [0, 1.15 * (top or 1.0)]},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.01},
    )
    return fig
