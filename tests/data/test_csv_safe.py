"""Every CSV the app writes is safe to open in a spreadsheet; numbers stay numbers.

The defect: a batch whose prompts start with ``=`` (``=cmd|" /C calc"!A0``) came back out of
``samples.csv`` as 24 live spreadsheet formulas.
"""

from __future__ import annotations

import csv
import io

import pandas as pd

from roll_viz.data.runs.export import FORMULA_START, neutral_cell, safe_csv

PAYLOAD = '=cmd|" /C calc"!A0'


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_24_formula_prompts_come_out_inert():
    df = pd.DataFrame(
        {
            "prompt": [PAYLOAD] * 24,
            "response": ["+A1", "-x", "@SUM(A1)", "\tTAB", "\rCR", "plain"] * 4,
            "reward": [-1.5, 0.0, 2.0, -3.0, 1e-3, 4.0] * 4,
            "tokens": [-3, 4, 5, 6, 7, 8] * 4,
        }
    )
    rows = _cells(safe_csv(df))
    assert rows[0] == ["prompt", "response", "reward", "tokens"]
    live = [c for row in rows[1:] for c in row[:2] if c.startswith(FORMULA_START)]
    assert live == []
    assert all(row[0] == "'" + PAYLOAD for row in rows[1:])
    assert [row[2] for row in rows[1:7]] == ["-1.5", "0.0", "2.0", "-3.0", "0.001", "4.0"]
    assert rows[1][3] == "-3"  # a negative NUMBER is not a formula


def test_neutral_cell_only_changes_formula_text():
    assert neutral_cell("=1+1") == "'=1+1"
    assert neutral_cell("-2.5") == "-2.5"  # text that is a plain number
    assert neutral_cell("-2.5e3") == "-2.5e3"
    assert neutral_cell("-x") == "'-x"
    assert neutral_cell(-2.5) == -2.5
    assert neutral_cell(None) is None
    assert neutral_cell("a=b") == "a=b"


def test_column_names_are_neutralised_too():
    df = pd.DataFrame({"=HYPERLINK(1)": ["x"]})
    assert _cells(safe_csv(df))[0] == ["'=HYPERLINK(1)"]
