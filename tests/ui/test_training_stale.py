"""AppTest of the Training page's async parts: the lag and pi_old selects, the Async tab."""

from __future__ import annotations

import json

from roll_viz.ui import training_page as tr
from roll_viz.ui import training_stale as stale
from tests.ui import apptest
from tests.ui.test_training_page import button, wait_done

TAB = "Async: k steps behind"


def open_live(**params: str):
    return apptest.open_page("training", tab="Train live", **params)


def figures(at) -> dict[str, dict]:
    return {
        el.proto.id.rsplit("-", 1)[-1]: json.loads(el.proto.spec) for el in at.get("plotly_chart")
    }


def test_the_selects_default_to_synchronous():
    at = open_live()
    assert at.selectbox(key=stale.KEY_LAG).value == 0
    assert at.selectbox(key=stale.KEY_OLD).value == "recomputed"
    assert any("Synchronous" in c.value for c in at.caption)


def test_bad_link_values_fall_back_with_a_notice():
    at = open_live(tr_lag="7", tr_old="stale")
    assert not at.exception, [e.message for e in at.exception]
    notices = " ".join(w.value.replace("\\", "") for w in at.warning)
    assert "tr_lag=7 is not allowed" in notices
    assert "tr_old=stale is not allowed" in notices
    assert at.selectbox(key=stale.KEY_LAG).value == 0
    assert at.selectbox(key=stale.KEY_OLD).value == "recomputed"


def test_a_lagged_run_with_pi_old_as_pi_theta_and_its_three_columns():
    at = open_live(tr_steps="2", tr_lag="1", tr_old="current")
    assert not at.exception, [e.message for e in at.exception]
    assert any("ratio is exactly 1" in c.value for c in at.caption)
    button(at, "tr_start").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.session_state[tr.KEY_RUNNERS]  # this student's runners (shared by AppTests)
    runner = table["A"]
    try:
        assert (runner.settings.staleness, runner.settings.old_policy) == (1, "current")
        wait_done(at, ("A",))
        metrics = [r.metrics for r in runner.records()]
        assert [m["staleness"] for m in metrics] == [0, 1]
        assert all(m["clip_frac"] == 0.0 for m in metrics)
        at.query_params["tab"] = TAB
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        figs = figures(at)
        assert "tr_st_cols" in figs
        names = [t.get("name", "") for t in figs["tr_st_cols"]["data"]]
        assert any(n.startswith("log μ") for n in names)
        assert any(n.startswith("log π_old") for n in names)
        assert any("lag 1" in c.value for c in at.caption)
        anchors = next(d.value for d in at.dataframe if "clip fraction" in d.value.columns)
        assert len(anchors) == 3
        # pi_old := pi_theta: the ratio is exactly 1, nothing clipped
        row = anchors[anchors["what"].str.contains("SkyRL")].iloc[0]
        assert (row["ratio min"], row["ratio max"], row["clip fraction"]) == (1.0, 1.0, 0.0)
        tokens = next(d.value for d in at.dataframe if "log π_θ" in d.value.columns)
        assert len(tokens) > 0
    finally:  # later page tests start without this run
        table.pop("A", None)
        runner.close()


def test_discard_vs_pace_on_the_synthetic_lengths_then_a_recorded_run():
    at = apptest.open_page("training", tab=TAB, tr_tps="4", tr_max_stale="0")
    assert not at.exception, [e.message for e in at.exception]
    figs = figures(at)
    assert "tr_st_lengths" in figs
    summary = next(d.value for d in at.dataframe if "tokens wasted" in d.value.columns)
    rows = summary.set_index("what")
    # at 4 tokens a step and K = 0 only groups of at most 4 tokens survive discarding
    assert rows.loc["pace the sampler", "never trained"] == 0
    assert rows.loc["discard and requeue", "mean length"] <= 4 or (
        rows.loc["discard and requeue", "trained"] == 0
    )
    assert rows.loc["pace the sampler", "trainer steps waiting"] > 0
    # a recorded run: its 8 answers (2 prompts x G = 4), attempts from its kept steps
    box = at.selectbox(key=stale.KEY_RUN)
    box.set_value(next(o for o in box.options if o.startswith("recorded:"))).run()
    assert not at.exception, [e.message for e in at.exception]
    summary = next(d.value for d in at.dataframe if "tokens wasted" in d.value.columns)
    assert summary.set_index("what").loc["the data (first attempts)", "trained"] == 8
