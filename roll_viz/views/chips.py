"""HTML token chips: every token a span coloured by a value, escaped, whitespace made visible."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from plotly.colors import sample_colorscale

from roll_viz.core.records import Rollout
from roll_viz.views.scales import (
    CHIP_SEQUENTIAL_SCALE,
    FONT,
    SEQUENTIAL_SCALE,
    SIGNED_SCALE,
    scale_colors,
    text_color,
)
from roll_viz.views.text import visible_whitespace


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
