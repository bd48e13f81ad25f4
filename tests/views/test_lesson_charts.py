"""The lesson figures: every built-in gate's explaining figure and the vote charts."""

from __future__ import annotations

from collections import Counter

import pytest

from roll_viz.analysis.lesson_answers import compute_lesson
from roll_viz.data.lessons import builtin_lessons
from roll_viz.views import lesson_charts


@pytest.fixture(scope="module")
def results():
    return compute_lesson(builtin_lessons()["seed_chain"])


def test_every_gate_has_its_figure(results):
    for result in results:
        fig = lesson_charts.gate_figure(result)
        assert fig is not None, result.gate.id
        assert fig.data, result.gate.id
        assert fig.layout.font.size >= lesson_charts.TICK_FONT  # readable at a projector


def test_vote_bars_mark_the_right_option():
    fig = lesson_charts.vote_bars(
        ["a", "b", "c"], {1: Counter({0.0: 2, 2.0: 1}), 2: Counter({2.0: 3})}, correct=2
    )
    first, second = fig.data
    assert list(first.x) == [2, 0, 1]
    assert list(second.x) == [0, 0, 3]
    assert first.marker.color[2] == lesson_charts.RIGHT
    assert first.marker.color[0] != lesson_charts.RIGHT
    assert first.y[2].startswith("✔")


def test_vote_bars_leave_out_an_empty_round():
    fig = lesson_charts.vote_bars(["a", "b"], {1: Counter({1.0: 4}), 2: Counter()}, correct=1)
    assert len(fig.data) == 1


def test_vote_histogram_draws_the_real_value():
    fig = lesson_charts.vote_histogram({1: Counter({-1.0: 2, -1.5: 1})}, -1.086, -3.0, 0.0)
    assert sorted(fig.data[0].x) == [-1.5, -1.0, -1.0]
    assert any(shape.x0 == -1.086 for shape in fig.layout.shapes)
