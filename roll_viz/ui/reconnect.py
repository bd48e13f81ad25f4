"""A student's model state outlives a websocket drop and a page reload: parked for a grace.

Streamlit releases every session-scoped resource (``st.cache_resource(scope="session")``) when
the websocket closes, a one-second wifi drop included, although the same browser session then
reconnects with its ``session_state`` (same session id). Releasing a training run or an Update
adapter there lost the student's work ("No run yet" where it read "step 22 / 50"; the adapter
back at "Step 1"). So the release parks the item under ``(session id, key)`` for
``RECONNECT_GRACE_S`` seconds and returns at once (it runs on Streamlit's event loop); the same
session asking for it again within the grace takes it back (``Parking.take``), otherwise
``on_expire`` frees it on a timer thread.

A page reload is a new websocket session with a new id, so the parking key is the browser's
**student key** (``student_key``), not the session id: a random 192-bit token
(``secrets.token_urlsafe``) kept in a first-party cookie (``STUDENT_COOKIE``, ``SameSite=Strict``)
that the page sets once (``remember_student``). It never appears in the URL, so sharing a link
never shares a student's runs; a value that is not such a token is ignored (a new key is drawn),
and a key cannot be guessed, so one student cannot name another's runs. Without the cookie (a
browser that blocks it) the key lives in the session only: a reconnect keeps the runs, a reload
does not. Two tabs of one browser are one student.

The grace (``RECONNECT_GRACE_S``, 120 s) covers a wifi drop, a reload or a tab closed and opened
again; it is bounded because a parked run keeps its adapter and AdamW state in memory (tens of MB
per student) and its run paused: after the grace the memory returns to the server.
``ROLL_VIZ_RECONNECT_GRACE_S`` (1 to 3600 s) sets another grace; the churn benchmark shortens it
to measure memory after the sessions are freed (it says so in its output), together with
Streamlit's own ``server.disconnectedSessionTTL`` (how long a closed session's state is kept).
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import secrets
import threading
from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from roll_viz.data.runs.timers import Deadline, Deadlines

DEFAULT_GRACE_S = 120.0
GRACE_ENV = "ROLL_VIZ_RECONNECT_GRACE_S"


def grace_from_env(default: float = DEFAULT_GRACE_S) -> float:
    """``ROLL_VIZ_RECONNECT_GRACE_S`` when it is a number of seconds in [1, 3600], else 120."""
    try:
        value = float(os.environ.get(GRACE_ENV, ""))
    except ValueError:
        return default
    return value if 1.0 <= value <= 3600.0 else default


#: how long a closed session's runs and adapters wait for the same student to come back
RECONNECT_GRACE_S = grace_from_env()
#: the cookie that carries the student key across page reloads
STUDENT_COOKIE = "roll_viz_student"
#: how long the browser keeps the cookie (a day: a class; the runs themselves wait the grace)
STUDENT_COOKIE_MAX_AGE_S = 86_400
#: session_state keys: this session's student key, and whether the cookie was sent
KEY_STUDENT = "_student_key"
KEY_STUDENT_SENT = "_student_cookie_sent"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32}")


#: this server process: a link's work mark from another process means it stopped (a restart, or
#: a hall process that died and the proxy sent the student to another)
BOOT_ID = secrets.token_hex(4)


def owner_tag(key: str) -> str:
    """A short tag of a student key: a mark says whose work it was without carrying the key."""
    return hashlib.sha256(f"roll-viz-work:{key}".encode()).hexdigest()[:8]


def work_mark(steps: int) -> str:
    """The URL value that says this process holds ``steps`` steps of this student's work.

    ``BOOT_ID-steps-owner``: the owner tag keeps a copied link quiet for whoever opens it (the
    URL is how a page is shared, and the mark travels with it).
    """
    return f"{BOOT_ID}-{int(steps)}-{owner_tag(student_key())}"


def lost_work_notice(mark: object, what: str, redo: str) -> str | None:
    """What a link's work mark (``work_mark``) says was lost, for a session that holds none.

    Only the student who did the work is told: a mark of another browser (a shared link) or of
    no known owner says nothing.

    Args:
        mark: the URL's mark (None or "": nothing to say).
        what: the work, e.g. "run" or "adapter" ("your run of 22 steps").
        redo: what to press to do it again, e.g. "press Start to run it again".

    Returns:
        One sentence, or None without a mark of this student's.
    """
    boot, steps, owner = ([*str(mark or "").split("-", 2), "", ""])[:3]
    if not mark or owner != owner_tag(student_key()):
        return None
    count = f"{steps} step{'s' if steps != '1' else ''}" if steps.isdigit() else "steps"
    if boot != BOOT_ID:
        return f"The server restarted: your {what} of {count} is gone; {redo}."
    return (
        f"Your {what} of {count} is no longer on the server (it waits {RECONNECT_GRACE_S:.0f} s "
        f"for its tab to come back); {redo}."
    )


def new_student_key() -> str:
    """A fresh unguessable key (192 random bits, 32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def valid_student_key(value: Any) -> bool:
    """Whether ``value`` has the form of a key this server draws (anything else is ignored)."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


def _cookie() -> str | None:
    try:
        return st.context.cookies.get(STUDENT_COOKIE)
    except Exception:  # no request context (bare mode, tests)
        return None


def student_key() -> str:
    """This browser's student key: its cookie's (when valid), else one drawn for the session.

    Fixed for the session's lifetime (kept in ``session_state``, which a reconnect keeps).
    """
    if get_script_run_ctx() is None:
        return "no-session"
    key = st.session_state.get(KEY_STUDENT)
    if valid_student_key(key):
        return key
    cookie = _cookie()
    key = cookie if valid_student_key(cookie) else new_student_key()
    st.session_state[KEY_STUDENT] = key
    return key


def cookie_script(key: str) -> str:
    """The one-line script that stores ``key`` in the student cookie (first-party, Strict)."""
    if not valid_student_key(key):
        raise ValueError("not a student key")
    return (
        "<script>document.cookie = "
        f"'{STUDENT_COOKIE}={html.escape(key)}; path=/; max-age={STUDENT_COOKIE_MAX_AGE_S}; "
        "SameSite=Strict' + (location.protocol === 'https:' ? '; Secure' : '');</script>"
    )


def remember_student() -> None:
    """Set the student cookie once per session when the browser does not carry this key yet.

    Drawn in the sidebar (an invisible element), so a reload of any page finds the same key.
    """
    if get_script_run_ctx() is None or st.session_state.get(KEY_STUDENT_SENT):
        return
    key = student_key()
    st.session_state[KEY_STUDENT_SENT] = True
    if _cookie() != key:
        st.sidebar.html(cookie_script(key), unsafe_allow_javascript=True)


def session_id() -> str:
    """The current browser session's id (kept by Streamlit across websocket reconnects)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


#: the one thread that frees parked items whose grace ended (a ``threading.Timer`` each held a
#: thread per closed session for the whole grace, after every class: #33)
EXPIRIES = Deadlines("roll-viz-parking")


class Parking:
    """Items of closed sessions, each kept ``grace_s`` seconds for the same session to return.

    Args:
        grace_s: how long an item waits.
    """

    def __init__(self, grace_s: float = RECONNECT_GRACE_S) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[Any, Deadline]] = {}

    def park(self, key: Hashable, item: Any, on_expire: Callable[[Any], object]) -> None:
        """Keep ``item`` under ``key``; ``on_expire(item)`` runs if nobody takes it in time."""
        with self._lock:  # scheduled under the lock: ``_expire`` finds the item in place
            old = self._items.pop(key, None)
            timer = EXPIRIES.call_later(self.grace_s, self._expire, key, item, on_expire)
            self._items[key] = (item, timer)
        if old is not None and old[0] is not item:
            old[1].cancel()
            on_expire(old[0])

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
