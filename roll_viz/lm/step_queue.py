"""Fair turns for training steps: many runs share the model one step at a time, first come first.

Twelve students pressing Start at once each get a background thread (``train.TrainRunner``);
without an order they would all contend for the model lock at once (Python's ``Lock`` is not
fair: one run could take several steps while another waits) and keep every core busy. A
``StepQueue`` hands out turns: a runner asks for a turn before every step (``turn()``), at most
``concurrency`` steps run at once, the others wait in arrival order, and a runner that finished
a step queues again at the back, so N runs advance round-robin (each finishes its k-th step
before any finishes its (k+2)-th). ``position(ticket)`` is what the page states: 0 while the
step runs, k >= 1 for the k-th in line.

A waiting runner whose session closed leaves the line at once (``cancelled`` is polled, and
``wake()`` nudges the waiters), raising ``reaper.Cancelled``.

``share_the_interpreter()`` shortens CPython's switch interval (5 ms -> ``GIL_SWITCH_S``) in the
server: the pure-Python parts of the model threads (sampling loops, LoRA injection, reward
scoring) and of the page scripts hand the interpreter on sooner, so the event loop that answers
every student waits less for it after each socket write. ``python -m benchmarks.churn_load
--students 12`` on 2 cores, the server alone toggled, four runs each at load 10-12: health p99
795 -> 569 ms (mean), max 1.0-2.5 s -> 0.73-1.6 s (median 1.43 -> 0.89 s); the shipped setting
at load 8-10: p99 360-500 ms, max 0.81-1.47 s. It shortens the tail; it does not bound it by 1 s
on a loaded machine.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator

from roll_viz.lm.reaper import Cancelled

POLL_S = 0.5  # how often a waiter re-checks its cancel flag without a nudge
#: the server's interpreter switch interval (s); CPython's default is 5 ms
GIL_SWITCH_S = 0.001


def share_the_interpreter(interval: float = GIL_SWITCH_S) -> float:
    """Let a thread hold the interpreter at most ``interval`` s while others wait for it.

    Never lengthens an interval already shorter. Returns the interval in force.
    """
    if sys.getswitchinterval() > interval:
        sys.setswitchinterval(interval)
    return sys.getswitchinterval()


def _default_concurrency() -> int:
    """``ROLL_VIZ_TRAIN_CONCURRENCY`` (1 to 8), else 1: the steps share one model lock anyway."""
    raw = os.environ.get("ROLL_VIZ_TRAIN_CONCURRENCY", "")
    try:
        value = int(raw)
    except ValueError:
        return 1
    return min(max(value, 1), 8)


class StepQueue:
    """First-come-first-served turns, at most ``concurrency`` at a time.

    Args:
        concurrency: steps allowed to run at once (>= 1).
    """

    def __init__(self, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = concurrency
        self._cond = threading.Condition()
        self._waiting: list[int] = []  # tickets in arrival order
        self._running: set[int] = set()
        self._tickets = itertools.count(1)

    def ticket(self) -> int:
        """A fresh ticket (take it, then pass it to ``turn`` to be placed in line)."""
        return next(self._tickets)

    @contextlib.contextmanager
    def turn(
        self, ticket: int | None = None, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[int]:
        """Wait for this ticket's turn, run the body, give the turn back.

        Args:
            ticket: from ``ticket()`` (None: a fresh one).
            cancelled: polled while waiting; when it turns True the ticket leaves the line.

        Yields:
            The ticket.

        Raises:
            Cancelled: ``cancelled()`` became True while waiting.
        """
        ticket = self.ticket() if ticket is None else ticket
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not (self._waiting[0] == ticket and len(self._running) < self.concurrency):
                    if cancelled():
                        raise Cancelled("left the queue")
                    self._cond.wait(POLL_S)
                self._waiting.pop(0)
                self._running.add(ticket)
            finally:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                self._cond.notify_all()
        try:
            yield ticket
        finally:
            with self._cond:
                self._running.discard(ticket)
                self._cond.notify_all()

    def position(self, ticket: int | None) -> int | None:
        """0 while ``ticket``'s step runs, k for the k-th in line, None when not queued."""
        if ticket is None:
            return None
        with self._cond:
            if ticket in self._running:
                return 0
            try:
                return self._waiting.index(ticket) + 1
            except ValueError:
                return None

    @property
    def waiting(self) -> int:
        """How many steps wait for a turn."""
        with self._cond:
            return len(self._waiting)

    def wake(self) -> None:
        """Nudge the waiters to re-check their cancel flags now."""
        with self._cond:
            self._cond.notify_all()


#: The process's queue: every training run of every session takes its turns here.
TRAIN_QUEUE = StepQueue(_default_concurrency())
