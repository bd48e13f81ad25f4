"""Projector tables: column widths that add up to the screen, the point column never cut."""

import pandas as pd
import pytest

from roll_viz.ui import table_fit


def _frame():
    return pd.DataFrame(
        {
            "sample": [0, 1],
            "answer": ["x" * 300, "short"],  # a long answer: the first column to cut
            "global advantage": [0.5, -0.5],
            "note": ["y" * 120, "z"],
        }
    )


def test_a_frame_that_fits_keeps_streamlits_widths():
    assert table_fit.fitted_widths(_frame(), 10_000) == {}


@pytest.mark.parametrize("width", [600, 800, 1110])
def test_widths_add_up_to_the_screen_and_cut_the_widest_first(width):
    frame = _frame()
    natural = {c: table_fit.natural_width(frame, c) for c in frame.columns}
    widths = table_fit.fitted_widths(frame, width, point="global advantage")
    assert sum(widths.values()) <= width
    assert widths["global advantage"] == natural["global advantage"]  # the point: never cut
    assert widths["sample"] == natural["sample"]  # narrow columns keep their width
    assert widths["answer"] < natural["answer"]
    assert widths["answer"] >= widths["note"] or widths["note"] == natural["note"]


def test_never_below_the_minimum():
    frame = pd.DataFrame({f"column {i}": ["w" * 40] for i in range(30)})
    widths = table_fit.fitted_widths(frame, 300)
    assert min(widths.values()) == table_fit.MIN_PX


def test_natural_width_counts_floats_as_the_canvas_writes_them():
    frame = pd.DataFrame({"a": [0.123456789]})  # drawn as 0.1235: 6 characters
    assert table_fit.natural_width(frame, "a") == int(
        max(
            6 * table_fit.CHAR_PX + table_fit.CELL_PAD_PX,
            1 * table_fit.CHAR_PX + table_fit.HEADER_PAD_PX,
        )
    )
