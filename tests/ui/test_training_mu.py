"""AppTest of the Training page's loss option and sampler selects (URL-bound, server-checked)."""

from __future__ import annotations

from roll_viz.lm.loss_options import DEFAULT_OPTION, LOSS_OPTIONS, OPTION_IDS, options_for
from roll_viz.ui import training_mu as mu
from roll_viz.ui import training_page as tr
from roll_viz.ui import update_page
from tests.ui import apptest
from tests.ui.test_training_page import button, wait_done


def open_live(**params: str):
    return apptest.open_page("training", tab="Train live", **params)


def test_one_option_table_for_both_pages():
    assert update_page.OPTION_IDS is OPTION_IDS
    assert update_page.options_for is options_for
    for fw, opts in LOSS_OPTIONS.items():
        assert set(opts) <= set(options_for(fw))


def test_the_selects_offer_the_frameworks_options():
    at = open_live(fw="openrlhf")
    assert not at.exception, [e.message for e in at.exception]
    loss = at.selectbox(key=mu.KEY_LOSS)
    assert loss.options == list(options_for("openrlhf"))
    assert loss.value == DEFAULT_OPTION
    sampler = at.selectbox(key=mu.KEY_SAMPLER)
    assert sampler.value == "fp32"
    assert any("mu = pi_old" in c.value for c in at.caption)


def test_bad_link_values_fall_back_with_a_notice():
    at = open_live(fw="openrlhf", tr_sampler="fp8", tr_loss="nonsense")
    assert not at.exception, [e.message for e in at.exception]
    notices = " ".join(w.value.replace("\\", "") for w in at.warning)
    assert "tr_sampler=fp8 is not allowed" in notices
    assert "tr_loss=nonsense is not allowed" in notices
    assert at.selectbox(key=mu.KEY_SAMPLER).value == "fp32"
    assert at.selectbox(key=mu.KEY_LOSS).value == DEFAULT_OPTION
    # another framework's option: the shipped defaults, no error
    other = open_live(fw="roll", tr_loss="is_correction_level: token")
    assert not other.exception
    assert other.selectbox(key=mu.KEY_LOSS).value == DEFAULT_OPTION


def test_the_choice_reaches_the_run_settings():
    at = open_live(
        fw="openrlhf", tr_steps="1", tr_loss="is_correction_level: token", tr_sampler="int8"
    )
    assert not at.exception, [e.message for e in at.exception]
    assert any("corrects for the gap" in c.value for c in at.caption)
    button(at, "tr_start").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.session_state[tr.KEY_RUNNERS]  # this student's runners (shared by AppTests)
    runner = table["A"]
    try:
        assert runner.settings.loss_option == "is_correction_level: token"
        assert runner.settings.sampler == "int8"
        wait_done(at, ("A",))
        metrics = runner.records()[0].metrics
        assert metrics["sampler"] == "int8"
        assert metrics["delta_abs_mean"] > 0
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        fig = next(el for el in at.get("plotly_chart") if el.proto.id.endswith("tr_live_curves"))
        assert "sampler gap" in fig.proto.spec  # the mismatch curves are drawn for this run
    finally:  # later page tests start without this run
        table.pop("A", None)
        runner.close()
