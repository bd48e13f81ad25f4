"""One knob, one name: a Training link's ``beta=x`` trains at x; the dialect names a run's keys.

Before, the page had its own ``tr_beta`` (default 0) and dropped the sidebar's beta with a
hand-typed key list, so ``?beta=0.3`` showed 0.3 in the sidebar and trained at 0.
"""

from __future__ import annotations

import dataclasses

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.ui import training_page as tr
from tests.ui import apptest


def _start_one_step(at: AppTest):
    next(b for b in at.button if b.key == "tr_start").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.session_state[tr.KEY_RUNNERS]
    runner = table["A"]
    try:
        runner.join(timeout=90)
        assert runner.status == "done", (runner.status, runner.error)
        return runner.settings, runner.records()
    finally:
        for r in table.values():
            r.close()  # free the adapters in the shared cached model
        table.clear()  # AppTests share one session id: leave no run to the next test


def test_a_training_link_with_beta_trains_at_that_beta():
    at = apptest.open_page("training", tab="Train live", tr_steps="1", beta="0.3")
    assert not at.exception, [e.message for e in at.exception]
    assert at.session_state[tr.KEY_TRAIN_BETA] == pytest.approx(0.3)  # the control shows it
    settings, records = _start_one_step(at)
    assert settings.beta == pytest.approx(0.3)
    assert records[0].metrics["beta"] == pytest.approx(0.3)  # the step's trace used it


@pytest.mark.parametrize(("framework", "beta"), [("roll", "0.2"), ("verl", "0.001")])
def test_a_link_beta_equal_to_the_dialects_default_still_counts(framework, beta):
    """The sidebar drops a default value from the URL before the page runs; the link said it."""
    at = apptest.open_page("training", tab="Train live", tr_steps="1", fw=framework, beta=beta)
    assert not at.exception, [e.message for e in at.exception]
    assert at.session_state[tr.KEY_TRAIN_BETA] == pytest.approx(float(beta))
    settings, _ = _start_one_step(at)
    assert settings.beta == pytest.approx(float(beta))


def test_the_pages_own_tr_beta_wins_and_no_link_beta_keeps_zero():
    at = apptest.open_page("training", tab="Train live", beta="0.3", tr_beta="0.5")
    assert at.session_state[tr.KEY_TRAIN_BETA] == pytest.approx(0.5)
    plain = apptest.open_page("training", tab="Train live")
    assert plain.session_state[tr.KEY_TRAIN_BETA] == 0.0


def test_the_no_controller_note_names_the_framework(monkeypatch):
    """It said "TRL has no adaptive KL controller" for any dialect without one."""
    verl = dataclasses.replace(dialects.get("verl"), ADAPTIVE_BETA=False)
    monkeypatch.setitem(dialects.DIALECTS, "verl", verl)
    at = apptest.open_page("training", tab="Train live", fw="verl", tr_beta_mode="adaptive")
    assert not at.exception, [e.message for e in at.exception]
    notes = [c.value for c in at.caption if "adaptive KL controller" in c.value]
    assert notes == ["verl has no adaptive KL controller: fixed beta."]


@pytest.mark.parametrize("framework", pipeline.FRAMEWORKS)
def test_controller_keys_are_what_train_config_sets(framework):
    """The run's config drops exactly the keys ``train_config`` fills (no list to keep in step)."""
    d = dialects.get(framework)
    for adaptive in (False, True):
        cfg = d.train_config({}, beta=0.1, adaptive=adaptive, target_kl=0.05, horizon=100.0)
        assert set(cfg) == set(d.CONTROLLER_KEYS)
    assert d.BETA_KEY in d.CONTROLLER_KEYS
    assert set(d.CONTROLLER_KEYS) <= set(pipeline.resolve_config(framework, None))
