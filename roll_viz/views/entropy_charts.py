"""The adaptive entropy target over training steps: the entropy against its target, the coefficient.

Takes run records (``lm.runfile.TrainRun``: ``steps[i].metrics`` with ``entropy`` and the
controller's ``ent_target``, ``ent_coef_applied``, ``ent_coef_next``, the names
``lm.train_batch`` records) and returns a figure; no Streamlit. Steps without the controller's
numbers are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.core.pipeline.entropy_control import METRIC_APPLIED as APPLIED
from roll_viz.core.pipeline.entropy_control import METRIC_NEXT as NEXT
from roll_viz.core.pipeline.entropy_control import METRIC_TARGET as GOAL
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.scales import title_style


def _points(run: Any, key: str) -> tuple[list[int], list[float]]:
    steps = [r for r in run.steps if NEXT in r.metrics]
    return [r.step for r in steps], [float(r.metrics[key]) for r in steps]


def has_entropy_target(runs: Sequence[Any]) -> bool:
    """Whether any run recorded the adaptive entropy target's numbers."""
    return any(NEXT in r.metrics for run in runs for r in run.steps[:1])


def entropy_target_figure(runs: Sequence[Any]) -> go.Figure:
    """Left: mean token entropy per step with the target dashed; right: the coefficient.

    The coefficient panel draws the one each step applied (solid; 0 until the entropy reached
    the target) and the one after the step's update (dotted).
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("entropy (nats), dashed: target", "entropy coefficient"),
        horizontal_spacing=0.1,
    )
    for i, run in enumerate(runs):
        color = OKABE_ITO[i % len(OKABE_ITO)]
        name = getattr(run.settings, "label", "") or f"run {i + 1}"
        xs, entropy = _points(run, "entropy")
        if not xs:
            continue
        _, target = _points(run, GOAL)
        _, applied = _points(run, APPLIED)
        _, after = _points(run, NEXT)
        line = {"color": color}
        fig.add_trace(
            go.Scatter(x=xs, y=entropy, mode="lines+markers", name=name, line=line),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=target,
                mode="lines",
                name=f"{name}: target",
                line={"color": color, "dash": "dash"},
                showlegend=False,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=applied,
                mode="lines+markers",
                name=f"{name}: applied",
                line=line,
                showlegend=False,
                hovertemplate="step %{x}<br>applied %{y:.4f}<extra></extra>",
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=after,
                mode="lines",
                name=f"{name}: after the step",
                line={"color": color, "dash": "dot"},
                showlegend=False,
                hovertemplate="step %{x}<br>after the update %{y:.4f}<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_layout(
        title=title_style("Adaptive entropy target (TRL PR #6140's rule)"),
        height=300,
        margin={"l": 50, "r": 20, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    fig.update_xaxes(title_text="step")
    return fig
