"""One visual vocabulary for every figure: colour scales, fixed ranges, masked arrays, contrast.

Signed quantities (advantages, token rewards, k1) use one diverging scale with white at 0 and a
fixed symmetric range; non-negative ones (k2, k3, exact KL) a light sequential scale. Padding is
NaN, drawn blank, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale, unlabel_rgb
from torch import Tensor

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


def whole_ticks(values: Sequence[float]) -> dict:
    """An x axis of whole numbers (steps, counts): ticks 1, 2, 3, 5 ... apart, none between."""
    span = float(max(values) - min(values)) if len(values) else 0.0
    return {"dtick": max(1.0, nice_ceiling(span / 8)), "tickformat": "d"}


def title_style(text: str) -> dict:
    """The one title style of every figure: left-aligned, 15 px."""
    return {"text": text, "font": {"size": 15}, "x": 0.01, "xanchor": "left"}


# ---------------------------------------------------------------------------------------------
# Token chips (HTML)
# ---------------------------------------------------------------------------------------------
def scale_colors(values: Sequence[float], vmin: float, vmax: float, scale: str) -> list[str]:
    """The colours of ``values`` on a plotly colorscale over [vmin, vmax] (clipped), "rgb(...)"."""
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


def projector_fonts(fig: go.Figure, scale: float = 1.5) -> go.Figure:
    """A copy of ``fig`` with every font enlarged for a projector (presentation mode).

    Base font, tick labels, axis titles, legend, colour bars and annotations (subplot titles)
    grow by ``scale`` from Plotly's 12 px default; the data are untouched.

    Args:
        fig: any figure of this package.
        scale: font growth factor.

    Returns:
        A new figure.
    """
    out = go.Figure(fig)
    size = round(12 * scale)
    out.update_layout(font={"size": size}, legend={"font": {"size": size}})
    # automargin: the figures' fixed margins fit 12 px labels; at 1.5x a heatmap's y title ran
    # over its p0/s0 tick labels and the x title over the ticks
    out.update_xaxes(tickfont={"size": size}, title_font={"size": size + 2}, automargin=True)
    out.update_yaxes(tickfont={"size": size}, title_font={"size": size + 2}, automargin=True)
    for annotation in out.layout.annotations or ():
        annotation.font.size = size + 2
    out.update_traces(
        colorbar={"tickfont": {"size": size}, "title": {"font": {"size": size}}},
        selector=lambda t: "colorbar" in t,
    )
    if out.layout.coloraxis is not None and out.layout.coloraxis.colorbar is not None:
        out.update_layout(coloraxis_colorbar={"tickfont": {"size": size}})
    if out.layout.title is not None and out.layout.title.text:
        out.update_layout(title_font={"size": size + 4})
    return out


#: Plotly's figure height when a figure sets none (Streamlit draws it this tall too)
DEFAULT_HEIGHT = 450
#: pixels above the title, and between the title block and a legend under it
HEADER_GAP_PX = 6


def stacked_header(fig: go.Figure) -> dict[str, Any]:
    """The layout changes that stack ``fig``'s title, horizontal legend and plot, never overlapping.

    Figures placed a horizontal legend in fractions of the plot (``y = 1.06`` above it, ``-0.3``
    under it) inside fixed margins: with longer names or a projector's larger fonts it ran over
    the title or the x axis title. Here the title hangs from the figure's top edge, a horizontal
    legend sits right under it (both placed in pixels of the figure, ``yref="container"``), and
    Plotly pushes the plot down below them (its automatic margins). Vertical legends stay.

    Returns the changes, for one ``fig.update_layout`` (``fig`` is only read): a copy of a
    figure revalidates every array (about 40 ms for a 3 x 3 grid), the changes alone a few ms.
    """
    layout = fig.layout
    if layout.title.yref == "container" or layout.legend.yref == "container":
        return {}  # stacked already (the changes applied once more would move the legend)
    height = layout.height or DEFAULT_HEIGHT
    header_px = HEADER_GAP_PX
    patch: dict[str, Any] = {}
    if layout.title is not None and layout.title.text:
        size = layout.title.font.size or (layout.font.size or 12) + 3
        # a two-line title becomes title + subtitle: Plotly writes a <br> title's further lines
        # above its anchor, out of the figure; a subtitle goes under the title
        first, _, rest = str(layout.title.text).partition("<br>")
        title: dict[str, Any] = {"yref": "container", "y": 1 - header_px / height}
        title.update(yanchor="top", automargin=True)
        if rest:
            title.update(text=first, subtitle={"text": rest, "font": {"size": round(size * 0.8)}})
        patch["title"] = title
        lines = 1 + (rest.count("<br>") + 1 if rest else 0)
        header_px += math.ceil(lines * size * 1.3) + HEADER_GAP_PX
    legend = layout.legend.orientation == "h" and layout.showlegend is not False
    if legend:
        patch["legend"] = {"yref": "container", "y": 1 - header_px / height, "yanchor": "top"}
    above = _titles_above_plot(layout)
    if above:  # subplot titles sit on the plot's top edge: keep the title and legend clear
        room = (_legend_px(fig) if legend else 0) + above + 2 * HEADER_GAP_PX
        patch.setdefault("title", {}).update(automargin=True, pad={"b": room})
        patch["margin"] = {"t": header_px + room}
    return patch


def _titles_above_plot(layout: go.Layout) -> int:
    """Pixels that subplot titles take above the top row (0 when there are none)."""
    heights = [
        (a.font.size or (layout.font.size or 12) + 2) * (str(a.text).count("<br>") + 1)
        for a in layout.annotations or ()
        if a.yref == "paper" and a.yanchor == "bottom" and (a.y or 0) >= 0.999
    ]
    return math.ceil(max(heights) * 1.4) if heights else 0


def _legend_px(fig: go.Figure) -> int:
    """A horizontal legend's height, estimated: its entries wrapped at 900 px a row."""
    size = fig.layout.legend.font.size or fig.layout.font.size or 12
    names = {t.legendgroup or t.name for t in fig.data if t.showlegend is not False and t.name}
    width = sum(len(str(n)) * 0.6 * size + 45 for n in names)
    return math.ceil(max(1, math.ceil(width / 900)) * size * 1.6) + 8
