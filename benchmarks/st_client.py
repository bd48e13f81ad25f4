"""A Streamlit client without a browser: one websocket session speaking the frontend's protocol.

``Session(base)`` opens ``/_stcore/stream`` on a 127.0.0.1 server (subprotocol ``streamlit``)
and exchanges protobuf ``BackMsg`` / ``ForwardMsg``, far cheaper than a browser per user. Like the
frontend it sends a moved widget's new value in ``WidgetStates`` under the widget id read from
the deltas of its last run, together with the current values of the other widgets it tracks,
and edits the URL itself (``key=value``, or the key dropped at its default: the widgets are
bound to the query string). ``Session.run`` sends one rerun and reads the page until its
``script_finished``: a ``RunResult`` with the time, the status, the exceptions and ``st.error``
boxes drawn, the sliders / checkboxes (``Widget``) and a digest of the displayed content (every
content element - markdown, plots, tables, metrics, html - in delta-path order; widgets,
progress bars, download buttons and invisible ``<script>`` html left out, so a run that sampled
and one that hit a cache, and a session's first run and its later ones, read the same).

Fragments go as the frontend sends them: a widget drawn inside an ``st.fragment`` carries the
fragment's id in its delta (``Widget.fragment_id``), and a rerun that changes such widgets only
names that id in ``ClientState.fragment_id``: the server reruns the fragment alone (its
``new_session`` lists the fragment ids, its ``script_finished`` is
``FINISHED_FRAGMENT_RUN_SUCCESSFULLY``; ``RunResult.fragment``). The elements and widgets of the
rest of the page stay as the last full run drew them (``Session.widgets`` keeps the merged table),
and ``page_reruns=True`` sends such a change without the id, as a page rerun (the comparison).
A ``st.components.v2`` component's trigger (``setTriggerValue`` in its JS) goes as the frontend
sends it: ``run(triggers={key: (event, value)})`` (its trigger aggregator's JSON list).
``Session.full_runs`` / ``Session.fragment_runs`` count the runs the server started of each kind.

Uploads go as the frontend sends them: ``Session.file_urls`` asks the server for upload URLs
(the ``FileURLsRequest`` a file uploader sends when a file is picked), ``put_file`` PUTs the
bytes there as multipart form data with the XSRF cookie and header (``xsrf_cookie``), and
``Session.run(files=...)`` reruns with the uploader's state naming the uploaded files.

Traffic goes only to 127.0.0.1; every read is bounded in time (``RUN_TIMEOUT_S``).

Size: one file over 600 lines because it is one client of one protocol: the rerun message
(widgets, URL, fragments, triggers, uploads) and the reading of its answer share the Session's
state, and every benchmark and server test imports them from here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import http.client
import http.cookies
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

import websockets

# The wire format only (generated protobuf classes); nothing of Streamlit's runtime is imported.
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: TID251
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: TID251

RUN_TIMEOUT_S = 90.0
CONNECT_TIMEOUT_S = 30.0
#: Content elements that make up the digest (what a student reads off the page).
CONTENT_KINDS = frozenset(
    {
        "alert",
        "code",
        "dataframe",
        "table",
        "heading",
        "html",
        "json",
        "markdown",
        "metric",
        "plotly_chart",
        "text",
        "vega_lite_chart",
    }
)
#: Widget kinds whose id and value the client tracks (the ones it may change or press).
SLIDER, CHECKBOX, BUTTON, NUMBER = "slider", "checkbox", "button", "number_input"
COMPONENT = "bidi_component"
#: script_finished of a fragment run (a success, like FINISHED_SUCCESSFULLY for a page)
FRAGMENT_FINISHED = "FINISHED_FRAGMENT_RUN_SUCCESSFULLY"
#: the statuses of a run that completed
FINISHED = frozenset({"FINISHED_SUCCESSFULLY", FRAGMENT_FINISHED})
UPLOADER = "file_uploader"
XSRF_COOKIE = "_streamlit_xsrf"
HTTP_TIMEOUT_S = 30.0
CONTINUE_WAIT_S = 2.0  # how long put_file waits for 100 Continue before sending the body anyway


@dataclasses.dataclass(frozen=True)
class Widget:
    """A slider or checkbox as the deltas describe it (what the client needs to move it).

    ``fragment_id``: the ``st.fragment`` it was drawn in ("" on the page itself).
    """

    id: str
    kind: str
    lo: float
    hi: float
    step: float
    default: float | bool
    fragment_id: str = ""


@dataclasses.dataclass
class RunResult:
    """What one script run showed a student.

    Attributes:
        ms: from sending the rerun to ``script_finished`` (ms).
        status: ``script_finished`` status name, or an error label.
        digest: sha256 of the final page's content elements (see the module docstring).
        parts: (delta path, kind, short hash, text) of each of those elements, for diagnosis.
        exceptions: "Type: message" of every Exception element the run drew.
        error_alerts: bodies of st.error boxes the run drew.
        widgets: user key -> Widget, for the sliders / checkboxes / buttons the run drew.
        progress: the text of every progress bar the run drew (e.g. a training run's status).
        toasts: the text of every toast the run showed (not content: left out of the digest).
        fragment: the run reran fragments only (``FINISHED_FRAGMENT_RUN_SUCCESSFULLY``); its
            digest and parts cover the fragments' elements only, its widgets theirs only.
        component_json: user key -> the JSON data a bidi component was mounted with (the knob
            relay's mode, for one).
    """

    ms: float
    status: str
    digest: str = ""
    parts: list[tuple[tuple[int, ...], str, str, str]] = dataclasses.field(default_factory=list)
    exceptions: list[str] = dataclasses.field(default_factory=list)
    error_alerts: list[str] = dataclasses.field(default_factory=list)
    widgets: dict[str, Widget] = dataclasses.field(default_factory=dict)
    progress: list[str] = dataclasses.field(default_factory=list)
    toasts: list[str] = dataclasses.field(default_factory=list)
    fragment: bool = False
    component_json: dict[str, str] = dataclasses.field(default_factory=dict)


def _user_key(widget_id: str) -> str:
    """``$$ID-<hash>-beta`` -> ``beta`` (the user key Streamlit appends to keyed widget ids)."""
    parts = widget_id.split("-", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "$$ID" else ""


class Session:
    """One browser-like websocket session on the app (a student's tab).

    Args:
        base: server base URL, ``http://127.0.0.1:<port>``.
        cookies: cookies the browser sends with the websocket handshake (name -> value).
    """

    def __init__(self, base: str, cookies: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlparse(base)
        if parsed.hostname != "127.0.0.1":
            raise ValueError(f"the load driver only talks to 127.0.0.1, not {base!r}")
        self.url = f"ws://127.0.0.1:{parsed.port}/_stcore/stream"
        self.ws: Any = None
        self.query = ""
        self.page_hashes: dict[str, str] = {}
        self.page = ""
        self.page_hash = ""
        self.runs = 0
        self.session_id = ""  # the server's id of this session (from ``new_session``)
        self.cookies = dict(cookies or {})
        self.widgets: dict[str, Widget] = {}  # every widget drawn, fragment reruns merged in
        self.full_runs = 0  # runs the server started: the whole page
        self.fragment_runs = 0  # and fragments alone

    async def connect(self, resume: bool = False) -> None:
        """Open the websocket (subprotocol ``streamlit``, as the frontend does).

        Args:
            resume: reconnect to this client's server session (as the frontend does after a
                network drop: the session id goes as the third subprotocol entry).
        """
        protocols = ["streamlit"]
        if resume and self.session_id:
            protocols = ["streamlit", "placeholder", self.session_id]
        self.ws = await asyncio.wait_for(
            websockets.connect(
                self.url,
                subprotocols=protocols,
                max_size=None,
                open_timeout=CONNECT_TIMEOUT_S,
                additional_headers=(
                    {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
                    if self.cookies
                    else None
                ),
            ),
            CONNECT_TIMEOUT_S,
        )

    async def drop(self, seconds: float) -> None:
        """A network drop: close the socket, wait ``seconds``, reconnect to the same session."""
        await self.close()
        await asyncio.sleep(seconds)
        await self.connect(resume=True)

    async def close(self) -> None:
        """Close the websocket (quietly)."""
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()

    async def send_rerun(
        self,
        page: str | None = None,
        changes: dict[str, Any] | None = None,
        widgets: dict[str, Widget] | None = None,
    ) -> None:
        """Send one rerun (e.g. a button press) without reading its page: a tab about to close.

        Args:
            page: url path of the page (None: the current page).
            changes: user key -> value, as in ``run``.
            widgets: the last run's widget table.
        """
        task = asyncio.ensure_future(self.run(page=page, changes=changes, widgets=widgets))
        await asyncio.sleep(0)  # the BackMsg is written before the caller goes on
        self._pending = task

    async def abandon(self) -> None:
        """Close the tab now, whatever the server is doing (the reader of a sent run stops)."""
        pending = getattr(self, "_pending", None)
        await self.close()
        if pending is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(pending, 5)

    async def run(
        self,
        page: str | None = None,
        changes: dict[str, Any] | None = None,
        widgets: dict[str, Widget] | None = None,
        query: str | None = None,
        keep: dict[str, Any] | None = None,
        crafted: dict[str, float] | None = None,
        files: dict[str, list[UploadedFile]] | None = None,
        triggers: dict[str, tuple[str, Any]] | None = None,
        page_reruns: bool = False,
    ) -> RunResult:
        """Send one rerun and read the page until its ``script_finished``.

        Like the frontend, a change of a URL-bound widget also edits the query string sent
        with the rerun (``key=value``, or the key removed when the value is its default), and
        the rerun carries the current value of every widget the client tracks (``keep``), not
        only the changed one.

        Args:
            page: url path of the page to run (None: stay on the current page).
            changes: user key -> new value for widgets of the last run (sliders: float,
                checkboxes: bool, buttons: True to press).
            widgets: the last run's widget table (``RunResult.widgets``) to resolve keys to ids.
            query: query string to send (None: the current one, edited by ``changes``).
            keep: user key -> current value of other widgets of the last run to resend.
            crafted: user key -> a raw double to send for a number input of the last run,
                whatever its bounds or type (NaN, 1e9: what a hostile client can send).
            files: uploader key -> the files uploaded to it (``put_file``), as the frontend
                reports them after an upload.
            triggers: component key -> (event, value) its JS sets with ``setTriggerValue``
                (the key of a ``st.components.v2`` component of the last runs).
            page_reruns: send a change of a widget inside a fragment as a page rerun (no
                fragment id), as before the widget was in a fragment.

        Returns:
            The RunResult (status "FINISHED_SUCCESSFULLY" when the run completed).
        """
        msg = BackMsg()
        cs = msg.rerun_script
        if query is not None:
            self.query = query
        widgets = widgets or {}
        if changes:
            params = dict(urllib.parse.parse_qsl(self.query, keep_blank_values=True))
            for key, value in changes.items():
                if widgets[key].kind == BUTTON:  # a press is not in the URL
                    continue
                if value == widgets[key].default:
                    params.pop(key, None)
                else:
                    params[key] = url_value(value)
            self.query = urllib.parse.urlencode(params)
        cs.query_string = self.query
        if page is not None:  # the hash of the page asked for (a page ran instead may differ)
            self.page = page
            self.page_hash = self.page_hashes.get(page, "")
        cs.page_name = self.page
        cs.page_script_hash = self.page_hash
        for key, value in {**(keep or {}), **(changes or {})}.items():
            widget = widgets[key]
            state = cs.widget_states.widgets.add()
            state.id = widget.id
            if widget.kind == SLIDER:
                state.double_array_value.data.append(float(value))
            elif widget.kind == BUTTON:
                if key not in (changes or {}):
                    continue  # a button is pressed once, never resent
                state.trigger_value = bool(value)
            else:
                state.bool_value = bool(value)
        for key, value in (crafted or {}).items():
            state = cs.widget_states.widgets.add()
            state.id = widgets[key].id
            state.double_value = float(value)
        for key, (event, value) in (triggers or {}).items():
            state = cs.widget_states.widgets.add()
            state.id = f"$$STREAMLIT_INTERNAL_KEY_{widgets[key].id}__events"
            state.json_trigger_value = json.dumps([{"event": event, "value": value}])
        # as the frontend: the changed widgets' fragment, when they all sit in the same one
        moved = {widgets[k].fragment_id for k in [*(changes or {}), *(triggers or {})]}
        if page is None and len(moved) == 1 and not page_reruns:
            cs.fragment_id = moved.pop()
        for key, uploaded in (files or {}).items():
            state = cs.widget_states.widgets.add()
            state.id = widgets[key].id
            infos = state.file_uploader_state_value.uploaded_file_info
            for f in uploaded:
                info = infos.add()
                info.file_id, info.name, info.size = f.file_id, f.name, f.size
                info.file_urls.file_id = f.file_id
                info.file_urls.upload_url = f.upload_url
                info.file_urls.delete_url = f.upload_url
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        result = await self._read_run(t0)
        if result.status.startswith("page_not_found") and self.page in self.page_hashes:
            # A session's first run on a fresh server names the page before the client knows
            # the page table: the server answers "not found", runs the main page (whose
            # navigation gives the table) and the same request goes again with the page's hash.
            cs.page_script_hash = self.page_hash = self.page_hashes[self.page]
            await self.ws.send(msg.SerializeToString())
            result = await self._read_run(t0)
        return result

    async def file_urls(self, names: list[str]) -> list[tuple[str, str]]:
        """Ask for upload URLs as a file uploader does; (file id, upload URL) per name given.

        The server may give fewer (none: it refused); messages of other kinds are skipped.
        """
        msg = BackMsg()
        req = msg.file_urls_request
        req.request_id = uuid.uuid4().hex
        req.session_id = self.session_id
        req.file_names.extend(names)
        await self.ws.send(msg.SerializeToString())
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            fm = ForwardMsg()
            fm.ParseFromString(await asyncio.wait_for(self.ws.recv(), left))
            if fm.WhichOneof("type") == "file_urls_response":
                resp = fm.file_urls_response
                if resp.response_id == req.request_id:
                    return [(u.file_id, u.upload_url) for u in resp.file_urls]
            else:
                self._track(fm)
        raise TimeoutError("no file_urls_response")

    async def _read_run(self, t0: float) -> RunResult:
        elements: dict[tuple[int, ...], tuple[str, bytes, str]] = {}
        result = RunResult(ms=0.0, status="")
        not_found = None  # the server runs the main page after "page not found": read it too
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                result.status = "timeout"
                break
            try:
                data = await asyncio.wait_for(self.ws.recv(), left)
            except TimeoutError:
                result.status = "timeout"
                break
            fm = ForwardMsg()
            fm.ParseFromString(data)
            kind = fm.WhichOneof("type")
            if kind == "new_session":
                if fm.new_session.initialize.session_id:
                    self.session_id = fm.new_session.initialize.session_id
                result.fragment = bool(fm.metadata.run.fragment_ids)
                if result.fragment:
                    self.fragment_runs += 1
                    continue  # the rest of the page stays as drawn
                self.full_runs += 1
                elements.clear()
                result.widgets.clear()
                result.exceptions.clear()
                result.error_alerts.clear()
                result.progress.clear()
                result.toasts.clear()
            elif kind in ("navigation", "page_info_changed"):
                self._track(fm)
            elif kind == "delta":
                self._delta(fm, elements, result)
            elif kind == "ref_hash":
                result.status = "unexpected ref_hash (client sent no cached hashes)"
                break
            elif kind == "page_not_found":
                not_found = f"page_not_found: {fm.page_not_found.page_name}"
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fm.script_finished)
                if status == "FINISHED_EARLY_FOR_RERUN":
                    continue  # the server started a newer run; its script_finished follows
                result.status = not_found or status
                break
        result.ms = (time.perf_counter() - t0) * 1000.0
        self.runs += 1
        h = hashlib.sha256()
        for path in sorted(elements):
            ek, blob, text = elements[path]
            h.update(ek.encode() + b"\0" + blob + b"\1")
            result.parts.append((path, ek, hashlib.sha1(blob).hexdigest()[:8], text))
        result.digest = h.hexdigest()
        if result.fragment:
            self.widgets.update(result.widgets)
        else:
            self.widgets = dict(result.widgets)
        return result

    def _track(self, fm: Any) -> None:
        """Follow the page list, the current page and the URL the server sets."""
        kind = fm.WhichOneof("type")
        if kind == "navigation":
            for p in fm.navigation.app_pages:
                self.page_hashes[p.url_pathname] = p.page_script_hash
            if fm.navigation.page_script_hash:
                self.page_hash = fm.navigation.page_script_hash
        elif kind == "page_info_changed":
            self.query = fm.page_info_changed.query_string

    async def idle(self, seconds: float) -> int:
        """Think for ``seconds`` while reading what the server still sends (URL updates...).

        Returns:
            How many runs the server started on its own meanwhile (0 expected).
        """
        deadline = time.monotonic() + seconds
        started = 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                data = await asyncio.wait_for(self.ws.recv(), left)
            except TimeoutError:
                break
            fm = ForwardMsg()
            fm.ParseFromString(data)
            kind = fm.WhichOneof("type")
            if kind == "new_session":
                started += 1
            self._track(fm)
        return started

    @staticmethod
    def _delta(fm: Any, elements: dict, result: RunResult) -> None:
        path = tuple(fm.metadata.delta_path)
        delta = fm.delta
        dk = delta.WhichOneof("type")
        if dk == "add_block":
            for p in [p for p in elements if p[: len(path)] == path]:
                del elements[p]
            return
        if dk != "new_element":
            return
        el = delta.new_element
        ek = el.WhichOneof("type")
        body = getattr(el, ek)
        frag = delta.fragment_id
        elements.pop(path, None)
        if ek == "exception":
            result.exceptions.append(f"{body.type}: {body.message}")
        elif ek == "html" and body.body.lstrip().startswith("<script"):
            return  # an invisible script (the student-key cookie, first run only): not content
        elif ek in CONTENT_KINDS:
            if ek == "alert" and body.format == body.ERROR:
                result.error_alerts.append(body.body)
            text = getattr(body, "body", "") if isinstance(getattr(body, "body", None), str) else ""
            elements[path] = (ek, body.SerializeToString(deterministic=True), text[:160])
        elif ek == "progress":
            result.progress.append(body.text)
        elif ek == "toast":
            result.toasts.append(body.body)
        elif ek == NUMBER:
            key = _user_key(body.id)
            if key:
                result.widgets[key] = Widget(body.id, ek, 0.0, 0.0, 0.0, 0.0, frag)
        elif ek == BUTTON:
            key = _user_key(body.id)
            if key:
                result.widgets[key] = Widget(body.id, ek, 0.0, 1.0, 1.0, False, frag)
        elif ek == COMPONENT:
            key = _user_key(body.id)
            if key:
                result.widgets[key] = Widget(body.id, ek, 0.0, 0.0, 0.0, False, frag)
                if body.HasField("json"):
                    result.component_json[key] = body.json
        elif ek == UPLOADER:
            key = _user_key(body.id)
            if key:
                mb = float(body.max_upload_size_mb)
                result.widgets[key] = Widget(body.id, ek, 0.0, mb, 1.0, False)
        elif ek in (SLIDER, CHECKBOX):
            key = _user_key(body.id)
            if key:
                if ek == SLIDER:
                    default = float(body.default[0]) if len(body.default) else float(body.min)
                    result.widgets[key] = Widget(
                        body.id,
                        ek,
                        float(body.min),
                        float(body.max),
                        float(body.step),
                        default,
                        frag,
                    )
                else:
                    result.widgets[key] = Widget(
                        body.id, ek, 0.0, 1.0, 1.0, bool(body.default), frag
                    )


@dataclasses.dataclass(frozen=True)
class UploadedFile:
    """A file PUT to the server, as an uploader's state names it."""

    file_id: str
    name: str
    size: int
    upload_url: str


def xsrf_cookie(base: str) -> str:
    """The XSRF cookie the server sets with its health answer ("" when XSRF protection is off).

    The frontend gets it the same way: it asks ``/_stcore/health`` before opening the websocket.
    """
    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=HTTP_TIMEOUT_S) as resp:
        headers = resp.headers.get_all("Set-Cookie") or []
    for header in headers:
        jar = http.cookies.SimpleCookie()
        jar.load(header)
        if XSRF_COOKIE in jar:
            return jar[XSRF_COOKIE].value
    return ""


def put_file(base: str, upload_url: str, name: str, data: bytes, xsrf: str = "") -> tuple[int, str]:
    """PUT ``data`` as the frontend uploads a file; returns (HTTP status, response body).

    Args:
        base: server base URL (127.0.0.1 only).
        upload_url: the path the server gave (``/_stcore/upload_file/<session>/<file id>``),
            or any path a hostile client makes up.
        name: the file name in the form.
        data: the bytes.
        xsrf: the XSRF cookie (``xsrf_cookie``), sent as cookie and header.
    """
    if urllib.parse.urlparse(base).hostname != "127.0.0.1":
        raise ValueError(f"uploads only go to 127.0.0.1, not {base!r}")
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{urllib.parse.quote(name)}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Content-Length": str(len(body)),
        # As curl does for large bodies: the server may refuse from the headers alone. Without
        # this a refusal that closes the connection mid-body reached the client as a broken
        # pipe instead of the status (seen on CI with a 2 MB PUT refused 400).
        "Expect": "100-continue",
    }
    if xsrf:
        headers["X-Xsrftoken"] = xsrf
        headers["Cookie"] = f"{XSRF_COOKIE}={xsrf}"
    path = upload_url if upload_url.startswith("/") else f"/{upload_url}"
    parsed = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=HTTP_TIMEOUT_S)
    try:
        conn.putrequest("PUT", path, skip_accept_encoding=True)
        for key, value in headers.items():
            conn.putheader(key, value)
        conn.endheaders()
        if _server_says_continue(conn.sock):
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def _server_says_continue(sock: socket.socket, wait_s: float = CONTINUE_WAIT_S) -> bool:
    """Whether to send the body: the server's ``100 Continue`` (consumed here) or no answer yet.

    Peeks at the first bytes the server sends: a final answer (a refusal from the headers) is
    left in the socket for ``getresponse``; silence for ``wait_s`` means a server that ignores
    ``Expect`` (as curl, send the body then).
    """
    sock.settimeout(wait_s)
    seen = b""
    try:
        while b"\r\n\r\n" not in seen:
            seen = sock.recv(4096, socket.MSG_PEEK)
            if not seen:
                return False  # closed: getresponse reports it
            if len(seen) >= 12 and seen.split(b" ", 2)[1:2] != [b"100"]:
                return False  # a final answer before the body
            if b"\r\n\r\n" not in seen:
                time.sleep(0.01)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(HTTP_TIMEOUT_S)
    if seen.split(b" ", 2)[1:2] != [b"100"]:
        return False
    sock.recv(seen.index(b"\r\n\r\n") + 4)  # consume the interim answer only
    return True


def url_value(v: Any) -> str:
    """A widget value as Streamlit writes it into the URL (5.0 -> "5", True -> "true")."""
    if isinstance(v, bool):
        return "true" if v else "false"
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def run_coroutine(coro: Any) -> Any:
    """``asyncio.run(coro)``, in a worker thread when this thread already runs an event loop.

    Playwright's sync API (the browser tests in the same pytest process) leaves a loop running
    in the main thread, where ``asyncio.run`` refuses to start.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
