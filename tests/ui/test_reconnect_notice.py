"""After a server restart the Training page says what was lost; parked state expires on time."""

from __future__ import annotations

import threading

from roll_viz.ui import training_page as tr
from roll_viz.ui.reconnect import Parking
from tests.ui import apptest


def _warnings(at) -> str:
    return " ".join(w.value for w in at.warning)


def test_a_link_from_before_a_restart_says_the_run_is_gone():
    at = apptest.open_page("training", tab="Train live", tr_live="deadbeef-22")
    assert "The server restarted: your run of 22 steps is gone" in _warnings(at)
    assert "its settings are in the link" in _warnings(at)


def test_a_link_of_this_server_whose_run_expired_says_so():
    at = apptest.open_page("training", tab="Train live", tr_live=f"{tr.BOOT_ID}-3")
    assert "Your run of 3 steps is no longer on the server" in _warnings(at)


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
