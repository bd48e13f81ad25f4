"""Streamlit's upload endpoint takes bytes only where this server gave out an upload URL.

Streamlit 1.67 stores a file PUT to ``/_stcore/upload_file/<session>/<file id>`` for any live
session and any file id: its handler checks the XSRF token, that the session is connected and
``server.maxUploadSize``, then calls the runtime's uploaded-file manager. A client with no
uploader on its page could park 4 x 25 MB there, and the bytes stayed after the session closed:
a session Streamlit keeps for a reconnect expires from its storage without being shut down, so
``remove_session_files`` never runs for it.

``install(runtime)`` wraps that manager (the same object the upload route calls; Streamlit
itself is not changed):

- ``get_upload_urls`` (Streamlit's answer to the page's ``FileURLsRequest``, sent when a file is
  picked on an ``st.file_uploader``) gives out file ids only while the session's page has a file
  uploader (a widget of type ``file_uploader_state_value`` in the session's widget state), at
  most ``MAX_PENDING_IDS`` per session, and records each id it gave;
- the upload route asks ``runtime.is_active_session`` before it reads the body: for a session
  that was given no id it answers no, so such a PUT is refused (400) before any byte is read;
- ``add_file`` keeps a file only under an id given to that session (else 403), at most
  ``MAX_FILE_BYTES`` (the app's cap, ``data.runs.uploads.MAX_UPLOAD_BYTES``; else 413), and at
  most ``MAX_SERVER_BYTES`` held by all sessions together (the upload quota; else 413);
- a sweeper thread (every ``SWEEP_S``) frees the files and ids of each session that has not
  been connected for ``server.disconnectedSessionTTL`` seconds (120 by default, the time
  Streamlit keeps it for a reconnect), and of a session Streamlit shut down.

A refusal raises Starlette's ``HTTPException``, which the route answers with that status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from streamlit import config
from streamlit.runtime import Runtime

from roll_viz.data.runs import uploads

_LOG = logging.getLogger(__name__)

#: the widget value type of st.file_uploader (also camera and audio input) in session state
UPLOADER_VALUE_TYPE = "file_uploader_state_value"
#: upload ids one session may hold unused (a multi-file upload asks one per file)
MAX_PENDING_IDS = uploads.MAX_UPLOAD_FILES
#: one file (the app's cap; Streamlit's server.maxUploadSize is the same 200 MB)
MAX_FILE_BYTES = uploads.MAX_UPLOAD_BYTES
#: all uploaded bytes the server holds in memory at once (the upload folder's quota)
MAX_SERVER_BYTES = uploads.UPLOAD_QUOTA_BYTES
#: how often the sweeper looks for sessions that went away (s)
SWEEP_S = 5.0


def page_has_uploader(runtime: Any, session_id: str) -> bool:
    """Whether the last run of ``session_id`` drew a file uploader (False when unknown)."""
    session = runtime.get_app_session(session_id)
    if session is None:
        return False
    try:
        widgets = session.session_state._new_widget_state.widget_metadata
        kinds = [m.value_type for m in list(widgets.values())]
    except (AttributeError, RuntimeError):  # another Streamlit layout: refuse, never guess
        _LOG.warning("upload guard: cannot read the session's widgets; upload refused")
        return False
    return UPLOADER_VALUE_TYPE in kinds


class UploadGuard:
    """The bookkeeping around one uploaded-file manager (see the module docstring).

    Args:
        runtime: the server's Runtime (``is_active_session``, ``get_app_session``).
        manager: its uploaded-file manager (``get_upload_urls``, ``add_file``, ...).
        has_uploader: ``(runtime, session_id) -> bool``, whether the session's page has an
            uploader.
        grace_s: how long a disconnected session's files wait (None: Streamlit's
            ``server.disconnectedSessionTTL``).
    """

    def __init__(
        self,
        runtime: Any,
        manager: Any,
        has_uploader: Callable[[Any, str], bool] = page_has_uploader,
        grace_s: float | None = None,
    ) -> None:
        self.runtime = runtime
        self.manager = manager
        self.has_uploader = has_uploader
        self.grace_s = (
            float(config.get_option("server.disconnectedSessionTTL"))
            if grace_s is None
            else grace_s
        )
        self._lock = threading.Lock()
        self._ids: dict[str, set[str]] = {}  # session -> file ids given out and not deleted
        self._away_since: dict[str, float] = {}
        self._orig = {
            name: getattr(manager, name)
            for name in ("get_upload_urls", "add_file", "remove_file", "remove_session_files")
        }
        self._orig_active = runtime.is_active_session
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0  # PUTs refused so far (diagnosis)

    # -- the wrapped manager methods ------------------------------------------------------------
    def get_upload_urls(self, session_id: str, file_names: Sequence[str]) -> list[Any]:
        """Upload URLs for the page's uploader; none for a page without one."""
        if not self.has_uploader(self.runtime, session_id):
            self.refused += 1
            return []
        with self._lock:
            held = self._ids.setdefault(session_id, set())
            room = max(MAX_PENDING_IDS - len(held), 0)
        infos = list(self._orig["get_upload_urls"](session_id, list(file_names)[:room]))
        with self._lock:
            self._ids.setdefault(session_id, set()).update(i.file_id for i in infos)
        self._start_sweeper()
        return infos

    def add_file(self, session_id: str, file: Any) -> None:
        """Keep ``file`` only under an id given to this session, within the caps."""
        with self._lock:
            given = file.file_id in self._ids.get(session_id, ())
        if not given:
            self.refused += 1
            raise HTTPException(status_code=403, detail="No uploader asked for this file")
        size = len(file.data)
        held = sum(len(f.data) for f in self.held_files(session_id, file.file_id))
        if size > MAX_FILE_BYTES or self.total_bytes() - held + size > MAX_SERVER_BYTES:
            self.refused += 1
            raise HTTPException(status_code=413, detail="File too large")
        self._orig["add_file"](session_id, file)

    def remove_file(self, session_id: str, file_id: str) -> None:
        """The page removed a file: its bytes and its id go."""
        self._orig["remove_file"](session_id, file_id)
        with self._lock:
            self._ids.get(session_id, set()).discard(file_id)

    def remove_session_files(self, session_id: str) -> None:
        """Streamlit shut the session down: its files and ids go."""
        self._orig["remove_session_files"](session_id)
        self._forget(session_id)

    def is_active_session(self, session_id: str) -> bool:
        """What the upload route asks first: connected, and given an upload id."""
        if not self._orig_active(session_id):
            return False
        with self._lock:
            if self._ids.get(session_id):
                return True
        self.refused += 1
        return False

    # -- reading the manager --------------------------------------------------------------------
    def held_files(self, session_id: str, file_id: str | None = None) -> list[Any]:
        """The session's stored files (``UploadedFileRec``), or only ``file_id``'s."""
        with self._lock:
            ids = list(self._ids.get(session_id, ()))
        if file_id is not None:
            ids = [file_id] if file_id in ids else []
        return list(self.manager.get_files(session_id, ids))

    def total_bytes(self) -> int:
        """Bytes the manager holds for every session (Streamlit's own count)."""
        stats = self.manager.get_stats()
        return sum(s.byte_length for family in stats.values() for s in family)

    def sessions(self) -> list[str]:
        """Sessions that hold upload ids."""
        with self._lock:
            return list(self._ids)

    # -- sessions that went away ----------------------------------------------------------------
    def sweep(self, now: float | None = None) -> list[str]:
        """Free the files of sessions away longer than the grace; returns their ids."""
        now = time.monotonic() if now is None else now
        freed = []
        for session_id in self.sessions():
            if self._orig_active(session_id):
                with self._lock:
                    self._away_since.pop(session_id, None)
                continue
            with self._lock:
                since = self._away_since.setdefault(session_id, now)
            if now - since >= self.grace_s:
                self._orig["remove_session_files"](session_id)
                self._forget(session_id)
                freed.append(session_id)
        return freed

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._ids.pop(session_id, None)
            self._away_since.pop(session_id, None)

    def _start_sweeper(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._sweep_loop, name="roll-viz-upload-sweeper", daemon=True
            )
            self._thread.start()

    def _sweep_loop(self) -> None:
        while not self._stop.wait(SWEEP_S):
            try:
                self.sweep()
            except Exception:  # the sweeper must outlive one bad pass
                _LOG.exception("upload sweep failed")

    def stop(self) -> None:
        """Stop the sweeper (tests)."""
        self._stop.set()

    # -- installing -----------------------------------------------------------------------------
    def install(self) -> UploadGuard:
        """Put the wrapped methods on the manager and the runtime instances."""
        for name in self._orig:
            setattr(self.manager, name, getattr(self, name))
        self.runtime.is_active_session = self.is_active_session
        return self


_GUARD: list[UploadGuard] = []
_INSTALL_LOCK = threading.Lock()


def install(runtime: Runtime) -> UploadGuard:
    """Guard ``runtime``'s uploaded-file manager (once per process; later calls return it)."""
    with _INSTALL_LOCK:
        if not _GUARD:
            _GUARD.append(UploadGuard(runtime, runtime.uploaded_file_mgr).install())
        return _GUARD[0]


def installed() -> UploadGuard | None:
    """The process's guard, once installed."""
    return _GUARD[0] if _GUARD else None
