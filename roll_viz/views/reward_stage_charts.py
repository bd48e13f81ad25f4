"""Figures and tables of the reward as a stage: parts, verifier noise, truncation, the hack."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.analysis.reward_stage import HackStep, RewardParts, TruncationPolicy
from roll_viz.analysis.verifier_noise import NoiseDraw, NoiseExpectation, NoiseSweep
from roll_viz.core.pipeline.dialects.truncation import OPTIONS, POLICY_LABELS
from roll_viz.views.scales import title_style

_TERM_COLOURS = ("#2166ac", "#b2182b", "#1b7837", "#762a83", "#e08214", "#35978f")
_POLICY_COLOURS = {"zero": "#b2182b", "keep": "#8c8c8c", "soft": "#e08214", "mask": "#2166ac"}


def _bar_layout(fig: go.Figure, title: str, y_title: str, barmode: str) -> go.Figure:
    fig.update_layout(
        barmode=barmode,
        height=400,
        margin={"l": 50, "r": 20, "t": 40, "b": 110},
        title=title_style(title),
        legend={"orientation": "h", "y": -0.35, "x": 0.5, "xanchor": "center"},
        xaxis_title="sample (prompt p / sample s)",
        yaxis_title=y_title,
    )
    fig.add_hline(y=0, line_color="#444", line_width=1)
    return fig


# ------------------------------------------------------------------------------ parts


def parts_figure(samples: Sequence[str], parts: RewardParts) -> go.Figure:
    """Each sample's score as a stack of its terms (weight x value), noise as one more layer."""
    fig = go.Figure()
    for k, label in enumerate(parts.labels):
        fig.add_bar(
            x=list(samples),
            y=parts.parts[:, k].tolist(),
            customdata=parts.shares[:, k].tolist(),
            name=f"{label} (weight {parts.weights[k]:g})",
            marker_color=_TERM_COLOURS[k % len(_TERM_COLOURS)],
            hovertemplate="%{x}<br>part = %{y:.4f}<br>share %{customdata:.1%}<extra></extra>",
        )
    if bool((parts.noise != 0).any()):
        fig.add_bar(
            x=list(samples),
            y=parts.noise.tolist(),
            name="noise (the spec's seeded Gaussian)",
            marker_color="#bababa",
            hovertemplate="%{x}<br>noise = %{y:.4f}<extra></extra>",
        )
    return _bar_layout(fig, "The reward's parts: weight x term value", "reward", "relative")


def parts_table(samples: Sequence[str], parts: RewardParts) -> pd.DataFrame:
    """One row per sample: each term's part and share, the total (no noise) and the noise."""
    data: dict[str, list] = {"sample": list(samples)}
    for k, label in enumerate(parts.labels):
        data[f"{label} part"] = parts.parts[:, k].tolist()
        data[f"{label} share"] = parts.shares[:, k].tolist()
    data["total"] = parts.totals.tolist()
    data["noise"] = parts.noise.tolist()
    return pd.DataFrame(data)


# ------------------------------------------------------------------------------ noise


def noise_figure(samples: Sequence[str], draw: NoiseDraw) -> go.Figure:
    """GRPO advantages of the true labels beside the noisy verifier's, noise outlined in red."""
    noisy = draw.points_at_noise.tolist()
    fig = go.Figure(
        [
            go.Bar(
                x=list(samples),
                y=draw.adv_true.tolist(),
                name="true labels",
                marker_color="#8c8c8c",
                hovertemplate="%{x}<br>A (true) = %{y:.3f}<extra></extra>",
            ),
            go.Bar(
                x=list(samples),
                y=draw.adv_noisy.tolist(),
                name="noisy verifier (red outline: points at noise)",
                marker={
                    "color": "#2166ac",
                    "line": {
                        "color": ["#d7191c" if n else "#2166ac" for n in noisy],
                        "width": [3 if n else 0 for n in noisy],
                    },
                },
                hovertemplate="%{x}<br>A (noisy) = %{y:.3f}<extra></extra>",
            ),
        ]
    )
    return _bar_layout(fig, "Advantages: true labels vs the noisy verifier", "advantage", "group")


def noise_table(samples: Sequence[str], group_ids: Sequence[int], draw: NoiseDraw) -> pd.DataFrame:
    """One row per sample: true and observed label, flipped, both advantages, points at noise."""
    return pd.DataFrame(
        {
            "sample": list(samples),
            "prompt_id": list(group_ids),
            "true_label": draw.labels.tolist(),
            "verifier_said": draw.observed.tolist(),
            "flipped": draw.flipped.tolist(),
            "A_true": draw.adv_true.tolist(),
            "A_noisy": draw.adv_noisy.tolist(),
            "points_at_noise": draw.points_at_noise.tolist(),
        }
    )


def noise_summary(draw: NoiseDraw, expected: NoiseExpectation) -> pd.DataFrame:
    """This draw's counts beside their exact expected values over every draw."""
    b = draw.labels.numel()
    return pd.DataFrame(
        {
            "measure": [
                "flipped labels",
                "ties broken (groups)",
                "zero-advantage fraction",
                "advantages that point at noise",
            ],
            "before (true labels)": [
                "0",
                "0",
                f"{draw.zero_before:.3f}",
                "0",
            ],
            "this draw": [
                f"{int(draw.flipped.sum())} / {b}",
                f"{draw.broken_ties} / {int(draw.tied_before.sum())} tied",
                f"{draw.zero_after:.3f}",
                f"{int(draw.points_at_noise.sum())} / {b}",
            ],
            "expected (exact)": [
                f"{expected.flipped:.3f}",
                f"{expected.broken_ties:.3f}",
                f"{expected.zero_after:.3f}",
                f"{expected.points_at_noise:.3f}",
            ],
        }
    )


def noise_groups(
    group_ids: Sequence[int], draw: NoiseDraw, expected: NoiseExpectation
) -> pd.DataFrame:
    """One row per group: G, true passes k, tied before, P(tied after) in closed form, this draw."""
    sizes: dict[int, int] = {}
    passes: dict[int, int] = {}
    for g, label in zip(group_ids, draw.labels.tolist(), strict=True):
        sizes[g] = sizes.get(g, 0) + 1
        passes[g] = passes.get(g, 0) + int(label)
    return pd.DataFrame(
        {
            "prompt_id": list(sizes),
            "G": list(sizes.values()),
            "true passes k": [passes[g] for g in sizes],
            "tied (true)": [bool(draw.tied_before[g]) for g in sizes],
            "P(tied after)": [expected.tie_after[g] for g in sizes],
            "tied (this draw)": [bool(draw.tied_after[g]) for g in sizes],
        }
    )


def noise_sweep_figure(sweep: NoiseSweep) -> go.Figure:
    """Expected advantages that point at noise as one rate grows: false negatives vs positives."""
    fig = go.Figure()
    for name, points, colour in (
        ("false negatives only (fp = 0)", sweep.fn_only, "#2166ac"),
        ("false positives only (fn = 0)", sweep.fp_only, "#b2182b"),
    ):
        fig.add_scatter(
            x=list(sweep.rates),
            y=[e.points_at_noise for e in points],
            customdata=[e.zero_after for e in points],
            name=name,
            mode="lines+markers",
            line={"color": colour},
            hovertemplate="rate %{x:.2f}<br>E[noisy advantages] = %{y:.3f}<br>"
            "E[zero-advantage fraction] = %{customdata:.3f}<extra></extra>",
        )
    fig.update_layout(
        height=340,
        margin={"l": 50, "r": 20, "t": 40, "b": 90},
        title=title_style("Noisy advantages as one rate grows"),
        legend={"orientation": "h", "y": -0.3, "x": 0.5, "xanchor": "center"},
        xaxis_title="rate",
        yaxis_title="expected samples",
        yaxis_rangemode="tozero",
    )
    return fig


# ------------------------------------------------------------------------------ truncation


def truncation_figure(
    samples: Sequence[str], policies: Sequence[TruncationPolicy], truncated: Sequence[bool]
) -> go.Figure:
    """Each policy's advantages per sample; a masked row's bar is faded (no gradient)."""
    fig = go.Figure()
    names = [f"{s} (cut)" if cut else s for s, cut in zip(samples, truncated, strict=True)]
    for p in policies:
        fig.add_bar(
            x=names,
            y=p.advantages.tolist(),
            name=POLICY_LABELS[p.policy],
            marker={
                "color": _POLICY_COLOURS[p.policy],
                "opacity": [1.0 if t else 0.25 for t in p.trained.tolist()],
            },
            hovertemplate="%{x}<br>A = %{y:.3f}<extra>" + POLICY_LABELS[p.policy] + "</extra>",
        )
    return _bar_layout(fig, "GRPO advantages under four truncation policies", "advantage", "group")


def truncation_table(policies: Sequence[TruncationPolicy]) -> pd.DataFrame:
    """One row per policy: reward_mean, trained rows, mean |A| over them."""
    return pd.DataFrame(
        {
            "policy": [POLICY_LABELS[p.policy] for p in policies],
            "reward_mean": [p.reward_mean for p in policies],
            "rows trained": [f"{int(p.trained.sum())} / {p.trained.numel()}" for p in policies],
            "mean |A| (trained)": [p.abs_adv_trained for p in policies],
        }
    )


def options_table() -> pd.DataFrame:
    """One row per framework option that asks for a policy other than keeping the score."""
    rows = [
        {"framework": fw, "policy": POLICY_LABELS[policy], "option": option}
        for fw, options in OPTIONS.items()
        for policy, option in options.items()
        if policy != "keep" and option is not None
    ]
    return pd.DataFrame(rows, columns=["framework", "policy", "option"])


def truncation_samples(
    samples: Sequence[str],
    lengths: Sequence[int],
    truncated: Sequence[bool],
    policies: Sequence[TruncationPolicy],
) -> pd.DataFrame:
    """One row per sample: length, cut, and each policy's reward and advantage."""
    data: dict[str, list] = {
        "sample": list(samples),
        "tokens": list(lengths),
        "cut": list(truncated),
    }
    for p in policies:
        data[f"r {p.policy}"] = p.rewards.tolist()
        data[f"A {p.policy}"] = p.advantages.tolist()
    return pd.DataFrame(data)


# ------------------------------------------------------------------------------ the hack


def hack_figure(steps: Sequence[HackStep]) -> go.Figure:
    """Mean reward per sampled step: the run's own (it trained on it) and the student's."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = [s.step for s in steps]
    fig.add_scatter(
        x=x,
        y=[sum(s.recorded) / len(s.recorded) for s in steps],
        name="the run's reward (positive_words: trained on)",
        mode="lines+markers",
        line={"color": "#8c8c8c"},
    )
    fig.add_scatter(
        x=x,
        y=[sum(s.student) / len(s.student) for s in steps],
        name="your reward (the same samples, scored again)",
        mode="lines+markers",
        line={"color": "#2166ac", "width": 3},
        secondary_y=True,
    )
    fig.update_layout(
        height=380,
        margin={"l": 50, "r": 50, "t": 40, "b": 90},
        title=title_style("The recorded run's samples, step by step, under two rewards"),
        legend={"orientation": "h", "y": -0.3, "x": 0.5, "xanchor": "center"},
        xaxis_title="training step (recorded samples every 5 steps)",
    )
    fig.update_yaxes(title_text="the run's reward (mean)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(
        title_text="your reward (mean)", rangemode="tozero", showgrid=False, secondary_y=True
    )
    return fig


def hack_verdict(steps: Sequence[HackStep]) -> str:
    """One sentence: how the student's reward moved over the recorded run, and what that says."""
    first, last = steps[0], steps[-1]
    mine = [sum(s.student) / len(s.student) for s in (first, last)]
    run = [sum(s.recorded) / len(s.recorded) for s in (first, last)]
    moved = (
        f"Your reward's mean went from {mine[0]:.3g} at step {first.step} to {mine[1]:.3g} at "
        f"step {last.step} (the run's own: {run[0]:.3g} to {run[1]:.3g})."
    )
    if len({v for s in steps for v in s.student}) == 1:
        return moved + " It gives every recorded sample the same score: nothing here to climb."
    if mine[1] > mine[0]:
        return (
            moved + " It rose as the answers degenerated: the drift this policy found satisfies "
            "your reward too. Read from the recorded samples, not from a run trained on it."
        )
    return (
        moved + " It did not rise: these degenerate samples do not satisfy it. A policy trained "
        "on it could still find its own hack."
    )


def hack_steps_table(steps: Sequence[HackStep]) -> pd.DataFrame:
    """One row per sampled step: both rewards' means, distinct words, the most frequent word."""
    return pd.DataFrame(
        {
            "step": [s.step for s in steps],
            "run's reward": [sum(s.recorded) / len(s.recorded) for s in steps],
            "your reward": [sum(s.student) / len(s.student) for s in steps],
            "distinct words": [s.distinct for s in steps],
            "top word": [s.top_word for s in steps],
            "its share": [s.top_share for s in steps],
        }
    )


def hack_samples_table(step: HackStep) -> pd.DataFrame:
    """One step's samples, best first under the student's reward (text shown as data)."""
    table = pd.DataFrame(
        {
            "your reward": list(step.student),
            "run's reward": list(step.recorded),
            "response": list(step.responses),
        }
    )
    return table.sort_values("your reward", ascending=False, kind="stable")
