"""Lesson figures for a projector: the class's votes, each gate's figure, a fix gate's runs.

A fix gate shows its recorded collapsing run, then the class's top choices side by side.
Sized for 1280 x 720 on a light background, with type readable from the back of a room.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.class_gain import Gain
from roll_viz.analysis.lesson_answers import GateResult, Outcome
from roll_viz.views.scales import title_style as _title
from roll_viz.views.text import visible_whitespace

#: projector type sizes (px)
BIG_FONT = 24
TICK_FONT = 20
RIGHT = "#1a9850"  # the real answer's bar
OTHER = "#9e9e9e"
ROUND_COLORS = {1: "#4575b4", 2: "#f46d43"}
#: the class's gain: first vote, after discussion, the follow-up alone
GAIN_COLORS = ("#4575b4", "#f46d43", "#1a9850")
NUMBER_BINS = 12


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin={"l": 20, "r": 20, "t": 60, "b": 40},
        title=_title(title),
        font={"size": TICK_FONT},
        title_font={"size": BIG_FONT},
        legend={"orientation": "h", "y": -0.12, "x": 0.5, "xanchor": "center"},
    )
    return fig


def _short(label: str, limit: int = 60) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def vote_bars(
    labels: Sequence[str],
    rounds: Mapping[int, Mapping[float, int]],
    correct: int | Collection[int] | None,
) -> go.Figure:
    """How many voted for each option, per round, the real answer's option in green.

    Args:
        labels: the options as the phones showed them.
        rounds: round (1, 2) -> option index -> count; an empty round is left out.
        correct: the real answer's option, or the right options (a fix gate's every fix).

    Returns:
        A horizontal bar chart (option labels on the left, counts at the bars' ends).
    """
    fig = go.Figure()
    right = {correct} if isinstance(correct, int) else set(correct or ())
    shown = [r for r in sorted(rounds) if sum(rounds[r].values())]
    names = [("✔ " if i in right else "") + _short(lab) for i, lab in enumerate(labels)]
    for rnd in shown:
        counts = [int(rounds[rnd].get(float(i), 0)) for i in range(len(labels))]
        colors = [RIGHT if i in right else ROUND_COLORS.get(rnd, OTHER) for i in range(len(labels))]
        fig.add_trace(
            go.Bar(
                y=names,
                x=counts,
                orientation="h",
                name="first vote" if rnd == 1 else "after discussion",
                marker_color=colors,
                marker_pattern_shape="" if rnd == 1 else "/",
                text=counts,
                textposition="outside",
                textfont={"size": BIG_FONT},
            )
        )
    top = max([0, *(max(r.values(), default=0) for r in rounds.values())])
    fig.update_layout(barmode="group", yaxis={"autorange": "reversed"})
    fig.update_xaxes(
        title_text="votes", range=[0, max(1, top) * 1.2], dtick=max(1, math.ceil(top / 5))
    )
    height = min(480, 180 + 40 * len(labels) * max(1, len(shown)))
    return _layout(fig, "Votes (green: the answer)", height=height)


def vote_histogram(
    rounds: Mapping[int, Mapping[float, int]], value: float, low: float, high: float
) -> go.Figure:
    """A number gate's votes as a histogram per round, the real value as a green line."""
    fig = go.Figure()
    size = (high - low) / NUMBER_BINS
    for rnd in sorted(rounds):
        xs = [v for v, n in rounds[rnd].items() for _ in range(int(n))]
        if not xs:
            continue
        fig.add_trace(
            go.Histogram(
                x=xs,
                xbins={"start": low, "end": high + 1e-12, "size": size},
                name="first vote" if rnd == 1 else "after discussion",
                marker_color=ROUND_COLORS.get(rnd, OTHER),
                opacity=0.75,
            )
        )
    fig.add_vline(x=value, line_color=RIGHT, line_width=5)
    fig.add_annotation(
        x=value,
        y=1,
        yref="paper",
        text=f"pipeline: {value:.3g}",
        showarrow=False,
        font={"size": BIG_FONT, "color": RIGHT},
        yanchor="bottom",
    )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(range=[low, high], title_text="answer")
    fig.update_yaxes(title_text="votes")
    return _layout(fig, "Votes")


def _answer_labels(result: GateResult) -> list[str]:
    n = len(result.env.get("scores", []))
    return [f"answer {i + 1}" for i in range(n)]


def _bars(labels: Sequence[str], values: Sequence[float], title: str, axis: str) -> go.Figure:
    colors = ["#2166ac" if v >= 0 else "#b2182b" for v in values]
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=list(values),
            marker_color=colors,
            text=[f"{v:.3g}" for v in values],
            textposition="outside",
            textfont={"size": TICK_FONT},
        )
    )
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_yaxes(title_text=axis)
    return _layout(fig, title)


def gate_figure(result: GateResult) -> go.Figure | None:
    """The one figure that explains a gate's answer (None for ``figure = "none"``)."""
    env, kind = result.env, result.gate.figure
    if kind == "none":
        return None
    if kind == "episodes" or "token_push" in env:
        labels = list(result.source.responses)
        if len(env["turns"]) == 1:
            # token strings are model-like text: escaped (Plotly reads tags in tick labels)
            shown = [f"{i}: {html.escape(visible_whitespace(t))}" for i, t in enumerate(labels)]
            return _bars(shown, env["token_push"], "Push on each token (-dL/dlog pi)", "push")
        shown = [f"{i + 1}: {html.escape(t)}" for i, t in enumerate(labels)]
        return _bars(shown, env["first_advantage"], "First-turn advantage", "advantage")
    if kind == "training" or "run_kl" in env:
        steps = list(range(len(env["run_kl"])))
        fig = make_subplots(specs=[[{"secondary_y": True}]])
        fig.add_trace(
            go.Scatter(x=steps, y=env["run_reward"], name="mean reward", line={"width": 4}),
            secondary_y=False,
        )
        fig.add_trace(
            go.Scatter(x=steps, y=env["run_kl"], name="KL(policy || reference)", line={"width": 4}),
            secondary_y=True,
        )
        fig.update_xaxes(title_text="training step")
        fig.update_yaxes(title_text="reward", secondary_y=False)
        fig.update_yaxes(title_text="KL", secondary_y=True)
        return _layout(fig, "Reward and KL per step")
    labels = _answer_labels(result)
    if kind == "rewards":
        return _bars(labels, env["scores"], "Reward of each answer", "reward")
    if kind == "kl":
        return _bars(labels, env["kl_mean"], "Mean KL per token", "KL")
    if kind == "local_global" and "local_adv" in env:
        fig = go.Figure(
            [
                go.Bar(x=labels, y=env["local_adv"], name="local (per prompt)"),
                go.Bar(x=labels, y=env["global_adv"], name="global (whole batch)"),
            ]
        )
        fig.update_layout(barmode="group")
        fig.add_hline(y=0, line_color="#444", line_width=1)
        return _layout(fig, "Advantage: local vs global")
    if kind == "update" and "grad_coef" in env:
        first = [row[0] if row else 0.0 for row in env["grad_coef"]]
        return _bars(
            labels,
            first,
            f"First token's gradient coefficient (loss = {env['loss']:.3g})",
            "dL/dlogp",
        )
    return _bars(labels, env["advantage"], "Advantage (first token)", "advantage")


def class_gain(gains: Sequence[Gain]) -> go.Figure:
    """Share right per question: first vote, after discussion, and the follow-up alone.

    Args:
        gains: ``analysis.class_gain.class_gain``'s rows (a question nobody answered in a round
            has no bar there).

    Returns:
        Grouped bars, one group per question (its id on the axis), shares in percent.
    """
    fig = go.Figure()
    names = ("first vote", "after discussion", "follow-up, alone")
    for j, (name, color) in enumerate(zip(names, GAIN_COLORS, strict=True)):
        shares = [(g.first, g.discussed, g.followup)[j] for g in gains]
        fig.add_bar(
            name=name,
            x=[g.gate for g in gains],
            y=[None if v is None else 100.0 * v for v in shares],
            marker_color=color,
            text=["" if v is None else f"{v:.0%}" for v in shares],
            textposition="outside",
        )
    fig.update_yaxes(range=[0, 110], title="right answers (%)")
    return _layout(fig, "What the class learned", height=420)


# ---------------------------------------------------------------------------------------------
# A fix gate: the collapsing run, then the class's top choices' runs side by side. Every curve is
# a recorded run's per-step metric (``lesson_answers.run_env``); nothing is simulated. Choice
# labels come from a lesson file (untrusted): HTML-escaped, so plotly shows them as typed.
# ---------------------------------------------------------------------------------------------

#: the curves of a run: (name in ``run_env``, axis title)
METRICS = (
    ("run_reward", "reward"),
    ("run_kl", "KL to ref."),
    ("run_entropy", "entropy"),
    ("run_length", "length"),
)
COLLAPSE = "#9e9e9e"  # the collapsing run, dashed, in every panel
FIXED = "#1a9850"
NOT_FIXED = "#d73027"
LETTERS = "ABCDEFGH"  # as the phones and the teacher's options letter them


def _steps(env: Mapping[str, Any]) -> list[int]:
    return list(range(len(env["run_reward"])))


def run_curves(env: Mapping[str, Any], title: str) -> go.Figure:
    """The collapsing run's reward, KL, entropy and length per step, side by side."""
    fig = make_subplots(rows=1, cols=len(METRICS), subplot_titles=[t for _, t in METRICS])
    for col, (name, _) in enumerate(METRICS, start=1):
        fig.add_trace(
            go.Scatter(
                x=_steps(env),
                y=env[name],
                mode="lines",
                line={"color": NOT_FIXED, "width": 4},
                showlegend=False,
                name=name,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="step", row=1, col=col)
    fig.update_yaxes(rangemode="tozero")  # from 0: a dip in length is not a collapse
    fig = _layout(fig, html.escape(title, quote=False), height=340)
    fig.update_annotations(font={"size": TICK_FONT})
    return fig


def fix_outcomes(
    base: Mapping[str, Any], outcomes: Sequence[Outcome], base_label: str
) -> go.Figure:
    """The chosen changes' recorded runs side by side, each against the collapsing run.

    Args:
        base: the collapsing run's names (``run_env``).
        outcomes: the choices to show (the class's top choices), one column each.
        base_label: the collapsing run's name in the legend.

    Returns:
        Rows reward, KL, entropy, length; one column per choice, titled with its letter, label
        and verdict; a row shares its y axis, so the columns compare at a glance.
    """
    titles = []
    for o in outcomes:
        verdict = "fixed" if o.fixed else "still collapses"
        label = textwrap.wrap(f"{LETTERS[o.choice]}. {o.label}", 34, max_lines=2, placeholder="…")
        titles.append("<br>".join([*(html.escape(line, quote=False) for line in label), verdict]))
    cols = max(1, len(outcomes))
    fig = make_subplots(
        rows=len(METRICS),
        cols=cols,
        shared_xaxes=True,
        shared_yaxes=True,
        column_titles=titles or None,
        vertical_spacing=0.04,
        horizontal_spacing=0.03,
    )
    in_legend: set[str] = set()  # the collapse once, each verdict once
    for col, o in enumerate(outcomes, start=1):
        color = FIXED if o.fixed else NOT_FIXED
        verdict = "a change that fixed it" if o.fixed else "a change that did not"
        for row, (name, axis) in enumerate(METRICS, start=1):
            fig.add_trace(
                go.Scatter(
                    x=_steps(base),
                    y=base[name],
                    mode="lines",
                    line={"color": COLLAPSE, "width": 3, "dash": "dash"},
                    name=html.escape(base_label, quote=False),
                    legendgroup="base",
                    showlegend=not in_legend and row == 1,
                ),
                row=row,
                col=col,
            )
            fig.add_trace(
                go.Scatter(
                    x=_steps(o.env),
                    y=o.env[name],
                    mode="lines",
                    line={"color": color, "width": 4},
                    name=verdict,
                    legendgroup=verdict,
                    showlegend=verdict not in in_legend and row == 1,
                ),
                row=row,
                col=col,
            )
            in_legend |= {"base", verdict}
            if col == 1:
                fig.update_yaxes(title_text=axis, row=row, col=col)
        fig.update_xaxes(title_text="step", row=len(METRICS), col=col)
    fig.update_yaxes(rangemode="tozero")
    fig = _layout(fig, "What each change did (recorded runs)", height=760)
    # room above the columns for the figure's title and three-line column titles
    fig.update_layout(margin={"t": 150}, title={"y": 0.985, "yanchor": "top"})
    fig.update_annotations(font={"size": TICK_FONT})
    return fig
