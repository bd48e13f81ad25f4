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
  uploader (a widget of type ``file_uploader_state_value`` in the session's widget state) that
  takes every name asked for (its ``type=`` list, checked by Streamlit's own
  ``enforce_filename_restriction``), at most ``MAX_PENDING_IDS`` per session, and records each
  id it gave with its name and the uploaders that take it (the request does not say which
  uploader asked: the protocol has no field for it);
- the upload route asks ``runtime.is_active_session`` before it reads the body: for a session
  that was given no id it answers no, so such a PUT is refused (400) before any byte is read;
- ``add_file`` keeps a file only under an id given to that session (else 403), under the name
  the id was given for (else 403), of a type an uploader of the page takes (else 415), at most
  ``MAX_FILE_BYTES`` (the app's cap, ``data.runs.uploads.MAX_UPLOAD_BYTES``; else 413), and at
  most ``MAX_SERVER_BYTES`` held by all sessions together (the upload quota; else 413);
- ``get_files`` (what an uploader's widget value reads while the page runs) leaves out a file
  set on an uploader that was not among those its id was given for, or whose type that
  uploader does not take, and says so in a toast: Streamlit would raise "Invalid file
  extension" before the page code runs, on this and every later rerun of the session (#33: a
  crafted client set ``bomb.jsonl.gz`` on *Your run* and the session showed "This app has
  encountered an error" for good); the uploader reads an empty slot instead;
- a sweeper thread (every ``SWEEP_S``, or a quarter of the grace when that is shorter) frees
  the files and ids of each session that has not been connected for
  ``server.disconnectedSessionTTL`` seconds (120 by default, the time Streamlit keeps it for a
  reconnect), and of a session Streamlit shut down.

A refusal raises Starlette's ``HTTPException``, which the route answers with that status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st
from starlette.exceptions import HTTPException
from streamlit import config
from streamlit.elements.lib.file_uploader_utils import enforce_filename_restriction
from streamlit.errors import StreamlitAPIException
from streamlit.runtime import Runtime

from roll_viz.data.runs import uploads
from roll_viz.views.text import md_escape

_LOG = logging.getLogger(__name__)

#: the widget value type of st.file_uploader (also camera and audio input) in session state
UPLOADER_VALUE_TYPE = "file_uploader_state_value"
#: upload ids one session may hold unused (a multi-file upload asks one per file)
MAX_PENDING_IDS = uploads.MAX_UPLOAD_FILES
#: one file (the app's cap; Streamlit's server.maxUploadSize is the same 200 MB)
MAX_FILE_BYTES = uploads.MAX_UPLOAD_BYTES
#: all uploaded bytes the server holds in memory at once (the upload folder's quota)
MAX_SERVER_BYTES = uploads.quota_from_env()
#: how often the sweeper looks for sessions that went away (s), at most
SWEEP_S = 5.0


#: an uploader's accepted types as Streamlit normalised them (``.jsonl``), or None for any
Types = Sequence[str] | None


def _session_state(runtime: Any, session_id: str) -> Any:
    """The session's ``SessionState`` (Streamlit's, not the script's proxy), or None."""
    session = runtime.get_app_session(session_id)
    return None if session is None else getattr(session, "session_state", None)


def _widget_state(runtime: Any, session_id: str) -> Any:
    """The session's widget state (Streamlit's ``WStates``), or None when unknown."""
    state = getattr(_session_state(runtime, session_id), "_new_widget_state", None)
    if state is None:  # another Streamlit layout: nothing known, so nothing given
        _LOG.warning("upload guard: cannot read the session's widgets; upload refused")
    return state


def page_uploaders(runtime: Any, session_id: str) -> dict[str, Types]:
    """Widget id -> accepted types of each file uploader the session's last run drew ({}: none).

    The types are those of the uploader's own deserializer (Streamlit's ``FileUploaderSerde``,
    the object that raises on a wrong type); an uploader of another kind (camera, audio) that
    Streamlit does not check reads None. Streamlit keeps the metadata of every widget a session
    ever drew, so only those with a value are the page's: a run's end drops the values of the
    widgets it did not draw, and the next run's start moves the rest to ``_old_state``.
    """
    session_state = _session_state(runtime, session_id)
    state = _widget_state(runtime, session_id)
    if state is None:
        return {}
    try:
        metadata = list(state.widget_metadata.items())
        live = set(state.states) | set(session_state._old_state)
    except (AttributeError, RuntimeError):
        return {}
    return {
        widget_id: getattr(getattr(m.deserializer, "__self__", None), "allowed_types", None)
        for widget_id, m in metadata
        if m.value_type == UPLOADER_VALUE_TYPE and widget_id in live
    }


def takes(name: str, types: Types) -> bool:
    """Whether an uploader with ``types`` takes a file called ``name`` (Streamlit's own check)."""
    if "\0" in name:
        return False
    if not types:
        return True
    try:
        enforce_filename_restriction(name, types)
    except StreamlitAPIException:
        return False
    return True


def _uploader_holding(state: Any, file_ids: Sequence[str]) -> str | None:
    """The uploader whose value (as the client sent it) names exactly ``file_ids``."""
    try:
        items = list(state.states.items())
    except (AttributeError, RuntimeError):
        return None
    wanted = list(file_ids)
    for widget_id, wstate in items:
        proto = getattr(wstate, "value", None)
        if getattr(proto, "WhichOneof", None) is None:
            continue  # already read this run (a Value, not the client's proto)
        if proto.WhichOneof("value") != UPLOADER_VALUE_TYPE:
            continue
        ids = [f.file_id for f in proto.file_uploader_state_value.uploaded_file_info]
        if ids == wanted:
            return widget_id
    return None


class UploadGuard:
    """The bookkeeping around one uploaded-file manager (see the module docstring).

    Args:
        runtime: the server's Runtime (``is_active_session``, ``get_app_session``).
        manager: its uploaded-file manager (``get_upload_urls``, ``add_file``, ...).
        uploaders: ``(runtime, session_id) -> {widget id: types}``, the uploaders of the
            session's page (``page_uploaders``).
        grace_s: how long a disconnected session's files wait (None: Streamlit's
            ``server.disconnectedSessionTTL``).
        holder: ``(runtime, session_id, file_ids) -> widget id or None``, the uploader whose
            value is being read (None: the session's widget state is searched).
    """

    def __init__(
        self,
        runtime: Any,
        manager: Any,
        uploaders: Callable[[Any, str], dict[str, Types]] = page_uploaders,
        grace_s: float | None = None,
        holder: Callable[[Any, str, Sequence[str]], str | None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.manager = manager
        self.uploaders = uploaders
        self.holder = holder or (
            lambda rt, sid, ids: _uploader_holding(_widget_state(rt, sid), ids)
        )
        self.grace_s = (
            float(config.get_option("server.disconnectedSessionTTL"))
            if grace_s is None
            else grace_s
        )
        self._lock = threading.Lock()
        # session -> file id given out (and not deleted) -> (its name, the uploaders taking it)
        self._ids: dict[str, dict[str, tuple[str, frozenset[str]]]] = {}
        self._away_since: dict[str, float] = {}
        self._orig = {
            name: getattr(manager, name)
            for name in (
                "get_upload_urls",
                "add_file",
                "remove_file",
                "remove_session_files",
                "get_files",
            )
        }
        self._orig_active = runtime.is_active_session
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0  # PUTs refused so far (diagnosis)

    # -- the wrapped manager methods ------------------------------------------------------------
    def get_upload_urls(self, session_id: str, file_names: Sequence[str]) -> list[Any]:
        """Upload URLs for names the page's uploaders take; none at all if one is refused.

        All or nothing: the response lists URLs in the order of the names, and a browser
        (which filters by type itself) never asks for a refused one.
        """
        uploaders = self.uploaders(self.runtime, session_id)
        names = list(file_names)
        taken_by = [
            frozenset(w for w, types in uploaders.items() if takes(name, types)) for name in names
        ]
        if not uploaders or not all(taken_by):
            self.refused += 1
            return []
        with self._lock:
            held = self._ids.setdefault(session_id, {})
            room = max(MAX_PENDING_IDS - len(held), 0)
        infos = list(self._orig["get_upload_urls"](session_id, names[:room]))
        with self._lock:
            given = self._ids.setdefault(session_id, {})
            for info, name, widgets in zip(infos, names, taken_by, strict=False):
                given[info.file_id] = (name, widgets)
        self._start_sweeper()
        return infos

    def add_file(self, session_id: str, file: Any) -> None:
        """Keep ``file`` only under an id given to this session for its name, within the caps."""
        with self._lock:
            given = self._ids.get(session_id, {}).get(file.file_id)
        if given is None:
            self.refused += 1
            raise HTTPException(status_code=403, detail="No uploader asked for this file")
        if file.name != given[0]:
            self.refused += 1
            raise HTTPException(status_code=403, detail="This upload URL is for another file")
        uploaders = self.uploaders(self.runtime, session_id)
        if not any(takes(file.name, uploaders.get(w, ())) for w in given[1] if w in uploaders):
            self.refused += 1
            raise HTTPException(status_code=415, detail="Not a file type this uploader takes")
        size = len(file.data)
        held = sum(len(f.data) for f in self.held_files(session_id, file.file_id))
        if size > MAX_FILE_BYTES or self.total_bytes() - held + size > MAX_SERVER_BYTES:
            self.refused += 1
            raise HTTPException(status_code=413, detail="File too large")
        self._orig["add_file"](session_id, file)

    def get_files(self, session_id: str, file_ids: Sequence[str]) -> list[Any]:
        """Stored files for an uploader's value, less those that uploader would refuse.

        Called by Streamlit while the page runs (the uploader's deserializer), which raises on a
        name its types do not take: such a file is left out with a toast, and the uploader
        reads an empty slot. Outside a widget read (no uploader holds these ids) all are given.
        """
        recs = list(self._orig["get_files"](session_id, file_ids))
        if not recs:
            return recs
        widget_id = self.holder(self.runtime, session_id, file_ids)
        if widget_id is None:
            return recs
        types = self.uploaders(self.runtime, session_id).get(widget_id)
        with self._lock:
            given = dict(self._ids.get(session_id, {}))
        kept = []
        for rec in recs:
            widgets = given.get(rec.file_id, ("", frozenset()))[1]
            if widget_id in widgets and takes(rec.name, types):
                kept.append(rec)
                continue
            self.refused += 1
            _notice(f"Upload refused: {md_escape(rec.name)} is not a file this uploader takes.")
        return kept

    def remove_file(self, session_id: str, file_id: str) -> None:
        """The page removed a file: its bytes and its id go."""
        self._orig["remove_file"](session_id, file_id)
        with self._lock:
            self._ids.get(session_id, {}).pop(file_id, None)

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
        return list(self._orig["get_files"](session_id, ids))

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
        # a short grace (a test server's 2 s) is not stretched to the 5 s period and beyond
        period = min(SWEEP_S, max(self.grace_s / 4, 0.25))
        while not self._stop.wait(period):
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


def _notice(text: str) -> None:
    """A toast on the page being run (nothing outside a page run; never raises into Streamlit)."""
    try:
        st.toast(text, icon=":material/block:")
    except Exception:  # a toast is a courtesy: the refusal itself already happened
        _LOG.warning("upload guard: could not show the refusal notice")


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
