"""``ui.figure_cache``: a figure cached by its inputs' content, the same figure as built fresh.

The key reads content, not identity: equal tensors in new objects hit, one changed value, dtype
or shape misses; a type it cannot read raises rather than keying on something unrelated. A hit
is the very figure ``widgets.plot`` would draw (header stacked, projector fonts when asked).
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

from roll_viz.ui import figure_cache
from roll_viz.ui.figure_cache import content_key
from roll_viz.views import scales


@dataclasses.dataclass(frozen=True)
class _Record:
    name: str
    values: torch.Tensor


def test_equal_content_is_an_equal_key_whatever_the_object():
    a = _Record("x", torch.tensor([1.0, 2.0]))
    b = _Record("x", torch.tensor([1.0, 2.0]))
    assert a is not b
    assert content_key(a, [1, "s"], {"k": 0.5}) == content_key(b, [1, "s"], {"k": 0.5})


@pytest.mark.parametrize(
    "other",
    [
        _Record("x", torch.tensor([1.0, 2.5])),  # one value
        _Record("x", torch.tensor([1.0, 2.0], dtype=torch.float64)),  # dtype
        _Record("x", torch.tensor([[1.0, 2.0]])),  # shape
        _Record("y", torch.tensor([1.0, 2.0])),  # a field
    ],
)
def test_any_change_is_another_key(other):
    assert content_key(_Record("x", torch.tensor([1.0, 2.0]))) != content_key(other)


def test_types_are_told_apart_and_frames_read_by_content():
    assert content_key(1) != content_key("1") != content_key(1.0)
    assert content_key((1, 2)) != content_key([1, 2])
    df = pd.DataFrame({"a": [1.0, 2.0], "b": ["p", "q"]})
    assert content_key(df) == content_key(df.copy())
    assert content_key(df) != content_key(df.assign(a=[1.0, 2.5]))
    assert content_key(df) != content_key(df.rename(columns={"b": "c"}))


def test_an_unknown_type_raises():
    with pytest.raises(TypeError, match="no content key"):
        content_key(object())


def _bars(labels: list[str], values: torch.Tensor) -> go.Figure:
    _bars.calls += 1
    fig = go.Figure(go.Bar(x=labels, y=values.tolist(), name="v"))
    fig.update_layout(title="Bars<br>per sample", legend={"orientation": "h"})
    return fig


_bars.calls = 0


@pytest.mark.parametrize("present", [False, True])
def test_a_hit_is_the_figure_plot_would_draw(present):
    labels, values = ["a", "b"], torch.tensor([0.25, -1.0])
    fresh = _bars(labels, values)
    if present:
        fresh = scales.projector_fonts(fresh)
    fresh.update_layout(scales.stacked_header(fresh))
    key = content_key(labels, values)
    calls = _bars.calls
    first = figure_cache._spec("t._bars", key, present, _bars, (labels, values))
    again = figure_cache._spec("t._bars", key, present, _bars, (labels, torch.tensor([0.25, -1.0])))
    assert _bars.calls == calls + 1  # built once
    assert first == again == fresh.to_dict()
    assert go.Figure(first, _validate=False).to_dict() == fresh.to_dict()
    other = content_key(labels, torch.tensor([0.25, -2.0]))
    figure_cache._spec("t._bars", other, present, _bars, (labels, torch.tensor([0.25, -2.0])))
    assert _bars.calls == calls + 2  # new content, new figure
