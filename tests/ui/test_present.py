"""Projector mode folds prose away: explainers and intro text become expanders, figures stay."""

from __future__ import annotations

from tests.ui.apptest import open_page


def _expanders(at) -> list[str]:
    return [e.label for e in at.expander]


def test_present_folds_the_explainer_and_the_intro():
    plain = open_page("sensitivity")
    assert "What to look at" not in _expanders(plain)
    assert "How a sweep is summarised" not in _expanders(plain)
    assert len(plain.latex) >= 3  # the three summary formulas, one per line
    shown = open_page("sensitivity", present="true")
    assert "What to look at" in _expanders(shown)  # the explainer, folded
    assert "How a sweep is summarised" in _expanders(shown)
