"""A fix gate's figures: the collapsing run, the top choices side by side, every fix marked."""

from __future__ import annotations

from collections import Counter

from roll_viz.analysis.lesson_answers import Outcome, compute_gate, run_env
from roll_viz.data.lessons import builtin_lessons
from roll_viz.data.recorded_runs import load_recorded
from roll_viz.views import lesson_charts

FIX = builtin_lessons()["fix_this_run"].gates[1]


def test_run_curves_are_the_recorded_metrics_from_zero():
    env = run_env(load_recorded("hack_beta0"))
    fig = lesson_charts.run_curves(env, "The run to fix: <b>x</b>")
    assert [list(t.y) for t in fig.data] == [env[name] for name, _ in lesson_charts.METRICS]
    assert fig.layout.title.text == "The run to fix: &lt;b&gt;x&lt;/b&gt;"  # shown as typed
    assert all(fig.layout[a].rangemode == "tozero" for a in fig.layout if a.startswith("yaxis"))


def test_outcome_columns_with_a_hostile_label():
    base = run_env(load_recorded("hack_beta0"))
    fixed = Outcome(
        0,
        "<img src=x onerror=alert(1)> & beta = 1",
        "hack_beta1",
        1.0,
        True,
        run_env(load_recorded("hack_beta1")),
    )
    not_fixed = Outcome(5, "nothing", "hack_beta0", 0.0, False, base)
    fig = lesson_charts.fix_outcomes(base, [fixed, not_fixed], "the collapse")
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [
        "A. &lt;img src=x onerror=alert(1)&gt; &amp;<br>beta = 1<br>fixed",
        "F. nothing<br>still collapses",
    ]
    assert len(fig.data) == 2 * 4 * 2  # per column and metric: the collapse and the change
    kl_fixed = fig.data[3]  # column 1, row 2: the change's KL
    assert list(kl_fixed.y) == fixed.env["run_kl"]
    assert kl_fixed.line.color == lesson_charts.FIXED
    assert fig.data[2].line.dash == "dash"  # the collapse, dashed, in every panel
    assert list(fig.data[2].y) == base["run_kl"]
    assert fig.data[-1].line.color == lesson_charts.NOT_FIXED


def test_the_votes_mark_every_fix():
    result = compute_gate(FIX)
    assert result.right == (0, 1)
    fig = lesson_charts.vote_bars(FIX.labels, {1: Counter({0.0: 2, 3.0: 4})}, result.right)
    names = list(fig.data[0].y)
    assert [n.startswith("✔ ") for n in names] == [True, True, False, False, False, False]
    colors = list(fig.data[0].marker.color)
    assert colors[:3] == [lesson_charts.RIGHT, lesson_charts.RIGHT, lesson_charts.ROUND_COLORS[1]]
    # one right option as before
    one = lesson_charts.vote_bars(["a", "b"], {1: Counter({1.0: 1})}, 1)
    assert [n.startswith("✔ ") for n in one.data[0].y] == [False, True]


def test_the_legend_names_the_collapse_and_each_verdict_once():
    base = run_env(load_recorded("hack_beta0"))
    runs = {n: run_env(load_recorded(n)) for n in ("hack_beta1", "adaptive_beta", "era_2026")}
    outcomes = [
        Outcome(0, "a", "hack_beta1", 1.0, True, runs["hack_beta1"]),
        Outcome(1, "b", "adaptive_beta", 1.0, True, runs["adaptive_beta"]),
        Outcome(4, "e", "era_2026", 0.0, False, runs["era_2026"]),
    ]
    fig = lesson_charts.fix_outcomes(base, outcomes, "the collapse")
    assert [t.name for t in fig.data if t.showlegend] == [
        "the collapse",
        "a change that fixed it",
        "a change that did not",
    ]
