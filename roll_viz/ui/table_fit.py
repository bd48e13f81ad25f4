"""Tables that fit a projector: in presentation mode every column is on the screen at 1280 px.

Streamlit's dataframe draws on a canvas: a table wider than its container scrolls sideways, and a
projector shows its first columns only (the numbers beside the names were off screen). In
presentation mode ``table`` sets each column's width so the columns add up to the container: a
column keeps its content's width where it can, and the widest ones (answers, prose) are cut
first, their whole text on hover. ``point`` names the column the page is about: pinned at the
left and never cut. Outside presentation mode a table keeps Streamlit's own widths.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from roll_viz.ui.present import is_present, sidebar_hidden

#: the canvas's 14 px font: pixels per character (a little wide, so estimates err on the safe
#: side), a cell's padding, and a header's extra room for its sort and menu icons
CHAR_PX = 7.6
CELL_PAD_PX = 26
HEADER_PAD_PX = 40
MIN_PX = 56
#: the main column's width at a 1280 px window in presentation mode (measured in Chromium):
#: with the sidebar hidden (the lecture's projector link) and with it shown
MAIN_PX = {True: 1110, False: 830}
#: rows read to estimate a column's width
SAMPLE_ROWS = 200


def natural_width(frame: pd.DataFrame, column: Any) -> int:
    """The pixels ``column`` takes uncut: its longest cell or its header, whichever is wider."""
    cells = frame[column].head(SAMPLE_ROWS)
    longest = max((len(_shown(v)) for v in cells), default=0)
    return int(max(longest * CHAR_PX + CELL_PAD_PX, len(str(column)) * CHAR_PX + HEADER_PAD_PX))


def _shown(value: Any) -> str:
    """A cell as the canvas writes it (floats with at most 4 decimals)."""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def natural_widths(frame: pd.DataFrame) -> dict[Any, int]:
    """Column -> its uncut width (``natural_width``)."""
    return {c: natural_width(frame, c) for c in frame.columns}


def fitted_widths(frame: pd.DataFrame, width_px: int, point: str | None = None) -> dict[Any, int]:
    """Column -> width so the columns add up to ``width_px`` at most; {} when the frame fits.

    The widest columns are cut to one common cap (the largest that fits), never below
    ``MIN_PX``; ``point`` keeps its natural width.
    """
    natural = natural_widths(frame)
    if sum(natural.values()) <= width_px:
        return {}
    fixed = natural.get(point, 0) if point in natural else 0
    others = sorted(w for c, w in natural.items() if c != point)
    room, cap = width_px - fixed, MIN_PX
    for i, w in enumerate(others):  # water-filling: columns narrower than the cap keep their width
        level = (room - sum(others[:i])) / (len(others) - i)
        if w > level:
            cap = max(MIN_PX, int(level))
            break
    return {c: (w if c == point else min(w, cap)) for c, w in natural.items()}


def table(
    frame: pd.DataFrame,
    *,
    key: str,
    point: str | None = None,
    share: float = 1.0,
    column_config: dict[Any, Any] | None = None,
    **kwargs: Any,
) -> None:
    """``st.dataframe`` (no index, the column's width) that fits the projector's screen.

    Args:
        frame: the table.
        key: the widget key.
        point: the column the page is about (pinned, never cut), if any.
        share: the part of the main column the table sits in (0.5 in one of two columns).
        column_config: Streamlit column settings; they win over the fitted widths.
        **kwargs: passed on to ``st.dataframe``.
    """
    config: dict[Any, Any] = {}
    if is_present():
        widths = fitted_widths(frame, int(MAIN_PX[sidebar_hidden()] * share), point)
        natural = natural_widths(frame) if widths else {}
        config = {  # a cut header names itself on hover
            c: st.column_config.Column(width=w, help=str(c) if w < natural[c] else None)
            for c, w in widths.items()
        }
        if point in frame.columns:
            config[point] = st.column_config.Column(width=widths.get(point), pinned=True)
    config.update(column_config or {})
    st.dataframe(
        frame, key=key, hide_index=True, width="stretch", column_config=config or None, **kwargs
    )
