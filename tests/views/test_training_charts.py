"""Training curves: each panel's title says what it plots (which share, which KL)."""

from __future__ import annotations

from roll_viz.data import recorded_runs
from roll_viz.views import training_charts


def test_panel_titles_say_what_they_plot():
    run = recorded_runs.load_recorded("hack_beta0")
    fig = training_charts.training_curves([run])
    titles = [a.text for a in fig.layout.annotations]
    assert "share of groups, all rewards equal" in titles  # not a bare "share of groups"
    assert "share of groups" not in titles
    assert "share of tokens clipped" in titles
    assert "KL to reference (dashed: estimate)" in titles
    assert "response length (tokens)" in titles
    assert "tokens" not in titles
