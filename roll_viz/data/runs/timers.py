"""Many deadlines, one thread: ``Deadlines.call_later`` instead of a ``threading.Timer`` each.

The upload store (an upload its sessions left is removed after the grace) and the reconnect
parking (``ui.reconnect``: a closed session's runs are freed after the grace) each started one
``threading.Timer`` per closed session: a class of 20 closing its tabs held 20-40 threads for the
120 s grace, every class of the day (#33). Here one daemon thread sleeps until the earliest
deadline, runs what is due (in deadline order; an exception is logged, the rest still run) and
exits when nothing is left, so an idle server holds no timer thread at all.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

_LOG = logging.getLogger(__name__)


class Deadline:
    """A pending call; ``cancel()`` before it is due and it never runs."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run it (a no-op once it ran)."""
        self.cancelled = True


class Deadlines:
    """Calls due at monotonic times, run by at most one thread (named ``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline, Callable[..., Any], tuple]] = []
        self._order = itertools.count()  # ties run in the order they were added
        self._thread: threading.Thread | None = None

    def call_later(self, delay_s: float, fn: Callable[..., Any], *args: Any) -> Deadline:
        """Run ``fn(*args)`` on the timer thread in ``delay_s`` seconds."""
        handle = Deadline()
        with self._cond:
            due = time.monotonic() + max(delay_s, 0.0)
            heapq.heappush(self._heap, (due, next(self._order), handle, fn, args))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return handle

    def pending(self) -> int:
        """Calls not yet run (cancelled ones included until their time)."""
        with self._cond:
            return len(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._thread = None  # the next call_later starts a new thread
                        return
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        _, _, handle, fn, args = heapq.heappop(self._heap)
                        break
                    self._cond.wait(wait)
            if handle.cancelled:
                continue
            try:
                fn(*args)
            except Exception:  # one failed call must not stop the others
                _LOG.exception("%s: a timed call failed", self.name)
