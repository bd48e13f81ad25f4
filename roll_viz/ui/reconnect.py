"""A session's model state outlives a websocket drop: parked under the session id for a grace.

Streamlit releases every session-scoped resource (``st.cache_resource(scope="session")``) when
the websocket closes, a one-second wifi drop included, although the same browser session then
reconnects with its ``session_state`` (same session id). Releasing a training run or an Update
adapter there lost the student's work ("No run yet" where it read "step 22 / 50"; the adapter
back at "Step 1"). So the release parks the item under ``(session id, key)`` for
``RECONNECT_GRACE_S`` seconds and returns at once (it runs on Streamlit's event loop); the same
session asking for it again within the grace takes it back (``Parking.take``), otherwise
``on_expire`` frees it on a timer thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from streamlit.runtime.scriptrunner import get_script_run_ctx

#: how long a closed session's runs and adapters wait for the same session to reconnect
RECONNECT_GRACE_S = 120.0


def session_id() -> str:
    """The current browser session's id (kept by Streamlit across websocket reconnects)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


class Parking:
    """Items of closed sessions, each kept ``grace_s`` seconds for the same session to return.

    Args:
        grace_s: how long an item waits.
    """

    def __init__(self, grace_s: float = RECONNECT_GRACE_S) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[Any, threading.Timer]] = {}

    def park(self, key: Hashable, item: Any, on_expire: Callable[[Any], object]) -> None:
        """Keep ``item`` under ``key``; ``on_expire(item)`` runs if nobody takes it in time."""
        timer = threading.Timer(self.grace_s, self._expire, args=(key, item, on_expire))
        timer.daemon = True
        with self._lock:
            old = self._items.pop(key, None)
            self._items[key] = (item, timer)
        if old is not None and old[0] is not item:
            old[1].cancel()
            on_expire(old[0])
        timer.start()

    def take(self, key: Hashable) -> Any:
        """The item parked under ``key`` (its timer cancelled), or None."""
        with self._lock:
            entry = self._items.pop(key, None)
        if entry is None:
            return None
        entry[1].cancel()
        return entry[0]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def _expire(self, key: Hashable, item: Any, on_expire: Callable[[Any], object]) -> None:
        with self._lock:
            entry = self._items.get(key)
            if entry is None or entry[0] is not item:
                return
            del self._items[key]
        on_expire(item)
