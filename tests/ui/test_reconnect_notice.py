"""After a restart (or a hall process that died) Training and Update say what was lost."""

from __future__ import annotations

import threading

from roll_viz.ui import reconnect
from roll_viz.ui import update_page as upd
from roll_viz.ui.reconnect import Parking
from tests.ui import apptest


def _warnings(at) -> str:
    return " ".join(w.value for w in at.warning)


#: this test browser's student key (its cookie), and another browser's
KEY, OTHER = "k" * 32, "o" * 32
UPDATE_LIVE = {"preset": "quantum", "live": "true", "G": "2", "T": "8"}


def _open(page: str, mark_key: str, mark: str, **params: str):
    """``page`` opened by the browser of ``KEY`` on a link whose mark ``mark`` is ``mark_key``'s."""
    param = {"training": "tr_live", "update": "upd_live"}[page]
    at = apptest.router(page, **params, **{param: f"{mark}-{reconnect.owner_tag(mark_key)}"})
    at.session_state[reconnect.KEY_STUDENT] = KEY
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_a_link_from_before_a_restart_says_the_run_is_gone():
    at = _open("training", KEY, "deadbeef-22", tab="Train live")
    assert "The server restarted: your run of 22 steps is gone" in _warnings(at)
    assert "its settings are in the link" in _warnings(at)


def test_a_link_of_this_server_whose_run_expired_says_so():
    at = _open("training", KEY, f"{reconnect.BOOT_ID}-3", tab="Train live")
    assert "Your run of 3 steps is no longer on the server" in _warnings(at)


def test_a_shared_link_tells_its_receiver_nothing_about_the_senders_run():
    # the URL is how a page is shared: the sender's mark must not read as the receiver's loss
    for mark in ("deadbeef-22", f"{reconnect.BOOT_ID}-3"):
        at = _open("training", OTHER, mark, tab="Train live")
        assert "run of" not in _warnings(at), mark
    at = apptest.open_page("training", tab="Train live", tr_live="deadbeef-22")  # no owner
    assert "run of" not in _warnings(at)
    at = _open("update", OTHER, "deadbeef-3", **UPDATE_LIVE)
    assert "adapter of" not in _warnings(at)


def test_parking_gives_back_within_the_grace_and_frees_after():
    parking = Parking(grace_s=0.2)
    freed = []
    done = threading.Event()

    def free(item):
        freed.append(item)
        done.set()

    parking.park("s1", "run-a", free)
    assert parking.take("s1") == "run-a"  # the same session came back in time
    assert parking.take("s1") is None
    parking.park("s2", "run-b", free)
    assert done.wait(5)
    assert freed == ["run-b"]
    assert parking.take("s2") is None
    assert len(parking) == 0



def test_an_update_link_from_another_process_says_the_adapter_is_gone():
    # a hall process died: the proxy sends the browser to another, whose session has no adapter
    at = _open("update", KEY, "deadbeef-3", **UPDATE_LIVE)
    assert "The server restarted: your adapter of 3 steps is gone" in _warnings(at)
    assert "press Take one update step to start again from the base model" in _warnings(at)


def test_an_update_link_of_this_process_whose_adapter_expired_says_so():
    at = _open("update", KEY, f"{reconnect.BOOT_ID}-1", **UPDATE_LIVE)
    assert "Your adapter of 1 step is no longer on the server" in _warnings(at)


def test_a_step_marks_the_link_and_its_adapter_says_nothing_lost():
    at = apptest.open_page("update", **UPDATE_LIVE)
    assert "no longer on the server" not in _warnings(at)
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    tag = reconnect.owner_tag(at.session_state[reconnect.KEY_STUDENT])
    assert at.query_params[upd.KEY_LIVE_MARK] == f"{reconnect.BOOT_ID}-1-{tag}"
    assert "gone" not in _warnings(at)  # the adapter is here: nothing to say
    at.button(key=upd.KEY_RESET).click().run()  # the next test's session starts at step 0
    assert upd.KEY_LIVE_MARK not in at.query_params
