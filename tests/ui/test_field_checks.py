"""Every page-local field is checked on the server: crafted values get a notice, never a crash.

Figures of the defect: a websocket client sending NaN into the Update page's integer epochs
field got the generic error page and the session stayed broken on the next rerun; values beyond
the Training fields' bounds did too; out-of-range link values for tr_steps, tr_beta, tr_horizon,
tr_slot, tr_lr were dropped without the notice ``G=1000000`` gets.
"""

from __future__ import annotations

import math

import pytest

from roll_viz.ui import training_page as tr
from roll_viz.ui import update_page as upd
from roll_viz.ui.fields import Field
from tests.ui import apptest


def _notices(at) -> str:
    return " ".join(w.value for w in at.warning).replace("\\", "")  # shown md-escaped


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (upd.KEY_EPOCHS, math.nan),
        (upd.KEY_EPOCHS, 10**6),
        (upd.KEY_EPOCHS, 2.5),
        (upd.KEY_MINIBATCHES, -3),
        (upd.KEY_LR, 0.77),
    ],
)
def test_update_page_crafted_value_gets_a_notice_and_the_session_lives(key, value):
    at = apptest.router("update", preset="quantum")
    at.session_state[key] = value  # what a crafted websocket message leaves in the session
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert f"The value {key}=" in _notices(at)
    assert at.session_state[key] == upd.FIELDS[key].default
    at.run()  # the next rerun is fine too
    assert not at.exception


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (tr.KEY_STEPS, 10**9),
        (tr.KEY_STEPS, math.nan),
        (tr.KEY_TRAIN_BETA, -1.0),
        (tr.KEY_HORIZON, math.inf),
        (tr.KEY_SLOT, "Z"),
        (tr.KEY_LR, 42.0),
        (tr.KEY_SEED, 1e300),
    ],
)
def test_training_page_crafted_value_gets_a_notice(key, value):
    at = apptest.router("training", tab="Train live")  # the page runs only its open tab
    at.session_state[key] = value
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert f"The value {key}=" in _notices(at)
    assert tr.field_specs()[key].accepts(at.session_state[key])


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (tr.KEY_STEPS, "1000000"),
        (tr.KEY_TRAIN_BETA, "nan"),
        (tr.KEY_HORIZON, "-5"),
        (tr.KEY_LR, "7"),
        (tr.KEY_SLOT, "Q"),
    ],
)
def test_training_link_values_out_of_range_get_the_link_notice(key, raw):
    at = apptest.open_page("training", tab="Train live", **{key: raw})
    assert f"The link's value {key}={raw} is not allowed" in _notices(at)


def test_field_rules():
    steps = Field(20, 1, 50, integer=True)
    assert steps.accepts(3)
    assert not steps.accepts(3.5)
    assert not steps.accepts(math.nan)
    assert not steps.accepts(10**400)
    assert not steps.accepts(True)
    assert not steps.accepts("3")
    lr = Field(5e-4, options=(1e-4, 5e-4))
    assert lr.accepts(0.0005)
    assert lr.parse("0.0005") == 5e-4
    assert lr.parse("7") is None
