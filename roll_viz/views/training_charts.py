"""Figures of a training run: curves over steps, several runs overlaid, the step table.

Every function takes one or more ``TrainRun`` records (``roll_viz.lm.train`` schema, read as plain
metric dicts) and returns a Plotly figure or a table; nothing here imports Streamlit or a model.

Curves (``METRICS`` lists them with their help text): reward mean with a +-std band (and one
thin line per prompt), KL to the reference (exact full-vocabulary mean, solid; the chosen
estimator, dashed), beta, entropy, response length, clip fraction, share of groups without
reward spread, advantage spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from roll_viz.views.scales import title_style

#: run colours in overlay order (colour-blind safe: blue, orange, green)
RUN_COLORS = ("#2166ac", "#e66101", "#1b7837")

#: metric key -> (panel title that says what is plotted, help text shown under the chart)
METRICS: dict[str, tuple[str, str]] = {
    "reward_mean": (
        "mean reward +-1 std",
        "Mean raw reward of the step's samples, with a band of +-1 std; thin lines: each prompt.",
    ),
    "kl": (
        "KL to reference (dashed: estimate)",
        "Solid: exact KL(policy || reference) over the full vocabulary, mean per sample. Dashed: "
        "the chosen estimator at the sampled tokens (what the adaptive controller sees).",
    ),
    "beta": (
        "beta, the KL coefficient",
        "The KL coefficient used at each step (moves only with an adaptive controller).",
    ),
    "entropy": ("entropy (nats)", "Mean entropy of the policy's next-token distribution."),
    "response_length": ("response length (tokens)", "Mean response length (EOS included)."),
    "clip_frac": (
        "share of tokens clipped",
        "Share of tokens whose new/old ratio was clipped in the update (0 in the first epoch "
        "of every rollout, when the ratio is exactly 1).",
    ),
    "zero_spread_share": (
        "share of groups, all rewards equal",
        "Groups whose G rewards are all equal: every advantage is 0, the group teaches nothing.",
    ),
    "adv_std": ("advantage std", "Spread of the advantages over all valid tokens."),
    "adv_abs_mean": (
        "advantage |A| mean",
        "Mean size of the advantages over all valid tokens: how hard the step pushes.",
    ),
    "delta_abs_mean": (
        "sampler gap: mean |log pi_old - log mu|",
        "Mean over the step's tokens of |delta|, delta = log pi_old - log mu: how far the "
        "sampler that drew the tokens (mu) is from the trainer's recompute (pi_old). 0 exactly "
        "when the trainer samples itself (fp32).",
    ),
    "is_ess": (
        "ESS of pi_old / mu (1 = no mismatch)",
        "Effective sample size of the importance weights w = pi_old / mu over the step's "
        "tokens, (sum w)^2 / (n sum w^2): 1 when mu = pi_old, smaller as a few tokens dominate.",
    ),
    "correction_frac": (
        "share truncated / masked by the correction",
        "Share of the tokens (or sequences) the loss's train/rollout correction truncates or "
        "masks: OpenRLHF is_correction, TRL vllm_importance_sampling_mode. Empty when the loss "
        "has no correction.",
    ),
}

#: the panels of local (group) against global (batch) scale over steps
LOCAL_GLOBAL_PANELS = ("reward_mean", "kl", "adv_std", "adv_abs_mean")

DEFAULT_PANELS = (
    "reward_mean",
    "kl",
    "beta",
    "entropy",
    "response_length",
    "clip_frac",
    "zero_spread_share",
    "adv_std",
)


def _xs(run: Any) -> list[int]:
    return [r.step for r in run.steps]


def _ys(run: Any, key: str) -> list[float | None]:
    return [r.metrics.get(key) for r in run.steps]


def _label(run: Any, index: int) -> str:
    text = run.label or run.settings.label or f"run {index + 1}"
    return f"{text} (recorded)" if run.recorded else text


def _band(fig: go.Figure, xs, mean, std, color: str, row: int, col: int, name: str) -> None:
    pairs = [(x, m, s) for x, m, s in zip(xs, mean, std, strict=True) if m is not None]
    if not pairs:
        return
    upper = [m + (s or 0.0) for _, m, s in pairs]
    lower = [m - (s or 0.0) for _, m, s in pairs]
    px = [p[0] for p in pairs]
    fig.add_trace(
        go.Scatter(
            x=px + px[::-1],
            y=upper + lower[::-1],
            fill="toself",
            fillcolor=_alpha(color, 0.15),
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
            legendgroup=name,
        ),
        row=row,
        col=col,
    )


def _alpha(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _per_prompt_lines(fig: go.Figure, run: Any, xs: list, color: str, row: int, col: int) -> None:
    """Each prompt's mean reward as a thin dotted line in the reward panel."""
    n_prompts = len(run.steps[0].metrics.get("reward_per_prompt") or [])
    for p in range(n_prompts):
        values = [(r.metrics.get("reward_per_prompt") or [None] * n_prompts)[p] for r in run.steps]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=values,
                mode="lines",
                line={"color": color, "width": 0.8, "dash": "dot"},
                opacity=0.6,
                name=f"prompt {p + 1}",
                showlegend=False,
                hovertemplate=f"prompt {p + 1}<br>step %{{x}}<br>reward %{{y:.3f}}<extra></extra>",
            ),
            row=row,
            col=col,
        )


def _kl_estimate_line(
    fig: go.Figure, run: Any, xs: list, color: str, name: str, row: int, col: int
) -> None:
    """The run's KL estimator dashed beside the exact KL (the KL panel)."""
    est = next((r.metrics.get("kl_estimator") for r in run.steps), "est")
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=_ys(run, "kl_est"),
            mode="lines",
            line={"color": color, "dash": "dash", "width": 1.2},
            name=f"{name}: {est}",
            legendgroup=name,
            showlegend=False,
            hovertemplate="step %{x}<br>" + str(est) + " %{y:.4f}<extra></extra>",
        ),
        row=row,
        col=col,
    )


def training_curves(
    runs: Sequence[Any],
    panels: Sequence[str] = DEFAULT_PANELS,
    *,
    per_prompt: bool = True,
    current_step: int | None = None,
    columns: int = 2,
    faint: Sequence[int] = (),
) -> go.Figure:
    """Small multiples of the run metrics over steps, one colour per run.

    Args:
        runs: 1-3 TrainRun records (overlaid).
        panels: metric keys from ``METRICS``, in order.
        per_prompt: draw each prompt's mean reward as a thin line (single run only).
        current_step: draw a vertical marker at this step (the scrubber), or None.
        columns: panels per row.
        faint: indices of runs drawn faint (a recording overlaid on live runs).

    Returns:
        A figure with one subplot per panel.
    """
    panels = [p for p in panels if p in METRICS]
    rows = max(1, -(-len(panels) // columns))
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=[METRICS[p][0] for p in panels],
        horizontal_spacing=0.08,
        vertical_spacing=0.12 if rows > 1 else 0.1,
    )
    for i, run in enumerate(runs):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        name = _label(run, i)
        xs = _xs(run)
        first_trace = len(fig.data)
        for j, key in enumerate(panels):
            row, col = j // columns + 1, j % columns + 1
            first = j == 0
            if key == "reward_mean":
                _band(
                    fig, xs, _ys(run, "reward_mean"), _ys(run, "reward_std"), color, row, col, name
                )
                if per_prompt and len(runs) == 1 and run.steps:
                    _per_prompt_lines(fig, run, xs, color, row, col)
            # the KL panel plots the exact KL solid, its estimator dashed beside it
            label = "exact KL " if key == "kl" else ""
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=_ys(run, "kl_exact" if key == "kl" else key),
                    mode="lines+markers",
                    marker={"size": 4},
                    line={"color": color},
                    name=name,
                    legendgroup=name,
                    showlegend=first,
                    hovertemplate="step %{x}<br>" + label + "%{y:.4f}<extra>" + name + "</extra>",
                ),
                row=row,
                col=col,
            )
            if key == "kl":
                _kl_estimate_line(fig, run, xs, color, name, row, col)
        if i in faint:
            for trace in fig.data[first_trace:]:
                trace.opacity = 0.25
    if current_step is not None:
        for j in range(len(panels)):
            fig.add_vline(
                x=current_step,
                line_color="#888",
                line_dash="dot",
                row=j // columns + 1,
                col=j % columns + 1,
            )
    fig.update_layout(
        height=240 * rows + 80,
        margin={"l": 50, "r": 20, "t": 60, "b": 40},
        title=title_style("Training curves over steps"),
        legend={"orientation": "h", "y": 1.06, "x": 0.5, "xanchor": "center"},
        hovermode="x unified" if len(runs) == 1 else "closest",
    )
    fig.update_xaxes(title_text=None, rangemode="tozero")
    return fig


def adaptive_beta_loop(run: Any, *, overlay: Any = None, title: str | None = None) -> go.Figure:
    """Beta and the KL over the steps of one adaptive run, the target KL drawn as a line.

    Left: beta at each step. Right: the KL the controller sees (the run's estimator at the
    sampled tokens, mean per token; solid), the exact KL (dotted) and the target (dashed
    horizontal). A closed loop: each step's KL comes from the policy that the previous beta
    shaped.

    Args:
        run: a TrainRun with ``settings.beta_mode == "adaptive"`` (others are drawn too, with
            the title saying beta was fixed).
        overlay: another run drawn faint under it (a recording behind a live run), or None.
        title: the figure title (default: names the loop and the target).

    Returns:
        A figure with two panels side by side.
    """
    est = next((r.metrics.get("kl_estimator") for r in run.steps), None) or "estimate"
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["beta at each step", f"KL per token ({est}: what the controller sees)"],
        horizontal_spacing=0.1,
    )
    if overlay is not None and overlay.steps:
        name = _label(overlay, 0)
        for col, key in ((1, "beta"), (2, "kl_est")):
            fig.add_trace(
                go.Scatter(
                    x=_xs(overlay),
                    y=_ys(overlay, key),
                    mode="lines",
                    opacity=0.3,
                    line={"color": "#888"},
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    hovertemplate="step %{x}<br>" + key + " %{y:.4f}<extra>" + name + "</extra>",
                ),
                row=1,
                col=col,
            )
    xs = _xs(run)
    span = xs + (_xs(overlay) if overlay is not None else [])
    target = float(run.settings.target_kl)
    adaptive = run.settings.beta_mode == "adaptive"

    def line(col: int, key: str, name: str, style: dict, markers: bool = True) -> None:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=_ys(run, key),
                mode="lines+markers" if markers else "lines",
                marker={"size": 5},
                line=style,
                name=name,
                hovertemplate=f"step %{{x}}<br>{name} %{{y:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )

    line(1, "beta", "beta", {"color": RUN_COLORS[0]})
    line(2, "kl_est", f"KL ({est})", {"color": RUN_COLORS[1]})
    line(2, "kl_exact", "exact KL", {"color": RUN_COLORS[1], "dash": "dot", "width": 1.2}, False)
    fig.add_trace(
        go.Scatter(
            x=[0, max(span, default=1)],
            y=[target, target],
            mode="lines",
            name=f"target KL {target:g}",
            line={"color": "#444", "dash": "dash"},
            hovertemplate=f"target KL {target:g}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    if title is None:
        title = (
            f"Adaptive beta, closed loop: {len(xs)} steps of a real run, target KL {target:g}"
            if adaptive
            else f"beta fixed at {run.settings.beta:g}: {len(xs)} steps of a real run"
        )
    fig.update_layout(
        height=360,
        margin={"l": 50, "r": 20, "t": 80, "b": 80},
        title=title_style(title),
        legend={"orientation": "h", "y": -0.3, "x": 0.5, "xanchor": "center"},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text="step", rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


def adaptive_summary(run: Any) -> str:
    """One sentence of numbers on an adaptive run: where beta turned and where the KL ended."""
    betas = [(r.step, r.metrics["beta"]) for r in run.steps if r.metrics.get("beta") is not None]
    kls = [r.metrics.get("kl_est") for r in run.steps if r.metrics.get("kl_est") is not None]
    if len(betas) < 2 or not kls:
        return ""
    low_step, low = min(betas, key=lambda p: p[1])
    tail = kls[-max(1, len(kls) // 3) :]
    target = float(run.settings.target_kl)
    above = next((r.step for r in run.steps if (r.metrics.get("kl_est") or 0.0) > target), None)
    crossed = f"the KL first passed the target at step {above}; " if above is not None else ""
    return (
        f"beta went from {betas[0][1]:.3f} down to {low:.3f} (step {low_step}) and ended at "
        f"{betas[-1][1]:.3f}; {crossed}over the last {len(tail)} steps the KL averaged "
        f"{sum(tail) / len(tail):.3f} against a target of {target:g} "
        f"(from {min(tail):.3f} to {max(tail):.3f})."
    )


def local_global_curves(runs: Sequence[Any], faint: Sequence[int] = ()) -> go.Figure:
    """Reward, KL and the advantages' std and mean size over steps, runs overlaid side by side.

    For GRPO (each group's own scale) against REINFORCE++ (the batch's scale): the same
    rewards become advantages of a different size; these four panels show it step by step.
    """
    fig = training_curves(runs, LOCAL_GLOBAL_PANELS, per_prompt=False, columns=2, faint=faint)
    fig.update_layout(
        height=520,
        margin={"l": 50, "r": 20, "t": 100, "b": 40},
        title=title_style("Local (group) vs global (batch) scale over steps"),
        legend={"orientation": "h", "y": 1.12, "x": 0.5, "xanchor": "center"},
    )
    return fig


def scale_table(runs: Sequence[Any]) -> pd.DataFrame:
    """One row per run: the advantages' size over all steps next to where reward and KL went.

    Columns: run, steps, mean advantage std and mean |A| over the steps, the mean reward of the
    first and of the last five steps, and the exact KL at the last step.
    """

    def mean(values: Sequence[Any]) -> float | None:
        vals = [float(v) for v in values if v is not None]
        return round(sum(vals) / len(vals), 4) if vals else None

    rows = []
    for i, run in enumerate(runs):
        rewards = run.series("reward_mean")
        kl = [v for v in run.series("kl_exact") if v is not None]
        rows.append(
            {
                "run": _label(run, i),
                "steps": len(run.steps),
                "advantage std (mean over steps)": mean(run.series("adv_std")),
                "|A| mean (mean over steps)": mean(run.series("adv_abs_mean")),
                "reward, first 5 steps": mean(rewards[:5]),
                "reward, last 5 steps": mean(rewards[-5:]),
                "KL at the last step": round(kl[-1], 4) if kl else None,
            }
        )
    return pd.DataFrame(rows)


def settings_table(runs: Sequence[Any]) -> pd.DataFrame:
    """Settings of up to three runs side by side; rows where they differ come first."""
    dicts = []
    for run in runs:
        s = run.settings.to_json()
        flat = {k: v for k, v in s.items() if k not in ("config", "reward", "prompts")}
        flat["reward"] = run.settings.reward.label()
        flat["prompts"] = " | ".join(run.settings.sampling.prompts)
        for k, v in sorted(s["config"].items()):
            flat[f"config.{k}"] = v
        dicts.append({k: str(v) for k, v in flat.items()})
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    differ = [k for k in keys if len({d.get(k) for d in dicts}) > 1]
    same = [k for k in keys if k not in differ]
    data = {
        _label(run, i): [dicts[i].get(k, "") for k in differ + same] for i, run in enumerate(runs)
    }
    frame = pd.DataFrame(data, index=differ + same)
    frame.index.name = "setting"
    return frame


def differing_settings(runs: Sequence[Any]) -> list[str]:
    """Names of the settings that differ between the runs (the compared knob(s))."""
    return [str(k) for k in settings_table(runs).index if _differs(runs, str(k))]


def _differs(runs: Sequence[Any], key: str) -> bool:
    values = settings_table(runs).loc[key].tolist()
    return len(set(values)) > 1
