"""The group-health chips: counts, the no-signal share, each reward term's std, escaped text."""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.analysis.group_health import group_health
from roll_viz.views.health import CSS_CLASS, component_stds, health_chips_html

SCORES = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5], dtype=torch.float64)
GIDS = torch.tensor([0, 0, 1, 1, 2, 2, 3])


def test_counts_and_share():
    health = group_health(SCORES, GIDS, ["a", "b", "c", "d"])
    html = health_chips_html(health)
    assert CSS_CLASS in html
    assert "4 groups:" in html
    for chip in ("1 all-good", "1 all-bad", "1 mixed", "1 single", "50% no signal"):
        assert chip in html


def test_each_term_std_next_to_the_combined():
    """Two terms that cancel: the sum is flat in group 0, each term is not (ms-swift#4570)."""
    a = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    b = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    gids = torch.tensor([0, 0, 1, 1])
    health = group_health(a + b, gids, components={"fmt": a, "len<x>": b})
    stds = component_stds(health)
    assert stds["reward"] == 0.0
    assert stds["fmt"] == pytest.approx(math.sqrt(0.5) / 2)
    html = health_chips_html(health)
    assert "std: reward 0 \u00b7 fmt 0.354 \u00b7 len&lt;x&gt; 0.354" in html
    assert "<x>" not in html


def test_no_groups_of_two():
    health = group_health(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    assert math.isnan(component_stds(health)["reward"])
    assert "std n/a" in health_chips_html(health)
