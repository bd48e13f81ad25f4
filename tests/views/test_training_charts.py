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


def test_adaptive_loop_draws_beta_kl_and_the_target_and_says_what_happened():
    run = recorded_runs.load_recorded(recorded_runs.ADAPTIVE)
    fig = training_charts.adaptive_beta_loop(run)
    assert fig.layout.title.text.startswith("Adaptive beta, closed loop: 30 steps")
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["beta"].y) == run.series("beta")
    assert list(by_name["KL (k1)"].y) == run.series("kl_est")
    assert list(by_name["target KL 0.1"].y) == [0.1, 0.1]
    summary = training_charts.adaptive_summary(run)
    assert summary.startswith("beta went from 0.100 down to 0.042 (step 5)")
    assert "the KL first passed the target at step 5" in summary
    # a fixed run is not called adaptive; a live run over the recording draws it faint
    fixed = training_charts.adaptive_beta_loop(recorded_runs.load_recorded("hack_beta1"))
    assert fixed.layout.title.text.startswith("beta fixed at 1")
    over = training_charts.adaptive_beta_loop(run, overlay=run)
    assert sum(1 for t in over.data if t.opacity == 0.3) == 2


def test_local_global_scale_table_and_panels():
    runs = [recorded_runs.load_recorded(n) for n in recorded_runs.LOCAL_GLOBAL_PAIR]
    table = training_charts.scale_table(runs)
    assert table["advantage std (mean over steps)"].round(2).tolist()[1] == 1.0  # batch-whitened
    assert table["steps"].tolist() == [30, 30]
    fig = training_charts.local_global_curves(runs, faint=(1,))
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [training_charts.METRICS[k][0] for k in training_charts.LOCAL_GLOBAL_PANELS]
