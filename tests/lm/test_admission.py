"""Page slots: a few page runs at a time, first come first served, given back while waiting."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from roll_viz.lm import admission, flight, serving
from roll_viz.lm.admission import ModelLock, PageSlots


def _run_pages(
    slots: PageSlots, n: int, hold_s: float, gated: bool = True
) -> tuple[int, list[int]]:
    """n threads run a page of ``hold_s`` at once; (most at once, order of admission)."""
    state = {"now": 0, "most": 0}
    order: list[int] = []
    guard = threading.Lock()
    started = threading.Barrier(n)

    def arrived() -> int:
        return slots.waiting + slots.admitted

    def page(i: int) -> None:
        started.wait()
        # arrive in index order: after every earlier page is in line or in, however late a
        # loaded machine schedules this thread (without a gate nobody lines up: staggered only)
        deadline = time.monotonic() + 10
        while gated and arrived() < i and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0 if gated else 0.01 * i)
        with slots.page() as held:
            assert held == gated
            with guard:
                order.append(i)
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            time.sleep(hold_s)
            with guard:
                state["now"] -= 1

    threads = [threading.Thread(target=page, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return state["most"], order


def test_at_most_slots_pages_run_at_once_in_arrival_order() -> None:
    slots = PageSlots(2, max_wait_s=10)
    most, order = _run_pages(slots, 6, hold_s=0.08)
    assert most == 2
    assert order == list(range(6))
    assert slots.busy == 0
    assert slots.waiting == 0
    assert slots.admitted == 6
    assert slots.overflows == 0


def test_no_gate_with_zero_slots() -> None:
    slots = PageSlots(0)
    with slots.page() as held:
        assert not held
    most, _ = _run_pages(PageSlots(0), 4, hold_s=0.1, gated=False)
    assert most == 4


@contextlib.contextmanager
def _held_elsewhere(slots: PageSlots) -> Iterator[None]:
    """Another thread's page holds a slot (blocked inside it) while the body runs."""
    inside = threading.Event()
    leave = threading.Event()

    def hog() -> None:
        with slots.page():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=hog)
    t.start()
    inside.wait(5)
    try:
        yield
    finally:
        leave.set()
        t.join(5)


def test_a_page_waits_at_most_max_wait_then_runs_without_a_slot() -> None:
    slots = PageSlots(1, max_wait_s=0.1)
    with _held_elsewhere(slots):
        t0 = time.monotonic()
        with slots.page() as held:
            waited = time.monotonic() - t0
            assert not held
    assert 0.09 <= waited < 2.0
    assert slots.overflows == 1
    assert slots.busy == 0


def test_released_gives_the_slot_to_another_page_and_takes_one_back() -> None:
    slots = PageSlots(1, max_wait_s=10)
    other_ran = threading.Event()

    def other() -> None:
        with slots.page() as held:
            assert held
            other_ran.set()

    with slots.page() as held:
        assert held
        assert slots.holds()
        t = threading.Thread(target=other)
        t.start()
        assert not other_ran.wait(0.2)  # the slot is taken
        with slots.released():
            assert not slots.holds()
            with slots.released():  # nested: still given back once
                assert other_ran.wait(5)
            assert slots.busy == 0
        assert slots.holds()
        assert slots.busy == 1
        t.join(5)
    assert slots.busy == 0


def test_released_without_a_slot_is_a_no_op() -> None:
    slots = PageSlots(1)
    with slots.released():
        assert slots.busy == 0
    assert slots.busy == 0


def test_nested_page_runs_share_the_outer_slot() -> None:
    slots = PageSlots(1, max_wait_s=10)
    with slots.page() as outer:
        with slots.page() as inner:  # an AppTest's page script run inside the router
            assert outer
            assert not inner
            assert slots.busy == 1
        assert slots.holds()
    assert slots.busy == 0


def test_model_lock_gives_the_page_slot_back_while_held(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = PageSlots(1, max_wait_s=10)
    monkeypatch.setattr(admission, "PAGE_SLOTS", slots)
    lock = ModelLock()
    with slots.page():
        with lock:
            assert lock.locked()
            assert slots.busy == 0  # another student's page may draw meanwhile
        assert not lock.locked()
        assert slots.busy == 1
    assert lock.acquire(blocking=False)
    assert not lock.acquire(blocking=False)
    lock.release()


def test_model_lock_is_exclusive() -> None:
    lock = ModelLock()
    inside = []

    def worker(i: int) -> None:
        for _ in range(50):
            with lock:
                inside.append(i)
                assert len(inside) == 1
                inside.pop()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not lock.locked()


def test_model_turn_runs_without_a_page_slot(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    slots = PageSlots(1, max_wait_s=10)
    monkeypatch.setattr(serving, "PAGE_SLOTS", slots)
    run = serving.RunProgress(tokens_total=1, estimate_decode_s=0.0, estimate_score_s=0.0)
    with slots.page():
        with serving.model_turn(tiny, run, lambda _f, _m: None):
            assert slots.busy == 0
            assert tiny.lock.locked()
        assert slots.busy == 1
        assert not tiny.lock.locked()


def test_single_flight_followers_wait_without_a_page_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = PageSlots(1, max_wait_s=10)
    monkeypatch.setattr(flight, "PAGE_SLOTS", slots)
    table = flight.SingleFlight()
    leader_in = threading.Event()
    finish = threading.Event()
    busy_seen: list[int] = []

    def work(_progress) -> str:
        leader_in.set()
        finish.wait(5)
        return "answer"

    leader = threading.Thread(target=lambda: table.run("k", work, None))
    leader.start()
    leader_in.wait(5)

    def progress(_fraction: float, _message: str) -> None:
        busy_seen.append(slots.busy)
        finish.set()

    with slots.page():
        assert table.run("k", work, progress) == "answer"
        assert slots.busy == 1
    leader.join(5)
    assert busy_seen
    assert busy_seen[0] == 0


@pytest.mark.parametrize(
    ("raw", "expected"), [("", 2), ("3", 3), ("0", 0), ("-4", 0), ("999", 64), ("two", 2)]
)
def test_slots_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: int
) -> None:
    monkeypatch.setenv("ROLL_VIZ_PAGE_SLOTS", raw)
    assert admission._slots_from_env() == expected


def test_a_slot_held_past_hold_s_lets_the_next_page_in() -> None:
    slots = PageSlots(1, max_wait_s=10, hold_s=0.1)
    with _held_elsewhere(slots):  # a page waiting on something outside the gate's view
        t0 = time.monotonic()
        with slots.page() as held:
            waited = time.monotonic() - t0
            assert held  # a slot of its own: the stuck one no longer counts
    assert 0.05 <= waited < 1.0
    assert slots.overflows == 0


def test_coming_back_from_the_model_never_queues_behind_pages_waiting_for_it() -> None:
    """The deadlock the classroom load test found: the page that loads what two others wait for."""
    slots = PageSlots(2, max_wait_s=10, hold_s=10)
    loaded = threading.Event()
    waiting = threading.Barrier(3)

    def waiter() -> None:  # holds a slot, blocked on the other page's computation
        with slots.page():
            waiting.wait(5)
            assert loaded.wait(5)

    with slots.page() as held:
        assert held
        with slots.released():  # the model work (the lock held, the slot given back)
            threads = [threading.Thread(target=waiter) for _ in range(2)]
            for t in threads:
                t.start()
            waiting.wait(5)  # both slots are taken by pages that wait for this one
            t0 = time.monotonic()
        assert not slots.holds()  # no slot free: it runs on without one, at once
        assert time.monotonic() - t0 < 0.5
        loaded.set()
    for t in threads:
        t.join(5)
    assert slots.busy == 0
    assert slots.overflows == 1
