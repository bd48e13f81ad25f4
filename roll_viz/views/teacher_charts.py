"""Figures of the Teacher-as-reference page: the teacher's signal per token and per answer."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from roll_viz.analysis.teacher_signal import TeacherSignal
from roll_viz.views.chips import colorbar_html, token_chips_html
from roll_viz.views.compare_charts import OKABE_ITO, short
from roll_viz.views.scales import SIGNED_SCALE


def signal_bars(signal: TeacherSignal, mode_label: str, labels: list[str]) -> go.Figure:
    """Per answer: the reward's advantage and the teacher's (token means), grouped.

    Args:
        signal: ``teacher_signal`` of the batch.
        mode_label: how the teacher's advantage was formed (the teacher's legend entry).
        labels: (B,) the answers' labels (``text.sample_labels``).

    Returns:
        The figure: one bar trace per signal.
    """
    a = signal.answers
    prompts = [short(p, 40) for p in a["prompt"]]
    fig = go.Figure()
    series = (("A reward", "reward"), ("A teacher", f"teacher ({mode_label})"))
    for k, (col, name) in enumerate(series):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=a[col].to_numpy(dtype=float),
                name=name,
                marker={"color": OKABE_ITO[k]},
                customdata=list(
                    zip(a["reward"].tolist(), a["reverse KL"].tolist(), prompts, strict=True)
                ),
                hovertemplate=(
                    f"{name}<br>%{{x}}: %{{customdata[2]}}<br>reward %{{customdata[0]:.4g}}<br>"
                    "reverse KL (sum) %{customdata[1]:.4g}<br>mean A %{y:.4g}<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=0, line={"color": "#999999", "width": 1})
    fig.update_layout(
        barmode="group",
        height=380,
        margin={"l": 50, "r": 20, "t": 80, "b": 70},
        title={"text": "Mean advantage per answer", "x": 0, "xanchor": "left"},
        yaxis_title="mean A over the answer",
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
    )
    return fig


def signal_scale(signal: TeacherSignal) -> float:
    """One symmetric colour bound for every answer's chips: the largest |teacher A| (>= 1e-6)."""
    top = float(signal.opd.advantages.abs().max()) if signal.opd.advantages.numel() else 0.0
    return top if math.isfinite(top) and top > 1e-6 else 1e-6


def chips_key_html(bound: float) -> str:
    """The key to the answers' token colours: red = the teacher liked it less, blue = more."""
    return colorbar_html(
        SIGNED_SCALE, -bound, bound, "teacher advantage (red: the teacher liked the token less):"
    )


def answer_chips_html(signal: TeacherSignal, tokens: list[str], b: int, bound: float) -> str:
    """One answer's tokens coloured by the teacher's advantage (blue: the teacher liked it more).

    The tooltip shows the advantage; the colour scale is the same for every answer (``bound``).
    """
    n = len(tokens)
    values = signal.opd.advantages[b, :n].tolist()
    return token_chips_html(
        tokens, values, SIGNED_SCALE, vmin=-bound, vmax=bound, name="teacher advantage"
    )
