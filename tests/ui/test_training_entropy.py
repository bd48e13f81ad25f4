"""AppTest of the Training page's adaptive entropy target: the knob, the run, its curve."""

from __future__ import annotations

import json

from roll_viz.ui import training_page as tr
from tests.ui import apptest


def test_entropy_target_knob_runs_the_controller_and_draws_its_curve():
    at = apptest.open_page("training", tr_steps="2", tab="Train live", tr_ent="15")
    assert at.number_input(key=tr.KEY_ENTROPY_TARGET).value == 15.0
    next(b for b in at.button if b.key == "tr_start").click()
    at.run()
    table = at.session_state[tr.KEY_RUNNERS]
    try:
        table["A"].join(timeout=90)
        assert table["A"].status == "done", table["A"].error
        assert table["A"].settings.entropy_target == 15.0
        steps = table["A"].records()
        # the tiny model's entropy is below 15: c goes 0 -> 0.005 -> 0.01; step 2 applies 0.005
        assert [r.metrics["ent_coef_applied"] for r in steps] == [0.0, 0.005]
        assert [r.metrics["ent_coef_next"] for r in steps] == [0.005, 0.01]
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        figs = {
            el.proto.id.rsplit("-", 1)[-1]: json.loads(el.proto.spec)
            for el in at.get("plotly_chart")
        }
        fig = figs["tr_live_curves_entropy"]
        target = [t for t in fig["data"] if t.get("name", "").endswith(": target")]
        assert target[0]["y"] == [15.0, 15.0]
    finally:
        for runner in table.values():
            runner.close()
        table.clear()


def test_off_by_default_draws_no_entropy_curve():
    at = apptest.open_page("training", tab="Train live")
    assert at.number_input(key=tr.KEY_ENTROPY_TARGET).value == 0.0
    assert not any(el.proto.id.endswith("tr_live_curves_entropy") for el in at.get("plotly_chart"))


def test_an_out_of_range_link_value_is_named():
    at = apptest.open_page("training", tab="Train live", tr_ent="-3")
    assert not at.exception
    notices = " ".join(e.value for e in [*at.warning, *at.info, *at.error]).replace("\\", "")
    assert "The link's value tr_ent=-3 is not allowed" in notices
    assert at.number_input(key=tr.KEY_ENTROPY_TARGET).value == 0.0
