"""Page runs take turns for the interpreter; a page that waits for the model gives its turn back.

Why: CPython runs one thread's Python at a time. When twenty students open a page in the same
second, twenty script threads (sidebar, widgets, figures) and the training threads hand the
interpreter around, and the server's event loop, which answers every student's websocket and
``/_stcore/health``, waits its turn behind all of them (traced: 0.7-1.3 s in the class's first
second). ``PageSlots`` lets at most ``slots`` page scripts run their Python at once; the others
wait, blocked without holding the interpreter, in arrival order. The work is the same, so the
class as a whole is not slower: the first students' pages are done sooner, the last ones' about
as late as before, and the event loop is never behind more than a couple of runnable threads.

A page that waits for the model (a lecture request runs for seconds, a training step holds the
model lock) must not keep a slot it does not use: ``released()`` hands the slot back for the
duration of the wait and the model work and takes one again after. ``ModelLock`` (the lock of
``models.ModelBundle``) does that on ``with bundle.lock:``, ``serving.model_turn`` and
``flight.SingleFlight``'s followers do it around their waits. Training runs and Update steps
that run on their own threads never hold a slot.

A slot only counts while its page is young: a page that has held one for ``hold_s`` (1 s; a page
run is 0.1-0.5 s of Python) is waiting on something, e.g. on another page's cached computation
inside Streamlit, which no wrapper here sees, so the next page in line goes ahead. A page coming
back from the model does not queue again: it takes a slot if one is free and runs on without one
otherwise (queueing there could wait on a page that waits for this one's cached result). And no
page waits more than ``max_wait_s`` (then it runs without a slot, counted in ``overflows``).
Measured before the first two rules: three students switching to a live batch at once, the first
to load the model waited 5 s for a slot held by two pages that waited for that very load
(``tests/bench/test_classroom_load.py``: live switch 5.3-5.6 s against 0.3-0.7 s ungated).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

#: default slots: two, so one page's torch op or socket write overlaps another's Python
DEFAULT_SLOTS = 2
MAX_SLOTS = 64
#: a page waits at most this long for a slot, then runs anyway
MAX_WAIT_S = 5.0
#: a slot held this long stops counting (its page waits on something: the next goes ahead)
HOLD_S = 1.0
RECHECK_S = 0.05  # how often a waiting page looks at the slots' ages


def _slots_from_env() -> int:
    """``ROLL_VIZ_PAGE_SLOTS`` (1 to 64; 0 turns the gate off), else ``DEFAULT_SLOTS``."""
    raw = os.environ.get("ROLL_VIZ_PAGE_SLOTS", "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_SLOTS
    return min(max(value, 0), MAX_SLOTS)


class PageSlots:
    """At most ``slots`` page scripts run at once, first come first served (module docstring).

    Args:
        slots: page runs allowed at once (0: no gate, every page runs at once).
        max_wait_s: how long a page waits for a slot before it runs without one.
        hold_s: a slot held this long no longer keeps the next page waiting.
    """

    def __init__(
        self, slots: int = DEFAULT_SLOTS, max_wait_s: float = MAX_WAIT_S, hold_s: float = HOLD_S
    ) -> None:
        if slots < 0:
            raise ValueError("slots must be >= 0")
        self.slots = slots
        self.max_wait_s = max_wait_s
        self.hold_s = hold_s
        self._cond = threading.Condition()
        self._holders: dict[object, float] = {}  # ticket -> when its page took the slot
        self._queue: list[object] = []  # waiting tickets, arrival order
        self._mine = threading.local()  # per thread: depth of page() and of released()
        self.overflows = 0
        self.admitted = 0

    # -- the slot itself -------------------------------------------------------------------
    def _young(self, now: float) -> int:
        """Slots held for less than ``hold_s`` (older holders are waiting on something)."""
        return sum(1 for started in self._holders.values() if now - started < self.hold_s)

    def _take(self, block: bool = True) -> bool:
        """Take a slot: wait in arrival order (at most ``max_wait_s``), or only if one is free.

        A slot whose page has held it ``hold_s`` or longer stops counting: such a page is
        waiting on something (the model, another page's cached computation), so the next in
        line goes ahead rather than wait behind it. Returns True when a slot was taken.
        """
        if self.slots == 0:
            return False
        ticket = object()
        with self._cond:
            if not block:
                got = self._young(time.monotonic()) < self.slots
            else:
                self._queue.append(ticket)
                deadline = time.monotonic() + self.max_wait_s
                try:
                    while True:
                        now = time.monotonic()
                        if self._queue[0] is ticket and self._young(now) < self.slots:
                            got = True
                            break
                        if now >= deadline:
                            got = False
                            break
                        self._cond.wait(min(RECHECK_S, deadline - now))
                finally:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
            if got:
                self._holders[ticket] = time.monotonic()
                self._mine.ticket = ticket
                self.admitted += 1
            else:
                self.overflows += 1
            return got

    def _give(self) -> None:
        with self._cond:
            self._holders.pop(getattr(self._mine, "ticket", None), None)
            self._mine.ticket = None
            self._cond.notify_all()

    @property
    def busy(self) -> int:
        """Slots in use now."""
        with self._cond:
            return len(self._holders)

    @property
    def waiting(self) -> int:
        """Page runs waiting for a slot now."""
        with self._cond:
            return len(self._queue)

    def holds(self) -> bool:
        """Whether the calling thread holds a slot now."""
        return getattr(self._mine, "held", False)

    # -- what callers use -------------------------------------------------------------------
    @contextlib.contextmanager
    def page(self) -> Iterator[bool]:
        """Run a page script in a slot (nested calls on one thread share the outer slot).

        Yields:
            True when the run holds a slot, False when it runs without one (gate off, nested,
            or it waited ``max_wait_s``).
        """
        if getattr(self._mine, "in_page", False):
            yield False
            return
        self._mine.in_page = True
        self._mine.held = self._take()
        self._mine.released = 0
        try:
            yield self._mine.held
        finally:
            if self._mine.held:
                self._give()
            self._mine.held = False
            self._mine.in_page = False

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Give the calling thread's slot back while the body waits (no-op without a slot)."""
        depth = getattr(self._mine, "released", 0)
        self._mine.released = depth + 1
        gave = depth == 0 and self.holds()
        if gave:
            self._mine.held = False
            self._give()
        try:
            yield
        finally:
            self._mine.released = depth
            if gave:  # no queueing on the way back: a slot if one is free, else run on
                self._mine.held = self._take(block=False)


class ModelLock:
    """The model's lock: a ``threading.Lock`` whose ``with`` gives the page's slot back meanwhile.

    ``acquire`` / ``release`` / ``locked`` are the plain lock's (callers that poll, as
    ``serving.model_turn`` does, wrap the whole wait in ``PAGE_SLOTS.released()`` themselves).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released: list[Any] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As ``threading.Lock.acquire``."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """As ``threading.Lock.release``."""
        self._lock.release()

    def locked(self) -> bool:
        """As ``threading.Lock.locked``."""
        return self._lock.locked()

    def __enter__(self) -> bool:
        gate = PAGE_SLOTS.released()
        gate.__enter__()
        try:
            self._lock.acquire()
        except BaseException:
            gate.__exit__(None, None, None)
            raise
        self._released.append(gate)  # only the holder touches the list while it holds the lock
        return True

    def __exit__(self, *exc: object) -> None:
        gate = self._released.pop()
        self._lock.release()
        gate.__exit__(None, None, None)


#: The process's gate: every page run of every session takes its turn here.
PAGE_SLOTS = PageSlots(_slots_from_env())
