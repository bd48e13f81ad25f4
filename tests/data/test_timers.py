"""One timer thread for many deadlines (#33: a ``threading.Timer`` per closed session held 20
threads through every class's 120 s grace)."""

from __future__ import annotations

import threading
import time

from roll_viz.data.runs import uploads
from roll_viz.data.runs.timers import Deadlines


def _threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def _wait(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_many_deadlines_run_in_order_on_one_thread_that_then_exits():
    timers = Deadlines("test-deadlines")
    ran: list[int] = []
    names: set[str] = set()

    def call(i: int) -> None:
        ran.append(i)
        names.add(threading.current_thread().name)

    timers.call_later(0.6, call, -1)  # added first, due last
    for i in range(40):
        timers.call_later(0.05 + 0.001 * i, call, i)
    assert _threads("test-deadlines") == 1  # 41 pending calls, one thread
    assert _wait(lambda: len(ran) == 41)
    assert ran == [*range(40), -1]
    assert names == {"test-deadlines"}
    assert _wait(lambda: _threads("test-deadlines") == 0)  # idle: no thread left
    timers.call_later(0.0, call, 99)  # and a later call starts one again
    assert _wait(lambda: ran[-1] == 99)


def test_a_cancelled_call_never_runs_and_a_failing_one_stops_nothing():
    timers = Deadlines("test-deadlines-2")
    ran: list[str] = []
    skipped = timers.call_later(0.05, ran.append, "cancelled")
    timers.call_later(0.06, lambda: 1 / 0)
    timers.call_later(0.07, ran.append, "after the failure")
    skipped.cancel()
    assert _wait(lambda: ran == ["after the failure"])
    time.sleep(0.1)
    assert ran == ["after the failure"]


def test_upload_releases_share_one_purge_thread(tmp_path, monkeypatch):
    store = uploads.UploadStore(tmp_path, grace_s=0.3)
    for i in range(20):  # a class of 20 closing their tabs
        store.save(
            f"r{i}.jsonl", b'{"prompt": "p", "response": "r", "reward": 1}\n' * (i + 1), f"s{i}"
        )
    for i in range(20):
        store.release(f"s{i}")
    assert _threads("roll-viz-upload-purge") <= 1
    assert _wait(lambda: store.used_bytes() == 0)
    pending = uploads.TIMERS.pending()
    store.release("nobody")  # holding nothing schedules nothing
    assert uploads.TIMERS.pending() <= pending
