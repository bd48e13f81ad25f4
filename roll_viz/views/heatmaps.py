"""Token heatmaps: rows are samples b (prompt p, sample g), columns token positions t.

Hover shows the token (whitespace made visible) and the value; padding is blank.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from roll_viz.core.records import Rollout, Trace
from roll_viz.views.scales import (
    ADVANTAGE_RANGE,
    FONT,
    SEQUENTIAL_SCALE,
    SIGNED_SCALE,
    masked_array,
    nice_ceiling,
    symmetric_range,
    title_style,
)
from roll_viz.views.text import sample_labels, visible_whitespace


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
        y=sample_labels(rollout),
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


def _token_layout(title: str, rows: int) -> dict:
    """Layout of a token heatmap as one dict (one plotly validation pass, not several updates)."""
    return {
        "title": title_style(title),
        "height": _height(rows),
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
        "plot_bgcolor": "rgba(0,0,0,0)",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "hoverlabel": {"font": {"family": FONT}},
        "yaxis": {
            # a few rows leave no room for the long title beside them (it ran past the plot)
            "title": {"text": "sample (prompt p / sample s)" if rows > 6 else "sample p/s"},
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


def exact_kl_title(rollout: Rollout) -> tuple[str, str]:
    """(title, hover name) of the KL a rollout carries: exact, or the engine's top-K lower bound.

    A rollout engine returns only the top-K log-probs, so its "exact" KL is computed over those
    tokens plus one bucket for the rest (its ``meta`` has an ``engine`` entry and says so).
    """
    meta = rollout.meta
    if meta.engine is not None and meta.policy_mode != "identical":
        k = "K" if meta.topk is None else meta.topk
        return f"KL over the top-{k} tokens + the rest (a lower bound; engine)", "KL (top-K bound)"
    return "Exact KL over the full vocabulary", "exact KL"


def exact_kl_heatmap(rollout: Rollout, *, zmax: float | None = None) -> go.Figure:
    """The KL(policy || ref) at every position (YlGnBu from 0), titled by how it was computed."""
    title, quantity = exact_kl_title(rollout)
    return heatmap(
        rollout.exact_kl,
        rollout.response_mask,
        rollout=rollout,
        title=title,
        quantity=quantity,
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
    labels = sample_labels(rollout)
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
