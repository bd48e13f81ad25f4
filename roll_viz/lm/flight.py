"""Single-flight: identical concurrent requests share one run instead of each running it.

``SingleFlight.run(key, work, progress)``: the first caller with a key (the leader) runs
``work(relay)``; callers that come with an equal key while it runs (followers) wait for its result
and get the SAME object (treat it as read-only), or its error. Followers' ``progress`` is called
from their own thread about 4 times a second with the leader's last fraction and message. Nothing
is kept after the run: a later identical request runs again. Used by ``rollout.shared_sample``
(the in-process model) and ``engine_rollout.shared_engine_sample`` (a rollout engine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from roll_viz.lm.admission import PAGE_SLOTS

Progress = Callable[[float, str], None]

SHARED_NOTE = " (shared with an identical request)"


class Flight:
    """One in-flight run that identical requests wait on.

    Attributes:
        done: set when the leader's run ended (result or error).
        result: the leader's result.
        error: the leader's exception, if it raised.
        fraction: the leader's last progress fraction.
        message: the leader's last progress message.
        followers: how many callers wait on this run.
    """

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.fraction = 0.0
        self.message = "Waiting for the model"
        self.followers = 0


class SingleFlight:
    """A table of in-flight runs by key (see the module docstring).

    Attributes:
        flights: key -> the run in progress (entries are dropped when a run ends).
        max_flights: at most this many distinct runs tracked at once; beyond, requests run alone
            (None: no limit).
    """

    def __init__(self, max_flights: int | None = None) -> None:
        self.flights: dict[Hashable, Flight] = {}
        self.lock = threading.Lock()
        self.max_flights = max_flights

    def in_flight(self) -> int:
        """How many distinct runs are in progress."""
        with self.lock:
            return len(self.flights)

    def run(
        self,
        key: Hashable,
        work: Callable[[Progress | None], Any],
        progress: Progress | None = None,
        wrap_error: bool = True,
    ) -> Any:
        """Run ``work`` once for all concurrent callers with an equal ``key``.

        Args:
            key: what makes two requests identical (hashable).
            work: the run; gets the progress callback to report through (the caller's, relayed
                to the followers), or None when the caller passed none and runs alone.
            progress: optional ``(fraction, message)`` callback of this caller.
            wrap_error: followers get the leader's error wrapped in a RuntimeError (a traceback
                of their own); False re-raises the leader's exception object itself.

        Returns:
            The leader's result (the same object for every caller of one run).
        """
        with self.lock:
            flight = self.flights.get(key)
            leader = flight is None
            if leader:
                full = self.max_flights is not None and len(self.flights) >= self.max_flights
                flight = None if full else self.flights.setdefault(key, Flight())
            else:
                flight.followers += 1
        if flight is None:
            return work(progress)
        if leader:
            return self._lead(key, flight, work, progress)
        with PAGE_SLOTS.released():  # a follower waits seconds: no page slot meanwhile
            while not flight.done.wait(0.25):
                if progress is not None:
                    progress(flight.fraction, flight.message + SHARED_NOTE)
        if flight.error is not None:
            if not wrap_error:
                raise flight.error
            raise RuntimeError("the shared run failed") from flight.error
        if progress is not None:
            progress(1.0, "Done" + SHARED_NOTE)
        return flight.result

    def _lead(
        self,
        key: Hashable,
        flight: Flight,
        work: Callable[[Progress | None], Any],
        progress: Progress | None,
    ) -> Any:
        def relay(fraction: float, message: str) -> None:
            flight.fraction, flight.message = fraction, message
            if progress is not None:
                progress(fraction, message)

        try:
            flight.result = work(relay)
        except BaseException as err:
            flight.error = err
            raise
        finally:
            with self.lock:
                self.flights.pop(key, None)
            flight.done.set()
        return flight.result
