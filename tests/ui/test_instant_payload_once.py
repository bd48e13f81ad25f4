"""The instant components get their payload's bulk once per browser mount (AppTest, no model).

What the component is given is read from the element Streamlit sends (its JSON data): the first
render carries the bulk (the encoded batch / rewards), a rerun with the same bulk carries only
its id, a new batch is sent again, a config-only change (a sidebar move) is not, and the
``missing_payload`` trigger (the browser lost it: a fresh mount after navigating back) makes the
next run send it again. The trigger is delivered as the browser does, as a widget state of the
component's trigger aggregator, so Streamlit itself calls the registered callback.
"""

from __future__ import annotations

import json

import pytest
import torch
from streamlit.components.v2.bidi_component.main import _make_trigger_id
from streamlit.testing.v1 import AppTest

from roll_viz.core.records import Batch
from roll_viz.ui import instant

KEY = "k"


def make_payload(seed: int = 0, gamma: float = 1.0) -> dict:
    """instant_payload of a 2 prompts x 2 x 5 tokens batch drawn from ``seed`` (ROLL, GAE)."""
    gen = torch.Generator().manual_seed(seed)
    B, T = 4, 5
    lengths = torch.tensor([5, 3, 1, 4])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    batch = Batch(
        scores=torch.rand(B, generator=gen, dtype=torch.float64),
        response_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        group_labels=("p0", "p1"),
        logprobs=-torch.rand(B, T, generator=gen, dtype=torch.float64),
        ref_logprobs=-torch.rand(B, T, generator=gen, dtype=torch.float64),
        values=torch.rand(B, T, generator=gen, dtype=torch.float64),
    )
    return instant.instant_payload(batch, "roll", {"adv_estimator": "gae", "gamma": gamma})


def make_lg_payload(seed: int = 0, gamma: float = 1.0) -> dict:
    """local_global_payload of 6 rewards drawn from ``seed`` (``gamma`` is ignored)."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(6, generator=gen, dtype=torch.float64)
    return instant.local_global_payload(scores, torch.tensor([0, 0, 0, 1, 1, 1]), ["a", "b"])


def app() -> None:
    """The AppTest script: one mount function (session ``which``) on payload (seed, gamma)."""
    import streamlit as st

    from roll_viz.ui import instant
    from tests.ui.test_instant_payload_once import KEY, make_lg_payload, make_payload

    which = st.session_state.get("which", "advantages")
    seed, gamma = st.session_state.get("seed", 0), st.session_state.get("gamma", 1.0)
    if which == "advantages":
        instant.instant_advantages(make_payload(seed, gamma), key=KEY)
    elif which == "panel":
        instant.instant_panel(make_payload(seed, gamma), {}, key=KEY, knobs=("gamma",))
    else:
        instant.instant_local_global(make_lg_payload(seed), key=KEY, sync=())


def data(at: AppTest) -> dict:
    """The ``data`` the (only) component on the page was given."""
    (el,) = at.get("bidi_component")
    return json.loads(el.proto.json)


def run(at: AppTest, **state) -> dict:
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return data(at)


def send_missing(at: AppTest, bulk_id: str) -> dict:
    """Rerun as after the browser's ``setTriggerValue("missing_payload", bulk_id)``."""
    (el,) = at.get("bidi_component")
    states = at._tree.get_widget_states()
    trigger = states.widgets.add()
    trigger.id = _make_trigger_id(el.proto.id, "events")
    trigger.json_trigger_value = json.dumps([{"event": "missing_payload", "value": bulk_id}])
    at._run(states)
    assert not at.exception, [e.message for e in at.exception]
    return data(at)


PAYLOADS = {"advantages": make_payload, "panel": make_payload, "local_global": make_lg_payload}


@pytest.mark.parametrize("which", list(PAYLOADS))
def test_bulk_is_sent_once_then_again_after_missing_payload(which):
    at = AppTest.from_function(app, default_timeout=60)
    first = run(at, which=which)
    full = PAYLOADS[which](0)
    # the first render carries everything; the browser's merge gives back the whole payload
    assert first["bulk"] is not None
    assert {**first["payload"], **first["bulk"]} == json.loads(json.dumps(full))
    assert set(first["bulk"]) == set(
        instant.LG_BULK_KEYS if which == "local_global" else instant.BULK_KEYS
    )

    # the same payload again: no bulk, only its id (and the small rest)
    second = run(at)
    assert second["bulk"] is None
    assert second["bulk_id"] == first["bulk_id"]
    assert second["payload_id"] == first["payload_id"]
    assert second["payload"] == first["payload"]
    saved = len(json.dumps(first)) - len(json.dumps(second))
    assert saved == len(json.dumps(first["bulk"])) - len("null")

    # a new batch is sent
    third = run(at, seed=1)
    assert third["bulk"] is not None
    assert third["bulk_id"] != first["bulk_id"]
    assert third["payload_id"] != first["payload_id"]

    # back to the first batch: this mount still holds it (one of the last SENT_MAX)
    again = run(at, seed=0)
    assert again["bulk"] is None
    assert again["bulk_id"] == first["bulk_id"]

    # the browser reports it lacks it (fresh mount): this very run sends it
    recovered = send_missing(at, first["bulk_id"])
    assert recovered["bulk"] == first["bulk"]
    assert recovered["bulk_id"] == first["bulk_id"]
    # ... and remembers it again
    assert run(at)["bulk"] is None


@pytest.mark.parametrize("which", ["advantages", "panel"])
def test_a_config_change_sends_the_config_but_not_the_batch(which):
    # a sidebar move on Advantages changes the payload's resolved config, not its batch
    at = AppTest.from_function(app, default_timeout=60)
    first = run(at, which=which)
    moved = run(at, gamma=0.9)
    assert moved["bulk"] is None
    assert moved["bulk_id"] == first["bulk_id"]
    assert moved["payload_id"] != first["payload_id"]  # the browser rebuilds with the new config
    assert moved["payload"]["config"]["gamma"] == 0.9
    assert first["payload"]["config"]["gamma"] == 1.0


def test_only_the_last_sent_max_bulks_are_remembered():
    at = AppTest.from_function(app, default_timeout=60)
    first = run(at, which="advantages")
    for seed in range(1, instant.SENT_MAX):
        assert run(at, seed=seed)["bulk"] is not None
    assert run(at, seed=0)["bulk"] is None  # 8 sent: still remembered
    assert run(at, seed=instant.SENT_MAX)["bulk"] is not None  # the 9th pushes seed 0 out
    back = run(at, seed=0)
    assert back["bulk"] == first["bulk"]
    sent = at.session_state[instant.SENT_STATE][KEY]
    assert len(sent) == instant.SENT_MAX
    assert sent[-1] == first["bulk_id"]


def test_keys_are_remembered_separately():
    at = AppTest.from_function(app, default_timeout=60)
    run(at, which="advantages")
    assert run(at)["bulk"] is None
    at.session_state[instant.SENT_STATE] = {"other": at.session_state[instant.SENT_STATE][KEY]}
    assert run(at)["bulk"] is not None  # ids sent to another key do not count for this one
