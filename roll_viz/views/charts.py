"""Plotly figures and token-chip HTML for the stage pages (no Streamlit, no pipeline math).

Every function takes records or tensors and returns a ``plotly.graph_objects.Figure`` (or, for
token chips, an escaped HTML string). They only reshape for display: padding becomes NaN (a blank
cell, never 0), tokens get visible whitespace and are HTML-escaped (model output is untrusted).

Colour vocabulary (ux-principles section 3):
    signed quantities (advantages, token rewards, k1 log-ratio): ``RdBu`` with zmid = 0 on a fixed
    symmetric range [-M, M] (negative red, positive blue, 0 white);
    non-negative quantities (k2, k3, |k1|, exact KL, entropy): the light-start ``YlGnBu`` from 0
    (0 = pale, like the white 0 of the signed scale; colour-blind safe);
    token chips: the same scales, sampled with ``plotly.colors.sample_colorscale`` so a chip and the
    heatmap's colorbar agree; log-probs use the light-start ``YlOrRd`` ramp on the surprisal.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale, unlabel_rgb
from plotly.subplots import make_subplots
from torch import Tensor

from roll_viz.core.records import Rollout, Trace
from roll_viz.views.explain import sample_labels, visible_whitespace

SIGNED_SCALE = "RdBu"
SEQUENTIAL_SCALE = "YlGnBu"
CHIP_SEQUENTIAL_SCALE = "YlOrRd"
FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"

#: Fixed symmetric range for (normalized) advantages: a classroom default (ux-principles 3.2).
ADVANTAGE_RANGE = 3.0


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def masked_array(values: Tensor, mask: Tensor) -> np.ndarray:
    """(B, T) tensor -> float64 numpy array with NaN on padding (a blank heatmap cell).

    Args:
        values: (B, T) numbers.
        mask: (B, T) 1.0 on valid positions.

    Returns:
        (B, T) array.
    """
    out = values.detach().double().cpu().numpy().copy()
    out[~mask.bool().cpu().numpy()] = np.nan
    return out


def symmetric_range(values: Tensor, mask: Tensor, floor: float = 1e-6) -> float:
    """Largest |value| over valid positions (at least ``floor``): the M of a [-M, M] scale.

    Args:
        values: (B, T) numbers.
        mask: (B, T) 1.0 on valid positions.
        floor: smallest M returned (an all-zero tensor still gets a usable scale).

    Returns:
        M > 0.
    """
    m = mask.bool()
    if not bool(m.any()):
        return 1.0
    peak = float(values[m].abs().max())
    if not math.isfinite(peak):
        return 1.0
    return max(peak, floor)


def robust_range(values: Tensor, mask: Tensor, q: float = 0.98, floor: float = 1e-6) -> float:
    """The q-quantile of |value| over valid positions (UNIPO's robust symmetric domain).

    One outlier cannot wash out the colours; values beyond the range saturate (hover shows them).

    Args:
        values: (B, T) numbers.
        mask: (B, T) 1.0 on valid positions.
        q: quantile in (0, 1].
        floor: smallest value returned.

    Returns:
        M > 0.
    """
    m = mask.bool()
    if not bool(m.any()):
        return 1.0
    peak = float(values[m].abs().double().quantile(q))
    if not math.isfinite(peak):
        return 1.0
    return max(peak, floor)


def nice_ceiling(x: float) -> float:
    """Round a positive number up to 1, 2, 3 or 5 times a power of ten (stable colorbar ranges)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    exponent = math.floor(math.log10(x))
    for step in (1.0, 2.0, 3.0, 5.0, 10.0):
        candidate = step * 10**exponent
        if candidate >= x * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)


def token_text(rollout: Rollout) -> np.ndarray:
    """(B, T) string array of escaped, whitespace-visible token strings ("" on padding).

    A fixed-width numpy string array, not nested lists or objects: plotly validates lists and
    deep-copies object arrays element by element, which dominated a classroom batch's redraw.
    """
    width = rollout.response_mask.shape[1]
    out = np.full((len(rollout.tokens), width), "", dtype=object)
    for b, toks in enumerate(rollout.tokens):
        row = [html.escape(visible_whitespace(t)) for t in toks[:width]]
        out[b, : len(row)] = row
    return out.astype(str)


def _height(rows: int, per_row: int = 26, extra: int = 130) -> int:
    return max(340, min(1600, extra + per_row * rows))


def _labels(rollout: Rollout) -> list[str]:
    return sample_labels(rollout)


def heatmap(
    values: Tensor,
    mask: Tensor,
    *,
    rollout: Rollout,
    title: str,
    quantity: str,
    signed: bool,
    zmax: float | None = None,
    extra: Mapping[str, Tensor] | None = None,
    hover_lines: list[list[str]] | None = None,
) -> go.Figure:
    """A token heatmap: rows = samples, columns = token positions, NaN on padding.

    Args:
        values: (B, T) the quantity.
        mask: (B, T) 1.0 on valid response tokens.
        rollout: the batch (token strings and row labels for the hover).
        title: figure title.
        quantity: name of the quantity (colorbar title and hover).
        signed: diverging RdBu centred at 0 on [-zmax, zmax]; else YlGnBu on [0, zmax].
        zmax: fixed top of the scale (default: the data's max |value|).
        extra: more (B, T) numbers for the hover, name -> tensor.
        hover_lines: optional (B, T) extra hover text (already escaped).

    Returns:
        The figure; ``data[0].z`` equals ``values`` with None on padding.
    """
    z = masked_array(values, mask)
    top = float(zmax) if zmax is not None else symmetric_range(values, mask)
    names = list((extra or {}).keys())
    batch, width = values.shape
    # (B, T, 2 + len(extra)) string array: token, extra numbers (pre-formatted), hover text.
    # Fixed-width strings, not objects: plotly deep-copies object arrays cell by cell.
    custom = np.full((batch, width, len(names) + 2), "", dtype=object)
    custom[:, :, 0] = token_text(rollout)
    for i, grid in enumerate((extra or {}).values(), start=1):
        custom[:, :, i] = _formatted(masked_array(grid, mask))
    if hover_lines is not None:
        custom[:, :, -1] = np.array(hover_lines, dtype=object).reshape(batch, width)
    custom = custom.astype(str)
    hover = "<b>%{customdata[0]}</b>  (sample %{y}, t = %{x})<br>" + f"{quantity} = %{{z:.4f}}"
    for i, name in enumerate(names, start=1):
        hover += f"<br>{name} = %{{customdata[{i}]}}"
    hover += f"%{{customdata[{len(names) + 1}]}}<extra></extra>"
    trace = go.Heatmap(
        z=z,
        x=np.arange(width),
        y=_labels(rollout),
        customdata=custom,
        hovertemplate=hover,
        hoverongaps=False,
        colorscale=SIGNED_SCALE if signed else SEQUENTIAL_SCALE,
        zmin=-top if signed else 0.0,
        zmax=top,
        zmid=0.0 if signed else None,
        colorbar={
            "title": {"text": f"{quantity}<br>[{-top if signed else 0:.3g}, {top:.3g}]"},
            "thickness": 14,
        },
        xgap=1,
        ygap=1,
    )
    return go.Figure(data=[trace], layout=_token_layout(title, batch))


def _formatted(grid: np.ndarray) -> np.ndarray:
    """(B, T) floats -> (B, T) strings with 4 decimals ("" for NaN, i.e. padding)."""
    flat = ["" if v != v else f"{v:.4f}" for v in grid.ravel().tolist()]
    return np.array(flat, dtype=object).reshape(grid.shape)


def _title(text: str) -> dict:
    """The one title style of every figure: left-aligned, 15 px."""
    return {"text": text, "font": {"size": 15}, "x": 0.01, "xanchor": "left"}


def _token_layout(title: str, rows: int) -> dict:
    """Layout of a token heatmap as one dict (one plotly validation pass, not several updates)."""
    return {
        "title": _title(title),
        "height": _height(rows),
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
        "plot_bgcolor": "rgba(0,0,0,0)",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "hoverlabel": {"font": {"family": FONT}},
        "yaxis": {
            "title": {"text": "sample (prompt p / sample s)"},
            "autorange": "reversed",
            "type": "category",
        },
        "xaxis": {"title": {"text": "token position t"}, "showgrid": False},
    }


# ---------------------------------------------------------------------------------------------
# Stage figures
# ---------------------------------------------------------------------------------------------
def advantage_heatmap(
    trace: Trace, rollout: Rollout, *, zmax: float | None = None, title: str | None = None
) -> go.Figure:
    """Per-token advantages (RdBu, zmid 0, symmetric, default range +-3 or the data's max)."""
    if zmax is None:
        zmax = max(
            ADVANTAGE_RANGE, nice_ceiling(symmetric_range(trace.advantages, rollout.response_mask))
        )
    return heatmap(
        trace.advantages,
        rollout.response_mask,
        rollout=rollout,
        title=title or f"Advantages ({trace.framework})",
        quantity="advantage A",
        signed=True,
        zmax=zmax,
        extra={"token reward r": trace.token_rewards, "return R": trace.returns},
    )


def token_reward_heatmap(
    trace: Trace, rollout: Rollout, *, zmax: float | None = None, title: str | None = None
) -> go.Figure:
    """Per-token rewards fed to the estimator (signed: RdBu, zmid 0)."""
    return heatmap(
        trace.token_rewards,
        rollout.response_mask,
        rollout=rollout,
        title=title or "Token rewards r_t",
        quantity="token reward r",
        signed=True,
        zmax=zmax,
        extra={"KL": trace.kl},
    )


def alternatives_text(rollout: Rollout, top: int = 3) -> list[list[str]]:
    """(B, T) hover lines: the policy's top alternatives with p(policy) / p(ref), escaped.

    Args:
        rollout: the batch (topk_ids, topk_logprobs, topk_ref_logprobs, vocab).
        top: how many alternatives to list.

    Returns:
        Nested lists of strings ("" on padding).
    """
    ids = rollout.topk_ids[..., :top].tolist()
    lp = rollout.topk_logprobs[..., :top].exp().tolist()
    rp = rollout.topk_ref_logprobs[..., :top].exp().tolist()
    mask = rollout.response_mask.bool().tolist()
    vocab = rollout.vocab
    out = []
    for b, row_mask in enumerate(mask):
        row = []
        for t, ok in enumerate(row_mask):
            if not ok:
                row.append("")
                continue
            parts = []
            for k in range(len(ids[b][t])):
                name = html.escape(visible_whitespace(str(vocab.get(ids[b][t][k], ids[b][t][k]))))
                parts.append(f"{name}: {lp[b][t][k]:.2f} / {rp[b][t][k]:.2f}")
            row.append("<br>top alternatives, p policy / p ref:<br>  " + "<br>  ".join(parts))
        out.append(row)
    return out


def kl_heatmap(
    kl: Tensor,
    rollout: Rollout,
    *,
    estimator: str,
    signed: bool,
    zmax: float | None = None,
    alternatives: bool = True,
) -> go.Figure:
    """Per-token KL estimate; hover: token, both log-probs, exact KL and top alternatives.

    Args:
        kl: (B, T) the estimate (k1 signed; abs/k2/k3 non-negative).
        rollout: the batch.
        estimator: its name (title and colorbar).
        signed: True for k1 (RdBu, zmid 0), False otherwise (YlGnBu from 0).
        zmax: fixed top of the scale.
        alternatives: include the top-3 alternatives under both models in the hover.

    Returns:
        The figure.
    """
    return heatmap(
        kl,
        rollout.response_mask,
        rollout=rollout,
        title=f"Per-token KL estimate: {estimator}",
        quantity=f"KL {estimator}",
        signed=signed,
        zmax=zmax,
        extra={
            "log pi": rollout.logprobs,
            "log pi_ref": rollout.ref_logprobs,
            "exact KL": rollout.exact_kl,
        },
        hover_lines=alternatives_text(rollout) if alternatives else None,
    )


def exact_kl_heatmap(rollout: Rollout, *, zmax: float | None = None) -> go.Figure:
    """The exact full-vocabulary KL(policy || ref) at every position (YlGnBu from 0)."""
    return heatmap(
        rollout.exact_kl,
        rollout.response_mask,
        rollout=rollout,
        title="Exact KL over the full vocabulary",
        quantity="exact KL",
        signed=False,
        zmax=zmax,
        extra={"entropy": rollout.entropy},
    )


def estimator_heatmaps(
    advantages: Mapping[str, Tensor], rollout: Rollout, *, zmax: float | None = None
) -> go.Figure:
    """Several estimators' advantages on the same tokens, one shared fixed symmetric scale.

    Args:
        advantages: estimator label -> (B, T) advantages.
        rollout: the batch.
        zmax: the shared range M (default: max(3, the largest |A| rounded up)).

    Returns:
        A figure with one heatmap per estimator stacked vertically and one colorbar.
    """
    names = list(advantages)
    mask = rollout.response_mask
    if zmax is None:
        peak = max((symmetric_range(a, mask) for a in advantages.values()), default=1.0)
        zmax = max(ADVANTAGE_RANGE, nice_ceiling(peak))
    fig = make_subplots(
        rows=len(names), cols=1, shared_xaxes=True, subplot_titles=names, vertical_spacing=0.06
    )
    text = token_text(rollout)
    labels = _labels(rollout)
    for i, name in enumerate(names, start=1):
        fig.add_trace(
            go.Heatmap(
                z=masked_array(advantages[name], mask),
                x=np.arange(mask.shape[1]),
                y=labels,
                customdata=text,
                hovertemplate=f"<b>%{{customdata}}</b>  ({name}, sample %{{y}}, t = %{{x}})"
                "<br>A = %{z:.4f}<extra></extra>",
                hoverongaps=False,
                coloraxis="coloraxis",
                xgap=1,
                ygap=1,
                name=name,
            ),
            row=i,
            col=1,
        )
        fig.update_yaxes(autorange="reversed", type="category", row=i, col=1)
    fig.update_layout(
        coloraxis={
            "colorscale": SIGNED_SCALE,
            "cmin": -zmax,
            "cmax": zmax,
            "cmid": 0.0,
            "colorbar": {"title": {"text": f"advantage A<br>[{-zmax:.3g}, {zmax:.3g}]"}},
        },
        height=max(320, len(names) * (60 + 16 * mask.shape[0])),
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        plot_bgcolor="rgba(0,0,0,0)",
        paper_bgcolor="rgba(0,0,0,0)",
        hoverlabel={"font": {"family": FONT}},
    )
    fig.update_xaxes(title_text="token position t", row=len(names), col=1)
    return fig


def reward_bars(
    rollout: Rollout, raw: Tensor, processed: Tensor, *, processed_name: str = "processed"
) -> go.Figure:
    """Raw vs processed response-level reward per sample, side by side, grouped by prompt.

    Args:
        rollout: the batch (labels).
        raw: (B,) raw scores.
        processed: (B,) rewards after post-processing.
        processed_name: legend name of the second series.

    Returns:
        A grouped bar chart.
    """
    labels = _labels(rollout)
    fig = go.Figure(
        [
            go.Bar(
                x=labels,
                y=raw.tolist(),
                name="raw reward",
                marker_color="#8c8c8c",
                hovertemplate="%{x}<br>raw = %{y:.4f}<extra></extra>",
            ),
            go.Bar(
                x=labels,
                y=processed.tolist(),
                name=processed_name,
                marker_color="#2166ac",
                hovertemplate="%{x}<br>" + processed_name + " = %{y:.4f}<extra></extra>",
            ),
        ]
    )
    fig.update_layout(
        barmode="group",
        height=400,
        margin={"l": 50, "r": 20, "t": 40, "b": 120},
        title=_title("Response-level reward: raw vs post-processed"),
        legend={"orientation": "h", "y": -0.38, "x": 0.5, "xanchor": "center"},
        xaxis_title="sample (prompt p / sample s)",
        yaxis_title="reward",
    )
    fig.add_hline(y=0, line_color="#444", line_width=1)
    return fig


def group_stats_figure(
    rollout: Rollout, scores: Tensor, means: Sequence[float], stds: Sequence[float]
) -> go.Figure:
    """Each prompt's rewards as dots with the group mean +- std as a bar.

    Args:
        rollout: the batch.
        scores: (B,) raw rewards.
        means: (P,) group means.
        stds: (P,) group std (NaN for a group of one).

    Returns:
        The figure.
    """
    prompts = [f"p{p}" for p in range(len(rollout.prompts))]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=prompts,
            y=list(means),
            error_y={"type": "data", "array": [0.0 if math.isnan(s) else s for s in stds]},
            name="group mean +- std",
            marker_color="rgba(33,102,172,0.35)",
            hovertemplate="%{x}<br>mean = %{y:.4f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[f"p{g}" for g in rollout.group_ids.tolist()],
            y=scores.tolist(),
            mode="markers",
            name="samples",
            marker={"color": "#b2182b", "size": 8, "line": {"width": 1, "color": "white"}},
            text=_labels(rollout),
            hovertemplate="%{text}<br>reward = %{y:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=360,
        margin={"l": 50, "r": 20, "t": 40, "b": 110},
        title=_title("Group statistics of the raw reward"),
        xaxis_title="prompt",
        yaxis_title="raw reward",
        legend={"orientation": "h", "y": -0.38, "x": 0.5, "xanchor": "center"},
    )
    return fig


def beta_schedule(
    betas: Sequence[float], *, target: float | None = None, observed: float | None = None
) -> go.Figure:
    """The KL coefficient over simulated controller steps.

    Args:
        betas: beta at step 0, 1, ... (beta_0 first).
        target: the target KL (annotated), or None.
        observed: the observed KL used at every step (annotated), or None.

    Returns:
        A line chart.
    """
    fig = go.Figure(
        go.Scatter(
            x=list(range(len(betas))),
            y=list(betas),
            mode="lines+markers" if len(betas) <= 60 else "lines",
            name="beta",
            line={"color": "#2166ac"},
            hovertemplate="step %{x}<br>beta = %{y:.5f}<extra></extra>",
        )
    )
    note = []
    if observed is not None:
        note.append(f"observed KL {observed:.4f}")
    if target is not None:
        note.append(f"target {target:.4f}")
    fig.update_layout(
        height=300,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        title={
            "text": "Adaptive beta over simulated steps"
            + (f" ({', '.join(note)})" if note else ""),
            "font": {"size": 15},
        },
        xaxis_title="controller step",
        yaxis_title="beta",
        yaxis_rangemode="tozero",
    )
    return fig


def kl_bars(table_rows: Mapping[str, Sequence[float]], labels: Sequence[str]) -> go.Figure:
    """Per-sample mean KL of several estimators next to the exact KL (grouped bars).

    Args:
        table_rows: series name -> (B,) values.
        labels: (B,) sample labels.

    Returns:
        A grouped bar chart.
    """
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    fig = go.Figure(
        [
            go.Bar(x=list(labels), y=list(vals), name=name, marker_color=palette[i % len(palette)])
            for i, (name, vals) in enumerate(table_rows.items())
        ]
    )
    fig.update_layout(
        barmode="group",
        height=360,
        margin={"l": 50, "r": 20, "t": 40, "b": 110},
        title=_title("Token-mean KL per sample"),
        legend={"orientation": "h", "y": -0.38, "x": 0.5, "xanchor": "center"},
        yaxis_title="mean KL per token",
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Token chips (HTML)
# ---------------------------------------------------------------------------------------------
def scale_color(value: float, vmin: float, vmax: float, scale: str) -> str:
    """The colour of ``value`` on a plotly colorscale over [vmin, vmax] (clipped), "rgb(...)"."""
    if vmax <= vmin or not math.isfinite(value):
        frac = 0.5
    else:
        frac = min(max((value - vmin) / (vmax - vmin), 0.0), 1.0)
    return sample_colorscale(scale, [frac])[0]


def scale_colors(values: Sequence[float], vmin: float, vmax: float, scale: str) -> list[str]:
    """``scale_color`` for many values with one colorscale sampling call."""
    fracs = []
    for value in values:
        if vmax <= vmin or not math.isfinite(value):
            fracs.append(0.5)
        else:
            fracs.append(min(max((value - vmin) / (vmax - vmin), 0.0), 1.0))
    return sample_colorscale(scale, fracs) if fracs else []


@lru_cache(maxsize=4096)
def text_color(rgb: str) -> str:
    """Black or white text for a background colour, by relative luminance (WCAG)."""
    if rgb.startswith("#"):
        r, g, b = (int(rgb[i : i + 2], 16) for i in (1, 3, 5))
    else:
        r, g, b = (float(c) for c in unlabel_rgb(rgb))

    def lin(c: float) -> float:
        c = c / 255.0
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "#000000" if lum > 0.179 else "#ffffff"


def token_chips_html(
    tokens: Sequence[str],
    values: Sequence[float],
    scale: str = SIGNED_SCALE,
    *,
    vmin: float | None = None,
    vmax: float | None = None,
    name: str = "value",
    color_values: Sequence[float] | None = None,
    highlight: int | None = None,
) -> str:
    """One response as coloured token chips: escaped text, visible whitespace, number on hover.

    Args:
        tokens: display strings of the response's tokens (untrusted model output).
        values: one number per token (shown in the tooltip).
        scale: plotly colorscale name (the same one as the matching heatmap/colorbar).
        vmin: bottom of the colour range (default: -max|v| for RdBu-like scales, else min).
        vmax: top of the colour range (default: max|v| or max).
        name: quantity name for the tooltip.
        color_values: numbers that pick the colour if different from ``values`` (e.g. the
            surprisal -logprob while the tooltip shows logprob).
        highlight: index of a token to outline (the selected token), or None.

    Returns:
        An HTML string (a ``div`` of ``span`` chips) safe to pass to st.html.
    """
    vals = [float(v) for v in values]
    cvals = [float(v) for v in (color_values if color_values is not None else vals)]
    finite = [v for v in cvals if math.isfinite(v)]
    if vmin is None or vmax is None:
        if scale in {SIGNED_SCALE, "PuOr", "BrBG", "balance"}:
            top = max((abs(v) for v in finite), default=1.0) or 1.0
            lo, hi = -top, top
        else:
            lo, hi = min(finite, default=0.0), max(finite, default=1.0)
        vmin = lo if vmin is None else vmin
        vmax = hi if vmax is None else vmax
    chips = []
    colours = scale_colors(cvals, vmin, vmax, scale)
    for i, (tok, v, bg) in enumerate(zip(tokens, vals, colours, strict=False)):
        fg = text_color(bg)
        ring = "outline:3px solid #111;outline-offset:1px;" if i == highlight else ""
        shown = html.escape(visible_whitespace(tok))
        tip = html.escape(f"{tok!r}  {name} = {v:.4f}", quote=True)
        chips.append(
            f'<span title="{tip}" tabindex="0" style="background:{bg};color:{fg};{ring}'
            "padding:1px 3px;margin:1px;border-radius:4px;white-space:pre;"
            f'display:inline-block">{shown}</span>'
        )
        if "\n" in tok:
            chips.append("<br>")
    return (
        f'<div class="rv-chips" style="line-height:1.9;font-family:{FONT};font-size:0.92em">'
        + "".join(chips)
        + "</div>"
    )


def colorbar_html(scale: str, vmin: float, vmax: float, title: str, steps: int = 24) -> str:
    """A small horizontal legend (gradient with the end values) matching the chips' colours."""
    stops = sample_colorscale(scale, [i / (steps - 1) for i in range(steps)])
    gradient = ", ".join(stops)
    return (
        '<div style="display:flex;align-items:center;gap:8px;font-size:0.85em;margin:4px 0 8px 0">'
        f"<span>{html.escape(title)}</span><span>{vmin:.3g}</span>"
        f'<span style="display:inline-block;width:220px;height:12px;border-radius:3px;'
        f'background:linear-gradient(to right, {gradient})"></span>'
        f"<span>{vmax:.3g}</span></div>"
    )


#: Chip views of the Samples page: view -> (label, tensor field, colour scale, range, surprisal).
CHIP_VIEWS = {
    "logprob": ("policy log-prob", "logprobs", CHIP_SEQUENTIAL_SCALE, (0.0, 8.0), True),
    "ref_logprob": ("reference log-prob", "ref_logprobs", CHIP_SEQUENTIAL_SCALE, (0.0, 8.0), True),
    "entropy": ("policy entropy", "entropy", SEQUENTIAL_SCALE, (0.0, 6.0), False),
    "exact_kl": ("exact KL", "exact_kl", SEQUENTIAL_SCALE, (0.0, 1.0), False),
}


def sample_chips_html(rollout: Rollout, b: int, view: str = "logprob") -> str:
    """Token chips of response ``b`` coloured by one per-token quantity of the rollout.

    Log-prob views colour by the surprisal -log p on a fixed [0, 8] light-start ramp (pale = the
    model was sure) and show the log-prob and probability on hover.

    Args:
        rollout: the batch.
        b: row index.
        view: a key of CHIP_VIEWS.

    Returns:
        Escaped HTML.
    """
    label, field, scale, (lo, hi), surprisal = CHIP_VIEWS[view]
    n = int(rollout.response_mask[b].sum())
    tokens = list(rollout.tokens[b][:n])
    values = getattr(rollout, field)[b, :n].tolist()
    color = [-v for v in values] if surprisal else values
    return token_chips_html(tokens, values, scale, vmin=lo, vmax=hi, name=label, color_values=color)


def chip_legend_html(view: str) -> str:
    """The colour legend of a chip view (same scale and range as the chips)."""
    label, _field, scale, (lo, hi), surprisal = CHIP_VIEWS[view]
    title = f"-({label}) = surprise" if surprisal else label
    return colorbar_html(scale, lo, hi, title + ":")
